"""Mamba's mixer (Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State
Spaces", Fig. 3 and Alg. 2), causal or bidirectional.

    x, z = in_proj(u)                                   (B, L, E*D) each
    x = SiLU(ShortConv(x))                              causal depthwise, d_conv taps
    dt, B, C = x_proj(x)                                dt (B, L, R) -> softplus(dt_proj(dt)) (B, L, E*D)
    y = selective_scan(x, dt, A, B, C, D)               h_t = exp(dt A) h_{t-1} + dt B_t x_t
    out = out_proj(y * SiLU(z))

With causal=False the convolution, x_proj, dt_proj, A and D exist once per direction (the second
runs over the reversed rows) and the two y's are summed before the gate; in_proj and out_proj are
shared. The scan is :func:`spt.kernels.scan.selective_scan` at the cores' path: spt's parallel
scan (no loop over time), or mamba-ssm's ``selective_scan_fn`` on CUDA where ``TrainConfig.paths``
measures it faster (:mod:`spt.kernels.paths`).
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...kernels.scan import selective_scan
from .common import (
    RECURRENCE_CANDIDATES,
    RECURRENCE_PATHS,
    ShortConv,
    both_ways,
    direction_count,
    no_weight_decay,
)


def inverse_softplus(y: torch.Tensor) -> torch.Tensor:
    """x with softplus(x) = y (y > 0)."""
    return y + torch.log(-torch.expm1(-y))


def log_uniform_dt(n: int, dt_min: float, dt_max: float) -> torch.Tensor:
    """n step sizes log-uniform in [dt_min, dt_max] (at least 1e-4), Mamba's dt initialisation."""
    dt = torch.exp(torch.rand(n) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    return dt.clamp(min=1e-4)


class MambaCore(nn.Module):
    """One direction of a Mamba mixer: conv -> SiLU -> selective SSM. (B, L, E*D) -> (B, L, E*D).

    ``path`` (:mod:`spt.kernels.paths`) is the recurrence's ``backend=``: "torch" (spt's own
    form, the reference) unless set; "library" is mamba-ssm's ``selective_scan_fn`` on CUDA;
    "ref" is the loop over time.
    """

    path_kind = "selective_scan"
    paths = RECURRENCE_PATHS
    candidates = RECURRENCE_CANDIDATES

    def __init__(self, inner: int, d_state: int, d_conv: int, dt_rank: int, dt_min: float,
                 dt_max: float):
        super().__init__()
        self.conv = ShortConv(inner, d_conv)
        self.x_proj = nn.Linear(inner, dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(dt_rank, inner)
        nn.init.uniform_(self.dt_proj.weight, -dt_rank ** -0.5, dt_rank ** -0.5)
        with torch.no_grad():
            self.dt_proj.bias.copy_(inverse_softplus(log_uniform_dt(inner, dt_min, dt_max)))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1.0)).repeat(inner, 1))
        self.D = nn.Parameter(torch.ones(inner))
        no_weight_decay(self.A_log, self.D, self.dt_proj.bias)
        self.sizes = (dt_rank, d_state, d_state)
        self.path = "torch"

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
        x = F.silu(self.conv(x))
        if valid is not None:  # pads feed nothing into the state
            x = x * valid[..., None].to(x.dtype)
        dt, B, C = self.x_proj(x).split(self.sizes, dim=-1)
        delta = F.softplus(self.dt_proj(dt))
        A = -torch.exp(self.A_log.float())
        return selective_scan(x, delta, A, B, C, self.D, backend=self.path)


class Mamba(nn.Module):
    """Mamba's mixer (module docstring). forward(x (B, L, D), valid (B, L) bool or None) -> (B, L, D).

    d_state : N per channel; expand : E; d_conv : convolution taps; dt_rank : R (0: ceil(D/16));
    dt_min, dt_max : range of the initial step sizes. Parameters ``in_proj``, ``out_proj`` and per
    direction ``cores.<k>.{conv, x_proj, dt_proj, A_log, D}`` (k = 1: the reversed direction).
    Every value comes from :class:`spt.mixer_config.MambaConfig`, where the authors' defaults are
    stated (this class has none): ``mixer_layer(MambaConfig(d_model=64))``
    (:func:`spt.models.mixers.stack.mixer_layer`).
    """

    def __init__(self, d_model: int, causal: bool, *, d_state: int, expand: int, d_conv: int,
                 dt_rank: int, dt_min: float, dt_max: float):
        super().__init__()
        self.causal = causal
        inner = expand * d_model
        dt_rank = dt_rank or math.ceil(d_model / 16)
        self.in_proj = nn.Linear(d_model, 2 * inner, bias=False)
        self.cores = nn.ModuleList(MambaCore(inner, d_state, d_conv, dt_rank, dt_min, dt_max)
                                   for _ in range(direction_count(causal)))
        self.out_proj = nn.Linear(inner, d_model, bias=False)

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        u, z = self.in_proj(x).chunk(2, dim=-1)
        y = both_ways(self.cores, u, valid)
        return self.out_proj(y * F.silu(z))
