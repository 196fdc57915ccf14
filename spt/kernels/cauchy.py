"""Cauchy sums with conjugate pairs: the resolvents behind the S4 (DPLR) kernel.

    out[m, h, j] = sum_n  v[m, h, n] / (z[j] - w[h, n])  +  conj(v[m, h, n]) / (z[j] - conj(w[h, n]))

    v : (M, H, N) complex   (products of B, P, C-tilde, Q and dt, one row per product)
    z : (J,) complex        (evaluation nodes; not differentiated)
    w : (H, N) complex      (dt * Lambda, half of each conjugate pair)
    out : (M, H, J) complex

Layers, as every fast path in spt: ``@triton.jit`` kernels -> launchers -> :class:`_Cauchy`
(``torch.autograd.Function``) -> :func:`cauchy`; :func:`cauchy_ref` materialises (M, H, N, J).
Neither fast path materialises the (H, N, J) matrix:

* Triton: one program per (row m*h, block of j) loops over n; the backward loops over j.
* torch ("chunked", the CPU fast path): blocks of nodes; per block the reciprocals
  1/(z - w), 1/(z - conj w) are formed once and shared by all M rows through one batched GEMM.
  Peak memory is O(H N chunk), chunk ~ CHUNK_ELEMS / (H N).

Gradients (PyTorch's convention, grad = dLoss/dRe + i dLoss/dIm), with G = grad of out,
R1 = 1/(z - w), R2 = 1/(z - conj w):
    grad_v = sum_j G conj(R1) + conj(G) R2
    grad_w = sum_m conj(v) sum_j [G conj(R1)^2 + conj(G) R2^2]
"""
from __future__ import annotations

import torch

from ._triton import HAS_TRITON, block_sizes, resolve_backend, tl, triton


def cauchy_ref(v: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Reference: materialise the (M, H, N, J) terms. v (M, H, N), z (J,), w (H, N) -> (M, H, J)."""
    r = v[..., None] / (z - w[..., None]) + v.conj()[..., None] / (z - w.conj()[..., None])
    return r.sum(-2)


# ----------------------------------------------------------------------------- Triton kernels
if HAS_TRITON:

    @triton.jit
    def _cauchy_fwd_kernel(VR, VI, ZR, ZI, WR, WI, OR, OI, H, N, J,
                           BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr):
        """out[r, j] for r = m*H + h; grid (M*H, J/BLOCK_J); loops over n."""
        row = tl.program_id(0)
        h = row % H
        offs_j = tl.program_id(1) * BLOCK_J + tl.arange(0, BLOCK_J)
        mj = offs_j < J
        zr = tl.load(ZR + offs_j, mask=mj, other=0.0)
        zi = tl.load(ZI + offs_j, mask=mj, other=0.0)
        acc_r = tl.zeros((BLOCK_J,), dtype=tl.float32)
        acc_i = tl.zeros((BLOCK_J,), dtype=tl.float32)
        for n0 in range(0, N, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            mn = offs_n < N
            vr = tl.load(VR + row * N + offs_n, mask=mn, other=0.0)[:, None]
            vi = tl.load(VI + row * N + offs_n, mask=mn, other=0.0)[:, None]
            wr = tl.load(WR + h * N + offs_n, mask=mn, other=0.0)[:, None]
            wi = tl.load(WI + h * N + offs_n, mask=mn, other=0.0)[:, None]
            ar = zr[None, :] - wr            # z - w
            ai = zi[None, :] - wi
            br = ar                          # z - conj(w)
            bi = zi[None, :] + wi
            keep = mn[:, None] & mj[None, :]
            da = tl.where(keep, ar * ar + ai * ai, 1.0)   # padded lanes: no 0/0
            db = tl.where(keep, br * br + bi * bi, 1.0)
            # v / a = v conj(a) / |a|^2 ;  conj(v) / b = conj(v) conj(b) / |b|^2
            tr = (vr * ar + vi * ai) / da + (vr * br - vi * bi) / db
            ti = (vi * ar - vr * ai) / da + (-vi * br - vr * bi) / db
            acc_r += tl.sum(tl.where(keep, tr, 0.0), axis=0)
            acc_i += tl.sum(tl.where(keep, ti, 0.0), axis=0)
        tl.store(OR + row * J + offs_j, acc_r, mask=mj)
        tl.store(OI + row * J + offs_j, acc_i, mask=mj)

    @triton.jit
    def _cauchy_bwd_kernel(GR, GI, ZR, ZI, WR, WI, T1R, T1I, T2R, T2I, H, N, J,
                           BLOCK_N: tl.constexpr, BLOCK_J: tl.constexpr):
        """T1 = sum_j G conj(R1) + conj(G) R2;  T2 = sum_j G conj(R1)^2 + conj(G) R2^2."""
        row = tl.program_id(0)
        h = row % H
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        mn = offs_n < N
        wr = tl.load(WR + h * N + offs_n, mask=mn, other=0.0)[:, None]
        wi = tl.load(WI + h * N + offs_n, mask=mn, other=0.0)[:, None]
        t1r = tl.zeros((BLOCK_N,), dtype=tl.float32)
        t1i = tl.zeros((BLOCK_N,), dtype=tl.float32)
        t2r = tl.zeros((BLOCK_N,), dtype=tl.float32)
        t2i = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for j0 in range(0, J, BLOCK_J):
            offs_j = j0 + tl.arange(0, BLOCK_J)
            mj = offs_j < J
            zr = tl.load(ZR + offs_j, mask=mj, other=0.0)[None, :]
            zi = tl.load(ZI + offs_j, mask=mj, other=0.0)[None, :]
            gr = tl.load(GR + row * J + offs_j, mask=mj, other=0.0)[None, :]
            gi = tl.load(GI + row * J + offs_j, mask=mj, other=0.0)[None, :]
            ar = zr - wr                       # a = z - w ; conj(R1) = a / |a|^2
            ai = zi - wi
            br = zr - wr                       # b = z - conj(w) ; R2 = conj(b) / |b|^2
            bi = zi + wi
            keep = mn[:, None] & mj
            da = tl.where(keep, ar * ar + ai * ai, 1.0)   # padded lanes: no 0/0
            db = tl.where(keep, br * br + bi * bi, 1.0)
            c1r = ar / da                      # conj(R1)
            c1i = ai / da
            r2r = br / db                      # R2
            r2i = -bi / db
            # G * conj(R1) + conj(G) * R2
            ur = gr * c1r - gi * c1i + gr * r2r + gi * r2i
            ui = gr * c1i + gi * c1r + gr * r2i - gi * r2r
            # squares
            s1r = c1r * c1r - c1i * c1i
            s1i = 2.0 * c1r * c1i
            s2r = r2r * r2r - r2i * r2i
            s2i = 2.0 * r2r * r2i
            qr = gr * s1r - gi * s1i + gr * s2r + gi * s2i
            qi = gr * s1i + gi * s1r + gr * s2i - gi * s2r
            t1r += tl.sum(tl.where(keep, ur, 0.0), axis=1)
            t1i += tl.sum(tl.where(keep, ui, 0.0), axis=1)
            t2r += tl.sum(tl.where(keep, qr, 0.0), axis=1)
            t2i += tl.sum(tl.where(keep, qi, 0.0), axis=1)
        tl.store(T1R + row * N + offs_n, t1r, mask=mn)
        tl.store(T1I + row * N + offs_n, t1i, mask=mn)
        tl.store(T2R + row * N + offs_n, t2r, mask=mn)
        tl.store(T2I + row * N + offs_n, t2i, mask=mn)


def _fwd_triton(v, z, w):
    M, H, N = v.shape
    J = z.shape[0]
    out = torch.empty(2, M, H, J, device=v.device, dtype=torch.float32)
    bn, bj = block_sizes(N, J)
    _cauchy_fwd_kernel[(M * H, triton.cdiv(J, bj))](
        v.real.contiguous(), v.imag.contiguous(), z.real.contiguous(), z.imag.contiguous(),
        w.real.contiguous(), w.imag.contiguous(), out[0], out[1], H, N, J,
        BLOCK_N=bn, BLOCK_J=bj)
    return torch.complex(out[0], out[1])


def _bwd_triton(g, v, z, w):
    M, H, N = v.shape
    J = z.shape[0]
    g = g.to(torch.complex64)
    t = torch.empty(4, M, H, N, device=v.device, dtype=torch.float32)
    bn, bj = block_sizes(N, J)
    _cauchy_bwd_kernel[(M * H, triton.cdiv(N, bn))](
        g.real.contiguous(), g.imag.contiguous(), z.real.contiguous(), z.imag.contiguous(),
        w.real.contiguous(), w.imag.contiguous(), t[0], t[1], t[2], t[3], H, N, J,
        BLOCK_N=bn, BLOCK_J=bj)
    return torch.complex(t[0], t[1]), torch.complex(t[2], t[3])


# ----------------------------------------------------------------------------- chunked torch path
CHUNK_ELEMS = 1 << 19   # target size of the torch path's per-chunk (H, N, chunk) matrices


def _chunk(H: int, N: int) -> int:
    return max(1, CHUNK_ELEMS // max(1, H * N))


def _recip(z, w):
    """R1 = 1/(z - w), R2 = 1/(z - conj w): (H, N, c) each, for z (c,), w (H, N)."""
    return 1.0 / (z - w[..., None]), 1.0 / (z - w.conj()[..., None])


def _fwd_torch(v, z, w):
    M, H, N = v.shape
    J = z.shape[0]
    vv = torch.cat([v, v.conj()], dim=-1).transpose(0, 1)              # (H, M, 2N)
    out = torch.empty(H, M, J, dtype=v.dtype, device=v.device)
    step = _chunk(H, N)
    for j0 in range(0, J, step):
        R1, R2 = _recip(z[j0:j0 + step], w)
        out[..., j0:j0 + step] = torch.bmm(vv, torch.cat([R1, R2], dim=1))
    return out.transpose(0, 1)


def _bwd_torch(g, v, z, w):
    M, H, N = v.shape
    J = z.shape[0]
    g = g.to(v.dtype).transpose(0, 1)                                   # (H, M, J)
    acc = torch.zeros(H, M, 2 * N, dtype=v.dtype, device=v.device)
    step = _chunk(H, N)
    for j0 in range(0, J, step):
        R1, R2 = _recip(z[j0:j0 + step], w)
        c1 = R1.conj()
        lhs = torch.cat([g[..., j0:j0 + step], g[..., j0:j0 + step].conj()], dim=-1)  # (H, M, 2c)
        rhs = torch.cat([torch.cat([c1, c1 * c1], dim=1),
                         torch.cat([R2, R2 * R2], dim=1)], dim=2)       # (H, 2N, 2c)
        acc += torch.bmm(lhs, rhs.transpose(1, 2))
    acc = acc.transpose(0, 1)
    return acc[..., :N], acc[..., N:]


class _Cauchy(torch.autograd.Function):
    """Fast conjugate-pair Cauchy sum (Triton or chunked torch) with a recomputing backward."""

    @staticmethod
    def forward(ctx, v, z, w, backend):
        ctx.save_for_backward(v, z, w)
        ctx.backend = backend
        fwd = _fwd_triton if backend == "triton" else _fwd_torch
        return fwd(v, z, w).to(v.dtype)

    @staticmethod
    def backward(ctx, g):
        v, z, w = ctx.saved_tensors
        bwd = _bwd_triton if ctx.backend == "triton" else _bwd_torch
        t1, t2 = bwd(g, v, z, w)
        t1, t2 = t1.to(v.dtype), t2.to(v.dtype)
        grad_v = t1 if ctx.needs_input_grad[0] else None
        grad_w = (v.conj() * t2).sum(0) if ctx.needs_input_grad[2] else None
        return grad_v, None, grad_w, None


def cauchy(v: torch.Tensor, z: torch.Tensor, w: torch.Tensor, backend: str = "torch") -> torch.Tensor:
    """out[m, h, j] = sum_n v/(z_j - w) + conj(v)/(z_j - conj(w)).

    v : (M, H, N) complex; z : (J,) complex nodes (treated as constants); w : (H, N) complex.
    Returns (M, H, J) complex. backend : the path, "torch" | "triton" | "ref".
    Differentiable in v and w on every backend (z gets no gradient on the fast paths).
    """
    if v.dim() != 3 or w.dim() != 2 or z.dim() != 1 or v.shape[1:] != w.shape:
        raise ValueError(f"cauchy: expected v (M, H, N), z (J,), w (H, N); got {tuple(v.shape)}, "
                         f"{tuple(z.shape)}, {tuple(w.shape)}")
    if not (v.is_complex() and w.is_complex() and z.is_complex()):
        raise TypeError("cauchy: v, z and w must be complex tensors")
    z, w = z.to(v.dtype).detach(), w.to(v.dtype)
    b = resolve_backend(backend, v)
    if b == "ref":
        return cauchy_ref(v, z, w)
    return _Cauchy.apply(v, z, w, b)
