"""Per-channel kernel magnitudes and their quantiles over channels (a companion to Fig. 4).

:func:`spt.analysis.kernel_decay` reduces each layer's kernels to K_max[lag] = max over channels (and
directions) of |K[c, lag]|. The maximum hides how the *typical* channel behaves; these functions
keep the channel axis so that the median or other quantiles over channels can be plotted too:

    a = kernel_abs(model, L=256)                 # DataArray (layer, channel, lag): max_dir |K|
    q = kernel_channel_quantiles(a, [0.5, 0.9])  # DataArray (layer, quantile, lag)
    ds = kernel_abs_comparison(model, L=256)     # Dataset "model", "baseline": (layer, channel, lag)

``a.max("channel")`` equals ``kernel_decay(model, L)`` exactly.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import xarray as xr

from ..models.ssm import SSMEncoder
from .kernels import abs_kernels, baseline_encoder, kernel_array, model_and_baseline, of_model


def _abs_per_channel(enc: SSMEncoder, L: int, which: str) -> xr.DataArray:
    return kernel_array(abs_kernels(enc, L), ("layer", "channel", "lag"), "K_abs",
                        "max over directions of |K| per channel", enc, which)


def kernel_abs(model: torch.nn.Module, L: int) -> xr.DataArray:
    """|K| of the model's current kernels per channel (max over both directions).

    model : any module holding an SSMEncoder (S4, S4D or DLR).
    L     : kernel length (at most the config's max_len for S4).
    Returns a DataArray (layer, channel, lag) of shape (n_layers, d_model, L).
    """
    return of_model(model, lambda enc: _abs_per_channel(enc, L, "model"))


def kernel_abs_baseline(model_or_cfg, L: int, seed: int = 0) -> xr.DataArray:
    """Per-channel |K| (layer, channel, lag) of a fresh model with the same config at its structured
    (HiPPO-style) initialisation, drawn with `seed` - the same baseline as
    :func:`spt.analysis.kernel_decay_baseline`."""
    return _abs_per_channel(baseline_encoder(model_or_cfg, seed), L, "baseline")


def kernel_abs_comparison(model: torch.nn.Module, L: int, seed: int = 0) -> xr.Dataset:
    """Dataset with "model" and "baseline", each per-channel |K| over (layer, channel, lag)."""
    return model_and_baseline(kernel_abs(model, L), kernel_abs_baseline(model, L, seed))


def kernel_channel_quantiles(k_abs: xr.DataArray, q: Sequence[float] | float) -> xr.DataArray:
    """Quantiles over channels of per-channel |K|.

    k_abs : DataArray with a "channel" dim, e.g. (layer, channel, lag) from :func:`kernel_abs`.
    q     : one quantile or several, each in [0, 1] (1.0 gives K_max).
    Returns a DataArray with "channel" replaced by "quantile" (layer, quantile, lag).
    """
    if "channel" not in k_abs.dims:
        raise ValueError(f"kernel_channel_quantiles needs per-channel |K| with a 'channel' dim "
                         f"(from spt.analysis.kernel_quantiles.kernel_abs); got dims {k_abs.dims}")
    qs = np.atleast_1d(np.asarray(q, dtype=float))
    if ((qs < 0) | (qs > 1)).any():
        raise ValueError(f"kernel_channel_quantiles: quantiles must be in [0, 1], got {list(qs)}")
    out = k_abs.quantile(qs, dim="channel")
    order = [d for d in k_abs.dims if d != "channel"]
    idx = k_abs.dims.index("channel")
    order.insert(idx, "quantile")
    return out.transpose(*order)
