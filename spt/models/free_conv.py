"""Unrestricted long convolution: an S4 block whose kernel is a free parameter.

S4 is, once computed, a depthwise convolution whose kernel is as long as the sequence; its state
space ties the kernel's lags together (a sum of damped oscillations), and SGConv ties them by a few
stored weights per dyadic band with a decay. This layer ties nothing: every channel h and direction
stores one weight per lag,

    K[dir, h, l] = W[dir, h, l],    l = 0 .. max_len - 1,    W ~ N(0, kernel_init_std^2),

with no state space, no decay and no multi-scale structure. It is the cheap-prior baseline of
Miralles-Gonzalez et al. 2025, "On the locality bias and results in the
Long Range Arena" (arXiv 2501.14850): with suitable training, "remove all restrictions from SSM
convolutional kernels and learn fully parameterized convolutions without decreasing performance".
The initialisation N(0, (1e-5)^2) follows the authors' early code (see
:class:`spt.free_conv_config.FreeConvConfig`).

A layer is an S4 block with this kernel (:mod:`spt.models.ssm`, B, L, H layout throughout):

    block(x) = x + Dropout(Out(Dropout(GELU(K * Norm(x) + D Norm(x)))))      (pre-norm)
             = Norm(x + ...)                                                  (post-norm)

where ``K *`` is the FFT convolution of :func:`spt.kernels.fft_conv`,

    (K * z)[t, h] = sum_{s <= t} K[0, h, t - s] z[s, h]
                  + sum_{s > t}  K[1, h, s - t - 1] z[s, h]     (bidirectional only),

causal (n_dir = 1) or bidirectional (n_dir = 2; the backward kernel's lag 0 weighs the *next*
position, so its last stored lag, max_len - 1, reaches past any sequence of max_len and never gets
a gradient). Out is Linear(H, 2H) + GLU (``glu``) or Linear(H, H). A sequence of length L uses the
first L lags; ``reach`` zeroes the lags past it.

Parameters per layer: n_dir * H * max_len kernel weights (S4: O(H N), SGConv: O(H d log L)).

Padding: padded positions (``valid`` False, right padding) are zeroed before each convolution, as
the SSM blocks do, so real positions never depend on them.

The kernel analyses read the stack like an SSM one: every block has ``kernel(L) -> (n_dir, H, L)``
and :meth:`FreeConvEncoder.kernels` lists them (see :mod:`spt.analysis.kernel_decay`).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..free_conv_config import FreeConvConfig
from .ssm import ConvBlock, ConvStack


class FreeConvKernel(nn.Module):
    """The learned kernels of one layer, one weight per lag. forward(L) -> K (n_dir, H, L).

    Parameter ``weight`` (n_dir, H, max_len) ~ N(0, kernel_init_std^2), with the optimiser hint
    ``{"lr": cfg.lr, "weight_decay": 0}``.
    """

    def __init__(self, cfg: FreeConvConfig, n_dir: int):
        super().__init__()
        self.max_len = cfg.max_len
        w = nn.Parameter(torch.randn(n_dir, cfg.d_model, cfg.max_len) * cfg.kernel_init_std)
        w._optim = {"lr": cfg.lr, "weight_decay": 0.0}
        self.weight = w

    def forward(self, L: int) -> torch.Tensor:
        if L > self.max_len:
            raise ValueError(f"free convolution kernel: sequence length {L} exceeds "
                             f"FreeConvConfig.max_len={self.max_len} (the number of lags it "
                             f"stores); raise max_len")
        return self.weight[..., :L]


class FreeConvBlock(ConvBlock):
    """One residual block: :class:`spt.models.ssm.ConvBlock` with a free kernel.
    forward(x (B, L, H), valid (B, L) or None) -> (B, L, H); conv(z, valid) is its linear part."""

    def __init__(self, cfg: FreeConvConfig):
        super().__init__(cfg, FreeConvKernel)


class FreeConvEncoder(ConvStack):
    """A stack of :class:`FreeConvBlock` (+ a final norm when pre-norm). (B, L, H) -> (B, L, H);
    see :class:`spt.models.ssm.ConvStack`."""

    def __init__(self, cfg: FreeConvConfig):
        super().__init__(cfg, FreeConvBlock)
