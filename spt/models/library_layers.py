"""Thin adapters that fit third-party sequence layers to spt's layer contract
(:mod:`spt.models.user_layers`), for use as ``LayerConfig(layer=MambaLayer, bidirectional=True, ...)``.

Each package is an optional extra, imported only when a layer is built:

* :class:`MambaLayer` - Mamba's selective-scan mixer (Gu & Dao 2023) from ``mambapy``, a pure
  PyTorch implementation that also runs on the CPU (``pip install 'spt[mamba]'``).
* :class:`S5Layer` - the S5 diagonal state-space layer (Smith, Warrington & Linderman 2023) from
  ``s5-pytorch`` (``pip install 'spt[s5]'``).
* :class:`GSSLayer` - the Gated State Space layer (Mehta, Gupta, Cutkosky & Neyshabur 2022: a DSS
  convolution on a narrow projection gating a wide one) from ``gated-state-spaces-pytorch``
  (``pip install 'spt[gss]'``).

All are causal (class attribute ``causal = True``): next-token pretraining takes them as they are
(``LayerConfig(causal=True)``), masked pretraining with ``LayerConfig(bidirectional=True)``. All
read only x; with right padding a causal layer's real positions never see the pads.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def _missing(layer: str, module: str, extra: str, pip_name: str, e: ImportError) -> ImportError:
    return ImportError(f"{layer} needs the {module!r} package, which is not installed ({e}): "
                       f"pip install '{pip_name}' (spt's optional extra: pip install 'spt[{extra}]')")


class MambaLayer(nn.Module):
    """Mamba's mixer: in-projection, short causal depthwise convolution, selective scan, gate,
    out-projection (mambapy's ``MambaBlock``). forward(x (B, L, D)) -> (B, L, D).

    d_state : N, the state size per channel; expand : E, inner width E * D; d_conv : the
    convolution's width. mambapy marks A_log and D as not decayed: they get the optimiser hint
    ``{"weight_decay": 0.0}``.
    """

    causal = True

    def __init__(self, d_model: int, d_state: int = 16, expand: int = 2, d_conv: int = 4):
        super().__init__()
        try:
            from mambapy.mamba import MambaBlock, MambaConfig
        except ImportError as e:
            raise _missing("MambaLayer", "mambapy", "mamba", "mambapy", e) from e
        self.mixer = MambaBlock(MambaConfig(d_model=d_model, n_layers=1, d_state=d_state,
                                            expand_factor=expand, d_conv=d_conv))
        for p in self.mixer.parameters():
            if getattr(p, "_no_weight_decay", False):
                p._optim = {"weight_decay": 0.0}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mixer(x)


class S5Layer(nn.Module):
    """S5 (a MIMO diagonal state space, HiPPO-N initialisation, parallel scan) -> GELU ->
    Linear(D, D), as an S4-style block's mixing part. forward(x (B, L, D)) -> (B, L, D).

    d_state : P, the state size (default D); block_count : number of HiPPO blocks the state is
    made of (must divide d_state); dt_min, dt_max : range of the initial log-uniform time steps.
    The state-space parameters Lambda and C are complex64 tensors.
    """

    causal = True

    def __init__(self, d_model: int, d_state: int = 0, block_count: int = 1,
                 dt_min: float = 0.001, dt_max: float = 0.1):
        super().__init__()
        try:
            from s5 import S5
        except ImportError as e:
            raise _missing("S5Layer", "s5", "s5", "s5-pytorch", e) from e
        d_state = d_state or d_model
        if d_state % block_count:
            raise ValueError(f"S5Layer: block_count={block_count} must divide d_state={d_state} "
                             f"(LayerConfig.kwargs)")
        self.s5 = S5(d_model, state_width=d_state, block_count=block_count, dt_min=dt_min,
                     dt_max=dt_max)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.s5(x)))


class GSSLayer(nn.Module):
    """Gated State Space mixing (the package's ``GSS`` block): u = GELU(W_u LN(x)) (B, L, E*D),
    v = DSS(GELU(W_v LN(x))) (B, L, H), y = W_o(W_g v * u). forward(x (B, L, D)) -> (B, L, D).

    expand : E, the gated width E * D; d_kernel : H, the width of the DSS convolution; d_state :
    N, the DSS kernel's number of complex modes. The DSS convolution is causal (an FFT over 2L).
    The package's block adds its input back (a residual); spt's block already does, so the
    adapter returns the block's output minus its input.
    """

    causal = True

    def __init__(self, d_model: int, expand: int = 2, d_kernel: int = 64, d_state: int = 64):
        super().__init__()
        try:
            from gated_state_spaces_pytorch import GSS
        except ImportError as e:
            raise _missing("GSSLayer", "gated_state_spaces_pytorch", "gss",
                           "gated-state-spaces-pytorch", e) from e
        self.gss = GSS(dim=d_model, dim_expansion_factor=expand, dss_kernel_H=d_kernel,
                       dss_kernel_N=d_state)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gss(x) - x
