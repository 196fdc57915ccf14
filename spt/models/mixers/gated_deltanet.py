"""Gated DeltaNet's mixer (Yang, Kautz & Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with
Delta Rule", ICLR 2025, Fig. 1; as fla's ``GatedDeltaNet`` layer builds it), causal or
bidirectional. H heads of key width K and value width V = expand_v * K:

    q, k, v = q_proj(x), k_proj(x), v_proj(x)                   (B, L, H*K), (.., H*K), (.., H*V)
    q, k, v = SiLU(ShortConv(.)) each                           causal depthwise, d_conv taps
    q, k = q / |q|, k / |k|                                     per head
    beta = sigmoid(b_proj(x))                                   (B, L, H)
    g = -exp(A_log) * softplus(a_proj(x) + dt_bias)             (B, L, H), log of the decay alpha
    o = gated_delta_rule(q, k, v, g, beta)                      (B, L, H, V), q scaled 1/sqrt(K)
    out = o_proj(RMSNorm(o) * SiLU(g_proj(x)))                  RMSNorm per head, scale shared

A_log = log U(0, 16) and dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 0.1] (Mamba-2's), one
per head, without weight decay. The short convolutions carry a bias only with conv_bias=True (fla's
default has none). Heads: :func:`spt.mixer_authors.gated_deltanet_heads` (head_dim 256 with
n_heads 0: the width sets the head count, key width about 0.75 D, fla's rule).

With causal=False the split follows Mamba's: q_proj, k_proj, v_proj, g_proj, o_proj and the norm
exist once; each direction has its own convolutions, a_proj, b_proj, A_log and dt_bias (the second
direction runs over the reversed rows), and the two directions' o are summed before the norm.
The rule is :func:`spt.kernels.delta_rule.gated_delta_rule` at the cores' path: spt's chunked form,
or fla's (flash-linear-attention's) ``chunk_gated_delta_rule`` on CUDA where ``TrainConfig.paths``
measures it faster (:mod:`spt.kernels.paths`).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...kernels.delta_rule import gated_delta_rule
from ...mixer_authors import gated_deltanet_heads
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


def l2_normalise(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(|x|^2 + eps) over the last dim (fla's l2norm)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


class GatedDeltaNetCore(nn.Module):
    """One direction: convs -> SiLU -> L2 norm, beta and the decay, the gated delta rule.
    forward(u (B, L, H*K + H*K + H*V + D): q, k, v before their convs and x, valid) -> (B, L, H, V).

    ``path`` (:mod:`spt.kernels.paths`) is the recurrence's ``backend=``: "torch" (spt's own
    form, the reference) unless set; "library" is fla's ``chunk_gated_delta_rule`` on CUDA;
    "ref" is the loop over time.
    """

    path_kind = "gated_delta_rule"
    paths = RECURRENCE_PATHS
    candidates = RECURRENCE_CANDIDATES

    def __init__(self, d_model: int, n_heads: int, head_k: int, head_v: int, d_conv: int,
                 conv_bias: bool):
        super().__init__()
        self.heads = n_heads
        self.sizes = (n_heads * head_k, n_heads * head_k, n_heads * head_v, d_model)
        self.q_conv, self.k_conv, self.v_conv = (ShortConv(c, d_conv, conv_bias)
                                                 for c in self.sizes[:3])
        self.a_proj = nn.Linear(d_model, n_heads, bias=False)
        self.b_proj = nn.Linear(d_model, n_heads, bias=False)
        self.A_log = nn.Parameter(torch.log(torch.empty(n_heads).uniform_(0, 16).clamp(min=1e-4)))
        self.dt_bias = nn.Parameter(inverse_softplus(log_uniform_dt(n_heads, 0.001, 0.1)))
        no_weight_decay(self.A_log, self.dt_bias)
        self.path = "torch"

    def forward(self, u: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
        q, k, v, x = u.split(self.sizes, dim=-1)
        q, k, v = (F.silu(conv(t)).unflatten(-1, (self.heads, -1))
                   for conv, t in ((self.q_conv, q), (self.k_conv, k), (self.v_conv, v)))
        q, k = l2_normalise(q), l2_normalise(k)
        beta = torch.sigmoid(self.b_proj(x))
        g = -torch.exp(self.A_log.float()) * F.softplus(self.a_proj(x).float() + self.dt_bias)
        return gated_delta_rule(q, k, v, g, beta, valid, backend=self.path)


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet's mixer (module docstring). forward(x (B, L, D), valid (B, L) bool or None)
    -> (B, L, D).

    n_heads : H (0: as many heads of head_dim as make H K closest to 0.75 D, at least one);
    head_dim : key width K per head (0: D / H); expand_v : V = expand_v * K; d_conv : convolution
    taps; conv_bias : a bias on the convolutions. Parameters ``q_proj``, ``k_proj``, ``v_proj``, ``g_proj``,
    ``o_proj``, ``norm`` and per direction ``cores.<k>.{q_conv, k_conv, v_conv, a_proj, b_proj,
    A_log, dt_bias}`` (k = 1: the reversed direction).
    Every value comes from :class:`spt.mixer_config.GatedDeltaNetConfig`, where the authors' defaults are
    stated (this class has none): ``mixer_layer(GatedDeltaNetConfig(d_model=64))``
    (:func:`spt.models.mixers.stack.mixer_layer`).
    """

    def __init__(self, d_model: int, causal: bool, *, n_heads: int, head_dim: int, expand_v: int,
                 d_conv: int, conv_bias: bool):
        super().__init__()
        if not n_heads and not head_dim:
            raise ValueError("GatedDeltaNet: give n_heads or head_dim (both are 0)")
        if not head_dim and d_model % n_heads:
            raise ValueError(f"GatedDeltaNet: n_heads={n_heads} must divide d_model={d_model} "
                             f"(or give head_dim)")
        self.causal = causal
        n_heads, head_k = gated_deltanet_heads(d_model, n_heads, head_dim)
        head_v = expand_v * head_k
        self.heads = n_heads
        self.q_proj = nn.Linear(d_model, n_heads * head_k, bias=False)
        self.k_proj = nn.Linear(d_model, n_heads * head_k, bias=False)
        self.v_proj = nn.Linear(d_model, n_heads * head_v, bias=False)
        self.g_proj = nn.Linear(d_model, n_heads * head_v, bias=False)
        self.cores = nn.ModuleList(GatedDeltaNetCore(d_model, n_heads, head_k, head_v, d_conv,
                                                     conv_bias)
                                   for _ in range(direction_count(causal)))
        self.norm = GatedRMSNorm(head_v, norm_before_gate=True)
        self.o_proj = nn.Linear(n_heads * head_v, d_model, bias=False)

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        u = torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x), x], dim=-1)
        o = both_ways(self.cores, u, valid)                                  # (B, L, H, V)
        gate = self.g_proj(x).unflatten(-1, (self.heads, -1))
        return self.o_proj(self.norm(o.to(x.dtype), gate).flatten(-2))
