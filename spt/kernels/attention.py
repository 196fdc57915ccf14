"""Attention: full attention and neighbour-block local attention, each path beside the reference.

Paths (``backend=``, words of :data:`spt.kernels.paths.PATHS`), equal up to float rounding:

* ``"torch"``   - torch's ``scaled_dot_product_attention`` (full), and SDPA over each block's
                  gathered neighbours (local): the reference, any device;
* ``"library"`` - flash-attn's ``flash_attn_func`` for full attention (CUDA, fp16 / bf16); a
                  batch with padding, or local attention, runs ``"torch"``;
* ``"flex"``    - local attention through FlexAttention's block-sparse kernel
                  (:mod:`spt.kernels.local_flex`); what it cannot take (dropout, inputs that need
                  a gradient on the CPU, where torch has no backward for it) runs ``"torch"``;
* ``"dense"``   - local attention as one SDPA call over the whole sequence with an (L, L) mask of
                  the pattern: no gathered copies, L² memory;
* ``"ref"``     - plain softmax(QKᵀ/√d)V (:func:`attention_ref`), the tests' oracle.

A path that does not concern a call (``"flex"`` for full attention, ``"library"`` for local) runs
``"torch"``. Padding is given as ``valid`` (B, L) bool, True on real positions; padded keys are
never attended. ``valid=None`` means "no padding": the choice never reads the mask's values (a
host-device sync in every layer, a graph break under ``torch.compile``). Masks are passed as
*broadcast* key masks (B, 1, 1, L) wherever the pattern allows.

Neighbour-block local attention (``block=W``, the paper's choice for inputs of 16K+ tokens): the
sequence is cut into blocks of W tokens; block i attends to blocks i-1, i, i+1 (bidirectional) or
i-1, i (causal, with the causal order inside). The gather path solves (B·nb, H, W, 3W) problems
with one fused SDPA call, so memory grows as L·3W, not L². Where the pattern is dense (at most two
blocks: every key is a neighbour) the call is full attention, exactly. Banded attention
(``band=w``, the range probe's cap): query i attends to key j only when |i - j| <= w (and j <= i
when causal), on the same path with blocks of max(w, 1) tokens.

ALiBi (Press, Smith & Lewis, ICLR 2022): ``slopes`` (H,) add the fixed bias -m_h |i - j| to the
scaled scores: the reference adds it, SDPA gets it as a float mask (-inf where a key is not
allowed), flash-attn as ``alibi_slopes`` (its bias is -slope |i + Lk - Lq - j| on the scaled
scores, the same for self-attention), the gather path over the gathered key slots, FlexAttention as
a score_mod.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F

from .local_flex import flex_takes, local_attention_flex
from .paths import check_path

try:  # optional fast path; flash-attn only builds against CUDA
    from flash_attn import flash_attn_func as _flash_attn_func  # type: ignore
except Exception:  # pragma: no cover - depends on the machine
    _flash_attn_func = None

FLASH_AVAILABLE = _flash_attn_func is not None

# the paths every attention function takes (the module's paths, spt.models.attention.Attention)
ATTENTION_PATHS = ("torch", "library", "flex", "dense", "ref")


def alibi_bias(slopes: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """The symmetric ALiBi bias -m_h |i - j|. slopes (H,), q_pos (Lq,), k_pos (Lk,) -> (H, Lq, Lk)
    float32. No parameters: the bias is fixed."""
    dist = (q_pos[:, None] - k_pos[None, :]).abs().to(torch.float32)
    return -slopes[:, None, None] * dist


def attention_ref(q, k, v, key_valid=None, causal=False, dropout_p=0.0, allowed=None, bias=None):
    """Reference attention in plain torch.

    q, k, v   : (B, H, Lq, D), (B, H, Lk, D), (B, H, Lk, D)
    key_valid : (B, Lk) bool or None - False keys are never attended.
    allowed   : optional (..., Lq, Lk) bool mask broadcastable to (B, H, Lq, Lk).
    bias      : optional (..., Lq, Lk) float, broadcastable to (B, H, Lq, Lk), added to the scaled
                scores before the softmax (ALiBi: :func:`alibi_bias`).
    returns   : (B, H, Lq, D)
    """
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    ok = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device)
    if causal:
        ok = torch.ones_like(ok).tril(diagonal=k.shape[-2] - q.shape[-2])
    ok = ok.expand_as(scores)
    if key_valid is not None:
        ok = ok & key_valid[:, None, None, :]
    if allowed is not None:
        ok = ok & allowed
    scores = scores.masked_fill(~ok, float("-inf"))
    p = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    p = torch.nan_to_num(p)  # rows with no allowed key give zeros, never NaN
    if dropout_p > 0:
        p = F.dropout(p, dropout_p)
    return p @ v


def _with_bias(mask: Optional[torch.Tensor], bias: torch.Tensor, dtype) -> torch.Tensor:
    """One float SDPA mask from a bool mask (None: all allowed) and a float bias: the bias where
    allowed, -inf elsewhere (SDPA takes a single mask)."""
    bias = bias.to(dtype)
    if mask is None:
        return bias
    return torch.where(mask, bias, torch.tensor(float("-inf"), dtype=dtype, device=bias.device))


def _sdpa(q, k, v, key_valid, causal, dropout_p, slopes=None, allowed=None):
    """SDPA with a broadcast key mask (and an optional (L, L) pattern `allowed`); q, k, v
    (B, H, L, D); slopes (H,) or None (ALiBi)."""
    L = q.shape[-2]
    if slopes is None and key_valid is None and allowed is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal)
    # (B, 1, 1, L): broadcast, not an L x L matrix
    mask = None if key_valid is None else key_valid[:, None, None, :]
    if causal:
        tril = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
        mask = tril if mask is None else mask & tril
    if allowed is not None:  # a row with no allowed key (a padded query) gets every key, so the
        mask = allowed if mask is None else mask & allowed  # softmax stays finite; it is unused
        mask = mask | ~mask.any(-1, keepdim=True)
    if slopes is not None:
        pos = torch.arange(L, device=q.device)
        mask = _with_bias(mask, alibi_bias(slopes, pos, pos), q.dtype)  # (H, L, L) or (B, H, L, L)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


def flash_unavailable(q: torch.Tensor) -> Optional[str]:
    """Why flash-attn cannot run on inputs like `q` here (None: it can)."""
    if not FLASH_AVAILABLE:
        return "flash-attn is not installed (pip install flash-attn --no-build-isolation)"
    if not q.is_cuda:
        return f"flash-attn runs on CUDA only, the inputs are on {q.device}"
    if q.dtype not in (torch.float16, torch.bfloat16):
        return f"flash-attn takes fp16 / bf16, the inputs are {q.dtype}"
    return None


def full_attention(q, k, v, key_valid=None, causal=False, dropout_p=0.0, backend="torch",
                   slopes=None):
    """Full attention through path `backend` (module docstring). q, k, v: (B, H, L, D) ->
    (B, H, L, D).

    key_valid : (B, L) bool, or None for a batch without padding. Callers pass None for unpadded
                batches (the engine does, deciding once per batch on the CPU copy of ``valid``).
    backend   : "library" raises where flash-attn cannot run these inputs (not installed, not
                CUDA, not fp16 / bf16); a padded batch runs "torch".
    slopes    : None, or (H,) float32 ALiBi slopes: every path adds -m_h |i - j|.
    """
    check_path("full_attention", backend, ATTENTION_PATHS)
    if backend == "library":
        why = flash_unavailable(q)
        if why is not None:
            raise RuntimeError(f"full_attention path 'library': {why}; use the path 'torch'")
        if key_valid is None:
            out = _flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                   dropout_p=dropout_p, causal=causal,  # flash layout: B, L, H, D
                                   **({} if slopes is None else {"alibi_slopes": slopes}))
            return out.transpose(1, 2)
    if backend == "ref":
        bias = None
        if slopes is not None:
            pos = torch.arange(q.shape[-2], device=q.device)
            bias = alibi_bias(slopes, pos, pos)
        return attention_ref(q, k, v, key_valid, causal, dropout_p, bias=bias)
    return _sdpa(q, k, v, key_valid, causal, dropout_p, slopes)


def _blocks_with_neighbours(x: torch.Tensor, W: int, causal: bool) -> torch.Tensor:
    """(B, H, nb*W, D) -> (B, H, nb, n*W, D): each block's previous, own (and next) block."""
    B, H, L, D = x.shape
    xb = x.view(B, H, L // W, W, D)
    prev = F.pad(xb, (0, 0, 0, 0, 1, 0))[:, :, :-1]
    parts = [prev, xb]
    if not causal:
        parts.append(F.pad(xb, (0, 0, 0, 0, 0, 1))[:, :, 1:])
    return torch.cat(parts, dim=3)


def is_dense_pattern(L: int, block: int, band: Optional[int] = None) -> bool:
    """True when the neighbour-block (or banded) pattern over L tokens allows every pair that full
    attention allows: with at most two blocks every key is in the query's own or a neighbouring
    block (bidirectional), or in its own or the previous one (causal, j <= i); a band w reaches
    every key only when w >= L - 1."""
    return -(-L // block) <= 2 and (band is None or band >= L - 1)


def pattern_mask(L: int, block: int, causal: bool, band: Optional[int] = None,
                 device=None) -> torch.Tensor:
    """The neighbour-block (or banded) pattern as an (L, L) bool matrix: query i may see key j
    (the causal order included)."""
    i = torch.arange(L, device=device)
    d = i[:, None] - i[None, :] if band is not None else \
        torch.div(i, block, rounding_mode="floor")[:, None] - \
        torch.div(i, block, rounding_mode="floor")[None, :]
    reach = 1 if band is None else band
    ok = d.abs() <= reach
    return ok & (i[:, None] >= i[None, :]) if causal else ok


def local_attention(q, k, v, block: int, key_valid=None, causal=False, dropout_p=0.0,
                    backend="torch", band: Optional[int] = None, slopes=None):
    """Neighbour-block local attention through path `backend` (module docstring).

    q, k, v   : (B, H, L, D); L need not be a multiple of `block`.
    key_valid : (B, L) bool or None.
    band      : None, or w <= block: query i also needs |i - j| <= w (banded attention).
    slopes    : None, or (H,) ALiBi slopes: the bias -m_h |i - j| over the allowed keys.
    returns   : (B, H, L, D). Query i attends to key j iff |blk(i) - blk(j)| <= 1 (bidirectional)
                or 0 <= blk(i) - blk(j) <= 1 and j <= i (causal), and key j is valid.

    Where that pattern is dense (is_dense_pattern) the call is :func:`full_attention` with the
    same path ("library" included: flash-attn where it runs).
    """
    B, H, L, D = q.shape
    W = block
    check_path("local_attention", backend, ATTENTION_PATHS)
    if band is not None and band > W:
        raise ValueError(f"local_attention: band={band} exceeds the block size {W}")
    if is_dense_pattern(L, W, band):
        return full_attention(q, k, v, key_valid, causal, dropout_p, backend, slopes)
    if backend == "flex" and flex_takes(q, k, v, dropout_p):
        return local_attention_flex(q, k, v, W, key_valid, causal, band, slopes)
    if backend == "dense":
        allowed = pattern_mask(L, W, False, band, q.device)  # the causal order: _sdpa adds it
        return _sdpa(q, k, v, key_valid, causal, dropout_p, slopes, allowed=allowed)
    return _gathered(q, k, v, W, key_valid, causal, dropout_p, band, slopes, backend == "ref")


def _gathered(q, k, v, W: int, key_valid, causal: bool, dropout_p: float, band, slopes,
              reference: bool):
    """The gather path: each block of W queries against its gathered neighbour keys, by one fused
    SDPA call (reference: by :func:`attention_ref`)."""
    B, H, L, D = q.shape
    nb = -(-L // W)
    pad = nb * W - L
    if key_valid is None:
        key_valid = torch.ones(B, L, dtype=torch.bool, device=q.device)
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        key_valid = F.pad(key_valid, (0, pad), value=False)
    kb = _blocks_with_neighbours(k, W, causal)  # (B, H, nb, nW, D)
    vb = _blocks_with_neighbours(v, W, causal)
    n = kb.shape[3] // W
    # Which gathered keys exist and are valid: (B, nb, nW). Missing neighbours at the edges are False.
    kv = key_valid.view(B, nb, W)
    kv_prev = F.pad(kv, (0, 0, 1, 0), value=False)[:, :-1]
    parts = [kv_prev, kv]
    if not causal:
        parts.append(F.pad(kv, (0, 0, 0, 1), value=False)[:, 1:])
    kvb = torch.cat(parts, dim=2)
    # A block whose window holds no valid key (only possible where every query is padding too)
    # gets all keys allowed, so the softmax stays finite; those outputs are padding and unused.
    kvb = kvb | ~kvb.any(dim=-1, keepdim=True)
    mask = kvb[:, None, :, None, :]  # (B, 1, nb, 1, nW): a key mask, broadcast over queries
    qpos = torch.arange(W, device=q.device)[:, None]
    slot = torch.arange(n * W, device=q.device)[None, :]
    if causal:  # key at gathered slot s is in block (i - 1 + s // W); allowed iff s <= W + qpos
        mask = mask & (slot <= W + qpos)  # (B, 1, nb, W, nW)
    if band is not None:  # the key at gathered slot s is (s - W) positions after block start
        mask = mask & ((slot - W - qpos).abs() <= band)
    bias = None
    if slopes is not None:  # the key at gathered slot s sits at (s - W) from the block start
        bias = alibi_bias(slopes, torch.arange(W, device=q.device),
                          torch.arange(n * W, device=q.device) - W)[:, None]  # (H, 1, W, nW)
    qb = q.view(B, H, nb, W, D)
    if reference:
        out = attention_ref(qb.flatten(1, 2), kb.flatten(1, 2), vb.flatten(1, 2),
                            allowed=mask.expand(B, H, nb, -1, -1).flatten(1, 2),
                            bias=None if bias is None else bias.expand(B, H, nb, -1, -1).flatten(1, 2),
                            dropout_p=dropout_p).view(B, H, nb, W, D)
    else:  # fused kernels want 4-D inputs: fold the blocks into the batch, (B*nb, H, ., D)
        fold = lambda t: t.transpose(1, 2).flatten(0, 1)  # noqa: E731
        if bias is not None:  # (B, H, nb, W, nW): the bias where allowed, -inf elsewhere
            mask = _with_bias(mask, bias.expand(B, H, nb, W, n * W), q.dtype)
        out = F.scaled_dot_product_attention(fold(qb), fold(kb), fold(vb),
                                             attn_mask=fold(mask), dropout_p=dropout_p)
        out = out.view(B, nb, H, W, D).transpose(1, 2)
    return out.reshape(B, H, nb * W, D)[:, :, :L]
