"""Position information: sinusoidal and learned tables (added to the input), rotary and ALiBi (in
attention)."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..kernels.attention import alibi_bias  # noqa: F401  (public here: the bias of alibi_slopes)


def sinusoidal_table(max_len: int, d: int) -> torch.Tensor:
    """(max_len, d) fixed sin/cos table of Vaswani et al. (2017)."""
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(max_len, d)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: d // 2])
    return table


class AddedPositions(nn.Module):
    """x (B, L, d) -> x + P[:L]; P sinusoidal (a buffer) or learned (a parameter)."""

    def __init__(self, max_len: int, d: int, learned: bool):
        super().__init__()
        self.max_len = max_len
        if learned:
            self.table = nn.Parameter(torch.randn(max_len, d) * 0.02)
            self.table._optim = {"weight_decay": 0.0}
        else:
            self.register_buffer("table", sinusoidal_table(max_len, d), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        L = x.shape[1]
        if L > self.max_len:
            raise ValueError(f"sequence length {L} exceeds the model config's max_len="
                             f"{self.max_len} (the length of its position table); build the model "
                             f"with a larger max_len")
        return x + self.table[:L].to(x.dtype)


def rotary_cos_sin(L: int, d: int, device, dtype, base: float = 10000.0):
    """cos, sin of shape (L, d/2) for rotary embeddings (Su et al., 2021)."""
    inv = 1.0 / (base ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
    ang = torch.arange(L, device=device, dtype=torch.float32)[:, None] * inv[None]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rotary(x: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of x (B, H, L, D) by position-dependent angles."""
    L, D = x.shape[-2], x.shape[-1]
    cos, sin = rotary_cos_sin(L, D, x.device, x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


def alibi_slopes(n_heads: int, device=None) -> torch.Tensor:
    """(H,) float32 ALiBi slopes m_h = 2^(-8 (h + 1) / H), h = 0..H-1: the geometric sequence
    from 2^(-8/H) down to 2^(-8). For H a power of two these are the slopes of Press, Smith & Lewis
    (ICLR 2022) (H = 4: 1/4, 1/16, 1/64, 1/256). For other H this is the same formula; the paper's
    code instead takes the slopes of the largest power of two 2^k < H and fills the rest with
    every other slope of 2^(k+1)."""
    h = torch.arange(1, n_heads + 1, device=device, dtype=torch.float32)
    return torch.exp2(-8.0 * h / n_heads)
