"""Mamba-2's state space duality (SSD) layer: a recurrence with one scalar decay per head, computed
in chunks (Dao & Gu 2024, "Transformers are SSMs", Sec. 6, the block decomposition).

    y = ssd(x, dt, A, B, C, D)             # chunked: masked attention in and across chunks
    y = ssd_ref(x, dt, A, B, C, D)         # reference: the recurrence, one time step at a time

Shapes: x (batch, L, H, P) (H heads of P channels), dt (batch, L, H) (> 0, after softplus), A (H,)
negative, B and C (batch, L, N) (one group: shared by every head), D (H,) or None; y like x. Per
head h the state is (P, N):

    h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T,        y_t = h_t C_t + D x_t

Unrolled, y_t = sum_{s<=t} (C_t . B_s) exp(sum_{s<r<=t} dt_r A) dt_s x_s + D x_t: a causal
"attention" whose mask is a product of decays. :func:`ssd` cuts the sequence into chunks of T
positions and splits that sum in two (the paper's Fig. 5):

    inside a chunk   : the masked attention, (C_t . B_s) * exp(segsum(dt A)[t, s]) * dt_s, T x T
    across chunks    : each chunk's final state from its own inputs; the state entering chunk c
                       is the same masked sum one level up, over the earlier chunks' states with
                       exp(segment sums of the chunks' whole log decays); C_t reads it out after
                       the decay from the chunk's start to t

No Python loop over time steps or chunks. Work O(L T (N + H P)) inside the chunks and
O((L / T)^2 H P N) across them; memory a few copies of the inputs plus the (batch, L / T, H, P, N)
chunk states and the (batch, L / T, H, T, T) masks. Decays are exponentials of segment sums of log
decays dt A <= 0, with -inf above the diagonal, so no exponential of a large positive number
appears in the forward pass or its gradient.

Padding: with ``valid`` (batch, L) bool, padded positions feed nothing into the state (their
dt x B term is zeroed), as in :mod:`spt.kernels.scan`.

Paths (``backend=``, :mod:`spt.kernels.library`): "torch" (the chunked form above, the reference),
"library" (mamba-ssm's ``mamba_chunk_scan_combined``, or a ValueError where it cannot run) and
"ref" (:func:`ssd_ref`).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .library import library_kernel

CHUNK = 128
"""T: on CPU at L = 16K, H P = 128, N = 64, 128 beat 64 and 256 (fewer chunks to pass states
across against smaller masks)."""
LIBRARY_CHUNK = 256
"""mamba_chunk_scan_combined's chunk length (Mamba-2's default; it changes speed, not results)."""
MAMBA_SSD = ("mamba_ssm.ops.triton.ssd_combined", "mamba_chunk_scan_combined", "mamba-ssm")
"""Where mamba-ssm's SSD kernel lives, and the pip requirement that installs it."""


def _check(x, dt, A, B, C, D, valid):
    n_batch, L, H, _ = x.shape
    want = {"dt": (dt, (n_batch, L, H)), "A": (A, (H,)), "B": (B, (n_batch, L, B.shape[-1])),
            "C": (C, (n_batch, L, B.shape[-1])), "D": (D, (H,)), "valid": (valid, (n_batch, L))}
    for name, (t, shape) in want.items():
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"ssd: {name} has shape {tuple(t.shape)}; with x (batch, L, H, P) = "
                             f"{tuple(x.shape)} and B (batch, L, N) it must be {shape}")


def _input(x, dt, valid):
    """dt_t x_t (batch, L, H, P), pads zeroed: what position t adds to the state, before B_t."""
    u = dt[..., None] * x
    if valid is not None:
        u = u * valid[:, :, None, None].to(u.dtype)
    return u


def segsum(a: torch.Tensor) -> torch.Tensor:
    """Segment sums of a (..., T) along its last dim: (..., T, T) with [t, s] = sum_{s<r<=t} a_r
    for s <= t (0 on the diagonal) and -inf above it. Each entry is its own cumulative sum (no
    difference of two long sums), so exp of it is a product of decays, exactly 0 where s > t."""
    T = a.shape[-1]
    strictly_below = torch.ones(T, T, dtype=torch.bool, device=a.device).tril(-1)
    terms = a[..., :, None].expand(*a.shape, T).masked_fill(~strictly_below, 0.0)  # [r, s]: a_r, r > s
    sums = terms.cumsum(dim=-2)
    return sums.masked_fill(~strictly_below.logical_or(torch.eye(T, dtype=torch.bool, device=a.device)),
                            float("-inf"))

def _ssd_library(fast, x, dt, A, B, C, D, valid):
    """mamba-ssm's ``mamba_chunk_scan_combined``: B and C as one group (batch, L, 1, N), D in
    float32; pads enter as x = 0 (so their outputs lack the D x term)."""
    if valid is not None:
        x = x * valid[..., None, None].to(x.dtype)
    return fast(x, dt, A, B[:, :, None], C[:, :, None], LIBRARY_CHUNK,
                D=None if D is None else D.float())


def ssd(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
        D: Optional[torch.Tensor] = None, valid: Optional[torch.Tensor] = None,
        chunk: int = CHUNK, backend: str = "torch") -> torch.Tensor:
    """The SSD recurrence (module docstring) -> (batch, L, H, P). backend: the path, "library"
    (mamba-ssm's kernel, its own chunk length), "torch" (chunks of ``chunk`` positions) or "ref"
    (:func:`ssd_ref`)."""
    fast = library_kernel("ssd", backend, x, *MAMBA_SSD)
    if fast is not None:
        return _ssd_library(fast, x, dt, A, B, C, D, valid)
    if backend == "ref":
        return ssd_ref(x, dt, A, B, C, D, valid)
    _check(x, dt, A, B, C, D, valid)
    if chunk < 1:
        raise ValueError(f"ssd: chunk must be >= 1, got {chunk}")
    n_batch, L, H, P = x.shape
    T = min(chunk, L)
    n = -(-L // T)
    pad = n * T - L
    u = _input(x, dt, valid)
    a = dt * A                                                   # log decays (batch, L, H), <= 0
    if pad:  # identity steps: no decay, no input, nothing read out
        u = F.pad(u, (0, 0, 0, 0, 0, pad))
        a = F.pad(a, (0, 0, 0, pad))
        B = F.pad(B, (0, 0, 0, pad))
        C = F.pad(C, (0, 0, 0, pad))
    u = u.reshape(n_batch, n, T, H, P)
    a = a.reshape(n_batch, n, T, H).transpose(2, 3)              # (batch, n, H, T)
    B = B.reshape(n_batch, n, T, -1)
    C = C.reshape(n_batch, n, T, -1)

    # inside each chunk: y_t = sum_{s<=t} (C_t . B_s) exp(segsum[t, s]) u_s
    scores = torch.einsum("bctn,bcsn->bcts", C, B)[:, :, None] * torch.exp(segsum(a))
    y = torch.einsum("bchts,bcshp->bcthp", scores, u)

    # each chunk's final state from its own inputs: sum_s exp(sum_{s<r<T} a_r) u_s B_s^T
    cum = a.cumsum(dim=-1)                                       # (batch, n, H, T), decreasing
    to_end = torch.exp(cum[..., -1:] - cum).transpose(2, 3)[..., None]   # (batch, n, T, H, 1)
    own = torch.einsum("bcshp,bcsn->bchpn", to_end * u, B)
    # the state entering chunk c: sum_{d<c} exp(sum_{d<r<c} g_r) own_d, g_r chunk r's whole log
    # decay; segment sums over [0, g_0, .., g_{n-1}], row c and column d + 1, give those sums
    whole = F.pad(cum[..., -1].transpose(1, 2), (1, 0))          # (batch, H, n + 1)
    across = torch.exp(segsum(whole))[..., :-1, 1:]              # (batch, H, n, n)
    entering = torch.einsum("bhcd,bdhpn->bchpn", across, own)
    # its read-out at t: C_t . (decay from the chunk's start through t) * entering state
    y = y + torch.einsum("bctn,bchpn->bcthp", C, entering) * torch.exp(cum).transpose(2, 3)[..., None]

    y = y.reshape(n_batch, n * T, H, P)[:, :L]
    return y if D is None else y + x * D[:, None]


def ssd_ref(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
            D: Optional[torch.Tensor] = None, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Reference: h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T, y_t = h_t C_t + D x_t, one time step
    at a time (state (batch, H, P, N))."""
    _check(x, dt, A, B, C, D, valid)
    u = _input(x, dt, valid)
    decay = torch.exp(dt * A)                                    # (batch, L, H)
    h = x.new_zeros(x.shape[0], x.shape[2], x.shape[3], B.shape[-1])
    out = []
    for t in range(x.shape[1]):
        h = decay[:, t, :, None, None] * h + u[:, t, :, :, None] * B[:, t, None, None, :]
        out.append(torch.einsum("bhpn,bn->bhp", h, C[:, t]))
    y = torch.stack(out, dim=1)
    return y if D is None else y + x * D[:, None]
