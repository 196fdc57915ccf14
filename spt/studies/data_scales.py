"""Study 04 — Fig. 3: SPT across data scales. S4 trained from scratch vs. SPT on nested fractions
{0.005, 0.01, 0.05, 0.1, 0.5, 1.0} of the training set, pretraining for a fixed number of steps at
every fraction and finetuning until convergence (paper section 3.4, C.1.4).

Grid: task x fraction x init x seed; init in {"scratch", "spt"}. The fraction subsets are nested
(a smaller one lies inside every larger one); validation and test sets are always the full ones.
:func:`gains` gives the absolute and relative gain of SPT over scratch that Fig. 3 plots.
"""
from __future__ import annotations

import xarray as xr

from ..config import replace
from ..paper import ssm_row
from ..paper.appendix import (
    DATA_SCALE_SCRATCH_LRS,
    FIG3_FRACTIONS,
    data_scale_row,
)
from ..results import format_gain, gain, paired_gain
from .machinery.arms import Arm, TaskRef
from .machinery.job import Entry, GridPreset
from .machinery.laptop import SSM_PRETRAIN_STEPS
from .machinery.paper_arms import scratch_arm, spt_arm
from .machinery.smoke import smoke_arm, smoke_data_root, smoke_digits
from .machinery.stages import NO_EPOCH_CAP
from .machinery.study import Study, need_root

NAME = "04_data_scales"


# App. C.1.4: on Text, scratch is trained at lr 1e-3 and 5e-4 and the run with the best validation
# accuracy is kept; on Image it uses lr 2e-3, as finetuning does.

FRACTIONS_NOTE = ("C.1.4 finetunes and trains from scratch 'until convergence' with Table 5's "
                  "settings: the authors' cosine of 50K (Text) / 200K (Image) steps with its "
                  "5,000 / 1,000 warmup steps, the same at every fraction (as pretraining keeps its "
                  "steps), so the epoch count follows from the data: 200 epochs of 112 Text "
                  "examples (fraction 0.005) would end before the warmup does")


def paper_arms(task: str) -> dict:
    """C.1.4's arms on `task` (spt.paper.appendix.data_scale_row): Table 5's S4 at C.1.4's learning
    rates and batch sizes; finetuning and scratch run the S4 finetuning schedule of Table 5's runs
    (a cosine over the authors' fixed step count) at every fraction, without an epoch cap
    (FRACTIONS_NOTE), stopped early on validation like every paper preset's supervised run; scratch
    tries each of C.1.4's learning rates and keeps the best on validation."""
    row = data_scale_row(task, NO_EPOCH_CAP)
    lrs = DATA_SCALE_SCRATCH_LRS[task]
    return {"spt": spt_arm(row),
            "scratch": replace(scratch_arm(row), lr_grid=lrs if len(lrs) > 1 else ())}


def validation_stride(fraction: float) -> int:
    """Epochs between validations at a data `fraction`: 1 / fraction (rounded), so every fraction
    validates as often in optimiser steps as the full data does (once per full-data epoch)."""
    return max(1, round(1 / fraction))


def thinned(arm: Arm, fraction: float) -> Arm:
    """`arm` validating every validation_stride(fraction) epochs, its patience scaled alike (the
    same number of full-data epochs). Without it, Text pretraining at fraction 0.005 (112 reviews,
    40K steps at batch 8: 2,857 epochs) would run 2,857 validations over 2,500 reviews."""
    k = validation_stride(fraction)
    if k == 1:
        return arm

    def stage(t):
        return replace(t, eval_every=k, patience=None if t.patience is None else t.patience * k)
    return replace(arm, train=stage(arm.train),
                   pretrain=stage(arm.pretrain) if arm.pretrain is not None else None)


def paper(data_root=None) -> GridPreset:
    root = need_root(data_root, NAME)
    entries = tuple(Entry((("task", t), ("fraction", f), ("init", i)),
                          TaskRef(t, root=root, fraction=f), thinned(arm, f))
                    for t in ("text", "image") for f in FIG3_FRACTIONS
                    for i, arm in paper_arms(t).items())
    return GridPreset("paper", entries, note="C.1.4 settings, S4 on LRA Text and Image")


SMOKE_FRACTIONS = (0.1, 0.3, 1.0)
SMOKE_PRETRAIN_STEPS = 60


def smoke(data_root=None) -> GridPreset:
    smoke_data_root()
    entries = []
    for f in SMOKE_FRACTIONS:
        ref = smoke_digits(400, fraction=f)
        for i, arm in paper_arms("image").items():
            arm = smoke_arm(arm, 64, epochs=4)
            if arm.pretrain is not None:
                arm = replace(arm, pretrain=replace(arm.pretrain, max_steps=SMOKE_PRETRAIN_STEPS,
                                                    epochs=NO_EPOCH_CAP))
            entries.append(Entry((("task", "digits"), ("fraction", f), ("init", i)), ref, arm))
    return GridPreset("smoke", tuple(entries), note=f"CPU smoke run: 2-layer S4 on digits 8x8 "
                      f"(400 training images) at fractions {SMOKE_FRACTIONS}, "
                      f"{SMOKE_PRETRAIN_STEPS} pretraining steps at every fraction")


# The full pool (fraction 1.0) is left out: one of its cells took ~15 min on 2 cores validated
# every epoch (a scratch cell measured 880 s), as long as the whole preset now takes.
LAPTOP_FRACTIONS = (0.02, 0.05, 0.1, 0.25)
LAPTOP_PRETRAIN_STEPS = SSM_PRETRAIN_STEPS  # the same at every fraction
LAPTOP_NOTE = ("laptop preset: digits 8x8 (continuous pixels, 997 training images) stand in for "
               "LRA Image; a d=64 x 3 S4, batch 16, laptop lrs and budgets, not C.1.4's")


def laptop(data_root=None) -> GridPreset:
    """S4 (the Image row at d=64 x 3) on nested fractions of the digits' 997 training images,
    continuous pixels: 1,000 masked-L1 pretraining steps at every fraction (lr 3e-3), then
    finetuning (lr 1e-3) vs. scratch over lrs {3e-3, 1e-3}, both until validation accuracy has
    not improved for 20 epochs and 140 steps (70 epochs of the 20 images at 0.02, 35 of 50)."""
    from .machinery import laptop as lap
    p = ssm_row("image", "s4")
    model = lap.ssm(p.model, 64)
    entries = tuple(Entry((("task", "digits"), ("fraction", f), ("init", i)),
                          lap.digits(fraction=f), arms[i])
                    for f in LAPTOP_FRACTIONS
                    for arms in [lap.ssm_arms(model, p.objective, LAPTOP_NOTE,
                                              n_train=round(f * lap.DIGITS_POOL))]
                    for i in ("scratch", "spt"))
    return GridPreset("laptop", entries, seeds=lap.SEEDS, note=(
        f"2-core CPU: S4 d=64 x 3 on digits 8x8 (continuous pixels) at fractions "
        f"{LAPTOP_FRACTIONS} of 997 training images (20 to 249), {LAPTOP_PRETRAIN_STEPS} "
        f"pretraining steps at every fraction; scratch over lrs {{3e-3, 1e-3}}, patience 20 "
        f"epochs and >= {lap.MIN_PATIENCE_STEPS} steps on both sides; 3 seeds. Stands in for "
        f"Fig. 3's Image panel"))


PRESETS = {"smoke": smoke, "laptop": laptop, "paper": paper}



def gains(ds: xr.Dataset, metric: str = "test_accuracy") -> xr.Dataset:
    """Fig. 3's two panels: mean over seeds of `metric` (%) per (task, fraction, init), the
    absolute gain SPT - scratch (points) and the relative gain (SPT - scratch) / scratch (%)."""
    acc = ds[metric].mean("seed") * 100
    return xr.Dataset({"accuracy": acc, "absolute_gain": gain(acc, "absolute"),
                       "relative_gain": gain(acc, "relative")})


def table(ds: xr.Dataset):
    """Per task and fraction: scratch and SPT accuracy (%), absolute and relative gain, and the
    absolute gain paired by seed with its 95% interval and the seeds SPT is ahead on. (Fig. 3
    prints no numbers; the paper reports relative gains of up to ~30% at the smallest fractions.)"""
    g = gains(ds)
    df = g[["absolute_gain", "relative_gain"]].to_dataframe()
    for i in ("scratch", "spt"):
        df[i] = g["accuracy"].sel(init=i, drop=True).to_series()
    df = df[["scratch", "spt", "absolute_gain", "relative_gain"]].round(2)
    acc = ds["test_accuracy"] * 100
    paired = paired_gain(acc.sel(init="spt"), acc.sel(init="scratch"))
    df["absolute gain (95% CI, seeds ahead)"] = [
        format_gain(paired.sel(task=t, fraction=f)) for t, f in df.index]
    return df


STUDY = Study(NAME, "Fig. 3: S4 across data scales, scratch vs. SPT at fixed pretraining steps",
              ("task", "fraction", "init", "seed"), PRESETS, table, takes_models=True,
              takes_baselines=True)
