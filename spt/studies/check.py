"""`spt study check`: a dry run of every cell of a study preset at the real shapes.

A paper preset is hours of GPU time per cell; a crash on its first batch should cost seconds, not
a night. The check takes every cell of a study (one seed: other seeds have the same shapes),
loads its task from the data root, keeps the `batch` longest examples of each split (so the step
runs at the task's real length), and runs the cell's own code with one optimiser step per stage:

    pretraining -> finetuning from the checkpoint that step just wrote -> test evaluation
    scratch     -> test evaluation

Each stage also evaluates validation, as a real run does after every epoch. Per cell it reports
the parameter count, the sequence length, the wall time of each stage (one step plus evaluation)
and the peak memory (resident set on the CPU, max allocated on CUDA).

    results = check("02_transformers_vs_s4", preset="paper", data_root="/data/spt", batch=2)
    spt study check 02_transformers_vs_s4 --preset paper -p data_root /data/spt

`spt data fixtures DIR` writes tiny data sets in the official formats at full length, so the check
runs anywhere (CI runs it on those).
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import re
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from ..config import TrainConfig, replace
from .arms import Arm, TaskRef

# TrainConfig fields a dry run sets, whatever the preset says.
_DRY_FIELDS = dict(epochs=1, max_steps=1, accum_steps=1, patience=None, progress=False,
                   num_workers=0, ckpt_every=None)


@dataclass(frozen=True)
class DryRun:
    """How a study cell is shrunk to its dry run: `batch` examples per split (the longest), one
    optimiser step per stage at batch size `batch`, on `device`. Model, objective, lr, schedule,
    precision and every other setting stay the preset's."""

    batch: int = 2
    device: str = "auto"

    def __post_init__(self):
        if self.batch < 1:
            raise ValueError(f"the dry run's batch must be >= 1, got {self.batch}")

    def ref(self, ref: TaskRef) -> TaskRef:
        return dataclasses.replace(ref, limit=self.batch)

    def train(self, cfg: TrainConfig) -> TrainConfig:
        changes = dict(_DRY_FIELDS, batch_size=self.batch, eval_batch_size=self.batch,
                       device=self.device)
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
        return (f"{self.study:<27} {coords:<44} params {params:>7}  L {length:>6}  "
                f"{stages or '-':<26} cell {self.seconds:6.1f}s  peak {mem:>9}  {status}")


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


def run_check(study: str, cells: Sequence, device: torch.device,
              log: Callable[[str], None] = print) -> list[CellCheck]:
    """Run each (dry) cell in a fresh temporary folder; one CellCheck per cell, failures caught."""
    out = []
    for cell in cells:
        r = CellCheck(study, dict(cell.coords))
        _reset_peak(device)
        t0 = time.perf_counter()
        try:
            with tempfile.TemporaryDirectory(prefix="spt-check-") as tmp:
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
        log(r.line())
        out.append(r)
    return out


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
          log: Callable[[str], None] = print) -> list[CellCheck]:
    """Dry-run every cell of `study` at `preset` (see the module docstring).

    only   : a regular expression; check only the cells whose "dim=value ..." line matches it
             (e.g. "task=(listops|text)").
    models : your model configs beside the study's own ({name: config}, as for the study's run);
             only the grid studies take them.
    Returns one CellCheck per cell; nothing is written outside temporary folders.
    """
    from ..train.engine import pick_device
    from . import STUDIES

    if study not in STUDIES:
        raise ValueError(f"no study {study!r}; studies: {', '.join(STUDIES)}")
    module = STUDIES[study]
    dry = DryRun(batch=batch, device=device)
    extra = {"models": models} if models else {}
    if models and "models" not in inspect.signature(module.cells).parameters:
        raise ValueError(f"study {study} does not take your models (models=); the grid studies "
                         f"(00 quickstart, 01-04, 07-09) do")
    cells = _first_seed(module.cells(preset, data_root=data_root, device=device, dry=dry, **extra))
    if only:
        pattern = re.compile(only)
        cells = [c for c in cells if pattern.search(" ".join(f"{k}={v}" for k, v in c.coords.items()))]
    log(f"{study} [{preset}]: dry run of {len(cells)} cells, batch {batch}, device "
        f"{pick_device(device)}")
    return run_check(study, cells, pick_device(device), log)


def summary(results: Sequence[CellCheck]) -> str:
    failed = [r for r in results if not r.ok]
    total = sum(r.seconds for r in results)
    peak = max((r.peak_bytes for r in results), default=float("nan"))
    return (f"{len(results)} cells: {len(results) - len(failed)} passed, {len(failed)} failed; "
            f"{total:.0f} s in all; highest peak {peak / 2**30:.2f} GiB")


def as_dataframe(results: Sequence[CellCheck]):
    """One row per checked cell (study, coords, params, seq_len, stage times, seconds, peak GiB,
    error)."""
    import pandas as pd
    rows = [{"study": r.study, "cell": " ".join(f"{k}={v}" for k, v in r.coords.items()
                                                 if k != "seed"),
             "params": r.params, "seq_len": r.seq_len,
             **{f"{k}_s": v for k, v in r.stage_times.items()}, "cell_s": r.seconds,
             "peak_GiB": r.peak_bytes / 2**30, "error": r.error} for r in results]
    return pd.DataFrame(rows)
