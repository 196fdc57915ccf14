"""Batching: pad variable-length items and mark the real positions."""
from __future__ import annotations

import torch


def _pad(seqs: list, pad_value: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(L_i,) or (L_i, C) tensors -> (B, L) or (B, L, C) padded with `pad_value`, valid (B, L)."""
    lengths = [s.shape[0] for s in seqs]
    L = max(lengths)
    first = seqs[0]
    out = torch.full((len(seqs), L) + tuple(first.shape[1:]), pad_value, dtype=first.dtype)
    valid = torch.zeros(len(seqs), L, dtype=torch.bool)
    for i, (s, n) in enumerate(zip(seqs, lengths)):
        out[i, :n] = s
        valid[i, :n] = True
    return out, valid


def pad_collate(items: list[dict], pad_value: float = 0) -> dict:
    """Stack dataset items into a batch.

    items  : dicts with "inputs" (L_i,) long or (L_i, C) float, and "label" () tensor; items of a
             pair task (:mod:`spt.data.pairs`) also have "inputs2" (L2_i,), and items read for
             masked denoising "masked" (L_i,) bool (:class:`spt.train.objectives.MaskedItems`)
             (each: every item or none).
    returns: {"inputs": (B, L) or (B, L, C), "valid": (B, L) bool (True = real position),
              "label": (B,)} with L = max L_i; padded inputs are `pad_value` (PAD_ID for tokens).
              Pair items add "inputs2" (B, L2) and "valid2" (B, L2), padded on their own
              (L2 = max L2_i); masked items add "masked" (B, L), False on padding (and pair
              items "masked2" (B, L2), :class:`spt.train.joint.PairMaskedItems`).
    """
    if not items:
        raise ValueError("pad_collate got an empty list of items")
    inputs, valid = _pad([it["inputs"] for it in items], pad_value)
    label = torch.stack([torch.as_tensor(it["label"]) for it in items])
    batch = {"inputs": inputs, "valid": valid, "label": label}
    if _every_or_none(items, "inputs2", "pair and single-sequence items"):
        batch["inputs2"], batch["valid2"] = _pad([it["inputs2"] for it in items], pad_value)
    if _every_or_none(items, "masked", "items with and without masks"):
        batch["masked"], _ = _pad([it["masked"] for it in items], False)
    if _every_or_none(items, "masked2", "pair items with and without masks"):
        batch["masked2"], _ = _pad([it["masked2"] for it in items], False)
    return batch


def _every_or_none(items: list[dict], key: str, mix: str) -> bool:
    """True when every item has `key`, False when none has; a mix is an error naming `mix`."""
    n = sum(key in it for it in items)
    if 0 < n < len(items):
        raise ValueError(f"pad_collate: {n} of {len(items)} items have {key!r}; a batch mixes "
                         f"{mix}")
    return n > 0
