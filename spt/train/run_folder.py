"""A run's folder: where fit() writes ``best.pt`` and ``last.pt``, held by one process at a time.

    with open_run_folder(out, resume, env):   # out exists, and out/run.lock names this process
        ... train ...

While a run trains, ``out/run.lock`` (:mod:`spt.locks`) says which process does: a second process
given the same folder stops with :class:`RunInUse` instead of training beside it.
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .. import locks
from . import distributed as D


class RunInUse(RuntimeError):
    """Another live process is training in this run folder (its run.lock names it)."""


@contextmanager
def open_run_folder(out: Path, resume: bool, env: D.DistEnv) -> Iterator[Path]:
    """`out`, created and locked by rank 0 for the time of the block (the lock released on the
    way out, even by an exception). Refused before anything is written: a folder that holds a run
    (best.pt or last.pt) unless `resume` (FileExistsError), and a folder another live process
    trains in (:class:`RunInUse`). Every rank of `env` enters it (a barrier)."""
    last_path, best_path = out / "last.pt", out / "best.pt"
    if not resume and (last_path.exists() or best_path.exists()):
        raise FileExistsError(f"{out} already holds a run ({last_path.name}); pass resume=True to "
                              f"continue it, or choose another out_dir (nothing was overwritten)")
    D.barrier(env)  # every rank has looked before rank 0 writes anything
    out.mkdir(parents=True, exist_ok=True)
    lock = out / "run.lock"
    if env.is_main and not locks.acquire(lock):
        raise RunInUse(f"run folder {out} is being trained by another process "
                       f"({locks.describe(lock)}): wait for it to end, then rerun the same "
                       f"command to resume or reuse it")
    try:
        yield out
    finally:
        if env.is_main:
            locks.release(lock)
