"""LRA Pathfinder / PathX / PathX-256: reader of the release's PNG + metadata layout.

On disk (``ROOT/lra_release/pathfinder{R}/{difficulty}/``, difficulty ``curv_contour_length_14``)::

    imgs/<i>/sample_<j>.png     R x R grayscale
    metadata/<i>.npy            plain text despite the name: one line per image, space separated,
                                [0] image folder ("imgs/<i>"), [1] file name, [3] label (0 / 1)

Task names: ``pathfinder`` (R = 32), ``pathx`` (128), ``pathx256`` (256). Items: inputs FloatTensor
(R*R, 1) = pixel / 127.5 - 1 in [-1, 1] (as S4), rows flattened; label () long (1 = the two
markers lie on one contour). Splits: the release has none; all images (metadata files in numeric
order, lines in order) are cut 80/10/10 by a fixed-seed shuffle. The one known-empty release file
(``pathfinder32/curv_baseline/imgs/0/sample_172.png``) is skipped with a warning; any other
missing, empty or corrupt image is an error naming it and its metadata line. The decoded cache
is rebuilt when a metadata file or any listed image changes (size or modification time).

:mod:`spt.data.pathfinder_generator` writes images in the same layout (``spt data generate
pathfinder``).
"""
from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from torch.utils.data import Dataset

from .cache import cached_arrays
from .datasets import PIXEL_VOCAB, pixel_splits
from .errors import DataFormatError, DataMissingError
from .fractions import split_indices
from .task import SPLITS, Task, TaskSpec, split_task, too_few_to_hold_out

RESOLUTIONS = {"pathfinder": 32, "pathx": 128, "pathx256": 256}
DIFFICULTY = "curv_contour_length_14"
KNOWN_EMPTY = {"pathfinder32/curv_baseline/imgs/0/sample_172.png"}
SPLIT, SPLIT_SEED = (0.8, 0.1, 0.1), 42
FORMAT_VERSION = 1


def pathfinder_dir(root, resolution: int, difficulty: str = DIFFICULTY) -> Path:
    return Path(root) / "lra_release" / f"pathfinder{resolution}" / difficulty


def pathfinder_splits(n_images: int) -> list[np.ndarray]:
    """Rows of train / val / test among the images read (metadata order): the release has no
    splits, so a fixed-seed shuffle cuts them 80/10/10 (SPLIT)."""
    return split_indices(n_images, SPLIT, SPLIT_SEED)


def _metadata_lines(data_dir: Path):
    """Yield (metadata file, line number, image folder, file name, label)."""
    meta_dir = data_dir / "metadata"
    files = sorted(meta_dir.glob("*.npy"), key=lambda p: (not p.stem.isdigit(),
                                                          int(p.stem) if p.stem.isdigit() else 0,
                                                          p.stem))
    if not files:
        raise DataFormatError(f"{meta_dir}: no metadata/*.npy files")
    for mf in files:
        for lineno, fields in enumerate(_metadata_rows(mf), start=1):
            if not fields:
                continue
            if len(fields) < 4 or fields[3] not in ("0", "1"):
                raise DataFormatError(f"{mf}:{lineno}: expected 'folder file n label ...' with "
                                      f"label 0/1, got {' '.join(fields)[:80]!r}")
            yield mf, lineno, fields[0], fields[1], int(fields[3])


def _metadata_rows(path: Path) -> list[list[str]]:
    """Rows of fields of a metadata file: plain text (the release), or a real .npy string array."""
    with open(path, "rb") as f:
        binary = f.read(6) == b"\x93NUMPY"
    if binary:
        try:
            arr = np.load(path, allow_pickle=False)
        except ValueError as e:
            raise DataFormatError(f"{path}: unreadable .npy metadata ({e})") from None
        return [[str(v) for v in np.atleast_1d(row)] for row in np.atleast_2d(arr)]
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.split() for line in f]


def _listed_images(data_dir: Path, resolution: int) -> tuple[list, list]:
    """The images the metadata lists: ([(path str, "<metadata file>:<line>", label)], [skipped]).

    skipped : release names ("pathfinder32/curv_baseline/imgs/0/sample_172.png") of the
              known-empty release files, left out of the list.
    """
    items, skipped = [], []
    release, base = f"pathfinder{resolution}/{data_dir.name}", str(data_dir)
    for mf, lineno, sub, fname, label in _metadata_lines(data_dir):
        path = f"{base}/{sub}/{fname}"  # a string: PathX lists 600K images on every load
        if f"{release}/{sub}/{fname}" in KNOWN_EMPTY and os.path.isfile(path) \
                and os.path.getsize(path) == 0:
            skipped.append(f"{release}/{sub}/{fname}")
            continue
        items.append((path, f"{mf.name}:{lineno}", label))
    return items, skipped


def _decode(path, where: str, side: int) -> np.ndarray:
    from .images import decode_png

    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise DataFormatError(f"{path} ({where}): cannot read the image ({e.strerror})") from None
    return decode_png(data, f"{path} ({where})", side, "L")


# The release's easier difficulties (contour lengths 6 and 9): Miralles-González et al. 2025's
# code trains on them with curv_contour_length_14 ("easier samples ... a stronger signal early").
EASIER = ("curv_baseline", "curv_contour_length_9")
CONTOUR_LENGTHS = {"curv_baseline": 6, "curv_contour_length_9": 9, "curv_contour_length_14": 14}


def _generate_hint(root, resolution: int, difficulty: str) -> str:
    """The offline command that writes `difficulty` (a generated stand-in for the release's)."""
    length = CONTOUR_LENGTHS.get(difficulty, 14)
    named = "" if difficulty == f"curv_contour_length_{length}" else f" --difficulty {difficulty}"
    return (f"spt data generate pathfinder --resolution {resolution} --contour-length {length}"
            f"{named} --root {root}")


def _decoded(data_dir: Path, resolution: int, root, name: str, difficulty: str) -> dict:
    """The cached arrays of one folder: pixels (N, R*R, 1) uint8, labels (N,) int64."""
    if not (data_dir / "metadata").is_dir():
        raise DataMissingError(f"Pathfinder folder {data_dir}/metadata not found. Run `spt data "
                               f"prepare {name} --root {root}` (or `"
                               f"{_generate_hint(root, resolution, difficulty)}` offline).")
    sources = sorted((data_dir / "metadata").glob("*.npy"))
    items, skipped = _listed_images(data_dir, resolution)
    release = f"pathfinder{resolution}/{data_dir.name}"

    def build(w):
        x = w.array("pixels", (len(items), resolution * resolution, 1), np.uint8)

        def work(i):
            path, where, _ = items[i]
            x[i, :, 0] = _decode(path, where, resolution).reshape(-1)

        from tqdm.auto import tqdm
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            for _ in tqdm(pool.map(work, range(len(items))), total=len(items),
                          desc=f"decoding {release}", mininterval=2.0):
                pass
        w.put("labels", np.asarray([it[2] for it in items], np.int64))
        return {"skipped": skipped}

    # The cache covers every listed image too (size and mtime_ns, see stat_digest), so a replaced
    # or truncated PNG rebuilds it. Measured on a local disk, warm: the fixture's 20 images take
    # 0.03 ms to stat (+ 0.06 ms to list); 50,000 images 0.16 s (+ 0.07 s), ~5 us an image, so
    # ~3 s for PathX's 600K on every load (more on a cold or network file system). Hashing the
    # PNG bytes instead would read the whole release.
    arrays, extra = cached_arrays(data_dir, f"pathfinder{resolution}", FORMAT_VERSION, sources,
                                  build, many_sources=[path for path, _, _ in items])
    if extra.get("skipped"):
        warnings.warn(f"pathfinder: skipped the known-empty release image(s) {extra['skipped']}")
    return arrays


class ConcatSplits(Dataset):
    """Datasets one after another, keeping ``labels`` and ``select`` (nested fractions) when each
    part has them. Items: those of the parts, in order."""

    def __init__(self, parts: Sequence):
        self.parts = list(parts)
        self.starts = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, i: int) -> dict:
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} items")
        k = int(np.searchsorted(self.starts, i, side="right")) - 1
        return self.parts[k][i - int(self.starts[k])]

    @property
    def labels(self) -> np.ndarray:
        return np.concatenate([np.asarray(p.labels) for p in self.parts])

    def select(self, positions) -> "ConcatSplits":
        positions = np.asarray(positions, np.int64)
        parts = []
        for k, part in enumerate(self.parts):
            lo, hi = self.starts[k], self.starts[k + 1]
            mine = positions[(positions >= lo) & (positions < hi)] - lo
            if len(mine):
                parts.append(part.select(mine))
        return ConcatSplits(parts)


def load_pathfinder(root, resolution: int = 32, difficulty: str = DIFFICULTY,
                    folder: Optional[Path] = None, tokens: bool = False,
                    extra_train: Sequence[str] = ()) -> Task:
    """Pathfinder-style task at `resolution` (32, 64, 128, 256); 80/10/10 fixed-seed splits.

    tokens      : pixels as tokens (ids 4 + intensity, vocabulary 260, an embedding per
                  intensity) instead of values normalised to [-1, 1]. The paper's models (the
                  authors' code) read the normalised values through a linear encoder and pretrain
                  with CE over the 256 intensities of the masked pixels (``spec.levels``); tokens
                  serve Pythia (study 05).
    extra_train : other difficulties (folders beside `difficulty`, e.g. :data:`EASIER`) whose
                  images are all added to the training split, after the folder's own; val and
                  test stay `difficulty`'s, so scores stay comparable. Miralles-González et al.
                  2025's code trains on curv_baseline + 9 + 14 together ("easier samples");
                  departure: their code also validates on the union.
    """
    data_dir = Path(folder) if folder is not None else pathfinder_dir(root, resolution, difficulty)
    name = {v: k for k, v in RESOLUTIONS.items()}.get(resolution, f"pathfinder{resolution}")
    if isinstance(extra_train, str) or data_dir.name in extra_train:
        raise ValueError(f"extra_train must be a sequence of other difficulties than "
                         f"{data_dir.name!r} (e.g. {EASIER}), got {extra_train!r}")
    arrays = _decoded(data_dir, resolution, root, name, data_dir.name)
    n = len(arrays["labels"])
    parts = pathfinder_splits(n)
    ds = pixel_splits(arrays["pixels"], arrays["labels"], parts, tokens, 127.5, 127.5)
    extra_train = tuple(extra_train)
    if extra_train:
        more = [_decoded(data_dir.parent / d, resolution, root, name, d) for d in extra_train]
        ds[0] = ConcatSplits([ds[0]] + [
            pixel_splits(a["pixels"], a["labels"], [np.arange(len(a["labels"]))], tokens, 127.5,
                         127.5)[0] for a in more])
    # tokens: an id per intensity; else v = pixel / 127.5 - 1, and CE pretraining predicts pixels
    kind = dict(vocab_size=PIXEL_VOCAB) if tokens else dict(d_input=1, levels=256)
    easier = f"; train adds {' + '.join(extra_train)}" if extra_train else ""
    spec = TaskSpec(name=name, seq_len=resolution * resolution, num_classes=2, **kind,
                    mask_ratio=0.5, description=f"LRA Pathfinder {resolution}x{resolution} "
                    f"({data_dir.name}): are the two markers on one dashed contour? "
                    f"80/10/10 fixed-seed split{easier}")
    listed = f"the images listed in {data_dir / 'metadata'}/*.npy"
    why = {"train": f"{data_dir / 'metadata'}/*.npy list no images",
           "val": too_few_to_hold_out(SPLIT[1], n, listed),
           "test": too_few_to_hold_out(SPLIT[2], n, listed)}
    return split_task(spec, dict(zip(SPLITS, ds)), why,
                      f"rerun `spt data prepare {name} --root {root or 'ROOT'}` (or `spt data "
                      f"generate pathfinder --resolution {resolution} --root {root or 'ROOT'} "
                      f"--force` offline)")
