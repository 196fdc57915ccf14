"""The config of an SGConv layer stack (:mod:`spt.models.sgconv`): Li et al. 2022, "What Makes
Convolutional Models Great on Long Sequence Modeling?". A plain dataclass with no torch import, so
the model-config registry (:mod:`spt.model_config`) can name it."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from .config_base import ConvBlockConfig, _check_positive


@dataclass(frozen=True, kw_only=True)
class SGConvConfig(ConvBlockConfig):
    """A stack of SGConv blocks: norm -> multi-scale global convolution -> GELU -> linear/GLU.

    d_model    : width H (number of independent convolution channels); n_layers: depth.
    kernel_dim : d, the number of stored weights of every sub-kernel (the paper uses 32 or 64).
    alpha      : decay of the sub-kernel weights: sub-kernel i is scaled by alpha^i (paper: 0.5).
    max_len    : longest sequence; the kernel covers max_len lags with
                 ``n_scales = 1 + ceil(log2(max_len / kernel_dim))`` sub-kernels (derived).
    causal     : one kernel per channel looking back only; otherwise a forward and a backward one.
    dropout    : dropout after the activation and after the output projection.
    lr         : learning rate of the sub-kernel weights, with no weight decay (the authors' 1e-3).
    kind, init : class constants "sgconv" and "normal" (not fields), the labels the kernel analyses
                 give an SSM config's kind and init.
    The other fields (pooling, head, norm, prenorm, glu) are every S4-style block's
    (:class:`~spt.config_base.ConvBlockConfig`).
    """

    kind: ClassVar[str] = "sgconv"
    family: ClassVar[str] = "conv"
    init: ClassVar[str] = "normal"

    kernel_dim: int = 32
    alpha: float = 0.5
    lr: float = 1e-3

    def check(self):
        c = "SGConvConfig"
        for name in ("kernel_dim", "lr"):
            _check_positive(c, name, getattr(self, name))
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"{c}.alpha must be in (0, 1] (the decay of each larger scale; the "
                             f"paper uses 0.5), got {self.alpha!r}")

    @property
    def n_scales(self) -> int:
        """Number of sub-kernels: the fewest that cover max_len lags (at least 1)."""
        return n_scales(self.max_len, self.kernel_dim)



def n_scales(length: int, kernel_dim: int) -> int:
    """1 + ceil(log2(length / kernel_dim)) (at least 1): scales 0..N-1 cover d * 2^(N-1) >= length
    lags, and N-1 scales would not."""
    return 1 + max(0, math.ceil(math.log2(length / kernel_dim)))
