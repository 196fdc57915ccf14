"""Every task by name, one registry (:data:`TASKS`): where it comes from (its loader, its folder
under the data root) and what a study needs to know of it without loading it (its classes, its
label-preserving augmentation, the techniques against data inefficiency that apply to it).
``load_task(name, root)``, ``describe_task`` (for `spt data info`), and from a loaded task's spec,
``source_of(spec)``, ``augmentation_for(spec)`` and ``augmented(dataset, spec, seed, epoch)``.

    task = load_task("listops", "data")              # Task(spec, train, val, test)
    task = load_task("pathx", "data", fraction=0.1)  # nested 10% of the training split
    TASKS["listops"].classes                          # 10

Data root layout (what ``spt data prepare`` writes): ``lra_release/`` (the unpacked LRA release:
listops, retrieval, pathfinder / pathx / pathx256), ``imdb/`` (text), ``cifar10/`` (image, scifar),
``speech_commands/`` (speech), ``bidmc/`` (bidmc).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Optional

from torch.utils.data import Dataset

from .augment import CIFAR, DIGITS, PATHFINDER, AugmentedItems, listops_items
from .bidmc import load_bidmc
from .errors import DataMissingError
from .fractions import FRACTION_SEED, nested_subset
from .generated import GENERATED_MARK
from .images import load_image, load_scifar
from .listops import load_listops
from .pathfinder import EASIER, load_pathfinder, pathfinder_dir
from .speech import WORDS, load_speech
from .task import Task, TaskSpec
from .text import load_retrieval, load_text


@dataclass(frozen=True)
class TaskSource:
    """A named task: where it comes from and what is known of it without loading it.

    loader  : (root, **options) -> Task for tasks read from a data root; (**options) -> Task for a
              task that needs none (folder None).
    folder  : the task's files under the data root (what `spt data prepare` writes), or None for a
              task shipped with spt (the embedded digits, the generated lagged copy).
    classes : the number of classes at the loader's default options (chance is 1 / classes);
              None for regression (BIDMC).
    augmentation : the task's label-preserving augmentation, (inputs, spec, rng) -> inputs
              (:mod:`spt.data.augment`), or None: it has none.
    techniques : Miralles-Gonzalez et al. 2025's techniques against data inefficiency on this task,
              as their code (github pablomiralles22/long-transformers) applies them:
              (TrainConfig changes, TaskRef options): the augmentation above (``augment``),
              easier Pathfinder images beside the task's own (``extra_train``), the denoising loss
              beside the labels (``aux_denoise``); None where their code has none (the cheap
              prior that trains with them cannot run there).
    pair    : an example is two documents (LRA Retrieval): pretraining reads both documents of a
              batch of pairs (:class:`spt.data.pairs.DocumentsDataset`).
    """

    loader: Callable[..., Task]
    folder: Optional[Path]
    classes: Optional[int]
    augmentation: Optional[Callable] = None
    techniques: Optional[tuple[dict, tuple]] = None
    pair: bool = False


# techniques, as the authors' code applies them: the task's augmentation (ListOps operand shuffles;
# CIFAR AutoAugment, flips and affine moves; Pathfinder flips and turns) with, on Pathfinder and
# PathX, easier images beside the task's own; on Text and Retrieval (both documents) the denoising
# loss beside the labels, weight 1
AUGMENT = ({"augment": True}, ())
DENOISE = ({"aux_denoise": 1.0}, ())
AUGMENT_EASIER = ({"augment": True}, (("extra_train", EASIER),))


def _digits(**options) -> Task:
    from .digits import digits_task
    return digits_task(**options)


def _lagged(**options) -> Task:
    from .lagged import lagged_task
    return lagged_task(**options)


# Every named task: the paper's ten, read from a data root, the embedded digits and the generated
# lagged copy (a dependency length known by construction). The laptop digits take both techniques
# (the augmentation and the denoising loss), so that a laptop preset runs each one.
TASKS: dict[str, TaskSource] = {
    "listops": TaskSource(load_listops, Path("lra_release/listops-1000"), 10, listops_items,
                          AUGMENT),
    "text": TaskSource(load_text, Path("imdb"), 2, techniques=DENOISE),
    "retrieval": TaskSource(load_retrieval, Path("lra_release/tsv_data"), 2, techniques=DENOISE,
                            pair=True),
    "image": TaskSource(load_image, Path("cifar10"), 10, CIFAR, AUGMENT),
    "pathfinder": TaskSource(partial(load_pathfinder, resolution=32), pathfinder_dir("", 32), 2,
                             PATHFINDER, AUGMENT_EASIER),
    "pathx": TaskSource(partial(load_pathfinder, resolution=128), pathfinder_dir("", 128), 2,
                        PATHFINDER, AUGMENT_EASIER),
    "pathx256": TaskSource(partial(load_pathfinder, resolution=256), pathfinder_dir("", 256), 2,
                           PATHFINDER),
    "scifar": TaskSource(load_scifar, Path("cifar10"), 10, CIFAR),
    "speech": TaskSource(load_speech, Path("speech_commands"), len(WORDS)),
    "bidmc": TaskSource(load_bidmc, Path("bidmc"), None),
    "digits": TaskSource(_digits, None, 10, DIGITS, ({"augment": True, "aux_denoise": 1.0}, ())),
    "lagged": TaskSource(_lagged, None, 3),
}
# The tasks read from a data root (`spt data prepare | info | fixtures`), and their folders.
TASK_DIRS = {name: s.folder for name, s in TASKS.items() if s.folder is not None}
TASK_NAMES = tuple(TASK_DIRS)


def load_task(name: str, root=None, fraction: float = 1.0, *,
              fraction_seed: int = FRACTION_SEED, **options) -> Task:
    """The task `name` read from the data root `root` (unused by a task shipped with spt: digits).

    fraction : keep this nested fraction of the training split (val / test untouched).
    options  : passed to the task's loader (e.g. ``target="RR"`` for bidmc, ``seq_len`` for
               listops / text, ``doc_len`` for retrieval, ``difficulty`` for the pathfinders).
    Raises DataMissingError (what to run) or DataFormatError (which file, which line / record; a
    split with no examples names the split and its files).
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
    source = TASKS[name]
    if source.folder is None:
        task = source.loader(**options)
    else:
        if root is None:
            raise ValueError(f"task {name!r} needs a data root: pass data_root (see `spt data "
                             f"prepare {name} --root DIR`)")
        root = Path(root)
        if not root.is_dir():
            raise DataMissingError(f"data root {root} does not exist. Run `spt data prepare {name} "
                                   f"--root {root}` to download the task there.")
        task = source.loader(root, **options)
    if fraction != 1.0:
        task = Task(task.spec, nested_subset(task.train, fraction, fraction_seed), task.val,
                    task.test)
    return task


def describe_task(name: str, root, **options) -> dict:
    """A JSON-able summary: task, root, splits (name -> count), seq_len, num_classes (None for
    regression), vocab_size or d_input, mask_ratio, description, warnings, generated."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        task = load_task(name, root, **options)
    spec = task.spec
    info = {"task": name, "root": str(root),
            "splits": {"train": len(task.train), "val": len(task.val), "test": len(task.test)},
            "seq_len": spec.seq_len, "num_classes": spec.num_classes}
    info["vocab_size" if spec.is_tokens else "d_input"] = (spec.vocab_size if spec.is_tokens
                                                          else spec.d_input)
    info.update(mask_ratio=spec.mask_ratio, description=spec.description,
                warnings=sorted({str(w.message) for w in caught}))
    mark = Path(root) / TASK_DIRS[name] / GENERATED_MARK
    info["generated"] = mark.is_file()
    return info


def source_of(spec: TaskSpec) -> Optional[TaskSource]:
    """The registry entry of a loaded task: the one whose name starts its spec's name (the
    longest: "pathx256" before "pathx"; "digits8_on16" is digits, "retrieval-documents"
    retrieval), or None for a task spt does not name (your own)."""
    hits = [name for name in TASKS if spec.name.startswith(name)]
    return TASKS[max(hits, key=len)] if hits else None


def has_augmentation(spec: TaskSpec) -> bool:
    """Does the task have a label-preserving augmentation?"""
    source = source_of(spec)
    return source is not None and source.augmentation is not None


def augmentation_for(spec: TaskSpec) -> Callable:
    """The task's augmentation (inputs, spec, rng -> inputs); a ValueError naming the tasks that
    have one when it has none."""
    source = source_of(spec)
    if source is None or source.augmentation is None:
        have = [name for name, s in TASKS.items() if s.augmentation is not None]
        raise ValueError(f"task {spec.name!r} has no data augmentation; tasks with one: "
                         f"{', '.join(have)} (spt.data.registry.TASKS). Train it without "
                         f"augmentation")
    return source.augmentation


def augmented(dataset, spec: TaskSpec, seed: int, epoch: int) -> Dataset:
    """`dataset` as seen in pass `epoch`: item i augmented, deterministically in (seed, epoch, i).
    Raises ValueError naming the task when it has no augmentation (:func:`has_augmentation`)."""
    return AugmentedItems(dataset, spec, augmentation_for(spec), seed, epoch)
