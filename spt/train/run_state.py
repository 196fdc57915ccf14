"""RunState: where a training run stands, what its ``last.pt`` saves and a resumed run reads back.

A ``last.pt`` stores it as the plain dict of :meth:`RunState.to_dict` (key "state"); a state
written by an older engine is upgraded by :func:`spt.compat.upgrade_run_state` before it is read.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Optional

from ..compat import upgrade_run_state


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
