"""Multi-head self-attention: the layer. Its computation, and the paths it can take (torch's SDPA,
flash-attn, FlexAttention, a dense mask, the plain reference), are :mod:`spt.kernels.attention`.

Full attention, or with ``local_block=W`` neighbour-block local attention (the paper's choice for
inputs of 16K+ tokens), or with ``reach=w`` banded attention (the range probe's cap); ALiBi's
fixed bias with ``alibi=True``. ``self.path`` is the path it runs (:mod:`spt.kernels.paths`):
"torch" unless set by :func:`spt.kernels.paths.set_paths` or measured by ``TrainConfig.paths``.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn

from ..kernels.attention import (
    ATTENTION_PATHS,
    FLASH_AVAILABLE,  # noqa: F401  (public here: whether flash-attn imports)
    alibi_bias,  # noqa: F401  (public here too)
    attention_ref,  # noqa: F401  (public here too)
    flash_unavailable,
    full_attention,
    local_attention,
)
from .positions import alibi_slopes, apply_rotary


class Attention(nn.Module):
    """Multi-head self-attention. x (B, L, d_model), valid (B, L) bool -> (B, L, d_model).

    rotary : rotate q and k by position (Su et al. 2021).
    alibi  : add the fixed bias -m_h |i - j| to each head's scores (Press et al. 2022); no
             parameters, the slopes are recomputed from n_heads.
    local_block, reach : neighbour-block local / banded attention (:mod:`spt.kernels.attention`).
    """

    path_kind = "attention"
    paths = ATTENTION_PATHS

    def __init__(self, d_model: int, n_heads: int, *, causal: bool = False, dropout: float = 0.0,
                 rotary: bool = False, local_block: Optional[int] = None,
                 reach: Optional[int] = None, alibi: bool = False):
        super().__init__()
        self.n_heads, self.causal, self.dropout = n_heads, causal, dropout
        self.rotary, self.local_block = rotary, local_block
        self.reach, self.alibi = reach, alibi
        self.path = "torch"
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    @property
    def local(self) -> bool:
        """Whether it can run a neighbour-block (or banded) pattern."""
        return self.reach is not None or self.local_block is not None

    @property
    def candidates(self) -> tuple:
        """The paths worth measuring: flash-attn for full attention, FlexAttention and the dense
        mask for local attention (each beside the reference)."""
        return ("torch", "flex", "dense") if self.local else ("torch", "library")

    def path_unavailable(self, path: str, x: torch.Tensor, valid=None) -> Optional[str]:
        """Why `path` cannot run a training step on inputs like `x` here (None: it can)."""
        if path == "library":
            q = x.to(torch.get_autocast_dtype(x.device.type)) if torch.is_autocast_enabled(
                x.device.type) else x
            return flash_unavailable(q)
        if path == "flex":
            if self.dropout > 0:
                return "FlexAttention takes no attention dropout (attn_dropout > 0)"
            if x.device.type == "cpu":
                return "torch has no FlexAttention backward on the CPU"
        return None

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, L, d = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.rotary:
            q, k = apply_rotary(q), apply_rotary(k)
        p = self.dropout if self.training else 0.0
        slopes = alibi_slopes(self.n_heads, q.device) if self.alibi else None
        if self.reach is not None:
            y = local_attention(q, k, v, max(self.reach, 1), valid, self.causal, p, self.path,
                                band=self.reach, slopes=slopes)
        elif self.local_block is not None and L > self.local_block:
            y = local_attention(q, k, v, self.local_block, valid, self.causal, p, self.path,
                                slopes=slopes)
        else:
            y = full_attention(q, k, v, valid, self.causal, p, self.path, slopes)
        return self.out(y.transpose(1, 2).reshape(B, L, d))
