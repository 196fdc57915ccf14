"""The effective receptive field (ERF) of any layer stack: how much an output depends on the input
``lag`` positions away, measured with autograd.

For a stack (or one block) ``y = f(x)``, x and y (B, L, D), the lag profile is

    erf[lag] = mean over random inputs x ~ N(0, 1), sampled output positions t and output
               channels c of  sum_c' | d y[t, c] / d x[t - lag, c'] |

(the L1 norm of row c of the d_model x d_model Jacobian block between output t and input t - lag:
no cancellation between channels, zero exactly where the output cannot see the input)

over the signed lags ``lag = t - s`` in [-(L-1), L-1]: positive lags look back (inputs before t),
negative lags look ahead (inputs after t), lag 0 is the position itself. Signed lags are kept
(not |lag|) so a causal model shows its zeros on negative lags and a bidirectional one both
sides; :func:`fold_lags` gives the profile over |lag| (max of the two sides, as K_max takes the
max over both kernel directions).

Why this measure: for a depthwise linear convolution (one S4 / S4D / DLR / SGConv layer's linear
part) ``y[t, c] = sum_s K_c[t - s] x[s, c] + D_c x[t, c]``, the derivative of y[t, c] with respect
to x[s, c'] is K_c[t - s] (+ D_c at lag 0) if c' = c and 0 otherwise, whatever x and t are, so
erf[lag] is exactly mean_c |K_c[lag]|: the per-channel kernel magnitude of
:mod:`spt.analysis.kernel_decay`, averaged instead of maximised over channels. For a
bidirectional layer, lag -m (m >= 1) reads the backward kernel at K[1, c, m - 1] (its lag 0 weighs
the next position, :func:`spt.kernels.fft_conv`). Through attention, LayerNorm, GELU or GLU the
derivative depends on x; averaging over random inputs and positions gives its typical size, and it
is exactly 0 wherever the output cannot see the input (beyond a local-attention window, ahead of a
causal model; up to FFT round-off for the convolutions).

Cost: every sampled (output position t, output channel c) pair gets its own copy of the
``n_samples`` random sequences in one batch, and one backward pass of the sum of the selected
outputs gives all their gradients (the rows of a batch are independent in eval mode); batches hold
at most ``max_batch`` rows. ``n_positions`` positions are evenly spaced and always include the
first and the last, so every lag is covered; ``n_channels`` output channels (default: all). The
module is run in eval mode (no dropout, BatchNorm's running statistics); its modes are restored
afterwards.

    prof = lag_profile(block, d_model=64, L=256)           # tensor (2L-1,), index lag + L - 1
    da = layer_profiles(model, d_model=64, L=256)          # DataArray (layer, lag), each block
    da.sel(layer=0).plot(yscale="log")                     # fed the input it sees in the stack
    whole = stack_profile(model, d_model=64, L=256)        # DataArray (lag,), the whole stack

Works for any module called as ``layers(x (B, L, D), None) -> (B, L, D)``: Transformer, SSM and
SGConv stacks and their blocks.
"""
from __future__ import annotations

import contextlib
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import xarray as xr


@contextlib.contextmanager
def _eval_mode(module: nn.Module):
    """Every submodule in eval mode inside the block; each one's own mode restored after."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield module
    finally:
        for m, was in modes:
            m.training = was


def _device_dtype(module: nn.Module) -> tuple[torch.device, torch.dtype]:
    p = next(module.parameters(), None)
    return (p.device, p.dtype) if p is not None else (torch.device("cpu"), torch.float32)


def random_inputs(module: nn.Module, d_model: int, L: int, n_samples: int,
                  seed: int) -> torch.Tensor:
    """x ~ N(0, 1) of shape (n_samples, L, d_model), drawn on the CPU with `seed` (the caller's
    random state is untouched), on the device and in the dtype of `module`'s parameters."""
    g = torch.Generator().manual_seed(seed)
    device, dtype = _device_dtype(module)
    return torch.randn(n_samples, L, d_model, generator=g, dtype=torch.float64).to(device, dtype)


def sampled_positions(L: int, n_positions: int) -> torch.Tensor:
    """min(n_positions, L) distinct output positions evenly spread over [0, L-1], both ends
    included (t = L-1 sees every lag >= 0, t = 0 every lag <= 0). (n,) long."""
    if n_positions < 2 and L > 1:
        raise ValueError(f"receptive field: n_positions must be >= 2 (the first and the last "
                         f"position cover every lag), got {n_positions}")
    return torch.linspace(0, L - 1, min(n_positions, L)).round().long().unique()


def lag_profile(layers: nn.Module, d_model: int, L: int, n_samples: int = 4,
                n_positions: int = 16, n_channels: Optional[int] = None, seed: int = 0,
                x: Optional[torch.Tensor] = None, max_batch: int = 256) -> torch.Tensor:
    """The ERF of `layers` by signed lag (see the module docstring).

    layers      : called as layers(x (B, L, d_model), None) -> (B, L, d_model); run in eval mode
                  (so the rows of a batch are independent).
    d_model     : width of its input and output.
    L           : sequence length.
    n_samples   : number of random input sequences x ~ N(0, 1) (drawn with `seed`).
    n_positions : number of output positions t (evenly spaced, both ends included).
    n_channels  : number of output channels c per position (drawn with `seed`); None: all of them.
    x           : optional input (n, L, d_model) instead of random ones (e.g. the input a block
                  sees inside its stack); n_samples is then n.
    max_batch   : at most this many rows per forward pass: every (t, c) gets its own copy of the
                  n inputs, so max_batch // n pairs are differentiated per pass.
    Returns a float64 tensor (2L-1,) on the CPU: entry lag + L - 1 is erf[lag], lag in
    [-(L-1), L-1].
    """
    if x is None:
        x = random_inputs(layers, d_model, L, n_samples, seed)
    if x.dim() != 3 or x.shape[1:] != (L, d_model):
        raise ValueError(f"lag_profile: input must be (n, L={L}, d_model={d_model}), "
                         f"got {tuple(x.shape)}")
    n = x.shape[0]
    positions = sampled_positions(L, n_positions)
    channels = torch.arange(d_model)
    if n_channels is not None and n_channels < d_model:
        g = torch.Generator().manual_seed(seed + 1)
        channels = torch.randperm(d_model, generator=g)[:n_channels].sort().values
    pairs = torch.cartesian_prod(positions, channels)                 # (P, 2): (t, c)
    total = torch.zeros(2 * L - 1, dtype=torch.float64)
    count = torch.zeros(2 * L - 1, dtype=torch.float64)
    s = torch.arange(L)
    k = max(1, max_batch // n)
    with _eval_mode(layers), torch.enable_grad():
        for chunk in pairs.split(k):
            m = chunk.shape[0]
            xb = x.detach().repeat(m, 1, 1).requires_grad_(True)      # row r: pair r // n
            y = layers(xb, None)
            if y.shape != xb.shape:
                raise ValueError(f"lag_profile: {type(layers).__name__} maps {tuple(xb.shape)} "
                                 f"to {tuple(y.shape)}; it must keep the shape (B, L, d_model)")
            t, c = (v.repeat_interleave(n).to(y.device) for v in chunk.unbind(1))
            (grad,) = torch.autograd.grad(y[torch.arange(m * n, device=y.device), t, c].sum(), xb)
            a = grad.detach().abs().sum(-1).double().cpu().view(m, n, L).mean(1)   # (m, L) by s
            idx = (chunk[:, :1] - s[None, :]) + (L - 1)                          # lag t - s
            total.index_add_(0, idx.flatten(), a.flatten())
            count.index_add_(0, idx.flatten(), torch.ones(idx.numel(), dtype=torch.float64))
    return total / count


def _lag_coord(L: int) -> np.ndarray:
    return np.arange(-(L - 1), L)


def _attrs(n_samples: int, n_positions: int, n_channels: Optional[int], seed: int,
           stack: nn.Module) -> dict:
    return {"long_name": "mean over inputs, t and c of sum_c' |d y[t, c] / d x[t - lag, c']|",
            "n_samples": n_samples, "n_positions": n_positions,
            "n_channels": -1 if n_channels is None else n_channels, "seed": seed,
            "layers": type(stack).__name__}


def find_layer_stack(model: nn.Module) -> nn.Module:
    """The layer stack of `model`: ``model.backbone.layers`` (a SequenceModel), or `model` itself
    when it has ``blocks`` (a Transformer, SSM or SGConv encoder)."""
    backbone = getattr(model, "backbone", None)
    if backbone is not None and hasattr(backbone, "layers"):
        return backbone.layers
    if hasattr(model, "blocks"):
        return model
    raise TypeError(f"{type(model).__name__} is neither a model with backbone.layers nor a layer "
                    f"stack with .blocks; pass the layer stack itself to lag_profile")


def layer_profiles(model: nn.Module, d_model: int, L: int, n_samples: int = 4,
                   n_positions: int = 16, n_channels: Optional[int] = None,
                   seed: int = 0) -> xr.DataArray:
    """The ERF of every block of `model`'s layer stack, each fed the input it sees in the stack.

    model : a SequenceModel or a layer stack with ``blocks`` (see :func:`find_layer_stack`).
    Block 0 gets x ~ N(0, 1) (n_samples, L, d_model); block i gets the output of blocks 0..i-1 on
    it (eval mode). The final norm of a pre-norm stack belongs to no block and is left out.
    Returns a DataArray "erf" (layer, lag) of shape (n_layers, 2L-1), lag in [-(L-1), L-1].
    """
    stack = find_layer_stack(model)
    x = random_inputs(stack, d_model, L, n_samples, seed)
    rows = []
    with _eval_mode(stack):
        for block in stack.blocks:
            rows.append(lag_profile(block, d_model, L, n_positions=n_positions,
                                    n_channels=n_channels, seed=seed, x=x).numpy())
            with torch.no_grad():
                x = block(x, None)
    return xr.DataArray(np.stack(rows), dims=("layer", "lag"),
                        coords={"layer": np.arange(len(rows)), "lag": _lag_coord(L)},
                        name="erf", attrs=_attrs(n_samples, n_positions, n_channels, seed, stack))


def stack_profile(model: nn.Module, d_model: int, L: int, n_samples: int = 4,
                  n_positions: int = 16, n_channels: Optional[int] = None,
                  seed: int = 0) -> xr.DataArray:
    """The ERF of the whole layer stack of `model` (final norm included): DataArray "erf" (lag,)."""
    stack = find_layer_stack(model)
    prof = lag_profile(stack, d_model, L, n_samples=n_samples, n_positions=n_positions,
                       n_channels=n_channels, seed=seed).numpy()
    return xr.DataArray(prof, dims=("lag",), coords={"lag": _lag_coord(L)}, name="erf",
                        attrs=_attrs(n_samples, n_positions, n_channels, seed, stack))


def fold_lags(da: xr.DataArray) -> xr.DataArray:
    """A signed-lag profile over |lag| (0..L-1): the max of lag and -lag, as K_max takes the max
    over both kernel directions. Other dims are kept."""
    L = int(da.lag.max()) + 1
    ahead = da.sel(lag=slice(-(L - 1), 0)).isel(lag=slice(None, None, -1))
    ahead = ahead.assign_coords(lag=-ahead.lag)
    back = da.sel(lag=slice(0, L - 1))
    return xr.concat([back, ahead], dim="side").max("side", keep_attrs=True)


def backbone_inputs(model: nn.Module, d_model: int, L: int, n_samples: int = 4, seed: int = 0,
                    inputs: Optional[torch.Tensor] = None) -> torch.Tensor:
    """What a SequenceModel's layer stack reads: x (n, L, d_model) = the backbone's positions (if it
    adds them outside the stack: sinusoidal / learned tables) applied to either x ~ N(0, 1) drawn
    with `seed`, or the backbone's encoding of real `inputs` ((n, L) token ids or (n, L, C) values,
    no masked positions). Without the positions a Transformer whose positions are added before its
    stack could not tell lags apart, and its profile would be flat by construction."""
    bb = model.backbone
    with torch.no_grad(), _eval_mode(bb):
        if inputs is None:
            x = random_inputs(bb.layers, d_model, L, n_samples, seed)
        else:
            x = bb.encoder(inputs, None)
        if bb.positions is not None:
            x = bb.positions(x)
    return x


def spt_profiles(checkpoint, inputs: Optional[torch.Tensor] = None, L: Optional[int] = None,
                 n_samples: int = 4, n_positions: int = 16, seed: int = 0,
                 trust_remote_code: bool = False) -> xr.DataArray:
    """What self-pretraining did to the receptive field: the whole layer stack's profile over |lag|
    (:func:`lag_profile`, folded with :func:`fold_lags`) at random initialisation and after SPT.

    checkpoint : a pretraining (or finetuning) best.pt, its run folder, or an spt hub folder.
    inputs     : real examples (n, L) ids or (n, L, C) values to measure on (e.g. validation
                 items of the task); None: x ~ N(0, 1) (see :func:`backbone_inputs`).
    L          : input length without `inputs` (default: the task's, capped at 1024).
    The "init" row is a freshly initialised model of the same config (seeded with `seed`): a draw
    from the distribution pretraining starts from, not necessarily its exact starting weights.
    Returns a DataArray "erf" (stage, lag) with stage in ("init", "spt") and lag 0..L-1; each row
    is normalised to sum 1 over lags, so rows of different overall gain compare in shape.
    trust_remote_code : needed (True) for a checkpoint whose layer class lives outside spt.
    """
    from ..config import ObjectiveConfig
    from ..data.task import TaskSpec
    from ..model_config import model_config_from_dict
    from ..models.model import classifier_model, pretraining_model
    from ..train.checkpoint import load_backbone, load_checkpoint

    ckpt = load_checkpoint(checkpoint, trust_remote_code=trust_remote_code)
    cfg = model_config_from_dict(ckpt["model_config"], where=ckpt.get("path"),
                                 written_by=ckpt.get("provenance"))
    spec = TaskSpec(**ckpt["spec"])
    L = int(inputs.shape[1]) if inputs is not None else (L or min(spec.seq_len, 1024))

    def build():
        if ckpt.get("objective"):
            return pretraining_model(cfg, spec, ObjectiveConfig(**ckpt["objective"]))
        return classifier_model(cfg, spec)

    torch.manual_seed(seed)
    fresh, trained = build(), build()
    load_backbone(trained, ckpt)
    rows = []
    for m in (fresh, trained):
        x = backbone_inputs(m, cfg.d_model, L, n_samples, seed, inputs)
        prof = lag_profile(m.backbone.layers, cfg.d_model, L, n_positions=n_positions, seed=seed,
                           x=x)
        rows.append(fold_lags(xr.DataArray(prof.numpy(), dims=("lag",),
                                           coords={"lag": _lag_coord(L)})))
    out = xr.concat([r / r.sum() for r in rows], dim="stage").assign_coords(stage=["init", "spt"])
    out.attrs.update(_attrs(x.shape[0], n_positions, None, seed, m.backbone.layers),
                     checkpoint=str(ckpt.get("path", checkpoint)), L=L,
                     inputs="task examples" if inputs is not None else "N(0, 1)")
    return out.rename("erf")
