"""The config of an unrestricted long-convolution layer stack (:mod:`spt.models.free_conv`): an
S4 block whose kernel is a free parameter, one weight per channel, direction and lag. A plain
dataclass with no torch import, so the model-config registry (:mod:`spt.model_config`) can name it.

The cheap-prior baseline of Miralles-Gonzalez et al. 2025, "On the locality bias and results in the
Long Range Arena" (arXiv 2501.14850): with suitable training, fully parameterised convolutions do as
well as the structured kernels of SSMs."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from .config_base import ConvBlockConfig, _check_positive


@dataclass(frozen=True, kw_only=True)
class FreeConvConfig(ConvBlockConfig):
    """A stack of free-kernel convolution blocks: norm -> (K * z + D z) -> GELU -> linear/GLU,
    where every K[direction, channel, lag] is its own trainable weight.

    d_model    : width H (number of independent convolution channels); n_layers: depth.
    max_len    : longest sequence; each kernel stores max_len lags (n_dir * H * max_len weights per
                 layer), and a longer sequence is an error.
    causal     : one kernel per channel looking back only; otherwise a forward and a backward one.
    dropout    : dropout after the activation and after the output projection.
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
    kind, init : class constants "free_conv" and "normal" (not fields), the labels the kernel
                 analyses give an SSM config's kind and init.
    The other fields (pooling, head, norm, prenorm, glu) are every S4-style block's
    (:class:`~spt.config_base.ConvBlockConfig`).
    """

    kind: ClassVar[str] = "free_conv"
    family: ClassVar[str] = "conv"
    init: ClassVar[str] = "normal"

    lr: float = 1e-3
    kernel_init_std: float = 1e-5
    reach: Optional[int] = None

    def check(self):
        c = "FreeConvConfig"
        _check_positive(c, "lr", self.lr)
        _check_positive(c, "kernel_init_std", self.kernel_init_std, allow_zero=True)
        if self.reach is not None:
            _check_positive(c, "reach", self.reach, allow_zero=True)
