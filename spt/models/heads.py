"""Input encoders (tokens or continuous values + mask channel), sequence pooling, output heads
(pooled classifier, the dual encoder's pair classifier, per-position head).

The pooled heads end in one of two classifiers, the model config's ``head``:

* "mlp"    : ``mlp`` = Linear(d_in, d) -> GELU -> Linear(d, n_out) (parameters ``mlp.0.*``,
             ``mlp.2.*``); on pairs, the shape of LRA's and the S4 code's retrieval head;
* "linear" : ``linear`` = Linear(d_in, n_out) (parameters ``linear.weight``, ``linear.bias``), the
             paper's authors' decoder for S4 and DLR and for their ListOps, Pathfinder and PathX
             Transformers.

d_in is d for a single sequence and 4d for a pair ([u, v, u*v, u-v]).
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn

from ..config import Head, _check_choice


class TokenEncoder(nn.Module):
    """ids (B, L) long -> (B, L, d). `masked` is ignored: masked ids are already <mask> tokens."""

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.embed = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, inputs: torch.Tensor, masked: Optional[torch.Tensor] = None) -> torch.Tensor:
        if inputs.dtype not in (torch.long, torch.int32, torch.int64):
            raise TypeError(f"token model got inputs of dtype {inputs.dtype}; expected integer ids")
        return self.embed(inputs)


class ContinuousEncoder(nn.Module):
    """values (B, L, C) float + masked (B, L) bool -> (B, L, d).

    A binary mask channel is always appended (all zeros when nothing is masked), so the pretrained,
    finetuned and from-scratch models have identical parameters.
    """

    def __init__(self, d_input: int, d_model: int):
        super().__init__()
        self.d_input = d_input
        self.proj = nn.Linear(d_input + 1, d_model)

    def forward(self, inputs: torch.Tensor, masked: Optional[torch.Tensor] = None) -> torch.Tensor:
        if inputs.dim() == 2:
            inputs = inputs[..., None]
        if inputs.shape[-1] != self.d_input:
            raise ValueError(f"continuous model expects {self.d_input} input channels, "
                             f"got inputs of shape {tuple(inputs.shape)}")
        flag = torch.zeros_like(inputs[..., :1]) if masked is None else masked[..., None].to(inputs.dtype)
        return self.proj(torch.cat([inputs, flag], dim=-1))


def pool(h: torch.Tensor, valid: Optional[torch.Tensor], how: str) -> torch.Tensor:
    """Pool h (B, L, d) over real positions only -> (B, d). how: "mean" | "max" | "last"."""
    if valid is None:
        valid = torch.ones(h.shape[:2], dtype=torch.bool, device=h.device)
    m = valid[..., None]
    if how == "mean":
        return (h * m).sum(1) / m.sum(1).clamp_min(1)
    if how == "max":
        return h.masked_fill(~m, torch.finfo(h.dtype).min).amax(1)
    if how == "last":
        last = (valid.long().cumsum(1).argmax(1))  # index of the last real position
        return h[torch.arange(h.shape[0], device=h.device), last]
    raise ValueError(f"pooling must be 'mean', 'max' or 'last', got {how!r}")


class _PooledClassifier(nn.Module):
    """The layers after pooling: features (B, d_in) -> (B, n_out), as `head` says (module
    docstring): "mlp" builds ``self.mlp``, "linear" builds ``self.linear``."""

    def __init__(self, d_in: int, d_model: int, n_out: int, head: str):
        super().__init__()
        _check_choice(type(self).__name__, "head", head, Head.__args__)
        self.kind = head
        if head == "mlp":
            self.mlp = nn.Sequential(nn.Linear(d_in, d_model), nn.GELU(), nn.Linear(d_model, n_out))
        else:
            self.linear = nn.Linear(d_in, n_out)

    def classify(self, z: torch.Tensor) -> torch.Tensor:
        """z (B, d_in) -> (B, n_out)."""
        return self.mlp(z) if self.kind == "mlp" else self.linear(z)


class ClassifierHead(_PooledClassifier):
    """Pooled sequence -> classifier -> (B, n_out) logits (or (B, 1) for regression).

    forward(h (B, L, d), valid (B, L) bool or None) -> (B, n_out). head: "mlp" (Linear(d, d) ->
    GELU -> Linear(d, n_out)) or "linear" (Linear(d, n_out)); see the module docstring.
    """

    def __init__(self, d_model: int, n_out: int, pooling: str, head: str = "mlp"):
        super().__init__(d_model, d_model, n_out, head)
        self.pooling = pooling

    def forward(self, h: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.classify(pool(h, valid, self.pooling))


def pair_features(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """[u, v, u*v, u-v] (B, 4d) of the two documents' pooled vectors u, v (B, d) (LRA's dual
    encoder). Swapping u and v swaps the first two blocks and negates the last."""
    return torch.cat([u, v, u * v, u - v], dim=-1)


class PairClassifierHead(_PooledClassifier):
    """The dual encoder's head (LRA Retrieval): pool each document, classify [u, v, u*v, u-v].

    forward(h (2B, L, d), valid (2B, L) or None) -> (B, n_out): rows 0..B-1 of h are the first
    documents, rows B..2B-1 the second ones (the batch :class:`~spt.models.model.DualEncoderModel`
    gives the backbone). Each row is pooled over its own real positions. head "mlp":
    Linear(4d, d) -> GELU -> Linear(d, n_out), the shape of LRA's and the S4 code's retrieval head;
    "linear": Linear(4d, n_out).
    """

    def __init__(self, d_model: int, n_out: int, pooling: str, head: str = "mlp"):
        super().__init__(4 * d_model, d_model, n_out, head)
        self.pooling = pooling

    def forward(self, h: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        if h.shape[0] % 2:
            raise ValueError(f"PairClassifierHead expects the two documents stacked on the batch "
                             f"dimension (2B rows), got {h.shape[0]} rows")
        u, v = pool(h, valid, self.pooling).chunk(2, dim=0)
        return self.classify(pair_features(u, v))


class TokenHead(nn.Module):
    """Per-position prediction for pretraining: (B, L, d) -> (B, L, n_out)."""

    def __init__(self, d_model: int, n_out: int):
        super().__init__()
        self.proj = nn.Linear(d_model, n_out)

    def forward(self, h: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.proj(h)
