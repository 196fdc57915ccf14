"""Elementwise linear recurrences, and Mamba's selective scan written on them.

    h = linear_scan(a, b)                  # h_t = a_t * h_{t-1} + b_t along dim 1, h_{-1} = h0 or 0
    y = selective_scan(u, delta, A, B, C)  # Mamba's SSM (Gu & Dao 2023, Alg. 2)

Shapes: a, b (batch, L, *rest) -> h (batch, L, *rest), real or complex. For the selective scan, u
and delta are (batch, L, D) (delta > 0, after Mamba's softplus), A (D, N) real (negative: a decay),
B and C (batch, L, N), D (D,), z (batch, L, D) the optional gate; y (batch, L, D):

    h_t = exp(delta_t A) * h_{t-1} + delta_t B_t u_t,      y_t = C_t . h_t + D u_t  [* silu(z_t)]

(zero-order hold on A, Euler on B, as Mamba's reference and CUDA kernels do).

Paths (``backend=``, :mod:`spt.kernels.library`): :func:`selective_scan` takes "torch" (the
pairwise scan below, the reference), "library" (mamba-ssm's ``selective_scan_fn``, or a
ValueError where it cannot run) and "ref" (:func:`selective_scan_ref`); :func:`linear_scan` has no
library kernel: "torch" is the pairwise scan, "ref" :func:`linear_scan_ref`.

:func:`linear_scan` is the fast path, with no Python loop over time steps:

- forward: a pairwise (Blelloch-style) scan. Neighbouring steps are composed two by two,
  (a_o a_e, a_o b_e + b_o), which halves the sequence; the half is scanned the same way, and the
  even positions are filled in from the odd ones. O(L) work in log2(L) levels of whole-tensor
  operations; the length is padded to a power of two with identity steps (a = 1, b = 0).
- backward (:class:`LinearScan`, an autograd Function): the adjoint of a linear recurrence is the
  same recurrence run backwards, g_t = dL/dh_t + conj(a_{t+1}) g_{t+1}; then dL/db_t = g_t and
  dL/da_t = g_t conj(h_{t-1}). One more scan, and no graph of the levels is stored.

:func:`linear_scan_ref` is the loop over time written from the recurrence, the reference of the
tests (and :func:`selective_scan_ref` the loop of Mamba's Alg. 2).

Padding: with ``valid`` (batch, L) bool, padded positions feed nothing into the state (their
input term is zeroed). With right padding the forward scan's real positions never reach a pad, and
the reversed scan (``reverse=True``, the backward direction of a bidirectional layer) passes the
pads first with a zero state, so real positions never depend on padding either way.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .library import check_backend, library_kernel

LINEAR_SCAN_PATHS = ("torch", "ref")
MAMBA_SCAN = ("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn", "mamba-ssm")
"""Where mamba-ssm's selective scan lives, and the pip requirement that installs it."""


def linear_scan_ref(a: torch.Tensor, b: torch.Tensor,
                    h0: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Reference: the recurrence h_t = a_t h_{t-1} + b_t, one time step at a time."""
    h = torch.zeros_like(b[:, 0]) if h0 is None else h0
    out = []
    for t in range(b.shape[1]):
        h = a[:, t] * h + b[:, t]
        out.append(h)
    return torch.stack(out, dim=1)


def _pairwise_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Inclusive scan along dim 1 from a zero state; L a power of two. No autograd."""
    L = b.shape[1]
    if L == 1:
        return b
    a2, b2 = a.unflatten(1, (L // 2, 2)), b.unflatten(1, (L // 2, 2))
    a_even, a_odd, b_even, b_odd = a2[:, :, 0], a2[:, :, 1], b2[:, :, 0], b2[:, :, 1]
    odd = _pairwise_scan(a_odd * a_even, torch.addcmul(b_odd, a_odd, b_even))
    h = torch.empty_like(b2)
    h[:, :, 1] = odd
    h[:, 0, 0] = b_even[:, 0]
    h[:, 1:, 0] = torch.addcmul(b_even[:, 1:], a_even[:, 1:], odd[:, :-1])
    return h.flatten(1, 2)


def _scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """_pairwise_scan at any length (padded with identity steps to a power of two)."""
    L = b.shape[1]
    size = 1 << max(L - 1, 0).bit_length()
    if size != L:
        pad = (b.shape[0], size - L, *b.shape[2:])
        a = torch.cat([a, a.new_ones(pad)], dim=1)
        b = torch.cat([b, b.new_zeros(pad)], dim=1)
    return _pairwise_scan(a, b)[:, :L]


class LinearScan(torch.autograd.Function):
    """h_t = a_t h_{t-1} + b_t from h_{-1} = 0: the pairwise scan forward, the reversed scan of
    the adjoint backward (module docstring)."""

    @staticmethod
    def forward(ctx, a, b):
        h = _scan(a, b)
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    def backward(ctx, grad_h):
        a, h = ctx.saved_tensors
        a_next = torch.cat([a[:, 1:], torch.zeros_like(a[:, :1])], dim=1).conj()
        g = _scan(a_next.flip(1), grad_h.flip(1)).flip(1)
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
        return g * h_prev.conj(), g


def linear_scan(a: torch.Tensor, b: torch.Tensor, h0: Optional[torch.Tensor] = None,
                backend: str = "torch") -> torch.Tensor:
    """h_t = a_t h_{t-1} + b_t along dim 1 (a, b (batch, L, *rest); h0 (batch, *rest) or None).
    backend: the path, "torch" (the pairwise scan) or "ref" (:func:`linear_scan_ref`); no
    library kernel exists for it."""
    check_backend("linear_scan", backend, LINEAR_SCAN_PATHS)
    if a.shape != b.shape:
        raise ValueError(f"linear_scan: a {tuple(a.shape)} and b {tuple(b.shape)} differ in shape")
    if backend == "ref":
        return linear_scan_ref(a, b, h0)
    if h0 is not None:  # the start state enters as part of the first input
        b = torch.cat([b[:, :1] + a[:, :1] * h0[:, None], b[:, 1:]], dim=1)
    return LinearScan.apply(a, b)


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


def _selective_scan_library(fast, u, delta, A, B, C, D, z, valid, reverse):
    """mamba-ssm's ``selective_scan_fn``: channels-first (batch, D, L) and (batch, N, L) inputs, A
    and D in float32; pads enter as u = 0 (so their outputs lack the D u term)."""
    if valid is not None:
        u = u * valid[..., None].to(u.dtype)
    if reverse:
        u, delta, B, C = (t.flip(1) for t in (u, delta, B, C))
        z = None if z is None else z.flip(1)

    def first(t):
        return None if t is None else t.transpose(1, 2).contiguous()

    y = fast(first(u), first(delta), A.float(), first(B), first(C),
             None if D is None else D.float(), first(z)).transpose(1, 2)
    return y.flip(1) if reverse else y


def selective_scan(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                   C: torch.Tensor, D: Optional[torch.Tensor] = None,
                   z: Optional[torch.Tensor] = None, valid: Optional[torch.Tensor] = None,
                   reverse: bool = False, backend: str = "torch") -> torch.Tensor:
    """Mamba's selective SSM (see the module docstring); ``reverse`` scans from the last position
    to the first (y_t then depends on positions >= t). backend: the path, "torch", "library"
    (mamba-ssm's ``selective_scan_fn``) or "ref" (module docstring)."""
    fast = library_kernel("selective_scan", backend, u, *MAMBA_SCAN)
    if fast is not None:
        return _selective_scan_library(fast, u, delta, A, B, C, D, z, valid, reverse)
    if backend == "ref":
        return selective_scan_ref(u, delta, A, B, C, D, z, valid, reverse)
    dA, dBu = _discretise(u, delta, A, B, valid)
    if reverse:
        h = linear_scan(dA.flip(1), dBu.flip(1)).flip(1)
    else:
        h = linear_scan(dA, dBu)
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
