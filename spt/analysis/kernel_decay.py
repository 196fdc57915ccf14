"""How the kernels of SSM models decay with the lag (paper section 3.6, Fig. 4).

For every layer, K_max[lag] = max over channels c and both directions of |K[c, lag]|: it bounds the
derivative of any output y[k] with respect to the input l = lag positions away. The paper compares
the kernels of a self-pretrained S4 (before finetuning) with those of S4's HiPPO initialisation.

    da = kernel_decay(model, L=1024)              # DataArray (layer, lag)
    base = kernel_decay_baseline(model, L=1024)   # the same config at its structured init
    ds = kernel_decay_comparison(model, L=1024)   # Dataset with both, plot-ready:
    ds["model"].sel(layer=0).plot(yscale="log"); ds["baseline"].sel(layer=0).plot()

The maximum hides how the *typical* channel behaves; the per-channel magnitudes keep the channel
axis so that the median or other quantiles over channels can be plotted too:

    a = kernel_abs(model, L=256)                 # DataArray (layer, channel, lag): max_dir |K|
    q = kernel_channel_quantiles(a, [0.5, 0.9])  # DataArray (layer, quantile, lag)
    ds = kernel_abs_comparison(model, L=256)     # "model", "baseline": (layer, channel, lag)

``a.max("channel")`` equals ``kernel_decay(model, L)`` exactly.

Works for any module that contains a convolution stack (:class:`~spt.models.ssm.ConvStack`: an
S4, S4D or DLR :class:`~spt.models.ssm.SSMEncoder`, an SGConv
:class:`~spt.models.sgconv.SGConvEncoder` or a free-kernel
:class:`~spt.models.free_conv.FreeConvEncoder`), whether a SequenceModel, its backbone or the stack
itself. SGConv's baseline is its own initialisation (random sub-kernel weights with the
multi-scale decay alpha^i), as HiPPO is S4's; a free kernel's is its N(0, kernel_init_std^2) draw.
"""
from __future__ import annotations

import json
from typing import Sequence

import numpy as np
import torch
import xarray as xr

from ..config import replace
from ..free_conv_config import FreeConvConfig
from ..model_config import model_config_to_dict
from ..models.free_conv import FreeConvEncoder
from ..models.sgconv import SGConvEncoder
from ..models.ssm import ConvStack, SSMEncoder
from ..sgconv_config import SGConvConfig
from ..ssm_config import SSMConfig

# The convolution stack of each config whose layers have kernels: the kernel analyses' baselines.
_CONV_CONFIGS = {SSMConfig: SSMEncoder, SGConvConfig: SGConvEncoder,
                 FreeConvConfig: FreeConvEncoder}


def find_ssm_encoder(model: torch.nn.Module) -> ConvStack:
    """The (first) convolution stack inside `model`: an SSMEncoder, SGConvEncoder or
    FreeConvEncoder."""
    for m in model.modules():
        if isinstance(m, ConvStack):
            return m
    raise TypeError(f"{type(model).__name__} has no convolution layers (SSMEncoder / "
                    f"SGConvEncoder / FreeConvEncoder); kernel_decay needs an S4, S4D, DLR, SGConv "
                    f"or free-convolution model (built from an SSMConfig, SGConvConfig or "
                    f"FreeConvConfig); for any other layer stack use spt.analysis.receptive_field")


def abs_kernels(enc: ConvStack, L: int) -> np.ndarray:
    """(layer, channel, lag): max over directions of |K| of each layer's length-L kernels."""
    with torch.no_grad():
        return np.stack([k.abs().amax(dim=0).cpu().numpy() for k in enc.kernels(L)])


def kernel_array(values: np.ndarray, dims: tuple, name: str, long_name: str, enc: ConvStack,
                 which: str) -> xr.DataArray:
    """`values` over `dims` (coords 0..n-1 each) with the encoder's kind, init and config."""
    cfg = enc.cfg
    return xr.DataArray(
        values, dims=dims, coords={d: np.arange(n) for d, n in zip(dims, values.shape)},
        name=name, attrs={"which": which, "kind": cfg.kind, "init": cfg.init,
                          "long_name": long_name, "config": json.dumps(model_config_to_dict(cfg))})


def of_model(model: torch.nn.Module, fn):
    """fn(encoder) on the convolution stack of `model` in eval mode; the encoder's mode is restored."""
    enc = find_ssm_encoder(model)
    was = enc.training
    enc.eval()
    try:
        return fn(enc)
    finally:
        enc.train(was)


def model_and_baseline(a: xr.DataArray, b: xr.DataArray) -> xr.Dataset:
    """Dataset {"model": a, "baseline": b} with the kind, config and baseline init as attrs."""
    ds = xr.Dataset({"model": a, "baseline": b})
    ds.attrs = {"kind": a.attrs["kind"], "config": a.attrs["config"],
                "baseline_init": b.attrs["init"]}
    return ds


def _decay(enc: ConvStack, L: int, which: str) -> xr.DataArray:
    return kernel_array(abs_kernels(enc, L).max(axis=1), ("layer", "lag"), "K_max",
                        "max over channels and directions of |K|", enc, which)


def kernel_decay(model: torch.nn.Module, L: int) -> xr.DataArray:
    """K_max of the model's current kernels: DataArray (layer, lag) of length-L kernels."""
    return of_model(model, lambda enc: _decay(enc, L, "model"))


def baseline_encoder(model_or_cfg, seed: int = 0) -> ConvStack:
    """A fresh stack (eval mode) with the config of `model_or_cfg` at its structured
    initialisation (a random-init SSM config gets its kind's structured default; SGConv and a free
    convolution: their own init), drawn with `seed` without touching the caller's random state:
    the baseline of the kernel analyses."""
    cfg = (model_or_cfg if isinstance(model_or_cfg, tuple(_CONV_CONFIGS))
           else find_ssm_encoder(model_or_cfg).cfg)
    if isinstance(cfg, SSMConfig) and cfg.is_random_init:
        cfg = replace(cfg, init=cfg.structured_init)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _CONV_CONFIGS[type(cfg)](cfg).eval()


def kernel_decay_baseline(model_or_cfg, L: int, seed: int = 0) -> xr.DataArray:
    """K_max of a fresh model with the same config at its structured initialisation (HiPPO-LegS for
    S4 / S4D-LegS, Lin or Inv as configured for S4D, "omega" for DLR; a random-init config gets its
    kind's structured default). Random parts of the init (C, dt) are drawn with `seed`."""
    return _decay(baseline_encoder(model_or_cfg, seed), L, "baseline")


def kernel_decay_comparison(model: torch.nn.Module, L: int, seed: int = 0) -> xr.Dataset:
    """Dataset with variables "model" and "baseline" (each K_max over (layer, lag))."""
    return model_and_baseline(kernel_decay(model, L), kernel_decay_baseline(model, L, seed))


# ------------------------------------------------------- per channel, and quantiles over channels

def _abs_per_channel(enc: ConvStack, L: int, which: str) -> xr.DataArray:
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
    :func:`kernel_decay_baseline`."""
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
                         f"(from spt.analysis.kernel_decay.kernel_abs); got dims {k_abs.dims}")
    qs = np.atleast_1d(np.asarray(q, dtype=float))
    if ((qs < 0) | (qs > 1)).any():
        raise ValueError(f"kernel_channel_quantiles: quantiles must be in [0, 1], got {list(qs)}")
    out = k_abs.quantile(qs, dim="channel")
    order = [d for d in k_abs.dims if d != "channel"]
    idx = k_abs.dims.index("channel")
    order.insert(idx, "quantile")
    return out.transpose(*order)
