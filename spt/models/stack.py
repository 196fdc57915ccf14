"""A stack of residual blocks followed by a final norm (LayerNorm unless told): the layer stack of
the Transformer, of a user's layers (:class:`~spt.models.user_layers.LayerStack`) and of the
mixers."""
from __future__ import annotations

from typing import Callable, Iterable, Optional

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


class NormedStack(nn.Module):
    """blocks, each (x (B, L, d), valid (B, L) bool or None) -> (B, L, d), then norm(d)
    (nn.LayerNorm unless another norm is given).

    causal : whether position t only sees positions <= t (a Backbone reads it).
    grad_checkpointing : when True (set by TrainConfig.grad_checkpointing), training recomputes
    each block's activations in the backward pass instead of storing them (same gradients; dropout
    masks are replayed from the saved RNG state).
    Parameters: ``blocks.<i>.*`` and ``norm.*``.
    """

    def __init__(self, blocks: Iterable[nn.Module], d_model: int, causal: bool,
                 norm: Callable[[int], nn.Module] = nn.LayerNorm):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm(d_model)
        self.causal = causal
        self.grad_checkpointing = False

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        ckpt = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            x = checkpoint(block, x, valid, use_reentrant=False) if ckpt else block(x, valid)
        return self.norm(x)
