"""Long convolution by FFT: causal, or bidirectional with one kernel per direction.

    y[t] = sum_{s <= t} K[0, t - s] u[s]                      (causal part, both modes)
         + sum_{s >  t} K[1, s - t - 1] u[s]                  (bidirectional only)
         + skip * u[t]                                        (optional skip term D)

The backward kernel starts at the *next* position (K[1, 0] weighs u[t+1]), so the current position
is seen once, through K[0, 0] (and the skip term D of the layer); this is the convention of the S4 and
DLR code. Both directions are one circular convolution of length n >= 2L: the kernel row
[K0 (L) | 0 ... | flip(K1) (L)] against u zero-padded to n, so nothing wraps around.

Paths (``fft_conv(..., backend=)``, words of :mod:`spt.kernels.paths`), equal up to float rounding:

* "torch" (the reference): n = 2L, torch.fft differentiated by autograd; the skip term added after.
* "manual": a ``torch.autograd.Function`` with a hand-written backward, fewer passes over the
  (B, H, n) spectra: grad_u = irfft(G conj(K^)) and grad_K = irfft(sum_b G conj(U^)) (two
  correlations), where autograd's backward of rfft runs a full-length complex FFT and pads,
  slices and rescales around it. n is the smallest 2^a 3^b 5^c >= 2L (:func:`fast_length`; 2L
  itself for the power-of-two LRA lengths, 8100 instead of the prime-factor 8002 for L = 4001).
  The skip term is folded into the kernel (K[0, :, 0] += skip), so it costs no pass of its own.
  Not twice differentiable.

Padding: right padding never reaches real positions through the causal part; for the backward part
the caller must zero the padded inputs first (the SSM block does), then padded positions contribute 0.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.autograd.function import once_differentiable

from .paths import check_path

FFT_CONV_PATHS = ("torch", "manual")


def fast_length(n: int) -> int:
    """The smallest m >= n whose prime factors are 2, 3 and 5 (quick for cuFFT and pocketfft)."""
    if n < 1:
        raise ValueError(f"fast_length: n must be >= 1, got {n}")
    best = 1 << (n - 1).bit_length()                  # the next power of two always qualifies
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35 << max(0, (-(-n // p35) - 1).bit_length())   # p35 * 2^k, the first >= n
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def _check(u: torch.Tensor, k: torch.Tensor) -> None:
    if k.dim() != 3 or k.shape[0] not in (1, 2):
        raise ValueError(f"fft_conv: kernel must be (1 or 2, H, L), got {tuple(k.shape)}")
    if u.dim() != 3 or k.shape[1:] != (u.shape[2], u.shape[1]):
        raise ValueError(f"fft_conv: kernel {tuple(k.shape)} does not fit input {tuple(u.shape)}")


def fft_conv(u: torch.Tensor, k: torch.Tensor, skip: Optional[torch.Tensor] = None,
             backend: str = "torch") -> torch.Tensor:
    """u (B, L, H) real, k (D, H, L) real with D = 1 (causal) or 2 (bidirectional) -> (B, L, H).

    skip : optional (H,) real, adds ``skip * u`` (the layer's D term).
    backend : the path, "torch" | "manual" (see the module docstring).
    Computed in float32 (or float64 for float64 inputs) whatever the autocast state.
    """
    _check(u, k)
    check_path("fft_conv", backend, FFT_CONV_PATHS)
    dtype = torch.float64 if u.dtype == torch.float64 else torch.float32
    u, k = u.to(dtype), k.to(dtype)
    if backend == "manual":
        if skip is not None:
            k = k.clone()
            k[0, :, 0] = k[0, :, 0] + skip.to(dtype)
        return _FFTConv.apply(u, k)
    y = _fft_conv_autograd(u, k)
    return y if skip is None else y + u * skip.to(dtype)


def _fft_conv_autograd(u: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    L = u.shape[1]
    kk = k[0] if k.shape[0] == 1 else torch.cat([k[0], k[1].flip(-1)], dim=-1)   # (H, L or 2L)
    n = 2 * L
    u_f = torch.fft.rfft(u.transpose(1, 2), n=n)                                # (B, H, L+1)
    k_f = torch.fft.rfft(kk, n=n)
    y = torch.fft.irfft(u_f * k_f, n=n)[..., :L]
    return y.transpose(1, 2)


def _kernel_row(k: torch.Tensor, n: int) -> torch.Tensor:
    """k (D, H, L) -> the circular filter (H, n): K0 at lags 0 .. L-1, flip(K1) at n-L .. n-1."""
    L = k.shape[-1]
    row = k.new_zeros(k.shape[1], n)
    row[:, :L] = k[0]
    if k.shape[0] == 2:
        row[:, n - L:] = k[1].flip(-1)
    return row


class _FFTConv(torch.autograd.Function):
    """y = irfft(rfft(u, n) rfft(row, n))[:L] with the two correlations as its backward."""

    @staticmethod
    def forward(ctx, u, k):
        L = u.shape[1]
        n = fast_length(2 * L)
        k_f = torch.fft.rfft(_kernel_row(k, n))                    # (H, n//2+1)
        u_f = torch.fft.rfft(u.transpose(1, 2), n=n)               # (B, H, n//2+1)
        y = torch.fft.irfft(u_f * k_f, n=n)[..., :L]
        ctx.save_for_backward(u_f, k_f)
        ctx.L, ctx.n, ctx.n_dir = L, n, k.shape[0]
        return y.transpose(1, 2)

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        u_f, k_f = ctx.saved_tensors
        L, n = ctx.L, ctx.n
        g_f = torch.fft.rfft(g.transpose(1, 2).to(k_f.real.dtype), n=n)   # (B, H, n//2+1)
        grad_u = grad_k = None
        if ctx.needs_input_grad[1]:
            g_row = torch.fft.irfft((g_f * u_f.conj()).sum(0), n=n)       # (H, n): per lag
            parts = [g_row[:, :L]]
            if ctx.n_dir == 2:
                parts.append(g_row[:, n - L:].flip(-1))
            grad_k = torch.stack(parts)
        if ctx.needs_input_grad[0]:                                       # g_f is ours: in place
            grad_u = torch.fft.irfft(g_f.mul_(k_f.conj()), n=n)[..., :L].transpose(1, 2)
        return grad_u, grad_k


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
