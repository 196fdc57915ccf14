"""State-space layers: S4 (DPLR), S4D (diagonal, ZOH) and DLR kernels in one block family.

    block(x) = x + Dropout(Out(Dropout(GELU(SSMConv(Norm(x)) + D * Norm(x)))))     (pre-norm)
             = Norm(x + ...)                                                        (post-norm)

``SSMConv`` convolves each of the H channels with its kernel K (n_dir, H, L): causal (n_dir = 1) or
bidirectional (a forward and a backward kernel, see :func:`spt.kernels.fft_conv`); Out is
Linear(H, 2H) + GLU (S4) or Linear(H, H) (DLR). Kernels (B, L, H layout throughout):

* :class:`S4Kernel`  - A = Lambda - P P^*, bilinear, HiPPO-LegS init; Cauchy + Woodbury
  (:func:`spt.kernels.dplr_kernel`). Learns C-tilde for the kernel length ``max_len`` (as S4 does).
* :class:`S4DKernel` - diagonal Lambda, ZOH: K_l = 2 Re sum_n C_n B_n (e^{dt Lambda_n} - 1)/Lambda_n
  e^{dt Lambda_n l}; S4D-LegS / Lin / Inv init (:func:`spt.kernels.vandermonde`).
* :class:`DLRKernel` - paper eq. 3: K_l = Re sum_n C_n e^{Lambda_n l} (B = 1, Lambda shared by the
  H channels of a layer), "omega" init.

Initialisations (``SSMConfig.init``): the kind's structured one (HiPPO-LegS, S4D-Lin / Inv, DLR
"omega"); "random_ssm" draws the stored state-space parameters (Lambda, P, B, C) from
N(0, random_std^2) and keeps the rest (log-uniform dt, linears, norms, D); "random" is the paper's
rule, every parameter ~ N(0, random_std^2): :class:`SSMEncoder` resets all of its own parameters
with :func:`spt.models.init.paper_random_init_` (and the full model, encoder and head included, is
reset where it is built: :func:`spt.models.init.apply_init_`).

Complex parameters are stored as real (..., 2) tensors (Adam sees real and imaginary parts), and the
real part of Lambda through a transform that keeps it negative (S4 / S4D: log(-Re), DLR: sqrt(-Re)).
The state-space parameters carry optimiser hints ``p._optim = {"lr": cfg.lr, "weight_decay": 0}``;
dt follows ``cfg.dt_lr`` (the final S4's LRA configs train it at the run's lr, still without weight
decay); S4 / S4D's C (like S4's) and the linear layers use the run's lr and weight decay. S4 with
``cfg.n_ssm = S < H`` learns S copies of (Lambda, P, B), channel h using copy h mod S (the S4
code's n_ssm); C and dt stay per channel.
With ``cfg.tie_dropout`` a dropout mask is drawn once per example and channel and shared along the
sequence (the S4 code's tie_dropout).

Padding: padded positions (right padding, ``valid`` False) are zeroed before each convolution, so
the backward kernel of a bidirectional layer sees zeros there and real positions never depend on
padding. Causal layers have a recurrent step mode (:meth:`SSMEncoder.step`) equal to the
convolution.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from ..kernels import (
    FFT_CONV_PATHS,
    KERNEL_PATHS,
    c_to_ctilde,
    ctilde_to_c,
    dplr_discrete,
    dplr_kernel,
    fft_conv,
    vandermonde,
)
from ..ssm_config import SSMConfig
from . import hippo
from .dropout import Dropout
from .init import paper_random_init_


def _param(module: nn.Module, name: str, value: torch.Tensor, lr=None) -> None:
    """Register a float32 parameter. `lr`: None - no hint (the run's lr and weight decay); a
    float - that lr and no weight decay; "run" - the run's lr and no weight decay."""
    p = nn.Parameter(value.detach().to(torch.float32).contiguous())
    if lr == "run":
        p._optim = {"weight_decay": 0.0}
    elif lr is not None:
        p._optim = {"lr": lr, "weight_decay": 0.0}
    module.register_parameter(name, p)


class TiedDropout(nn.Module):
    """Dropout of x (B, L, H) with one mask per example and channel, shared by all L positions."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand(x.shape[0], 1, x.shape[-1], device=x.device) >= self.p
        return x * keep.to(x.dtype) / (1.0 - self.p)


def _as_real(z: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(z.to(torch.complex64)).contiguous()


def _c(p: torch.Tensor) -> torch.Tensor:
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
    if cfg.kind == "s4":
        return S4Kernel(cfg, n_dir)
    if cfg.kind == "s4d":
        return S4DKernel(cfg, n_dir)
    if cfg.kind == "dlr":
        return DLRKernel(cfg, n_dir)
    raise ValueError(f"unknown SSM kind {cfg.kind!r}")


class MaskedBatchNorm(nn.BatchNorm1d):
    """BatchNorm over channels whose batch statistics use real positions only. x (..., H).

    With `valid` (...) bool, the batch mean and variance are weighted sums over the real positions
    (no boolean indexing: no host sync, no data-dependent shapes), the running statistics are
    updated as ``nn.BatchNorm1d`` updates them from those positions, and padded outputs are 0.
    """

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        if valid is None or x.dim() == 2:
            return super().forward(flat).reshape(x.shape)
        dt = torch.promote_types(x.dtype, torch.float32)            # statistics in >= float32
        w = valid.reshape(-1, 1).to(dt)                             # (N, 1): 1 on real positions
        xf = flat.to(dt)
        use_batch = self.training or self.running_mean is None
        if use_batch:
            n = w.sum()
            mean = (xf * w).sum(0) / n.clamp_min(1.0)               # (H,)
            var = (((xf - mean) ** 2) * w).sum(0) / n.clamp_min(1.0)  # biased, as BatchNorm uses
            if self.training and self.track_running_stats:
                self._update_running(mean, var, n)
        else:
            mean, var = self.running_mean.to(dt), self.running_var.to(dt)
        y = (xf - mean) * torch.rsqrt(var + self.eps)
        if self.affine:
            y = y * self.weight.to(dt) + self.bias.to(dt)
        return y.masked_fill(w == 0, 0.0).to(x.dtype).reshape(x.shape)

    @torch.no_grad()
    def _update_running(self, mean: torch.Tensor, var: torch.Tensor, n: torch.Tensor) -> None:
        """nn.BatchNorm1d's update (unbiased variance, momentum or cumulative average), on the
        device: the counts stay tensors."""
        self.num_batches_tracked.add_(1)
        if self.momentum is None:  # cumulative moving average
            f = 1.0 / self.num_batches_tracked.to(mean.dtype)
        else:
            f = self.momentum
        unbiased = var * (n / (n - 1).clamp_min(1.0))
        self.running_mean.mul_(1 - f).add_(f * mean.to(self.running_mean.dtype))
        self.running_var.mul_(1 - f).add_(f * unbiased.to(self.running_var.dtype))


class _LayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return super().forward(x)


def make_norm(cfg: SSMConfig) -> nn.Module:
    return _LayerNorm(cfg.d_model) if cfg.norm == "layer" else MaskedBatchNorm(cfg.d_model)


def cap_reach(k: torch.Tensor, reach: Optional[int]) -> torch.Tensor:
    """The kernel k (n_dir, H, L) with every lag past `reach` zeroed: output t then depends on
    inputs t - reach .. t (and .. t + reach with a backward kernel, whose index s weighs input
    t + s + 1). reach None: k unchanged. The range probe's truncated kernel."""
    if reach is None:
        return k
    lag = torch.arange(k.shape[-1], device=k.device)
    keep = torch.stack([lag <= reach, lag < reach])[:k.shape[0], None, :]  # (n_dir, 1, L)
    return k * keep.to(k.dtype)


class ConvBlock(nn.Module):
    """One residual block around a long convolution: norm -> (K * z + D z) -> GELU -> linear/GLU.
    forward(x (B, L, H), valid (B, L) or None) -> (B, L, H). The kernel module comes from
    ``kernel_fn(cfg, n_dir)`` and is called as ``kernel(L) -> (n_dir, H, L)`` (S4 / S4D / DLR
    here, SGConv in :mod:`spt.models.sgconv`, a free kernel in :mod:`spt.models.free_conv`).
    ``path`` is :func:`spt.kernels.fft_conv`'s backend: "torch" (autograd's backward, the
    reference) or "manual" (:mod:`spt.kernels.paths`)."""

    path_kind = "fft_conv"
    paths = FFT_CONV_PATHS
    path = "torch"

    def __init__(self, cfg, kernel_fn: Callable):
        super().__init__()
        H = cfg.d_model
        self.prenorm = cfg.prenorm
        self.norm = make_norm(cfg)
        self.kernel = kernel_fn(cfg, 1 if cfg.causal else 2)
        self.reach = getattr(cfg, "reach", None)
        self.D = nn.Parameter(torch.randn(H))
        self.act = nn.GELU()
        tied = getattr(cfg, "tie_dropout", False)
        self.drop = TiedDropout(cfg.dropout) if tied else Dropout(cfg.dropout)
        self.out = nn.Sequential(nn.Linear(H, 2 * H), nn.GLU()) if cfg.glu else nn.Linear(H, H)

    def _post(self, y: torch.Tensor) -> torch.Tensor:
        return self.drop(self.out(self.drop(self.act(y))))

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None,
                recompute: bool = False) -> torch.Tensor:
        """recompute: activation checkpointing of the convolution and output layers (the norm
        stays outside, so BatchNorm's running statistics are updated once)."""
        z = self.norm(x, valid) if self.prenorm else x
        if recompute:
            x = checkpoint(self._mix, x, z, valid, use_reentrant=False)
        else:
            x = self._mix(x, z, valid)
        return x if self.prenorm else self.norm(x, valid)

    def conv(self, z: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The linear part: K * z + D z, z (B, L, H) -> (B, L, H), padded positions of z zeroed
        first (zeros for both directions). Computed in float32 (float64 for float64 inputs)
        whatever the autocast state."""
        if valid is not None:
            z = z * valid[..., None].to(z.dtype)
        with torch.autocast(device_type=z.device.type, enabled=False):
            zf = z.float() if z.dtype != torch.float64 else z
            k = cap_reach(self.kernel(z.shape[1]), self.reach)
            return fft_conv(zf, k, skip=self.D, backend=self.path)

    def _mix(self, x: torch.Tensor, z: torch.Tensor, valid: Optional[torch.Tensor]) -> torch.Tensor:
        """x + Out(GELU(K * z + D z)); z is the (normed) input, (B, L, H)."""
        return x + self._post(self.conv(z, valid).to(x.dtype))


class SSMBlock(ConvBlock):
    """One residual SSM block (a :class:`ConvBlock` with an S4 / S4D / DLR kernel), with a
    recurrent step mode for causal layers."""

    def __init__(self, cfg: SSMConfig):
        super().__init__(cfg, make_kernel)
        self.causal = cfg.causal
        self._step = None

    # ---- recurrent step mode (causal layers only)
    @torch.no_grad()
    def setup_step(self) -> None:
        if not self.causal:
            raise RuntimeError("step mode needs a causal SSM layer (SSMConfig.causal=True); a "
                               "bidirectional layer looks at future positions")
        if self.reach is not None:
            raise RuntimeError("step mode runs the full recurrence: a layer with a capped reach "
                               "(SSMConfig.reach) has no recurrent form; use the convolution")
        self._step = self.kernel.discrete()

    def default_state(self, batch: int) -> torch.Tensor:
        if self._step is None:
            raise RuntimeError("call setup_step() before stepping (and again after any update)")
        Bb = self._step[1]
        return torch.zeros(batch, *Bb.shape, dtype=Bb.dtype, device=Bb.device)

    def step(self, x: torch.Tensor, state: torch.Tensor):
        """One position: x (B, H), state (B, H, S) -> (B, H), new state."""
        Ab, Bb, C, scale = self._step
        z = self.norm(x) if self.prenorm else x
        u = z.to(Bb.dtype)[..., None]
        if Ab.dim() == 3:
            state = torch.einsum("hij,bhj->bhi", Ab, state) + Bb * u
        else:
            state = Ab * state + Bb * u
        y = scale * (C[0] * state).sum(-1).real.to(z.dtype) + z * self.D
        x = x + self._post(y)
        return (x if self.prenorm else self.norm(x)), state


class ConvStack(nn.Module):
    """A stack of convolution blocks (+ a final norm when pre-norm). (B, L, H) -> (B, L, H).

    forward(x (B, L, H), valid (B, L) bool or None) -> (B, L, H); a Backbone's ``layers``.
    causal : True when each convolution only looks back (cfg.causal).
    grad_checkpointing : when True (set by TrainConfig.grad_checkpointing), training recomputes
    each block's convolution in the backward pass instead of storing its activations.
    """

    def __init__(self, cfg, block: Callable):
        super().__init__()
        self.cfg = cfg
        self.blocks = nn.ModuleList(block(cfg) for _ in range(cfg.n_layers))
        self.norm = make_norm(cfg) if cfg.prenorm else None
        self.causal = cfg.causal
        self.grad_checkpointing = False

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        ckpt = self.grad_checkpointing and self.training and torch.is_grad_enabled()
        for block in self.blocks:
            x = block(x, valid, recompute=ckpt)
        return self.norm(x, valid) if self.norm is not None else x

    @torch.no_grad()
    def kernels(self, L: int) -> list[torch.Tensor]:
        """The convolution kernel of every layer: a list of (n_dir, H, L) float tensors, copies
        that need no gradient (a free kernel, :mod:`spt.models.free_conv`, is a slice of its
        parameter: a view of it would still require grad and share its storage)."""
        return [cap_reach(block.kernel(L), block.reach).float().clone() for block in self.blocks]


class SSMEncoder(ConvStack):
    """A stack of :class:`SSMBlock` (+ a final norm when pre-norm). (B, L, H) -> (B, L, H).

    With ``cfg.init == "random"`` every parameter of the stack (norms, dt, state-space parameters,
    D, output linears) is reset to N(0, cfg.random_std^2) after construction (the paper's rule;
    see :mod:`spt.models.init`).
    """

    def __init__(self, cfg: SSMConfig):
        super().__init__(cfg, SSMBlock)
        if cfg.init == "random":
            paper_random_init_(self, cfg.random_std)

    def setup_step(self) -> None:
        """Freeze the discretised matrices for :meth:`step` (call again after parameter updates)."""
        for block in self.blocks:
            block.setup_step()

    def default_state(self, batch: int) -> list[torch.Tensor]:
        return [block.default_state(batch) for block in self.blocks]

    def step(self, x: torch.Tensor, states: list[torch.Tensor]):
        """Recurrent mode, one position: x (B, H) -> (B, H), new states. Equals forward() of a
        causal encoder position by position (in eval mode)."""
        new = []
        for block, s in zip(self.blocks, states):
            x, s = block.step(x, s)
            new.append(s)
        return (self.norm(x) if self.norm is not None else x), new

