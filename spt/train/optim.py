"""AdamW with per-parameter hints, and the learning-rate schedules (:func:`lr_factor`, and the
plateau rule of :func:`plateau_update`).

A parameter may carry optimiser hints as an attribute, e.g. ``p._optim = {"lr": 1e-3,
"weight_decay": 0.0}`` (the SSM layers use this for their state-space parameters); a hint wins for
the keys it names. ``"lr_scale": s`` multiplies the parameter's lr (the run's, or its "lr" hint) by
s: a rate tied to the run's, as the LRU's recurrent parameters train at half of it. Without a
weight-decay hint, ``TrainConfig.wd_groups`` decides: "matrices": matrices (ndim >= 2) get
``TrainConfig.weight_decay`` and vectors (biases, norm scales) get none; embedding tables are
matrices and are decayed like the others. "all": every parameter gets ``TrainConfig.weight_decay``
(the authors' code).
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from ..config import TrainConfig


def param_groups(model: torch.nn.Module, cfg: TrainConfig) -> list[dict]:
    """Group trainable parameters by their effective (lr, weight_decay)."""
    groups: dict[tuple, dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        hint = dict(getattr(p, "_optim", {}))
        lr = hint.pop("lr", cfg.lr) * hint.pop("lr_scale", 1.0)
        decayed = cfg.wd_groups == "all" or p.ndim >= 2
        wd = hint.pop("weight_decay", cfg.weight_decay if decayed else 0.0)
        if hint:
            raise ValueError(f"parameter {name!r} has unknown optimiser hints {sorted(hint)}; "
                             f"only 'lr', 'lr_scale' and 'weight_decay' are understood")
        g = groups.setdefault((lr, wd), {"params": [], "names": [], "lr": lr, "weight_decay": wd})
        g["params"].append(p)
        g["names"].append(name)
    return list(groups.values())


def build_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW over :func:`param_groups`; torch's fused kernel when every parameter is a plain
    tensor on the CPU or a CUDA device (one pass over all parameters instead of a loop of small
    ops per parameter: on the laptop presets' models the optimiser step is 3x cheaper), its
    default implementation otherwise (sharded FSDP parameters)."""
    groups = param_groups(model, cfg)
    for g in groups:
        g.pop("names")
    params = [p for g in groups for p in g["params"]]
    fused = bool(params) and all(type(p) in (torch.Tensor, torch.nn.Parameter)
                                 and p.device.type in ("cpu", "cuda") and p.is_floating_point()
                                 for p in params)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), fused=fused or None)


def lr_factor(step: int, total: int, warmup: int, schedule: str,
              schedule_steps: Optional[int] = None, milestones: tuple = (),
              gamma: float = 0.1) -> float:
    """Multiplier of each group's base lr at optimiser step `step` (0-based).

    Linear warmup over `warmup` steps, (step + 1) / warmup, then
      "cosine"   : schedule_steps None: 1 -> 0 over the remaining total - warmup steps (0 from
                   step `total` on). schedule_steps S: transformers'
                   get_cosine_schedule_with_warmup (num_cycles 0.5) after the warmup,
                   0.5 * (1 + cos(pi * (step - warmup) / max(1, S - warmup))), whatever `total`:
                   0 at step S, rising again beyond it (the cosine is periodic). Only the warmup
                   differs from transformers', whose factor is step / warmup (0 at step 0);
      "constant", "plateau" : 1 (the plateau's own scale multiplies it: :func:`build_scheduler`);
      "multistep": gamma ** (the number of `milestones`, in optimiser steps, <= step);
      "rsqrt"    : sqrt(warmup / (step + 1)), continuous with the warmup's end and independent of
                   `total`, so a run cut short (TrainConfig.max_time) is still annealing.
    """
    if schedule == "multistep":
        cut = gamma ** sum(1 for m in milestones if m <= step)
        return cut * ((step + 1) / warmup if warmup and step < warmup else 1.0)
    if warmup and step < warmup:
        return (step + 1) / warmup
    if schedule in ("constant", "plateau"):
        return 1.0
    if schedule == "rsqrt":
        return math.sqrt(warmup / (step + 1))
    if schedule_steps is not None:
        progress = (step - warmup) / max(1, schedule_steps - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(opt: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int,
                    scale: Callable[[], float] = lambda: 1.0, steps_per_epoch: int = 1):
    """LambdaLR of :func:`lr_factor` times ``scale()`` (the plateau's scale; 1 otherwise), read at
    every step. total_steps: the steps the run takes unless its time budget cuts it
    (min(epochs * steps_per_epoch, max_steps)); TrainConfig.schedule_steps, when set, replaces it
    as the cosine's length. steps_per_epoch turns the multistep schedule's milestones (epochs)
    into optimiser steps."""
    milestones = tuple(m * steps_per_epoch for m in cfg.lr_milestones)
    return torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, total_steps, cfg.warmup_steps, cfg.schedule,
                                 cfg.schedule_steps, milestones, cfg.lr_gamma) * scale())


def apply_now(sched: torch.optim.lr_scheduler.LambdaLR) -> None:
    """Set every group's lr to the schedule's value at its current step (after its scale changed),
    so the next optimiser step uses it; ``get_last_lr()`` reports it, as after a step."""
    lrs = [base * fn(sched.last_epoch) for base, fn in zip(sched.base_lrs, sched.lr_lambdas)]
    for group, lr in zip(sched.optimizer.param_groups, lrs):
        group["lr"] = lr
    sched._last_lr = lrs


# ReduceLROnPlateau's settings that TrainConfig does not expose (the authors' and state-spaces/s4's):
# threshold 1e-4 in "rel" mode, no cooldown, min_lr 0
PLATEAU_THRESHOLD = 1e-4


def plateau_state(higher_is_better: bool) -> dict:
    """A fresh plateau: no best yet, no bad validation counted, lr scale 1."""
    return {"best": -math.inf if higher_is_better else math.inf, "bad": 0, "scale": 1.0}


def plateau_update(state: dict, value: float, higher_is_better: bool, cfg: TrainConfig) -> bool:
    """One step of torch's ReduceLROnPlateau with one validation's `value` (mode "max" when higher
    is better, else "min"): updates `state` in place; True when it reduced the lr scale."""
    if higher_is_better:
        better = value > state["best"] * (1.0 + PLATEAU_THRESHOLD)
    else:
        better = value < state["best"] * (1.0 - PLATEAU_THRESHOLD)
    if better:
        state.update(best=float(value), bad=0)
    else:  # NaN is never better, as in torch
        state["bad"] += 1
    if state["bad"] > cfg.plateau_patience:
        state.update(scale=state["scale"] * cfg.plateau_factor, bad=0)
        return True
    return False
