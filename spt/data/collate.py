"""Batching: pad variable-length items and mark the real positions."""
from __future__ import annotations

import torch


def pad_collate(items: list[dict], pad_value: float = 0) -> dict:
    """Stack dataset items into a batch.

    items  : dicts with "inputs" (L_i,) long or (L_i, C) float, and "label" () tensor.
    returns: {"inputs": (B, L) or (B, L, C), "valid": (B, L) bool (True = real position),
              "label": (B,)} with L = max L_i; padded inputs are `pad_value` (PAD_ID for tokens).
    """
    if not items:
        raise ValueError("pad_collate got an empty list of items")
    lengths = [it["inputs"].shape[0] for it in items]
    L = max(lengths)
    first = items[0]["inputs"]
    shape = (len(items), L) + tuple(first.shape[1:])
    inputs = torch.full(shape, pad_value, dtype=first.dtype)
    valid = torch.zeros(len(items), L, dtype=torch.bool)
    for i, (it, n) in enumerate(zip(items, lengths)):
        inputs[i, :n] = it["inputs"]
        valid[i, :n] = True
    label = torch.stack([torch.as_tensor(it["label"]) for it in items])
    return {"inputs": inputs, "valid": valid, "label": label}
