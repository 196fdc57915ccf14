"""Multi-head self-attention with one switch for the backend, and neighbour-block local attention.

Backends (``TransformerConfig.attention``):

* ``"flash"``  - flash-attn's ``flash_attn_func`` (CUDA, fp16/bf16, batches without padding);
* ``"sdpa"``   - ``torch.nn.functional.scaled_dot_product_attention`` (any device);
* ``"manual"`` - plain softmax(QKᵀ/√d)V, the reference the others are tested against;
* ``"auto"``   - flash when installed, on CUDA, in half precision and the batch has no padding
                 (``valid is None``); SDPA otherwise.

Padding is given as ``valid`` (B, L) bool, True on real positions; padded keys are never attended.
``valid=None`` means "no padding": the choice of backend never reads the mask's values (that would
be a host-device sync in every layer and a graph break under ``torch.compile``).
Masks are passed as *broadcast* key masks of shape (B, 1, 1, L), never as a dense (L, L) matrix.

Neighbour-block local attention (``local_block=W``, the paper's choice for inputs of 16K+ tokens):
the sequence is cut into blocks of W tokens; block i attends to blocks i-1, i, i+1 (bidirectional)
or i-1, i (causal, with the causal order inside). Keys/values of the neighbours are gathered into
(B·nb, H, W, 3W) problems and solved by the same fused SDPA call, so memory grows as L·3W, not L².
``local_backend="flex"`` runs the same pattern through FlexAttention's block-sparse kernel instead
(spt.models.local_flex), without padding or gathered copies. Where the pattern is dense (at most
two blocks: every key is a neighbour) the call is full attention, exactly.

Banded attention (``TransformerConfig.reach=w``, the range probe's cap): query i attends to key j
only when |i - j| <= w (and j <= i when causal). It runs on the neighbour-block path with blocks of
max(w, 1) tokens, every key within w of a query lying in its own or a neighbouring block, plus the
band condition on the gathered keys: memory grows as L·3w.

ALiBi (``TransformerConfig.positions="alibi"``; Press, Smith & Lewis, "Train Short, Test Long:
Attention with Linear Biases", ICLR 2022): each head h adds the fixed bias -m_h |i - j| to its
scaled scores QKᵀ/√d before the softmax (spt.models.positions.alibi_bias). Causal layers
see only j <= i, where the bias is the paper's -m_h (i - j). Every path takes it: the reference adds
it, SDPA gets it as a float ``attn_mask`` (-inf on the keys a query may not see), flash-attn as
``alibi_slopes`` (its bias is -slope |i + Lk - Lq - j| on the scaled scores, the same for self-
attention), and the neighbour-block path adds it over the gathered key slots.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import LocalBackend
from .local_flex import flex_takes, local_attention_flex
from .positions import alibi_bias, alibi_slopes, apply_rotary

try:  # optional fast path; flash-attn only builds against CUDA
    from flash_attn import flash_attn_func as _flash_attn_func  # type: ignore
except Exception:  # pragma: no cover - depends on the machine
    _flash_attn_func = None

FLASH_AVAILABLE = _flash_attn_func is not None


def attention_ref(q, k, v, key_valid=None, causal=False, dropout_p=0.0, allowed=None, bias=None):
    """Reference attention in plain torch.

    q, k, v   : (B, H, Lq, D), (B, H, Lk, D), (B, H, Lk, D)
    key_valid : (B, Lk) bool or None - False keys are never attended.
    allowed   : optional (..., Lq, Lk) bool mask broadcastable to (B, H, Lq, Lk).
    bias      : optional (..., Lq, Lk) float, broadcastable to (B, H, Lq, Lk), added to the scaled
                scores before the softmax (ALiBi: positions.alibi_bias).
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


def _sdpa(q, k, v, key_valid, causal, dropout_p, slopes=None):
    """SDPA with a broadcast key mask; q, k, v (B, H, L, D); slopes (H,) or None (ALiBi)."""
    L = q.shape[-2]
    if slopes is None and key_valid is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal)
    # (B, 1, 1, L): broadcast, not an L x L matrix
    mask = None if key_valid is None else key_valid[:, None, None, :]
    if causal:
        tril = torch.ones(L, L, dtype=torch.bool, device=q.device).tril()
        mask = tril if mask is None else mask & tril
    if slopes is not None:
        pos = torch.arange(L, device=q.device)
        mask = _with_bias(mask, alibi_bias(slopes, pos, pos), q.dtype)  # (H, L, L) or (B, H, L, L)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


def full_attention(q, k, v, key_valid=None, causal=False, dropout_p=0.0, backend="auto",
                   slopes=None):
    """Full attention through the chosen backend. q, k, v: (B, H, L, D) -> (B, H, L, D).

    key_valid : (B, L) bool, or None for a batch without padding. The backend is chosen from
                Python facts only (backend, device, dtype, ``key_valid is None``), never from the
                mask's values: no host-device sync, one graph under ``torch.compile``. Callers
                pass None for unpadded batches to get flash-attn / SDPA without a mask (the
                engine does, deciding once per batch on the CPU copy of ``valid``).
    slopes    : None, or (H,) float32 ALiBi slopes (positions.alibi_slopes): every backend adds
                the bias -m_h |i - j| to the scaled scores.
    """
    if backend == "flash":
        if not FLASH_AVAILABLE:
            raise RuntimeError("attention='flash' but flash-attn is not installed; "
                               "use attention='auto' or 'sdpa', or `pip install flash-attn`")
        if key_valid is not None and not _all_true(key_valid):
            raise NotImplementedError("attention='flash' does not take padded batches; "
                                      "use attention='auto' (falls back to SDPA for them)")
        key_valid = None
    use_flash = key_valid is None and (backend == "flash" or (
        backend == "auto" and FLASH_AVAILABLE and q.is_cuda
        and q.dtype in (torch.float16, torch.bfloat16)))
    if use_flash:
        out = _flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                               dropout_p=dropout_p, causal=causal,  # flash layout: B, L, H, D
                               **({} if slopes is None else {"alibi_slopes": slopes}))
        return out.transpose(1, 2)
    if backend == "manual":
        bias = None
        if slopes is not None:
            pos = torch.arange(q.shape[-2], device=q.device)
            bias = alibi_bias(slopes, pos, pos)
        return attention_ref(q, k, v, key_valid, causal, dropout_p, bias=bias)
    return _sdpa(q, k, v, key_valid, causal, dropout_p, slopes)


def _all_true(key_valid: torch.Tensor) -> bool:
    """Only for an explicit attention='flash' given a mask: reading it is a host sync (pass
    valid=None for unpadded batches to avoid it)."""
    return bool(key_valid.all())


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


def local_attention(q, k, v, block: int, key_valid=None, causal=False, dropout_p=0.0,
                    backend="auto", band: Optional[int] = None, slopes=None,
                    local_backend: LocalBackend = "gather"):
    """Neighbour-block local attention.

    q, k, v   : (B, H, L, D); L need not be a multiple of `block`.
    key_valid : (B, L) bool or None.
    band      : None, or w <= block: query i also needs |i - j| <= w (banded attention).
    slopes    : None, or (H,) ALiBi slopes: the bias -m_h |i - j| over the allowed keys.
    local_backend : "gather" pads the sequence to whole blocks and solves each block against its
                gathered neighbours with one fused SDPA call (``backend`` "manual": the reference);
                "flex" runs spt.models.local_flex (FlexAttention with a block-sparse mask). What
                flex_attention cannot take runs "gather": dropout_p > 0, and inputs that require
                grad on the CPU (torch has no CPU backward for it); so does backend "manual".
    returns   : (B, H, L, D). Query i attends to key j iff |blk(i) - blk(j)| <= 1 (bidirectional)
                or 0 <= blk(i) - blk(j) <= 1 and j <= i (causal), and key j is valid.

    Where that pattern is dense (is_dense_pattern) the call is full_attention with the same
    arguments (an explicit backend "flash" with a key mask goes through "auto", which picks SDPA:
    this function takes padded batches under every backend).
    """
    B, H, L, D = q.shape
    W = block
    if local_backend not in LocalBackend.__args__:
        raise ValueError(f"local_attention: local_backend={local_backend!r} is not one of "
                         f"{list(LocalBackend.__args__)}")
    if band is not None and band > W:
        raise ValueError(f"local_attention: band={band} exceeds the block size {W}")
    if is_dense_pattern(L, W, band):
        dense_backend = "auto" if backend == "flash" and key_valid is not None else backend
        return full_attention(q, k, v, key_valid, causal, dropout_p, dense_backend, slopes)
    if local_backend == "flex" and backend != "manual" and flex_takes(q, k, v, dropout_p):
        return local_attention_flex(q, k, v, W, key_valid, causal, band, slopes)
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
    if causal:  # key at gathered slot s is in block (i - 1 + s // W); allowed iff s <= W + qpos
        qpos = torch.arange(W, device=q.device)[:, None]
        slot = torch.arange(n * W, device=q.device)[None, :]
        mask = mask & (slot <= W + qpos)  # (B, 1, nb, W, nW)
    if band is not None:  # the key at gathered slot s is (s - W) positions after block start
        qpos = torch.arange(W, device=q.device)[:, None]
        slot = torch.arange(n * W, device=q.device)[None, :]
        mask = mask & ((slot - W - qpos).abs() <= band)
    bias = None
    if slopes is not None:  # the key at gathered slot s sits at (s - W) from the block start
        bias = alibi_bias(slopes, torch.arange(W, device=q.device),
                          torch.arange(n * W, device=q.device) - W)[:, None]  # (H, 1, W, nW)
    qb = q.view(B, H, nb, W, D)
    if backend == "manual":
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


class Attention(nn.Module):
    """Multi-head self-attention. x (B, L, d_model), valid (B, L) bool -> (B, L, d_model).

    rotary : rotate q and k by position (Su et al. 2021).
    alibi  : add the fixed bias -m_h |i - j| to each head's scores (Press et al. 2022); no
             parameters, the slopes are recomputed from n_heads.
    local_backend : how local_block / reach attention runs: "gather" or "flex" (local_attention).
    """

    def __init__(self, d_model: int, n_heads: int, *, causal: bool = False, dropout: float = 0.0,
                 rotary: bool = False, local_block: Optional[int] = None, backend: str = "auto",
                 reach: Optional[int] = None, alibi: bool = False,
                 local_backend: LocalBackend = "gather"):
        super().__init__()
        self.n_heads, self.causal, self.dropout = n_heads, causal, dropout
        self.rotary, self.local_block, self.backend = rotary, local_block, backend
        self.reach, self.alibi, self.local_backend = reach, alibi, local_backend
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, L, d = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        if self.rotary:
            q, k = apply_rotary(q), apply_rotary(k)
        p = self.dropout if self.training else 0.0
        slopes = alibi_slopes(self.n_heads, q.device) if self.alibi else None
        if self.reach is not None:
            y = local_attention(q, k, v, max(self.reach, 1), valid, self.causal, p, self.backend,
                                band=self.reach, slopes=slopes, local_backend=self.local_backend)
        elif self.local_block is not None and L > self.local_block:
            y = local_attention(q, k, v, self.local_block, valid, self.causal, p, self.backend,
                                slopes=slopes, local_backend=self.local_backend)
        else:
            y = full_attention(q, k, v, valid, self.causal, p, self.backend, slopes)
        return self.out(y.transpose(1, 2).reshape(B, L, d))
