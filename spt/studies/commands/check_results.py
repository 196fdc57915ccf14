"""What ``spt study check`` found, and what a preset will cost: one :class:`CellCheck` per dry-run
cell, its estimated hours per stage from the study's plan (:func:`estimate`, under
:data:`ESTIMATE_ASSUMPTION`), and the tables over them (:func:`summary`, :func:`paths_summary`,
:func:`cost_table`, :func:`as_dataframe`). The dry run itself is :mod:`spt.studies.commands.check`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Sequence

from ...provenance import describe_paths

ESTIMATE_ASSUMPTION = (
    "estimated hours = step cap x (seconds of the dry run's second optimiser step) x (the "
    "stage's batch / the dry run's batch: 1 when the check ran each stage at its own batch) + "
    "validations x validation examples x (seconds per example of the dry run's validation), per "
    "stage, at most the stage's time budget; the step cap and validations are the plan's (no "
    "early stopping: a run stopped by patience ends sooner); at a fixed dry-run batch the step is "
    "scaled linearly, which overestimates a GPU running larger batches more efficiently")


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
