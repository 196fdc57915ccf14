"""The Datasets that serve a task's cached arrays (items are the dicts of :mod:`spt.data.task`).

- :class:`RaggedTokenDataset`: variable-length token sequences stored as one flat array plus
  ``offsets`` (N+1,); item ``inputs`` is a LongTensor (L_i,).
- :class:`ArrayDataset`: fixed-length arrays (N, L, C) of uint8 pixels or int16 audio; item
  ``inputs`` is ``(x - shift) / scale`` as a FloatTensor (L, C).
- :class:`PixelTokenDataset`: uint8 pixels (N, L, 1) as tokens: intensity v becomes the id
  ``N_SPECIAL + v`` (vocabulary :data:`PIXEL_VOCAB` = 260); item ``inputs`` is a LongTensor (L,).
  The paper pretrains Pathfinder / PathX with cross-entropy over the 256 intensities; as tokens,
  the pixels also go through a text LM's vocabulary (Pythia, study 05), and <mask> stands for a
  masked pixel as for text.

:func:`pixel_splits` builds the splits of a pixel task (CIFAR Image, Pathfinder) either way, so the
readers share one ``tokens`` switch.

All carry an ``index`` into the cached rows (a split), expose ``labels`` (for stratified subsets)
and ``select(positions)`` (a sub-split sharing the same arrays). They pickle their memory-mapped
arrays as file references, so DataLoader workers started by "spawn" do not copy the data.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from .task import N_SPECIAL

PIXEL_VOCAB = N_SPECIAL + 256


class _MappedArray:
    """Pickles as a reference to a memory-mapped file, not its contents (DataLoader workers)."""

    def __init__(self, a: np.memmap):
        self.args = (a.filename, a.dtype, a.offset, a.shape, "F" if np.isfortran(a) else "C")

    def open(self) -> np.ndarray:
        filename, dtype, offset, shape, order = self.args
        return np.memmap(filename, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)


class _Rows(Dataset):
    """Shared by the datasets: a split = an index into cached rows, plus labels."""

    def __getstate__(self):
        return {k: _MappedArray(v) if isinstance(v, np.memmap) and v.filename else v
                for k, v in self.__dict__.items()}

    def __setstate__(self, state):
        self.__dict__.update({k: v.open() if isinstance(v, _MappedArray) else v
                              for k, v in state.items()})

    def __init__(self, labels: np.ndarray, index: Optional[np.ndarray]):
        self._labels = labels
        self.index = np.arange(len(labels)) if index is None else np.asarray(index, np.int64)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def labels(self) -> np.ndarray:
        """(N,) labels of this split's rows (int64 classes or float32 targets)."""
        return np.asarray(self._labels[self.index])

    def _label(self, row: int) -> torch.Tensor:
        y = self._labels[row]
        return (torch.tensor(float(y), dtype=torch.float32) if np.issubdtype(type(y), np.floating)
                else torch.tensor(int(y), dtype=torch.long))


class RaggedTokenDataset(_Rows):
    """Token sequences: flat (T,) ints + offsets (N+1,); labels (N,). Items: inputs (L_i,) long."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray, labels: np.ndarray,
                 index: Optional[np.ndarray] = None):
        super().__init__(labels, index)
        self.flat, self.offsets = flat, offsets

    def __getitem__(self, i: int) -> dict:
        row = int(self.index[i])
        seq = np.asarray(self.flat[self.offsets[row]:self.offsets[row + 1]], dtype=np.int64)
        return {"inputs": torch.from_numpy(seq), "label": self._label(row)}

    def lengths(self) -> np.ndarray:
        """(N,) sequence lengths of this split's rows."""
        return (self.offsets[self.index + 1] - self.offsets[self.index]).astype(np.int64)

    def select(self, positions) -> "RaggedTokenDataset":
        return RaggedTokenDataset(self.flat, self.offsets, self._labels,
                                  self.index[np.asarray(positions, np.int64)])


class ArrayDataset(_Rows):
    """Fixed-length continuous sequences x (N, L, C) (e.g. uint8 pixels), labels (N,).

    Items: inputs = (x[row] - shift) / scale as FloatTensor (L, C); shift, scale: (C,) or scalars.
    """

    def __init__(self, x: np.ndarray, labels: np.ndarray, shift=0.0, scale=1.0,
                 index: Optional[np.ndarray] = None):
        super().__init__(labels, index)
        self.x = x
        self.shift = np.asarray(shift, np.float32)
        self.scale = np.asarray(scale, np.float32)

    def __getitem__(self, i: int) -> dict:
        row = int(self.index[i])
        x = (np.asarray(self.x[row], dtype=np.float32) - self.shift) / self.scale
        return {"inputs": torch.from_numpy(x), "label": self._label(row)}

    def select(self, positions) -> "ArrayDataset":
        return ArrayDataset(self.x, self._labels, self.shift, self.scale,
                            self.index[np.asarray(positions, np.int64)])


class PixelTokenDataset(_Rows):
    """x (N, L, 1) uint8 pixels, labels (N,). Items: inputs LongTensor (L,) = N_SPECIAL + pixel."""

    def __init__(self, x: np.ndarray, labels: np.ndarray, index: Optional[np.ndarray] = None):
        super().__init__(labels, index)
        self.x = x

    def __getitem__(self, i: int) -> dict:
        row = int(self.index[i])
        ids = np.asarray(self.x[row], dtype=np.int64).reshape(-1) + N_SPECIAL
        return {"inputs": torch.from_numpy(ids), "label": self._label(row)}

    def select(self, positions) -> "PixelTokenDataset":
        return PixelTokenDataset(self.x, self._labels, self.index[np.asarray(positions, np.int64)])


def pixel_splits(x: np.ndarray, labels: np.ndarray, parts, tokens: bool, shift=0.0,
                 scale=1.0) -> list:
    """One dataset per index array in `parts` over uint8 pixels x (N, L, C).

    tokens=True  -> PixelTokenDataset (ids N_SPECIAL + intensity; needs C = 1);
    tokens=False -> ArrayDataset with inputs (x - shift) / scale.
    """
    if tokens:
        if x.shape[-1] != 1:
            raise ValueError(f"pixel tokens need one channel (grayscale); got {x.shape[-1]}")
        return [PixelTokenDataset(x, labels, idx) for idx in parts]
    return [ArrayDataset(x, labels, shift, scale, idx) for idx in parts]
