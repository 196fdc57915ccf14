"""Study 00 — the quickstart: self-pretraining (masked denoising -> finetuning) vs. the same model
trained from scratch, on a small task embedded in scikit-learn, over several seeds.

It is a study like the others: its :class:`Setup` becomes a grid (init x seed) of arms, and the
one study runner (:func:`spt.studies.machinery.cells.run_cells`) runs or reuses each cell, one result file
per cell under ``OUT/00_quickstart/``. The notebook's parameters are the fields of Setup.

    setup = Setup(n_train=100)
    ds = STUDY.run(setup, "results", seeds=[0, 1, 2])     # Dataset over (init, seed)
    summary_table(ds); print(describe_budgets(ds, setup))
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import xarray as xr

from ..model_config import model_config_to_dict
from .machinery.cells import run_folder
from .machinery.digits_setup import INITS, LAPTOP, Setup  # noqa: F401  (the study's names)
from .machinery.job import Entry, GridPreset
from .machinery.study import SettingsPresets, Study
from .machinery.yours import layer_from_spec

NAME = "00_quickstart"

# The demo preset (what `make demo` runs, seeds 0-3): the laptop preset's task, encoding, lrs and
# stopping rule with cheaper cells, to fit a few minutes on two cores with SPT still ahead on every
# seed. The candidates tried, every seed of each, are in docs/laptop_quickstart_measurements.md.
DEMO = dataclasses.replace(LAPTOP, n_layers=1, patience=72, eval_every=8)

# The continuous-pixel setting (standardised values, L1 pretraining) at the laptop budgets.
CONTINUOUS = Setup(tokens=False)

# pretrain_val=30 validates pretraining on all 30 validation images (as None would), in a value the
# notebook's int parameter can hold
SMOKE = Setup(n_train=24, val_size=30, d_model=16, n_layers=1, n_heads=2, pretrain_epochs=2,
              max_epochs=3, patience=2, scratch_lrs=(), pretrain_val=30, tokens=False,
              eval_every=1, pretrain_eval_every=1)


def grid(setup: Setup, seeds: Sequence[int] = (0, 1, 2, 3, 4, 5), name: str = "custom",
         note: str = "") -> GridPreset:
    return GridPreset(name, tuple(Entry((("init", i),), setup.task_of(i), arm) for i, arm in
                                  setup.arms().items()), seeds=tuple(seeds), note=note)


# the Setup behind each preset (notebooks size comparison models from it)
SETUPS = {"smoke": SMOKE, "laptop": LAPTOP, "demo": DEMO, "continuous": CONTINUOUS}

PRESETS = {
    "smoke": lambda data_root=None: grid(SMOKE, (0,), "smoke", "CPU smoke run: a 1-layer d=16 "
                                         "Transformer, 2 pretraining epochs; checks the pipeline"),
    "laptop": lambda data_root=None: grid(LAPTOP, name="laptop", note=(
        "six seeds: 100 labelled digits as 64 pixel tokens, a d=64 x 3 Transformer (the LRA "
        "Image row's size); SPT vs. scratch (lr 1e-3, chosen on validation over {3e-3, 1e-3}); "
        "stands in for LRA Image (Table 1). 10m02s on a quiet 2-core CPU, .venv installed "
        "(2026-11-26, commit fc535ba)")),
    "demo": lambda data_root=None: grid(DEMO, (0, 1, 2, 3), "demo", (
        "what `make demo` runs, seeds 0-3: the laptop preset's data (100 labelled digits as 64 "
        "pixel tokens), lrs and pretraining with cheaper cells: a d=64 x 1 Transformer, both "
        "sides stopped after 72 epochs without a better validation accuracy, validated every 8; "
        "its time: the README's quick start. Six seeds, a d=64 x 3 Transformer: --preset "
        "laptop")),
    "continuous": lambda data_root=None: grid(CONTINUOUS, name="continuous", note=(
        "the laptop preset with continuous pixel values (L1 pretraining) instead of tokens")),
}

def notebook_parameters(preset: str) -> dict:
    """The notebook's parameters that run preset `preset` (its Setup's fields and seeds): what
    ``spt study run 00_quickstart --preset NAME`` passes. The notebook's own defaults are the
    laptop preset's (tests/test_quickstart.py)."""
    if preset not in SETUPS:
        raise ValueError(f"study {NAME}: unknown preset {preset!r}; choose from {', '.join(SETUPS)}")
    setup = SETUPS[preset]
    params = {f.name: getattr(setup, f.name) for f in dataclasses.fields(setup)
              if f.name != "progress"}
    params["scratch_lrs"] = list(setup.scratch_lrs)
    params["pretrain_val"] = setup.pretrain_val or 0  # the notebook's int: 0 means all (None)
    params["seeds"] = list(PRESETS[preset]().seeds)
    if preset == "smoke":  # two tiny cells: faster in this process than in two new workers
        params["workers"] = 1
    return params


def preset_of(setup: Setup) -> GridPreset:
    """The GridPreset of a Setup: the named preset when it is one of SETUPS (so its note is
    printed), else a "custom" one over six seeds."""
    for name, known in SETUPS.items():
        if setup == known:
            return PRESETS[name]()
    return grid(setup)


NO_PAPER_PRESET = ("the quickstart has no paper preset: it stands in for Table 1's LRA Image row "
                   "(pixel tokens, a d=64 x 3 Transformer) on 8x8 digits; study "
                   "01_lra_transformers runs the paper's settings on LRA")


def spt_pretraining_only(ds: xr.Dataset) -> xr.Dataset:
    """The pretraining variables (pretrain_*) of the SPT row only, over seed (scratch has none)."""
    for v in [v for v in ds.data_vars if v.startswith("pretrain_")]:
        ds[v] = ds[v].sel(init="spt", drop=True)
    return ds


def comparison_models(setup: Setup, layer=None, kwargs: Optional[dict] = None, name: str = "yours",
                      shipped: Sequence[str] = ("s4", "sgconv"), bidirectional: bool = False,
                      d_model: Optional[int] = None, n_layers: Optional[int] = None) -> dict:
    """{name: config} of the models to run beside the quickstart's Transformer, sized like it.

    layer    : your layer class or its import path "module:Class" (:mod:`spt.models.user_layers`);
               None: only the shipped ones.
    shipped  : spt's own models to add: "s4", "s4d", "dlr" (SSMConfig) and "sgconv".
    bidirectional : wrap a causal-only layer (Mamba, S5) so masked SPT can train it.
    d_model, n_layers : your model's width and depth (default: the setup's Transformer's).
    """
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
        out[name] = layer_from_spec({"layer": layer, "kwargs": kwargs, "d_model": d_model,
                                     "n_layers": n_layers, "bidirectional": bidirectional},
                                    setup.model(), "comparison_models")
    return out


def pretrain_checkpoint(out_dir, seed: int = 0, model: Optional[str] = None) -> Path:
    """best.pt of the SPT run's pretraining for `seed` (and `model`, when the run had models)."""
    coords = {"model": model} if model else {}
    path = run_folder(out_dir, NAME, {**coords, "init": "spt", "seed": seed}) / "pretrain" / "best.pt"
    if not path.exists():
        raise FileNotFoundError(f"no pretraining checkpoint at {path}: run the quickstart (with "
                                f"this model and seed) into {out_dir} first")
    return path


def config(setup: Setup, seeds: Sequence[int]) -> dict:
    """What a quickstart result file records: the setup, the model it builds and the seeds."""
    return {"setup": dataclasses.asdict(setup), "model": model_config_to_dict(setup.model()),
            "seeds": [int(s) for s in seeds]}


# Scratch on continuous pixel values at the laptop preset's data, model, lr 1e-3 and stopping rule
# (validated every epoch), seeds 0-5: test accuracy (%) of the 6-seed fresh-clone `make demo` of
# 2026-11-23 (the laptop setting then), which ran it beside the token runs (docs/quickstart.md).
RECORDED_CONTINUOUS = {0: 83.4, 1: 84.8, 2: 85.0, 3: 87.6, 4: 82.0, 5: 82.0}


def _recorded_data_and_model(setup: Setup) -> bool:
    """Whether `setup` trains the model on the data RECORDED_CONTINUOUS was recorded with."""
    return setup.task() == LAPTOP.task() and setup.model() == LAPTOP.model()


def continuous_reference_table(ds: xr.Dataset, setup: Optional[Setup] = None,
                               metric: str = "test_accuracy"):
    """Scratch on continuous pixels beside scratch and SPT on tokens, per seed (test accuracy,
    %): this run's "scratch_continuous" cells when it ran them (continuous_reference=True), else
    RECORDED_CONTINUOUS, labelled as recorded, when `setup` (None: the laptop preset's) has the
    data and model it was recorded with; for other data or models that column is empty and says
    so."""
    import pandas as pd

    v = ds[metric] * 100
    cols = {f"{i} (tokens)": v.sel(init=i).values for i in ("scratch", "spt")}
    seeds = [int(s) for s in ds.seed.values]
    if "scratch_continuous" in ds.init.values:
        cols["scratch, continuous pixels (this run)"] = v.sel(init="scratch_continuous").values
    elif setup is None or _recorded_data_and_model(setup):
        cols["scratch, continuous pixels (recorded 2026-11-23, laptop setting)"] = [
            RECORDED_CONTINUOUS.get(s, np.nan) for s in seeds]
    else:
        cols["scratch, continuous pixels (recorded for the laptop preset only)"] = \
            [np.nan] * len(seeds)
    table = pd.DataFrame(cols, index=pd.Index(seeds, name="seed"))
    table.loc["mean"] = table.mean()
    return table.round(1)


def summary_table(ds: xr.Dataset, metric: str = "test_accuracy"):
    """A pandas DataFrame: mean, std, min, max of `metric` per init, and the SPT - scratch gap
    paired by seed with its 95% interval and the seeds SPT is ahead on (per model, as an outer
    index level, when the Dataset has a "model" dimension)."""
    import pandas as pd

    from ..results import gain, paired_gain

    if "model" in ds.dims:
        return pd.concat({str(m): summary_table(ds.sel(model=m), metric) for m in ds.model.values})
    v = ds[metric] * 100
    cols = {"mean": v.mean("seed"), "std": v.std("seed", ddof=1) if v.sizes["seed"] > 1
            else v.mean("seed") * np.nan, "min": v.min("seed"), "max": v.max("seed"),
            "mean steps": ds["steps"].mean("seed")}
    if "grid_steps" in ds:  # every lr of a grid ran in full: the compute each side spent
        cols["mean steps, all lrs"] = ds["grid_steps"].mean("seed")
    table = pd.DataFrame(cols, index=list(ds.init.values))
    gap = gain(v, "absolute")
    table.loc["spt - scratch"] = [float(gap.mean()), float(gap.std(ddof=1)) if gap.size > 1
                                  else np.nan, float(gap.min()), float(gap.max())] + \
        [np.nan] * (len(cols) - 4)
    paired = paired_gain(v.sel(init="spt"), v.sel(init="scratch"))
    table["95% CI"] = ""
    table["seeds ahead"] = ""
    low, high = float(paired["low"]), float(paired["high"])
    table.loc["spt - scratch", "95% CI"] = (f"[{low:+.2f}, {high:+.2f}]" if np.isfinite(low)
                                            else "n < 2")
    table.loc["spt - scratch", "seeds ahead"] = f"{int(paired['ahead'])}/{int(paired['n'])}"
    return table.round(2)


def seed_table(ds: xr.Dataset, metric: str = "test_accuracy"):
    """Every seed: test accuracy (%) of each init, the SPT - scratch gap, the chosen scratch lr and
    the steps each side took (pretraining + finetuning for SPT)."""
    import pandas as pd

    rows = {}
    for s in ds.seed.values:
        d = ds.sel(seed=s)
        row = {str(i): 100 * float(d[metric].sel(init=i)) for i in ds.init.values}
        row["spt - scratch"] = row["spt"] - row["scratch"]
        row["scratch lr"] = float(d["lr"].sel(init="scratch"))
        row["scratch steps"] = int(d["steps"].sel(init="scratch"))
        pt = d["pretrain_steps"]
        pt = pt.sel(init="spt") if "init" in pt.dims else pt
        row["spt steps (pt + ft)"] = f"{int(pt)} + {int(d['steps'].sel(init='spt'))}"
        rows[int(s)] = row
    return pd.DataFrame(rows).T.rename_axis("seed")


def paper_reference():
    """The paper's LRA Image numbers for Transformers (test accuracy, %): what the laptop preset
    stands in for (Table 1: Tay et al.'s Transformer, pixels as tokens; Table 2: rotary)."""
    import pandas as pd

    from ..paper.results import TABLE1, TABLE2

    rows = {"Transformer (Tay et al.), scratch": TABLE1["Transformer (Tay et al.)"]["image"],
            "Transformer + masked SPT": TABLE1["Transformers + Masked SPT"]["image"],
            "Transformer + rotary, scratch": TABLE2["Transformers + Rotary"]["image"],
            "Transformer + rotary + masked SPT":
                TABLE2["Transformers + Rotary + Masked SPT"]["image"]}
    return pd.Series(rows, name="LRA Image test accuracy (%)")


def describe_budgets(ds: xr.Dataset, setup: Setup) -> str:
    """A plain-language account of how long each side trained (for fairness statements)."""
    sc, ft = ds.sel(init="scratch"), ds.sel(init="spt")
    grid = setup.scratch_lrs or (setup.scratch_lr,)
    chosen = ", ".join(f"{float(x):g}" for x in sc.lr.values)
    if len(grid) > 1:
        lr_line = (f"Scratch lr grid {', '.join(f'{x:g}' for x in grid)}: every lr is a full run, "
                   f"the one with the best validation accuracy is kept (chosen per seed: {chosen})"
                   + (f"; all lrs together took {sc.grid_steps.mean().item():.0f} steps per seed "
                      f"on average." if "grid_steps" in ds else "."))
    else:
        lr_line = (f"Scratch lr {grid[0]:g} for every seed, no per-seed grid (scratch_lrs is empty"
                   + ("; 1e-3 is the lr a per-seed grid over 3e-3 and 1e-3 chose on 5 of 6 seeds, "
                      "docs/quickstart.md)." if setup == LAPTOP else ")."))
    lines = [
        f"Scratch: {sc.steps.mean().item():.0f} optimiser steps on average in the run kept "
        f"(min {sc.steps.min().item():.0f}, max {sc.steps.max().item():.0f}); each run went on "
        f"until validation accuracy had not improved for {setup.patience} epochs "
        f"(epochs run: {', '.join(str(int(e)) for e in sc.epochs_run.values)}; cap "
        f"{setup.max_epochs}; validated every {setup.eval_every} epochs), and the "
        f"best-validation epoch is reported.",
        lr_line,
        f"SPT: {ds.pretrain_steps.mean().item():.0f} masked-denoising steps (lr "
        f"{setup.pretrain_lr:g}) on the same {setup.n_train} training inputs (labels unused), then "
        f"{ft.steps.mean().item():.0f} finetuning steps on average (lr {setup.finetune_lr:g}), "
        f"stopped the same way (patience {setup.patience}); batch size {setup.batch_size}.",
    ]
    capped = [int(s) for s, e in zip(ds.seed.values, sc.epochs_run.values)
              if e >= setup.max_epochs]
    if capped:
        lines.append(f"Warning: scratch runs of seeds {capped} hit the epoch cap before validation "
                     f"stopped improving; raise max_epochs for a fair comparison.")
    return "\n".join(lines)


def headline(ds: xr.Dataset) -> str:
    """SPT vs. scratch, mean over seeds, the paired gain, the seeds SPT is ahead on and those it
    is ahead on by 10 points or more (the laptop preset's claim: on at least 5 of 6)."""
    acc = ds["test_accuracy"] * 100
    spt, scratch = acc.sel(init="spt"), acc.sel(init="scratch")
    gap = spt - scratch
    return (f"SPT {float(spt.mean()):.1f} vs. scratch {float(scratch.mean()):.1f}: "
            f"{float(gap.mean()):+.1f} points, SPT ahead on {int((gap > 0).sum())} of "
            f"{int(gap.sizes['seed'])} seeds, by 10 points or more on {int((gap >= 10).sum())}")


STUDY = Study(NAME, "The quickstart: SPT vs. scratch on 100 digits as pixel tokens, six seeds",
              ("init", "seed"), PRESETS, summary_table, takes_models=True,
              settings=SettingsPresets(preset_of, notebook_parameters), finish=spt_pretraining_only,
              no_paper=NO_PAPER_PRESET, headline=headline)
