"""`spt study check`: a dry run of every cell of a study preset at the real shapes.

A paper preset is hours of GPU time per cell; a crash on its first batch should cost seconds, not
a night. The check takes every cell of a study (one seed: other seeds have the same shapes),
loads its task from the data root, keeps the longest examples of each split (so the steps run at
the task's real length), and runs the cell's own code with two optimiser steps per stage
(:data:`TIMED_STEPS`) at batch size `batch`, or at each stage's own batch (``batch=None``, the
default on CUDA; a stage that runs out of memory is retried with half the batch and twice the
gradient accumulation, the same examples per optimiser step):

    pretraining -> finetuning from the checkpoint those steps wrote -> test evaluation
    scratch     -> test evaluation

Each stage also evaluates validation, as a real run does after every epoch. Per cell it reports
the parameter count, the sequence length, the wall time of each stage and the peak memory
(resident set on the CPU, max allocated on CUDA).

Cost before you spend it: the second optimiser step of each stage (the first pays for allocation
and warm-up) is timed, as is the validation pass per example. At the stage's own batch the timed
step is the real one; at a fixed dry-run batch it is scaled linearly to the stage's batch (which
overestimates a GPU, whose larger batches run more efficiently). Multiplied by the
stage's step cap and validations from the study's plan (:mod:`spt.studies.commands.plan`, the paper's split
sizes unless ``sizes="data"``), they give each stage's estimated wall time on this device, at most
its time budget; a cell's estimate is the sum of its stages, a study's the sum over its cells and
seeds (:data:`spt.studies.commands.check_results.ESTIMATE_ASSUMPTION` says what that assumes;
the tables: :mod:`spt.studies.commands.check_results`).

    results = check("02_transformers_vs_s4", preset="paper", data_root="/data/spt", batch=2)
    spt study check 02_transformers_vs_s4 --preset paper -p data_root /data/spt

`spt data fixtures DIR` writes tiny data sets in the official formats at full length, so the check
runs anywhere (CI runs it on those).
"""
from __future__ import annotations

import dataclasses
import math
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from ...config import TrainConfig, replace
from ..machinery.arms import Arm, TaskRef
from ..registry import study as find_study
from .check_results import CellCheck, estimate

# TrainConfig fields a dry run sets, whatever the preset says.
_DRY_FIELDS = dict(epochs=1, accum_steps=1, patience=None, progress=False, num_workers=0,
                   ckpt_every=None)

# optimiser steps per stage of `spt study check`: the first pays for allocation and warm-up, the
# second is timed for the estimate. Every text that says how many steps the check takes (the
# module docstring, `spt study check --help`, the Makefile) says this number
# (tests/studies/test_study_check.py).
TIMED_STEPS = 2
STEPS_IN_WORDS = {1: "one", 2: "two", 3: "three"}[TIMED_STEPS]
# a stage that runs out of memory at its own batch is retried with the batch halved and the
# gradient accumulation doubled, at most this many times
MAX_HALVINGS = 6


@dataclass(frozen=True)
class DryRun:
    """How a study cell is shrunk to its dry run: `steps` optimiser steps per stage (one epoch) on
    `device`, on the longest examples of each split. Model, objective, lr, schedule, precision and
    every other setting stay the preset's.

    batch : the batch size of every stage's steps (the `batch` x `steps` longest examples per
            split); None: each stage's own batch size and gradient accumulation, on as many
            examples as the largest stage needs (a split with fewer repeats its longest ones).
    split : with batch=None, each stage's batch divided by `split` (rounded down) and its
            accumulation multiplied by it: about the same examples per optimiser step in less
            memory (the retry of a stage that ran out of memory).
    """

    batch: Optional[int] = 2
    device: str = "auto"
    steps: int = 1
    split: int = 1

    def __post_init__(self):
        if self.batch is not None and self.batch < 1:
            raise ValueError(f"the dry run's batch must be >= 1 (or None: each stage's own), "
                             f"got {self.batch}")
        if self.steps < 1:
            raise ValueError(f"the dry run's steps must be >= 1, got {self.steps}")
        if self.split < 1:
            raise ValueError(f"the dry run's split must be >= 1, got {self.split}")

    def ref(self, ref: TaskRef, job=None) -> TaskRef:
        """The task shrunk to the examples the steps read; at the stages' own batch, `job`'s
        stages say how many that is."""
        if self.batch is not None:
            return dataclasses.replace(ref, limit=self.batch * self.steps)
        batches = [v.train.batch_size * v.train.accum_steps for v in job.stages(ref)]
        return dataclasses.replace(ref, limit=max(batches) * self.steps, fill=True)

    def train(self, cfg: TrainConfig) -> TrainConfig:
        if self.batch is None:
            batch = max(1, cfg.batch_size // self.split)
            evals = cfg.eval_batch_size and max(1, cfg.eval_batch_size // self.split)
            changes = dict(_DRY_FIELDS, batch_size=batch, accum_steps=cfg.accum_steps * self.split,
                           eval_batch_size=evals)
        else:
            changes = dict(_DRY_FIELDS, batch_size=self.batch, eval_batch_size=self.batch)
        changes.update(max_steps=self.steps, device=self.device)
        if "max_time" in {f.name for f in dataclasses.fields(cfg)}:
            changes["max_time"] = None
        return replace(cfg, **changes)

    def arm(self, arm: Arm) -> Arm:
        # one lr of a grid is enough to check the shapes
        return dataclasses.replace(
            arm, train=self.train(arm.train), lr_grid=arm.lr_grid[:1],
            pretrain=self.train(arm.pretrain) if arm.pretrain is not None else None)


# ------------------------------------------------------------------------------------ memory
def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:  # Linux: "5" resets the process's peak resident set (VmHWM) to its current size
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak(device: torch.device) -> float:
    """Peak bytes since the last reset: max allocated on CUDA, the resident set's peak on CPU."""
    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    import resource  # no /proc: the process's peak so far (never reset)
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _error_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]


def _value(ds, *names) -> float:
    for n in names:
        if n in ds:
            return float(ds[n].values)
    return math.nan


def _timings(events: list) -> tuple:
    """({stage: seconds of its second step}, {stage: validation seconds per example}) of a dry
    run's observer events (spt.train.engine.observe)."""
    steps: dict = {}
    evals: dict = {}
    for e in events:
        if e["kind"] == "step":
            steps.setdefault(e["stage"], []).append(e["time"])
        elif e["kind"] == "eval" and e["split"] == "val" and e["examples"]:
            evals.setdefault(e["stage"], []).append(e["seconds"] / e["examples"])
    step_s = {k: float(np.median(np.diff(t))) for k, t in steps.items() if len(t) >= 2}
    eval_s = {k: float(np.mean(v)) for k, v in evals.items()}
    return step_s, eval_s


def _out_of_memory(e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


def run_check(study: str, cells: Sequence, device: torch.device,
              log: Callable[[str], None] = print, plans: Optional[dict] = None,
              dry_batch: Optional[int] = 2,
              halved: Optional[Callable[[int], dict]] = None,
              until: Optional[float] = None,
              after: Optional[Callable[[CellCheck], None]] = None) -> list[CellCheck]:
    """Run each (dry) cell in a fresh temporary folder; one CellCheck per cell, failures caught.

    plans     : {(cell name, stage): StagePlan} to estimate each stage's hours from.
    dry_batch : the dry run's batch, or None when each stage ran at its own.
    halved    : halved(split) -> {cell key: Cell}, the same cells with every stage's batch divided
                by `split` and its accumulation multiplied by it: a cell that runs out of memory
                is retried through it with split 2, 4, ... (at most 2 ** MAX_HALVINGS).
    until     : a time.monotonic() deadline: cells not started by then are returned skipped.
    after     : after(result), called as each cell's check ends (``spt tune`` collects there).
    """
    out = []
    for cell in cells:
        if until is not None and time.monotonic() >= until:
            r = CellCheck(study, dict(cell.coords), skipped="not checked: out of time")
            log(r.line())
            out.append(r)
            continue
        r = _check_cell(study, cell, device)
        while halved is not None and not r.ok and r.oom and r.split < 2 ** MAX_HALVINGS:
            split = 2 * r.split
            log(f"{study} {cell.key}: out of memory at batch / {r.split}; retrying at batch / "
                f"{split} with accumulation x {split}")
            r = _check_cell(study, halved(split)[cell.key], device)
            r.split = split
        if plans is not None and r.ok:
            estimate(r, plans, dry_batch)
        log(r.line())
        out.append(r)
        if after is not None:
            after(r)
    return out


def _check_cell(study: str, cell, device: torch.device) -> CellCheck:
    from ...train.engine import observe
    r = CellCheck(study, dict(cell.coords))
    if device.type == "cuda":
        torch.cuda.empty_cache()
    _reset_peak(device)
    t0 = time.perf_counter()
    events: list = []
    try:
        with tempfile.TemporaryDirectory(prefix="spt-check-") as tmp, observe(events.append):
            ds = cell.run(Path(tmp) / "run")
        r.params = _value(ds, "params", "n_parameters")
        r.seq_len = _value(ds, "seq_len")
        for stage, var in (("pretrain", "pretrain_time"), ("supervised", "time")):
            v = _value(ds, var)
            if v == v:
                r.stage_times[stage] = v
        r.paths = dict(ds.attrs.get("provenance", {}).get("paths", {}))
    except Exception as e:  # the check reports every failing cell and goes on
        r.error = _error_line(e)
        r.traceback = traceback.format_exc()
        r.oom = _out_of_memory(e)
        del e
    r.seconds = time.perf_counter() - t0
    r.peak_bytes = _peak(device)
    r.step_seconds, r.eval_seconds = _timings(events)
    return r


def _first_seed(cells: Sequence) -> list:
    """One cell per grid point: the lowest seed (other seeds have the same shapes)."""
    seen, out = set(), []
    for c in sorted(cells, key=lambda c: c.coords.get("seed", 0)):
        key = tuple((k, v) for k, v in c.coords.items() if k != "seed")
        if key not in seen:
            seen.add(key)
            out.append(c)
    order = {c.key: i for i, c in enumerate(cells)}
    return sorted(out, key=lambda c: order[c.key])


def check(study, *, preset: str = "paper", data_root=None, batch: Optional[int] = 2,
          device: str = "auto", only: Optional[str] = None, models: Optional[dict] = None,
          log: Callable[[str], None] = print, sizes: str = "paper",
          distinct: bool = False, until: Optional[float] = None,
          after: Optional[Callable[[CellCheck], None]] = None) -> list[CellCheck]:
    """Dry-run every cell of `study` (its name, or a :class:`Study`) at `preset` (see the module docstring).

    batch  : the batch of every stage's steps, or None: each stage's own (halved, with more
             accumulation, where it runs out of memory).
    only   : a regular expression; check only the cells whose "dim=value ..." line matches it
             (e.g. "task=(listops|text)").
    distinct : check one cell per distinct (task, model) only (:func:`distinct_cells`); the
             others share its shapes.
    until  : a time.monotonic() deadline; cells not started by then are returned skipped.
    after  : after(result), called as each cell's check ends.
    models : your model configs beside the study's own ({name: config}, as for the study's run);
             only the grid studies take them.
    sizes  : what the estimate sizes the runs by: "paper" (the paper's split sizes, for a paper
             preset checked on fixtures) or "data" (the data under data_root).
    Returns one CellCheck per cell, with its estimated hours; nothing is written outside
    temporary folders.
    """
    from ...train.distributed import device_for

    s = find_study(study)

    def cells_at(split: int) -> list:
        dry = DryRun(batch=batch, device=device, steps=TIMED_STEPS, split=split)
        return _first_seed(s.cells(preset, data_root=data_root, device=device, dry=dry,
                                   models=models, only=only))

    cells = cells_at(1)
    total = len(cells)
    if distinct:
        cells = distinct_cells(cells)
    shown = f"batch {batch}" if batch is not None else "each stage's own batch"
    log(f"{s.name} [{preset}]: dry run of {len(cells)} cells"
        + (f" (one per distinct task and model, of {total})" if distinct else "")
        + f", {shown}, device {device_for(device)}")
    plans = _plans(s, preset, data_root, sizes)
    halved = None if batch is not None else (lambda split: {c.key: c for c in cells_at(split)})
    return run_check(s.name, cells, device_for(device), log, plans=plans, dry_batch=batch,
                     halved=halved, until=until, after=after)


def distinct_cells(cells: Sequence) -> list:
    """One cell per distinct (task, model) of `cells`: the shapes a device must run. Of cells
    that share them, the first whose job pretrains (it runs both stages), else the first."""
    import json

    def shape_key(config: dict) -> str:
        task = config.get("task", {})
        found = []

        def models(node):
            if isinstance(node, dict):
                if str(node.get("type", "")).endswith("Config"):
                    found.append(node)
                    return
                for v in node.values():
                    models(v)
            elif isinstance(node, list):
                for v in node:
                    models(v)
        models({k: v for k, v in config.items() if k != "task"})
        return json.dumps([task.get("name"), task.get("options"), found], sort_keys=True)

    def pretrains(cell) -> bool:
        arm = cell.config.get("arm", cell.config)
        return bool(arm.get("objective") or arm.get("pretrain"))

    chosen: dict = {}
    for c in cells:
        k = shape_key(c.config)
        if k not in chosen or (pretrains(c) and not pretrains(chosen[k])):
            chosen[k] = c
    keep = {id(c) for c in chosen.values()}
    return [c for c in cells if id(c) in keep]


def _plans(study, preset: str, data_root, sizes: str) -> dict:
    """{(cell name, stage): StagePlan} of the study's preset, sized as `sizes` says."""
    from .plan import plan
    if sizes not in ("paper", "data"):
        raise ValueError(f"sizes must be 'paper' or 'data', got {sizes!r}")
    root = data_root if (sizes == "data" or preset != "paper") else None
    return {(p.cell, p.stage): p for p in plan(study, preset=preset, data_root=root)}
