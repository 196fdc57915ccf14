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

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import xarray as xr

from ...atomic import writable_dir
from ...compat import cell_seeds_as_trained
from ...results import combine_results, read_result, run_config
from ...same_run import differences, identity
from .claims import holder, release, try_claim
from .workers import (
    WorkerKilled,  # noqa: F401  (what run_cells raises: public here too)
    _InProcess,
    _not_in_a_spawned_import,
    _Processes,
    auto_workers,
)


@dataclass(frozen=True)
class Cell:
    """One point of a study grid: where it sits, what it reads, what it trains.

    coords : {dim: value} of this cell, e.g. {"task": "listops", "init": "spt", "seed": 0}; every
             cell of a study has the same dims. Values are str, int or float.
    ref    : the task the job reads (a :class:`~spt.studies.machinery.arms.TaskRef`, loaded in the
             worker that runs the cell).
    job    : what the cell trains, at the cell's seed, device and paths
             (:meth:`~spt.studies.machinery.job.Job.at`): the job that trains is the job stored.

    Its configuration (:attr:`config`, everything that decides the result; stored in the file and
    compared on rerun) and its run (:meth:`run`) are the job's. A cell must be picklable (its ref
    and job are frozen dataclasses) so it can run in a worker process.
    """

    coords: dict
    ref: object
    job: object

    def __post_init__(self):
        if "seed" in self.coords and self.coords["seed"] != self.job.seed:
            raise ValueError(f"cell {cell_key(self.coords)}: its job trains at seed "
                             f"{self.job.seed}: give Cell the job at its seed, job.at("
                             f"{self.coords['seed']})")

    @property
    def key(self) -> str:
        """File-name-safe name of the cell: ``task=listops__init=spt__seed=0``."""
        return cell_key(self.coords)

    @property
    def config(self) -> dict:
        """What decides the cell's result: the task, the job (its TrainConfigs at the cell's seed)
        and the seed (:meth:`Job.cell_config`)."""
        return self.job.cell_config(self.ref)

    def run(self, run_dir) -> xr.Dataset:
        """Train the cell (resuming what run_dir holds): its metrics *without* the coords dims
        (:func:`run_cells` adds them)."""
        return self.job.run(self.ref, run_dir)


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




def _canonical(config: dict) -> dict:
    """The form of a cell's configuration that decides whether a result file is its own: the
    same-run rule of :func:`spt.same_run.identity`, which resuming a training run also uses."""
    return identity(config)


def cell_file(out_dir, study: str, cell: Cell) -> Path:
    return Path(out_dir) / study / f"{cell.key}.nc"


class MisnamedResult(ValueError):
    """A result file whose name is not the cell its contents say (renamed or copied by hand)."""


def _named_as_written(path: Path, ds: xr.Dataset) -> xr.Dataset:
    """`ds`, read from `path`, when the file's name is the key of the cell it holds; a result
    renamed or copied over another cell's file would otherwise stand in for that cell."""
    coords = run_config(ds).get("coords")
    if not isinstance(coords, dict) or not all(isinstance(v, (str, int, float))
                                               for v in coords.values()):
        return ds  # not one study cell's result: its name is all there is
    # the stored config's keys are sorted; the cell's dims keep the study's order
    key = cell_key({d: coords[d] for d in sorted(coords, key=list(ds.dims).index)}
                   if set(coords) <= set(ds.dims) else coords)
    if Path(path).stem != key:
        raise MisnamedResult(
            f"{path} holds the result of cell {key}, not of the cell its name says: it was renamed "
            f"or copied by hand. Rename it to {key}.nc (if that cell has no file) or delete it; "
            f"a rerun computes the missing cell")
    return ds


def existing_result(path: Path, cell: Cell):
    """The stored Dataset if `path` holds this cell's result; None if there is no file; an error if
    the file was written with another configuration or holds another cell."""
    if not path.exists():
        return None
    ds = _named_as_written(path, read_result(path))
    diffs = differences(cell_seeds_as_trained(run_config(ds).get("cell", {})), cell.config)
    if diffs:
        fields = ", ".join(path for path, _, _ in diffs[:8])
        runs = path.parent / "runs" / cell.key
        again = (f"delete that file and the cell's run folder {runs} (its checkpoints were "
                 f"trained with the old configuration)" if runs.exists() else "delete that file")
        err = ResultConfigMismatch(
            f"{path} holds a result made with a different configuration (differs in: {fields}). "
            f"Results are never overwritten: choose another output folder, or, to recompute the "
            f"cell with the new configuration, {again}.")
        err.path, err.fields = path, fields
        raise err
    return ds


def _headline(ds: xr.Dataset) -> str:
    """The cell's main number for a progress line."""
    for name in ("test_accuracy", "test_r2", "pretrain_val_loss"):
        if name in ds and ds[name].size:
            return f"{name} {float(ds[name].values.ravel()[0]):.4f}"
    return ""


WAIT_POLL = 5.0  # seconds between looks at cells another run is computing


def run_cells(study: str, cells: Sequence[Cell], out_dir, *, workers: int = 1,
              log: Callable[[str], None] = print) -> xr.Dataset:
    """Run the cells without a result file and combine all results into one Dataset.

    Returns a Dataset over the cells' dims (outer join: a dim value missing for some cells gives
    NaN there). ``workers`` > 1 runs up to that many cells at once, each in its own spawned
    process with an equal share of the torch threads. Results are bit-identical between runs with
    the same number of threads per cell; a different ``workers`` changes that number, and with it
    the order of floating-point sums (differences around 1e-7).

    The run claims one cell at a time, when it starts it (:mod:`spt.studies.machinery.claims`), so another
    run into the same folder takes the cells this one has not started, and then waits for the
    cells the other holds, naming their holders. One line per finished cell: its main metric and
    time. A worker process that dies (the out-of-memory killer) ends the run with
    :class:`WorkerKilled` naming its cell; a failing cell ends it with that cell's error. Either way
    the other running cells stop, every claim of this run is released, and rerunning the same
    command resumes each unfinished cell from its last checkpoint.
    study : the study's name (its folder under out_dir), or its Study.
    """
    study = str(study)
    _not_in_a_spawned_import(study)
    workers = auto_workers(workers, log)
    dims = _grid_dims(study, cells)
    out_dir = Path(out_dir)
    done: dict = {}  # cell key -> its result
    pending = _unfinished(cells, out_dir, study, done)
    if pending:  # a read-only or full folder fails here, before any work (reading needs neither)
        writable_dir(out_dir / study)
    log(f"{study}: {len(cells)} cells, {len(done)} already done, {len(pending)} to run "
        f"(results in {out_dir / study})")
    slots = _Processes(study, workers) if workers > 1 and len(pending) > 1 else _InProcess(study)
    try:
        _run_pending(study, pending, out_dir, slots, done, log)
    except KeyboardInterrupt:
        log(f"{study}: interrupted with {len(done)} of {len(cells)} cells done (kept in "
            f"{out_dir / study}); rerun the same command to resume the others from their last "
            f"checkpoints")
        raise
    finally:
        slots.stop()
    return combine([done[c.key] for c in cells], dims)


def _grid_dims(study: str, cells: Sequence[Cell]) -> list:
    """The dims every cell has, in order; an error for no cells, other dims or a repeated cell."""
    if not cells:
        raise ValueError(f"study {study}: no cells to run (check the preset's tasks / seeds)")
    dims = list(cells[0].coords)
    for c in cells:
        if list(c.coords) != dims:
            raise ValueError(f"study {study}: cell {c.key} has dims {list(c.coords)}, others {dims}")
    keys = [c.key for c in cells]
    if len(set(keys)) != len(keys):
        raise ValueError(f"study {study}: two cells have the same coordinates")
    return dims


def _unfinished(cells, out_dir: Path, study: str, done: dict) -> list:
    """The cells without a result file; the results of the others go into `done`. Result files
    made with another configuration are named all at once (one error), not one per rerun."""
    left, changed = [], []
    for c in cells:
        try:
            ds = existing_result(cell_file(out_dir, study, c), c)
        except ResultConfigMismatch as e:
            changed.append(e)
            continue
        if ds is None:
            left.append(c)
        else:
            done[c.key] = ds
    if len(changed) == 1:
        raise changed[0]
    if changed:
        folder = Path(out_dir) / study
        named = "; ".join(f"{e.path.name} (differs in: {e.fields})" for e in changed)
        raise ResultConfigMismatch(
            f"{len(changed)} result files in {folder} were made with a different configuration: "
            f"{named}. Results are never overwritten: choose another output folder, or, to "
            f"recompute these cells with the new configuration, delete those files and their run "
            f"folders under {folder / 'runs'} (their checkpoints were trained with the old one).")
    return left


def _run_pending(study: str, pending: list, out_dir: Path, slots, done: dict, log) -> None:
    """Claim and run the pending cells as slots free up, until every one has a result (here or
    from another run into the same folder); one line per cell finished here."""
    n_todo, n_cells, finished, waiting_for = len(pending), len(pending) + len(done), 0, None
    while pending or slots.running:
        _start_claimed(study, pending, out_dir, slots)
        if pending and not slots.running:  # another run holds every cell left
            held = [c.key for c in pending]
            if held != waiting_for:
                log(_waiting_line(study, pending, out_dir))
                waiting_for = held
            time.sleep(WAIT_POLL)
        for c, secs in slots.collect(timeout=WAIT_POLL):
            finished += 1
            ds = read_result(cell_file(out_dir, study, c))
            done[c.key] = ds
            log(f"  done {finished}/{n_todo}: {c.key}: {_headline(ds)} ({secs:.0f} s)")
        pending[:] = _unfinished([c for c in pending if c.key not in done], out_dir, study, done)
    if finished < n_todo:
        log(f"  the other {n_todo - finished} of the {n_todo} cells were computed by another "
            f"run into {out_dir / study}: all {n_cells} cells are done")


def _start_claimed(study: str, pending: list, out_dir: Path, slots) -> None:
    """Start the pending cells this run can claim, while a slot is free (removed from
    `pending`); a cell another run holds or has just finished is left to it."""
    for c in list(pending):
        if slots.full():
            break
        path = cell_file(out_dir, study, c)
        if not try_claim(path):
            continue
        if path.exists():  # finished by another run just before its claim was released
            release(path)
            continue
        pending.remove(c)
        slots.start(c, path, out_dir / study / "runs" / c.key)


def _waiting_line(study: str, pending: list, out_dir: Path) -> str:
    who = "\n".join(f"    {holder(cell_file(out_dir, study, c))}" for c in pending[:3])
    return (f"  waiting for {len(pending)} cell(s) another run is computing:\n{who}"
            + (f"\n    ... and {len(pending) - 3} more" if len(pending) > 3 else ""))


def combine(parts: Sequence[xr.Dataset], dims: Optional[Sequence[str]] = None) -> xr.Dataset:
    """Combine per-cell Datasets along the grid dims (see :func:`spt.results.combine_results`)."""
    return combine_results(parts, dims)


def load_study(out_dir, study: str) -> xr.Dataset:
    """Every result file of `study` under `out_dir`, combined (what a finished notebook wrote)."""
    files = sorted((Path(out_dir) / study).glob("*.nc"))
    if not files:
        raise FileNotFoundError(f"no results of study {study} under {Path(out_dir) / study}; run "
                                f"`spt study run {study} --out {out_dir}` first")
    return combine([_named_as_written(f, read_result(f)) for f in files])


def scalar_dataset(values: dict, **arrays) -> xr.Dataset:
    """A Dataset of float scalars (plus extra DataArrays, e.g. curves over 'epoch')."""
    ds = xr.Dataset({k: ((), np.float64(np.nan if v is None else v)) for k, v in values.items()})
    for k, v in arrays.items():
        ds[k] = v
    return ds
