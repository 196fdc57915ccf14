"""State-space layers: S4 (DPLR), S4D (diagonal, ZOH) and DLR blocks, and the stack of them.

    block(x) = x + Dropout(Out(Dropout(GELU(SSMConv(Norm(x)) + D * Norm(x)))))     (pre-norm)
             = Norm(x + ...)                                                        (post-norm)

``SSMConv`` convolves each of the H channels with its kernel K (n_dir, H, L): causal (n_dir = 1) or
bidirectional (a forward and a backward kernel, see :func:`spt.kernels.fft_conv`); Out is
Linear(H, 2H) + GLU (S4) or Linear(H, H) (DLR). B, L, H layout throughout. The kernels (S4, S4D,
DLR: their parameters, initialisations and optimiser hints) are in :mod:`spt.models.ssm_kernels`;
this module holds the blocks around them (:class:`ConvBlock`, :class:`SSMBlock`), their norms and
dropout, and the stacks (:class:`ConvStack`, :class:`SSMEncoder`).

Initialisations (``SSMConfig.init``): the kind's structured one (HiPPO-LegS, S4D-Lin / Inv, DLR
"omega"); "random_ssm" draws the stored state-space parameters (Lambda, P, B, C) from
N(0, random_std^2) and keeps the rest (log-uniform dt, linears, norms, D); "random" is the paper's
rule, every parameter ~ N(0, random_std^2): :class:`SSMEncoder` resets all of its own parameters
with :func:`spt.models.init.paper_random_init_` (and the full model, encoder and head included, is
reset where it is built: :func:`spt.models.init.apply_init_`).

The blocks' linear layers use the run's lr and weight decay (the kernels' optimiser hints: see
:mod:`spt.models.ssm_kernels`).
With ``cfg.tie_dropout`` a dropout mask is drawn once per example and channel and shared along the
sequence (the S4 code's tie_dropout).

Padding: padded positions (right padding, ``valid`` False) are zeroed before each convolution, so
the backward kernel of a bidirectional layer sees zeros there and real positions never depend on
padding. Causal layers have a recurrent step mode (:meth:`SSMEncoder.step`) equal to the
convolution.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from ..kernels import FFT_CONV_PATHS, fft_conv
from ..ssm_config import SSMConfig
from .dropout import Dropout
from .init import paper_random_init_
from .ssm_kernels import make_kernel


class TiedDropout(nn.Module):
    """Dropout of x (B, L, H) with one mask per example and channel, shared by all L positions."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand(x.shape[0], 1, x.shape[-1], device=x.device) >= self.p
        return x * keep.to(x.dtype) / (1.0 - self.p)


class MaskedBatchNorm(nn.BatchNorm1d):
    """BatchNorm over channels whose batch statistics use real positions only. x (..., H).

    With `valid` (...) bool, the batch mean and variance are weighted sums over the real positions
    (no boolean indexing: no host sync, no data-dependent shapes), the running statistics are
    updated as ``nn.BatchNorm1d`` updates them from those positions, and padded outputs are 0.
    """

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        if valid is None or x.dim() == 2:
            return super().forward(flat).reshape(x.shape)
        dt = torch.promote_types(x.dtype, torch.float32)            # statistics in >= float32
        w = valid.reshape(-1, 1).to(dt)                             # (N, 1): 1 on real positions
        xf = flat.to(dt)
        use_batch = self.training or self.running_mean is None
        if use_batch:
            n = w.sum()
            mean = (xf * w).sum(0) / n.clamp_min(1.0)               # (H,)
            var = (((xf - mean) ** 2) * w).sum(0) / n.clamp_min(1.0)  # biased, as BatchNorm uses
            if self.training and self.track_running_stats:
                self._update_running(mean, var, n)
        else:
            mean, var = self.running_mean.to(dt), self.running_var.to(dt)
        y = (xf - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            y = y * self.weight.to(dt) + self.bias.to(dt)
        return y.masked_fill(w == 0, 0.0).to(x.dtype).reshape(x.shape)

    @torch.no_grad()
    def _update_running(self, mean: torch.Tensor, var: torch.Tensor, n: torch.Tensor) -> None:
        """nn.BatchNorm1d's update (unbiased variance, momentum or cumulative average), on the
        device: the counts stay tensors."""
        self.num_batches_tracked.add_(1)
        if self.momentum is None:  # cumulative moving average
            f = 1.0 / self.num_batches_tracked.to(mean.dtype)
        else:
            f = self.momentum
        unbiased = var * (n / (n - 1).clamp_min(1.0))
        self.running_mean.mul_(1 - f).add_(f * mean.to(self.running_mean.dtype))
        self.running_var.mul_(1 - f).add_(f * unbiased.to(self.running_var.dtype))


class _LayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return super().forward(x)


def make_norm(cfg: SSMConfig) -> nn.Module:
    return _LayerNorm(cfg.d_model) if cfg.norm == "layer" else MaskedBatchNorm(cfg.d_model)


def cap_reach(k: torch.Tensor, reach: Optional[int]) -> torch.Tensor:
    """The kernel k (n_dir, H, L) with every lag past `reach` zeroed: output t then depends on
    inputs t - reach .. t (and .. t + reach with a backward kernel, whose index s weighs input
    t + s + 1). reach None: k unchanged. The range probe's truncated kernel."""
    if reach is None:
        return k
    lag = torch.arange(k.shape[-1], device=k.device)
    keep = torch.stack([lag <= reach, lag < reach])[:k.shape[0], None, :]  # (n_dir, 1, L)
    return k * keep.to(k.dtype)


class ConvBlock(nn.Module):
    """One residual block around a long convolution: norm -> (K * z + D z) -> GELU -> linear/GLU.
    forward(x (B, L, H), valid (B, L) or None) -> (B, L, H). The kernel module comes from
    ``kernel_fn(cfg, n_dir)`` and is called as ``kernel(L) -> (n_dir, H, L)`` (S4 / S4D / DLR
    here, SGConv in :mod:`spt.models.sgconv`, a free kernel in :mod:`spt.models.free_conv`).
    ``path`` is :func:`spt.kernels.fft_conv`'s backend: "torch" (autograd's backward, the
    reference) or "manual" (:mod:`spt.kernels.paths`)."""

    path_kind = "fft_conv"
    paths = FFT_CONV_PATHS
    path = "torch"

    def __init__(self, cfg, kernel_fn: Callable):
        super().__init__()
        H = cfg.d_model
        self.prenorm = cfg.prenorm
        self.norm = make_norm(cfg)
        self.kernel = kernel_fn(cfg, 1 if cfg.causal else 2)
        self.reach = getattr(cfg, "reach", None)
        self.D = nn.Parameter(torch.randn(H))
        self.act = nn.GELU()
        tied = getattr(cfg, "tie_dropout", False)
        self.drop = TiedDropout(cfg.dropout) if tied else Dropout(cfg.dropout)
        self.out = nn.Sequential(nn.Linear(H, 2 * H), nn.GLU()) if cfg.glu else nn.Linear(H, H)

    def _post(self, y: torch.Tensor) -> torch.Tensor:
        return self.drop(self.out(self.drop(self.act(y))))

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None,
                recompute: bool = False) -> torch.Tensor:
        """recompute: activation checkpointing of the convolution and output layers (the norm
        stays outside, so BatchNorm's running statistics are updated once)."""
        z = self.norm(x, valid) if self.prenorm else x
        if recompute:
            x = checkpoint(self._mix, x, z, valid, use_reentrant=False)
        else:
            x = self._mix(x, z, valid)
        return x if self.prenorm else self.norm(x, valid)

    def conv(self, z: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The linear part: K * z + D z, z (B, L, H) -> (B, L, H), padded positions of z zeroed
        first (zeros for both directions). Computed in float32 (float64 for float64 inputs)
        whatever the autocast state."""
        if valid is not None:
            z = z * valid[..., None].to(z.dtype)
        with torch.autocast(device_type=z.device.type, enabled=False):
            zf = z.float() if z.dtype != torch.float64 else z
            k = cap_reach(self.kernel(z.shape[1]), self.reach)
            return fft_conv(zf, k, skip=self.D, backend=self.path)

    def _mix(self, x: torch.Tensor, z: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
        """x + Out(GELU(K * z + D z)); z is the (normed) input, (B, L, H)."""
        return x + self._post(self.conv(z, valid).to(x.dtype))


class SSMBlock(ConvBlock):
    """One residual SSM block (a :class:`ConvBlock` with an S4 / S4D / DLR kernel), with a
    recurrent step mode for causal layers."""

    def __init__(self, cfg: SSMConfig):
        super().__init__(cfg, make_kernel)
        self.causal = cfg.causal
        self._step = None

    # ---- recurrent step mode (causal layers only)
    @torch.no_grad()
    def setup_step(self) -> None:
        if not self.causal:
            raise RuntimeError("step mode needs a causal SSM layer (SSMConfig.causal=True); a "
                               "bidirectional layer looks at future positions")
        if self.reach is not None:
            raise RuntimeError("step mode runs the full recurrence: a layer with a capped reach "
                               "(SSMConfig.reach) has no recurrent form; use the convolution")
        self._step = self.kernel.discrete()

    def default_state(self, batch: int) -> torch.Tensor:
        if self._step is None:
            raise RuntimeError("call setup_step() before stepping (and again after any update)")
        Bb = self._step[1]
        return torch.zeros(batch, *Bb.shape, dtype=Bb.dtype, device=Bb.device)

    def step(self, x: torch.Tensor, state: torch.Tensor):
        """One position: x (B, H), state (B, H, S) -> (B, H), new state."""
        Ab, Bb, C, scale = self._step
        z = self.norm(x) if self.prenorm else x
        u = z.to(Bb.dtype)[..., None]
        if Ab.dim() == 3:
            state = torch.einsum("hij,bhj->bhi", Ab, state) + Bb * u
        else:
            state = Ab * state + Bb * u
        y = scale * (C[0] * state).sum(-1).real.to(z.dtype) + z * self.D
        x = x + self._post(y)
        return (x if self.prenorm else self.norm(x)), state


class ConvStack(nn.Module):
    """A stack of convolution blocks (+ a final norm when pre-norm). (B, L, H) -> (B, L, H).

    forward(x (B, L, H), valid (B, L) bool or None) -> (B, L, H); a Backbone's ``layers``.
    causal : True when each convolution only looks back (cfg.causal).
    grad_checkpointing : when True (set by TrainConfig.grad_checkpointing), training recomputes
    each block's convolution in the backward pass instead of storing its activations.
    """

    def __init__(self, cfg, block: Callable):
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(block(cfg) for _ in range(cfg.n_layers))
        self.norm = make_norm(cfg) if cfg.prenorm else None
        self.causal = cfg.causal
        self.grad_checkpointing = False

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        ckpt = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            x = block(x, valid, recompute=ckpt)
        return self.norm(x, valid) if self.norm is not None else x

    @torch.no_grad()
    def kernels(self, L: int) -> list[torch.Tensor]:
        """The convolution kernel of every layer: a list of (n_dir, H, L) float tensors, copies
        that need no gradient (a free kernel, :mod:`spt.models.free_conv`, is a slice of its
        parameter: a view of it would still require grad and share its storage)."""
        return [cap_reach(block.kernel(L), block.reach).float().clone() for block in self.blocks]


class SSMEncoder(ConvStack):
    """A stack of :class:`SSMBlock` (+ a final norm when pre-norm). (B, L, H) -> (B, L, H).

    With ``cfg.init == "random"`` every parameter of the stack (norms, dt, state-space parameters,
    D, output linears) is reset to N(0, cfg.random_std^2) after construction (the paper's rule;
    see :mod:`spt.models.init`).
    """

    def __init__(self, cfg: SSMConfig):
        super().__init__(cfg, SSMBlock)
        if cfg.init == "random":
            paper_random_init_(self, cfg.random_std)

    def setup_step(self) -> None:
        """Freeze the discretised matrices for :meth:`step` (call again after parameter updates)."""
        for block in self.blocks:
            block.setup_step()

    def default_state(self, batch: int) -> list[torch.Tensor]:
        return [block.default_state(batch) for block in self.blocks]

    def step(self, x: torch.Tensor, states: list[torch.Tensor]):
        """Recurrent mode, one position: x (B, H) -> (B, H), new states. Equals forward() of a
        causal encoder position by position (in eval mode)."""
        new = []
        for block, s in zip(self.blocks, states):
            x, s = block.step(x, s)
            new.append(s)
        return (self.norm(x) if self.norm is not None else x), new

