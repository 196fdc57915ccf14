"""Interactive explorers of study results: SPT gain vs. data scale (Fig. 3) and training curves.

    ex = explore_data_scales()                 # the shipped sample (study 04 laptop: S4, 3 seeds)
    ex = explore_data_scales("results/04")     # a folder of result files, a .nc file, or a Dataset
    ex.widgets["gain"].value = "absolute"
    tr = explore_training(ds)                  # e.g. the Dataset of spt.studies.quickstart.run
    tr.widgets["curve"].value = "curve_train_loss"

Both expect the study layout: metrics over (init[, task, model, fraction, seed]) with init in
{"scratch", "spt"}; curves ``curve_*`` over (..., init, seed, epoch). Any other dim with more
than one value (``ssm_init``, ``spt_share``, ...) gets a dropdown: "mean" (averaged) or one value.
"""
from __future__ import annotations

from typing import Optional

import ipywidgets as W
import numpy as np

from ..results import gain
from ._data import (
    INIT_COLORS,
    INIT_LABELS,
    as_dataset,
    metric_label,
    pct,
    reduce_to,
    require_dims,
    values,
    with_default_dims,
)
from ._explorer import Explorer

CURVE_LABELS = {"curve_val_accuracy": "validation accuracy (%)", "curve_train_loss": "train loss",
                "curve_train_accuracy": "train accuracy (%)", "curve_val_r2": "validation R^2",
                "curve_train_r2": "train R^2", "curve_val_loss": "validation loss"}


def _load(src, sample: str, what: str):
    if src is None:
        from .. import samples
        src = samples.load(sample)
    ds = as_dataset(src, what)
    require_dims(ds, ("init",), what)
    missing = {"scratch", "spt"} - set(values(ds, "init"))
    if missing:
        raise ValueError(f"{what}: dim 'init' needs 'scratch' and 'spt'; missing {sorted(missing)} "
                         f"(select them, e.g. ds.sel(init=['scratch', 'masked']).assign_coords("
                         f"init=['scratch', 'spt']))")
    return with_default_dims(ds, task=ds.attrs.get("task", "task"), model="model", seed=0)


class DataScalesExplorer(Explorer):
    """Widgets: task, model, metric, gain ("relative" | "absolute"), xscale, and one dropdown per
    other dim of the results ("mean" or a value).

    lines: "scratch", "spt" (left, mean over seeds), "gain" (right); ``self.dots`` holds the
    per-seed scatter collections by the same names. axes: (absolute, gain).
    """

    def __init__(self, results=None, interactive: Optional[bool] = None):
        super().__init__(figsize=(10, 3.8), interactive=interactive)
        what = "explore_data_scales(results)"
        ds = _load(results, "data_scales", what)
        require_dims(ds, ("fraction",), what)
        self.data = ds
        metrics = [m for m in ("test_accuracy", "val_accuracy", "test_r2", "val_r2")
                   if m in ds.data_vars]
        if not metrics:
            raise ValueError(f"{what}: no test_accuracy / val_accuracy / test_r2 / val_r2 variable "
                             f"(variables: {sorted(ds.data_vars)})")
        w = self.widgets
        w["task"] = W.Dropdown(options=values(ds, "task"), description="task")
        w["model"] = W.Dropdown(options=values(ds, "model"), description="model")
        w["metric"] = W.Dropdown(options=metrics, description="metric")
        w["gain"] = W.ToggleButtons(options=["relative", "absolute"], description="gain")
        w["xscale"] = W.ToggleButtons(options=["log", "linear"], description="x axis")
        self.axes = self.fig.subplots(1, 2)
        self.dots = {}
        x = ds.fraction.values
        for init in ("scratch", "spt"):
            self.lines[init], = self.axes[0].plot(x, np.zeros_like(x), "--" if init == "scratch"
                                                  else "-", marker="o", color=INIT_COLORS[init],
                                                  label=INIT_LABELS[init])
            self.dots[init] = self.axes[0].scatter([], [], s=10, color=INIT_COLORS[init], alpha=0.5)
        self.lines["gain"], = self.axes[1].plot(x, np.zeros_like(x), "-o", color="#2ca02c",
                                                label="SPT - scratch (mean over seeds)")
        self.dots["gain"] = self.axes[1].scatter([], [], s=10, color="#2ca02c", alpha=0.5)
        self.axes[1].axhline(0, color="k", lw=0.8)
        self.axes[0].legend(fontsize=8)
        self.axes[0].set_xlabel("fraction of training data")
        self.axes[1].set_xlabel("fraction of training data")
        extra = self._extra_dims(ds, ("task", "model", "fraction", "init", "seed"))
        self._finish([[w["task"], w["model"], w["metric"]], [w["gain"], w["xscale"]]]
                     + ([extra] if extra else []))

    def update(self) -> None:
        w, ds = self.widgets, self.data
        m = w["metric"].value
        chosen, averaged = self._extra_selection()
        da = pct(reduce_to(ds[m], ("task", "model", "fraction", "init", "seed"),
                           {"task": w["task"].value, "model": w["model"].value, **chosen}), m)
        da = da.transpose("init", "fraction", "seed")
        x = da.fraction.values
        n_seed = da.sizes["seed"]
        for init in ("scratch", "spt"):
            v = da.sel(init=init)
            self.lines[init].set_data(x, v.mean("seed").values)
            self.dots[init].set_offsets(np.c_[np.repeat(x, n_seed), v.values.ravel()])
        g = gain(da, w["gain"].value).transpose("fraction", "seed")
        self.lines["gain"].set_data(x, g.mean("seed").values)
        self.dots["gain"].set_offsets(np.c_[np.repeat(x, n_seed), g.values.ravel()])
        unit = "points" if m.endswith("accuracy") else "R^2"
        self.axes[0].set_ylabel(metric_label(m))
        self.axes[1].set_ylabel("gain (% of scratch)" if w["gain"].value == "relative" else
                                f"gain ({unit})")
        self.axes[0].set_title(f"{w['task'].value} / {w['model'].value}: {m.replace('_', ' ')}",
                               fontsize=10)
        self.axes[1].set_title(f"{w['gain'].value} gain of SPT over scratch", fontsize=10)
        for ax in self.axes:
            ax.set_xscale(w["xscale"].value)
            ax.relim()
            ax.update_datalim(np.c_[x, np.zeros_like(x)] if ax is self.axes[1] else np.empty((0, 2)))
            ax.autoscale_view()
        self.status.value = (f"{n_seed} seed(s) per point; line: mean, dots: seeds"
                             + _averaged_note(averaged, chosen))
        self.host.redraw()


class TrainingExplorer(Explorer):
    """Widgets: task, model, fraction (when the results have one), seed ("mean" or a seed),
    curve (a curve_* variable), yscale, and one dropdown per other dim ("mean" or a value).
    lines: "scratch", "spt" over epoch."""

    def __init__(self, results=None, interactive: Optional[bool] = None):
        super().__init__(figsize=(8, 3.6), interactive=interactive)
        what = "explore_training(results)"
        ds = _load(results, "data_scales", what)
        curves = [v for v in ds.data_vars if v.startswith("curve_") and "epoch" in ds[v].dims]
        if not curves:
            raise ValueError(f"{what}: no training curves (variables named curve_* over dim "
                             f"'epoch'); the results have {sorted(ds.data_vars)}")
        ds = with_default_dims(ds, fraction=1.0)
        self.data = ds
        order = [c for c in CURVE_LABELS if c in curves] + [c for c in curves if c not in CURVE_LABELS]
        w = self.widgets
        w["task"] = W.Dropdown(options=values(ds, "task"), description="task")
        w["model"] = W.Dropdown(options=values(ds, "model"), description="model")
        fr = values(ds, "fraction")
        w["fraction"] = W.Dropdown(options=fr, value=fr[0], description="fraction",
                                   disabled=len(fr) == 1)
        w["seed"] = W.Dropdown(options=["mean"] + values(ds, "seed"), description="seed")
        w["curve"] = W.ToggleButtons(options=order, value=order[0], description="curve",
                                     style={"button_width": "auto"})
        w["yscale"] = W.ToggleButtons(options=["linear", "log"], description="y axis")
        self.ax = self.fig.subplots()
        ep = ds.epoch.values
        for init in ("scratch", "spt"):
            label = "from scratch" if init == "scratch" else "SPT, finetuning"
            self.lines[init], = self.ax.plot(ep, np.zeros(len(ep)), "--" if init == "scratch"
                                             else "-", color=INIT_COLORS[init], label=label)
        self.ax.set_xlabel("epoch")
        self.ax.legend(fontsize=8)
        extra = self._extra_dims(ds, ("task", "model", "fraction", "init", "seed", "epoch"))
        self._finish([[w["task"], w["model"], w["fraction"], w["seed"]], [w["curve"]],
                      [w["yscale"]]] + ([extra] if extra else []))

    def update(self) -> None:
        w, ds = self.widgets, self.data
        c = w["curve"].value
        chosen, averaged = self._extra_selection()
        sel = {"task": w["task"].value, "model": w["model"].value, "fraction": w["fraction"].value}
        keep = ("task", "model", "fraction", "init", "epoch") + (() if w["seed"].value == "mean"
                                                                 else ("seed",))
        if w["seed"].value != "mean":
            sel["seed"] = w["seed"].value
        da = reduce_to(ds[c], keep, {**sel, **chosen})
        scale = 100 if c.endswith("accuracy") else 1
        for init in ("scratch", "spt"):
            self.lines[init].set_data(da.epoch.values, da.sel(init=init).values * scale)
        self.ax.set_yscale(w["yscale"].value)
        self.ax.set_ylabel(CURVE_LABELS.get(c, c))
        self.ax.relim()
        self.ax.autoscale_view()
        who = "mean over seeds" if w["seed"].value == "mean" else f"seed {w['seed'].value}"
        self.ax.set_title(f"{sel['task']} / {sel['model']}, fraction {sel['fraction']:g}: "
                          f"{CURVE_LABELS.get(c, c)} ({who})", fontsize=10)
        n = np.isfinite(da.sel(init="spt").values).sum(), np.isfinite(da.sel(init="scratch").values).sum()
        self.status.value = (f"epochs with data: SPT finetuning {n[0]}, scratch {n[1]}"
                             + _averaged_note(averaged, chosen))
        self.host.redraw()


def _averaged_note(averaged: list, chosen: dict) -> str:
    parts = [f"{d} = {v}" for d, v in chosen.items()] + [f"mean over {d}" for d in averaged]
    return ("; " + ", ".join(parts)) if parts else ""


def explore_data_scales(results=None, interactive: Optional[bool] = None) -> DataScalesExplorer:
    """Open the data-scale explorer on a Dataset, a .nc path or a folder (None: shipped sample)."""
    return DataScalesExplorer(results, interactive)


def explore_training(results=None, interactive: Optional[bool] = None) -> TrainingExplorer:
    """Open the training-curve explorer on a Dataset, a .nc path or a folder (None: shipped
    sample). Works on :func:`spt.studies.quickstart.run` output directly."""
    return TrainingExplorer(results, interactive)
