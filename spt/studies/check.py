"""`spt study check`: a dry run of every cell of a study preset at the real shapes.

A paper preset is hours of GPU time per cell; a crash on its first batch should cost seconds, not
a night. The check takes every cell of a study (one seed: other seeds have the same shapes),
loads its task from the data root, keeps the longest examples of each split (so the steps run at
the task's real length), and runs the cell's own code with two optimiser steps per stage
(:data:`TIMED_STEPS`) at batch size `batch`:

    pretraining -> finetuning from the checkpoint those steps wrote -> test evaluation
    scratch     -> test evaluation

Each stage also evaluates validation, as a real run does after every epoch. Per cell it reports
the parameter count, the sequence length, the wall time of each stage and the peak memory
(resident set on the CPU, max allocated on CUDA).

Cost before you spend it: the second optimiser step of each stage (the first pays for allocation
and warm-up) is timed, as is the validation pass per example. Multiplied by the
stage's step cap and validations from the study's plan (:mod:`spt.studies.plan`, the paper's split
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

from ..config import TrainConfig, replace
from .arms import Arm, TaskRef

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
    "stage's batch / the dry run's batch) + validations x validation examples x (seconds per "
    "example of the dry run's validation), per stage, at most the stage's time budget; the step "
    "cap and validations are the plan's (no early stopping: a run stopped by patience ends "
    "sooner); linear in the batch, which overestimates a GPU running larger batches more "
    "efficiently and underestimates nothing else")


@dataclass(frozen=True)
class DryRun:
    """How a study cell is shrunk to its dry run: the `batch` x `steps` longest examples per split,
    `steps` optimiser steps per stage at batch size `batch` (one epoch), on `device`. Model,
    objective, lr, schedule, precision and every other setting stay the preset's."""

    batch: int = 2
    device: str = "auto"
    steps: int = 1

    def __post_init__(self):
        if self.batch < 1:
            raise ValueError(f"the dry run's batch must be >= 1, got {self.batch}")
        if self.steps < 1:
            raise ValueError(f"the dry run's steps must be >= 1, got {self.steps}")

    def ref(self, ref: TaskRef) -> TaskRef:
        return dataclasses.replace(ref, limit=self.batch * self.steps)

    def train(self, cfg: TrainConfig) -> TrainConfig:
        changes = dict(_DRY_FIELDS, batch_size=self.batch, eval_batch_size=self.batch,
                       max_steps=self.steps, device=self.device)
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

    @property
    def ok(self) -> bool:
        return not self.error

    def line(self) -> str:
        coords = " ".join(f"{k}={v}" for k, v in self.coords.items() if k != "seed")
        stages = " ".join(f"{k} {v:.1f}s" for k, v in self.stage_times.items())
        mem = f"{self.peak_bytes / 2**30:.2f} GiB" if self.peak_bytes == self.peak_bytes else "-"
        params = f"{self.params / 1e6:.2f}M" if self.params == self.params else "-"
        length = f"{int(self.seq_len)}" if self.seq_len == self.seq_len else "-"
        status = "pass" if self.ok else f"FAIL {self.error}"
        est = f"{self.hours:9.1f} h" if self.estimate_h else "        - "
        return (f"{self.study:<27} {coords:<44} params {params:>7}  L {length:>6}  "
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


def run_check(study: str, cells: Sequence, device: torch.device,
              log: Callable[[str], None] = print, plans: Optional[dict] = None,
              dry_batch: int = 2) -> list[CellCheck]:
    """Run each (dry) cell in a fresh temporary folder; one CellCheck per cell, failures caught.
    plans: {(cell name, stage): StagePlan} to estimate each stage's hours from."""
    from ..train.engine import observe
    out = []
    for cell in cells:
        r = CellCheck(study, dict(cell.coords))
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
        except Exception as e:  # the check reports every failing cell and goes on
            r.error = _error_line(e)
            r.traceback = traceback.format_exc()
        r.seconds = time.perf_counter() - t0
        r.peak_bytes = _peak(device)
        r.step_seconds, r.eval_seconds = _timings(events)
        if plans is not None and r.ok:
            estimate(r, plans, dry_batch)
        log(r.line())
        out.append(r)
    return out


def estimate(r: CellCheck, plans: dict, dry_batch: int) -> None:
    """Fill r.estimate_h (hours per stage) and r.seeds from the cell's stage plans (see
    ESTIMATE_ASSUMPTION); a stage whose plan or timing is missing is left out."""
    name = " ".join(f"{k}={v}" for k, v in r.coords.items() if k != "seed")
    for stage, step_s in r.step_seconds.items():
        p = plans.get((name, stage))
        if p is None:
            continue
        seconds = p.cap * step_s * p.batch / dry_batch
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


def check(study: str, *, preset: str = "paper", data_root=None, batch: int = 2,
          device: str = "auto", only: Optional[str] = None, models: Optional[dict] = None,
          log: Callable[[str], None] = print, sizes: str = "paper") -> list[CellCheck]:
    """Dry-run every cell of `study` at `preset` (see the module docstring).

    only   : a regular expression; check only the cells whose "dim=value ..." line matches it
             (e.g. "task=(listops|text)").
    models : your model configs beside the study's own ({name: config}, as for the study's run);
             only the grid studies take them.
    sizes  : what the estimate sizes the runs by: "paper" (the paper's split sizes, for a paper
             preset checked on fixtures) or "data" (the data under data_root).
    Returns one CellCheck per cell, with its estimated hours; nothing is written outside
    temporary folders.
    """
    from ..train.distributed import device_for
    from .registry import study as find_study

    s = find_study(study)
    dry = DryRun(batch=batch, device=device, steps=TIMED_STEPS)
    cells = _first_seed(s.cells(preset, data_root=data_root, device=device, dry=dry,
                                models=models, only=only))
    log(f"{study} [{preset}]: dry run of {len(cells)} cells, batch {batch}, device "
        f"{device_for(device)}")
    plans = _plans(study, preset, data_root, sizes)
    return run_check(study, cells, device_for(device), log, plans=plans, dry_batch=batch)


def _plans(study: str, preset: str, data_root, sizes: str) -> dict:
    """{(cell name, stage): StagePlan} of the study's preset, sized as `sizes` says."""
    from .plan import plan
    if sizes not in ("paper", "data"):
        raise ValueError(f"sizes must be 'paper' or 'data', got {sizes!r}")
    root = data_root if (sizes == "data" or preset != "paper") else None
    return {(p.cell, p.stage): p for p in plan(study, preset=preset, data_root=root)}


def summary(results: Sequence[CellCheck]) -> str:
    failed = [r for r in results if not r.ok]
    total = sum(r.seconds for r in results)
    peak = max((r.peak_bytes for r in results), default=float("nan"))
    return (f"{len(results)} cells: {len(results) - len(failed)} passed, {len(failed)} failed; "
            f"{total:.0f} s in all; highest peak {peak / 2**30:.2f} GiB")


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
    """One row per checked cell (study, coords, params, seq_len, stage times, seconds, peak GiB,
    error)."""
    import pandas as pd
    rows = [{"study": r.study, "cell": " ".join(f"{k}={v}" for k, v in r.coords.items()
                                                 if k != "seed"),
             "params": r.params, "seq_len": r.seq_len,
             **{f"{k}_s": v for k, v in r.stage_times.items()}, "cell_s": r.seconds,
             **{f"{k}_step_s": v for k, v in r.step_seconds.items()},
             **{f"{k}_est_h": v for k, v in r.estimate_h.items()}, "est_h": r.hours,
             "unbounded_h": sum(r.unbounded_h.values()) if r.unbounded_h else math.nan,
             "seeds": r.seeds, "peak_GiB": r.peak_bytes / 2**30, "error": r.error}
            for r in results]
    return pd.DataFrame(rows)
