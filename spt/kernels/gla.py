"""Gated linear attention (Yang, Wang, Shen, Panda & Kim, ICML 2024, eq. 3 and section 4.2).

    o = gla(q, k, v, g, valid)          # the chunked form: no Python loop over time steps
    o = gla_ref(q, k, v, g, valid)      # the recurrence, one time step at a time

Per batch row and head, with a matrix state S (K, V) starting at zero:

    S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T,        o_t = S_t^T (q_t * scale)

Shapes: q, k (B, L, H, K); v (B, L, H, V); g (B, L, H, K) the log forget gate (<= 0, so the gate
a_t = exp(g_t) is in (0, 1]); o (B, L, H, V). scale defaults to K^-0.5 (fla's convention).

The chunked form cuts the sequence into chunks of ``chunk`` positions. With G_t the cumulative
sum of g from the chunk's start to t (inclusive), position t of a chunk reads

    o_t = sum_{s <= t in the chunk} (sum_k q_tk k_sk exp(G_tk - G_sk)) v_s      (intra-chunk)
        + (q_t * exp(G_t))^T S_in                                                (the chunk's past)

where S_in is the state entering the chunk. Every exponent is <= 0 (G is non-increasing, and the
intra-chunk term forms G_t - G_s only for s <= t: a (T, T, K) tensor of differences with the
others set to -inf before exp), so no factor overflows however strongly the gates forget; this is
the stable alternative to factoring exp(G_t - G_s) = exp(G_t) exp(-G_s), whose second factor
overflows. The chunks' states come from a scan over chunks (:func:`spt.kernels.scan.linear_scan`):

    S_end(n) = diag(exp(G_last)) S_end(n - 1) + sum_s (k_s * exp(G_last - G_s)) v_s^T

Work O(L T K H + L K V H); memory is dominated by the (T, T, K) decays, T * K * H floats per
position (T times the size of q), which autograd keeps for the backward.

Padding: with ``valid`` (B, L) bool, a padded position neither decays nor feeds the state (g = 0,
k = 0 there), so with right padding real positions never depend on the pads (and the reversed
direction of a bidirectional layer passes the pads first from a zero state).

Paths (``backend=``, :mod:`spt.kernels.library`): "torch" (the chunked form above, the
reference), "library" (fla's ``chunk_gla``, or a ValueError where it cannot run) and "ref"
(:func:`gla_ref`).
"""
from __future__ import annotations

from typing import Optional

import torch

from .library import library_kernel
from .scan import linear_scan

CHUNK = 16
FLA_GLA = ("fla.ops.gla", "chunk_gla", "fla-core")
"""Where fla's chunked GLA kernel lives, and the pip requirement that installs it."""


def mask_pads(k: torch.Tensor, g: torch.Tensor,
              valid: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(k, g) with k = 0 and g = 0 at padded positions: pads leave the state as it is."""
    if valid is None:
        return k, g
    keep = valid[:, :, None, None].to(k.dtype)
    return k * keep, g * keep


def _check(q, k, v, g):
    if q.dim() != 4 or q.shape != k.shape or q.shape != g.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"gla: need q, k, g (B, L, H, K) of one shape and v (B, L, H, V); got q "
                         f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, g "
                         f"{tuple(g.shape)}")


def gla_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
            valid: Optional[torch.Tensor] = None, scale: Optional[float] = None) -> torch.Tensor:
    """Reference: the recurrence S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T, o_t = S_t^T q_t scale,
    one time step at a time. Shapes as in the module docstring."""
    _check(q, k, v, g)
    k, g = mask_pads(k, g, valid)
    q = q * (q.shape[-1] ** -0.5 if scale is None else scale)
    S = q.new_zeros(q.shape[0], q.shape[2], q.shape[3], v.shape[3])     # (B, H, K, V)
    out = []
    for t in range(q.shape[1]):
        S = torch.exp(g[:, t])[..., None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S))
    return torch.stack(out, dim=1)


def gla(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
        valid: Optional[torch.Tensor] = None, scale: Optional[float] = None,
        chunk: int = CHUNK, backend: str = "torch") -> torch.Tensor:
    """GLA's recurrence (module docstring) -> o (B, L, H, V). backend: the path, "library" (fla's
    ``chunk_gla``, (B, L, H, .) inputs as here), "torch" (the chunked form, chunks of ``chunk``
    positions: equal outputs and gradients to the loop) or "ref" (:func:`gla_ref`)."""
    fast = library_kernel("gla", backend, q, *FLA_GLA)
    if fast is not None:
        k, g = mask_pads(k, g, valid)
        o, _ = fast(q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(),
                    scale=q.shape[-1] ** -0.5 if scale is None else scale)
        return o
    if backend == "ref":
        return gla_ref(q, k, v, g, valid, scale)
    _check(q, k, v, g)
    if chunk < 1:
        raise ValueError(f"gla: chunk must be >= 1, got {chunk}")
    k, g = mask_pads(k, g, valid)
    q = q * (q.shape[-1] ** -0.5 if scale is None else scale)
    B, L, H, K = q.shape
    T = min(chunk, L)
    n = -(-L // T)
    # rows (B * H, L, .): each head's sequence is one contiguous batch row of the matmuls
    q, k, v, g = (x.transpose(1, 2).reshape(B * H, L, x.shape[-1]) for x in (q, k, v, g))
    if n * T > L:  # trailing pads: g = 0 and k = 0 leave the state alone, their outputs are cut
        q, k, v, g = (torch.cat([x, x.new_zeros(B * H, n * T - L, x.shape[-1])], dim=1)
                      for x in (q, k, v, g))
    q, k, v, g = (x.reshape(B * H, n, T, x.shape[-1]) for x in (q, k, v, g))
    G = g.cumsum(dim=2)                                       # (BH, n, T, K), <= 0, decreasing

    # intra-chunk: decays exp(G_t - G_s) for s <= t only (exponents <= 0)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()[:, :, None]
    diff = G[:, :, :, None] - G[:, :, None, :]                # (BH, n, t, s, K)
    decay = torch.exp(torch.where(causal, diff, diff.new_tensor(float("-inf"))))
    scores = torch.einsum("rntsk,rnsk->rnts", q[:, :, :, None] * decay, k)
    o = scores @ v                                            # (BH, n, T, V)

    # across chunks: the state at each chunk's end, from a scan over the chunks
    last = G[:, :, -1:]                                       # (BH, n, 1, K)
    fed = (k * torch.exp(last - G)).transpose(-1, -2) @ v     # (BH, n, K, V)
    carry = torch.exp(last).transpose(-1, -2).expand_as(fed)
    ends = linear_scan(carry, fed)
    entering = torch.cat([torch.zeros_like(ends[:, :1]), ends[:, :-1]], dim=1)
    o = o + (q * torch.exp(G)) @ entering
    return o.reshape(B, H, n * T, -1)[:, :, :L].transpose(1, 2)
