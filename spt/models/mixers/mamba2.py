"""Mamba-2's mixer (Dao & Gu 2024, "Transformers are SSMs: Generalized Models and Efficient
Algorithms Through Structured State Space Duality", Sec. 7 and Fig. 6), causal or bidirectional.

    z, xBC, dt = in_proj(u)                        z (B, L, E*D), xBC (B, L, E*D + 2N), dt (B, L, H)
    x, B, C = SiLU(ShortConv(xBC))                 causal depthwise, d_conv taps, over all three
    dt = softplus(dt + dt_bias);  A = -exp(A_log)  one step size and one decay per head
    y = ssd(x, dt, A, B, C, D)                     h_t = exp(dt A) h_{t-1} + dt x_t B_t^T,
                                                   y_t = h_t C_t + D x_t; H = E*D / head_dim heads
    out = out_proj(GatedRMSNorm(y, z))             RMSNorm(y * SiLU(z)) over all E*D channels

B and C are one group shared by every head (the paper's ngroups = 1), and the norm runs over the
whole inner width as Mamba-2's default. Initialisation as the authors': A = -U(1, 16) per head,
dt_bias = softplus^-1 of dt log-uniform in [dt_min, dt_max], D = 1; no weight decay on A_log, D
and dt_bias.

With causal=False the convolution, dt_bias, A_log and D exist once per direction (the second runs
over the reversed rows) and the two y's are summed before the gated norm; in_proj (which makes x,
B, C and dt for both directions) and out_proj are shared, as in :mod:`~spt.models.mixers.mamba`.
The SSD is :func:`spt.kernels.ssd.ssd` at the cores' path: spt's chunked block decomposition (no
loop over time), or mamba-ssm's ``mamba_chunk_scan_combined`` on CUDA where ``TrainConfig.paths``
measures it faster (:mod:`spt.kernels.paths`).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...kernels.ssd import ssd
from .common import (
    RECURRENCE_CANDIDATES,
    RECURRENCE_PATHS,
    GatedRMSNorm,
    ShortConv,
    both_ways,
    direction_count,
    no_weight_decay,
)
from .mamba import inverse_softplus, log_uniform_dt


class Mamba2Core(nn.Module):
    """One direction of a Mamba-2 mixer: conv -> SiLU -> SSD.
    (B, L, E*D + 2N + H) holding (x, B, C, dt) -> y (B, L, E*D).

    ``path`` (:mod:`spt.kernels.paths`) is the recurrence's ``backend=``: "torch" (spt's own
    form, the reference) unless set; "library" is mamba-ssm's ``mamba_chunk_scan_combined`` on CUDA;
    "ref" is the loop over time.
    """

    path_kind = "ssd"
    paths = RECURRENCE_PATHS
    candidates = RECURRENCE_CANDIDATES

    def __init__(self, inner: int, d_state: int, head_dim: int, d_conv: int, dt_min: float,
                 dt_max: float):
        super().__init__()
        self.n_heads = inner // head_dim
        self.conv = ShortConv(inner + 2 * d_state, d_conv)
        self.dt_bias = nn.Parameter(inverse_softplus(log_uniform_dt(self.n_heads, dt_min, dt_max)))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.n_heads).uniform_(1.0, 16.0)))
        self.D = nn.Parameter(torch.ones(self.n_heads))
        no_weight_decay(self.A_log, self.D, self.dt_bias)
        self.sizes = (inner, d_state, d_state)
        self.path = "torch"

    def forward(self, u: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
        xBC, dt = u.split((sum(self.sizes), self.n_heads), dim=-1)
        x, B, C = F.silu(self.conv(xBC)).split(self.sizes, dim=-1)
        x = x.unflatten(-1, (self.n_heads, -1))                       # (B, L, H, P)
        dt = F.softplus(dt + self.dt_bias)
        A = -torch.exp(self.A_log.float())
        return ssd(x, dt, A, B, C, self.D, valid=valid, backend=self.path).flatten(-2)


class Mamba2(nn.Module):
    """Mamba-2's mixer (module docstring). forward(x (B, L, D), valid (B, L) bool or None) -> (B, L, D).

    d_state : N; expand : E; head_dim : P channels per head (P must divide E*D); d_conv :
    convolution taps; dt_min, dt_max : range of the initial step sizes. Parameters ``in_proj``,
    ``norm``, ``out_proj`` and per direction ``cores.<k>.{conv, dt_bias, A_log, D}`` (k = 1: the
    reversed direction).
    Every value comes from :class:`spt.mixer_config.Mamba2Config`, where the authors' defaults are
    stated (this class has none): ``mixer_layer(Mamba2Config(d_model=64))``
    (:func:`spt.models.mixers.stack.mixer_layer`).
    """

    def __init__(self, d_model: int, causal: bool, *, d_state: int, expand: int, head_dim: int,
                 d_conv: int, dt_min: float, dt_max: float):
        super().__init__()
        inner = expand * d_model
        if inner % head_dim:
            raise ValueError(f"Mamba2: head_dim={head_dim} must divide expand * d_model = {inner}")
        self.causal = causal
        self.inner = inner
        n_heads = inner // head_dim
        self.in_proj = nn.Linear(d_model, 2 * inner + 2 * d_state + n_heads, bias=False)
        self.cores = nn.ModuleList(Mamba2Core(inner, d_state, head_dim, d_conv, dt_min, dt_max)
                                   for _ in range(direction_count(causal)))
        self.norm = GatedRMSNorm(inner)
        self.out_proj = nn.Linear(inner, d_model, bias=False)

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        z, xBCdt = self.in_proj(x).split((self.inner, self.in_proj.out_features - self.inner), dim=-1)
        y = both_ways(self.cores, xBCdt, valid)
        return self.out_proj(self.norm(y, z))
