"""The Linear Recurrent Unit's mixer (Orvieto, Smith, Gu, Fernando, Gulcehre, Pascanu & De,
"Resurrecting Recurrent Neural Networks for Long Sequences", ICML 2023, section 3 and App. A),
causal or bidirectional.

    lambda = exp(-exp(nu_log) + i exp(theta_log))        (N,) complex, |lambda| < 1
    x_t = lambda * x_{t-1} + exp(gamma_log) * (B u_t)    (B, L, N) complex, B (N, D) complex
    y_t = Re(C x_t) + D * u_t                            (B, L, D), C (D, N) complex, D (D,) real
    out = GLU(GELU(y)),  GLU(h) = a * sigmoid(b), (a, b) = Linear(D, 2 D)(h)

Initialisation (the paper's ring lemma, section 3.2, and App. A): |lambda| uniform on the ring
[r_min, r_max] (nu_log = log(-log r), r^2 uniform on [r_min^2, r_max^2]), phase uniform in
[0, max_phase];
gamma_log = log(sqrt(1 - |lambda|^2)) (the normalisation that keeps the state's variance that of
the input); B, C Glorot-style complex normals (real and imaginary parts with variance 1 / (2 D)
for B, 1 / N for C), D standard normal.

The recurrence runs on :func:`spt.kernels.scan.linear_scan` over complex tensors (a parallel
scan, no loop over time; the cores' path "ref" runs the loop). With causal=False (nu,
theta, gamma, B, C, D) exist once per direction (the second runs over the reversed rows) and the
two y's are summed before the GELU; the GLU is shared. The recurrent parameters train as
minimal-LRU (the LRU's reference code) trains them: nu_log, theta_log, gamma_log, B_re and B_im
without weight decay at recurrent_lr_scale times the run's learning rate (its lr_factor, 0.5),
through the optimiser hint "lr_scale" (:mod:`spt.train.optim`); recurrent_lr_scale=None hints
nu_log, theta_log and gamma_log with no weight decay only, at the run's rate, and decays B as a
matrix.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...kernels.scan import LINEAR_SCAN_PATHS, linear_scan
from .common import both_ways, direction_count, no_weight_decay


def ring_init(n: int, r_min: float, r_max: float, max_phase: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(nu_log, theta_log) (n,) with lambda = exp(-exp(nu_log) + i exp(theta_log)) uniform on the
    ring r_min <= |lambda| <= r_max, phase in [0, max_phase] (the paper's ring lemma)."""
    u1, u2 = torch.rand(n, dtype=torch.float64), torch.rand(n, dtype=torch.float64)
    nu_log = torch.log(-0.5 * torch.log(u1 * (r_max ** 2 - r_min ** 2) + r_min ** 2))
    theta_log = torch.log(max_phase * u2.clamp(min=1e-12))
    return nu_log.float(), theta_log.float()


class LRUCore(nn.Module):
    """One direction of an LRU mixer: the complex diagonal recurrence and its read-out.
    u (B, L, D) -> y (B, L, D) = Re(C x) + D u.

    ``path`` (:mod:`spt.kernels.paths`) is the recurrence's ``backend=``: "torch" (spt's own
    form, the reference) unless set; "ref" is the loop over time.
    """

    path_kind = "linear_scan"
    paths = LINEAR_SCAN_PATHS
    candidates = ("torch",)  # no library kernel: nothing to choose

    def __init__(self, d_model: int, d_state: int, r_min: float, r_max: float, max_phase: float,
                 recurrent_lr_scale: Optional[float]):
        super().__init__()
        nu_log, theta_log = ring_init(d_state, r_min, r_max, max_phase)
        self.nu_log = nn.Parameter(nu_log)
        self.theta_log = nn.Parameter(theta_log)
        modulus = torch.exp(-torch.exp(nu_log))
        self.gamma_log = nn.Parameter(torch.log(torch.sqrt(1 - modulus ** 2)))
        self.B_re = nn.Parameter(torch.randn(d_state, d_model) / math.sqrt(2 * d_model))
        self.B_im = nn.Parameter(torch.randn(d_state, d_model) / math.sqrt(2 * d_model))
        self.C_re = nn.Parameter(torch.randn(d_model, d_state) / math.sqrt(d_state))
        self.C_im = nn.Parameter(torch.randn(d_model, d_state) / math.sqrt(d_state))
        self.D = nn.Parameter(torch.randn(d_model))
        self.path = "torch"
        if recurrent_lr_scale is None:
            no_weight_decay(self.nu_log, self.theta_log, self.gamma_log)
        else:
            no_weight_decay(self.nu_log, self.theta_log, self.gamma_log, self.B_re, self.B_im,
                            lr_scale=recurrent_lr_scale)

    def forward(self, u: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
        lam = torch.exp(torch.complex(-torch.exp(self.nu_log), torch.exp(self.theta_log)))
        gamma = torch.exp(self.gamma_log)
        Bu = torch.complex(u @ self.B_re.T, u @ self.B_im.T) * gamma        # (B, L, N)
        if valid is not None:  # pads feed nothing into the state
            Bu = Bu * valid[..., None].to(u.dtype)
        x = linear_scan(lam.expand_as(Bu), Bu, backend=self.path)
        return x.real @ self.C_re.T - x.imag @ self.C_im.T + self.D * u


class LRU(nn.Module):
    """The LRU mixer (module docstring). forward(x (B, L, D), valid (B, L) bool or None) -> (B, L, D).

    d_state : N complex modes (0: D); r_min, r_max : the ring of initial |lambda|; max_phase : the
    largest initial phase; recurrent_lr_scale : the recurrent parameters' learning rate as a
    multiple of the run's (module docstring). Parameters per direction ``cores.<k>.{nu_log,
    theta_log, gamma_log, B_re, B_im, C_re, C_im, D}`` (k = 1: the reversed direction), and the
    shared ``glu``.
    Every value comes from :class:`spt.mixer_config.LRUConfig`, where the authors' defaults are
    stated (this class has none): ``mixer_layer(LRUConfig(d_model=64))``
    (:func:`spt.models.mixers.stack.mixer_layer`).
    """

    def __init__(self, d_model: int, causal: bool, *, d_state: int, r_min: float, r_max: float,
                 max_phase: float, recurrent_lr_scale: Optional[float]):
        super().__init__()
        if not 0.0 <= r_min < r_max < 1.0:
            raise ValueError(f"LRU: need 0 <= r_min < r_max < 1, got r_min={r_min!r}, r_max={r_max!r}")
        self.cores = nn.ModuleList(LRUCore(d_model, d_state or d_model, r_min, r_max, max_phase,
                                           recurrent_lr_scale)
                                   for _ in range(direction_count(causal)))
        self.glu = nn.Linear(d_model, 2 * d_model)

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        y = F.gelu(both_ways(self.cores, x, valid))
        a, b = self.glu(y).chunk(2, dim=-1)
        return a * torch.sigmoid(b)
