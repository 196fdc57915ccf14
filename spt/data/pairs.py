"""Pair tasks (LRA Retrieval): items holding two sequences, and the single-sequence view that
self-pretraining uses.

A pair item is ``{"inputs": (L1,), "inputs2": (L2,), "label": ()}``; :func:`pad_collate
<spt.data.collate.pad_collate>` pads the two sequences separately (``valid`` and ``valid2``).

Self-pretraining of a pair task denoises single documents, as the dual encoder that finetuning
builds reads them: :func:`documents_task` turns every pair into its two documents (item ``2i`` is
the first document of pair ``i``, item ``2i + 1`` the second). Document items carry label -1: a
document has no label, and pretraining never reads one.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch.utils.data import Dataset

from .task import Task

NO_LABEL = -1


class PairDataset(Dataset):
    """Two row-aligned single-sequence datasets as one pair dataset.

    first, second : datasets of equal length whose items have "inputs" (and, for `first`, "label");
                    cached ones (:class:`spt.data.datasets.RaggedTokenDataset`) also give ``labels``
                    and ``select``, which fractions of the training split use.
    Items: {"inputs": first[i]["inputs"], "inputs2": second[i]["inputs"], "label": first's label}.
    """

    def __init__(self, first: Dataset, second: Dataset):
        if len(first) != len(second):
            raise ValueError(f"PairDataset: the two datasets differ in length ({len(first)} vs "
                             f"{len(second)}); they must hold the two sequences of the same rows")
        self.first, self.second = first, second

    def __len__(self) -> int:
        return len(self.first)

    def __getitem__(self, i: int) -> dict:
        a = self.first[i]
        return {"inputs": a["inputs"], "inputs2": self.second[i]["inputs"], "label": a["label"]}

    def document(self, i: int, which: int) -> torch.Tensor:
        """The first (which=0) or second (which=1) sequence of pair i, reading only that one."""
        return (self.first if which == 0 else self.second)[i]["inputs"]

    @property
    def labels(self) -> np.ndarray:
        """(N,) labels of the pairs."""
        return self.first.labels

    def lengths(self) -> np.ndarray:
        """(N,) positions of each pair, both sequences together (needs cached datasets)."""
        return np.asarray(self.first.lengths()) + np.asarray(self.second.lengths())

    def select(self, positions) -> "PairDataset":
        """The pairs at `positions` (a sub-split sharing the same arrays)."""
        return PairDataset(self.first.select(positions), self.second.select(positions))


class DocumentsDataset(Dataset):
    """The documents of a pair dataset, one per item: 2 * len(pairs) items.

    Item 2i is the first document of pair i, item 2i + 1 its second:
    {"inputs": (L,), "label": -1 (no label; self-pretraining never reads it)}.

    ``group = 2``: training batches take a pair's two documents together
    (:func:`spt.train.passes.epoch_batches`): a batch of B pairs is 2B documents a step, as the
    authors' AAN LM loader batches pairs and its collate stacks both documents (their
    src/dataloaders/lra.py), so an epoch is len(pairs) / B steps.
    """

    group = 2

    def __init__(self, pairs: Dataset):
        self.pairs = pairs

    def __len__(self) -> int:
        return 2 * len(self.pairs)

    def __getitem__(self, j: int) -> dict:
        if not 0 <= j < len(self):
            raise IndexError(f"document {j} out of range for {len(self)} documents")
        i, which = divmod(j, 2)
        if isinstance(self.pairs, PairDataset):
            doc = self.pairs.document(i, which)
        else:
            doc = self.pairs[i]["inputs2" if which else "inputs"]
        return {"inputs": doc, "label": torch.tensor(NO_LABEL, dtype=torch.long)}


def documents_task(task: Task) -> Task:
    """The self-pretraining view of a pair task: every split as its single documents.

    task    : a pair task (``task.spec.pair``), e.g. :func:`spt.data.text.load_retrieval`.
    returns : a Task whose spec is the pair spec with ``pair=False`` and name ``<name>-documents``
              (same vocabulary and seq_len, so the pretrained backbone fits the dual encoder), and
              whose train / val / test hold the two documents of each pair of that split (train
              for training, val for checkpoint selection, test for the reported denoising metrics).
    """
    if not task.spec.pair:
        raise ValueError(f"documents_task: task {task.spec.name!r} is not a pair task "
                         f"(TaskSpec.pair is False); its items are single sequences already")
    spec = dataclasses.replace(
        task.spec, name=f"{task.spec.name}-documents", pair=False,
        description=f"the single documents of {task.spec.name} (two per pair, labels unused): "
                    f"{task.spec.description}")
    return Task(spec, DocumentsDataset(task.train), DocumentsDataset(task.val),
                DocumentsDataset(task.test))
