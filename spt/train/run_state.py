"""RunState: where a training run stands, what its ``last.pt`` saves and a resumed run reads back.

A ``last.pt`` stores it as the plain dict of :meth:`RunState.to_dict` (key "state"); a state
written by an older engine is upgraded by :func:`spt.compat.upgrade_run_state` before it is read.
Beside it last.pt holds every rank's RNG states (:func:`rng_state`, restored by
:func:`restore_rng`), and a resume is only allowed into the same run (:func:`check_same_run`).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from ..compat import cuda_rng_state, pretrained_identity, rank_rng_states, upgrade_run_state
from ..config import TrainConfig, to_dict
from ..same_run import RESUMABLE_FIELDS, differences
from . import distributed as D


@dataclass
class RunState:
    """The counters and records of one run (all of it saved in last.pt).

    epoch, batch : the epoch in progress (0-based) and the batches of it done so far.
    step         : optimiser steps taken.
    best, best_epoch : sign * the best selection score so far and the history epoch it was
                   reached at (-1: none yet); best.pt holds those weights.
    patience_best, bad_epochs : the same best over full epochs only, and the epochs since it
                   improved (those ending inside the warmup do not count).
    validated    : epochs completed at the last full validation.
    history      : one row per validation (the RunResult's history).
    done, stopped_by : whether the run has ended, and which rule ended it.
    time         : training seconds so far (counted across resumes).
    plateau      : schedule="plateau"'s best, count of bad validations and lr scale.
    totals       : an epoch's summed training statistics, saved when last.pt is written in
                   the middle of it (ckpt_every, a time budget) so the resumed epoch reports them.
    """

    plateau: dict
    epoch: int = 0
    batch: int = 0
    step: int = 0
    best: float = -math.inf
    best_epoch: float = -1
    patience_best: float = -math.inf
    bad_epochs: int = 0
    validated: int = 0
    history: list = field(default_factory=list)
    done: bool = False
    stopped_by: Optional[str] = None
    time: float = 0.0
    totals: Optional[dict] = None

    def stop(self, reason: str) -> None:
        self.done, self.stopped_by = True, reason

    def next_epoch(self) -> None:
        self.epoch += 1
        self.batch = 0

    def reopen(self, max_time: Optional[float]) -> None:
        """A run its time budget stopped goes on where it stopped under a larger `max_time` (or
        none)."""
        if self.done and self.stopped_by == "max_time" and (max_time is None or self.time < max_time):
            self.done, self.stopped_by = False, None

    def count_patience(self, epoch: int, score: float, steps_per_epoch: int,
                       warmup_steps: int) -> None:
        """After the full validation of epoch `epoch` (0-based) that scored `score`: the epochs
        without a better score, less those that ended inside the first `warmup_steps` steps."""
        if score > self.patience_best:
            self.patience_best, self.bad_epochs = score, 0
        else:  # the epochs since the last validation, less those that ended in the warmup
            self.bad_epochs += sum(1 for e in range(self.validated + 1, epoch + 2)
                                   if min(e * steps_per_epoch, self.step) >= warmup_steps)
        self.validated = epoch + 1

    def to_dict(self) -> dict:
        """The dict last.pt stores ("totals" only while an epoch is open)."""
        d = dataclasses.asdict(self)
        if d["totals"] is None:
            del d["totals"]
        return d

    @classmethod
    def from_saved(cls, saved: dict, plateau: dict) -> "RunState":
        """The state a last.pt saved (any version); `plateau`: the fresh plateau state, for a
        file written before schedule="plateau" existed."""
        d = upgrade_run_state(saved, plateau)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def resume_note(state: RunState, stage: str, path: Path, world_size: int, saved_world: int) -> str:
    """The line a resumed run prints: where it resumes `stage` from `path`, and on how many ranks
    when that differs from the `saved_world` ranks that wrote it."""
    return (f"[spt] resuming {stage} from {path} at epoch {state.epoch}, batch {state.batch}, "
            f"step {state.step}"
            + (f" on {world_size} ranks (saved on {saved_world})" if saved_world != world_size
               else "")
            + (f" (stopped by {state.stopped_by})" if state.done else ""))


def rng_state(gen: torch.Generator, device: torch.device) -> dict:
    """This process's RNG states: {"torch": the CPU's, "gen": `gen`'s, "cuda": `device`'s (CUDA
    only)}."""
    s = {"torch": torch.get_rng_state(), "gen": gen.get_state()}
    if device.type == "cuda":
        s["cuda"] = torch.cuda.get_rng_state(device)
    return s


def set_rng_state(s: dict, gen: torch.Generator, device: torch.device) -> None:
    """Restore what :func:`rng_state` returned (its "cuda" state only on a CUDA `device`)."""
    torch.set_rng_state(s["torch"])
    gen.set_state(s["gen"])
    if "cuda" in s and device.type == "cuda":
        torch.cuda.set_rng_state(cuda_rng_state(s["cuda"], device.index or 0), device)


def restore_rng(ck: dict, gen: torch.Generator, device: torch.device, seed: int, step: int,
                env: D.DistEnv) -> int:
    """This rank's RNG states from the last.pt `ck` when it was written on as many ranks as `env`
    has; else fresh deterministic streams from `seed`, salted with `step` + 1 (the data order is
    exact either way; dropout and masking continue on the fresh streams). Returns the number of
    ranks that wrote `ck`."""
    saved_world, rngs = rank_rng_states(ck)
    if saved_world == env.world_size:
        set_rng_state(rngs[env.rank], gen, device)
    else:
        D.reseed(seed, env, gen, salt=step + 1)
    return saved_world


def check_same_run(ck: dict, meta: dict, cfg: TrainConfig, path: Path) -> None:
    """Resuming is only allowed into the same run: the rule of :mod:`spt.same_run` over the
    TrainConfig and `meta` (RESUMABLE_FIELDS may differ), a finetuning run's pretrained backbone
    compared as :func:`spt.compat.pretrained_identity` says."""
    # a checkpoint from before data identities were stored is checked on the rest
    meta = {k: v for k, v in meta.items() if k != "data" or "data" in ck}
    saved, now = pretrained_identity({k: ck.get(k) for k in meta}, meta)
    diffs = differences({"train_config": ck.get("train_config") or {}, **saved},
                        {"train_config": to_dict(cfg), **now}, RESUMABLE_FIELDS)
    if diffs:
        if any(p.startswith("data.") for p, _, _ in diffs):
            diffs = [("the task's data (split sizes or examples)", *ab) for p, *ab in diffs
                     if p.startswith("data.")][:1] + [d for d in diffs if not d[0].startswith("data.")]
        raise ValueError(f"cannot resume {path}: it was written with another configuration ("
                         + "; ".join(f"{p}: saved {a!r}, now {b!r}" for p, a, b in diffs)
                         + f"). Use another out_dir for the new configuration, or "
            f"delete {path.parent} to train it again from the start.")
