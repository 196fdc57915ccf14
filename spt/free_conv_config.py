"""The config of an unrestricted long-convolution layer stack (:mod:`spt.models.free_conv`): an
S4 block whose kernel is a free parameter, one weight per channel, direction and lag. A plain
dataclass with no torch import, so the model-config registry (:mod:`spt.model_config`) can name it.

The cheap-prior baseline of Miralles-Gonzalez et al. 2025, "On the locality bias and results in the
Long Range Arena" (arXiv 2501.14850): with suitable training, fully parameterised convolutions do as
well as the structured kernels of SSMs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from .config import Head, ModelConfigBase, _check_choice, _check_positive, check_finite

_POOLINGS = ("mean", "max", "last")
_NORMS = ("layer", "batch")


@dataclass(frozen=True)
class FreeConvConfig(ModelConfigBase):
    """A stack of free-kernel convolution blocks: norm -> (K * z + D z) -> GELU -> linear/GLU,
    where every K[direction, channel, lag] is its own trainable weight.

    d_model    : width H (number of independent convolution channels); n_layers: depth.
    max_len    : longest sequence; each kernel stores max_len lags (n_dir * H * max_len weights per
                 layer), and a longer sequence is an error.
    causal     : one kernel per channel looking back only; otherwise a forward and a backward one.
    pooling    : finetuning head pooling ("mean" | "max" | "last").
    head       : finetuning head after pooling: "mlp" (Linear(d, d) -> GELU -> Linear(d, n_out)) or
                 "linear" (one Linear(d, n_out)).
    dropout    : dropout after the activation and after the output projection.
    norm       : "layer" or "batch" (batch statistics over real, non-padded positions).
    prenorm    : normalise inside the residual branch (pre-norm) or after the residual (post-norm).
    glu        : output projection Linear(H, 2H) + GLU instead of Linear(H, H).
    lr         : learning rate of the kernel weights, with no weight decay (spt's choice, the same
                 1e-3 as SGConv's and S4's kernel parameters; not a value from the paper).
    kernel_init_std : the kernel weights start ~ N(0, kernel_init_std^2). The default 1e-5 follows
                 the authors' early code (github pablomiralles22/long-transformers,
                 src/models/layers/gmlp.py, whose free spatial kernel is ``normal_(std=1e-5)``, there
                 inside a gated MLP); the published paper's exact initialisation could not be
                 checked. With so small a kernel a fresh block is close to its D skip alone.
    reach      : None for kernels over the whole sequence; w zeroes every kernel lag past w, so each
                 layer relates inputs at most w positions apart (as SSMConfig.reach: the range
                 probe's truncated kernel; n layers: 2 n w when bidirectional, n w causal).
    positions  : always "none" (not a field): the kernel already knows where each input is.
    kind, init : class constants "free_conv" and "normal" (not fields), the labels the kernel
                 analyses give an SSM config's kind and init.
    """

    positions: ClassVar[str] = "none"
    kind: ClassVar[str] = "free_conv"
    family: ClassVar[str] = "conv"
    init: ClassVar[str] = "normal"

    d_model: int = 64
    n_layers: int = 4
    max_len: int = 1024
    causal: bool = False
    pooling: str = "mean"
    dropout: float = 0.0
    norm: str = "layer"
    prenorm: bool = True
    glu: bool = True
    lr: float = 1e-3
    kernel_init_std: float = 1e-5
    head: Head = "mlp"
    reach: Optional[int] = None

    def __post_init__(self):
        c = "FreeConvConfig"
        check_finite(self)
        for name in ("d_model", "n_layers", "max_len", "lr"):
            _check_positive(c, name, getattr(self, name))
        _check_positive(c, "kernel_init_std", self.kernel_init_std, allow_zero=True)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"{c}.dropout must be in [0, 1), got {self.dropout!r}")
        _check_choice(c, "pooling", self.pooling, _POOLINGS)
        _check_choice(c, "head", self.head, Head.__args__)
        _check_choice(c, "norm", self.norm, _NORMS)
        if self.reach is not None:
            _check_positive(c, "reach", self.reach, allow_zero=True)
