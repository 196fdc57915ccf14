"""What a task hands to the models and training loops: a :class:`TaskSpec` plus three Datasets.

Every dataset item is a dict::

    {"inputs": LongTensor (L,)      for token tasks     (ids into the task vocabulary)
               FloatTensor (L, C)   for continuous tasks (pixels, audio; C = spec.d_input)
     "label":  LongTensor ()        for classification, FloatTensor () for regression}

Sequences may have different lengths; :func:`spt.data.collate.pad_collate` pads a batch and adds
``valid`` (B, L) bool, True on real positions.

Token vocabularies reserve fixed indices for the special tokens (shared by pretraining and
finetuning): ``PAD_ID=0``, ``MASK_ID=1``, ``UNK_ID=2``, ``EOS_ID=3``; task symbols start at 4.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional

from torch.utils.data import Dataset

from .errors import DataFormatError

PAD_ID, MASK_ID, UNK_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<mask>", "<unk>", "<eos>")
N_SPECIAL = len(SPECIAL_TOKENS)


@dataclass(frozen=True)
class TaskSpec:
    """Static facts about a task.

    name        : short name, e.g. "digits16".
    seq_len     : maximum sequence length L.
    num_classes : number of classes, or None for regression.
    vocab_size  : token tasks: size of the vocabulary including specials; None for continuous.
    d_input     : continuous tasks: channels per position; None for token tasks.
    mask_ratio  : the paper's masking ratio for this kind of data (section 2).
    description : one honest sentence on what the data is.
    pair        : True for a pair task (LRA Retrieval): each item also has "inputs2" (L2,), the
                  second sequence; seq_len bounds each sequence alone. Models encode the two
                  separately (:class:`spt.models.model.DualEncoderModel`); self-pretraining sees
                  single sequences (:func:`spt.data.pairs.documents_task`).
    levels      : continuous tasks whose values are quantised intensities, stored as
                  v = 2 k / (levels - 1) - 1 for level k in 0 .. levels-1 (8-bit pixels scaled to
                  [-1, 1]: levels = 256). Lets CE pretraining predict the level of a masked value
                  (the paper's Pathfinder / PathX, App. C.1); None otherwise.
    """

    name: str
    seq_len: int
    num_classes: Optional[int]
    vocab_size: Optional[int] = None
    d_input: Optional[int] = None
    mask_ratio: float = 0.5
    description: str = ""
    pair: bool = False
    levels: Optional[int] = None

    def level_of(self, values):
        """Inverse of the `levels` scaling: values (...) in [-1, 1] -> long levels (...)."""
        k = ((values.float() + 1) * (0.5 * (self.levels - 1))).round()
        return k.clamp(0, self.levels - 1).long()

    def __post_init__(self):
        if (self.vocab_size is None) == (self.d_input is None):
            raise ValueError(f"TaskSpec {self.name!r}: set exactly one of vocab_size (token task) "
                             f"or d_input (continuous task)")

    @property
    def is_tokens(self) -> bool:
        return self.vocab_size is not None

    @property
    def is_regression(self) -> bool:
        return self.num_classes is None

    @property
    def score(self) -> str:
        """The task's supervised score: "r2" for regression, "accuracy" for classification."""
        return "r2" if self.is_regression else "accuracy"

    @property
    def pretrain_loss(self) -> str:
        """"ce" over the vocabulary for token tasks, "l1" for continuous values."""
        return "ce" if self.is_tokens else "l1"


@dataclass
class Task:
    """A task's spec and its train / validation / test datasets."""

    spec: TaskSpec
    train: Dataset
    val: Dataset
    test: Dataset

    def __repr__(self) -> str:
        return (f"Task({self.spec.name}: train={len(self.train)}, val={len(self.val)}, "
                f"test={len(self.test)}, L={self.spec.seq_len})")


SPLITS = ("train", "val", "test")

IDENTITY_SAMPLE = 16  # items per split a data identity hashes, evenly spread


def data_identity(task: Task) -> dict:
    """What a resumed run checks its data by: the size of the splits it trains and selects on
    (train, val) and a hash of IDENTITY_SAMPLE of each one's items, evenly spread (inputs and
    labels), so another fraction, another n_train or other examples of the same size are told
    apart without reading a whole split. The test split is not part of it: a resumed run scores
    the test split afresh, so fixing a test example changes no training."""
    import hashlib

    import torch

    out: dict = {}
    for name in ("train", "val"):
        data = getattr(task, name)
        n = len(data)
        h = hashlib.sha256()
        for i in sorted({(k * n) // IDENTITY_SAMPLE for k in range(IDENTITY_SAMPLE)} if n else ()):
            item = data[i]
            for key in sorted(item):
                v = item[key]
                v = v if isinstance(v, torch.Tensor) else torch.as_tensor(v)
                h.update(key.encode() + v.detach().cpu().contiguous().numpy().tobytes())
        out[name] = {"n": n, "sample": h.hexdigest()[:16]}
    return out


def split_task(spec: TaskSpec, splits: Mapping[str, Dataset], why_empty: Mapping[str, str],
               fix: str) -> Task:
    """The Task a reader built from files, refused if a split has no examples.

    Every reader of a data root ends here, so an empty split is found when the task is loaded,
    not when training first evaluates it (after an epoch, or after all of training for test).

    splits    : {"train", "val", "test"} -> Dataset.
    why_empty : split -> what holds no examples, naming the file(s) the split is read from, e.g.
                "data/.../basic_val.tsv holds no examples" (:func:`no_examples_in`), or for a
                split cut from others, :func:`too_few_to_hold_out`.
    fix       : what to run for good files, e.g. "rerun `spt data prepare listops --root data`".
    Raises DataFormatError naming the task, the split, the file(s) and the fix.
    """
    for split in SPLITS:
        if len(splits[split]) == 0:
            raise DataFormatError(f"task {spec.name!r}: the {split} split is empty (0 examples): "
                                  f"{why_empty[split]}. Check the download, or {fix}.")
    return Task(spec, *(splits[s] for s in SPLITS))


def no_examples_in(*paths) -> str:
    """Why a split read from the files `paths` is empty: they hold no examples."""
    names = ", ".join(str(p) for p in paths)
    verb = "holds" if len(paths) == 1 else "hold"
    return f"{names} {verb} no examples (no data rows or lines)"


def too_few_to_hold_out(fraction: float, n: int, what: str) -> str:
    """Why a split cut as ``int(fraction * n)`` of `n` examples came out empty; `what` names them
    and their files, e.g. "the rows of data/imdb/plain_text/train-*.parquet"."""
    need = max(1, math.ceil(1 / fraction) - 1)
    while int(fraction * need) < 1:
        need += 1
    return (f"it is a fixed {fraction:.0%} cut of {n} examples ({what}), which rounds down to "
            f"none (at least {need} are needed)")
