"""Sizes, data and budgets of the `laptop` presets: the paper's protocol at a 2-core CPU's scale.

Between `smoke` (a pipeline check, near chance) and `paper` (GPU-days), a laptop preset runs a
study in at most ~30 minutes on two cores and is sized so that the paper's finding can show:

- data: the embedded scikit-learn digits (no download) in the paper's encodings: pixels as
  tokens for Transformers (LRA Image's encoding, Table 1), continuous pixels for the SSMs
  (S4's Image setting, Table 5); 8x8 scans (64-pixel sequences) for the trained studies, 16x16
  (256 pixels, 16 per row) for the kernel study so a kernel spans many rows;
- models: the paper's kinds at d=64 x 3 layers (the LRA Image Transformer's size);
- budgets, fair to both sides: scratch tries every lr of a small grid (each a full run, the best
  on validation kept) and, like finetuning, trains until validation accuracy has not improved
  for `patience` epochs; every result reports the steps of each side (steps, grid_steps,
  pretrain_steps).

The study modules build their `laptop` presets from these helpers; the measured times and
numbers are in the README ("Laptop presets").
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...config import ObjectiveConfig, TrainConfig, replace
from ...ssm_config import SSMConfig
from .arms import Arm, TaskRef
from .smoke import fit_len

SEEDS = (0, 1, 2)
D_MODEL, N_LAYERS = 64, 3
BATCH = 16
# digits splits: a stratified 500-image test set and 300 validation images; the rest (997
# images) is the training pool that n_train / fraction take nested prefixes of.
VAL_SIZE = 300
DIGITS_POOL = 997  # training images left at VAL_SIZE (n_train / fraction take prefixes of them)
# A run stops after `patience` epochs without a better validation accuracy, but never sooner than
# this many optimiser steps: 20 epochs of 100 images. An epoch of 20 images is only 2 steps, and
# 20 of them are too few for a run that has just left a plateau.
MIN_PATIENCE_STEPS = 140


def digits(n_train=None, fraction: float = 1.0, tokens: bool = False, size: int = 8) -> TaskRef:
    """The embedded digits at `size` x `size` pixels: n_train images (or a nested `fraction` of
    the 997-image training pool), as tokens (17 intensity levels) or continuous values."""
    options = (("size", size), ("val_size", VAL_SIZE))
    if n_train is not None:
        options += (("n_train", n_train),)
    if tokens:
        options += (("tokens", True),)
    return TaskRef("digits", fraction=fraction, options=options)


def ssm(model: SSMConfig, seq_len: int, d_state: int = 64) -> SSMConfig:
    """The paper's S4 / DLR row (its kind, init, norm, pooling, SSM lr and dt range) at laptop
    size: d=64 x 3 layers, state size `d_state`, dropout 0.1. The rest stays as the laptop runs
    were measured (docs/laptop_presets_measured.md): spt's MLP head, DLR without the GLU the paper
    rows use, post-norm, one (A, B) per channel, dt at the SSM lr, untied dropout; the laptop
    presets stand in for the paper, they do not copy its rows."""
    return fit_len(replace(model, d_model=D_MODEL, n_layers=N_LAYERS, d_state=d_state,
                           dropout=0.1, head="mlp", glu=model.kind != "dlr", prenorm=False,
                           n_ssm=None, dt_lr=None, tie_dropout=False), seq_len)


def steps_per_epoch(n_train: int) -> int:
    """Optimiser steps in an epoch of n_train examples at batch BATCH (the last batch partial)."""
    return -(-n_train // BATCH)


def patience_epochs(n_train: int, epochs: int = 20) -> int:
    """`epochs`, or more where n_train images make epochs so short that `epochs` of them hold
    fewer than MIN_PATIENCE_STEPS steps at batch BATCH (20 images: 70 epochs; 100 or more: 20)."""
    return max(epochs, -(-MIN_PATIENCE_STEPS // steps_per_epoch(n_train)))


# Validation of 300 images costs ~40% of a 100-image epoch and more than a 20-image one: the
# supervised runs validate VALIDATIONS_PER_PATIENCE times per patience window, pretraining about
# every PRETRAIN_EVAL_STEPS optimiser steps (its validation only picks the checkpoint).
VALIDATIONS_PER_PATIENCE = 5
PRETRAIN_EVAL_STEPS = 50


def supervised(lr: float, patience: int, max_epochs: int) -> TrainConfig:
    """Finetuning or scratch: batch 16, until validation accuracy has not improved for
    `patience` epochs (at most max_epochs), constant lr after 20 warmup steps; validated every
    patience / VALIDATIONS_PER_PATIENCE epochs."""
    return TrainConfig(lr=lr, batch_size=BATCH, epochs=max_epochs, patience=patience,
                       warmup_steps=20, schedule="constant", progress=False,
                       eval_every=max(1, patience // VALIDATIONS_PER_PATIENCE))


def pretraining(lr: float, epochs: int = 10**6, max_steps=None, n_train=None) -> TrainConfig:
    """Self-pretraining: batch 16, `epochs` or `max_steps`, 50 warmup steps; on n_train
    examples it validates about every PRETRAIN_EVAL_STEPS steps (None: every epoch)."""
    every = 1 if n_train is None else max(1, PRETRAIN_EVAL_STEPS // steps_per_epoch(n_train))
    return TrainConfig(lr=lr, batch_size=BATCH, epochs=epochs, max_steps=max_steps,
                       warmup_steps=50, progress=False, eval_every=every)


def spt_and_scratch(model, objective: ObjectiveConfig, pretrain: TrainConfig,
                    finetune: TrainConfig, scratch_lrs: tuple, pretrain_val: int = 100,
                    note: str = "") -> dict[str, Arm]:
    """{"spt": pretrain -> finetune, "scratch": the same model over the lr grid `scratch_lrs`
    with finetuning's stopping rule}."""
    scratch = Arm(model=model, train=replace(finetune, lr=scratch_lrs[0]), lr_grid=scratch_lrs,
                  note=note)
    spt = Arm(model=model, objective=objective, pretrain=pretrain, train=finetune,
              pretrain_val=pretrain_val, note=note)
    return {"spt": spt, "scratch": scratch}


SSM_PRETRAIN_STEPS = 1000


def ssm_arms(model, objective: ObjectiveConfig, note: str, n_train: int = 100,
             pretrain_steps: int = SSM_PRETRAIN_STEPS) -> dict[str, Arm]:
    """The SSM studies' (03, 04) laptop budget for n_train labelled images: SPT =
    `pretrain_steps` pretraining steps at lr 3e-3, then finetuning at lr 1e-3; scratch over lrs
    {3e-3, 1e-3}; patience 20 epochs (:func:`patience_epochs` for fewer than 100 images) on both
    sides, at most 300 epochs or 15 patiences; validation as :func:`supervised` and
    :func:`pretraining` say (100 images: every 4 epochs, pretraining every 7)."""
    patience = patience_epochs(n_train)
    return spt_and_scratch(model, objective,
                           pretraining(3e-3, max_steps=pretrain_steps, n_train=n_train),
                           supervised(1e-3, patience=patience, max_epochs=max(300, 15 * patience)),
                           scratch_lrs=(3e-3, 1e-3), note=note)


@dataclass(frozen=True)
class FewSteps:
    """The CI form of a laptop preset, passed as ``dry=`` to a study's ``cells()``: the same
    tasks, models and grid, but `steps` optimiser steps per stage (one epoch, no early stopping)
    on at most `examples` examples of each split (the evaluations of the full validation and
    test sets would cost more than the steps).

        cells = data_scales.cells("laptop", seeds=[0], dry=FewSteps(3))
    """

    steps: int = 3
    examples: int = 32

    def ref(self, ref: TaskRef, job=None) -> TaskRef:
        return dataclasses.replace(ref, limit=self.examples)

    def train(self, cfg: TrainConfig) -> TrainConfig:
        return replace(cfg, max_steps=self.steps, epochs=1, patience=None)

    def arm(self, arm: Arm) -> Arm:
        return dataclasses.replace(arm, train=self.train(arm.train),
                                   pretrain=None if arm.pretrain is None else self.train(arm.pretrain))


# The small S4 of the mixer comparison's and the priors' laptop presets (studies 13 and 14): the
# Image row's S4 at d=32 x 2 layers with N = 32 (study 13 sizes every other model to its count).
SMALL_D, SMALL_LAYERS = 32, 2


def small_s4(seq_len: int) -> SSMConfig:
    """The Image row's S4 at laptop size (:func:`ssm`), d=32 x 2 layers, state size 32."""
    from ...paper import ssm_row
    return replace(ssm(ssm_row("image", "s4").model, seq_len, d_state=32), d_model=SMALL_D,
                   n_layers=SMALL_LAYERS)

