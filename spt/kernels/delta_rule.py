"""The gated delta rule of Gated DeltaNet (Yang, Kautz & Hatamizadeh, ICLR 2025), per head.

    o = gated_delta_rule(q, k, v, g, beta)          # chunked: WY form within chunks, no time loop
    o = gated_delta_rule_ref(q, k, v, g, beta)      # the recurrence, one time step at a time

Shapes: q, k (B, L, H, K), L2-normalised over K by the caller; v (B, L, H, V); g (B, L, H) the log
decay (alpha_t = exp(g_t) in (0, 1]); beta (B, L, H) in (0, 1); o (B, L, H, V). Per head, with the
state S_t (V, K) and q scaled by 1 / sqrt(K):

    S_t = S_{t-1} (alpha_t (I - beta_t k_t k_t^T)) + beta_t v_t k_t^T,      o_t = S_t q_t

(the paper's gated delta rule; the state starts at zero).

The chunked form works on h = S^T (K, V). Write the update as h_t = alpha_t h_{t-1} + k_t e_t^T
with e_t = beta_t (v_t - alpha_t h_{t-1}^T k_t), the value the step writes. Within a chunk of T
positions entering with state h_0, let G_t = g_1 + ... + g_t (the chunk's cumulative log decay)
and gamma_t = exp(G_t). Unrolling,

    h_t = gamma_t h_0 + sum_{s <= t} exp(G_t - G_s) k_s e_s^T,

and putting that into e_t gives a unit lower-triangular system for the chunk's E (T, V):

    (I + A) E = diag(beta) V - diag(beta gamma) K h_0,    A_ts = beta_t exp(G_t - G_s) k_t.k_s, s < t

so E = U - W h_0 with U = (I + A)^-1 diag(beta) V and W = (I + A)^-1 diag(beta gamma) K (the
WY / UT-transform representation of DeltaNet, found by one triangular solve per chunk). Then

    O   = diag(gamma) Q h_0 + (Q K^T * exp(G_t - G_s) [s <= t]) E
    h_T = gamma_T h_0 + (K * exp(G_T - G_s))^T E                  (the state entering the next chunk)

All chunks' A, U, W and intra-chunk scores are computed at once; only the state h_0 is passed
from chunk to chunk, by a Python loop over the L / T chunks (as fla's reference chunk form does:
a few small matmuls per chunk, none per time step). Every exponent is a difference G_t - G_s with
s <= t, or G_t itself, so nothing exceeds 1 and strong decays underflow to 0 instead of
overflowing. Memory is a few copies of the inputs plus (B, H, L / T, T, T) scores and one state
per chunk.

Padding: with ``valid`` (B, L) bool, padded positions get beta = 0 and g = 0, so they leave the
state unchanged (alpha = 1, nothing written) and real positions never depend on them. Their
outputs are S q of the carried state: meaningless, to be ignored by the caller.

Paths (``backend=``, :mod:`spt.kernels.library`): "torch" (the chunked form above, the
reference), "library" (fla's ``chunk_gated_delta_rule``, or a ValueError where it cannot run) and
"ref" (:func:`gated_delta_rule_ref`).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from .library import library_kernel

CHUNK = 64
FLA_DELTA_RULE = ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule", "fla-core")
"""Where fla's chunked gated delta rule lives, and the pip requirement that installs it."""


def _prepare(q, k, v, g, beta, valid, scale):
    """Float32 (at least) copies, q scaled, beta and g zeroed at padded positions."""
    if not (q.shape == k.shape and q.shape[:3] == v.shape[:3] and g.shape == beta.shape == q.shape[:3]):
        raise ValueError(f"gated_delta_rule: need q, k (B, L, H, K), v (B, L, H, V), g and beta "
                         f"(B, L, H); got q {tuple(q.shape)}, k {tuple(k.shape)}, v "
                         f"{tuple(v.shape)}, g {tuple(g.shape)}, beta {tuple(beta.shape)}")
    dtype = torch.promote_types(q.dtype, torch.float32)
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    if valid is not None:
        if valid.shape != q.shape[:2]:
            raise ValueError(f"gated_delta_rule: valid must be (B, L) = {tuple(q.shape[:2])}, got "
                             f"{tuple(valid.shape)}")
        keep = valid[..., None].to(dtype)
        g, beta = g * keep, beta * keep
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return q * scale, k, v, g, beta


def gated_delta_rule_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                         beta: torch.Tensor, valid: Optional[torch.Tensor] = None,
                         scale: Optional[float] = None) -> torch.Tensor:
    """Reference: the recurrence of the module docstring, one time step at a time, with the state
    S (B, H, V, K) as the paper writes it. Returns o (B, L, H, V) in v's dtype."""
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta, valid, scale)
    B, L, H, K = q.shape
    eye = torch.eye(K, dtype=q.dtype, device=q.device)
    S = q.new_zeros(B, H, v.shape[-1], K)
    out = []
    for t in range(L):
        kt, b = k[:, t], beta[:, t, :, None, None]                       # (B, H, K), (B, H, 1, 1)
        alpha = g[:, t].exp()[..., None, None]
        transition = alpha * (eye - b * kt[..., :, None] * kt[..., None, :])   # (B, H, K, K)
        S = S @ transition + b * v[:, t, :, :, None] * kt[..., None, :]
        out.append((S @ q[:, t, ..., None])[..., 0])
    return torch.stack(out, dim=1).to(out_dtype)


def _library(fast, q, k, v, g, beta, valid, scale):
    """fla's ``chunk_gated_delta_rule`` ((B, L, H, .) inputs as here, keywords); pads get g = 0
    and beta = 0 as in :func:`_prepare`."""
    if valid is not None:  # pads leave the state alone: alpha = 1, nothing written
        keep = valid[..., None]
        g, beta = g * keep, beta * keep
    o, _ = fast(q=q, k=k, v=v, g=g, beta=beta,
                scale=q.shape[-1] ** -0.5 if scale is None else scale, output_final_state=False)
    return o


def gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                     beta: torch.Tensor, valid: Optional[torch.Tensor] = None,
                     scale: Optional[float] = None, chunk: int = CHUNK,
                     backend: str = "torch") -> torch.Tensor:
    """The gated delta rule (module docstring). Returns o (B, L, H, V) in v's dtype ("library":
    in fla's). backend: the path, "library" (fla's ``chunk_gated_delta_rule``), "torch" (the chunked
    form, chunks of ``chunk`` positions) or "ref" (:func:`gated_delta_rule_ref`)."""
    fast = library_kernel("gated_delta_rule", backend, q, *FLA_DELTA_RULE)
    if fast is not None:
        return _library(fast, q, k, v, g, beta, valid, scale)
    if backend == "ref":
        return gated_delta_rule_ref(q, k, v, g, beta, valid, scale)
    if chunk < 1:
        raise ValueError(f"gated_delta_rule: chunk must be >= 1, got {chunk}")
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta, valid, scale)
    B, L, H, K = q.shape
    T = min(chunk, L)
    n = -(-L // T)
    pad = n * T - L
    if pad:  # identity steps at the end: g = 0, beta = 0 (and q = k = v = 0)
        q, k, v = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, 0, 0, pad)) for x in (g, beta))

    def chunks(x):  # (B, n*T, H, ...) -> (B, H, n, T, ...)
        return x.unflatten(1, (n, T)).movedim(3, 1)

    q, k, v, g, beta = (chunks(x) for x in (q, k, v, g, beta))
    G = g.cumsum(-1)                                                     # (B, H, n, T)
    diff = G[..., :, None] - G[..., None, :]                             # G_t - G_s
    lower = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()   # s <= t
    decay = torch.exp(diff.masked_fill(~lower, float("-inf")))           # 0 above the diagonal
    kk = k @ k.transpose(-1, -2)                                         # (B, H, n, T, T)
    A = (beta[..., None] * kk * decay).tril(-1)
    eye = torch.eye(T, dtype=q.dtype, device=q.device)
    rhs = torch.cat([beta[..., None] * v, (beta * G.exp())[..., None] * k], dim=-1)
    UW = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    U, W = UW.split([v.shape[-1], K], dim=-1)                            # (B, H, n, T, V), (.., K)
    scores = (q @ k.transpose(-1, -2)) * decay                           # (B, H, n, T, T)
    q_in = q * G.exp()[..., None]                                        # reads the entering state
    k_out = k * torch.exp(G[..., -1:] - G)[..., None]                    # writes the leaving state
    gamma_T = G[..., -1].exp()[..., None, None]                          # (B, H, n, 1, 1)

    h = q.new_zeros(B, H, K, v.shape[-1])
    outs = []
    # unbind (not indexing) per chunk: its backward stacks the chunks' gradients once
    for U_c, W_c, q_c, s_c, k_c, a_c in zip(*(x.unbind(2) for x in (U, W, q_in, scores, k_out,
                                                                      gamma_T))):
        E = U_c - W_c @ h                                                # the state passed across
        outs.append(q_c @ h + s_c @ E)                                   # chunks
        h = a_c * h + k_c.transpose(-1, -2) @ E
    o = torch.stack(outs, dim=2)                                         # (B, H, n, T, V)
    return o.movedim(1, 3).flatten(1, 2)[:, :L].to(out_dtype)
