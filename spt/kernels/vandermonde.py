"""Vandermonde sums: the kernels of diagonal SSMs (S4D, DLR).

    K[m, h, l] = Re  sum_n  v[m, h, n] * exp(x[h, n] * l),      l = 0 .. L-1

    v : (M, H, N) complex   (C * B-bar, one row per direction / output)
    x : (H, N) complex      (log of the discrete eigenvalues: dt*Lambda for S4D, Lambda for DLR)
    K : (M, H, L) real

Layers, as every fast path in spt: ``@triton.jit`` kernels -> launchers -> :class:`_Vandermonde`
(``torch.autograd.Function``) -> :func:`vandermonde`; :func:`vandermonde_ref` is the plain-torch
reference that materialises the (H, N, L) matrix. No fast path materialises it:

* Triton: one program per (row m*h, block of l) loops over n (forward); the backward loops over l.
* torch ("chunked", the CPU fast path): write l = k*C + c with C ~ sqrt(L). Then
  exp(x l) = exp(x kC) * exp(x c), and K[m, h, k, c] = Re sum_n (v exp(x kC))[n, k] exp(x c)[n, c]
  is one batched real GEMM per channel, with O(H N sqrt(L)) extra memory instead of O(H N L);
  channels are processed in groups so the intermediates stay near CHUNK_ELEMS elements.
  When x is one row shared by all channels (DLR's Lambda, passed as an expanded view), blocks of
  E = exp(x l) (N, chunk) are formed once and applied to all M * H rows by one GEMM.
* gemm (opt-in, shared x only): the same GEMM with E (positions, N) formed block by block from
  one exp per state and complex multiplies (the torch path's exp per entry cost more than its
  GEMM on a CPU), in blocks of CUDA_GEMM_ELEMS / N positions on a GPU (one block at LRA lengths).
  It does 1/(M H) of the Triton kernels' exp / cos / sin work, which recompute E for every row.

Gradients (PyTorch's convention for complex inputs, grad = dLoss/dRe + i dLoss/dIm), with
G = dLoss/dK and E = exp(x l):  grad_v = sum_l G conj(E),  grad_x = sum_m conj(v) sum_l G l conj(E).
"""
from __future__ import annotations

import math

import torch

from ._triton import HAS_TRITON, block_sizes, resolve_backend, tl, triton


def vandermonde_ref(v: torch.Tensor, x: torch.Tensor, L: int) -> torch.Tensor:
    """Reference: materialise exp(x * l) as (H, N, L). v (M, H, N), x (H, N) -> (M, H, L) real."""
    l = torch.arange(L, device=x.device, dtype=x.real.dtype)
    E = torch.exp(x[..., None] * l)
    return torch.einsum("mhn,hnl->mhl", v, E).real


# ----------------------------------------------------------------------------- Triton kernels
if HAS_TRITON:

    @triton.jit
    def _vandermonde_fwd_kernel(VR, VI, XR, XI, OUT, H, N, L,
                                BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr):
        """OUT[r, l] = sum_n Re(v[r, n] exp(x[r % H, n] l)); r = m*H + h; grid (M*H, L/BLOCK_L)."""
        row = tl.program_id(0)
        h = row % H
        offs_l = tl.program_id(1) * BLOCK_L + tl.arange(0, BLOCK_L)
        lf = offs_l.to(tl.float32)
        acc = tl.zeros((BLOCK_L,), dtype=tl.float32)
        for n0 in range(0, N, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            mn = offs_n < N
            vr = tl.load(VR + row * N + offs_n, mask=mn, other=0.0)
            vi = tl.load(VI + row * N + offs_n, mask=mn, other=0.0)
            xr = tl.load(XR + h * N + offs_n, mask=mn, other=0.0)
            xi = tl.load(XI + h * N + offs_n, mask=mn, other=0.0)
            mag = tl.exp(xr[:, None] * lf[None, :])
            ph = xi[:, None] * lf[None, :]
            term = vr[:, None] * (mag * tl.cos(ph)) - vi[:, None] * (mag * tl.sin(ph))
            acc += tl.sum(term, axis=0)
        tl.store(OUT + row * L + offs_l, acc, mask=offs_l < L)

    @triton.jit
    def _vandermonde_bwd_kernel(G, XR, XI, S0R, S0I, S1R, S1I, H, N, L,
                                BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr):
        """S0[r, n] = sum_l G[r, l] conj(E[n, l]);  S1[r, n] = sum_l G[r, l] l conj(E[n, l])."""
        row = tl.program_id(0)
        h = row % H
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        mn = offs_n < N
        xr = tl.load(XR + h * N + offs_n, mask=mn, other=0.0)
        xi = tl.load(XI + h * N + offs_n, mask=mn, other=0.0)
        s0r = tl.zeros((BLOCK_N,), dtype=tl.float32)
        s0i = tl.zeros((BLOCK_N,), dtype=tl.float32)
        s1r = tl.zeros((BLOCK_N,), dtype=tl.float32)
        s1i = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for l0 in range(0, L, BLOCK_L):
            offs_l = l0 + tl.arange(0, BLOCK_L)
            g = tl.load(G + row * L + offs_l, mask=offs_l < L, other=0.0)
            lf = offs_l.to(tl.float32)
            mag = tl.exp(xr[:, None] * lf[None, :])
            ph = xi[:, None] * lf[None, :]
            er = mag * tl.cos(ph)
            ei = mag * tl.sin(ph)
            ge = g[None, :] * er
            gi = g[None, :] * ei
            s0r += tl.sum(ge, axis=1)
            s0i -= tl.sum(gi, axis=1)
            s1r += tl.sum(ge * lf[None, :], axis=1)
            s1i -= tl.sum(gi * lf[None, :], axis=1)
        tl.store(S0R + row * N + offs_n, s0r, mask=mn)
        tl.store(S0I + row * N + offs_n, s0i, mask=mn)
        tl.store(S1R + row * N + offs_n, s1r, mask=mn)
        tl.store(S1I + row * N + offs_n, s1i, mask=mn)


def _fwd_triton(v: torch.Tensor, x: torch.Tensor, L: int) -> torch.Tensor:
    M, H, N = v.shape
    vr, vi = v.real.contiguous(), v.imag.contiguous()
    xr, xi = x.real.contiguous(), x.imag.contiguous()
    out = torch.empty(M, H, L, device=v.device, dtype=torch.float32)
    bn, bl = block_sizes(N, L)
    _vandermonde_fwd_kernel[(M * H, triton.cdiv(L, bl))](vr, vi, xr, xi, out, H, N, L,
                                                         BLOCK_N=bn, BLOCK_L=bl)
    return out


def _bwd_triton(g: torch.Tensor, v: torch.Tensor, x: torch.Tensor, L: int):
    M, H, N = v.shape
    xr, xi = x.real.contiguous(), x.imag.contiguous()
    s = torch.empty(4, M, H, N, device=v.device, dtype=torch.float32)
    bn, bl = block_sizes(N, L)
    _vandermonde_bwd_kernel[(M * H, triton.cdiv(N, bn))](g.contiguous().float(), xr, xi,
                                                         s[0], s[1], s[2], s[3], H, N, L,
                                                         BLOCK_N=bn, BLOCK_L=bl)
    return torch.complex(s[0], s[1]), torch.complex(s[2], s[3])


# ----------------------------------------------------------------------------- chunked torch path
def _split(L: int) -> tuple[int, int]:
    """(C, K): block length C ~ sqrt(L) (a power of two >= 8) and K = ceil(L / C) blocks."""
    C = 1 << max(3, math.ceil(math.log2(max(1.0, math.sqrt(L)))))
    return C, -(-L // C)


def _powers(x: torch.Tensor, C: int, K: int):
    """exp(x c) (H, N, C) for c < C and exp(x k C) (H, N, K) for k < K."""
    r = x.real.dtype
    Zc = torch.exp(x[..., None] * torch.arange(C, device=x.device, dtype=r))
    Zk = torch.exp(x[..., None] * (torch.arange(K, device=x.device, dtype=r) * C))
    return Zc, Zk


CHUNK_ELEMS = 1 << 19   # target size of the torch path's intermediates (complex elements)


def _h_chunks(M: int, H: int, N: int, C: int, K: int):
    """Channel ranges whose intermediates (about M * h * K * max(N, C)) stay ~CHUNK_ELEMS."""
    step = max(1, CHUNK_ELEMS // (M * K * max(N, C)))
    return [(h, min(H, h + step)) for h in range(0, H, step)]


def _fwd_block(v, x, L, C, K):
    M, H, N = v.shape
    Zc, Zk = _powers(x, C, K)
    V = v[..., None] * Zk                                              # (M, H, N, K)
    # Re(V^T Zc) as one real GEMM per channel: [Re V, -Im V] @ [Re Zc; Im Zc]
    A = torch.cat([V.real, -V.imag], dim=2).permute(1, 0, 3, 2).reshape(H, M * K, 2 * N)
    out = torch.bmm(A, torch.cat([Zc.real, Zc.imag], dim=1))          # (H, M*K, C)
    return out.reshape(H, M, K * C)[..., :L].transpose(0, 1)


def _fwd_torch(v: torch.Tensor, x: torch.Tensor, L: int) -> torch.Tensor:
    M, H, N = v.shape
    C, K = _split(L)
    out = torch.empty(M, H, L, dtype=v.real.dtype, device=v.device)
    for h0, h1 in _h_chunks(M, H, N, C, K):
        out[:, h0:h1] = _fwd_block(v[:, h0:h1], x[h0:h1], L, C, K)
    return out


def _bwd_block(g, x, L, C, K):
    M, H, _ = g.shape
    N = x.shape[-1]
    Zc, Zk = _powers(x, C, K)
    g = torch.nn.functional.pad(g.to(Zc.real.dtype), (0, K * C - L))
    Gb = g.reshape(M, H, K, C).transpose(0, 1).reshape(H, M * K, C)   # real
    c = torch.arange(C, device=x.device, dtype=Zc.real.dtype)
    W = torch.cat([Zc.conj(), Zc.conj() * c], dim=1).transpose(1, 2)   # (H, C, 2N)
    T = torch.complex(torch.bmm(Gb, W.real.contiguous()), torch.bmm(Gb, W.imag.contiguous()))
    T = T.reshape(H, M, K, 2, N)
    T0, T1 = T[..., 0, :], T[..., 1, :]                                 # (H, M, K, N)
    Zk_c = Zk.conj()
    kC = torch.arange(K, device=x.device, dtype=Zc.real.dtype) * C
    s0 = torch.einsum("hnk,hmkn->mhn", Zk_c, T0)
    s1 = torch.einsum("hnk,hmkn->mhn", Zk_c * kC, T0) + torch.einsum("hnk,hmkn->mhn", Zk_c, T1)
    return s0, s1


def _bwd_torch(g: torch.Tensor, v: torch.Tensor, x: torch.Tensor, L: int):
    M, H, N = v.shape
    C, K = _split(L)
    s0 = torch.empty(M, H, N, dtype=v.dtype, device=v.device)
    s1 = torch.empty_like(s0)
    for h0, h1 in _h_chunks(M, H, N, C, K):
        s0[:, h0:h1], s1[:, h0:h1] = _bwd_block(g[:, h0:h1], x[h0:h1], L, C, K)
    return s0, s1


def _shared(x: torch.Tensor) -> bool:
    """x (H, N) is one row broadcast over the channels (DLR's Lambda): stride 0 on dim 0."""
    return x.shape[0] == 1 or x.stride(0) == 0


def _l_chunks(N: int, L: int):
    step = max(1, CHUNK_ELEMS // max(1, N))
    return [(l, min(L, l + step)) for l in range(0, L, step)]


def _fwd_shared(v: torch.Tensor, x0: torch.Tensor, L: int) -> torch.Tensor:
    """Shared eigenvalues x0 (N,): per block of l, E = exp(x0 l) (N, c) once, then one real GEMM
    [Re v, -Im v] (M*H, 2N) @ [Re E; Im E] (2N, c) for all rows."""
    M, H, N = v.shape
    vv = torch.cat([v.real, -v.imag], dim=-1).reshape(M * H, 2 * N)
    out = torch.empty(M * H, L, dtype=vv.dtype, device=v.device)
    for l0, l1 in _l_chunks(N, L):
        E = torch.exp(x0[:, None] * torch.arange(l0, l1, device=v.device, dtype=vv.dtype))
        out[:, l0:l1] = vv @ torch.cat([E.real, E.imag], dim=0)
    return out.reshape(M, H, L)


def _bwd_shared(g: torch.Tensor, v: torch.Tensor, x0: torch.Tensor, L: int):
    """S0 = G conj(E)^T and S1 = (G l) conj(E)^T, (M, H, N) each, block by block over l."""
    M, H, N = v.shape
    G = g.reshape(M * H, L).to(v.real.dtype)
    s = torch.zeros(M * H, 2, N, dtype=v.dtype, device=v.device)
    for l0, l1 in _l_chunks(N, L):
        l = torch.arange(l0, l1, device=v.device, dtype=G.dtype)
        Ec = torch.exp(x0[:, None] * l).conj().T                       # (c, N)
        Gc = torch.stack([G[:, l0:l1], G[:, l0:l1] * l], dim=1).reshape(M * H * 2, -1)
        s += torch.complex(Gc @ Ec.real.contiguous(), Gc @ Ec.imag.contiguous()).reshape(M * H, 2, N)
    s = s.reshape(M, H, 2, N)
    return s[:, :, 0], s[:, :, 1]


# ----------------------------------------------------------------------------- gemm path (opt-in)
CUDA_GEMM_ELEMS = 1 << 24   # a GPU forms E for up to this many (position, state) pairs at once


def _shared_powers(x0: torch.Tensor, L: int):
    """Blocks of E = exp(x0 l) laid out (positions, N): yields (l0, l1, E[l0:l1]).

    The first block's powers exp(x0 c) are computed once; block l0 is exp(x0 l0) * those (one
    complex multiply per entry instead of an exp). Block length: about CHUNK_ELEMS / N positions
    (CUDA_GEMM_ELEMS / N on a GPU, where one block covers an LRA length)."""
    N = x0.shape[0]
    budget = CUDA_GEMM_ELEMS if x0.is_cuda else CHUNK_ELEMS
    step = min(L, max(1, budget // max(1, N)))
    c = torch.arange(step, device=x0.device, dtype=x0.real.dtype)
    Zc = torch.exp(c[:, None] * x0[None, :])                          # (step, N)
    for l0 in range(0, L, step):
        l1 = min(L, l0 + step)
        yield l0, l1, (Zc[: l1 - l0] if l0 == 0 else Zc[: l1 - l0] * torch.exp(x0 * l0))


def _interleaved(E: torch.Tensor) -> torch.Tensor:
    """E (c, N) complex -> (c, 2N) real, columns [Re E_0, Im E_0, Re E_1, ...] (a view)."""
    return torch.view_as_real(E).reshape(E.shape[0], -1)


def _fwd_gemm(v: torch.Tensor, x0: torch.Tensor, L: int) -> torch.Tensor:
    """Shared eigenvalues x0 (N,): K = Re(v E^T) as real GEMMs over blocks of positions,
    [Re v_0, -Im v_0, Re v_1, ...] (M*H, 2N) @ [Re E; Im E] (2N, c), E computed once for all rows."""
    M, H, N = v.shape
    vv = torch.stack([v.real, -v.imag], dim=-1).reshape(M * H, 2 * N)
    blocks = [(l0, l1, vv @ _interleaved(E).T) for l0, l1, E in _shared_powers(x0, L)]
    out = blocks[0][2] if len(blocks) == 1 else torch.cat([b for _, _, b in blocks], dim=1)
    return out.reshape(M, H, L)


def _bwd_gemm(g: torch.Tensor, v: torch.Tensor, x0: torch.Tensor, L: int):
    """S0 = G conj(E) and S1 = (G l) conj(E), (M, H, N) each: per block of positions one real
    GEMM [G; G l] (2 M H, c) @ [Re E, Im E] (c, 2N) gives both sums' real and imaginary parts."""
    M, H, N = v.shape
    G = g.reshape(M * H, L).to(v.real.dtype)
    s = torch.zeros(2 * M * H, 2 * N, dtype=G.dtype, device=v.device)
    for l0, l1, E in _shared_powers(x0, L):
        l = torch.arange(l0, l1, device=v.device, dtype=G.dtype)
        Gb = G[:, l0:l1]
        s += torch.cat([Gb, Gb * l], dim=0) @ _interleaved(E)
    s = torch.view_as_complex(s.reshape(2, M, H, N, 2)).conj_physical()
    return s[0], s[1]


class _Vandermonde(torch.autograd.Function):
    """Fast Vandermonde sum (Triton, chunked torch or gemm) with a recomputing backward."""

    @staticmethod
    def forward(ctx, v, x, L, backend):
        ctx.save_for_backward(v, x)
        ctx.L, ctx.backend = L, backend
        if backend == "triton":
            return _fwd_triton(v, x, L)
        if backend == "gemm":
            return _fwd_gemm(v, x[0], L)
        if _shared(x):
            return _fwd_shared(v, x[0], L)
        return _fwd_torch(v, x, L)

    @staticmethod
    def backward(ctx, g):
        v, x = ctx.saved_tensors
        if ctx.backend == "triton":
            s0, s1 = _bwd_triton(g, v, x, ctx.L)
        elif ctx.backend == "gemm":
            s0, s1 = _bwd_gemm(g, v, x[0], ctx.L)
        elif _shared(x):
            s0, s1 = _bwd_shared(g, v, x[0], ctx.L)
        else:
            s0, s1 = _bwd_torch(g, v, x, ctx.L)
        s0, s1 = s0.to(v.dtype), s1.to(v.dtype)
        grad_v = s0 if ctx.needs_input_grad[0] else None
        grad_x = (v.conj() * s1).sum(0) if ctx.needs_input_grad[1] else None
        return grad_v, grad_x, None, None


def vandermonde(v: torch.Tensor, x: torch.Tensor, L: int, backend: str = "torch") -> torch.Tensor:
    """K[m, h, l] = Re sum_n v[m, h, n] exp(x[h, n] l) for l < L.

    v : (M, H, N) complex; x : (H, N) complex (broadcast views are fine); returns (M, H, L) real.
    backend : the path, "torch" | "triton" | "ref" (see :mod:`spt.kernels._triton`), or "gemm":
    eigenvalues shared by all channels only (x an expanded (N,) row, DLR's Lambda), any device
    and dtype: E = exp(x l) formed once by complex multiplies, one real GEMM per block of
    positions for all M * H rows (opt-in; see the module docstring).
    Differentiable in v and x on every backend.
    """
    if v.dim() != 3 or x.dim() != 2 or v.shape[1:] != x.shape:
        raise ValueError(f"vandermonde: expected v (M, H, N) and x (H, N), got {tuple(v.shape)} "
                         f"and {tuple(x.shape)}")
    if not (v.is_complex() and x.is_complex()):
        raise TypeError("vandermonde: v and x must be complex tensors")
    x = x.to(v.dtype)
    if backend == "gemm":
        if not _shared(x):
            raise ValueError("vandermonde: the path 'gemm' needs eigenvalues shared by all "
                             "channels (x an expanded (N,) row, as DLR's Lambda); use 'torch'")
        return _Vandermonde.apply(v, x, int(L), "gemm")
    b = resolve_backend(backend, v)
    if b == "ref":
        return vandermonde_ref(v, x, L)
    return _Vandermonde.apply(v, x, int(L), b)
