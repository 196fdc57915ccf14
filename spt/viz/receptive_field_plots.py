"""The effective receptive field (ERF) by |lag|, before and after SPT, beside the kernel magnitude.

ERF profiles come from :mod:`spt.analysis.receptive_field`: ``spt_profiles`` (stage, lag) for a
checkpoint, ``layer_profiles`` (layer, lag) per block, ``stack_profile`` (lag,) for the whole stack.
:func:`erf_array` brings any of them (or a dict {model name: profile}) to one layout:

    DataArray "erf" over (model, stage, layer, lag), each dim but lag optional
    stage in ("init", "spt"); lag 0..L-1 (signed profiles are folded with fold_lags)

For the linear part of a causal SSM / SGConv layer (K * z + D z) the ERF at lag >= 1 is exactly
mean_c |K_c[lag]| (see :mod:`spt.analysis.receptive_field`), so with the kernels overlaid the two
curves agree in shape; for a bidirectional layer nearly (the folded ERF takes the larger side of
the channel means, |K| the larger direction per channel, and the backward kernel sits one lag
further); through the GELU, output linear and residual of a whole block only roughly. Lag 0 also
holds the skip term D and the residual, which are not part of K, so when kernels are overlaid
every curve is normalised over lags 1..n-1 (n: the lags both cover) instead of over all lags.

    fig_receptive_field(spt_profiles(ckpt))                         # init vs. SPT, one model
    fig_receptive_field({"transformer": a, "s4": b})                # one panel per model
    fig_receptive_field(layer_profiles(enc, 64, 256), kernels=enc)  # per layer, |K| overlaid
"""
from __future__ import annotations

import itertools
from typing import Optional, Sequence

import numpy as np
import xarray as xr
from matplotlib.figure import Figure

from ..analysis.receptive_field import fold_lags
from ._data import values
from .kernel_plots import kernel_dataset

STAGES = ("init", "spt")
# the kernel variable of a kernel_dataset that shows the same weights as an ERF stage; a profile
# without a stage dim measures the model as it is, i.e. its current ("pretrained") kernels
STAGE_KERNEL = {"spt": "pretrained", "init": "baseline", None: "pretrained"}
STAGE_STYLE = {"spt": "-", "init": "--", None: "-"}
STAGE_LABEL = {"spt": "SPT", "init": "init", None: ""}
FIG_DIMS = ("model", "stage", "layer", "lag")


def erf_array(profiles, what: str = "profiles", dims: Sequence[str] = FIG_DIMS) -> xr.DataArray:
    """Any ERF source as a DataArray over a subset of `dims` (in that order), lag 0..L-1.

    profiles : a DataArray with dim "lag" (signed [-(L-1), L-1] or folded [0, L-1]) and any of the
               other `dims`; a Dataset with an "erf" variable; or a dict {model name: DataArray}
               (stacked along a new "model" dim; lags missing from one model are NaN).
    what     : names the argument in error messages.
    Raises ValueError naming `what` for any other input.
    """
    if isinstance(profiles, xr.Dataset):
        if "erf" not in profiles.data_vars:
            raise ValueError(f"{what}: the Dataset has no variable 'erf' (it has "
                             f"{sorted(profiles.data_vars)}); pass the DataArray from "
                             f"spt.analysis.receptive_field (spt_profiles, layer_profiles)")
        profiles = profiles["erf"]
    if isinstance(profiles, dict):
        if not profiles:
            raise ValueError(f"{what}: the dict of models is empty")
        if "model" not in dims:
            raise ValueError(f"{what}: a dict of models is not accepted here")
        inner = tuple(d for d in dims if d != "model")
        parts = [erf_array(da, f"{what}[{name!r}]", inner).expand_dims(model=[str(name)])
                 for name, da in profiles.items()]
        out = xr.concat(parts, dim="model", join="outer")
        return out.transpose(*[d for d in dims if d in out.dims]).rename("erf")
    if not isinstance(profiles, xr.DataArray):
        raise ValueError(f"{what}: expected an ERF DataArray with dims (lag) plus any of "
                         f"{[d for d in dims if d != 'lag']} (from spt.analysis.receptive_field: "
                         f"spt_profiles, layer_profiles, stack_profile) or a dict {{model name: "
                         f"such a DataArray}}; got {type(profiles).__name__}")
    if "lag" not in profiles.dims:
        raise ValueError(f"{what}: the ERF DataArray lacks the dim 'lag' (it has "
                         f"{list(profiles.dims)})")
    extra = [d for d in profiles.dims if d not in dims]
    if extra:
        raise ValueError(f"{what}: unexpected dim(s) {extra} (dims {list(profiles.dims)}); "
                         f"expected 'lag' plus any of {[d for d in dims if d != 'lag']}; select "
                         f"the others away first (e.g. .sel({extra[0]}=...))")
    if "stage" in profiles.dims:
        bad = [s for s in values(profiles, "stage") if s not in STAGES]
        if bad:
            raise ValueError(f"{what}: stage values must be among {list(STAGES)}, got {bad}")
    if (profiles.fillna(0) < 0).any():
        raise ValueError(f"{what}: ERF values must be >= 0 (mean absolute derivatives)")
    if (profiles.lag < 0).any():
        profiles = fold_lags(profiles)
    if not np.array_equal(profiles.lag.values, np.arange(profiles.sizes["lag"])):
        raise ValueError(f"{what}: lags must be [-(L-1), L-1] (signed) or [0, L-1] (folded), "
                         f"every lag once in order; got {profiles.lag.values.tolist()[:8]}...")
    return profiles.transpose(*[d for d in dims if d in profiles.dims]).rename("erf")


def normalised(y: np.ndarray, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
    """y / sum(y[start:stop]): a curve over lag scaled to sum 1 over those lags (NaN if it is 0)."""
    total = float(np.nansum(y[start:stop]))
    return y / total if total > 0 else np.full(y.shape, np.nan)


def kernel_mean(kds: xr.Dataset, which: str, task, model, layer: int) -> np.ndarray:
    """Mean over channels of |K| of one layer, (lag,), from a :func:`kernel_dataset` (which is
    "pretrained" or "baseline"): the kernel statistic the ERF of a linear convolution equals. A
    source holding K_max only has one "channel", so this is K_max there."""
    return kds[which].sel(task=task, model=model, layer=layer).mean("channel").values


def kernel_label(kds: xr.Dataset) -> str:
    return "mean_c |K|" if kds.attrs.get("has_channels") else "K_max"


def _erf_curve(da: xr.DataArray) -> tuple[np.ndarray, np.ndarray]:
    """(lags, values) of a 1-d ERF curve, lags missing for this model (NaN) dropped."""
    da = da.dropna("lag")
    return da.lag.values, da.values


def _kernel_sources(kernels, models: list) -> dict:
    """{model name: kernel_dataset} for the `kernels` argument (a source or a dict by model)."""
    if kernels is None:
        return {}
    if isinstance(kernels, dict):
        unknown = [k for k in kernels if str(k) not in models]
        if unknown:
            raise ValueError(f"fig_receptive_field: kernels names model(s) {unknown} that the "
                             f"profiles do not hold (models: {models})")
        return {str(k): kernel_dataset(v) for k, v in kernels.items()}
    if len(models) > 1:
        raise ValueError(f"fig_receptive_field: kernels must be a dict {{model name: kernel "
                         f"source}} when the profiles hold several models ({models}), so that "
                         f"each kernel is drawn with its own model")
    return {models[0]: kernel_dataset(kernels)}


def fig_receptive_field(profiles, *, kernels=None, layers: Optional[Sequence[int]] = None,
                        log: bool = True, ax=None) -> Figure:
    """ERF over |lag| at initialisation (dashed) and after SPT (solid), one panel per model; with
    `kernels`, the kernel magnitude of the same layers overlaid (thick, pale, same colour).

    profiles : an ERF DataArray over (lag) plus any of (stage, layer, model) - e.g.
               ``spt_profiles(ckpt)`` (stage, lag), ``layer_profiles(...)`` (layer, lag) - or a
               dict {model name: such a DataArray}; signed lags are folded (see :func:`erf_array`).
    kernels  : kernel-decay data of an SSM / SGConv model, any source of
               :func:`spt.viz.kernel_plots.kernel_dataset` (a model, a kernel_decay DataArray, a
               kernel_abs_comparison Dataset, a .nc path), or a dict {model name: source} (needed
               when `profiles` hold several models). Stage "spt" (or no stage) is drawn with the
               source's current / pretrained kernels, stage "init" with its baseline (when it has
               one). The curve is mean over channels of |K| (K_max for a K_max-only source).
    layers   : layers to draw: of the ERF when it has a layer dim (the kernel of the same layer is
               overlaid), else of the kernel overlaid on the stack's ERF; default all.
    log      : log-scale y axis.
    ax       : draw every model on this matplotlib Axes instead of a new figure.

    Normalisation: without kernels each ERF curve sums to 1 over all its lags (as spt_profiles);
    with kernels every curve (ERF and |K|, in every panel) sums to 1 over lags 1..n-1, n the lags
    both cover (lag 0 holds the skip term and the residual, which K lacks). Lines are labelled
    "ERF <stage> [layer l]" and "mean_c |K| <stage> layer l" ("K_max ..." for a K_max-only
    source), plus the model name when several models share `ax`. Returns the Figure (ax's figure
    when `ax` is given).
    """
    da = erf_array(profiles, "fig_receptive_field: profiles")
    if "model" not in da.dims:
        da = da.expand_dims(model=[str(da.attrs.get("kind", "model"))])
    models = [str(m) for m in values(da, "model")]
    kds_of = _kernel_sources(kernels, models)
    if ax is None:
        fig = Figure(figsize=(5.2 * len(models), 3.4), layout="constrained")
        axes = list(fig.subplots(1, len(models), squeeze=False, sharey=True)[0])
    else:
        fig, axes = ax.figure, [ax] * len(models)
    stages = values(da, "stage") if "stage" in da.dims else [None]
    start = 1 if kds_of else 0
    for i, (axis, model) in enumerate(zip(axes, models)):
        if ax is None or i == 0:  # colours restart on each axes
            colors = (f"C{j}" for j in itertools.count())
        tag = f" {model}" if ax is not None and len(models) > 1 else ""
        for line in _panel(da.sel(model=model), stages, kds_of.get(model), model, layers, colors,
                           start):
            ls = STAGE_STYLE[line["stage"]]
            axis.plot(*line["erf"], ls, color=line["color"], lw=1.1, marker=".", ms=3,
                      label=line["label"] + tag)
            for (kx, ky), klabel, kcolor in line["kernels"]:
                axis.plot(kx, ky, ls, color=kcolor, lw=3.0, alpha=0.35, label=klabel + tag)
        if ax is None or i == len(models) - 1:
            norm = "sum 1 over lags >= 1" if kds_of else "sum 1 over lags"
            axis.set(xlabel="|lag| (positions)", ylabel=f"share of the total ({norm})",
                     title=f"{model if ax is None else ', '.join(models)}: receptive field"
                           + (" before / after SPT" if stages != [None] else ""))
            if log:
                axis.set_yscale("log")
            axis.legend(fontsize=7, ncol=2 if len(axis.lines) > 6 else 1)
    return fig


def _words(*parts) -> str:
    return " ".join(str(p) for p in parts if p)


def _panel(m: xr.DataArray, stages: list, kds: Optional[xr.Dataset], model: str,
           layers: Optional[Sequence[int]], colors, start: int):
    """The lines of one model's panel, one dict per ERF curve: stage, label, color, erf (lags,
    values) and kernels [((lags, values), label, color), ...] to overlay on it; every curve is
    scaled to sum 1 over lags start..n-1 (see fig_receptive_field)."""
    has_layer = "layer" in m.dims
    erf_layers = [None]
    if has_layer:
        erf_layers = [int(v) for v in m.layer.values] if layers is None else list(layers)
        missing = [v for v in erf_layers if v not in m.layer.values]
        if missing:
            raise ValueError(f"fig_receptive_field: layers {missing} are not in the profiles of "
                             f"{model!r} (layers {m.layer.values.tolist()})")
    if kds is not None:
        kmodels = values(kds, "model")
        kmodel, ktask = (model if model in kmodels else kmodels[0]), values(kds, "task")[0]
        klayers = [int(v) for v in kds.layer.values]
        # kernel layers to overlay: the ERF's own layers, or (on a stack's ERF) `layers`
        wanted = erf_layers if has_layer else (klayers if layers is None else list(layers))
        bad = [v for v in wanted if v not in klayers]
        if bad:
            raise ValueError(f"fig_receptive_field: kernels of {model!r} have no layer(s) {bad} "
                             f"(layers {klayers})")
    for layer in erf_layers:
        color = next(colors)
        if kds is None:
            kcolors = {}
        elif has_layer:
            kcolors = {layer: color}
        else:
            kcolors = {kl: next(colors) for kl in wanted}
        for stage in stages:
            curve = m if layer is None else m.sel(layer=layer)
            x, y = _erf_curve(curve if stage is None else curve.sel(stage=stage))
            n = len(y) if kds is None else min(len(y), kds.sizes["lag"])
            if n < 2:
                raise ValueError("fig_receptive_field: the profiles and kernels share fewer than "
                                 "2 lags; compute them over longer lags")
            which = STAGE_KERNEL[stage]
            kcurves = [((kds.lag.values, normalised(kernel_mean(kds, which, ktask, kmodel, kl),
                                                    start, n)),
                        _words(kernel_label(kds), STAGE_LABEL[stage], f"layer {kl}"), kc)
                       for kl, kc in kcolors.items() if which in kds.data_vars]
            yield {"stage": stage, "color": color, "erf": (x, normalised(y, start, n)),
                   "label": _words("ERF", STAGE_LABEL[stage],
                                   f"layer {layer}" if layer is not None else ""),
                   "kernels": kcurves}
