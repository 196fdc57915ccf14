"""What a study cell trains: a task reference and an *arm* (scratch, or SPT -> finetune).

    ref = TaskRef("listops", root="data")                       # loaded inside the worker
    arm = Arm(model=cfg, train=TrainConfig(...), objective=ObjectiveConfig("masked"),
              pretrain=TrainConfig(...))                          # SPT; objective=None: scratch
    ds = run_arm(ref.load(), arm, seed=0, run_dir=Path("runs/x"))  # scalars + curves

The returned Dataset holds (``<m>`` = accuracy, or r2 for regression tasks):
  test_<m>, val_<m>, steps, best_epoch, epochs_run, params               - supervised run
  pretrain_steps, pretrain_val_loss (NaN for scratch)                     - SPT run
  curve_train_loss, curve_train_<m>, curve_val_<m> (epoch)                - supervised curves
  pretrain_curve_train_loss, pretrain_curve_val_loss (pt_epoch)          - SPT curves
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Optional, Union

import numpy as np
import xarray as xr

from ..config import (ModelConfig, ObjectiveConfig, SSMConfig, TrainConfig, model_config_to_dict,
                      replace, to_dict)
from ..data.task import Task
from ..models.model import count_parameters
from ..train import finetune, pretrain, train_from_scratch
from .cells import Cell, scalar_dataset


@dataclass(frozen=True)
class TaskRef:
    """A task to load by name inside a (possibly spawned) worker.

    name     : "digits" (embedded, no data root) or a task of :func:`spt.data.tasks.load_task`.
    root     : data root for the named tasks.
    fraction : nested fraction of the training split (Fig. 3).
    options  : loader options as (key, value) pairs, e.g. (("seq_len", 512),) or for digits
               (("size", 8), ("n_train", 100)).
    """

    name: str
    root: Optional[str] = None
    fraction: float = 1.0
    options: tuple = ()

    def load(self) -> Task:
        if self.name == "digits":
            from ..data.digits import digits_task
            from ..data.fractions import nested_subset
            task = digits_task(**dict(self.options))
            if self.fraction == 1.0:
                return task
            # the nested fraction of the (n_train) training split, as load_task does
            return Task(task.spec, nested_subset(task.train, self.fraction), task.val, task.test)
        from ..data.tasks import load_task
        if self.root is None:
            raise ValueError(f"task {self.name!r} needs a data root: pass data_root (see `spt data "
                             f"prepare {self.name} --root DIR`)")
        return load_task(self.name, self.root, fraction=self.fraction, **dict(self.options))

    def to_dict(self) -> dict:
        return {"name": self.name, "root": self.root, "fraction": self.fraction,
                "options": {k: v for k, v in self.options}}


@dataclass(frozen=True)
class Arm:
    """One way to train a model on a task.

    model     : ModelConfig (Transformer) or SSMConfig (S4 / S4D / DLR).
    train     : the supervised run: finetuning after SPT, or training from scratch.
    objective : SPT objective (masked / causal); None = train from scratch.
    pretrain  : SPT optimisation settings (required with an objective).
    pooling   : finetuning pooling override (the paper changes pooling between PT and FT on PathX).
    """

    model: Union[ModelConfig, SSMConfig]
    train: TrainConfig
    objective: Optional[ObjectiveConfig] = None
    pretrain: Optional[TrainConfig] = None
    pooling: Optional[str] = None

    def __post_init__(self):
        if (self.objective is None) != (self.pretrain is None):
            raise ValueError("Arm: give both objective and pretrain (SPT) or neither (scratch)")

    @property
    def is_spt(self) -> bool:
        return self.objective is not None

    def to_dict(self) -> dict:
        return {"model": model_config_to_dict(self.model), "train": to_dict(self.train),
                "objective": to_dict(self.objective) if self.objective else None,
                "pretrain": to_dict(self.pretrain) if self.pretrain else None,
                "pooling": self.pooling}

    def with_device(self, device: str) -> "Arm":
        pt = replace(self.pretrain, device=device) if self.pretrain else None
        return dataclasses.replace(self, train=replace(self.train, device=device), pretrain=pt)


def history_curve(history: xr.Dataset, name: str, dim: str = "epoch") -> xr.DataArray:
    if name in history:
        da = history[name]
    else:
        da = xr.DataArray(np.full(history.sizes.get("epoch", 0), np.nan), dims=("epoch",),
                          coords={"epoch": history.get("epoch", np.arange(0))})
    return da.drop_vars([c for c in da.coords if c != "epoch"]).rename(epoch=dim).astype(float)


def run_arm(task: Task, arm: Arm, seed: int, run_dir: Path) -> xr.Dataset:
    """Train `arm` on `task` with `seed` (SPT: pretrain -> finetune best checkpoint; else scratch).

    Runs live in ``run_dir/{pretrain,finetune}`` or ``run_dir/scratch`` and resume when rerun.
    """
    run_dir = Path(run_dir)
    m = "r2" if task.spec.is_regression else "accuracy"
    pt_vals: dict = {"pretrain_steps": None, "pretrain_val_loss": None}
    arrays = {}
    if arm.is_spt:
        pt = pretrain(task, arm.model, arm.objective, replace(arm.pretrain, seed=seed),
                      run_dir / "pretrain", resume=True)
        pt_vals = {"pretrain_steps": pt.steps, "pretrain_val_loss": pt.val_metrics["loss"]}
        arrays["pretrain_curve_train_loss"] = history_curve(pt.history, "train_loss", "pt_epoch")
        arrays["pretrain_curve_val_loss"] = history_curve(pt.history, "val_loss", "pt_epoch")
        r = finetune(task, pt.best_checkpoint, replace(arm.train, seed=seed), run_dir / "finetune",
                     pooling=arm.pooling, resume=True)
    else:
        model = arm.model if arm.pooling is None else replace(arm.model, pooling=arm.pooling)
        r = train_from_scratch(task, model, replace(arm.train, seed=seed), run_dir / "scratch",
                               resume=True)
    values = {f"test_{m}": r.test_metrics[m], f"val_{m}": r.val_metrics[m], "steps": r.steps,
              "best_epoch": r.best_epoch, "epochs_run": r.history.sizes.get("epoch", 0),
              "params": count_parameters(r.model), **pt_vals}
    arrays.update(curve_train_loss=history_curve(r.history, "train_loss"),
                  **{f"curve_train_{m}": history_curve(r.history, f"train_{m}"),
                     f"curve_val_{m}": history_curve(r.history, f"val_{m}")})
    return scalar_dataset(values, **arrays)


def arm_cell_run(ref: TaskRef, arm: Arm, seed: int, run_dir: Path) -> xr.Dataset:
    """Cell.run for an arm: load the task in the worker, then :func:`run_arm`."""
    return run_arm(ref.load(), arm, seed, run_dir)


def arm_cell_config(ref: TaskRef, arm: Arm, seed: int) -> dict:
    return {"task": ref.to_dict(), "arm": arm.to_dict(), "seed": seed}


def arm_cell(coords: dict, ref: TaskRef, arm: Arm, seed: int):
    """A :class:`~spt.studies.cells.Cell` that trains `arm` on `ref` with `seed`."""
    return Cell(coords=dict(coords), run=partial(arm_cell_run, ref, arm, seed),
                config=arm_cell_config(ref, arm, seed))
