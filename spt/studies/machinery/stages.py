"""What one stage of a study cell trains, seen from outside: the view that the plan
(:mod:`spt.studies.commands.plan`) sizes and the fidelity check
(:mod:`spt.studies.machinery.fidelity`) compares with the paper's settings.

A cell trains one to three stages: ``pretrain`` then ``finetune`` (SPT), or ``scratch``; study 05
finetunes Pythia (one ``finetune`` stage), study 06 only pretrains. Every kind of job a study runs
turns itself into a list of :class:`StageView` (``Arm.stages``, the study modules' own jobs), and
:func:`stage_values` reads the settings a paper preset is checked on (the fields of
:data:`spt.studies.machinery.fidelity.FIELDS`).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Optional

from ...config import ObjectiveConfig, TrainConfig

# epochs at or above this mean "no epoch cap": the run is bounded by max_steps or its time budget
NO_EPOCH_CAP = 10**6
REGRESSION_TASKS = ("bidmc",)


@dataclass(frozen=True)
class StageView:
    """One stage of a cell.

    stage     : "pretrain", "finetune" or "scratch".
    train     : its TrainConfig.
    model     : the model config it trains (TransformerConfig, SSMConfig, LMConfig, ...).
    task      : the TaskRef it reads (its name, fraction and loader options).
    objective : the SPT objective (pretrain only).
    pooling, head : finetuning overrides of the model config's own (None: the model's).
    lr_grid   : learning rates tried as full runs (the best on validation kept); () = train.lr.
    row       : (model key, task key) of the paper settings this stage is checked against
                (spt/paper/settings.tsv); () for presets that stand in for the paper.
    total_epochs : epochs of the whole cell (pretraining + finetuning), for budgets split between
                stages (study 08).
    """

    stage: str
    train: TrainConfig
    model: object
    task: object
    objective: Optional[ObjectiveConfig] = None
    pooling: Optional[str] = None
    head: Optional[str] = None
    lr_grid: tuple = ()
    row: tuple = ()
    total_epochs: Optional[int] = None


def _loader_default(task: str, option: str):
    """The default of a task loader's keyword `option` (e.g. text's seq_len), or None."""
    from ...data.registry import TASKS
    if task not in TASKS:
        return None
    fn = TASKS[task].loader
    try:
        p = inspect.signature(fn).parameters.get(option)
    except (TypeError, ValueError):
        return None
    return None if p is None or p.default is inspect.Parameter.empty else p.default


# How spt holds out validation data per loader (what the `validation` field compares).
VALIDATION = {"listops": "official", "retrieval": "official", "text": "train10%",
              "image": "train10%", "scifar": "train10%", "pathfinder": "split10%",
              "pathx": "split10%", "pathx256": "split10%", "speech": "official",
              "bidmc": "train1/7"}


def model_values(m) -> dict:
    """The architecture fields of a model config (None where the config has no such field)."""
    ssm = getattr(m, "family", None) == "ssm"
    out = {"layers": getattr(m, "n_layers", None), "width": getattr(m, "d_model", None),
           "heads": getattr(m, "n_heads", None), "ff": getattr(m, "d_ff", None),
           "positions": getattr(m, "positions", None) if not ssm else None,
           "state": None, "n_ssm": None, "norm": None, "prenorm": None, "ssm_lr": None,
           "dt_lr": None, "dt_min": None, "dt_max": None, "tie_dropout": None}
    if ssm:
        out.update(state=m.d_state, norm=m.norm, prenorm=m.prenorm, ssm_lr=m.lr,
                   dt_lr=m.dt_rate, dt_min=m.dt_min, dt_max=m.dt_max, tie_dropout=m.tie_dropout,
                   n_ssm=m.ssm_copies)
    return out


def stage_values(v: StageView) -> dict:
    """{field: value} of a stage, in the units of spt/paper/settings.tsv (batch = examples per
    optimiser step, budget in hours, epochs None without a cap, ...)."""
    t, m = v.train, v.model
    options = dict(getattr(v.task, "options", ()) or ())
    task = getattr(v.task, "name", "")
    epochs = None if t.epochs >= NO_EPOCH_CAP else t.epochs
    select = t.select
    if select is None:
        select = "loss" if v.stage == "pretrain" else (
            "r2" if task in REGRESSION_TASKS else "accuracy")
    out = {
        "lr": t.lr, "lrs": tuple(v.lr_grid) if v.lr_grid else None,
        "batch": t.batch_size * t.accum_steps, "wd": t.weight_decay,
        "wd_groups": getattr(t, "wd_groups", "matrices"), "warmup": t.warmup_steps,
        "schedule": t.schedule, "schedule_steps": getattr(t, "schedule_steps", None),
        "plateau_patience": getattr(t, "plateau_patience", None),
        "plateau_factor": getattr(t, "plateau_factor", None),
        "lr_milestones": tuple(getattr(t, "lr_milestones", ()) or ()) or None,
        "lr_gamma": getattr(t, "lr_gamma", None),
        "epochs": epochs, "max_steps": t.max_steps, "betas": tuple(t.betas),
        "grad_clip": t.grad_clip or None,
        "budget_h": None if t.max_time is None else t.max_time / 3600,
        "patience": t.patience, "selection": select,
        "dropout": getattr(m, "dropout", None),
        **model_values(m),
        "pooling": v.pooling or getattr(m, "pooling", None),
        "head": v.head or getattr(m, "head", None),
        "causal": getattr(m, "causal", None), "glu": getattr(m, "glu", None),
        "seq_len": options.get("seq_len", _loader_default(task, "seq_len")),
        "tokens": bool(options.get("tokens", False)),
        "validation": VALIDATION.get(task),
        "budget_epochs": v.total_epochs,
    }
    if v.objective is not None:
        masked = v.objective.kind == "masked"
        out.update(objective=v.objective.kind, loss=v.objective.loss,
                   mask_ratio=v.objective.mask_ratio if masked else None)
    return out
