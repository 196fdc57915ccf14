"""The range probe: how far apart the inputs a task's label depends on really are, measured.

Train the same model several times, each with its reach capped (``reach`` on a TransformerConfig:
banded attention; on an SSMConfig or a free convolution: the kernel truncated past the reach), and
read accuracy against the cap. The cap is stated as a *span* k: the longest distance between two
inputs that can meet in one output position of the stack,

    span = 2 n w   (bidirectional: each of n layers looks w positions either way)
    span = n w     (causal: w positions back)

so a label that depends on two inputs d positions apart needs k >= d. Used by study 14
(``spt.studies.priors_and_range``); checked against the generated lagged copy, whose dependency
length is known by construction (``spt.data.lagged``; tests/test_range_probe.py).

    probe = [capped(cfg, k) for k in (4, 8, 16, 32)]     # configs with reach = k / (2 n)
    needed_span({4: .34, 8: .99, 16: 1.0}, full=1.0, chance=1 / 3)   # -> 8
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

UNCAPPED = -1  # the span coordinate of a probe whose reach is not capped


def _per_direction(cfg) -> int:
    return cfg.n_layers if cfg.causal else 2 * cfg.n_layers


def span_of(cfg) -> Optional[int]:
    """The longest distance between two inputs that meet in one output of `cfg`'s stack (None:
    uncapped)."""
    reach = getattr(cfg, "reach", None)
    return None if reach is None else _per_direction(cfg) * reach


def capped(cfg, span: int):
    """`cfg` with its reach set so that the stack's span is `span` (a multiple of 2 n_layers for a
    bidirectional stack, of n_layers for a causal one; ValueError otherwise, naming the nearest)."""
    if not dataclasses.is_dataclass(cfg) or "reach" not in {f.name for f in dataclasses.fields(cfg)}:
        raise ValueError(f"the range probe caps a model's reach: {type(cfg).__name__} has no "
                         f"`reach` field (TransformerConfig, SSMConfig and FreeConvConfig do)")
    step = _per_direction(cfg)
    if span < 0 or span % step:
        lower, upper = step * (max(span, 0) // step), step * (max(span, 0) // step + 1)
        raise ValueError(f"range probe: span {span} is not a multiple of {step} (= "
                         f"{'' if cfg.causal else '2 x '}n_layers for this stack); use {lower} "
                         f"or {upper}")
    return dataclasses.replace(cfg, reach=span // step)


def needed_span(curve: Mapping[int, float], full: float, chance: float,
                share: float = 0.9) -> Optional[int]:
    """The range a task needs: the smallest span whose accuracy reaches `share` of the way from
    chance to the uncapped model's (`full`). curve: {span: accuracy}. None when no span does (the
    task needs more than the ladder's longest span, or the uncapped model is at chance too)."""
    if not 0.0 < share <= 1.0:
        raise ValueError(f"needed_span: share must be in (0, 1], got {share!r}")
    if full <= chance:
        return None
    bar = chance + share * (full - chance)
    reached = [k for k, acc in sorted(curve.items()) if acc >= bar]
    return reached[0] if reached else None
