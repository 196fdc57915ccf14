"""Input encoders (tokens or continuous values + mask channel), sequence pooling, output heads."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn


class TokenEncoder(nn.Module):
    """ids (B, L) long -> (B, L, d). `masked` is ignored: masked ids are already <mask> tokens."""

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, inputs: torch.Tensor, masked: Optional[torch.Tensor] = None) -> torch.Tensor:
        if inputs.dtype not in (torch.long, torch.int32, torch.int64):
            raise TypeError(f"token model got inputs of dtype {inputs.dtype}; expected integer ids")
        return self.embed(inputs)


class ContinuousEncoder(nn.Module):
    """values (B, L, C) float + masked (B, L) bool -> (B, L, d).

    A binary mask channel is always appended (all zeros when nothing is masked), so the pretrained,
    finetuned and from-scratch models have identical parameters.
    """

    def __init__(self, d_input: int, d_model: int):
        super().__init__()
        self.d_input = d_input
        self.proj = nn.Linear(d_input + 1, d_model)

    def forward(self, inputs: torch.Tensor, masked: Optional[torch.Tensor] = None) -> torch.Tensor:
        if inputs.dim() == 2:
            inputs = inputs[..., None]
        if inputs.shape[-1] != self.d_input:
            raise ValueError(f"continuous model expects {self.d_input} input channels, "
                             f"got inputs of shape {tuple(inputs.shape)}")
        flag = torch.zeros_like(inputs[..., :1]) if masked is None else masked[..., None].to(inputs.dtype)
        return self.proj(torch.cat([inputs, flag], dim=-1))


def pool(h: torch.Tensor, valid: Optional[torch.Tensor], how: str) -> torch.Tensor:
    """Pool h (B, L, d) over real positions only -> (B, d). how: "mean" | "max" | "last"."""
    if valid is None:
        valid = torch.ones(h.shape[:2], dtype=torch.bool, device=h.device)
    m = valid[..., None]
    if how == "mean":
        return (h * m).sum(1) / m.sum(1).clamp_min(1)
    if how == "max":
        return h.masked_fill(~m, torch.finfo(h.dtype).min).amax(1)
    if how == "last":
        last = (valid.long().cumsum(1).argmax(1))  # index of the last real position
        return h[torch.arange(h.shape[0], device=h.device), last]
    raise ValueError(f"pooling must be 'mean', 'max' or 'last', got {how!r}")


class ClassifierHead(nn.Module):
    """Pooled sequence -> MLP -> (B, n_out) logits (or (B, 1) for regression)."""

    def __init__(self, d_model: int, n_out: int, pooling: str):
        super().__init__()
        self.pooling = pooling
        self.mlp = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.Linear(d_model, n_out))

    def forward(self, h: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.mlp(pool(h, valid, self.pooling))


class TokenHead(nn.Module):
    """Per-position prediction for pretraining: (B, L, d) -> (B, L, n_out)."""

    def __init__(self, d_model: int, n_out: int):
        super().__init__()
        self.proj = nn.Linear(d_model, n_out)

    def forward(self, h: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.proj(h)
