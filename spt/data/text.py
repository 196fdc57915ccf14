"""Byte-level text tasks: LRA Text (IMDb sentiment) and LRA Retrieval (AAN citation pairs).

Tokenisation as LRA (its byte encoder): a text is UTF-8 encoded and byte ``b`` becomes id
``N_SPECIAL + b``; ``vocab_size = 4 + 256 = 260`` and the special ids (pad, mask, unk, eos) are the
fixed ones of :mod:`spt.data.task`, shared by pretraining and finetuning.

Text (``load_text``): ``ROOT/imdb/plain_text/{train,test}-*.parquet`` (the hub's
``stanfordnlp/imdb``; columns ``text``, ``label`` in {0, 1}); reviews truncated to ``seq_len=4096``
bytes. The release has no validation split: a fixed-seed 10% of train is held out as ``val``
(22,500 / 2,500 / 25,000). The ``unsupervised`` parquet files are not read. An empty review (a
sequence of length 0) is an error naming the file and the record.

Retrieval (``load_retrieval``): ``ROOT/lra_release/tsv_data/new_aan_pairs.{train,eval,test}.tsv``,
no header, tab-separated ``label id1 id2 text1 text2`` (no quoting; label 0/1, possibly written
``1.0``; texts read as raw bytes); official splits, ``eval`` is ``val``. A pair with one empty
document is read (that document is a sequence of length 0) with a warning naming the line; a pair
whose two documents are empty is an error. A **pair task** (``TaskSpec.pair``), as in LRA and
the S4 code: an item is the two documents, each truncated to
``doc_len=4000`` bytes (LRA's length), ``{"inputs": (L1,), "inputs2": (L2,), "label": ()}`` with
L1, L2 <= doc_len, and ``spec.seq_len = doc_len`` is the length one encoder sees. Classifiers are
dual encoders (:class:`spt.models.model.DualEncoderModel`); self-pretraining reads single documents
(:func:`spt.data.pairs.documents_task`).
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional

import numpy as np

from .cache import cached_arrays
from .datasets import RaggedTokenDataset
from .errors import DataFormatError, DataMissingError
from .fractions import holdout_splits
from .pairs import PairDataset
from .source_files import iter_parquet
from .task import (
    N_SPECIAL,
    SPLITS,
    Task,
    TaskSpec,
    no_examples_in,
    split_task,
    too_few_to_hold_out,
)

VOCAB_SIZE = N_SPECIAL + 256
TEXT_SEQ_LEN = 4096
DOC_LEN = 4000
VAL_FRACTION, VAL_SEED = 0.1, 1234
IMDB_DIR = Path("imdb")
AAN_DIR = Path("lra_release") / "tsv_data"
AAN_FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv",
             "test": "new_aan_pairs.test.tsv"}
FORMAT_VERSION = 2        # of the IMDb cache, built from non-empty reviews only
AAN_FORMAT_VERSION = 3    # of the AAN cache: arrays doc1, doc2 (ragged) and labels; extra lists
                          # the pairs with an empty document


def encode_bytes(text, max_len: int) -> np.ndarray:
    """(min(n_bytes, max_len),) uint16 ids: byte b -> N_SPECIAL + b. text: str (UTF-8) or bytes."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    raw = np.frombuffer(data[:max_len], dtype=np.uint8)
    return raw.astype(np.uint16) + N_SPECIAL


def decode_bytes(ids) -> str:
    """Inverse of :func:`encode_bytes` (special ids dropped; a cut multi-byte char is replaced)."""
    ids = np.asarray(ids)
    return bytes((ids[ids >= N_SPECIAL] - N_SPECIAL).astype(np.uint8)).decode("utf-8", "replace")


def _parquet_files(folder: Path, split: str, root) -> list[Path]:
    files = sorted(folder.glob(f"{split}-*.parquet"))
    if not files:
        raise DataMissingError(f"no {split}-*.parquet in {folder}. Run `spt data prepare text "
                               f"--root {root}`.")
    return files


def imdb_splits(n_train: int, n_test: int) -> list[np.ndarray]:
    """Rows of train / val / test, the official train file's rows first: val = a fixed-seed
    VAL_FRACTION of the official train (IMDb has no validation split), test = the test file."""
    return holdout_splits(n_train, n_test, VAL_FRACTION, VAL_SEED)


def load_text(root, seq_len: int = TEXT_SEQ_LEN, folder: Optional[Path] = None) -> Task:
    """LRA Text: IMDb reviews as byte sequences (L <= seq_len), binary sentiment."""
    data_dir = Path(folder) if folder is not None else Path(root) / IMDB_DIR
    pq_dir = data_dir / "plain_text"
    if not pq_dir.is_dir():
        raise DataMissingError(f"IMDb folder {pq_dir} not found. Run `spt data prepare text "
                               f"--root {root}`.")
    files = {s: _parquet_files(pq_dir, s, root) for s in ("train", "test")}
    hint = f"Delete it and run `spt data prepare text --root {root}`."

    def build(w):
        tokens, labels, counts = w.ragged("tokens", np.uint16), [], {}
        for split, paths in files.items():
            n0 = len(labels)
            for path in paths:
                for rec, row in iter_parquet(path, ("text", "label"), hint):
                    if not isinstance(row["text"], str) or row["label"] not in (0, 1):
                        raise DataFormatError(f"{path}: record {rec}: expected a text and a label"
                                              f" in {{0, 1}}, got label {row['label']!r}")
                    if not row["text"]:
                        raise DataFormatError(f"{path}: record {rec}: the review is empty (0 "
                                              f"bytes, a sequence of length 0). {hint}")
                    tokens.append(encode_bytes(row["text"], seq_len))
                    labels.append(row["label"])
            counts[split] = len(labels) - n0
        w.put("labels", np.asarray(labels, np.int64))
        return {"counts": counts}

    arrays, extra = cached_arrays(data_dir, f"imdb-L{seq_len}", FORMAT_VERSION,
                                  [p for ps in files.values() for p in ps], build)
    n_train = extra["counts"]["train"]
    parts = imdb_splits(n_train, extra["counts"]["test"])
    ds = [RaggedTokenDataset(arrays["tokens"], arrays["tokens.offsets"], arrays["labels"], idx)
          for idx in parts]
    spec = TaskSpec(name="text", seq_len=seq_len, num_classes=2, vocab_size=VOCAB_SIZE,
                    mask_ratio=0.15, description="LRA Text: IMDb movie reviews as UTF-8 byte "
                    f"sequences (<= {seq_len}), binary sentiment; val = fixed 10% of train")
    why = {"train": no_examples_in(*files["train"]), "test": no_examples_in(*files["test"]),
           "val": too_few_to_hold_out(VAL_FRACTION, n_train, f"the rows of {pq_dir}/train-*.parquet")}
    return split_task(spec, dict(zip(SPLITS, ds)), why,
                      f"rerun `spt data prepare text --root {root or 'ROOT'}`")


def _read_aan(path: Path):
    """Yield (line number, label, text1, text2) per line of an AAN TSV (texts as raw bytes, as LRA
    reads them).

    Raises DataFormatError naming path:line for a row without 5 fields, a label not 0/1, or two
    empty documents (a pair of length 0).
    """
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, start=1):
            line = line.rstrip(b"\r\n")
            if not line:
                continue
            fields = line.split(b"\t")
            if len(fields) != 5:
                raise DataFormatError(f"{path}:{lineno}: expected 5 tab-separated fields "
                                      f"(label, id1, id2, text1, text2), got {len(fields)}")
            try:
                value = float(fields[0])
            except ValueError:
                value = None
            if value not in (0.0, 1.0):
                raise DataFormatError(f"{path}:{lineno}: label {fields[0][:20]!r} is not 0 or 1")
            if not fields[3] and not fields[4]:
                raise DataFormatError(f"{path}:{lineno}: both documents are empty (a pair of "
                                      f"length 0); the release writes each as b'...'")
            yield lineno, int(value), fields[3], fields[4]


def load_retrieval(root, doc_len: int = DOC_LEN, folder: Optional[Path] = None) -> Task:
    """LRA Retrieval: AAN document pairs (does one paper cite the other?), a binary pair task.

    Items {"inputs": (L1,) long, "inputs2": (L2,) long, "label": () long}: the two documents as
    byte ids, each truncated to `doc_len` bytes, for a dual encoder (one shared backbone per
    document, pooled, then an MLP on [u, v, u*v, u-v]). spec.pair is True and spec.seq_len =
    doc_len, the length of one document.
    """
    data_dir = Path(folder) if folder is not None else Path(root) / AAN_DIR
    paths = {s: data_dir / f for s, f in AAN_FILES.items()}
    for p in paths.values():
        if not p.is_file():
            raise DataMissingError(f"AAN file {p} not found. Run `spt data prepare retrieval "
                                   f"--root {root}`.")

    def build(w):
        docs1, docs2 = w.ragged("doc1", np.uint16), w.ragged("doc2", np.uint16)
        labels, counts, empty = [], {}, []
        for split, p in paths.items():
            n0 = len(labels)
            for lineno, label, t1, t2 in _read_aan(p):
                if not (t1 and t2):
                    empty.append(f"{p}:{lineno}")
                docs1.append(encode_bytes(t1, doc_len))
                docs2.append(encode_bytes(t2, doc_len))
                labels.append(label)
            counts[split] = len(labels) - n0
        w.put("labels", np.asarray(labels, np.int64))
        return {"counts": counts, "empty_documents": empty}

    arrays, extra = cached_arrays(data_dir, f"aan-D{doc_len}", AAN_FORMAT_VERSION, paths.values(),
                                  build)
    if extra.get("empty_documents"):
        # one document of a pair may be empty; its encoder then pools no positions
        warnings.warn(f"retrieval: {len(extra['empty_documents'])} pair(s) with an empty document "
                      f"(0 bytes), first at {extra['empty_documents'][0]}")
    starts = np.cumsum([0] + [extra["counts"][s] for s in AAN_FILES])

    def split(i: int) -> PairDataset:
        rows = np.arange(starts[i], starts[i + 1])
        return PairDataset(*(RaggedTokenDataset(arrays[d], arrays[f"{d}.offsets"],
                                                arrays["labels"], rows) for d in ("doc1", "doc2")))

    splits = {s: split(i) for i, s in enumerate(AAN_FILES)}
    spec = TaskSpec(name="retrieval", seq_len=doc_len, num_classes=2, vocab_size=VOCAB_SIZE,
                    mask_ratio=0.15, pair=True,
                    description=f"LRA Retrieval: AAN paper pairs (does one cite the other?), "
                    f"UTF-8 bytes, two documents of <= {doc_len} each, read by a dual encoder")
    return split_task(spec, splits, {s: no_examples_in(p) for s, p in paths.items()},
                      f"rerun `spt data prepare retrieval --root {root or 'ROOT'}`")
