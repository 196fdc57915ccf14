"""Gated linear attention's mixer (Yang, Wang, Shen, Panda & Kim, "Gated Linear Attention
Transformers with Hardware-Efficient Training", ICML 2024, section 4.4), causal or bidirectional;
fla's ``GatedLinearAttention`` layer at its defaults (no short convolution, no feature map).

    q, k, v = q_proj(x), k_proj(x), v_proj(x)        (B, L, H, K), (B, L, H, K), (B, L, H, V)
    g = logsigmoid(W2 W1 x + b) / gate_norm          (B, L, H, K): the log forget gate, rank gate_rank
    o = gla(q, k, v, g)                              S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,
                                                     o_t = S_t^T q_t K^-0.5
    o = RMSNorm_head(o) * SiLU(g_proj(x))            per head, learned scale (fla's FusedRMSNormGated)
    out = o_proj(o)

K = expand_k * D / H and V = expand_v * D / H per head. With causal=False the forget-gate
projection (W1, W2, b) and the recurrence exist once per direction (the second runs over the
reversed rows) and the two o's are summed before the norm; q_proj, k_proj, v_proj, g_proj, the
norm and o_proj are shared. The recurrence is :func:`spt.kernels.gla.gla` at the cores' path: spt's
chunked form (no loop over time), or fla's ``chunk_gla`` on CUDA where ``TrainConfig.paths``
measures it faster (:mod:`spt.kernels.paths`).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...kernels.gla import gla
from .common import RECURRENCE_CANDIDATES, RECURRENCE_PATHS, GatedRMSNorm, both_ways, direction_count


class GLACore(nn.Module):
    """One direction of a GLA mixer: the low-rank forget gate and the recurrence.
    u = [x, q, k, v] (B, L, D + 2 H K + H V) -> o (B, L, H V), before the norm.

    ``path`` (:mod:`spt.kernels.paths`) is the recurrence's ``backend=``: "torch" (spt's own
    form, the reference) unless set; "library" is fla's ``chunk_gla`` on CUDA;
    "ref" is the loop over time.
    """

    path_kind = "gla"
    paths = RECURRENCE_PATHS
    candidates = RECURRENCE_CANDIDATES

    def __init__(self, d_model: int, n_heads: int, key_dim: int, value_dim: int, gate_rank: int,
                 gate_norm: float):
        super().__init__()
        self.gk_proj = nn.Sequential(nn.Linear(d_model, gate_rank, bias=False),
                                     nn.Linear(gate_rank, key_dim))
        self.n_heads, self.gate_norm = n_heads, gate_norm
        self.sizes = (d_model, key_dim, key_dim, value_dim)
        self.path = "torch"

    def forward(self, u: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
        x, q, k, v = u.split(self.sizes, dim=-1)
        g = F.logsigmoid(self.gk_proj(x)) / self.gate_norm
        q, k, v, g = (t.unflatten(-1, (self.n_heads, -1)) for t in (q, k, v, g))
        return gla(q, k, v, g, valid, backend=self.path).flatten(-2)


class GLA(nn.Module):
    """GLA's mixer (module docstring). forward(x (B, L, D), valid (B, L) bool or None) -> (B, L, D).

    n_heads : H; expand_k, expand_v : key and value widths expand_k * D, expand_v * D (over all
    heads); gate_rank : the forget gate's rank; gate_norm : the divisor of its logsigmoid (16: the
    gates start near 1, slow forgetting). Parameters: ``q_proj``, ``k_proj``, ``v_proj``, ``g_proj``
    (the output gate) and ``o_proj`` as fla names them, ``norm`` (fla's ``g_norm``: RMSNorm per head
    then the gate, one scale shared by the heads), and per direction ``cores.<k>.gk_proj`` (k = 1:
    the reversed direction).
    Every value comes from :class:`spt.mixer_config.GLAConfig`, where the authors' defaults are
    stated (this class has none): ``mixer_layer(GLAConfig(d_model=64))``
    (:func:`spt.models.mixers.stack.mixer_layer`).
    """

    def __init__(self, d_model: int, causal: bool, *, n_heads: int, expand_k: float,
                 expand_v: float, gate_rank: int, gate_norm: float):
        super().__init__()
        key_dim, value_dim = d_model * expand_k, d_model * expand_v
        for name, width in (("expand_k", key_dim), ("expand_v", value_dim)):
            if width != int(width) or width < n_heads or int(width) % n_heads:
                raise ValueError(f"GLA: {name} * d_model = {width} must be a whole multiple of "
                                 f"n_heads={n_heads}; change {name}, d_model or n_heads")
        key_dim, value_dim = int(key_dim), int(value_dim)
        self.n_heads = n_heads
        self.q_proj = nn.Linear(d_model, key_dim, bias=False)
        self.k_proj = nn.Linear(d_model, key_dim, bias=False)
        self.v_proj = nn.Linear(d_model, value_dim, bias=False)
        self.g_proj = nn.Linear(d_model, value_dim, bias=False)
        self.cores = nn.ModuleList(GLACore(d_model, n_heads, key_dim, value_dim, gate_rank, gate_norm)
                                   for _ in range(direction_count(causal)))
        self.norm = GatedRMSNorm(value_dim // n_heads, norm_before_gate=True)
        self.o_proj = nn.Linear(value_dim, d_model, bias=False)

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        u = torch.cat([x, self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)
        o = both_ways(self.cores, u, valid).unflatten(-1, (self.n_heads, -1))   # (B, L, H, V)
        o = self.norm(o, self.g_proj(x).unflatten(-1, (self.n_heads, -1)))
        return self.o_proj(o.flatten(-2))
