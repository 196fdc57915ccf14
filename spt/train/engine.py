"""The training engine behind pretrain(), finetune() and train_from_scratch().

``fit`` trains a model with an objective (:mod:`spt.train.objectives`) on a task's train split,
evaluates on validation after every epoch, keeps the best-validation weights in ``best.pt``, and
the full resumable state in ``last.pt`` (both written atomically). A killed run continues from
``last.pt`` with ``resume=True`` and ends with the same weights as an uninterrupted run: the data
order depends only on (seed, epoch), and every random state is saved.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
import xarray as xr
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from ..config import TrainConfig, to_dict
from ..data.collate import pad_collate
from .checkpoint import FORMAT, atomic_save
from .optim import build_optimizer, build_scheduler


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; nothing was saved after it did."""


@dataclass
class RunResult:
    """What a training run returns.

    model        : the model with its best-validation weights loaded.
    history      : xarray Dataset over dim "epoch" (train / val metrics, lr, optimiser step, time).
    best_checkpoint : path of best.pt.
    val_metrics, test_metrics : metrics of the best weights (test is empty when not evaluated).
    steps        : optimiser steps taken in the whole run.
    """

    model: torch.nn.Module
    history: xr.Dataset
    best_checkpoint: Path
    best_epoch: int
    val_metrics: dict
    test_metrics: dict = field(default_factory=dict)
    steps: int = 0


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """The shuffled batches of one epoch; depends only on (n, batch_size, seed, epoch)."""
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    perm = torch.randperm(n, generator=g).tolist()
    return [perm[i:i + batch_size] for i in range(0, n, batch_size)]


def _loader_generator(seed: int) -> torch.Generator:
    """A DataLoader draws its workers' base seed from its generator, or else from the global RNG;
    giving it its own keeps the global RNG (dropout) identical in a resumed run."""
    return torch.Generator().manual_seed(seed)


def _to(batch: dict, device) -> dict:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _autocast(device: torch.device, cfg: TrainConfig):
    return torch.autocast(device.type, dtype=torch.bfloat16,
                          enabled=cfg.amp and device.type == "cuda")


@torch.no_grad()
def evaluate(model, objective, dataset, cfg: TrainConfig, device=None, seed: int = 12345) -> dict:
    """Metrics of `model` on `dataset` (deterministic: fixed masking seed, no dropout)."""
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    bs = cfg.eval_batch_size or 4 * cfg.batch_size  # no gradients: bigger batches fit
    loader = DataLoader(dataset, batch_size=bs, shuffle=False, collate_fn=pad_collate,
                        num_workers=cfg.num_workers, generator=_loader_generator(seed))
    gen = torch.Generator(device=device).manual_seed(seed)
    totals: dict = {}
    for batch in loader:
        with _autocast(device, cfg):
            _, stats = objective.step(model, _to(batch, device), gen)
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v.detach().float()
    model.train(was_training)
    if not totals:
        raise ValueError("evaluate() got an empty dataset")
    return objective.metrics(totals)


def _rng_state(gen: torch.Generator) -> dict:
    s = {"torch": torch.get_rng_state(), "gen": gen.get_state()}
    if torch.cuda.is_available():
        s["cuda"] = torch.cuda.get_rng_state_all()
    return s


def _set_rng_state(s: dict, gen: torch.Generator) -> None:
    torch.set_rng_state(s["torch"])
    gen.set_state(s["gen"])
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def _check_same_run(ck: dict, meta: dict, cfg: TrainConfig, path: Path) -> None:
    """Resuming is only allowed into a run with the same configuration."""
    saved = {"train_config": ck.get("train_config"), **{k: ck.get(k) for k in meta}}
    now = {"train_config": to_dict(cfg), **meta}
    ignore = {"progress", "num_workers", "device", "eval_batch_size"}
    diffs = []
    for key in now:
        a, b = saved.get(key), now[key]
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += [f"{key}.{f}: saved {a.get(f)!r}, now {b.get(f)!r}" for f in sorted(set(a) | set(b))
                      if f not in ignore and _norm(a.get(f)) != _norm(b.get(f))]
        elif _norm(a) != _norm(b):
            diffs.append(f"{key}: saved {a!r}, now {b!r}")
    if diffs:
        raise ValueError(f"cannot resume {path}: it was written with another configuration ("
                         + "; ".join(diffs) + "). Use another out_dir for the new configuration.")


def _norm(v):
    return list(v) if isinstance(v, tuple) else v


def _history_dataset(rows: list[dict], stage: str) -> xr.Dataset:
    if not rows:
        return xr.Dataset(attrs={"stage": stage})
    keys = [k for k in rows[0] if k != "epoch"]
    data = {k: ("epoch", np.array([r.get(k, np.nan) for r in rows], dtype=float)) for k in keys}
    return xr.Dataset(data, coords={"epoch": [r["epoch"] for r in rows]}, attrs={"stage": stage})


def fit(model: torch.nn.Module, objective, task, cfg: TrainConfig, out_dir, *, stage: str,
        meta: dict, resume: bool = False, on_step: Optional[Callable[[int], None]] = None,
        evaluate_test: bool = True) -> RunResult:
    """Train `model` on task.train with `objective`; select on task.val; report task.test.

    out_dir : folder for best.pt / last.pt; must not hold a previous run unless resume=True.
    meta    : configs stored in every checkpoint (model_config, spec, objective, ...).
    on_step : called with the optimiser step count after each step (tests use it to interrupt).
    """
    out = Path(out_dir)
    last_path, best_path = out / "last.pt", out / "best.pt"
    if not resume and (last_path.exists() or best_path.exists()):
        raise FileExistsError(f"{out} already holds a run ({last_path.name}); pass resume=True to "
                              f"continue it, or choose another out_dir (nothing was overwritten)")
    out.mkdir(parents=True, exist_ok=True)
    device = pick_device(cfg.device)
    model.to(device)
    opt = build_optimizer(model, cfg)
    n = len(task.train)
    if n == 0:
        raise ValueError(f"task {task.spec.name!r} has an empty training split")
    batches_per_epoch = math.ceil(n / cfg.batch_size)
    steps_per_epoch = math.ceil(batches_per_epoch / cfg.accum_steps)
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    sched = build_scheduler(opt, cfg, total_steps)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    sign = 1.0 if objective.higher_is_better else -1.0

    state = {"epoch": 0, "batch": 0, "step": 0, "best": -math.inf, "best_epoch": -1,
             "bad_evals": 0, "history": [], "done": False, "time": 0.0}
    if resume and last_path.exists():
        ck = torch.load(last_path, map_location="cpu", weights_only=False)
        _check_same_run(ck, meta, cfg, last_path)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        sched.load_state_dict(ck["scheduler"])
        _set_rng_state(ck["rng"], gen)
        state = ck["state"]
        print(f"[spt] resuming {stage} from {last_path} at epoch {state['epoch']}, "
              f"batch {state['batch']}, step {state['step']}")

    def snapshot() -> dict:
        return {"format": FORMAT, "stage": stage, **meta, "train_config": to_dict(cfg),
                "model": {k: v.detach().cpu() for k, v in model.state_dict().items()}}

    def save_last(totals=None) -> None:
        state["totals"] = {k: float(v) for k, v in (totals or {}).items()}
        atomic_save({**snapshot(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                     "rng": _rng_state(gen), "state": state}, last_path)

    bad = torch.zeros((), dtype=torch.bool, device=device)

    def check_finite(loss_value=None) -> None:
        if bool(bad):
            raise NonFiniteLossError(
                f"{stage}: the training loss became non-finite (NaN/inf) in epoch {state['epoch']} "
                f"near optimiser step {state['step']} (lr {sched.get_last_lr()[0]:.3g}). The run "
                f"stopped; {best_path} and {last_path} hold the last finite state and were not "
                f"overwritten. Try a lower lr, warmup_steps, or grad_clip.")

    model.train()
    t0 = time.time() - state["time"]
    bar = tqdm(total=total_steps, initial=state["step"], desc=stage, unit="step",
               disable=not cfg.progress, mininterval=2.0)
    while not state["done"] and state["epoch"] < cfg.epochs:
        epoch = state["epoch"]
        batches = epoch_batches(n, cfg.batch_size, cfg.seed, epoch)[state["batch"]:]
        loader = DataLoader(task.train, batch_sampler=batches, collate_fn=pad_collate,
                            num_workers=cfg.num_workers, pin_memory=device.type == "cuda",
                            generator=_loader_generator(cfg.seed * 100_003 + epoch))
        totals: dict = dict(state.pop("totals", {}))  # partial sums of an interrupted epoch
        for batch in loader:
            with _autocast(device, cfg):
                loss, stats = objective.step(model, _to(batch, device), gen)
            bad |= ~torch.isfinite(loss.detach())
            (loss / cfg.accum_steps).backward()
            for k, v in stats.items():
                totals[k] = totals.get(k, 0) + v.detach().float()
            state["batch"] += 1
            if state["batch"] % cfg.accum_steps and state["batch"] < batches_per_epoch:
                continue
            if device.type == "cpu":
                check_finite()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            state["step"] += 1
            if on_step is not None:
                on_step(state["step"])
            bar.update(1)
            if cfg.progress and state["step"] % 10 == 0:
                bar.set_postfix(epoch=epoch + 1, loss=f"{float(loss):.4f}", refresh=False)
            if cfg.ckpt_every and state["step"] % cfg.ckpt_every == 0:
                check_finite()
                state["time"] = time.time() - t0
                save_last(totals)
            if cfg.max_steps is not None and state["step"] >= cfg.max_steps:
                state["done"] = True
                break
        check_finite()
        train_m = objective.metrics(totals) if totals else {}
        val_m = evaluate(model, objective, task.val, cfg, device)
        bar.set_postfix({"epoch": epoch + 1, f"val_{objective.score}": f"{val_m[objective.score]:.4f}"})
        score = sign * val_m[objective.score]
        row = {"epoch": epoch + 1, "step": state["step"], "lr": sched.get_last_lr()[0],
               "time": time.time() - t0,
               **{f"train_{k}": v for k, v in train_m.items()},
               **{f"val_{k}": v for k, v in val_m.items()}}
        state["history"].append(row)
        if score > state["best"]:
            state.update(best=score, best_epoch=epoch + 1, bad_evals=0)
            atomic_save({**snapshot(), "epoch": epoch + 1, "val_metrics": val_m}, best_path)
        else:
            state["bad_evals"] += 1
        if cfg.patience is not None and state["bad_evals"] >= cfg.patience:
            state["done"] = True
        state["epoch"] += 1
        state["batch"] = 0
        state["time"] = time.time() - t0
        save_last()

    bar.close()
    best = torch.load(best_path, map_location="cpu", weights_only=False)
    model.load_state_dict(best["model"])
    model.to(device)
    test_m = evaluate(model, objective, task.test, cfg, device) if evaluate_test else {}
    return RunResult(model=model, history=_history_dataset(state["history"], stage),
                     best_checkpoint=best_path, best_epoch=best["epoch"],
                     val_metrics=best["val_metrics"], test_metrics=test_m, steps=state["step"])
