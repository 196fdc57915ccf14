"""Tiny data sets for all ten tasks, written in the official on-disk formats at the paper's lengths.

    write_fixtures("fixtures")                        # every task, under fixtures/
    write_fixtures("fixtures", ["listops", "pathx"])  # some tasks
    spt data fixtures fixtures --tasks listops,pathx  # the same from the command line

Each task gets a handful of examples per split in exactly the layout ``spt data prepare`` leaves
under a data root (``TASK_DIRS``), so every reader, the CLI and the study dry runs work offline.
The files follow the formats' own conventions, not what our readers happen to accept:

- ListOps (``lra_release/listops-1000/basic_{train,val,test}.tsv``): header ``Source<TAB>Target``,
  left-nested parentheses, values from the release's semantics; per split one expression of
  1,900-1,999 symbols (the release's bound is < 2,000) and a few of 500-2,000.
- Retrieval (``lra_release/tsv_data/new_aan_pairs.{train,eval,test}.tsv``): no header, tab
  separated ``label id1 id2 text1 text2``, ACL-Anthology-style ids, each document a Python bytes
  literal ``b'...'`` (third-party loaders ``ast.literal_eval`` the release's fields); most
  documents are >= 4,000 bytes, a few short.
- Text (``imdb/plain_text/{train,test}-00000-of-00001.parquet``, as ``stanfordnlp/imdb``): columns
  ``text`` string, ``label`` int64 (ClassLabel neg / pos in the hub's schema metadata); every
  training review and half of the test reviews are longer than 4,096 bytes, with ``<br />`` tags
  and multi-byte UTF-8 as real reviews have.
- Image / sCIFAR (``cifar10/plain_text/{train,test}-00000-of-00001.parquet``, as
  ``uoft-cs/cifar10``): ``img`` struct {bytes: 32x32 RGB PNG, path: null}, ``label`` int64; one
  training image per class.
- Pathfinder / PathX / PathX-256 (``lra_release/pathfinder{32,128,256}/curv_contour_length_14/``,
  and beside it ``curv_baseline/`` and ``curv_contour_length_9/`` with other draws):
  20 grayscale PNGs in ``imgs/<i>/sample_<j>.png`` with plain-text ``metadata/<i>.npy`` lines
  ``imgs/<i> sample_<j>.png <j> <label> <generator knobs>``; images from spt's Pathfinder
  generator, labels placed so both occur in each split of the reader's 80/10/10 cut.
- Speech (``speech_commands/``, the unpacked v0.02 tarball): a folder per word for all 35 words,
  16-bit mono 16 kHz PCM clips ``<hash>_nohash_<k>.wav`` of at most one second (several exactly
  16,000 samples), ``validation_list.txt`` / ``testing_list.txt``, ``_background_noise_/``,
  ``LICENSE``, ``README.md``.
- BIDMC (``bidmc/BIDMC32{HR,RR,SpO2}_{TRAIN,TEST}.ts``, Monash TSER archive): ``@problemName`` ...
  ``@targetlabel true`` header, 2 channels (PPG, ECG) x 4,000 steps, target last; the three
  problems share their inputs, as in the archive.

Every task folder gets ``spt_generated.json`` (:data:`GENERATED_MARK`), so ``spt data info``
reports it as generated data. Output is deterministic given ``seed``; about 3 MB in all. The
file formats themselves (PNG, parquet with the hub's schema, WAV, .ts) and the filler text are
written by :mod:`spt.data.fixture_formats`.
"""
from __future__ import annotations

import json
import random
import zlib
from pathlib import Path
from typing import Callable, Iterable, Optional

import numpy as np

from ..atomic import atomic_dir
from .fixture_formats import hub_schema, png_bytes, prose, ts_text, write_parquet, write_wav
from .generated import GENERATED_MARK
from .registry import TASK_DIRS

GENERATOR = "spt.data.fixtures"

# Each task's folder under the data root, as the readers look for it (image and scifar share one).
FOLDERS = TASK_DIRS

# Speech Commands v0.02: the 20 core words, the 10 auxiliary words of v0.01, the 5 added in v0.02.
SPEECH_WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go",
                "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "bed", "bird", "cat", "dog", "happy", "house", "marvin", "sheila", "tree", "wow",
                "backward", "forward", "follow", "learn", "visual")
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                 "truck")
PATHFINDER_IMAGES = 20          # per resolution: 16 / 2 / 2 after the 80/10/10 cut
BIDMC_STEPS, BIDMC_RATE = 4000, 125   # 32 s of PPG + ECG at 125 Hz
BIDMC_TARGETS = {"HR": (60.0, 120.0), "RR": (8.0, 30.0), "SpO2": (88.0, 100.0)}



# ----------------------------------------------------------------------------------- helpers

def _rng(seed: int, name: str) -> np.random.Generator:
    """A generator per (seed, task), so one task's fixture does not depend on the others."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


# ----------------------------------------------------------------------------------- writers
# Each writer fills `out` (an empty folder that becomes the task folder) and returns the counts
# it wrote, e.g. {"train": 4, "val": 4, "test": 4}.

def _write_listops(out: Path, seed: int) -> dict:
    from .listops import generate_listops

    rng, seen, counts = random.Random(f"{seed}-listops"), set(), {}
    for split in ("train", "val", "test"):
        rows = generate_listops(1, rng, min_length=1900, max_length=2000, exclude=seen)
        rows += generate_listops(3, rng, exclude=seen)  # the release's 500 < symbols < 2000
        with open(out / f"basic_{split}.tsv", "w", encoding="utf-8", newline="") as f:
            f.write("Source\tTarget\n")
            f.writelines(f"{source}\t{value}\n" for source, value in rows)
        counts[split] = len(rows)
    return counts


def _write_retrieval(out: Path, seed: int) -> dict:
    rng = _rng(seed, "retrieval")
    # (split file, [(label, len1, len2)]): documents >= 4,000 bytes mostly, a few short ones
    plan = {"train": [(1, 4000, 5200), (0, 6100, 4000), (1, 900, 4400), (0, 4800, 350)],
            "eval": [(1, 4300, 4100), (0, 4000, 1200)],
            "test": [(0, 4500, 4000), (1, 4100, 4700)]}
    counts, n = {}, 0
    for split, rows in plan.items():
        lines = []
        for label, len1, len2 in rows:
            docs = []
            for k, length in enumerate((len1, len2)):
                # the release stores each document as a Python bytes literal b'...' (b"..." when
                # it holds a ' and no "; newlines, tabs and non-ASCII bytes escaped), at least as
                # long as the text's bytes; half the documents are plain ASCII
                text = prose(rng, length, extras=(n + k) % 2 == 1, paragraph="\n")
                docs.append(repr(text.encode("utf-8")))
            ids = (f"P{10 + n % 5:02d}-{1001 + n}", f"W{11 + n % 3:02d}-{2001 + n}")
            lines.append("\t".join([str(label), *ids, *docs]) + "\n")
            n += 1
        with open(out / f"new_aan_pairs.{split}.tsv", "w", encoding="ascii", newline="") as f:
            f.writelines(lines)
        counts["val" if split == "eval" else split] = len(rows)
    return counts


def _write_text(out: Path, seed: int) -> dict:
    import pyarrow as pa

    rng = _rng(seed, "text")
    schema = hub_schema([pa.field("text", pa.string()), pa.field("label", pa.int64())],
                        {"text": {"dtype": "string", "_type": "Value"},
                         "label": {"names": ["neg", "pos"], "_type": "ClassLabel"}})
    # every training review is longer than 4,096 bytes (the held-out val draws from them); the
    # test split mixes long and short ones
    plan = {"train": [int(rng.integers(4200, 7000)) for _ in range(10)],
            "test": [6500, 300, 4400, 1500]}
    counts = {}
    for split, lengths in plan.items():
        texts = [prose(rng, n, paragraph="<br /><br />") for n in lengths]
        if split == "train":  # a 2-byte character cut in half by the 4,096-byte truncation
            head = texts[0].encode("utf-8")[:4095].decode("utf-8", "ignore")
            pad = " " * (4095 - len(head.encode("utf-8")))
            texts[0] = head + pad + "é" + texts[0][len(head):]
        labels = [i % 2 for i in range(len(texts))]
        write_parquet(out / "plain_text" / f"{split}-00000-of-00001.parquet",
                      pa.table({"text": texts, "label": labels}, schema=schema))
        counts[split] = len(texts)
    return counts


def _cifar_image(rng: np.random.Generator, label: int) -> np.ndarray:
    """(32, 32, 3) uint8: a colour gradient, a rectangle and a little noise."""
    y, x = np.mgrid[0:32, 0:32]
    base = rng.integers(0, 256, 3)
    img = (base + np.stack([4 * x, 4 * y, 2 * (x + y)], -1)) % 256
    r0, c0 = rng.integers(0, 20, 2)
    img[r0:r0 + 12, c0:c0 + 12] = (25 * label, 255 - 25 * label, 128)
    img = img + rng.integers(-8, 9, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _write_cifar(out: Path, seed: int) -> dict:
    import pyarrow as pa

    rng = _rng(seed, "cifar10")
    img_type = pa.struct([pa.field("bytes", pa.binary()), pa.field("path", pa.string())])
    schema = hub_schema([pa.field("img", img_type), pa.field("label", pa.int64())],
                        {"img": {"_type": "Image"},
                         "label": {"names": list(CIFAR_CLASSES), "_type": "ClassLabel"}})
    plan = {"train": list(range(10)), "test": [int(v) for v in rng.integers(0, 10, 4)]}
    counts = {}
    for split, labels in plan.items():
        imgs = [{"bytes": png_bytes(_cifar_image(rng, y)), "path": None} for y in labels]
        write_parquet(out / "plain_text" / f"{split}-00000-of-00001.parquet",
                      pa.table({"img": imgs, "label": labels}, schema=schema))
        counts[split] = len(labels)
    return counts


def _pathfinder_writer(resolution: int) -> Callable[[Path, int], dict]:
    def write(out: Path, seed: int) -> dict:
        from .pathfinder import pathfinder_splits
        from .pathfinder_generator import PathfinderKnobs, generate_pathfinder

        n, per_folder = PATHFINDER_IMAGES, 10
        rng = _rng(seed, f"pathfinder{resolution}")
        # labels wanted at each position: alternating within each part of the 80/10/10 cut
        want = np.zeros(n, np.int64)
        for part in pathfinder_splits(n):
            want[part] = np.arange(len(part)) % 2
        pools: dict[int, list] = {0: [], 1: []}
        while any(len(pools[c]) < int((want == c).sum()) for c in (0, 1)):
            images, labels = generate_pathfinder(n, resolution, rng)
            for im, y in zip(images, labels):
                pools[int(y)].append(im)
        k = PathfinderKnobs().resolved(resolution)
        knobs = (f"{k.continuity:g} {k.contour_length} {k.distractor_length} "
                 f"{k.paddle_length:.3g} {k.paddle_thickness:.3g} {k.paddle_margin:.3g} "
                 f"{k.n_distractors}")
        from PIL import Image

        lines: dict[int, list] = {}
        for idx, y in enumerate(want):
            folder, j = divmod(idx, per_folder)
            (out / "imgs" / str(folder)).mkdir(parents=True, exist_ok=True)
            Image.fromarray(pools[int(y)].pop(), "L").save(
                out / "imgs" / str(folder) / f"sample_{j}.png")
            lines.setdefault(folder, []).append(
                f"imgs/{folder} sample_{j}.png {j} {y} {knobs}\n")
        (out / "metadata").mkdir()
        for folder, rows in lines.items():
            (out / "metadata" / f"{folder}.npy").write_text("".join(rows))
        return {"images": n}
    return write


def _clip(rng: np.random.Generator, n: int, pitch: float) -> np.ndarray:
    """(n,) int16: a decaying tone with noise, like a short spoken word."""
    t = np.arange(n) / 16000
    env = np.exp(-((t - t[-1] / 2) ** 2) / 0.02)
    x = 6000 * env * np.sin(2 * np.pi * pitch * t) + rng.normal(0, 200, n)
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)


def _write_speech(out: Path, seed: int) -> dict:
    rng = _rng(seed, "speech")
    speakers = [f"{int(v):08x}" for v in rng.integers(0, 2 ** 32, 8)]
    clips = {"train": [], "val": [], "test": []}
    for i, word in enumerate(SPEECH_WORDS):  # one training clip per word; a third are full 1 s
        n = 16000 if i % 3 == 0 else int(rng.integers(6000, 16000))
        clips["train"].append((word, f"{speakers[i % 4]}_nohash_0.wav", n))
    clips["val"] = [("yes", f"{speakers[4]}_nohash_0.wav", 16000),
                    ("marvin", f"{speakers[5]}_nohash_1.wav", 11000)]
    clips["test"] = [("no", f"{speakers[6]}_nohash_0.wav", 16000),
                     ("visual", f"{speakers[7]}_nohash_2.wav", 9000)]
    for rows in clips.values():
        for word, name, n in rows:
            write_wav(out / word / name, _clip(rng, n, 150 + 10 * SPEECH_WORDS.index(word)))
    # the split lists of the release: word/file.wav, one per line, no trailing newline
    (out / "validation_list.txt").write_text("\n".join(f"{w}/{f}" for w, f, _ in clips["val"]))
    (out / "testing_list.txt").write_text("\n".join(f"{w}/{f}" for w, f, _ in clips["test"]))
    noise = np.clip(rng.normal(0, 3000, 8000), -32768, 32767).astype(np.int16)
    write_wav(out / "_background_noise_" / "white_noise.wav", noise)
    (out / "_background_noise_" / "README.md").write_text(
        "Longer clips of background noise (here: a short stand-in), not examples.\n")
    (out / "LICENSE").write_text("Creative Commons BY 4.0 (the data set's licence).\n")
    (out / "README.md").write_text("Speech Commands v0.02 layout: a tiny generated fixture.\n")
    return {k: len(v) for k, v in clips.items()}


def _bidmc_inputs(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 4000, 2) float: PPG-like pulses and ECG-like spikes at 125 Hz."""
    t = np.arange(BIDMC_STEPS) / BIDMC_RATE
    out = np.empty((n, BIDMC_STEPS, 2))
    for i in range(n):
        hz = rng.uniform(1.0, 2.0)
        phase = 2 * np.pi * hz * t + rng.uniform(0, 2 * np.pi)
        out[i, :, 0] = 0.5 + 0.3 * np.sin(phase) + 0.1 * np.sin(2 * phase) \
            + rng.normal(0, 0.01, BIDMC_STEPS)
        out[i, :, 1] = 0.4 + 0.6 * np.exp(-((np.mod(phase, 2 * np.pi) - 1.0) ** 2) / 0.01) \
            + rng.normal(0, 0.02, BIDMC_STEPS)
    return out


def _write_bidmc(out: Path, seed: int) -> dict:
    rng = _rng(seed, "bidmc")
    sizes = {"TRAIN": 7, "TEST": 2}  # 7 training windows leave one for the held-out val
    inputs = {s: _bidmc_inputs(rng, n) for s, n in sizes.items()}
    for target, (lo, hi) in BIDMC_TARGETS.items():
        for split, n in sizes.items():
            y = rng.uniform(lo, hi, n)
            name = f"BIDMC32{target}"
            (out / f"{name}_{split}.ts").write_text(ts_text(name, inputs[split], y))
    return {s.lower(): n for s, n in sizes.items()}


WRITERS: dict[str, Callable[[Path, int], dict]] = {
    "listops": _write_listops,
    "text": _write_text,
    "retrieval": _write_retrieval,
    "image": _write_cifar,
    "pathfinder": _pathfinder_writer(32),
    "pathx": _pathfinder_writer(128),
    "pathx256": _pathfinder_writer(256),
    "scifar": _write_cifar,
    "speech": _write_speech,
    "bidmc": _write_bidmc,
}


# ----------------------------------------------------------------------------------- public API

def _is_fixture(folder: Path) -> bool:
    try:
        return json.loads((folder / GENERATED_MARK).read_text()).get("generator") == GENERATOR
    except (OSError, ValueError, AttributeError):
        return False


def write_fixtures(root, tasks: Optional[Iterable[str]] = None, seed: int = 0) -> dict[str, Path]:
    """Write tiny official-format fixtures for `tasks` (default: all ten) under `root`.

    returns : {task: its folder under root} (image and scifar share ``cifar10/``).
    A task folder that already holds a fixture from this module is replaced; one holding
    anything else (real or ``spt data generate`` data) raises FileExistsError. Each folder is
    written beside its final place and renamed into it, so an interrupted run leaves no
    half-written fixture behind.
    """
    names = list(WRITERS) if tasks is None else list(tasks)
    unknown = [t for t in names if t not in WRITERS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; choose from {', '.join(WRITERS)}")
    root = Path(root)
    out: dict[str, Path] = {}
    for task in dict.fromkeys(names):
        folder = root / FOLDERS[task]
        if folder in out.values():  # image / scifar: cifar10/ already written in this call
            out[task] = folder
            continue
        out[task] = folder
        _replace_fixture(folder, task, seed)
        if task in ("pathfinder", "pathx", "pathx256"):
            _write_easier(folder, task, seed)
    return out


def _replace_fixture(folder: Path, task: str, seed: int) -> None:
    """Write `task`'s fixture at `folder`, replacing one written here before; a folder holding
    anything else raises FileExistsError."""
    if folder.exists() and not _is_fixture(folder):
        raise FileExistsError(f"{folder} exists and holds data not written by `spt data "
                              f"fixtures`; choose another folder or delete it")
    atomic_dir(folder, lambda tmp: _write_task(tmp, task, seed))


def _write_easier(folder: Path, task: str, seed: int) -> None:
    """Beside a Pathfinder fixture, one of each easier difficulty the release also has
    (:data:`spt.data.pathfinder.EASIER`, read by ``load_pathfinder(extra_train=EASIER)``): the
    same generator with other draws (a fixture checks the layout, not the difficulty)."""
    from .pathfinder import EASIER
    for i, difficulty in enumerate(EASIER, start=1):
        _replace_fixture(folder.parent / difficulty, task, seed + 1000 * i)


def _write_task(folder: Path, task: str, seed: int) -> None:
    """The fixture of `task` and its GENERATED_MARK, written into the empty `folder`."""
    counts = WRITERS[task](folder, seed)
    tasks_here = sorted(t for t, f in FOLDERS.items() if f == FOLDERS[task])
    (folder / GENERATED_MARK).write_text(json.dumps(
        {"generator": GENERATOR, "tasks": tasks_here, "seed": seed, "counts": counts,
         "note": "tiny fixture in the official format for offline checks; not real data"},
        indent=1))
