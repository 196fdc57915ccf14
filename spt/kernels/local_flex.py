"""Neighbour-block and banded attention through FlexAttention's block-sparse kernel.

The same pattern as spt.kernels.attention.local_attention's gather path, given to
``torch.nn.attention.flex_attention`` as a ``BlockMask`` (Dong et al., "Flex Attention: A
Programming Model for Generating Optimized Attention Kernels", 2024): no padding of the sequence,
no gathered copies of the keys, and no score is computed for a tile of keys no query sees.

Pattern (query i, key j; ``pos`` is the block index j // block, or the position itself when a
band w is given, with ``reach`` 1 or w):

* bidirectional: |pos(i) - pos(j)| <= reach;
* causal       : j <= i and pos(i) - pos(j) <= reach;
* and key j is valid (``key_valid``). ALiBi adds -m_h |i - j| to the scaled scores (score_mod).

The BlockMask is built from the pattern's formula at tile level (tiles of FLEX_TILE queries x keys),
never from an (L, L) mask: a tile is *full* (the kernel skips the mask) when every pair in it is
allowed, *partial* (the kernel applies mask_mod) when some may be, and skipped otherwise. All of it
is tensor arithmetic on the inputs' device: no host-device sync (key_valid is never read on the host).

On CUDA the call goes through one ``torch.compile(flex_attention)`` made on first use (the fused
kernel). Elsewhere flex_attention runs eagerly: torch's unfused implementation, which computes all
L x L scores; it is right, and it is how the CPU tests check this path, but it is not fast.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention

FLEX_TILE = 128  # queries x keys per BlockMask tile (flex_attention's default sparse block)

_compiled_flex = None


def _flex_for(device: torch.device):
    """flex_attention compiled once per process on CUDA (the fused kernel); eager elsewhere."""
    global _compiled_flex
    if device.type != "cuda":
        return flex_attention
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention)
    return _compiled_flex


def flex_takes(q, k, v, dropout_p: float) -> bool:
    """Whether flex_attention can run this call: it has no dropout, and torch gives it no backward
    on the CPU (it refuses CPU inputs that require grad)."""
    needs_grad = q.requires_grad or k.requires_grad or v.requires_grad
    return dropout_p == 0 and not (q.device.type == "cpu" and needs_grad)


def _allowed(block: int, causal: bool, band: Optional[int], key_valid: Optional[torch.Tensor]):
    """mask_mod(b, h, i, j) -> bool: the pattern above. key_valid (B, >= L) bool or None."""
    def allowed(b, h, i, j):
        if band is None:
            d = i // block - j // block
            ok = (d <= 1) & (d >= 0) & (j <= i) if causal else d.abs() <= 1
        else:
            d = i - j
            ok = (d <= band) & (d >= 0) if causal else d.abs() <= band
        return ok if key_valid is None else ok & key_valid[b, j]
    return allowed


def _alibi(slopes: torch.Tensor):
    """score_mod: the scaled score plus ALiBi's bias -m_h |i - j|; slopes (H,)."""
    def biased(score, b, h, i, j):
        return score - (slopes[h] * (i - j).abs()).to(score.dtype)
    return biased


def pattern_tiles(L: int, block: int, causal: bool, band: Optional[int] = None,
                  key_valid: Optional[torch.Tensor] = None, tile: int = FLEX_TILE,
                  device=None):
    """Which tiles of the (L, L) pattern the kernel must visit.

    key_valid : (B, L) bool or None (no padding).
    returns   : (partial, full), bool (B or 1, 1, n, n) with n = ceil(L / tile); full tiles hold
                only allowed pairs (and no position past L), partial tiles may hold some, every
                allowed pair lies in one of the two. Exact for the pattern without padding; with
                padding a tile is partial when it holds any valid key and any allowed pair.
    """
    device = key_valid.device if key_valid is not None else device
    n = -(-L // tile)
    start = torch.arange(n, device=device) * tile
    end = torch.clamp(start + tile, max=L) - 1  # the tile's last real position
    inside = start + tile <= L
    qs, qe, ks, ke = start[:, None], end[:, None], start[None, :], end[None, :]

    def pos(x):  # monotone in x: the extremes of a tile bound the pattern over it
        return x if band is not None else torch.div(x, block, rounding_mode="floor")
    reach = 1 if band is None else band
    if causal:  # some pair: the earliest query at or after the first key, its latest key <= it
        i0 = torch.maximum(qs, ks)
        some = (i0 <= qe) & (pos(i0) - pos(torch.minimum(i0, ke)) <= reach)
        every = (ke <= qs) & (pos(qe) - pos(ks) <= reach)
    else:
        some = (pos(ks) - pos(qe) <= reach) & (pos(qs) - pos(ke) <= reach)
        every = (pos(qe) - pos(ks) <= reach) & (pos(ke) - pos(qs) <= reach)
    every = every & inside[:, None] & inside[None, :]
    some, every = some[None, None], every[None, None]  # (1, 1, n, n)
    if key_valid is not None:
        kv = F.pad(key_valid, (0, n * tile - L), value=False).view(-1, n, tile)
        some = some & kv.any(-1)[:, None, None, :]
        every = every & kv.all(-1)[:, None, None, :]
    return some & ~every, every


def _ordered(tiles: torch.Tensor):
    """(…, n, n) bool -> (count (…, n), indices (…, n, n)) int32: each row's listed tiles first."""
    counts = tiles.sum(-1, dtype=torch.int32)
    order = torch.argsort(tiles.to(torch.int32), dim=-1, descending=True, stable=True)
    return counts, order.to(torch.int32)


def neighbour_block_mask(L: int, block: int, causal: bool, band: Optional[int] = None,
                         key_valid: Optional[torch.Tensor] = None, tile: int = FLEX_TILE,
                         device=None) -> BlockMask:
    """The pattern as a flex_attention BlockMask for sequences of L; key_valid (B, L) or None."""
    partial, full = pattern_tiles(L, block, causal, band, key_valid, tile, device)
    n = partial.shape[-1]
    if key_valid is not None:  # padded to the tiles: the kernel may ask for keys up to n * tile
        key_valid = F.pad(key_valid, (0, n * tile - L), value=False)
    return BlockMask.from_kv_blocks(*_ordered(partial), *_ordered(full), BLOCK_SIZE=tile,
                                    mask_mod=_allowed(block, causal, band, key_valid),
                                    seq_lengths=(L, L))


def local_attention_flex(q, k, v, block: int, key_valid=None, causal=False,
                         band: Optional[int] = None, slopes=None):
    """Neighbour-block (or banded) attention by flex_attention. q, k, v (B, H, L, D) -> same.

    Same arguments and pattern as spt.kernels.attention.local_attention (no dropout). A query
    with no allowed key (only where all its neighbour keys are padding) gets zeros.
    """
    mask = neighbour_block_mask(q.shape[-2], block, causal, band, key_valid, device=q.device)
    score_mod = None if slopes is None else _alibi(slopes)
    return _flex_for(q.device)(q, k, v, score_mod=score_mod, block_mask=mask)
