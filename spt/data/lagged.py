"""A generated task whose dependency length is known by construction: the *lagged copy*.

Each sequence holds `seq_len` tokens. One position p carries a marker; every other position holds
one of `symbols` symbols. The label is the symbol at p + lag:

    x = [s s s s M s s s ... s* s s s]        label = s*, found `lag` positions after M
            p = 4 ^            ^ p + lag

What a model needs to see: the marker and the symbol `lag` positions after it in one receptive
field. Shorter views carry (almost) nothing on the label:

* the non-marker positions hold a random arrangement of a *balanced* multiset (each symbol
  (seq_len - 1) / symbols times), so counting symbols over the whole sequence says nothing (with
  independent symbols the label's symbol would be the most frequent one more often than chance);
* p is uniform over 0 .. seq_len - 1 - lag and the symbols are exchangeable, so a view that holds
  the marker but not position p + lag, or that position but not the marker, sees symbols whose
  only trace of the label is its depletion elsewhere: with the defaults, 20 of the other 62
  positions hold the label's symbol against 21 for each other symbol. Few symbols keep that
  trace small; chance is 1 / symbols.

A model whose layers relate inputs at most k positions apart (spt.analysis.range_probe) is near
chance for k < lag and can solve the task for k >= lag: the range probe must find k = lag
(tests/test_range_probe.py).

Ids: ``N_SPECIAL + s`` for symbol s, ``N_SPECIAL + symbols`` for the marker.
"""
from __future__ import annotations

import numpy as np
import torch

from .digits import TensorSequenceDataset
from .task import N_SPECIAL, Task, TaskSpec

SPLIT_SEEDS = {"train": 0, "val": 1, "test": 2}


def lagged_sequences(n: int, seq_len: int, lag: int, symbols: int, seed: int):
    """(inputs (n, seq_len) long ids, labels (n,) long), reproducible from `seed`."""
    rng = np.random.default_rng(seed)
    per = (seq_len - 1) // symbols
    pool = np.repeat(np.arange(symbols), per)                       # the balanced multiset
    x = np.empty((n, seq_len), dtype=np.int64)
    y = np.empty(n, dtype=np.int64)
    for i in range(n):
        p = int(rng.integers(0, seq_len - lag))
        rest = rng.permutation(pool)
        row = np.insert(rest, p, symbols)                           # the marker at p
        x[i], y[i] = row, row[p + lag]
    return torch.from_numpy(x + N_SPECIAL), torch.from_numpy(y)


def lagged_task(seq_len: int = 64, lag: int = 16, symbols: int = 3, n_train: int = 2000,
                val_size: int = 500, test_size: int = 500) -> Task:
    """The lagged-copy task (see the module docstring); `symbols` classes, chance 1 / symbols."""
    if symbols < 2:
        raise ValueError(f"lagged_task: symbols must be >= 2, got {symbols}")
    if (seq_len - 1) % symbols:
        raise ValueError(f"lagged_task: seq_len - 1 = {seq_len - 1} must be a multiple of "
                         f"symbols={symbols} (each symbol equally often); e.g. seq_len="
                         f"{symbols * ((seq_len - 1) // symbols) + 1}")
    if not 1 <= lag < seq_len:
        raise ValueError(f"lagged_task: lag must be in [1, seq_len={seq_len}), got {lag}")
    for name, n in (("n_train", n_train), ("val_size", val_size), ("test_size", test_size)):
        if n < 1:
            raise ValueError(f"lagged_task: {name} must be >= 1, got {n}")
    spec = TaskSpec(name=f"lagged{seq_len}_lag{lag}", seq_len=seq_len, num_classes=symbols,
                    vocab_size=N_SPECIAL + symbols + 1, mask_ratio=0.15,
                    description=(f"generated: {seq_len} tokens, a marker and {symbols} balanced "
                                 f"symbols; the label is the symbol {lag} positions after the "
                                 f"marker (dependency length {lag} by construction)"))
    split = {}
    for name, n in (("train", n_train), ("val", val_size), ("test", test_size)):
        x, y = lagged_sequences(n, seq_len, lag, symbols, seed=1000 * lag + SPLIT_SEEDS[name])
        split[name] = TensorSequenceDataset(x, y)
    return Task(spec=spec, train=split["train"], val=split["val"], test=split["test"])
