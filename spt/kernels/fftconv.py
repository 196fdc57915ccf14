"""Long convolution by FFT: causal, or bidirectional with one kernel per direction.

    y[t] = sum_{s <= t} K[0, t - s] u[s]                      (causal part, both modes)
         + sum_{s >  t} K[1, s - t - 1] u[s]                  (bidirectional only)

The backward kernel starts at the *next* position (K[1, 0] weighs u[t+1]), so the current position
is seen once, through K[0, 0] (and the skip term D of the layer); this is the convention of the S4 and
DLR code. Both directions are one circular convolution of length 2L: the kernel row
[K0 (L) | flip(K1) (L)] against u zero-padded to 2L, so nothing wraps around.

Padding: right padding never reaches real positions through the causal part; for the backward part
the caller must zero the padded inputs first (the SSM block does), then padded positions contribute 0.
"""
from __future__ import annotations

import torch


def fft_conv(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """u (B, L, H) real, k (D, H, L) real with D = 1 (causal) or 2 (bidirectional) -> (B, L, H).

    Computed in float32 (or float64 for float64 inputs) whatever the autocast state.
    """
    if k.dim() != 3 or k.shape[0] not in (1, 2):
        raise ValueError(f"fft_conv: kernel must be (1 or 2, H, L), got {tuple(k.shape)}")
    B, L, H = u.shape
    if k.shape[1:] != (H, L):
        raise ValueError(f"fft_conv: kernel {tuple(k.shape)} does not fit input {tuple(u.shape)}")
    dtype = torch.float64 if u.dtype == torch.float64 else torch.float32
    kk = k[0] if k.shape[0] == 1 else torch.cat([k[0], k[1].flip(-1)], dim=-1)   # (H, L or 2L)
    n = 2 * L
    u_f = torch.fft.rfft(u.transpose(1, 2).to(dtype), n=n)                      # (B, H, L+1)
    k_f = torch.fft.rfft(kk.to(dtype), n=n)
    y = torch.fft.irfft(u_f * k_f, n=n)[..., :L]
    return y.transpose(1, 2)


def direct_conv_ref(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The same sums as :func:`fft_conv`, computed directly in O(L^2) (tests only)."""
    B, L, H = u.shape
    t = torch.arange(L, device=u.device)
    lag = t[:, None] - t[None, :]                                    # lag[t, s] = t - s
    T = torch.where(lag >= 0, k[0][:, lag.clamp(min=0)], torch.zeros((), dtype=k.dtype))
    if k.shape[0] == 2:
        back = k[1][:, (-lag - 1).clamp(min=0)]
        T = T + torch.where(lag < 0, back, torch.zeros((), dtype=k.dtype))
    return torch.einsum("hts,bsh->bth", T, u)
