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

from .task import N_SPECIAL, Task, TaskSpec

SPLIT_SEED = 1234  # fixed: the splits never depend on the run seed


class TensorSequenceDataset(Dataset):
    """Items {"inputs": (L, C) float or (L,) long, "label": () long} from stacked tensors."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor):
        if inputs.shape[0] != labels.shape[0]:
            raise ValueError(f"inputs has {inputs.shape[0]} rows but labels has {labels.shape[0]}")
        self.inputs, self.labels = inputs, labels

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def __getitem__(self, i: int) -> dict:
        return {"inputs": self.inputs[i], "label": self.labels[i]}


def _load_digits_images(size: int, canvas: Optional[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, side*side, 1) float in [0, 1] and (N,) long labels; side = canvas or size."""
    from sklearn.datasets import load_digits

    d = load_digits()
    img = torch.tensor(d.images, dtype=torch.float32) / 16.0  # (N, 8, 8)
    if size != 8:
        img = F.interpolate(img[:, None], size=(size, size), mode="bilinear",
                            align_corners=True)[:, 0]
    if canvas is not None:
        # each scan at a fixed random offset on a blank canvas (fixed per image, not per epoch)
        g = torch.Generator().manual_seed(SPLIT_SEED)
        off = torch.randint(0, canvas - size + 1, (len(img), 2), generator=g)
        placed = torch.zeros(len(img), canvas, canvas)
        for i, (r, c) in enumerate(off.tolist()):
            placed[i, r:r + size, c:c + size] = img[i]
        img, size = placed, canvas
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
                val_size: int = 300, test_size: int = 500, canvas: Optional[int] = None,
                tokens: bool = False) -> Task:
    """The digits task as pixel sequences of length ``size**2`` (or ``canvas**2``).

    size     : image side after bilinear upsampling (8 = original; 16 gives L = 256).
    canvas   : if set, each (size x size) scan is placed at a fixed random position on a blank
               canvas x canvas image ("translated digits"), so that where a stroke is says little
               and the model must learn local, translation-invariant structure.
    tokens   : pixels as tokens: the 17 intensity levels 0..16 of the scans become ids
               ``N_SPECIAL + level`` (masked pretraining then uses CE over intensities, as the paper
               does for PathX); otherwise standardised continuous values with one channel.
    n_train  : keep this many training images (nested prefix); overrides `fraction`.
    fraction : keep this fraction of the training images (nested prefix).
    Pixels are standardised with the mean / std of the full training split.
    """
    if size < 8:
        raise ValueError(f"digits_task: size must be >= 8 (the scans are 8x8), got {size}")
    if canvas is not None and canvas < size:
        raise ValueError(f"digits_task: canvas={canvas} must be >= size={size}")
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"digits_task: fraction must be in (0, 1], got {fraction}")
    x, y = _load_digits_images(size, canvas)
    side = canvas or size
    rng = np.random.default_rng(SPLIT_SEED)
    rest, test_idx = _stratified_split(y.numpy(), test_size, rng)
    train_rel, val_rel = _stratified_split(y.numpy()[rest], val_size, rng)
    train_idx, val_idx = rest[train_rel], rest[val_rel]
    keep = n_train if n_train is not None else max(1, int(round(fraction * len(train_idx))))
    if not 1 <= keep <= len(train_idx):
        raise ValueError(f"digits_task: n_train must be in [1, {len(train_idx)}], got {keep}")
    train_idx = train_idx[:keep]
    if tokens:
        x = (x[..., 0] * 16).round().long() + N_SPECIAL  # (N, L) intensity ids
    else:
        full_train = x[rest[train_rel]]
        x = (x - full_train.mean()) / full_train.std()
    placed = f", placed at random positions on a {canvas}x{canvas} canvas" if canvas else ""
    spec = TaskSpec(
        name=f"digits{size}" + (f"_on{canvas}" if canvas else ""), seq_len=side * side,
        num_classes=10, mask_ratio=0.5,
        **({"vocab_size": N_SPECIAL + 17} if tokens else {"d_input": 1}),
        description=(f"scikit-learn handwritten digits (real 8x8 scans) at {size}x{size}{placed},"
                     f" flattened row by row to {side * side} pixels; a small stand-in for LRA "
                     f"Image"))
    ds = lambda idx: TensorSequenceDataset(x[idx], y[idx])  # noqa: E731
    return Task(spec=spec, train=ds(train_idx), val=ds(val_idx), test=ds(test_idx))
