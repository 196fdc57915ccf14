"""Nested training subsets for the data-scale study (paper Fig. 3).

A fraction f keeps the first ``max(1, round(f * N))`` examples of one fixed ordering of the training
split, so a smaller subset is always inside every larger one. The ordering depends only on
``seed`` (fixed by default, never the run seed). For classification it is *stratified*: each class's
examples are shuffled and interleaved by their relative rank, so every prefix holds the classes in
(almost exactly) their overall proportions; for regression it is a plain shuffle.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from torch.utils.data import Dataset, Subset

FRACTIONS = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0)
FRACTION_SEED = 2024  # fixed: subsets never depend on the run seed


def nested_order(n: int, labels: Optional[np.ndarray] = None,
                 seed: int = FRACTION_SEED) -> np.ndarray:
    """(n,) int64 permutation of range(n); its prefixes are the nested subsets.

    labels: (n,) integer classes -> stratified order; None or float targets -> plain shuffle.
    """
    rng = np.random.default_rng(seed)
    if labels is None or not np.issubdtype(np.asarray(labels).dtype, np.integer):
        return rng.permutation(n).astype(np.int64)
    labels = np.asarray(labels)
    if labels.shape != (n,):
        raise ValueError(f"nested_order: labels has shape {labels.shape}, expected ({n},)")
    key = np.empty(n, dtype=np.float64)
    for c in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == c))
        # the k-th member of a class of size m sits at (k + u) / m, u ~ U[0, 1): interleaved ranks
        key[members] = (np.arange(len(members)) + rng.random(len(members))) / len(members)
    return np.argsort(key, kind="stable").astype(np.int64)


def subset_size(n: int, fraction: float) -> int:
    """How many of n training examples a fraction keeps (at least 1)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    return n if fraction == 1.0 else max(1, int(round(fraction * n)))


def nested_subset(dataset: Dataset, fraction: float, seed: int = FRACTION_SEED) -> Dataset:
    """The nested `fraction` subset of `dataset` (itself when fraction == 1).

    Uses ``dataset.labels`` (stratified) and ``dataset.select`` when the dataset has them (the
    cached datasets of :mod:`spt.data.datasets` do), else a plain shuffle and a torch ``Subset``.
    """
    n = len(dataset)
    k = subset_size(n, fraction)
    if k == n:
        return dataset
    labels = getattr(dataset, "labels", None)
    keep = np.sort(nested_order(n, None if labels is None else np.asarray(labels), seed)[:k])
    if hasattr(dataset, "select"):
        return dataset.select(keep)
    return Subset(dataset, keep.tolist())


def split_indices(n: int, fractions: tuple[float, ...], seed: int) -> list[np.ndarray]:
    """Cut range(n) into len(fractions) disjoint sorted index arrays by a fixed-seed shuffle.

    Every part but the first gets ``int(f * n)`` examples; the first gets the rest. E.g.
    ``split_indices(n, (0.8, 0.1, 0.1), seed)`` -> train, val, test (Pathfinder's 80/10/10);
    ``split_indices(n, (0.9, 0.1), seed)`` -> train, held-out validation.
    """
    perm = np.random.default_rng(seed).permutation(n)
    sizes = [int(f * n) for f in fractions[1:]]
    sizes.insert(0, n - sum(sizes))
    bounds = np.cumsum([0] + sizes)
    return [np.sort(perm[bounds[i]:bounds[i + 1]]).astype(np.int64) for i in range(len(sizes))]


def holdout_splits(n_train: int, n_test: int, val_fraction: float, seed: int) -> list[np.ndarray]:
    """Train / val / test rows of data stored as the official train rows, then the official test
    rows, for releases without a validation split: val = a fixed-seed `val_fraction` of the
    official train (:func:`split_indices`), test = rows n_train .. n_train + n_test - 1."""
    train_idx, val_idx = split_indices(n_train, (1 - val_fraction, val_fraction), seed)
    return [train_idx, val_idx, np.arange(n_train, n_train + n_test)]
