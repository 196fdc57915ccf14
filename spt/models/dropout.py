"""Dropout whose random masks are cheap on the CPU.

On a CPU, ``torch.nn.Dropout`` draws one Bernoulli sample per element from torch's Mersenne
Twister, and for the small models of the laptop presets that costs more than the layer it follows
(d=64, L=64, batch 16: a dropout ~10x a linear layer of the same size; ten of them were a fifth of
the quickstart's training step). :class:`Dropout` draws 64 random bits per int64 from the same
generator and cuts each into three 16-bit uniforms, so it asks the generator for a third as many
numbers: an element is kept when its 16-bit uniform u (0..65535) is at least ``round(p * 65536)``,
i.e. dropped with probability p rounded to a multiple of 2^-16 (p = 0.1 -> 0.100006), and kept
elements are scaled by ``1 / (1 - p)`` as in torch. On other devices it is ``F.dropout``.

It reads torch's global CPU generator, so ``torch.manual_seed``, saved RNG states (a resumed run)
and activation checkpointing (which replays the generator) work as with ``nn.Dropout``.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

_LEVELS = 1 << 16  # a 16-bit uniform


def keep_mask(shape: tuple, p: float) -> torch.Tensor:
    """(shape) bool on the CPU: True with probability 1 - round(p * 2^16) / 2^16, independently."""
    n = 1
    for s in shape:
        n *= s
    words = torch.empty((n + 2) // 3, dtype=torch.int64).random_()  # 63 random bits each
    u = words.view(torch.int16).view(-1, 4)[:, :3]  # bits 0-47 as three int16 (bit 63 is 0)
    threshold = round(p * _LEVELS) - _LEVELS // 2  # int16 holds u - 32768
    return (u >= threshold).view(-1)[:n].view(shape)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with :func:`keep_mask` masks on the CPU."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or not 0.0 < p < 1.0:
        return F.dropout(x, p, training)
    scale = keep_mask(tuple(x.shape), p).to(x.dtype).mul_(1.0 / (1.0 - p))
    return x * scale


class Dropout(nn.Module):
    """``nn.Dropout(p)`` with :func:`dropout`: (any shape) -> (same shape)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
