"""A template for your own layer: copy this file next to your notebook, change the class, and pass
``LayerConfig(layer="my_file:MyLayer", ...)`` (the contract: :mod:`spt.models.user_layers`).

:class:`DecayMix` is deliberately small: each channel mixes the past (and, unless causal, the
future) with a learned exponential decay, computed as an FFT convolution, and a sigmoid gate picks
what passes. It is a diagonal linear RNN written as a convolution, so its kernel over lags is
known in closed form: ``K_c[lag] = a_c ** lag`` with ``a_c = sigmoid(logit_c)``.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn


class DecayMix(nn.Module):
    """x (B, L, D), valid (B, L) or None -> (B, L, D).

    d_model : D.   causal : look back only (else back and ahead with the same decay).
    decay   : initial decay a of every channel (0 < a < 1: the memory spans ~1 / (1 - a) steps).
    """

    def __init__(self, d_model: int, causal: bool = False, decay: float = 0.9):
        super().__init__()
        if not 0.0 < decay < 1.0:
            raise ValueError(f"DecayMix: decay must be in (0, 1), got {decay}")
        self.causal = causal
        self.logit = nn.Parameter(torch.full((d_model,), math.log(decay / (1 - decay))))
        self.gate = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def kernel(self, L: int) -> torch.Tensor:
        """K (L, D): K[lag, c] = a_c ** lag."""
        lags = torch.arange(L, device=self.logit.device, dtype=self.logit.dtype)
        return torch.sigmoid(self.logit) ** lags[:, None]

    def past(self, x: torch.Tensor) -> torch.Tensor:
        """sum over lag >= 0 of K[lag] * x[t - lag], (B, L, D)."""
        L, n = x.shape[1], 2 * x.shape[1]
        spectrum = torch.fft.rfft(x, n, dim=1) * torch.fft.rfft(self.kernel(L), n, dim=0)
        return torch.fft.irfft(spectrum, n, dim=1)[:, :L]

    def forward(self, x: torch.Tensor, valid=None) -> torch.Tensor:
        if valid is not None:  # pads contribute nothing to the sums (spt zeroes them too)
            x = x * valid[..., None]
        y = self.past(x)
        if not self.causal:  # the same decay looking ahead; lag 0 counted once
            y = y + self.past(x.flip(1)).flip(1) - x
        return self.out(y * torch.sigmoid(self.gate(x)))
