"""Every task by name, one registry (:data:`TASKS`: its loader and its folder under the data
root): ``load_task(name, root)`` and ``describe_task`` (for `spt data info`).

    task = load_task("listops", "data")              # Task(spec, train, val, test)
    task = load_task("pathx", "data", fraction=0.1)  # nested 10% of the training split

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

from .bidmc import load_bidmc
from .errors import DataMissingError
from .fractions import FRACTION_SEED, nested_subset
from .generated import GENERATED_MARK
from .images import load_image, load_scifar
from .listops import load_listops
from .pathfinder import load_pathfinder, pathfinder_dir
from .speech import load_speech
from .task import Task
from .text import load_retrieval, load_text


@dataclass(frozen=True)
class TaskSource:
    """Where a named task comes from.

    loader : (root, **options) -> Task for tasks read from a data root; (**options) -> Task for a
             task that needs none (folder None).
    folder : the task's files under the data root (what `spt data prepare` writes), or None for a
             task shipped with spt (the embedded digits).
    """

    loader: Callable[..., Task]
    folder: Optional[Path]


def _digits(**options) -> Task:
    from .digits import digits_task
    return digits_task(**options)


def _lagged(**options) -> Task:
    from .lagged import lagged_task
    return lagged_task(**options)


# Every named task: the paper's ten, read from a data root, the embedded digits and the generated
# lagged copy (a dependency length known by construction).
TASKS: dict[str, TaskSource] = {
    "listops": TaskSource(load_listops, Path("lra_release/listops-1000")),
    "text": TaskSource(load_text, Path("imdb")),
    "retrieval": TaskSource(load_retrieval, Path("lra_release/tsv_data")),
    "image": TaskSource(load_image, Path("cifar10")),
    "pathfinder": TaskSource(partial(load_pathfinder, resolution=32), pathfinder_dir("", 32)),
    "pathx": TaskSource(partial(load_pathfinder, resolution=128), pathfinder_dir("", 128)),
    "pathx256": TaskSource(partial(load_pathfinder, resolution=256), pathfinder_dir("", 256)),
    "scifar": TaskSource(load_scifar, Path("cifar10")),
    "speech": TaskSource(load_speech, Path("speech_commands")),
    "bidmc": TaskSource(load_bidmc, Path("bidmc")),
    "digits": TaskSource(_digits, None),
    "lagged": TaskSource(_lagged, None),
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
