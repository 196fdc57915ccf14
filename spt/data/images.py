"""CIFAR-10 as pixel sequences: LRA Image (grayscale) and sCIFAR (RGB).

On disk: ``ROOT/cifar10/plain_text/{train,test}-*.parquet`` (the hub's ``uoft-cs/cifar10``;
columns ``img`` = {bytes: PNG, path} and ``label`` 0-9). Each 32x32 image is decoded once into the
cache as uint8 RGB (N, 1024, 3) and grayscale (N, 1024, 1) (PIL's ITU-R 601-2 luma, as S4), rows
flattened row by row: the model sees a 1-D sequence of L = 1024 pixels.

Items: inputs FloatTensor (1024, C) standardised with the per-channel mean / std of the 50,000
official training images, C = 1 (``image``) or 3 (``scifar``); label () long, 10 classes.
Splits: the official test set; a fixed-seed 10% of the official train held out as ``val``
(45,000 / 5,000 / 10,000).

``load_image(root, tokens=True)``: the grayscale intensities as tokens instead, inputs LongTensor
(1024,) of ids ``N_SPECIAL + v`` (v in 0..255, vocabulary ``N_SPECIAL + 256``), the convention of
the Pathfinder reader's ``tokens`` option (:func:`spt.data.datasets.pixel_splits`). LRA's Image
task feeds pixels as tokens, and so does the authors' Pythia configuration
(``pyth-lra-cifar.yaml``, ``tokenize: true``), which study 05 reproduces.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Optional

import numpy as np

from .cache import cached_arrays
from .datasets import PIXEL_VOCAB, pixel_splits
from .errors import DataFormatError, DataMissingError
from .fractions import holdout_splits
from .source_files import iter_parquet
from .task import SPLITS, Task, TaskSpec, no_examples_in, split_task, too_few_to_hold_out

CIFAR_DIR = Path("cifar10")
SIDE = 32
VAL_FRACTION, VAL_SEED = 0.1, 1234
FORMAT_VERSION = 1


def decode_png(data: bytes, where: str, side: int, mode: str) -> np.ndarray:
    """(side, side) or (side, side, 3) uint8 from PNG bytes; DataFormatError names `where`."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            arr = np.asarray(im.convert(mode))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise DataFormatError(f"{where}: cannot decode the image ({e})") from None
    if arr.shape[:2] != (side, side):
        raise DataFormatError(f"{where}: image is {arr.shape[1]}x{arr.shape[0]}, "
                              f"expected {side}x{side}")
    return arr


def _cifar_arrays(root, folder: Optional[Path]):
    data_dir = Path(folder) if folder is not None else Path(root) / CIFAR_DIR
    pq_dir = data_dir / "plain_text"
    files = {s: sorted(pq_dir.glob(f"{s}-*.parquet")) for s in ("train", "test")}
    for s, fs in files.items():
        if not fs:
            raise DataMissingError(f"no {s}-*.parquet in {pq_dir}. Run `spt data prepare image "
                                   f"--root {root}`.")
    hint = f"Delete it and run `spt data prepare image --root {root}`."

    def build(w):
        rows = []  # (path, record, png bytes, label): CIFAR is small, collect then decode
        counts = {}
        for split, paths in files.items():
            n0 = len(rows)
            for path in paths:
                for rec, row in iter_parquet(path, ("img", "label"), hint):
                    img, label = row["img"], row["label"]
                    data = img.get("bytes") if isinstance(img, dict) else None
                    if not data or label not in range(10):
                        raise DataFormatError(f"{path}: record {rec}: expected img.bytes (PNG) "
                                              f"and a label 0-9, got label {label!r}")
                    rows.append((path, rec, data, label))
            counts[split] = len(rows) - n0
        n = len(rows)
        rgb = w.array("rgb", (n, SIDE * SIDE, 3), np.uint8)
        gray = w.array("gray", (n, SIDE * SIDE, 1), np.uint8)
        for i, (path, rec, data, _) in enumerate(rows):
            arr = decode_png(data, f"{path}: record {rec}", SIDE, "RGB")
            rgb[i] = arr.reshape(-1, 3)
            gray[i, :, 0] = np.asarray(_to_gray(arr)).reshape(-1)
        w.put("labels", np.asarray([r[3] for r in rows], np.int64))
        n_train = counts["train"]
        stats = {}
        for name, arr in (("rgb", rgb), ("gray", gray)):
            stats[name] = channel_stats(arr[:n_train])
        return {"counts": counts, "stats": stats}

    arrays, extra = cached_arrays(data_dir, "cifar10", FORMAT_VERSION,
                                  [p for fs in files.values() for p in fs], build)
    return arrays, extra, files


def channel_stats(x: np.ndarray, chunk: int = 4096) -> dict:
    """Per-channel mean / std (in [0, 1] units) of uint8 x (N, L, C), in chunks of rows."""
    c = x.shape[-1]
    s1, s2, n = np.zeros(c), np.zeros(c), 0
    for i in range(0, x.shape[0], chunk):
        part = np.asarray(x[i:i + chunk], dtype=np.float64).reshape(-1, c) / 255.0
        s1 += part.sum(0)
        s2 += (part ** 2).sum(0)
        n += part.shape[0]
    mean = s1 / max(n, 1)
    std = np.sqrt(np.maximum(s2 / max(n, 1) - mean ** 2, 0.0))
    return {"mean": mean.tolist(), "std": std.tolist()}


def _to_gray(rgb: np.ndarray) -> np.ndarray:
    from PIL import Image

    return Image.fromarray(rgb, "RGB").convert("L")


def cifar_splits(n_train: int, n_test: int) -> list[np.ndarray]:
    """Rows of train / val / test, the official train file's rows first: val = a fixed-seed
    VAL_FRACTION of the official train, test = the official test file."""
    return holdout_splits(n_train, n_test, VAL_FRACTION, VAL_SEED)


def load_cifar(root, rgb: bool, folder: Optional[Path] = None, tokens: bool = False) -> Task:
    """CIFAR-10 pixel sequences (1024, 3) if `rgb` (sCIFAR) else (1024, 1) grayscale (Image).

    tokens : grayscale only; inputs (1024,) long, ids N_SPECIAL + intensity (vocab PIXEL_VOCAB).
    """
    if rgb and tokens:
        raise ValueError("tokens=True is for grayscale CIFAR-10 (task 'image'); sCIFAR's RGB "
                         "pixels are standardised values")
    arrays, extra, files = _cifar_arrays(root, folder)
    key = "rgb" if rgb else "gray"
    n_train = extra["counts"]["train"]
    parts = cifar_splits(n_train, extra["counts"]["test"])
    mean = np.asarray(extra["stats"][key]["mean"]) * 255.0
    std = np.maximum(np.asarray(extra["stats"][key]["std"]) * 255.0, 1e-3)
    ds = pixel_splits(arrays[key], arrays["labels"], parts, tokens, mean, std)
    if rgb:
        spec = TaskSpec(name="scifar", seq_len=SIDE * SIDE, num_classes=10, d_input=3,
                        mask_ratio=0.5, description="sCIFAR: CIFAR-10 as 1024 RGB pixels, "
                        "standardised per channel; val = fixed 10% of train")
    elif tokens:
        spec = TaskSpec(name="image", seq_len=SIDE * SIDE, num_classes=10, vocab_size=PIXEL_VOCAB,
                        mask_ratio=0.5, description="LRA Image: CIFAR-10 as 1024 grayscale "
                        "pixel tokens (an id per intensity); val = fixed 10% of train")
    else:
        spec = TaskSpec(name="image", seq_len=SIDE * SIDE, num_classes=10, d_input=1,
                        mask_ratio=0.5, description="LRA Image: CIFAR-10 as 1024 grayscale "
                        "pixels, standardised; val = fixed 10% of train")
    train_files = ", ".join(str(p) for p in files["train"])
    why = {"train": no_examples_in(*files["train"]), "test": no_examples_in(*files["test"]),
           "val": too_few_to_hold_out(VAL_FRACTION, n_train, f"the rows of {train_files}")}
    return split_task(spec, dict(zip(SPLITS, ds)), why,
                      f"rerun `spt data prepare {spec.name} --root {root or 'ROOT'}`")


def load_image(root, tokens: bool = False, folder: Optional[Path] = None) -> Task:
    """LRA Image: grayscale CIFAR-10, L = 1024; d_input = 1, or pixel tokens if `tokens`."""
    return load_cifar(root, rgb=False, folder=folder, tokens=tokens)


def load_scifar(root, folder: Optional[Path] = None) -> Task:
    """sCIFAR: RGB CIFAR-10, L = 1024, d_input = 3."""
    return load_cifar(root, rgb=True, folder=folder)
