"""Pre-LayerNorm Transformer encoder blocks (causal or bidirectional)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn

from ..config import TransformerConfig
from .attention import Attention
from .dropout import Dropout
from .stack import NormedStack


class TransformerBlock(nn.Module):
    """x + Attn(LN(x)), then x + FF(LN(x)). x (B, L, d), valid (B, L) bool -> (B, L, d)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = Attention(cfg.d_model, cfg.n_heads, causal=cfg.causal, dropout=cfg.attn_dropout,
                              rotary=cfg.positions == "rotary", local_block=cfg.local_block,
                              reach=cfg.reach, alibi=cfg.positions == "alibi" or cfg.locality_bias)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(),
                                Dropout(cfg.dropout), nn.Linear(cfg.d_ff, cfg.d_model))
        self.drop = Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x), valid))
        return x + self.drop(self.ff(self.norm2(x)))


class TransformerEncoder(NormedStack):
    """A stack of pre-LN blocks followed by a final LayerNorm. (B, L, d) -> (B, L, d).

    causal : True when position t attends only to positions <= t (cfg.causal).
    grad_checkpointing : when True (set by TrainConfig.grad_checkpointing), training recomputes
    each block's activations in the backward pass instead of storing them (same gradients; the
    dropout masks are replayed from the saved RNG state).
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__((TransformerBlock(cfg) for _ in range(cfg.n_layers)), cfg.d_model,
                         cfg.causal)
