"""What a study cell trains: a task reference and an *arm* (scratch, or SPT -> finetune).

    ref = TaskRef("listops", root="data")                       # loaded inside the worker
    arm = Arm(model=cfg, train=TrainConfig(...), objective=ObjectiveConfig("masked"),
              pretrain=TrainConfig(...))                          # SPT; objective=None: scratch
    ds = run_arm(ref.load(), arm.at(seed=0), run_dir=Path("runs/x"))  # scalars + curves

The returned Dataset holds (``<m>`` = accuracy, or r2 for regression tasks):
  test_<m>, val_<m>, steps, best_epoch, epochs_run, params, lr, seq_len,
  time (seconds of training and evaluation)                               - supervised run
  grid_steps, grid_time (summed over every lr of the arm's lr grid)       - all its tries
  pretrain_steps, pretrain_time, pretrain_val_{loss,accuracy,r2} (NaN where
  there is no pretraining, or the objective has no such metric)           - SPT run
  curve_train_loss, curve_train_<m>, curve_val_<m> (epoch)                - supervised curves
  pretrain_curve_train_loss, pretrain_curve_val_loss (pt_epoch)          - SPT curves
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import numpy as np
import xarray as xr

from ...config import ObjectiveConfig, TrainConfig, TransformerConfig, replace, to_dict
from ...data.task import Task
from ...model_config import model_config_to_dict
from ...models.model import count_parameters
from ...provenance import current_provenance
from ...ssm_config import SSMConfig
from ...train import finetune, pretrain, train_from_scratch
from .cells import scalar_dataset
from .job import Job, at_seed


@dataclass(frozen=True)
class TaskRef:
    """A task to load by name inside a (possibly spawned) worker.

    name     : a task of :data:`spt.data.registry.TASKS` ("digits" needs no data root).
    root     : data root for the named tasks.
    fraction : nested fraction of the training split (Fig. 3).
    options  : loader options as (key, value) pairs, e.g. (("seq_len", 512),) or for digits
               (("size", 8), ("n_train", 100)).
    limit    : keep only the `limit` longest examples of each split (the dry run of
               :mod:`spt.studies.commands.check`: one batch at the task's real length); None = all.
    fill     : with a limit, a split with fewer examples repeats its longest ones until it has
               `limit` (a dry run at a stage's own batch on a few fixture examples).
    """

    name: str
    root: Optional[str] = None
    fraction: float = 1.0
    options: tuple = ()
    limit: Optional[int] = None
    fill: bool = False

    def load(self) -> Task:
        task = self._load()
        if self.limit is None:
            return task
        n, fill = self.limit, self.fill
        return Task(task.spec, longest(task.train, n, fill), longest(task.val, n, fill),
                    longest(task.test, n, fill))

    def _load(self) -> Task:
        from ...data.registry import load_task
        return load_task(self.name, self.root, fraction=self.fraction, **dict(self.options))

    def to_dict(self) -> dict:
        d = {"name": self.name, "root": self.root, "fraction": self.fraction,
             "options": {k: v for k, v in self.options}}
        if self.limit is not None:
            d["limit"] = self.limit
        if self.fill:
            d["fill"] = True
        return d


LENGTH_SCAN = 4096  # how many examples of a split `longest` looks at when it must read items


def item_length(item: dict) -> int:
    """Positions in one dataset item (both documents of a pair task)."""
    n = int(item["inputs"].shape[0])
    if "inputs2" in item:
        n += int(item["inputs2"].shape[0])
    return n


def longest(dataset, n: int, fill: bool = False):
    """The `n` longest examples of `dataset` (ties: lowest index), as a Subset / selection; with
    `fill`, a dataset of fewer than `n` examples gives them cyclically until there are `n`.

    Uses ``dataset.lengths()`` when the dataset has it (the cached token datasets), else reads the
    first LENGTH_SCAN items (fixed-length tasks: every item has the full length anyway)."""
    from torch.utils.data import Subset

    total = len(dataset)
    if hasattr(dataset, "lengths"):
        lengths = np.asarray(dataset.lengths())
    else:
        lengths = np.array([item_length(dataset[i]) for i in range(min(total, LENGTH_SCAN))])
    keep = np.sort(np.argsort(-lengths, kind="stable")[:n])
    if fill and 0 < len(keep) < n:
        keep = np.resize(keep, n)
    if hasattr(dataset, "select"):
        return dataset.select(keep)
    return Subset(dataset, keep.tolist())


@dataclass(frozen=True)
class Arm(Job):
    """One way to train a model on a task: a :class:`~spt.studies.machinery.job.Job` of the grid studies.

    model     : TransformerConfig (Transformer) or SSMConfig (S4 / S4D / DLR).
    train     : the supervised run: finetuning after SPT, or training from scratch.
    objective : SPT objective (masked / causal); None = train from scratch.
    pretrain  : SPT optimisation settings (required with an objective).
    pooling   : finetuning pooling override (the paper changes pooling between PT and FT on PathX).
    pretrain_val : validate pretraining on the first this many validation examples only (None: all
                of them): pretraining is evaluated every epoch, and on a small task that
                evaluation can cost a third of its time; the supervised run's early stopping and
                selection always use the whole validation set.
    lr_grid   : learning rates of the supervised run to try (each a full run; the one with the best
                validation score is reported, as App. C.1.4 does for scratch on Text), the first
                of them `train.lr`; empty = `train.lr` only.
    note      : how this arm reads the paper where the paper is ambiguous, or why a preset stands
                in for it, one line per note ("" = nothing to say); not part of the result's
                identity.
                Shown under each study's table with the departures found by
                :mod:`spt.studies.machinery.fidelity`.
    row       : (model key, task key) of the paper settings this arm follows
                (spt/paper/settings.tsv); () for presets that stand in for the paper.
    task_options : loader options the arm's task needs on top of the entry's (e.g.
                (("seq_len", 2048),) for a model that reads Text shorter); part of the cell's
                task, so of its identity.
    """

    model: Union[TransformerConfig, SSMConfig]
    train: TrainConfig
    objective: Optional[ObjectiveConfig] = None
    pretrain: Optional[TrainConfig] = None
    pooling: Optional[str] = None
    lr_grid: tuple = ()
    pretrain_val: Optional[int] = None
    note: str = ""
    row: tuple = ()
    task_options: tuple = ()

    def __post_init__(self):
        if (self.objective is None) != (self.pretrain is None):
            raise ValueError("Arm: give both objective and pretrain (SPT) or neither (scratch)")
        if any(not lr > 0 for lr in self.lr_grid):
            raise ValueError(f"Arm.lr_grid must hold positive learning rates, got {self.lr_grid}")
        if self.lr_grid and self.lr_grid[0] != self.train.lr:
            raise ValueError(f"Arm.lr_grid {self.lr_grid} must start with train.lr "
                             f"({self.train.lr:g}), so the stored TrainConfig holds an lr that "
                             f"trained: set train=replace(train, lr={self.lr_grid[0]!r})")
        if self.pretrain_val is not None and (self.pretrain is None or self.pretrain_val < 1):
            raise ValueError(f"Arm.pretrain_val={self.pretrain_val!r}: a number of validation "
                             f"examples >= 1, for an SPT arm (one with pretrain)")

    @property
    def is_spt(self) -> bool:
        return self.objective is not None

    def to_dict(self) -> dict:
        d = {"model": model_config_to_dict(self.model), "train": to_dict(self.train),
             "objective": to_dict(self.objective) if self.objective else None,
             "pretrain": to_dict(self.pretrain) if self.pretrain else None,
             "pooling": self.pooling}
        if self.lr_grid:
            d["lr_grid"] = list(self.lr_grid)
        if self.pretrain_val is not None:
            d["pretrain_val"] = self.pretrain_val
        return d

    def task_ref(self, ref: TaskRef) -> TaskRef:
        """`ref` with this arm's task_options set (theirs win over the entry's)."""
        if not self.task_options:
            return ref
        options = {**dict(ref.options), **dict(self.task_options)}
        return dataclasses.replace(ref, options=tuple(options.items()))

    def stages(self, ref: TaskRef) -> list:
        """The stages this arm trains on `ref`, as :class:`~spt.studies.machinery.stages.StageView` s."""
        from .stages import StageView
        ref = self.task_ref(ref)
        total = self.train.epochs + (self.pretrain.epochs if self.pretrain else 0)
        common = dict(model=self.model, task=ref, row=self.row, total_epochs=total)
        supervised = StageView("finetune" if self.is_spt else "scratch", self.train,
                               pooling=self.pooling, lr_grid=self.lr_grid, **common)
        if not self.is_spt:
            return [supervised]
        return [StageView("pretrain", self.pretrain, objective=self.objective, **common),
                supervised]

    @property
    def seed(self) -> int:
        return self.train.seed

    def at(self, seed: int, device: Optional[str] = None, paths=None) -> "Arm":
        pt = at_seed(self.pretrain, seed, device, paths) if self.pretrain else None
        return dataclasses.replace(self, train=at_seed(self.train, seed, device, paths), pretrain=pt)

    def dry(self, dry) -> "Arm":
        return dry.arm(self)

    def cell_config(self, ref: TaskRef) -> dict:
        out = {"task": ref.to_dict(), "arm": self.to_dict(), "seed": self.seed}
        if self.is_spt and is_pair_task(ref):
            # pretraining reads both documents of batch_size pairs a step (2 x batch_size
            # documents, as the authors' AAN collate): results from one document per batch item
            # were another computation
            out["pretrain_batch"] = "pairs"
        return out

    def run(self, task: Union[Task, TaskRef], run_dir: Path) -> xr.Dataset:
        """:func:`run_arm` of this arm."""
        return run_arm(task, self, run_dir)


def is_pair_task(ref) -> bool:
    """Whether the task `ref` names is a pair task (both documents of an example: Retrieval)."""
    from ...data.registry import TASKS
    source = TASKS.get(getattr(ref, "name", None))
    return bool(source and source.pair)


def history_curve(history: xr.Dataset, name: str, dim: str = "epoch") -> xr.DataArray:
    if name in history:
        da = history[name]
    else:
        da = xr.DataArray(np.full(history.sizes.get("epoch", 0), np.nan), dims=("epoch",),
                          coords={"epoch": history.get("epoch", np.arange(0))})
    return da.drop_vars([c for c in da.coords if c != "epoch"]).rename(epoch=dim).astype(float)


# what every cell reports of its pretraining run (NaN for scratch; accuracy for CE, r2 for L1)
PRETRAIN_VALUES = ("pretrain_steps", "pretrain_time", "pretrain_val_loss", "pretrain_val_accuracy",
                   "pretrain_val_r2")


def epochs_run(history: xr.Dataset) -> float:
    """Epochs a run trained: the epoch of its last validation (TrainConfig.eval_every may leave
    fewer history rows than epochs; a run stopped by its time budget ends in a fractional one)."""
    return float(history.epoch[-1]) if history.sizes.get("epoch", 0) else 0.0


def _stage_time(history: xr.Dataset) -> float:
    """Seconds the run trained and evaluated (the engine's running clock at its last epoch)."""
    return float(history["time"].values[-1]) if "time" in history and history.sizes.get("epoch") \
        else float("nan")


def run_arm(task: Union[Task, TaskRef], arm: Arm, run_dir: Path) -> xr.Dataset:
    """Train `arm` on `task` (SPT: pretrain -> finetune best checkpoint; else scratch), each stage
    with its own TrainConfig as it is: its seed, device and paths are those :meth:`Arm.at` set.

    task : a Task, or a TaskRef loaded here (in the worker process that runs the cell).

    Runs live in ``run_dir/{pretrain,finetune}`` or ``run_dir/scratch`` (``..._lr=<lr>`` per lr
    of a grid) and resume when rerun.
    """
    run_dir = Path(run_dir)
    task = task.load() if isinstance(task, TaskRef) else task
    m = task.spec.score
    pt_vals: dict = dict.fromkeys(PRETRAIN_VALUES)
    arrays = {}
    checkpoint = None
    if arm.is_spt:
        pt_task = task
        if arm.pretrain_val is not None:
            from torch.utils.data import Subset
            n = min(arm.pretrain_val, len(task.val))
            pt_task = Task(task.spec, task.train, Subset(task.val, range(n)), task.test)
        pt = pretrain(pt_task, arm.model, arm.objective, arm.pretrain, run_dir / "pretrain",
                      resume=True)
        pt_vals.update(pretrain_steps=pt.steps, pretrain_time=_stage_time(pt.history),
                       **{f"pretrain_val_{k}": v for k, v in pt.val_metrics.items()})
        arrays["pretrain_curve_train_loss"] = history_curve(pt.history, "train_loss", "pt_epoch")
        arrays["pretrain_curve_val_loss"] = history_curve(pt.history, "val_loss", "pt_epoch")
        checkpoint = pt.best_checkpoint
    # the supervised stage at each lr of arm.lr_grid (or train.lr alone); best validation kept
    tries = []
    for lr in arm.lr_grid or (arm.train.lr,):
        cfg = replace(arm.train, lr=lr)
        stage = "finetune" if checkpoint is not None else "scratch"
        out = run_dir / (f"{stage}_lr={lr:g}" if arm.lr_grid else stage)
        if checkpoint is not None:
            # a layer outside spt in the checkpoint is the one this arm's own config names
            r = finetune(task, checkpoint, cfg, out, pooling=arm.pooling, resume=True,
                         trust_remote_code=arm.model.family == "layer")
        else:
            model = arm.model if arm.pooling is None else replace(arm.model, pooling=arm.pooling)
            r = train_from_scratch(task, model, cfg, out, resume=True)
        tries.append((r.val_metrics[m], -len(tries), r, lr))  # ties: the first lr of the grid
    grid_steps = sum(t[2].steps for t in tries)
    grid_time = sum(_stage_time(t[2].history) for t in tries)
    _, _, r, lr = max(tries, key=lambda t: t[:2])
    values = {f"test_{m}": r.test_metrics[m], f"val_{m}": r.val_metrics[m], "steps": r.steps,
              "best_epoch": r.best_epoch, "epochs_run": epochs_run(r.history),
              "params": count_parameters(r.model), "lr": lr, "seq_len": task.spec.seq_len,
              "time": _stage_time(r.history), "grid_steps": grid_steps, "grid_time": grid_time,
              **pt_vals}
    arrays.update(curve_train_loss=history_curve(r.history, "train_loss"),
                  **{f"curve_train_{m}": history_curve(r.history, f"train_{m}"),
                     f"curve_val_{m}": history_curve(r.history, f"val_{m}")})
    ds = scalar_dataset(values, **arrays)
    stages = {"pretrain": pt.paths} if arm.is_spt else {}
    ds.attrs["provenance"] = current_provenance(paths={**stages, stage: r.paths})
    return ds


def task_ref(task: str, root: str) -> TaskRef:
    """The LRA task as the paper's models read it. Pathfinder / PathX / PathX-256: pixels scaled to
    [-1, 1] through a linear encoder, pretrained with CE over the 256 intensities of the masked
    pixels (TaskSpec.levels), as the authors' code does for S4, DLR and the Transformer."""
    return TaskRef(task, root=root)
