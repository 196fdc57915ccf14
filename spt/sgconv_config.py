"""The config of an SGConv layer stack (:mod:`spt.models.sgconv`): Li et al. 2022, "What Makes
Convolutional Models Great on Long Sequence Modeling?". A plain dataclass with no torch import, so
the model-config registry (:mod:`spt.model_config`) can name it."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from .config import Head, ModelConfigBase, _check_choice, check_finite

_POOLINGS = ("mean", "max", "last")
_NORMS = ("layer", "batch")


@dataclass(frozen=True)
class SGConvConfig(ModelConfigBase):
    """A stack of SGConv blocks: norm -> multi-scale global convolution -> GELU -> linear/GLU.

    d_model    : width H (number of independent convolution channels); n_layers: depth.
    kernel_dim : d, the number of stored weights of every sub-kernel (the paper uses 32 or 64).
    alpha      : decay of the sub-kernel weights: sub-kernel i is scaled by alpha^i (paper: 0.5).
    max_len    : longest sequence; the kernel covers max_len lags with
                 ``n_scales = 1 + ceil(log2(max_len / kernel_dim))`` sub-kernels (derived).
    causal     : one kernel per channel looking back only; otherwise a forward and a backward one.
    pooling    : finetuning head pooling ("mean" | "max" | "last").
    head       : finetuning head after pooling: "mlp" (Linear(d, d) -> GELU -> Linear(d, n_out)) or
                 "linear" (one Linear(d, n_out)).
    dropout    : dropout after the activation and after the output projection.
    norm       : "layer" or "batch" (batch statistics over real, non-padded positions).
    prenorm    : normalise inside the residual branch (pre-norm) or after the residual (post-norm).
    glu        : output projection Linear(H, 2H) + GLU instead of Linear(H, H).
    lr         : learning rate of the sub-kernel weights, with no weight decay (the authors' 1e-3).
    positions  : always "none" (not a field): the kernel already knows where each input is.
    kind, init : class constants "sgconv" and "normal" (not fields), the labels the kernel analyses
                 give an SSM config's kind and init.
    """

    positions: ClassVar[str] = "none"
    kind: ClassVar[str] = "sgconv"
    family: ClassVar[str] = "conv"
    init: ClassVar[str] = "normal"

    d_model: int = 64
    n_layers: int = 4
    kernel_dim: int = 32
    alpha: float = 0.5
    max_len: int = 1024
    causal: bool = False
    pooling: str = "mean"
    dropout: float = 0.0
    norm: str = "layer"
    prenorm: bool = True
    glu: bool = True
    lr: float = 1e-3
    head: Head = "mlp"

    def __post_init__(self):
        c = "SGConvConfig"
        check_finite(self)
        for name in ("d_model", "n_layers", "kernel_dim", "max_len", "lr"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{c}.{name} must be > 0, got {getattr(self, name)!r}")
        if not 0.0 < self.alpha <= 1.0:
            raise ValueError(f"{c}.alpha must be in (0, 1] (the decay of each larger scale; the "
                             f"paper uses 0.5), got {self.alpha!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"{c}.dropout must be in [0, 1), got {self.dropout!r}")
        if self.pooling not in _POOLINGS:
            raise ValueError(f"{c}.pooling={self.pooling!r} is not one of {list(_POOLINGS)}")
        _check_choice(c, "head", self.head, Head.__args__)
        if self.norm not in _NORMS:
            raise ValueError(f"{c}.norm={self.norm!r} is not one of {list(_NORMS)}")

    @property
    def n_scales(self) -> int:
        """Number of sub-kernels: the fewest that cover max_len lags (at least 1)."""
        return n_scales(self.max_len, self.kernel_dim)



def n_scales(length: int, kernel_dim: int) -> int:
    """1 + ceil(log2(length / kernel_dim)) (at least 1): scales 0..N-1 cover d * 2^(N-1) >= length
    lags, and N-1 scales would not."""
    return 1 + max(0, math.ceil(math.log2(length / kernel_dim)))
