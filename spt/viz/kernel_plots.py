"""Kernel decay (paper Fig. 4): K_max per layer vs. lag, pretrained model vs. HiPPO baseline.

Every kernel source is first brought to one layout by :func:`kernel_dataset`:

    Dataset  pretrained, baseline : (task, model, layer, channel, lag)   (baseline may be absent)
             coord period (task)  : pixels per image row (0 or absent: not an image task)
             attrs has_channels   : 1 if "channel" holds real channels, 0 if it holds K_max only

Accepted sources: a model holding SSM layers (per-channel kernels computed now, with its HiPPO
baseline), a ``kernel_decay`` DataArray (layer, lag) (its baseline rebuilt from its config), a
``kernel_decay_comparison`` Dataset ("model" / "baseline"), a per-channel Dataset from
:func:`spt.analysis.kernel_decay.kernel_abs_comparison` or a sample file ("model_abs" /
"baseline_abs"), or a path to a .nc file holding one of these.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
import xarray as xr
from matplotlib.figure import Figure

from ..results import read_result
from ._data import values

DIMS = ("task", "model", "layer", "channel", "lag")


def _to_layout(da: xr.DataArray) -> xr.DataArray:
    if "channel" not in da.dims:
        da = da.expand_dims(channel=[0])
    missing = [d for d in ("layer", "lag") if d not in da.dims]
    if missing:
        raise ValueError(f"kernel data needs dims (layer, lag); {da.name!r} lacks {missing} "
                         f"(dims {da.dims})")
    extra = [d for d in da.dims if d not in DIMS]
    if extra:
        raise ValueError(f"kernel data: unexpected dim(s) {extra} in {da.name!r}; select them away "
                         f"first (e.g. da.sel({extra[0]}=...))")
    return da.transpose(*[d for d in DIMS if d in da.dims])


def _from_module(model: torch.nn.Module, L: Optional[int], task: str) -> xr.Dataset:
    from ..analysis.kernel_decay import find_ssm_encoder, kernel_abs_comparison

    enc = find_ssm_encoder(model)
    ds = kernel_abs_comparison(model, L or enc.cfg.max_len)
    ds = ds.rename(model="pretrained").expand_dims(task=[task], model=[enc.cfg.kind])
    ds.attrs["has_channels"] = 1
    return ds


def _from_decay_array(da: xr.DataArray, task: str) -> xr.Dataset:
    from ..analysis.kernel_decay import kernel_decay_baseline
    from ..model_config import model_config_from_dict

    out = {"pretrained": _to_layout(da)}
    cfg = da.attrs.get("config")
    if da.attrs.get("which") != "baseline" and cfg:
        base = kernel_decay_baseline(model_config_from_dict(json.loads(cfg)), da.sizes["lag"])
        out["baseline"] = _to_layout(base)
    ds = xr.Dataset(out)
    kind = da.attrs.get("kind", "model")
    ds = ds.expand_dims({d: [v] for d, v in (("task", task), ("model", kind)) if d not in ds.dims})
    ds.attrs["has_channels"] = 0
    return ds


def kernel_dataset(src=None, *, L: Optional[int] = None, task: str = "task",
                   period: Optional[int] = None) -> xr.Dataset:
    """Bring any kernel source to the layout above (see the module docstring).

    src    : None (the shipped sample "kernels"), a path, an nn.Module, a DataArray or a Dataset.
    L      : kernel length for a module (default: its config's max_len).
    task   : task name given to sources that carry none.
    period : image-row period to record (overrides the source's `period` coordinate).
    """
    if src is None:
        from .. import samples
        src = samples.load("kernels")
    if isinstance(src, (str, Path)):
        src = read_result(src)
    if isinstance(src, torch.nn.Module):
        ds = _from_module(src, L, task)
    elif isinstance(src, xr.DataArray):
        ds = _from_decay_array(src, task)
    elif isinstance(src, xr.Dataset):
        pairs = [("model_abs", "baseline_abs"), ("pretrained", "baseline"), ("model", "baseline")]
        for pt_name, base_name in pairs:
            if pt_name in src.data_vars:
                break
        else:
            raise ValueError(f"kernel data: the Dataset has none of the variables 'model_abs', "
                             f"'model' or 'pretrained' (it has {sorted(src.data_vars)}); pass a "
                             f"kernel_decay_comparison / kernel_abs_comparison Dataset")
        out = {"pretrained": _to_layout(src[pt_name])}
        if base_name in src.data_vars:
            out["baseline"] = _to_layout(src[base_name])
        ds = xr.Dataset(out, coords={k: v for k, v in src.coords.items() if k == "period"})
        if "task" not in ds.dims:
            ds = ds.expand_dims(task=[src.attrs.get("task", task)])
        if "model" not in ds.dims:
            ds = ds.expand_dims(model=[src.attrs.get("kind", "model")])
        ds.attrs["has_channels"] = int("channel" in src[pt_name].dims)
    else:
        raise TypeError(f"kernel data: expected None, a path, a torch model with SSM layers, a "
                        f"kernel_decay DataArray or a Dataset; got {type(src).__name__}")
    ds = ds.transpose(*DIMS)
    if period is not None:
        ds = ds.assign_coords(period=("task", [int(period)] * ds.sizes["task"]))
    return ds


def kernel_curve(ds: xr.Dataset, which: str, task, model, layer: int,
                 stat: str | float = "max") -> np.ndarray:
    """One curve over lag from a :func:`kernel_dataset`: which = "pretrained" | "baseline";
    stat = "max" (K_max) or a quantile over channels in [0, 1] (needs has_channels)."""
    da = ds[which].sel(task=task, model=model, layer=layer)
    if stat == "max":
        return da.max("channel").values
    if not ds.attrs.get("has_channels"):
        raise ValueError("quantiles over channels need per-channel kernels (a model, or a "
                         "kernel_abs_comparison Dataset); this source holds K_max only")
    return da.quantile(float(stat), dim="channel").values


def row_period(ds: xr.Dataset, task) -> int:
    """The image-row period recorded for `task` (0 when none)."""
    if "period" not in ds.coords:
        return 0
    period = ds.period
    # one task's results hold the period as a scalar coordinate, several tasks' along "task"
    return int(period.sel(task=task).values if "task" in period.dims else period.values)


def fig4_kernel_decay(kernels=None, *, layers: Optional[Sequence[int]] = None,
                      period: Optional[int] = None, log: bool = True, stat: str | float = "max",
                      tasks: Optional[Sequence] = None, model=None, task: str = "task") -> Figure:
    """Fig. 4: K_max vs. lag for each layer, pretrained (solid) vs. baseline (dashed), one panel a
    task; vertical lines every `period` lags (image rows) on visual tasks.

    kernels : any source accepted by :func:`kernel_dataset` (default: the shipped sample).
    layers  : layers to show (default all; the paper shows odd layers).
    period  : row period; None uses the source's `period` coordinate (no lines when 0).
    log     : log-scale y axis.   stat: "max" or a quantile over channels, e.g. 0.5.
    model   : which model to show when the source holds several (default: the first).
    task    : task name for sources that carry none (a model, a kernel_decay DataArray).
    """
    ds = kernel_dataset(kernels, period=period, task=task)
    tasks = list(tasks) if tasks is not None else values(ds, "task")
    model = values(ds, "model")[0] if model is None else model
    layers = list(layers) if layers is not None else [int(v) for v in ds.layer.values]
    fig = Figure(figsize=(4.6 * len(tasks), 3.4), layout="constrained")
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    lags = ds.lag.values
    for ax, task in zip(axes, tasks):
        for k, layer in enumerate(layers):
            ax.plot(lags, kernel_curve(ds, "pretrained", task, model, layer, stat), color=f"C{k}",
                    lw=1.2, label=f"PT layer {layer}")
            if "baseline" in ds.data_vars:
                ax.plot(lags, kernel_curve(ds, "baseline", task, model, layer, stat), "--",
                        color=f"C{k}", lw=1.0, alpha=0.7, label=f"Baseline layer {layer}")
        p = row_period(ds, task)
        for x in np.arange(p, lags[-1] + 1, p) if p else []:
            ax.axvline(x, color="0.6", lw=0.5, zorder=0)
        ax.set(xlabel="lag", title=f"{task} / {model}",
               ylabel="K_max" if stat == "max" else f"q{float(stat):g} over channels of |K|")
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=7, ncol=2)
    return fig
