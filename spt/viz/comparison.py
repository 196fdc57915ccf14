"""Figures for an SPT-vs-scratch comparison Dataset (see :func:`spt.studies.quickstart.run`)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import xarray as xr

COLORS = {"scratch": "#9a9a9a", "spt": "#1f77b4", "scratch_continuous": "#d9a441"}
LABELS = {"scratch": "trained from scratch", "spt": "self-pretrained + finetuned",
          "scratch_continuous": "scratch, continuous pixels"}


def plot_gain_bars(ds: xr.Dataset, metric: str = "test_accuracy", ax=None):
    """Bars of the mean `metric` (in %) per init, with each seed as a dot. Returns the Axes."""
    ax = ax or plt.subplots(figsize=(4.5, 3.5))[1]
    v = ds[metric] * 100
    for i, init in enumerate(ds.init.values):
        vals = v.sel(init=init).values
        ax.bar(i, np.nanmean(vals), color=COLORS.get(str(init)), alpha=0.8, width=0.6)
        ax.scatter(np.full(vals.shape, i) + np.linspace(-0.12, 0.12, len(vals)), vals, color="k",
                   s=14, zorder=3)
        ax.text(i, np.nanmax(vals) + 2, f"{np.nanmean(vals):.1f}", ha="center", va="bottom")
    ax.set_xticks(range(ds.sizes["init"]), [LABELS.get(str(i), str(i)) for i in ds.init.values],
                  fontsize=8)
    ax.set_ylabel(f"{metric.replace('_', ' ')} (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"{ds.attrs.get('task', '')}: {ds.sizes['seed']} seeds")
    return ax


def plot_training_curves(ds: xr.Dataset, metric: str = "curve_val_accuracy", axes=None):
    """Validation metric and training loss per epoch, SPT finetuning vs. scratch, one line a seed."""
    if axes is None:
        axes = plt.subplots(1, 2, figsize=(10, 3.5))[1]
    for init in ds.init.values:
        for j, seed in enumerate(ds.seed.values):
            kw = dict(color=COLORS.get(str(init)), alpha=0.8, lw=1.2,
                      label=LABELS.get(str(init)) if j == 0 else None)
            # the epochs this run validated (runs stop at different epochs: NaN elsewhere)
            d = ds[[metric, "curve_train_loss"]].sel(init=init, seed=seed).dropna("epoch", how="all")
            axes[0].plot(d.epoch, d[metric] * 100, **kw)
            axes[1].plot(d.epoch, d["curve_train_loss"], **kw)
    axes[0].set(xlabel="epoch", ylabel="validation accuracy (%)", title="validation accuracy")
    axes[1].set(xlabel="epoch", ylabel="train loss", title="training loss", yscale="log")
    axes[0].legend(fontsize=8)
    return axes
