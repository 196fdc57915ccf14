"""Study 00 — the quickstart: self-pretraining (masked denoising -> finetuning) vs. the same model
trained from scratch, on a small task embedded in scikit-learn, over several seeds.

It is a study like the others: its :class:`Setup` becomes a grid (init x seed) of arms, and the
one study runner (:func:`spt.studies.cells.run_cells`) runs or reuses each cell, one result file
per cell under ``OUT/00_quickstart/``. The notebook's parameters are the fields of Setup.

    setup = Setup(n_train=100)
    ds = run(setup, "results", seeds=[0, 1, 2])     # Dataset over (init, seed)
    summary_table(ds); print(describe_budgets(ds, setup))
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import xarray as xr

from ..config import ObjectiveConfig, TrainConfig, TransformerConfig
from ..model_config import model_config_to_dict
from .arms import Arm, TaskRef
from .cells import run_cells, run_folder
from .grid import Entry, GridPreset, grid_cells, grid_study, with_models

STUDY = "00_quickstart"
INITS = ("scratch", "spt")


@dataclass(frozen=True)
class Setup:
    """The quickstart's settings (the notebook's parameters). Digits upsampled to image_size^2
    pixels; n_train labelled training images; a Transformer of d_model x n_layers; pretraining
    for pretrain_epochs; finetuning and scratch until validation stops improving (patience), at
    most max_epochs.

    tokens        : pixels as tokens (the 17 intensity levels through an embedding table, masked
                    pretraining with CE over the levels: LRA Image's encoding for Transformers,
                    Table 1) instead of standardised continuous values (L1 on masked pixels).
    scratch_lrs   : the from-scratch run's lr grid (each a full run; the best on validation is
                    reported); empty: scratch_lr alone.
    pretrain_val  : validate pretraining on this many validation images (None: all val_size).
    """

    image_size: int = 8
    n_train: int = 100
    val_size: int = 300
    d_model: int = 64
    n_layers: int = 3
    n_heads: int = 4
    dropout: float = 0.1
    pooling: str = "mean"
    mask_ratio: float = 0.5
    pretrain_epochs: int = 250
    pretrain_lr: float = 3e-3
    finetune_lr: float = 3e-4
    scratch_lr: float = 1e-3
    batch_size: int = 16
    max_epochs: int = 300
    patience: int = 30
    tokens: bool = False
    scratch_lrs: tuple = ()
    pretrain_val: Optional[int] = None
    progress: bool = False

    def __post_init__(self):
        object.__setattr__(self, "scratch_lrs", tuple(float(x) for x in self.scratch_lrs))

    def task(self) -> TaskRef:
        options = (("size", self.image_size), ("n_train", self.n_train), ("val_size", self.val_size))
        return TaskRef("digits", options=options + ((("tokens", True),) if self.tokens else ()))

    def model(self) -> TransformerConfig:
        return TransformerConfig(d_model=self.d_model, n_layers=self.n_layers, n_heads=self.n_heads,
                           d_ff=2 * self.d_model, dropout=self.dropout, pooling=self.pooling,
                           max_len=self.image_size ** 2)

    def arms(self) -> dict[str, Arm]:
        """{"spt": pretrain -> finetune, "scratch": the same model from random init}."""
        common = dict(batch_size=self.batch_size, progress=self.progress)
        supervised = dict(common, epochs=self.max_epochs, patience=self.patience, warmup_steps=20,
                          schedule="constant")
        return {
            "scratch": Arm(model=self.model(), train=TrainConfig(lr=self.scratch_lr, **supervised),
                           lr_grid=self.scratch_lrs),
            "spt": Arm(model=self.model(),
                       objective=ObjectiveConfig(kind="masked", mask_ratio=self.mask_ratio,
                                                 loss="ce" if self.tokens else "l1"),
                       pretrain=TrainConfig(lr=self.pretrain_lr, epochs=self.pretrain_epochs,
                                            warmup_steps=50, **common),
                       train=TrainConfig(lr=self.finetune_lr, **supervised),
                       pretrain_val=self.pretrain_val),
        }


SMOKE = Setup(n_train=24, val_size=30, d_model=16, n_layers=1, n_heads=2, pretrain_epochs=2,
              max_epochs=3, patience=2)


def grid(setup: Setup, seeds: Sequence[int] = (0, 1, 2, 3, 4, 5), name: str = "custom",
         note: str = "") -> GridPreset:
    ref = setup.task()
    return GridPreset(name, tuple(Entry((("init", i),), ref, arm) for i, arm in
                                  setup.arms().items()), seeds=tuple(seeds), note=note)


# the Setup behind each preset (notebooks size comparison models from it)
SETUPS = {"smoke": SMOKE, "default": Setup()}

PRESETS = {
    "smoke": lambda data_root=None: grid(SMOKE, (0,), "smoke", "CPU smoke run: a 1-layer d=16 "
                                         "Transformer, 2 pretraining epochs; checks the pipeline"),
    "default": lambda data_root=None: grid(Setup(), name="default",
                                           note="the make demo settings"),
}

cells, _run_preset, deviations = grid_study(STUDY, PRESETS, "init, seed")


def run(setup: Setup | str = "default", out_dir="results", *,
        seeds: Optional[Sequence[int]] = None, workers: int = 1, device: str = "auto",
        data_root=None, models: Optional[dict] = None) -> xr.Dataset:
    """Run (or reuse) SPT and scratch for every seed; returns a Dataset over (init, seed), or
    over (model, init, seed) with `models`.

    setup  : a Setup, or the name of a preset ("smoke", "default").
    models : your model configs beside the quickstart's Transformer, {name: config}
             (:func:`spt.studies.grid.with_models`): each gets the same task, pretraining,
             finetuning and scratch settings.
    The variables are the study runner's (:func:`spt.studies.arms.run_arm`); the pretraining
    variables (pretrain_*) keep the SPT row only, over seed.
    """
    if isinstance(setup, str):
        ds = _run_preset(setup, out_dir, data_root=data_root, seeds=seeds, workers=workers,
                         device=device, models=models)
    else:
        p = with_models(grid(setup, seeds or (0, 1, 2, 3, 4, 5)), models, STUDY)
        ds = run_cells(STUDY, grid_cells(p, device=device), out_dir, workers=workers)
    for v in [v for v in ds.data_vars if v.startswith("pretrain_")]:
        ds[v] = ds[v].sel(init="spt", drop=True)
    return ds


def comparison_models(setup: Setup, layer=None, kwargs: Optional[dict] = None, name: str = "yours",
                      shipped: Sequence[str] = ("s4", "sgconv"), bidirectional: bool = False,
                      d_model: Optional[int] = None, n_layers: Optional[int] = None) -> dict:
    """{name: config} of the models to run beside the quickstart's Transformer, sized like it.

    layer    : your layer class or its import path "module:Class" (:mod:`spt.models.custom`);
               None: only the shipped ones.
    shipped  : spt's own models to add: "s4", "s4d", "dlr" (SSMConfig) and "sgconv".
    bidirectional : wrap a causal-only layer (Mamba, S5) so masked SPT can train it.
    d_model, n_layers : your model's width and depth (default: the setup's Transformer's).
    """
    from ..layer_config import LayerConfig
    from ..sgconv_config import SGConvConfig
    from ..ssm_config import SSMConfig

    d, n, L = setup.d_model, setup.n_layers, setup.image_size ** 2
    out = {}
    for s in shipped:
        if s in ("s4", "s4d", "dlr"):
            out[s] = SSMConfig(kind=s, d_model=d, n_layers=n, max_len=L, dropout=setup.dropout,
                               pooling=setup.pooling)
        elif s == "sgconv":
            out[s] = SGConvConfig(d_model=d, n_layers=n, max_len=L, kernel_dim=min(32, L),
                                  dropout=setup.dropout, pooling=setup.pooling)
        else:
            raise ValueError(f"comparison_models: unknown shipped model {s!r}; choose from s4, "
                             f"s4d, dlr, sgconv")
    if layer is not None:
        out[name] = LayerConfig(layer=layer, kwargs=kwargs or {}, d_model=d_model or d,
                                n_layers=n_layers or n, bidirectional=bidirectional, max_len=L,
                                dropout=setup.dropout, pooling=setup.pooling)
    return out


def pretrain_checkpoint(out_dir, seed: int = 0, model: Optional[str] = None) -> Path:
    """best.pt of the SPT run's pretraining for `seed` (and `model`, when the run had models)."""
    coords = {"model": model} if model else {}
    path = run_folder(out_dir, STUDY, {**coords, "init": "spt", "seed": seed}) / "pretrain" / "best.pt"
    if not path.exists():
        raise FileNotFoundError(f"no pretraining checkpoint at {path}: run the quickstart (with "
                                f"this model and seed) into {out_dir} first")
    return path


def config(setup: Setup, seeds: Sequence[int]) -> dict:
    """What a quickstart result file records: the setup, the model it builds and the seeds."""
    return {"setup": dataclasses.asdict(setup), "model": model_config_to_dict(setup.model()),
            "seeds": [int(s) for s in seeds]}


def summary_table(ds: xr.Dataset, metric: str = "test_accuracy"):
    """A pandas DataFrame: mean, std, min, max of `metric` per init, and the SPT - scratch gap
    (per model, as an outer index level, when the Dataset has a "model" dimension)."""
    import pandas as pd

    from ..results import gain

    if "model" in ds.dims:
        return pd.concat({str(m): summary_table(ds.sel(model=m), metric) for m in ds.model.values})
    v = ds[metric] * 100
    table = pd.DataFrame({"mean": v.mean("seed"), "std": v.std("seed", ddof=1) if v.sizes["seed"] > 1
                          else v.mean("seed") * np.nan, "min": v.min("seed"), "max": v.max("seed"),
                          "mean steps": ds["steps"].mean("seed")}, index=list(ds.init.values))
    gap = gain(v, "absolute")
    table.loc["spt - scratch"] = [float(gap.mean()), float(gap.std(ddof=1)) if gap.size > 1
                                  else np.nan, float(gap.min()), float(gap.max()), np.nan]
    return table.round(2)


def describe_budgets(ds: xr.Dataset, setup: Setup) -> str:
    """A plain-language account of how long each side trained (for fairness statements)."""
    sc, ft = ds.sel(init="scratch"), ds.sel(init="spt")
    lines = [
        f"Scratch: {sc.steps.mean().item():.0f} optimiser steps on average "
        f"(min {sc.steps.min().item():.0f}, max {sc.steps.max().item():.0f}); each run went on "
        f"until validation accuracy had not improved for {setup.patience} epochs "
        f"(epochs run: {', '.join(str(int(e)) for e in sc.epochs_run.values)}; cap "
        f"{setup.max_epochs}), and the best-validation epoch is reported.",
        f"Learning rates: pretraining {setup.pretrain_lr:g}, finetuning {setup.finetune_lr:g}, "
        f"scratch {setup.scratch_lr:g}; batch size {setup.batch_size}.",
        f"SPT: {ds.pretrain_steps.mean().item():.0f} masked-denoising steps on the same "
        f"{setup.n_train} training inputs (labels unused), then {ft.steps.mean().item():.0f} "
        f"finetuning steps on average, stopped the same way (patience {setup.patience}).",
    ]
    capped = [int(s) for s, e in zip(ds.seed.values, sc.epochs_run.values)
              if e >= setup.max_epochs]
    if capped:
        lines.append(f"Warning: scratch runs of seeds {capped} hit the epoch cap before validation "
                     f"stopped improving; raise max_epochs for a fair comparison.")
    return "\n".join(lines)
