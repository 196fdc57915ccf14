"""`spt study plan`: what every stage of every cell of a study will do, before anything trains.

A paper preset is GPU-days; its settings come from three tables and two config trees. The plan
sizes each stage from its data (the paper's split sizes when no data root is given: spt.data.sizes)
and its TrainConfig:

    examples (train / val / test), steps per epoch, the step cap (epochs x steps, or max_steps),
    warmup, the lr schedule's shape (lr at 0 / 10 / 50 / 100 % of the cap), patience in steps and
    the step from which it counts, the validation cadence and the time budget,

and flags what cannot work as intended: a warmup that does not end within the run, an empty
split; it notes a cosine of a set length (schedule_steps) that stays near its peak within the
run. ``spt study plan NAME`` exits 1 on a flag unless told otherwise. A smoke preset keeps each
stage's own warmup and schedule and runs a few steps of it, to check that every stage runs: its
warmups never end by design, so there that is a note (SMOKE_WARMUP), not a flag.

    plans = plan("04_data_scales", preset="paper")          # one StagePlan per cell and stage
    print(format_plans(plans))
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ...train.optim import lr_factor
from ..machinery.arms import is_pair_task
from ..machinery.stages import StageView
from ..registry import study as find_study

# where the plan reads the lr (fractions of the step cap)
SHAPE_POINTS = (0.0, 0.1, 0.5, 1.0)
# a cosine whose lowest lr within the run stays at or above this share of its peak is noted
COSINE_FLOOR = 0.5
# a smoke stage's unfinished warmup: a note there, a flag in every other preset
SMOKE_WARMUP = "expected in a smoke preset (a few steps of each stage, to check that it runs)"
# printed once above a smoke preset's plan
SMOKE_PLAN = ("smoke preset: every stage runs a few steps with its own warmup and schedule, to "
              "check that it runs (its numbers mean nothing); warmups that do not end are noted, "
              "not flagged")


@dataclass
class StagePlan:
    """One stage of one cell (the first seed; `seeds` cells share it)."""

    study: str
    coords: dict
    stage: str
    task: str
    examples: dict          # {"train", "val", "test"} sizes
    batch: int
    steps_per_epoch: int
    epochs: Optional[int]
    max_steps: Optional[int]
    cap: int                # optimiser steps the run takes unless stopped early or by its budget
    warmup: int
    schedule: str
    lr: float
    lr_shape: tuple         # lr at SHAPE_POINTS of the cap, as multiples of `lr`
    patience_epochs: Optional[int]
    patience_steps: Optional[int]
    patience_from: int      # the step from which patience counts (the warmup's end)
    eval_every_epochs: int
    validations: int        # full validations within the cap
    budget_h: Optional[float]
    seeds: int = 1
    flags: list = field(default_factory=list)   # what cannot work as intended
    notes: list = field(default_factory=list)   # what to know, not a fault

    @property
    def cell(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.coords.items() if k != "seed")


def _milestone_steps(cfg, spe: int) -> tuple:
    return tuple(int(m) * spe for m in (getattr(cfg, "lr_milestones", ()) or ()))


def lr_at(cfg, step: int, cap: int, spe: int) -> float:
    """The schedule's lr multiplier at optimiser step `step` of a run of `cap` steps (the plateau
    schedule's own cuts depend on validation and are not part of it)."""
    return lr_factor(step, cap, cfg.warmup_steps, cfg.schedule,
                     getattr(cfg, "schedule_steps", None),
                     _milestone_steps(cfg, spe), getattr(cfg, "lr_gamma", 0.1))


def plan_stage(study: str, coords: dict, view: StageView, examples: dict,
               seeds: int = 1, smoke: bool = False) -> StagePlan:
    """The StagePlan of one stage given its split sizes (smoke: a stage of a smoke preset, whose
    warmup is not expected to end)."""
    cfg = view.train
    # a pair task's pretraining reads documents, both of each pair: the plan counts what it reads
    group = 2 if view.stage == "pretrain" and is_pair_task(view.task) else 1
    examples = {k: group * int(v) for k, v in examples.items()}
    n = int(examples.get("train", 0))
    batch = cfg.batch_size
    spe = math.ceil(math.ceil(n / group / batch) / cfg.accum_steps) if n else 0
    by_epochs = cfg.epochs * spe
    cap = by_epochs if cfg.max_steps is None else min(by_epochs, cfg.max_steps)
    shape = tuple(lr_at(cfg, min(max(cap - 1, 0), int(round(f * cap))), cap, spe)
                  for f in SHAPE_POINTS)
    patience_steps = None if cfg.patience is None else cfg.patience * spe
    from ..machinery.stages import NO_EPOCH_CAP
    epochs = None if cfg.epochs >= NO_EPOCH_CAP else cfg.epochs
    validations = (math.ceil(cap / spe) // cfg.eval_every) if spe else 0
    p = StagePlan(study, dict(coords), view.stage, getattr(view.task, "name", "?"),
                  dict(examples), group * batch * cfg.accum_steps, spe, epochs, cfg.max_steps, cap,
                  cfg.warmup_steps, cfg.schedule, cfg.lr, shape, cfg.patience, patience_steps,
                  cfg.warmup_steps, cfg.eval_every, validations,
                  None if cfg.max_time is None else cfg.max_time / 3600, seeds)
    if group > 1:
        p.notes.append(f"documents: a step reads both documents of {batch * cfg.accum_steps} "
                       f"pairs ({p.batch} documents), an epoch all {n:,} documents of the "
                       f"{n // group:,} training pairs in {spe:,} steps, as the authors' AAN "
                       f"loader batches pairs and its collate stacks both documents "
                       f"(src/dataloaders/lra.py)")
    _check(p, cfg, smoke)
    return p


def _check(p: StagePlan, cfg, smoke: bool = False) -> None:
    for split in ("train", "val", "test"):
        if int(p.examples.get(split, 0)) == 0:
            p.flags.append(f"empty {split} split")
    if not p.cap:
        return
    if p.warmup >= p.cap:
        short = f"the warmup ({p.warmup} steps) does not end within the run's {p.cap} steps"
        if smoke:
            p.notes.append(f"{short}: {SMOKE_WARMUP}")
        else:
            p.flags.append(f"{short}: the lr never reaches its set value")
    if p.schedule == "cosine":
        lowest = min(lr_at(cfg, s, p.cap, p.steps_per_epoch)
                     for s in _samples(p.warmup, p.cap))
        # a cosine spans the run unless its length is set (schedule_steps): only a set length,
        # chosen on purpose (the authors' num_training_steps), can leave the lr near its peak
        if lowest >= COSINE_FLOOR:
            p.notes.append(f"the cosine spans its set {cfg.schedule_steps} steps (schedule_steps): "
                           f"within the run's {p.cap} steps its lr stays at or above "
                           f"{lowest:.0%} of its peak")
    if p.patience_steps is not None and p.patience_steps < p.warmup:
        p.notes.append(f"patience ({p.patience_steps} steps) is shorter than the warmup "
                       f"({p.warmup}): it counts only from step {p.patience_from}, the warmup's "
                       f"end (spt's engine)")
    reached = [m for m in (getattr(cfg, "lr_milestones", ()) or ()) if m * p.steps_per_epoch < p.cap]
    if p.schedule == "multistep" and len(reached) < len(cfg.lr_milestones):
        p.notes.append(f"multistep milestones at epochs {list(cfg.lr_milestones)}: the run "
                       f"reaches {reached or 'none'}")
    if p.schedule == "plateau":
        p.notes.append(f"plateau: the lr is cut by {cfg.plateau_factor} after "
                       f"{cfg.plateau_patience + 1} validations without improvement")


def _samples(start: int, stop: int, most: int = 4096) -> list:
    """Steps from `start` to `stop` - 1 (every one, or `most` evenly spaced and the last)."""
    start = min(start, max(stop - 1, 0))
    if stop - start <= most:
        return list(range(start, stop))
    step = (stop - start) / most
    return sorted({int(start + i * step) for i in range(most)} | {stop - 1})


def examples_of(ref, sized_by_paper: bool) -> dict:
    """Split sizes of a TaskRef: the paper's official counts through spt's split rules
    (spt.data.sizes) when `sized_by_paper`, else the data read from its root."""
    if sized_by_paper and ref.name != "digits":
        from ...data.sizes import paper_split_sizes
        options = {k: v for k, v in dict(ref.options).items() if k not in ("seq_len", "tokens")}
        sizes = paper_split_sizes(ref.name, ref.fraction, **options)
    else:
        task = ref.load()
        sizes = {"train": len(task.train), "val": len(task.val), "test": len(task.test)}
    if ref.limit is not None:
        sizes = {k: min(v, ref.limit) for k, v in sizes.items()}
    return sizes


def plan(study, *, preset: str = "paper", data_root=None,
         tasks: Optional[Sequence[str]] = None) -> list:
    """One StagePlan per stage of every cell of `study` (its name, or a :class:`Study`) at `preset`
    (one seed each: seeds share their plan). Without a data root, a paper preset is sized by the paper's
    split sizes."""
    s = find_study(study)
    by_paper = preset == "paper" and not data_root
    cells = s.stage_views(preset, data_root or "DATA", tasks)
    sizes: dict = {}
    out = []
    for coords, views, seeds in cells:
        for v in views:
            key = repr(v.task)
            if key not in sizes:
                sizes[key] = examples_of(v.task, by_paper)
            out.append(plan_stage(s.name, coords, v, sizes[key], seeds, smoke=preset == "smoke"))
    return out


def _pct(x: float) -> str:
    return f"{x:.0%}" if x >= 0.005 or x == 0 else f"{x:.1%}"


def format_plans(plans: Sequence[StagePlan]) -> str:
    """One line per stage, then its flags and notes indented beneath."""
    lines = []
    head = (f"{'cell':<46} {'stage':<8} {'train':>7} {'batch':>5} {'st/ep':>6} {'epochs':>6} "
            f"{'cap':>8} {'warmup':>6} {'schedule':<9} {'lr x (0/10/50/100% of cap)':<27} "
            f"{'patience':>9} {'from':>6} {'evals':>6} {'budget':>7}")
    lines.append(head)
    for p in plans:
        shape = " ".join(_pct(x) for x in p.lr_shape)
        patience = "-" if p.patience_steps is None else f"{p.patience_steps}"
        budget = "-" if p.budget_h is None else f"{p.budget_h:g} h"
        epochs = "-" if p.epochs is None else str(p.epochs)
        lines.append(f"{p.cell[:46]:<46} {p.stage:<8} {p.examples.get('train', 0):>7} "
                     f"{p.batch:>5} {p.steps_per_epoch:>6} {epochs:>6} {p.cap:>8} {p.warmup:>6} "
                     f"{p.schedule:<9} {p.lr:<7.0e}{shape:<20} {patience:>9} "
                     f"{p.patience_from:>6} {p.validations:>6} {budget:>7}")
        lines += [f"    FLAG: {f}" for f in p.flags]
        lines += [f"    note: {n}" for n in p.notes]
    return "\n".join(lines)


def as_dataframe(plans: Sequence[StagePlan]):
    import pandas as pd
    return pd.DataFrame([{
        "study": p.study, "cell": p.cell, "stage": p.stage, "task": p.task,
        "train": p.examples.get("train"), "val": p.examples.get("val"),
        "test": p.examples.get("test"), "batch": p.batch, "steps_per_epoch": p.steps_per_epoch,
        "epochs": p.epochs, "max_steps": p.max_steps, "cap": p.cap, "warmup": p.warmup,
        "schedule": p.schedule, "lr": p.lr,
        **{f"lr_at_{int(f * 100)}pct": x for f, x in zip(SHAPE_POINTS, p.lr_shape)},
        "patience_epochs": p.patience_epochs, "patience_steps": p.patience_steps,
        "patience_from": p.patience_from, "eval_every_epochs": p.eval_every_epochs,
        "validations": p.validations, "budget_h": p.budget_h, "seeds": p.seeds,
        "flags": " | ".join(p.flags), "notes": " | ".join(p.notes)} for p in plans])


def caps(plans: Sequence[StagePlan], by: Sequence[str] = ("task", "model")):
    """A DataFrame, one row per `by` coordinates of `plans`: the step cap, time budget (hours) and
    patience (epochs) of the scratch run beside those of the masked SPT arm's finetuning run
    (causal arms left out): whether two arms of a comparison train alike.

        caps(plan("13_modern_architectures", preset="paper"))
    """
    import pandas as pd
    rows: dict = {}
    for p in plans:
        if p.stage not in ("scratch", "finetune") or p.coords.get("init") == "causal":
            continue
        row = rows.setdefault(tuple(p.coords[k] for k in by), {})
        row.update({f"{p.stage}_cap": p.cap, f"{p.stage}_budget_h": p.budget_h,
                    f"{p.stage}_patience": p.patience_epochs})
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.names = list(by)
    return df
