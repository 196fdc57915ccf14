"""The layer stack of a mixer config (:mod:`spt.mixer_config`): pre-norm residual blocks.

    x = x + Dropout(mixer(LayerNorm(x) with pads zeroed))          every block
    x = x + Dropout(SwiGLU(LayerNorm(x)))                         then, when cfg.mlp_expand > 0
    LayerNorm(x)                                                  after the last block

Parameters: ``blocks.<i>.mix.layer.*`` the mixer's, ``blocks.<i>.mix.norm.*`` its norm,
``blocks.<i>.mlp.*`` the MLP's, ``norm.*`` the final norm. One block per layer, so the explorers'
per-layer views (:func:`spt.analysis.receptive_field.layer_profiles`) see mixer and MLP together.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..dropout import Dropout
from ..stack import NormedStack
from ..user_layers import LayerBlock, build_layer, import_layer


class SwiGLU(nn.Module):
    """x + Dropout(W_o(SiLU(W_a h) * W_b h)), h = LayerNorm(x); hidden width expand * D."""

    def __init__(self, d_model: int, expand: int, dropout: float):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, 2 * expand * d_model, bias=False)
        self.down = nn.Linear(expand * d_model, d_model, bias=False)
        self.drop = Dropout(dropout)

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        a, b = self.up(self.norm(x)).chunk(2, dim=-1)
        return x + self.drop(self.down(F.silu(a) * b))


class MixerBlock(nn.Module):
    """One layer: the mixer's residual block, then the MLP's (None: no MLP). (B, L, D) -> (B, L, D)."""

    def __init__(self, mix: LayerBlock, mlp: Optional[SwiGLU]):
        super().__init__()
        self.mix, self.mlp = mix, mlp

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = self.mix(x, valid)
        return x if self.mlp is None else self.mlp(x, valid)


class MixerStack(NormedStack):
    """n_layers blocks of the config's mixer (each followed by a SwiGLU block when mlp_expand > 0),
    then a LayerNorm. forward(x (B, L, D), valid (B, L) bool or None) -> (B, L, D)."""

    def __init__(self, cfg):
        cls = import_layer(cfg.layer)
        blocks = [MixerBlock(LayerBlock(build_layer(cls, cfg, cfg.causal), cfg.d_model, cfg.dropout),
                             SwiGLU(cfg.d_model, cfg.mlp_expand, cfg.dropout) if cfg.mlp_expand
                             else None)
                  for _ in range(cfg.n_layers)]
        super().__init__(blocks, cfg.d_model, cfg.causal)
