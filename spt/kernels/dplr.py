"""The S4 convolution kernel of a DPLR state space, and its naive reference.

Continuous system (full state of size N, stored as N2 = N/2 conjugate pairs):
    A = diag(Lambda_f) - p p^*,   Lambda_f = [Lambda; conj Lambda],  p = [P; conj P],
    B_f = [B; conj B],  C_f = [C; conj C]
Bilinear discretisation with step dt (paper eq. 2.2-2.3):
    Ā = (I - dt/2 A)^-1 (I + dt/2 A),   B̄ = (I - dt/2 A)^-1 dt B
Kernel (eq. 2.4): K_k = C_f^T Ā^k B̄ (real, because the state comes in conjugate pairs).

:func:`dplr_kernel` never forms Ā. Its truncated generating function at the L-th roots of unity
w_j = exp(-2 pi i j / L) is
    K^(w) = C~^T (I - w Ā)^-1 B̄ = 2/(1+w) * C~^T (z I - dt A)^-1 dt B,   z = 2 (1-w)/(1+w),
with C~ = (I - Ā^L)^T C ("C-tilde", which S4 learns directly). The resolvent of the diagonal
plus rank-1 matrix is evaluated with the Woodbury identity from four Cauchy sums
(:func:`spt.kernels.cauchy.cauchy`), and K = irfft(K^). At the Nyquist node w = -1 (even L) the
formula is singular but the limit is exact: (I + Ā)^-1 B̄ = dt B / 2, so K^(-1) = dt Re(sum C~ B).

:func:`dplr_kernel_ref` builds Ā, B̄ densely and sums C^T Ā^k B̄ (small N and L only); it and
:func:`dplr_discrete` are also what the recurrent step mode uses.

Shapes: Lambda, P, B (H, N2) complex; C (D, H, N2) complex (D = 1 causal, 2 bidirectional);
dt (H,) real.
"""
from __future__ import annotations

import math

import torch

from .cauchy import cauchy


def _nodes(L: int, cdtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """z_j = 2 i tan(pi j / L) and 2 / (1 + w_j) for j < L/2 (computed in float64)."""
    j = torch.arange((L + 1) // 2, dtype=torch.float64, device=device)
    theta = 2 * math.pi * j / L
    z = torch.complex(torch.zeros_like(j), 2 * torch.tan(theta / 2))
    factor = 2 / (1 + torch.exp(torch.complex(torch.zeros_like(j), -theta)))
    return z.to(cdtype), factor.to(cdtype)


def dplr_kernel(Lambda, P, B, C, dt, L: int, backend: str = "torch") -> torch.Tensor:
    """S4 kernel K (D, H, L) real from (Lambda, P, B, C-tilde, dt); see the module docstring."""
    D = C.shape[0]
    z, factor = _nodes(L, C.dtype, C.device)
    w = dt[:, None] * Lambda                                             # (H, N2)
    a = torch.cat([C, P.conj()[None]], dim=0)                            # (D+1, H, N2): C~, Q
    b = torch.stack([B, P], dim=0)                                       # (2, H, N2)
    v = (a[:, None] * b[None] * dt[:, None]).reshape(2 * (D + 1), *w.shape)
    r = cauchy(v, z, w, backend).reshape(D + 1, 2, *w.shape[:1], z.shape[0])
    k_f = r[:D, 0] - r[:D, 1] * r[D:, 0] / (1 + r[D:, 1])                # Woodbury, rank 1
    k_f = k_f * factor
    if L % 2 == 0:                                                       # Nyquist node w = -1
        nyq = dt * (C * B).sum(-1).real                                  # (D, H)
        k_f = torch.cat([k_f, nyq[..., None].to(k_f.dtype)], dim=-1)
    return torch.fft.irfft(k_f, n=L)


def _full(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, x.conj()], dim=-1)


def dplr_discrete(Lambda, P, B, dt) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense bilinear discretisation on the full state: Ā (H, N, N), B̄ (H, N) complex."""
    lam, p = _full(Lambda), _full(P)
    A = torch.diag_embed(lam) - p[..., :, None] * p.conj()[..., None, :]
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    h = (dt / 2).to(A.dtype)[:, None, None]
    M = eye - h * A
    Abar = torch.linalg.solve(M, eye + h * A)
    Bbar = torch.linalg.solve(M, (dt.to(A.dtype)[:, None] * _full(B))[..., None])[..., 0]
    return Abar, Bbar


def c_to_ctilde(C: torch.Tensor, Abar: torch.Tensor, L: int) -> torch.Tensor:
    """C-tilde = (I - Ā^L)^T C for half-pair C (D, H, N2); Ā (H, N, N) from :func:`dplr_discrete`."""
    eye = torch.eye(Abar.shape[-1], dtype=Abar.dtype, device=Abar.device)
    Mt = (eye - torch.linalg.matrix_power(Abar, L)).transpose(-1, -2)
    Ct = torch.einsum("hij,dhj->dhi", Mt, _full(C))
    return Ct[..., : C.shape[-1]]


def ctilde_to_c(Ct: torch.Tensor, Abar: torch.Tensor, L: int) -> torch.Tensor:
    """Inverse of :func:`c_to_ctilde`: the full-state C (D, H, N) of the recurrence."""
    eye = torch.eye(Abar.shape[-1], dtype=Abar.dtype, device=Abar.device)
    Mt = (eye - torch.linalg.matrix_power(Abar, L)).transpose(-1, -2)
    Cf = _full(Ct).transpose(0, 1)[..., None]                            # (H, D, N, 1)
    return torch.linalg.solve(Mt[:, None], Cf)[..., 0].transpose(0, 1)


def dplr_kernel_ref(Lambda, P, B, C, dt, L: int) -> torch.Tensor:
    """Naive K_k = Re C_f^T Ā^k B̄ for k < L, with the *true* C (D, H, N2) (not C-tilde)."""
    Abar, x = dplr_discrete(Lambda, P, B, dt)
    Cf = _full(C)
    out = []
    for _ in range(L):
        out.append(torch.einsum("dhn,hn->dh", Cf, x).real)
        x = torch.einsum("hij,hj->hi", Abar, x)
    return torch.stack(out, dim=-1)
