"""Parts the mixers share: a short causal convolution, running a causal core both ways, the gated
RMSNorm of Mamba-2 and Gated DeltaNet, and the no-weight-decay hint.

Bidirectional mixers (causal=False) keep one input and one output projection and run a causal
core per direction, the second over each row reversed within its valid length
(:func:`spt.models.user_layers.reverse_valid`, so right padding stays at the end), and sum them.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...kernels.library import RECURRENCE_PATHS  # noqa: F401  (the cores' paths: public here)
from ..user_layers import reverse_valid

# what TrainConfig.paths="auto" measures for a recurrence core: spt's form and the library
# kernel; the loop over time ("ref") is the tests' oracle
RECURRENCE_CANDIDATES = ("torch", "library")


def no_weight_decay(*params: nn.Parameter, lr_scale: Optional[float] = None) -> None:
    """Mark parameters (A, dt, decay rates, skip D) as not decayed: the optimiser hint of
    :mod:`spt.train.optim`, as the mixers' authors exclude them; with lr_scale, they also train at
    that multiple of the run's learning rate."""
    for p in params:
        p._optim = {**getattr(p, "_optim", {}), "weight_decay": 0.0}
        if lr_scale is not None:
            p._optim["lr_scale"] = lr_scale


class ShortConv(nn.Module):
    """Causal depthwise convolution of `width` taps over (B, L, C) -> (B, L, C), with a bias unless
    bias=False. Output t reads inputs t - width + 1 .. t (zeros before the start)."""

    def __init__(self, channels: int, width: int, bias: bool = True):
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, width, groups=channels, padding=width - 1,
                              bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.transpose(1, 2))[..., :x.shape[1]].transpose(1, 2)


def both_ways(cores: nn.ModuleList, u: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
    """cores[0](u, valid), plus, with a second core, that core over the reversed rows (reversed
    back): one core is causal, two see both sides. u (B, L, C) -> (B, L, C')."""
    y = cores[0](u, valid)
    if len(cores) > 1:
        y = y + reverse_valid(cores[1](reverse_valid(u, valid), valid), valid)
    return y


def direction_count(causal: bool) -> int:
    return 1 if causal else 2


class GatedRMSNorm(nn.Module):
    """RMSNorm(y * SiLU(z)) over the last dim (groups of `group` channels), with a learned scale:
    Mamba-2's output norm; with norm_before_gate=True RMSNorm(y) * SiLU(z), Gated DeltaNet's (fla's
    FusedRMSNormGated). y, z (..., C) -> (..., C)."""

    def __init__(self, channels: int, group: Optional[int] = None, eps: float = 1e-5,
                 norm_before_gate: bool = False):
        super().__init__()
        self.group = group or channels
        self.weight = nn.Parameter(torch.ones(channels))
        self.eps = eps
        self.norm_before_gate = norm_before_gate

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        h = y if self.norm_before_gate else y * F.silu(z)
        g = h.unflatten(-1, (-1, self.group))
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)
        out = g.flatten(-2) * self.weight
        return out * F.silu(z) if self.norm_before_gate else out
