"""What a run is set up with before its first step: how its training split divides into batches
and steps, the validation metric that selects its best.pt, activation checkpointing on the model,
and the model's implementation paths (:mod:`spt.train.paths`)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from ..config import TrainConfig, replace
from . import distributed as D
from . import paths as path_choice
from .passes import epoch_batches, item_group, loader, to_device


def run_sizes(task, cfg: TrainConfig) -> tuple[int, int, int, int, int]:
    """(n, group, batches_per_epoch, steps_per_epoch, total_steps) of training on task.train: its
    n items, taken `group` at a time (a pair task's two documents: batch_size pairs are 2 x that
    documents), cfg.batch_size groups a batch, an optimiser step every cfg.accum_steps batches,
    for cfg.epochs epochs or cfg.max_steps steps, whichever is fewer."""
    n = len(task.train)
    if n == 0:
        raise ValueError(f"task {task.spec.name!r} has an empty training split")
    group = item_group(task.train)
    batches_per_epoch = math.ceil(n / group / cfg.batch_size)
    steps_per_epoch = math.ceil(batches_per_epoch / cfg.accum_steps)
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    return n, group, batches_per_epoch, steps_per_epoch, total_steps


def selection(objective, cfg: TrainConfig) -> tuple[str, float]:
    """(the validation metric that picks best.pt, +1.0 if higher is better else -1.0)."""
    if cfg.select is None:
        return objective.score, (1.0 if objective.higher_is_better else -1.0)
    reported = getattr(objective, "metric_names", None)
    if reported is not None and cfg.select not in reported:
        raise ValueError(select_error(cfg.select, reported, objective))
    return cfg.select, (1.0 if TrainConfig.SELECT_METRICS[cfg.select] else -1.0)


def select_error(select: str, reported, objective) -> str:
    """The message for a `select` metric that `objective` does not report (`reported`)."""
    return (f"TrainConfig.select={select!r}, but the {type(objective).__name__} objective reports "
            f"only {sorted(reported)} on validation: select one of those, or None for its default "
            f"({objective.score!r})")


def set_grad_checkpointing(model: torch.nn.Module, on: bool) -> None:
    """Switch activation checkpointing on every layer stack that supports it."""
    stacks = [m for m in model.modules() if hasattr(m, "grad_checkpointing")]
    if on and not stacks:
        raise ValueError(f"TrainConfig.grad_checkpointing=True, but {type(model).__name__} has no "
                         f"layer stack that supports it (Transformer and SSM encoders do)")
    for m in stacks:
        m.grad_checkpointing = on


def choose_paths(model: torch.nn.Module, objective, task, cfg: TrainConfig, device: torch.device,
                 gen: torch.Generator, ck: Optional[dict], *, group: int, total_steps: int,
                 env: D.DistEnv, stage: str) -> path_choice.Chosen:
    """The model's implementation paths: those the last.pt `ck` recorded when resuming (the same
    computation, so a killed run resumes bit-identical), else TrainConfig.paths, measured on the
    run's first batch (:func:`spt.train.paths.choose`)."""
    if ck is not None and ck.get("paths"):
        return path_choice.recorded(model, ck["paths"], cfg, env)
    first = epoch_batches(len(task.train), cfg.batch_size, cfg.seed, 0, group)[0]
    items = objective.epoch_data(task.train, cfg.seed, 0)
    batch = next(iter(loader(items, [first], replace(cfg, num_workers=0), device, cfg.seed)))
    log = print if env.is_main else None
    return path_choice.choose(model, objective, to_device(batch, device), cfg, device, gen,
                              total_steps=total_steps, env=env, log=log, stage=stage)
