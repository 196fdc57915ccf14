"""The layer stack of a mixer config (:mod:`spt.mixer_config`): pre-norm residual blocks.

    x = x + Dropout(mixer(Norm(x) with pads zeroed))              every block
    x = x + Dropout(SwiGLU(Norm(x)))                              then, when cfg.mlp_expand > 0
    Norm(x)                                                       after the last block

Norm is cfg.block_norm's: RMSNorm (eps cfg.rms_eps, a scale and no bias: mamba-ssm's and fla's
blocks) or LayerNorm. Parameters: ``blocks.<i>.mix.layer.*`` the mixer's, ``blocks.<i>.mix.norm.*``
its norm, ``blocks.<i>.mlp.*`` the MLP's, ``norm.*`` the final norm. One block per layer, so the
explorers' per-layer views (:func:`spt.analysis.receptive_field.layer_profiles`) see mixer and
MLP together.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...mixer_config import mlp_width
from ..dropout import Dropout
from ..stack import NormedStack
from ..user_layers import LayerBlock, build_layer, import_layer


def block_norm(cfg) -> Callable[[int], nn.Module]:
    """The norm of a mixer config's blocks, as a function of the width."""
    if cfg.block_norm == "rms":
        return functools.partial(nn.RMSNorm, eps=cfg.rms_eps)
    return nn.LayerNorm


class SwiGLU(nn.Module):
    """x + Dropout(W_o(SiLU(W_a h) * W_b h)), h = Norm(x); hidden width `hidden` (fla's GatedMLP).
    norm : builds the norm from the width (nn.LayerNorm unless given)."""

    def __init__(self, d_model: int, hidden: int, dropout: float,
                 norm: Callable[[int], nn.Module] = nn.LayerNorm):
        super().__init__()
        self.norm = norm(d_model)
        self.up = nn.Linear(d_model, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)
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


def mixer_layer(cfg) -> nn.Module:
    """One mixer layer as the config `cfg` builds it (what each block of :class:`MixerStack` holds):
    the layer takes every value from the config, whose defaults are its authors'.
    (B, L, D) -> (B, L, D)."""
    return build_layer(import_layer(cfg.layer), cfg, cfg.causal)


class MixerStack(NormedStack):
    """n_layers blocks of the config's mixer (each followed by a SwiGLU block of
    :func:`~spt.mixer_config.mlp_width` when mlp_expand > 0), then the final norm.
    forward(x (B, L, D), valid (B, L) bool or None) -> (B, L, D)."""

    def __init__(self, cfg):
        norm, hidden = block_norm(cfg), mlp_width(cfg)
        blocks = [MixerBlock(LayerBlock(mixer_layer(cfg), cfg.d_model, cfg.dropout, norm),
                             SwiGLU(cfg.d_model, hidden, cfg.dropout, norm) if hidden else None)
                  for _ in range(cfg.n_layers)]
        super().__init__(blocks, cfg.d_model, cfg.causal, norm)
