"""Interactive kernel-decay explorer (Fig. 4): pick task / model / layer, pretrained vs. HiPPO
baseline, K_max or quantiles over channels, lin / log axes, image-row period lines.

    ex = explore_kernels()                       # the shipped sample (study 06 laptop: S4 on 16x16 digits)
    ex = explore_kernels(model, L=1024)          # a live model with SSM layers
    ex = explore_kernels("results/kernels.nc")   # a file;  or a kernel_decay DataArray / Dataset
    ex = explore_kernels(model, erf=layer_profiles(model, d_model=64, L=1024))   # + the ERF
    ex.widgets["layer"].value = 2                # what a slider move does (tests do this)
"""
from __future__ import annotations

from typing import Optional, Sequence

import ipywidgets as W
import numpy as np

from ._data import values
from ._explorer import Explorer
from .kernel_plots import kernel_curve, kernel_dataset, row_period
from .receptive_field_plots import STAGE_KERNEL, erf_array, kernel_mean, normalised

PT_COLOR, BASE_COLOR = "#1f77b4", "#d62728"


class KernelExplorer(Explorer):
    """Widgets: task, model, layer, pretrained, baseline, stat, yscale, xscale, rows, period
    (+ "erf" when ERF profiles are given).

    lines: "pretrained", "pretrained_lo", "pretrained_hi", "baseline", "baseline_lo",
    "baseline_hi" (the _lo / _hi lines are visible in quantile mode only), and with ERF profiles
    "erf_pretrained" / "erf_baseline" (the ERF of stage "spt" or of a stage-less profile / of
    stage "init"); ``self.rows`` is the LineCollection of image-row markers. data: the
    :func:`kernel_dataset` being shown; erf: the ERF profiles (:func:`erf_array`) or None.

    With the "erf" checkbox on, the kernel curves and the ERF of the selected layer are each scaled
    to sum 1 over lags 1..n-1 (n: the lags both cover; lag 0 holds the skip term and residual, which
    K lacks), so their shapes compare; the quantile lines share their median's scale. Off, or
    without ERF profiles, the explorer shows |K| unscaled.
    """

    def __init__(self, kernels=None, *, L: Optional[int] = None, period: Optional[int] = None,
                 quantiles: Sequence[float] = (0.1, 0.5, 0.9), erf=None,
                 interactive: Optional[bool] = None):
        super().__init__(figsize=(8, 3.8), interactive=interactive)
        self.data = ds = kernel_dataset(kernels, L=L, period=period)
        self.erf = None if erf is None else erf_array(
            erf, "explore_kernels: erf", dims=("task", "model", "stage", "layer", "lag"))
        self.quantiles = tuple(float(q) for q in quantiles)
        q = self.quantiles
        if len(q) != 3 or not 0 <= q[0] < q[1] < q[2] <= 1:
            raise ValueError(f"explore_kernels: quantiles must be 3 increasing values in [0, 1] "
                             f"(low, middle, high), got {quantiles}")
        tasks = values(ds, "task")
        self._add_widgets(ds, tasks)
        self._add_lines(ds.lag.values)
        self._task = tasks[0]
        w = self.widgets
        self._finish([[w["task"], w["model"], w["layer"]],
                      [w["pretrained"], w["baseline"], w["stat"]] + ([w["erf"]] if "erf" in w else []),
                      [w["yscale"], w["xscale"], w["rows"], w["period"]]])

    def _add_widgets(self, ds, tasks: list) -> None:
        """The controls, into ``self.widgets``: task, model, layer, pretrained, baseline, stat
        ("max", "quantiles" with channels, "mean" too with ERF profiles), yscale, xscale, rows,
        period (the first task's row period), and "erf" with ERF profiles."""
        models = values(ds, "model")
        layers = [int(v) for v in ds.layer.values]
        has_base = "baseline" in ds.data_vars
        stats = ["max", "quantiles"] if ds.attrs.get("has_channels") else ["max"]
        tips = ["K_max: max over channels of |K|",
                f"median with the q{self.quantiles[0]:g}-q{self.quantiles[2]:g} range"]
        if self.erf is not None and ds.attrs.get("has_channels"):
            # the ERF of a linear convolution is the mean over channels of |K|: offered and shown
            stats.insert(1, "mean")
            tips.insert(1, "mean over channels of |K| (what the ERF of the convolution equals)")
        w = self.widgets
        w["task"] = W.Dropdown(options=tasks, value=tasks[0], description="task")
        w["model"] = W.Dropdown(options=models, value=models[0], description="model")
        w["layer"] = W.IntSlider(min=min(layers), max=max(layers), value=min(layers),
                                 description="layer", continuous_update=False)
        w["pretrained"] = W.Checkbox(value=True, description="self-pretrained (PT)", indent=False)
        w["baseline"] = W.Checkbox(value=has_base, disabled=not has_base,
                                   description="HiPPO baseline", indent=False)
        w["stat"] = W.ToggleButtons(options=stats, value="mean" if "mean" in stats else "max",
                                    description="over channels", tooltips=tips[:len(stats)])
        w["yscale"] = W.ToggleButtons(options=["log", "linear"], value="log", description="y axis")
        w["xscale"] = W.ToggleButtons(options=["linear", "log"], value="linear", description="x axis")
        p0 = row_period(ds, tasks[0])
        w["rows"] = W.Checkbox(value=p0 > 0, description="image rows every", indent=False)
        w["period"] = W.BoundedIntText(value=p0 or 32, min=1, max=int(ds.sizes["lag"]),
                                       description="lags", layout=W.Layout(width="150px"))
        if self.erf is not None:
            w["erf"] = W.Checkbox(value=True, description="ERF (each curve: sum 1 over lags >= 1)",
                                  indent=False)

    def _add_lines(self, lags: np.ndarray) -> None:
        """The axes and their artists over `lags` (n_lag,): the kernel lines of ``self.lines``
        (with their _lo / _hi quantile lines, and the ERF lines with ERF profiles), the row
        markers ``self.rows``, the x label and the legend."""
        self.ax = self.fig.subplots()
        for name, color in (("pretrained", PT_COLOR), ("baseline", BASE_COLOR)):
            ls = "-" if name == "pretrained" else "--"
            label = "PT (self-pretrained)" if name == "pretrained" else "Baseline (HiPPO init)"
            self.lines[name], = self.ax.plot(lags, np.ones_like(lags, float), ls, color=color,
                                             lw=1.4, label=label)
            for side in ("lo", "hi"):
                self.lines[f"{name}_{side}"], = self.ax.plot(lags, np.ones_like(lags, float), ls,
                                                             color=color, lw=0.6, alpha=0.6)
        if self.erf is not None:
            for name, color in (("pretrained", PT_COLOR), ("baseline", BASE_COLOR)):
                label = "ERF (PT)" if name == "pretrained" else "ERF (init)"
                self.lines[f"erf_{name}"], = self.ax.plot(lags, np.ones_like(lags, float), ":",
                                                          color=color, lw=1.0, marker="o", ms=2.5,
                                                          label=label)
        self.rows = self.ax.vlines([], 0, 1, transform=self.ax.get_xaxis_transform(),
                                   color="0.6", lw=0.5, zorder=0)
        self.ax.set_xlabel("lag (positions apart)")
        self.ax.legend(fontsize=8, loc="upper right")

    def _erf_of(self, name: str, task, model, layer: int):
        """(lags, ERF) of the selected task / model / layer for the kernel line `name`
        ("pretrained": stage "spt" or a stage-less profile; "baseline": stage "init"), or the
        reason there is none. Dims the profiles lack hold for every task / model."""
        da = self.erf
        sel = {"task": task, "model": model, "layer": layer}
        if "stage" in da.dims:
            sel["stage"] = next(s for s, k in STAGE_KERNEL.items() if k == name and s)
        elif name != "pretrained":
            return None  # a stage-less profile measures the model as it is: its PT kernels
        for dim, v in sel.items():
            if dim in da.dims:
                if v not in da[dim].values:
                    return f"no ERF for {dim} {v}"
                da = da.sel({dim: v})
        da = da.dropna("lag")
        return da.lag.values, da.values

    def update(self) -> None:
        """Redraw for the current widget values (a new task first takes its own row period)."""
        w, ds = self.widgets, self.data
        task, model, layer = w["task"].value, w["model"].value, w["layer"].value
        if task != self._task:  # a new task: its own row period
            self._task = task
            p = row_period(ds, task)
            w["rows"].value = p > 0
            if p:
                w["period"].value = p
        stat = w["stat"].value
        erf_on = self.erf is not None and w["erf"].value
        notes = []
        for name in ("pretrained", "baseline"):
            notes += self._draw_kernel(name, task, model, layer, stat, erf_on)
        self._draw_frame(task, model, layer, stat, erf_on)
        self.status.value = "; ".join(notes)
        self.host.redraw()

    def _draw_kernel(self, name: str, task, model, layer: int, stat: str, erf_on: bool) -> list:
        """Set the lines of kernel `name` ("pretrained" or "baseline"): its curve for `stat`
        ("max", "mean" or "quantiles": median and the _lo / _hi lines), its ERF line, each shown
        or hidden; with `erf_on` the curves and the ERF scaled to sum 1 over the lags 1..n-1 they
        share. Returns the notes for the status line (an ERF that is missing)."""
        ds, w, notes = self.data, self.widgets, []
        quant = stat == "quantiles"
        lo, mid, hi = self.quantiles

        def curve(q):
            if q == "mean":
                return kernel_mean(ds, name, task, model, layer)
            return kernel_curve(ds, name, task, model, layer, q)

        show = w[name].value and name in ds.data_vars
        main = self.lines[name]
        main.set_visible(show)
        self.lines[f"{name}_lo"].set_visible(show and quant)
        self.lines[f"{name}_hi"].set_visible(show and quant)
        erf = self._erf_of(name, task, model, layer) if erf_on and show else None
        if isinstance(erf, str):
            notes.append(erf)
            erf = None
        if self.erf is not None:
            self.lines[f"erf_{name}"].set_visible(erf is not None)
        if not show:
            return notes
        k = curve(mid if quant else stat)
        scale = 1.0
        if erf_on:  # both curves scaled to sum 1 over the lags 1..n-1 they share
            n = len(k) if erf is None else min(len(k), len(erf[1]))
            scale = float(np.sum(k[1:n])) or 1.0
            if erf is not None:
                self.lines[f"erf_{name}"].set_data(erf[0], normalised(erf[1], 1, n))
        main.set_ydata(k / scale)
        if quant:
            self.lines[f"{name}_lo"].set_ydata(curve(lo) / scale)
            self.lines[f"{name}_hi"].set_ydata(curve(hi) / scale)
        return notes

    def _draw_frame(self, task, model, layer: int, stat: str, erf_on: bool) -> None:
        """The row markers, the axis scales and limits, the y label and the title."""
        w = self.widgets
        lag_max = float(self.data.lag.values[-1])
        p = w["period"].value
        xs = np.arange(p, lag_max + 1, p) if w["rows"].value else []
        self.rows.set_segments([[(x, 0), (x, 1)] for x in xs])
        self.ax.set_yscale(w["yscale"].value)
        self.ax.set_xscale(w["xscale"].value)
        self.ax.relim(visible_only=True)
        self.ax.autoscale_view()
        lo, _, hi = self.quantiles
        what = {"max": "K_max = max over channels of |K|",
                "mean": "mean over channels of |K|",
                "quantiles": f"median of |K| over channels (thin: q{lo:g}, q{hi:g})"}[stat]
        if erf_on:
            what += "; dotted: ERF"
        self.ax.set_ylabel("|K|, ERF (sum 1 over lags >= 1)" if erf_on else "|K|")
        self.ax.set_title(f"{task} / {model}: layer {layer} - {what}", fontsize=10)

def explore_kernels(kernels=None, *, L: Optional[int] = None, period: Optional[int] = None,
                    quantiles: Sequence[float] = (0.1, 0.5, 0.9), erf=None,
                    interactive: Optional[bool] = None) -> KernelExplorer:
    """Open the kernel-decay explorer.

    kernels   : None (shipped sample), a .nc path, a model with SSM layers, a ``kernel_decay``
                DataArray (layer, lag), a ``kernel_decay_comparison`` or ``kernel_abs_comparison``
                Dataset (see :func:`spt.viz.kernel_plots.kernel_dataset`).
    L         : kernel length for a live model (default its max_len).
    period    : image-row period in lags (e.g. 32 for 32x32 images); default from the data.
    quantiles : (low, middle, high) quantiles over channels for the "quantiles" mode.
    erf       : optional ERF profiles to show beside the kernels (toggle "erf"): a DataArray over
                (lag) plus any of (layer, stage, model, task) - e.g. ``layer_profiles(model, ...)``
                (layer, lag) of the same model - or a dict {model name: DataArray} (see
                :func:`spt.viz.receptive_field_plots.erf_array`); stage "spt" (or none) goes with
                the PT kernels, "init" with the baseline. A dim it lacks holds for every value.
                With it, "mean" over channels joins the stats (the default: the ERF of a linear
                convolution equals mean_c |K|).
    interactive : force (True) or refuse (False) the ipympl canvas; default: in a kernel.
    """
    return KernelExplorer(kernels, L=L, period=period, quantiles=quantiles, erf=erf,
                          interactive=interactive)
