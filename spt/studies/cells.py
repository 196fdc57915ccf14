"""Study cells: the unit of work of a study, one result file each, skipped when already done.

A study (one notebook of the paper) is a list of :class:`Cell` s. A cell is one training run (or a
short chain: pretrain -> finetune) at one point of the study's grid, e.g. ``task="listops",
model="transformer", init="spt", seed=0``. :func:`run_cells` runs the cells that have no result yet,
writes each result to ``<out_dir>/<study>/<key>.nc`` (atomically, via :mod:`spt.results`) and
returns all of them combined into one Dataset over the grid's dims.

Rerunning is safe and cheap: a cell whose file exists *with the same configuration* is read, not
rerun; a file written with a different configuration is an error naming the file and the fields
that differ (results are never overwritten or silently mixed). Unfinished training runs resume from
their last checkpoint under ``<out_dir>/<study>/runs/<key>/``.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import xarray as xr

from ..compat import LATER_TRAIN_FIELDS
from ..config import EXECUTION_FIELDS
from ..results import combine_results, read_result, run_config, write_result
from .claims import release, try_claim


@dataclass(frozen=True)
class Cell:
    """One point of a study grid.

    coords : {dim: value} of this cell, e.g. {"task": "listops", "init": "spt", "seed": 0}; every
             cell of a study has the same dims. Values are str, int or float.
    run    : run(run_dir: Path) -> xr.Dataset of this cell's metrics *without* the coords dims
             (they are added here). Must be picklable (a module-level function or a
             functools.partial of one) so cells can run in worker processes.
    config : JSON-able description of everything that determines the result; stored in the file
             and compared on rerun.
    """

    coords: dict
    run: Callable
    config: dict

    @property
    def key(self) -> str:
        """File-name-safe name of the cell: ``task=listops__init=spt__seed=0``."""
        return cell_key(self.coords)


def cell_key(coords: dict) -> str:
    """File-name-safe name of the cell with these coords (in the study's dim order)."""
    parts = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in coords.items()]
    return re.sub(r"[^A-Za-z0-9=._+-]", "-", "__".join(parts))


def run_folder(out_dir, study: str, coords: dict) -> Path:
    """Where the cell with these coords keeps its runs (``pretrain/``, ``finetune/``, ``scratch/``
    with their best.pt): ``<out_dir>/<study>/runs/<key>``."""
    return Path(out_dir) / study / "runs" / cell_key(coords)


class ResultConfigMismatch(FileExistsError, ValueError):
    """A result file of this cell exists but was made with another configuration."""




def _identity(config):
    """`config` without the EXECUTION_FIELDS of any dict in it, nor the fields of
    LATER_TRAIN_FIELDS at the value that files written before them ran with."""
    if isinstance(config, dict):
        return {k: _identity(v) for k, v in config.items() if k not in EXECUTION_FIELDS
                and not (k in LATER_TRAIN_FIELDS and v == LATER_TRAIN_FIELDS[k])}
    if isinstance(config, list):
        return [_identity(v) for v in config]
    return config


def _canonical(config: dict) -> dict:
    """The JSON form of a cell's configuration that decides whether a result file is its own."""
    return _identity(json.loads(json.dumps(config, sort_keys=True, default=str)))


def _diff(a, b, prefix="") -> list[str]:
    """Paths of the fields where two JSON-like dicts differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff(a.get(k), b.get(k), f"{prefix}{k}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


def cell_file(out_dir, study: str, cell: Cell) -> Path:
    return Path(out_dir) / study / f"{cell.key}.nc"


def existing_result(path: Path, cell: Cell):
    """The stored Dataset if `path` holds this cell's result; None if there is no file; an error if
    the file was written with another configuration."""
    if not path.exists():
        return None
    ds = read_result(path)
    saved, want = _canonical(run_config(ds).get("cell", {})), _canonical(cell.config)
    if saved != want:
        fields = ", ".join(_diff(saved, want)[:8])
        raise ResultConfigMismatch(
            f"{path} holds a result made with a different configuration (differs in: {fields}). "
            f"Results are never overwritten: choose another output folder, or delete that file "
            f"to recompute it.")
    return ds


def _with_coords(ds: xr.Dataset, coords: dict) -> xr.Dataset:
    return ds.expand_dims({k: [v] for k, v in coords.items()})


def _run_one(cell: Cell, path: Path, run_dir: Path, threads: int | None) -> tuple[Path, float]:
    """Run one claimed cell and write its result; returns (result file, seconds)."""
    t0 = time.perf_counter()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        ds = cell.run(run_dir)
        ds = _with_coords(ds, cell.coords)
        write_result(ds, path, config={"cell": cell.config, "coords": cell.coords})
    finally:
        release(path)
    return path, time.perf_counter() - t0


def _headline(ds: xr.Dataset) -> str:
    """The cell's main number for a progress line."""
    for name in ("test_accuracy", "test_r2", "pretrain_val_loss"):
        if name in ds and ds[name].size:
            return f"{name} {float(ds[name].values.ravel()[0]):.4f}"
    return ""


WAIT_POLL = 5.0  # seconds between looks at cells another run is computing
WATCH_POLL = 1.0  # seconds between a worker's looks at whether its run is still there


def _watch_parent(parent_pid: int, stop) -> None:
    """Initializer of every worker process: a daemon thread ends the worker as soon as the run that
    started it is gone (killed, or its notebook kernel shut down: the worker is then re-parented)
    or sets `stop` (the run was interrupted, or a cell failed). Without it a worker computes its
    cell to the end with nobody left to collect it, holding a core. A cell stopped this way
    resumes from its last checkpoint on the next run."""
    def watch():
        while not stop.wait(WATCH_POLL):
            if os.getppid() != parent_pid:
                break
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="spt-watch-parent").start()


def auto_workers(workers: int) -> int:
    """`workers`, or for 0 one worker process per CPU core on a machine without CUDA and one
    on a GPU machine (the cells share the GPU in one process)."""
    if workers < 0:
        raise ValueError(f"workers must be >= 0 (0: one per CPU core without a GPU), got {workers}")
    if workers:
        return workers
    return 1 if torch.cuda.is_available() else max(1, os.cpu_count() or 1)


def _not_in_a_spawned_import(study: str) -> None:
    """Worker processes start by importing the script that started the run (multiprocessing's
    "spawn"); a script that calls run_cells at its top level would start the run again inside
    every worker, which then waits forever for the cells its parent has claimed."""
    main = sys.modules.get("__mp_main__")  # the script, as a worker imports it
    # the flag multiprocessing itself reads to refuse starting processes during that import
    importing = getattr(multiprocessing.current_process(), "_inheriting", False)
    if importing and main is not None:
        raise RuntimeError(
            f"study {study}: run_cells was called while a worker process imported "
            f"{getattr(main, '__file__', 'the main script')}: put the code that runs the study "
            f"under `if __name__ == \"__main__\":` (workers > 1 start by importing that script)")


def run_cells(study: str, cells: Sequence[Cell], out_dir, *, workers: int = 1,
              log: Callable[[str], None] = print) -> xr.Dataset:
    """Run the cells without a result file and combine all results into one Dataset.

    Returns a Dataset over the cells' dims (outer join: a dim value missing for some cells gives
    NaN there). ``workers`` > 1 runs cells in that many spawned processes, each with an equal
    share of the torch threads; results do not depend on it. Another run computing into the same
    folder holds claims on its cells (:mod:`spt.studies.claims`): this run takes the others and
    then waits for those results. One line per finished cell: its main metric and time.
    study : the study's name (its folder under out_dir), or its Study.
    """
    study = str(study)
    _not_in_a_spawned_import(study)
    workers = auto_workers(workers)
    if not cells:
        raise ValueError(f"study {study}: no cells to run (check the preset's tasks / seeds)")
    dims = list(cells[0].coords)
    keys = [c.key for c in cells]
    for c in cells:
        if list(c.coords) != dims:
            raise ValueError(f"study {study}: cell {c.key} has dims {list(c.coords)}, others {dims}")
    if len(set(keys)) != len(keys):
        raise ValueError(f"study {study}: two cells have the same coordinates")
    out_dir = Path(out_dir)
    done: dict = {}

    def unfinished(cs):
        left = []
        for c in cs:
            ds = existing_result(cell_file(out_dir, study, c), c)
            if ds is None:
                left.append(c)
            else:
                done[c.key] = ds
        return left

    pending = unfinished(cells)
    n_todo = len(pending)
    log(f"{study}: {len(cells)} cells, {len(done)} already done, {n_todo} to run "
        f"(results in {out_dir / study})")
    run_root = out_dir / study / "runs"
    finished, waiting_said = 0, False
    while pending:
        mine = []
        for c in pending:
            path = cell_file(out_dir, study, c)
            if try_claim(path):
                if path.exists():  # finished by another run just before its claim was released
                    release(path)
                else:
                    mine.append(c)
        for c, secs in _run_claimed(mine, out_dir, study, run_root, workers):
            finished += 1
            ds = read_result(cell_file(out_dir, study, c))
            done[c.key] = ds
            log(f"  done {finished}/{n_todo}: {c.key}: "
                f"{_headline(ds)} ({secs:.0f} s)")
        pending = unfinished([c for c in pending if c.key not in done])
        if pending and not mine:
            if not waiting_said:
                log(f"  waiting for {len(pending)} cell(s) another run is computing "
                    f"(.claim files in {out_dir / study})")
                waiting_said = True
            time.sleep(WAIT_POLL)
    return combine([done[c.key] for c in cells], dims)


def _run_claimed(cells: Sequence[Cell], out_dir: Path, study: str, run_root: Path, workers: int):
    """Yield (cell, seconds) as the claimed cells finish (in worker processes if workers > 1)."""
    if workers > 1 and len(cells) > 1:
        threads = max(1, torch.get_num_threads() // workers)
        ctx = multiprocessing.get_context("spawn")
        stop = ctx.Event()
        with ProcessPoolExecutor(max_workers=min(workers, len(cells)), mp_context=ctx,
                                 initializer=_watch_parent, initargs=(os.getpid(), stop)) as pool:
            futures = {pool.submit(_run_one, c, cell_file(out_dir, study, c), run_root / c.key,
                                   threads): c for c in cells}
            try:
                for f in as_completed(futures):
                    yield futures[f], f.result()[1]
            except BaseException:  # interrupted, or a cell failed: stop the others now, not
                stop.set()         # when they finish (their checkpoints let them resume)
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            finally:
                for c in cells:  # a cell that failed or never started gives its claim back
                    if not cell_file(out_dir, study, c).exists():
                        release(cell_file(out_dir, study, c))
    else:
        for i, c in enumerate(cells):
            try:
                yield c, _run_one(c, cell_file(out_dir, study, c), run_root / c.key, None)[1]
            except BaseException:
                for rest in cells[i + 1:]:
                    release(cell_file(out_dir, study, rest))
                raise


def combine(parts: Sequence[xr.Dataset], dims: Optional[Sequence[str]] = None) -> xr.Dataset:
    """Combine per-cell Datasets along the grid dims (see :func:`spt.results.combine_results`)."""
    return combine_results(parts, dims)


def load_study(out_dir, study: str) -> xr.Dataset:
    """Every result file of `study` under `out_dir`, combined (what a finished notebook wrote)."""
    files = sorted((Path(out_dir) / study).glob("*.nc"))
    if not files:
        raise FileNotFoundError(f"no results of study {study} under {Path(out_dir) / study}; run "
                                f"`spt study run {study} --out {out_dir}` first")
    return combine([read_result(f) for f in files])


def scalar_dataset(values: dict, **arrays) -> xr.Dataset:
    """A Dataset of float scalars (plus extra DataArrays, e.g. curves over 'epoch')."""
    ds = xr.Dataset({k: ((), np.float64(np.nan if v is None else v)) for k, v in values.items()})
    for k, v in arrays.items():
        ds[k] = v
    return ds
