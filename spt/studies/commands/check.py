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
seeds (:data:`ESTIMATE_ASSUMPTION` says what that assumes).

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
from ...provenance import describe_paths
from ..machinery.arms import Arm, TaskRef
from ..registry import study as find_study

# TrainConfig fields a dry run sets, whatever the preset says.
_DRY_FIELDS = dict(epochs=1, accum_steps=1, patience=None, progress=False, num_workers=0,
                   ckpt_every=None)

# optimiser steps per stage of `spt study check`: the first pays for allocation and warm-up, the
# second is timed for the estimate. Every text that says how many steps the check takes (the
# module docstring, `spt study check --help`, the Makefile) says this number
# (tests/studies/test_study_check.py).
TIMED_STEPS = 2
STEPS_IN_WORDS = {1: "one", 2: "two", 3: "three"}[TIMED_STEPS]
ESTIMATE_ASSUMPTION = (
    "estimated hours = step cap x (seconds of the dry run's second optimiser step) x (the "
    "stage's batch / the dry run's batch: 1 when the check ran each stage at its own batch) + "
    "validations x validation examples x (seconds per example of the dry run's validation), per "
    "stage, at most the stage's time budget; the step cap and validations are the plan's (no "
    "early stopping: a run stopped by patience ends sooner); at a fixed dry-run batch the step is "
    "scaled linearly, which overestimates a GPU running larger batches more efficiently")

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


@dataclass
class CellCheck:
    """What the dry run of one cell found. error is "" when it passed."""

    study: str
    coords: dict
    params: float = math.nan
    seq_len: float = math.nan
    stage_times: dict = dataclasses.field(default_factory=dict)  # stage -> seconds
    seconds: float = math.nan  # the whole cell: data, model, every stage
    peak_bytes: float = math.nan
    error: str = ""
    traceback: str = ""
    step_seconds: dict = dataclasses.field(default_factory=dict)  # stage -> a timed step
    eval_seconds: dict = dataclasses.field(default_factory=dict)  # stage -> s per val example
    estimate_h: dict = dataclasses.field(default_factory=dict)    # stage -> estimated hours
    unbounded_h: dict = dataclasses.field(default_factory=dict)   # the same without its budget
    seeds: int = 1
    oom: bool = False  # the error was running out of memory
    skipped: str = ""  # why the cell was not run (a deadline), "" when it was
    split: int = 1  # at the stages' own batch: the divisor of the batch that fit in memory
    paths: dict = dataclasses.field(default_factory=dict)  # stage -> {kind: path} it ran

    @property
    def ok(self) -> bool:
        return not self.error and not self.skipped

    @property
    def name(self) -> str:
        """The cell's "dim=value ..." line without its seed (the plan's cell name)."""
        return " ".join(f"{k}={v}" for k, v in self.coords.items() if k != "seed")

    @property
    def status(self) -> str:
        return "pass" if self.ok else (self.skipped or f"FAIL {self.error}")

    def row(self) -> dict:
        """The cell as one table row (study, cell, status, params, seq_len, stage times, seconds,
        timed steps, estimates, seeds, batch split, peak GiB, error)."""
        return {"study": self.study, "cell": self.name, "status": self.status,
                "params": self.params, "seq_len": self.seq_len,
                **{f"{k}_s": v for k, v in self.stage_times.items()}, "cell_s": self.seconds,
                **{f"{k}_step_s": v for k, v in self.step_seconds.items()},
                **{f"{k}_est_h": v for k, v in self.estimate_h.items()}, "est_h": self.hours,
                "unbounded_h": sum(self.unbounded_h.values()) if self.unbounded_h else math.nan,
                "seeds": self.seeds, "split": self.split, "peak_GiB": self.peak_bytes / 2**30,
                "paths": describe_paths(self.paths), "error": self.error}

    def line(self) -> str:
        stages = " ".join(f"{k} {v:.1f}s" for k, v in self.stage_times.items())
        mem = f"{self.peak_bytes / 2**30:.2f} GiB" if self.peak_bytes == self.peak_bytes else "-"
        params = f"{self.params / 1e6:.2f}M" if self.params == self.params else "-"
        length = f"{int(self.seq_len)}" if self.seq_len == self.seq_len else "-"
        status = self.status
        if self.split > 1:
            status += f" (batch / {self.split}, accumulation x {self.split}: out of memory at the full batch)"
        est = f"{self.hours:9.1f} h" if self.estimate_h else "        - "
        return (f"{self.study:<27} {self.name:<44} params {params:>7}  L {length:>6}  "
                f"{stages or '-':<26} cell {self.seconds:6.1f}s  peak {mem:>9}  est {est}  "
                f"{status}")

    @property
    def hours(self) -> float:
        """Estimated hours of one seed of this cell (the sum of its stages)."""
        return float(sum(self.estimate_h.values())) if self.estimate_h else math.nan


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


def estimate(r: CellCheck, plans: dict, dry_batch: Optional[int]) -> None:
    """Fill r.estimate_h (hours per stage) and r.seeds from the cell's stage plans (see
    ESTIMATE_ASSUMPTION); a stage whose plan or timing is missing is left out. dry_batch None:
    the steps ran at each stage's own batch (r.split: divided, with as much more accumulation)."""
    for stage, step_s in r.step_seconds.items():
        p = plans.get((r.name, stage))
        if p is None:
            continue
        ran = dry_batch if dry_batch is not None else max(1, p.batch // r.split) * r.split
        seconds = p.cap * step_s * p.batch / ran
        seconds += p.validations * p.examples.get("val", 0) * r.eval_seconds.get(stage, 0.0)
        hours = seconds / 3600
        r.unbounded_h[stage] = hours
        r.estimate_h[stage] = hours if p.budget_h is None else min(hours, p.budget_h)
        r.seeds = p.seeds


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


def summary(results: Sequence[CellCheck]) -> str:
    failed = [r for r in results if r.error]
    skipped = [r for r in results if r.skipped]
    total = sum(r.seconds for r in results if r.seconds == r.seconds)
    peak = max((r.peak_bytes for r in results if r.peak_bytes == r.peak_bytes),
               default=float("nan"))
    return (f"{len(results)} cells: {len(results) - len(failed) - len(skipped)} passed, "
            f"{len(failed)} failed{f', {len(skipped)} not checked' if skipped else ''}; "
            f"{total:.0f} s in all; highest peak {peak / 2**30:.2f} GiB")


def paths_summary(results: Sequence[CellCheck]) -> str:
    """The implementation paths the timed steps ran (TrainConfig.paths), one line per distinct
    set with how many cells ran it: what the estimate assumes."""
    counts: dict = {}
    for r in results:
        if r.paths:
            key = describe_paths(r.paths)
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return "paths: none recorded"
    return "\n".join(f"paths ({n} cell{'s' if n > 1 else ''}): {k}" for k, n in counts.items())


def cost_table(results: Sequence[CellCheck], device: str = ""):
    """Estimated hours per study on the device the check ran on: its cells (one seed each), the
    seeds of its preset, the hours of one seed of every cell and of every seed (each stage at most
    its time budget), the cells whose budget cuts a stage short, and the hours one seed would take
    without the budgets."""
    import pandas as pd
    rows = {}
    for r in results:
        row = rows.setdefault(r.study, {"cells": 0, "estimated": 0, "seeds": r.seeds,
                                        "hours_one_seed": 0.0, "hours_all_seeds": 0.0,
                                        "cut_by_budget": 0, "unbounded_one_seed": 0.0})
        row["cells"] += 1
        if r.estimate_h:
            row["estimated"] += 1
            row["hours_one_seed"] += r.hours
            row["hours_all_seeds"] += r.hours * r.seeds
            row["unbounded_one_seed"] += sum(r.unbounded_h.values())
            row["cut_by_budget"] += any(r.unbounded_h[k] > v for k, v in r.estimate_h.items())
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = f"study ({device})" if device else "study"
    return df.round(1)


def as_dataframe(results: Sequence[CellCheck]):
    """One row per checked cell (:meth:`CellCheck.row`)."""
    import pandas as pd
    return pd.DataFrame([r.row() for r in results])
