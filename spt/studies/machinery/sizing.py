"""A model config at the width whose classifier has a given parameter count: how study 09 scales
the paper's models and study 13 sizes the mixers like S4.

    cfg, n = width_for_params(TransformerConfig(...), 1e6)    # the width nearest 1M parameters
"""
from __future__ import annotations

from ...models.model import count_parameters_of


def width_for_params(cfg, target: float, *, d_input: int = 1, num_classes: int = 10,
                     step: int = 8):
    """`cfg` with the width (a multiple of `step`, and of n_heads for Transformers) whose
    classifier's parameter count is closest to `target`; returns (config, count).

    The count grows with the width, so a bisection over multiples finds it in ~log2 steps."""
    mult = step * cfg.width_multiple
    count = lambda k: count_parameters_of(cfg.resize(k * mult), d_input, num_classes)  # noqa: E731
    hi = 1
    while count(hi) < target:
        hi *= 2
    lo = max(1, hi // 2)
    while hi - lo > 1:  # count(lo) < target <= count(hi), or lo == 1
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count(mid) < target else (lo, mid)
    k = min((lo, hi), key=lambda k: abs(count(k) - target))
    return cfg.resize(k * mult), count(k)
