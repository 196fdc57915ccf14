"""Split sizes of the paper's tasks on the real, official data, computed without the data.

    paper_split_sizes("text")                  # {"train": 22500, "val": 2500, "test": 25000}
    paper_split_sizes("pathx", fraction=0.1)   # train = the nested 10% of Path-X's training split
    split_sizes("image", {"train": 50_000, "test": 10_000})

`spt study plan` sizes every run of a study before anything trains, and the official files are
tens of GB that a planning machine need not hold. Each size here is an official file count (the
constants below, each with its source) put through spt's own split rules: the functions the
readers call (:func:`~spt.data.images.cifar_splits`, :func:`~spt.data.text.imdb_splits`,
:func:`~spt.data.bidmc.bidmc_splits`, :func:`~spt.data.pathfinder.pathfinder_splits`) and, for a
training fraction, :func:`~spt.data.fractions.subset_size` as :func:`load_task` applies it. So a
changed rule changes the planned sizes too; ``tests/data/test_sizes.py`` checks :func:`split_sizes`
against what the readers return on fixtures in the official formats.

Counts that could not be confirmed from a readable source are marked NOT CONFIRMED below.
"""
from __future__ import annotations

import inspect

from .bidmc import TARGETS, bidmc_splits
from .fractions import subset_size
from .images import cifar_splits
from .pathfinder import DIFFICULTY, KNOWN_EMPTY, RESOLUTIONS, pathfinder_splits
from .registry import TASKS
from .text import imdb_splits

# LRA ListOps, lra_release/listops-1000/basic_{train,val,test}.tsv, data rows (the header line is
# not an example): the defaults of LRA's generator that wrote the release,
# google-research/long-range-arena lra_benchmarks/data/listops.py (num_train_samples=96000,
# num_valid_samples=2000, num_test_samples=2000). The release files themselves were not counted:
# no public copy was found (docs/data_real_format_check.md).
LISTOPS_COUNTS = {"train": 96_000, "val": 2_000, "test": 2_000}

# IMDb, the hub's stanfordnlp/imdb plain_text train / test parquet files (Maas et al. 2011): 25,000
# reviews each, per the hub's dataset card and TFDS imdb_reviews. The "unsupervised" 50,000 are
# not read.
IMDB_COUNTS = {"train": 25_000, "test": 25_000}

# LRA Retrieval, lra_release/tsv_data/new_aan_pairs.{train,eval,test}.tsv rows. NOT CONFIRMED: an
# inference from a third-party loader that hard-codes 147,085 / 18,089 / 17,436 after pandas took
# each headerless file's first row as a header (docs/data_real_format_check.md); no copy of the
# files was found to count.
AAN_COUNTS = {"train": 147_086, "val": 18_090, "test": 17_437}

# CIFAR-10, the hub's uoft-cs/cifar10 plain_text train / test parquet files (Krizhevsky 2009):
# 50,000 / 10,000 images, per the hub's split table (TFDS community catalog, huggingface:cifar10).
CIFAR10_COUNTS = {"train": 50_000, "test": 10_000}

# LRA Pathfinder / PathX / PathX-256: images listed by metadata/*.npy in each difficulty folder of
# lra_release/pathfinder{32,128,256}/. NOT CONFIRMED: 200,000 per folder is the number commonly
# reported for the release (160,000 / 20,000 / 20,000 after the 80/10/10 cut S4 and spt make);
# LRA's own TFDS builder (lra_benchmarks/data/pathfinder.py) reads every metadata file but states
# no count, and no copy of the release was found to count. The reader skips KNOWN_EMPTY files.
PATHFINDER_IMAGES = {32: 200_000, 128: 200_000, 256: 200_000}
PATHFINDER_DIFFICULTIES = ("curv_baseline", "curv_contour_length_9", "curv_contour_length_14")

# Speech Commands v0.02: 105,829 clips in the 35 word folders (the release's README and the hub's
# google/speech_commands card: "contains 105,829 audio files"); validation_list.txt names 9,981 of
# them and testing_list.txt 11,005 (counted on the real lists, docs/data_real_format_check.md).
# Every other clip is training data: 84,843. Consistent with the hub's v0.02 splits, 84,848 /
# 9,982, which hold the six background-noise files besides (84,848 - 84,843 = 5, 9,982 - 9,981 = 1).
SPEECH_COUNTS = {"clips": 105_829, "val": 9_981, "test": 11_005}

# BIDMC32{HR,RR,SpO2}_{TRAIN,TEST}.ts of the Monash TSER archive (Tan et al. 2020, zenodo records
# 4001456 / 4001463 / 4001464; the three problems share their windows, so one count serves every
# target). NOT CONFIRMED: 5,550 / 2,399 is the archive's table as remembered; neither the table
# nor the files could be read here.
BIDMC_COUNTS = {"train": 5_550, "test": 2_399}


_COUNTS = {"listops": LISTOPS_COUNTS, "text": IMDB_COUNTS, "retrieval": AAN_COUNTS,
           "image": CIFAR10_COUNTS, "scifar": CIFAR10_COUNTS, "speech": SPEECH_COUNTS,
           "bidmc": BIDMC_COUNTS}  # the pathfinders: PATHFINDER_IMAGES by resolution


def _official(c: dict) -> tuple:
    return c["train"], c["val"], c["test"]


def _speech(c: dict) -> tuple:  # the lists name val and test; every other clip is training data
    return c["clips"] - c["val"] - c["test"], c["val"], c["test"]


def _lengths(rule):
    return lambda c: tuple(len(part) for part in rule(c))


# task -> (the file counts it needs, the reader's rule: counts -> (train, val, test) sizes)
_RULES = {
    "listops": (("train", "val", "test"), _official),
    "text": (("train", "test"), _lengths(lambda c: imdb_splits(c["train"], c["test"]))),
    "retrieval": (("train", "val", "test"), _official),
    "image": (("train", "test"), _lengths(lambda c: cifar_splits(c["train"], c["test"]))),
    "scifar": (("train", "test"), _lengths(lambda c: cifar_splits(c["train"], c["test"]))),
    "pathfinder": (("images",), _lengths(lambda c: pathfinder_splits(c["images"]))),
    "pathx": (("images",), _lengths(lambda c: pathfinder_splits(c["images"]))),
    "pathx256": (("images",), _lengths(lambda c: pathfinder_splits(c["images"]))),
    "speech": (("clips", "val", "test"), _speech),
    "bidmc": (("train", "test"), _lengths(lambda c: bidmc_splits(c["train"], c["test"]))),
}
PAPER_TASKS = tuple(_RULES)


def _check_task(task: str) -> None:
    if task not in _RULES:
        raise ValueError(f"unknown task {task!r}; choose from {', '.join(PAPER_TASKS)}")


def split_sizes(task: str, counts: dict, fraction: float = 1.0) -> dict:
    """{"train", "val", "test"} sizes the reader of `task` makes from files holding `counts`.

    counts   : the official files' example counts, keyed as the task needs: listops / retrieval
               {"train", "val", "test"} (rows per file); text / image / scifar / bidmc {"train",
               "test"}; pathfinder / pathx / pathx256 {"images"} (the images the reader keeps);
               speech {"clips", "val", "test"} (all word clips, and the two lists' lengths).
    fraction : the nested training fraction, as ``load_task(..., fraction=...)`` keeps it.
    """
    _check_task(task)
    keys, rule = _RULES[task]
    if set(counts) != set(keys):
        raise ValueError(f"split_sizes({task!r}): counts must have the keys {list(keys)}, "
                         f"got {sorted(counts)}")
    train, val, test = rule(counts)
    if fraction != 1.0:  # load_task keeps nested_subset(train, fraction): that many rows
        train = min(subset_size(train, fraction), train)
    return {"train": int(train), "val": int(val), "test": int(test)}


def skipped_images(resolution: int, difficulty: str) -> int:
    """How many release images of pathfinder{resolution}/{difficulty} the reader skips."""
    return sum(p.startswith(f"pathfinder{resolution}/{difficulty}/") for p in KNOWN_EMPTY)


def official_counts(task: str, **options) -> dict:
    """The official file counts of `task` (keys as :func:`split_sizes` takes them).

    options : the task loader's options (see :data:`spt.data.registry.TASKS`); only bidmc's
              `target` and the pathfinders' `difficulty` are checked, the others do not change
              the counts. An option the loader does not take is an error naming the ones it does.
    """
    _check_task(task)
    takes = [n for n in inspect.signature(TASKS[task].loader).parameters
             if n not in ("root", "folder", "resolution")]
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise ValueError(f"task {task!r} has no option(s) {unknown}; its loader takes "
                         f"{takes or 'none'}")
    if task == "bidmc" and options.get("target", "HR") not in TARGETS:
        raise ValueError(f"bidmc target must be one of {TARGETS}, got {options['target']!r}")
    if task not in RESOLUTIONS:
        return dict(_COUNTS[task])
    resolution = RESOLUTIONS[task]
    difficulty = options.get("difficulty", DIFFICULTY)
    if difficulty not in PATHFINDER_DIFFICULTIES:
        raise ValueError(f"{task} difficulty must be one of {PATHFINDER_DIFFICULTIES} (the "
                         f"release's folders), got {difficulty!r}")
    return {"images": PATHFINDER_IMAGES[resolution] - skipped_images(resolution, difficulty)}


def paper_split_sizes(task: str, fraction: float = 1.0, **options) -> dict:
    """{"train", "val", "test"} sizes `task` has when spt reads the real, official data.

    task     : one of :data:`PAPER_TASKS` (listops, text, retrieval, image, scifar, pathfinder,
               pathx, pathx256, speech, bidmc).
    fraction : the nested training fraction (val / test unchanged), as in :func:`load_task`.
    options  : the loader's options, e.g. ``target="RR"`` for bidmc, ``difficulty=...`` for the
               pathfinders (:func:`official_counts`).
    """
    return split_sizes(task, official_counts(task, **options), fraction)
