"""What :func:`spt.train.engine.fit` returns: :class:`RunResult` with its history, and
:class:`NonFiniteLossError`, the error that ends a run whose loss stopped being finite."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import xarray as xr


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; nothing was saved after it did."""


@dataclass
class RunResult:
    """What a training run returns.

    model        : the model with its best-validation weights loaded.
    history      : xarray Dataset over dim "epoch", the epochs completed at each evaluation (train /
                   val metrics, lr, optimiser step, training time in seconds); a partial epoch
                   ended by TrainConfig.max_time has a fractional epoch. attrs: "stage",
                   "select" (the val metric that picked best.pt), "stopped_by".
    best_checkpoint : path of best.pt.
    best_epoch   : the history epoch of best.pt (fractional for a partial epoch).
    val_metrics, test_metrics : metrics of the best weights (test is empty when not evaluated).
    steps        : optimiser steps taken in the whole run.
    select       : the validation metric that selected best.pt (TrainConfig.select or the
                   objective's default).
    stopped_by   : "epochs", "max_steps", "max_time" or "patience".
    paths        : {kind: path, "step": path}: the implementation paths it ran
                   (:mod:`spt.train.paths`; the checkpoints hold them per module).
    """

    model: torch.nn.Module
    history: xr.Dataset
    best_checkpoint: Path
    best_epoch: float
    val_metrics: dict
    test_metrics: dict = field(default_factory=dict)
    steps: int = 0
    select: str = ""
    stopped_by: str = ""
    paths: dict = field(default_factory=dict)


def history_dataset(rows: list[dict], stage: str, **attrs) -> xr.Dataset:
    """The history of a run from its rows (one dict per validation, each with an "epoch"): one
    variable of shape (evaluations,) per other key over dim "epoch" (NaN where a row lacks it);
    attrs {"stage": stage, **attrs}. No rows: a Dataset with no variables."""
    if not rows:
        return xr.Dataset(attrs={"stage": stage, **attrs})
    keys = [k for k in rows[0] if k != "epoch"]
    data = {k: ("epoch", np.array([r.get(k, np.nan) for r in rows], dtype=float)) for k in keys}
    return xr.Dataset(data, coords={"epoch": [r["epoch"] for r in rows]},
                      attrs={"stage": stage, **attrs})


def non_finite_error(stage: str, epoch: int, step: int, lr: float,
                     *checkpoints: Path) -> NonFiniteLossError:
    """The error for a loss that became non-finite in `epoch` near optimiser `step`, naming which
    of `checkpoints` (best.pt, last.pt) hold the last finite state."""
    return NonFiniteLossError(
        f"{stage}: the training loss became non-finite (NaN/inf) in epoch {epoch} near optimiser "
        f"step {step} (lr {lr:.3g}). The run stopped; {_kept_files(*checkpoints)}. Try a lower lr, "
        f"warmup_steps, or grad_clip.")


def _kept_files(*paths: Path) -> str:
    """What a failed run leaves behind, for its error message."""
    kept = [p for p in paths if p.exists()]
    if not kept:
        return ("no checkpoint had been written yet (best.pt and last.pt are first written at the "
                "end of epoch 1, last.pt also every ckpt_every steps), so nothing was saved")
    return (" and ".join(str(p) for p in kept) + (" hold" if len(kept) > 1 else " holds")
            + " the last finite state and" + (" were" if len(kept) > 1 else " was")
            + " not overwritten")
