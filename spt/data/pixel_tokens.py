"""Pixels as tokens: uint8 intensities 0..255 become ids N_SPECIAL + value (vocabulary 260).

The paper pretrains Pathfinder / PathX with cross-entropy over the 256 pixel intensities (Table 4,
"PT Loss CE"), which needs the pixels as tokens rather than normalised values; the <mask> id then
stands for a masked pixel, as for text.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from .cache import _Rows
from .task import N_SPECIAL

PIXEL_VOCAB = N_SPECIAL + 256


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
