"""Elementwise linear recurrences, and Mamba's selective scan written on them.

    h = linear_scan(a, b)                  # h_t = a_t * h_{t-1} + b_t along dim 1, h_{-1} = h0 or 0
    y = selective_scan(u, delta, A, B, C)  # Mamba's SSM (Gu & Dao 2023, Alg. 2)

Shapes: a, b (batch, L, *rest) -> h (batch, L, *rest). For the selective scan, u and delta are
(batch, L, D) (delta > 0, after Mamba's softplus), A (D, N) real (negative: a decay), B and C
(batch, L, N), D (D,), z (batch, L, D) the optional gate; y (batch, L, D):

    h_t = exp(delta_t A) * h_{t-1} + delta_t B_t u_t,      y_t = C_t . h_t + D u_t  [* silu(z_t)]

(zero-order hold on A, Euler on B, as Mamba's reference and CUDA kernels do).

:func:`linear_scan` is the fast path: a two-level scan with no Python loop over time steps. The
sequence is cut into chunks of ``chunk`` positions; inside each chunk a doubling (Hillis-Steele)
scan gives every position's product of a's and its state from a zero start in log2(chunk) tensor
steps; the same scan over the chunks' last positions gives the state entering each chunk, which
is then added in, scaled by the product of a's up to each position. Work O(L log chunk), memory a
few copies of the inputs; autograd differentiates it. :func:`linear_scan_ref` is the loop over
time written from the recurrence, the reference of the tests (and :func:`selective_scan_ref` the
loop of Mamba's Alg. 2).

Padding: with ``valid`` (batch, L) bool, padded positions feed nothing into the state (their
input term is zeroed). With right padding the forward scan's real positions never reach a pad, and
the reversed scan (``reverse=True``, the backward direction of a bidirectional layer) passes the
pads first with a zero state, so real positions never depend on padding either way.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

CHUNK = 64


def linear_scan_ref(a: torch.Tensor, b: torch.Tensor,
                    h0: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Reference: the recurrence h_t = a_t h_{t-1} + b_t, one time step at a time."""
    h = torch.zeros_like(b[:, 0]) if h0 is None else h0
    out = []
    for t in range(b.shape[1]):
        h = a[:, t] * h + b[:, t]
        out.append(h)
    return torch.stack(out, dim=1)


def _doubling_scan(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inclusive scan along dim 1 in log2(T) steps: (prod_{s<=t} a_s, state at t from zero)."""
    off = 1
    while off < a.shape[1]:
        b = torch.cat([b[:, :off], b[:, off:] + a[:, off:] * b[:, :-off]], dim=1)
        a = torch.cat([a[:, :off], a[:, off:] * a[:, :-off]], dim=1)
        off *= 2
    return a, b


def linear_scan(a: torch.Tensor, b: torch.Tensor, h0: Optional[torch.Tensor] = None,
                chunk: int = CHUNK) -> torch.Tensor:
    """h_t = a_t h_{t-1} + b_t along dim 1 (a, b (batch, L, *rest); h0 (batch, *rest) or None)."""
    if a.shape != b.shape:
        raise ValueError(f"linear_scan: a {tuple(a.shape)} and b {tuple(b.shape)} differ in shape")
    if chunk < 1:
        raise ValueError(f"linear_scan: chunk must be >= 1, got {chunk}")
    n_batch, L, rest = b.shape[0], b.shape[1], b.shape[2:]
    T = min(chunk, L)
    n = -(-L // T)
    pad = n * T - L
    if pad:  # identity steps: a = 1, b = 0
        a = torch.cat([a, a.new_ones((n_batch, pad, *rest))], dim=1)
        b = torch.cat([b, b.new_zeros((n_batch, pad, *rest))], dim=1)
    a = a.reshape(n_batch * n, T, *rest)
    b = b.reshape(n_batch * n, T, *rest)
    prod, local = _doubling_scan(a, b)                       # within each chunk, from zero
    prod = prod.reshape(n_batch, n, T, *rest)
    local = local.reshape(n_batch, n, T, *rest)
    if h0 is not None:                                       # the state entering chunk 0
        local = torch.cat([local[:, :1] + prod[:, :1] * h0[:, None, None], local[:, 1:]], dim=1)
    _, ends = _doubling_scan(prod[:, :, -1], local[:, :, -1])  # state at each chunk's end
    entering = torch.cat([torch.zeros_like(ends[:, :1]), ends[:, :-1]], dim=1)
    h = local + prod * entering[:, :, None]
    return h.reshape(n_batch, n * T, *rest)[:, :L]


def _discretise(u, delta, A, B, valid):
    """(exp(delta A), delta B u) (batch, L, D, N), pads' input terms zeroed."""
    dA = torch.exp(delta[..., None] * A)
    dBu = (delta * u)[..., None] * B[:, :, None, :]
    if valid is not None:
        dBu = dBu * valid[:, :, None, None].to(dBu.dtype)
    return dA, dBu


def _readout(h, u, C, D, z):
    y = torch.einsum("bldn,bln->bld", h, C)
    if D is not None:
        y = y + u * D
    return y if z is None else y * F.silu(z)


def selective_scan(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                   C: torch.Tensor, D: Optional[torch.Tensor] = None,
                   z: Optional[torch.Tensor] = None, valid: Optional[torch.Tensor] = None,
                   reverse: bool = False, chunk: int = CHUNK) -> torch.Tensor:
    """Mamba's selective SSM (see the module docstring); ``reverse`` scans from the last position
    to the first (y_t then depends on positions >= t)."""
    dA, dBu = _discretise(u, delta, A, B, valid)
    if reverse:
        h = linear_scan(dA.flip(1), dBu.flip(1), chunk=chunk).flip(1)
    else:
        h = linear_scan(dA, dBu, chunk=chunk)
    return _readout(h, u, C, D, z)


def selective_scan_ref(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                       C: torch.Tensor, D: Optional[torch.Tensor] = None,
                       z: Optional[torch.Tensor] = None, valid: Optional[torch.Tensor] = None,
                       reverse: bool = False) -> torch.Tensor:
    """Reference: Mamba's Alg. 2, one time step at a time (in the order ``reverse`` gives)."""
    dA, dBu = _discretise(u, delta, A, B, valid)
    h = torch.zeros_like(dBu[:, 0])
    out = [None] * u.shape[1]
    steps = range(u.shape[1] - 1, -1, -1) if reverse else range(u.shape[1])
    for t in steps:
        h = dA[:, t] * h + dBu[:, t]
        out[t] = h
    return _readout(torch.stack(out, dim=1), u, C, D, z)
