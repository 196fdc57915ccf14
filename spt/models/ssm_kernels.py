"""The S4, S4D and DLR convolution kernels of :mod:`spt.models.ssm`: state-space parameters in,
a long convolution kernel K (n_dir, H, L) out (n_dir = 1 causal, 2 bidirectional: a forward and a
backward kernel), or the discretised matrices for the recurrent step mode.

* :class:`S4Kernel`  - A = Lambda - P P^*, bilinear, HiPPO-LegS init; Cauchy + Woodbury
  (:func:`spt.kernels.dplr_kernel`). Learns C-tilde for the kernel length ``max_len`` (as S4 does).
* :class:`S4DKernel` - diagonal Lambda, ZOH: K_l = 2 Re sum_n C_n B_n (e^{dt Lambda_n} - 1)/Lambda_n
  e^{dt Lambda_n l}; S4D-LegS / Lin / Inv init (:func:`spt.kernels.vandermonde`).
* :class:`DLRKernel` - paper eq. 3: K_l = Re sum_n C_n e^{Lambda_n l} (B = 1, Lambda shared by the
  H channels of a layer), "omega" init.

Initialisations (``SSMConfig.init``): the kind's structured one (HiPPO-LegS, S4D-Lin / Inv, DLR
"omega"); "random_ssm" and "random" draw the stored state-space parameters (Lambda, P, B, C) from
N(0, random_std^2) and keep the log-uniform dt ("random" then resets every parameter of the
encoder, see :class:`spt.models.ssm.SSMEncoder`).

Complex parameters are stored as real (..., 2) tensors (Adam sees real and imaginary parts), and the
real part of Lambda through a transform that keeps it negative (S4 / S4D: log(-Re), DLR: sqrt(-Re)).
The state-space parameters carry optimiser hints ``p._optim = {"lr": cfg.lr, "weight_decay": 0}``;
dt follows ``cfg.dt_lr`` (the final S4's LRA configs train it at the run's lr, still without weight
decay); S4 / S4D's C (like S4's) uses the run's lr and weight decay. S4 with ``cfg.n_ssm = S < H``
learns S copies of (Lambda, P, B), channel h using copy h mod S (the S4 code's n_ssm); C and dt
stay per channel.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from ..kernels import (
    KERNEL_PATHS,
    c_to_ctilde,
    ctilde_to_c,
    dplr_discrete,
    dplr_kernel,
    vandermonde,
)
from ..ssm_config import SSMConfig
from . import hippo


def _param(module: nn.Module, name: str, value: torch.Tensor, lr=None) -> None:
    """Register a float32 parameter. `lr`: None - no hint (the run's lr and weight decay); a
    float - that lr and no weight decay; "run" - the run's lr and no weight decay."""
    p = nn.Parameter(value.detach().to(torch.float32).contiguous())
    if lr == "run":
        p._optim = {"weight_decay": 0.0}
    elif lr is not None:
        p._optim = {"lr": lr, "weight_decay": 0.0}
    module.register_parameter(name, p)


def _as_real(z: torch.Tensor) -> torch.Tensor:
    """A complex tensor (...) as its complex64 real view (..., 2), the stored form."""
    return torch.view_as_real(z.to(torch.complex64)).contiguous()


def _c(p: torch.Tensor) -> torch.Tensor:
    """A stored real (..., 2) parameter as the complex tensor (...) it holds (a view)."""
    return torch.view_as_complex(p)


class _Kernel(nn.Module):
    """Base: forward(L) -> K (n_dir, H, L) real; discrete() -> (Ā, B̄, C, scale) for stepping.

    Ā is (H, S) (diagonal) or (H, S, S) (dense), B̄ (H, S), C (n_dir, H, S) complex; the output of the
    recurrence is scale * Re(C x).
    """

    # implementation paths (spt.kernels.paths): the kernel function's backend
    paths = KERNEL_PATHS
    path = "torch"

    def __init__(self, cfg: SSMConfig, n_dir: int):
        super().__init__()
        self.H, self.n_dir = cfg.d_model, n_dir
        self.N, self.max_len = cfg.d_state, cfg.max_len
        # both random inits draw the state-space parameters here; "random" then resets every
        # parameter of the encoder (SSMEncoder.__init__), dt included
        self.random = cfg.is_random_init
        if cfg.kind != "dlr":  # DLR has no step size: dt only sets the damping of its init
            dt = hippo.log_uniform(cfg.d_model, cfg.dt_min, cfg.dt_max)
            _param(self, "log_dt", torch.log(dt), cfg.lr if cfg.dt_lr is None else cfg.dt_lr)

    def extra_repr(self) -> str:
        return f"H={self.H}, N={self.N}, n_dir={self.n_dir}, max_len={self.max_len}"


class S4Kernel(_Kernel):
    """S4: DPLR state matrix, bilinear discretisation, kernel via Cauchy + Woodbury."""

    path_kind = "s4_kernel"

    def __init__(self, cfg: SSMConfig, n_dir: int):
        super().__init__(cfg, n_dir)
        H, N2, s = cfg.d_model, cfg.d_state // 2, cfg.random_std
        S = cfg.n_ssm or H                     # trainable copies of (Lambda, P, B)
        self.L_kernel, self.copies = cfg.max_len, H // S
        if self.random:  # every stored tensor ~ N(0, s^2), C-tilde included (no conversion)
            log_re, im = hippo.random_normal(S, N2, std=s), hippo.random_normal(S, N2, std=s)
            P, B = hippo.random_normal(S, N2, 2, std=s), hippo.random_normal(S, N2, 2, std=s)
            C = hippo.random_normal(n_dir, H, N2, 2, std=s)
        else:
            lam, p, b = hippo.legs_dplr(cfg.d_state)
            log_re = torch.log(-lam.real).expand(S, N2)
            im = lam.imag.expand(S, N2)
            P, B = _as_real(p.expand(S, N2)), _as_real(b.expand(S, N2))
            C = _as_real(hippo.complex_normal(n_dir, H, N2))
        for name, value in (("log_neg_re", log_re), ("im", im), ("P", P), ("B", B)):
            _param(self, name, value, cfg.lr)
        _param(self, "C", C, None)
        if not self.random:  # S4's C is random; what it learns is C-tilde = (I - Ā^L)^T C
            with torch.no_grad():
                Lam, P_, B_, C_, dt = self.params(torch.float64)
                Ab, _ = dplr_discrete(Lam, P_, B_, dt)
                self.C.copy_(_as_real(c_to_ctilde(C_, Ab, self.L_kernel)))

    def params(self, dtype=None):
        """(Lambda, P, B, C-tilde) complex (H, N2) / (n_dir, H, N2) and dt (H,); optional dtype.
        With n_ssm copies of (Lambda, P, B), channel h reads copy h mod n_ssm."""
        t = (lambda x: x.to(dtype)) if dtype is not None else (lambda x: x)
        tile = (lambda z: z.repeat(self.copies, 1)) if self.copies > 1 else (lambda z: z)
        lam = torch.complex(-torch.exp(t(self.log_neg_re)), t(self.im))
        return (tile(lam), tile(_c(t(self.P))), tile(_c(t(self.B))), _c(t(self.C)),
                torch.exp(t(self.log_dt)))

    def forward(self, L: int) -> torch.Tensor:
        if L > self.L_kernel:
            raise ValueError(f"S4 kernel: sequence length {L} exceeds SSMConfig.max_len="
                             f"{self.L_kernel} (the length its C-tilde is learned for)")
        Lam, P, B, C, dt = self.params()
        return dplr_kernel(Lam, P, B, C, dt, self.L_kernel, self.path)[..., :L]

    def discrete(self):
        Lam, P, B, C, dt = self.params(torch.float64)
        Ab, Bb = dplr_discrete(Lam, P, B, dt)
        C_full = ctilde_to_c(C, Ab, self.L_kernel)
        cd = torch.complex64 if self.C.dtype == torch.float32 else torch.complex128
        return Ab.to(cd), Bb.to(cd), C_full.to(cd), 1.0


class S4DKernel(_Kernel):
    """S4D: diagonal Lambda, zero-order hold, kernel via a Vandermonde sum."""

    path_kind = "s4d_kernel"

    def __init__(self, cfg: SSMConfig, n_dir: int):
        super().__init__(cfg, n_dir)
        H, N2, s = cfg.d_model, cfg.d_state // 2, cfg.random_std
        if self.random:
            log_re, im = hippo.random_normal(H, N2, std=s), hippo.random_normal(H, N2, std=s)
            B, C = hippo.random_normal(H, N2, 2, std=s), hippo.random_normal(n_dir, H, N2, 2, std=s)
        else:
            if cfg.init == "legs":
                lam, _, b = hippo.legs_dplr(cfg.d_state)
            else:
                lam = hippo.s4d_lin(N2) if cfg.init == "lin" else hippo.s4d_inv(N2)
                b = torch.ones(N2, dtype=torch.complex128)
            log_re, im = torch.log(-lam.real).expand(H, N2), lam.imag.expand(H, N2)
            B, C = _as_real(b.expand(H, N2)), _as_real(hippo.complex_normal(n_dir, H, N2))
        for name, value in (("log_neg_re", log_re), ("im", im), ("B", B)):
            _param(self, name, value, cfg.lr)
        _param(self, "C", C, None)

    def _disc(self):
        lam = torch.complex(-torch.exp(self.log_neg_re), self.im)
        dtA = torch.exp(self.log_dt)[:, None] * lam
        Bb = _c(self.B) * (torch.exp(dtA) - 1) / lam
        return dtA, Bb

    def forward(self, L: int) -> torch.Tensor:
        dtA, Bb = self._disc()
        return vandermonde(2 * _c(self.C) * Bb, dtA, L, self.path)

    def discrete(self):
        dtA, Bb = self._disc()
        return torch.exp(dtA), Bb, _c(self.C), 2.0


class DLRKernel(_Kernel):
    """DLR (paper eq. 3): x_n = diag(e^Lambda) x_{n-1} + 1 u_n, y_n = Re C x_n. Its Lambda is
    shared by the H channels, so the kernel is also one matrix product (path "gemm")."""

    path_kind = "dlr_kernel"
    paths = (*KERNEL_PATHS, "gemm")  # vandermonde's own paths, and the shared-eigenvalue GEMM

    def __init__(self, cfg: SSMConfig, n_dir: int):
        super().__init__(cfg, n_dir)
        H, N, s = cfg.d_model, cfg.d_state, cfg.random_std
        if self.random:
            sq, im = hippo.random_normal(N, std=s), hippo.random_normal(N, std=s)
            W = hippo.random_normal(n_dir, H, N, 2, std=s)
        else:
            lam = hippo.dlr_omega(N, cfg.dt_min, cfg.dt_max)
            sq, im = torch.sqrt(-lam.real), lam.imag
            W = hippo.random_normal(n_dir, H, N, 2, std=1.0 / N)   # the authors' W_scale = 1/N
        for name, value in (("sqrt_neg_re", sq), ("im", im), ("C", W)):
            _param(self, name, value, cfg.lr)

    def _lambda(self) -> torch.Tensor:
        return torch.complex(-self.sqrt_neg_re ** 2, self.im).expand(self.H, -1)

    def forward(self, L: int) -> torch.Tensor:
        return vandermonde(_c(self.C), self._lambda(), L, self.path)

    def discrete(self):
        lam = self._lambda()
        return torch.exp(lam), torch.ones_like(lam), _c(self.C), 1.0


def make_kernel(cfg: SSMConfig, n_dir: int) -> _Kernel:
    """The kernel module of ``cfg.kind`` ("s4", "s4d" or "dlr") with `n_dir` directions."""
    if cfg.kind == "s4":
        return S4Kernel(cfg, n_dir)
    if cfg.kind == "s4d":
        return S4DKernel(cfg, n_dir)
    if cfg.kind == "dlr":
        return DLRKernel(cfg, n_dir)
    raise ValueError(f"unknown SSM kind {cfg.kind!r}")
