"""The embedded quick-start task: scikit-learn's handwritten digits as pixel sequences.

This is a *stand-in* for LRA Image, not LRA itself: 1,797 real 8x8 grayscale scans of handwritten
digits (UCI "Optical Recognition of Handwritten Digits", shipped inside scikit-learn, so nothing is
downloaded), optionally upsampled bilinearly to ``size x size`` and flattened row by row into a
sequence of ``size**2`` pixels with one channel. Like LRA Image, the model sees a 1-D sequence and
no 2-D structure; it is 10-way classification.

Splits are fixed (independent of the run seed): a stratified ``test_size`` test set, a
``val_size`` validation set held out of the remaining training images, and the rest is train.
``n_train`` (or ``fraction``) keeps a *nested* prefix of a fixed permutation of train: a smaller
subset is always inside a larger one (as in the paper's Fig. 3 data-scale study).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from .task import Task, TaskSpec

SPLIT_SEED = 1234  # fixed: the splits never depend on the run seed


class TensorSequenceDataset(Dataset):
    """Items {"inputs": (L, C) float, "label": () long} from stacked tensors (N, L, C), (N,)."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor):
        if inputs.shape[0] != labels.shape[0]:
            raise ValueError(f"inputs has {inputs.shape[0]} rows but labels has {labels.shape[0]}")
        self.inputs, self.labels = inputs, labels

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def __getitem__(self, i: int) -> dict:
        return {"inputs": self.inputs[i], "label": self.labels[i]}


def _load_digits_images(size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, size*size, 1) float in [0, 1] and (N,) long labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    img = torch.tensor(d.images, dtype=torch.float32) / 16.0  # (N, 8, 8)
    if size != 8:
        img = F.interpolate(img[:, None], size=(size, size), mode="bilinear",
                            align_corners=True)[:, 0]
    return img.reshape(len(img), size * size, 1), torch.tensor(d.target, dtype=torch.long)


def _stratified_split(labels: np.ndarray, n_holdout: int, rng: np.random.Generator):
    """Indices (rest, holdout) with `n_holdout` examples spread evenly over classes."""
    classes = np.unique(labels)
    per_class = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    quota = np.full(len(classes), n_holdout // len(classes))
    quota[: n_holdout % len(classes)] += 1
    hold = np.concatenate([idx[:q] for idx, q in zip(per_class, quota)])
    rest = np.setdiff1d(np.arange(len(labels)), hold)
    return rng.permutation(rest), rng.permutation(hold)


def digits_task(size: int = 16, n_train: Optional[int] = None, fraction: float = 1.0,
                val_size: int = 300, test_size: int = 500) -> Task:
    """The digits task as pixel sequences of length ``size**2``.

    size     : image side after bilinear upsampling (8 = original; 16 gives L = 256).
    n_train  : keep this many training images (nested prefix); overrides `fraction`.
    fraction : keep this fraction of the training images (nested prefix).
    Pixels are standardised with the mean / std of the full training split.
    """
    if size < 8:
        raise ValueError(f"digits_task: size must be >= 8 (the scans are 8x8), got {size}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"digits_task: fraction must be in (0, 1], got {fraction}")
    x, y = _load_digits_images(size)
    rng = np.random.default_rng(SPLIT_SEED)
    rest, test_idx = _stratified_split(y.numpy(), test_size, rng)
    train_rel, val_rel = _stratified_split(y.numpy()[rest], val_size, rng)
    train_idx, val_idx = rest[train_rel], rest[val_rel]
    keep = n_train if n_train is not None else max(1, int(round(fraction * len(train_idx))))
    if not 1 <= keep <= len(train_idx):
        raise ValueError(f"digits_task: n_train must be in [1, {len(train_idx)}], got {keep}")
    train_idx = train_idx[:keep]
    full_train = x[rest[train_rel]]
    mean, std = full_train.mean(), full_train.std()
    x = (x - mean) / std
    spec = TaskSpec(
        name=f"digits{size}", seq_len=size * size, num_classes=10, d_input=1, mask_ratio=0.5,
        description=(f"scikit-learn handwritten digits (real 8x8 scans) upsampled to {size}x{size}"
                     f" and flattened to {size * size} pixels; a small stand-in for LRA Image"))
    ds = lambda idx: TensorSequenceDataset(x[idx], y[idx])  # noqa: E731
    return Task(spec=spec, train=ds(train_idx), val=ds(val_idx), test=ds(test_idx))
