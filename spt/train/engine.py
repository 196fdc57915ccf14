"""The training engine behind pretrain(), finetune() and train_from_scratch().

``fit`` trains a model with an objective (:mod:`spt.train.objectives`) on a task's train split,
evaluates on validation every ``TrainConfig.eval_every`` epochs (and after the last), keeps the
best-validation weights in ``best.pt`` (selected on ``TrainConfig.select``, or the objective's
default metric), and the full resumable state in ``last.pt`` at every validation (both written
atomically). A killed run continues from ``last.pt`` with
``resume=True`` and ends with the same weights as an uninterrupted run: the data order depends
only on (seed, epoch), and every random state is saved. A run ends at ``TrainConfig.epochs``,
``max_steps``, ``max_time`` (training time, counted across resumes; see TrainConfig for how a
budgeted run stops and resumes) or ``patience``, whichever comes first.

Inside the process group a torchrun script opens (:mod:`spt.train.distributed`) the same ``fit``
trains on every rank: each rank takes its shard of every global batch, losses are scaled so the
averaged gradient is the global batch's, statistics are summed over ranks, and rank 0 writes the
checkpoints. The training step has no host-device synchronisation on CUDA: statistics stay on
the device and are read at the end of an epoch, at checkpoints, and every 10 steps for the
progress bar when it is on (and for the ranks to agree on the time budget when there is one).

``observe(callback)`` (:mod:`spt.train.observers`) times a run: under it fit() reports every
optimiser step and every evaluation to `callback`, synchronising with the device for each
timestamp; without it nothing is timed.
"""
from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
import xarray as xr
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from .. import locks
from ..compat import LATER_TRAIN_FIELDS, cuda_rng_state, upgrade_run_state
from ..config import EXECUTION_FIELDS, TrainConfig, to_dict
from ..data.collate import pad_collate
from . import distributed as D
from .checkpoint import FORMAT, atomic_save, read_checkpoint
from .curves import Curves, grad_norm
from .observers import current_observer, observe, timestamp  # noqa: F401  (observe: public here)
from .optim import apply_now, build_optimizer, build_scheduler, param_groups, plateau_state, plateau_update


class RunInUse(RuntimeError):
    """Another live process is training in this run folder (its run.lock names it)."""


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
    """Move a collated batch to `device`. A batch without padding gets ``valid=None``, decided here
    once per batch on the CPU copy (no device sync): attention then takes its no-mask fast path
    (flash-attn, or SDPA without a mask) without ever reading the mask on the device."""
    out = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    for key in ("valid", "valid2"):  # valid2: the second document of a pair task
        v = batch.get(key)
        if v is not None and v.device.type == "cpu" and bool(v.all()):
            out[key] = None
    return out


def _autocast(device: torch.device, cfg: TrainConfig):
    return torch.autocast(device.type, dtype=torch.bfloat16,
                          enabled=cfg.amp and device.type == "cuda")


def _loader(dataset, batches: list[list[int]], cfg: TrainConfig, device, seed: int) -> DataLoader:
    """A DataLoader over fixed batches of indices; pinned memory and prefetching on CUDA."""
    workers = cfg.num_workers
    return DataLoader(dataset, batch_sampler=batches, collate_fn=pad_collate, num_workers=workers,
                      pin_memory=cfg.pin_memory and device.type == "cuda",
                      prefetch_factor=cfg.prefetch_factor if workers else None,
                      generator=_loader_generator(seed))


@torch.no_grad()
def evaluate(model, objective, dataset, cfg: TrainConfig, device=None, seed: int = 12345,
             env: D.DistEnv = D.SINGLE) -> dict:
    """Metrics of `model` on `dataset` (deterministic: fixed masking seed, no dropout).

    Under torchrun each rank evaluates a contiguous part and the summed statistics are
    all-reduced, so every rank returns the same metrics.
    """
    device = device or next(model.parameters()).device
    if len(dataset) == 0:
        raise ValueError("evaluate() got an empty dataset")
    was_training = model.training
    model.eval()
    bs = cfg.eval_batch_size or 4 * cfg.batch_size  # no gradients: bigger batches fit
    parts = D.eval_shards(len(dataset), bs, env)
    items = objective.epoch_data(dataset, seed, 0)  # masks: a function of (seed, index), any rank
    loader = _loader(items, [ix for ix, _ in parts], cfg, device, seed)
    gen = torch.Generator(device=device).manual_seed(seed + 7919 * env.rank)
    totals: dict = {}
    for batch, (_, w) in zip(loader, parts):
        with _autocast(device, cfg):
            _, stats = objective.step(model, _to(batch, device), gen)
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v.detach().float() * w
    model.train(was_training)
    return objective.metrics(D.all_reduce_sums(totals, env))


def _rng_state(gen: torch.Generator, device: torch.device) -> dict:
    s = {"torch": torch.get_rng_state(), "gen": gen.get_state()}
    if device.type == "cuda":
        s["cuda"] = torch.cuda.get_rng_state(device)
    return s


def _set_rng_state(s: dict, gen: torch.Generator, device: torch.device) -> None:
    torch.set_rng_state(s["torch"])
    gen.set_state(s["gen"])
    if "cuda" in s and device.type == "cuda":
        torch.cuda.set_rng_state(cuda_rng_state(s["cuda"], device.index or 0), device)


# TrainConfig fields a run may resume with other values of: those that change only where and how
# fast it runs, and max_time (a run stopped by its budget may resume with a larger one).
RESUMABLE_FIELDS = EXECUTION_FIELDS | {"max_time"}


def _check_same_run(ck: dict, meta: dict, cfg: TrainConfig, path: Path) -> None:
    """Resuming is only allowed into a run with the same configuration.

    A finetuning run's pretrained backbone is identified by the digest of its weights
    ("pretrained_weights"), not by the path it was read from, so a results folder that was moved
    or copied resumes; a run written before that digest existed compares the path, as it did.
    """
    saved = {"train_config": {**LATER_TRAIN_FIELDS, **(ck.get("train_config") or {})},
             **{k: ck.get(k) for k in meta}}
    now = {"train_config": to_dict(cfg), **meta}
    if "pretrained_weights" in now and saved.get("pretrained_weights") is not None:
        saved.pop("pretrained_from", None)
        now.pop("pretrained_from", None)
    elif saved.get("pretrained_weights") is None:
        now.pop("pretrained_weights", None)
    ignore = RESUMABLE_FIELDS
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
                         + "; ".join(diffs) + f"). Use another out_dir for the new configuration, or "
            f"delete {path.parent} to train it again from the start.")


def _norm(v):
    return list(v) if isinstance(v, tuple) else v


def _history_dataset(rows: list[dict], stage: str) -> xr.Dataset:
    if not rows:
        return xr.Dataset(attrs={"stage": stage})
    keys = [k for k in rows[0] if k != "epoch"]
    data = {k: ("epoch", np.array([r.get(k, np.nan) for r in rows], dtype=float)) for k in keys}
    return xr.Dataset(data, coords={"epoch": [r["epoch"] for r in rows]}, attrs={"stage": stage})


def set_grad_checkpointing(model: torch.nn.Module, on: bool) -> None:
    """Switch activation checkpointing on every layer stack that supports it."""
    stacks = [m for m in model.modules() if hasattr(m, "grad_checkpointing")]
    if on and not stacks:
        raise ValueError(f"TrainConfig.grad_checkpointing=True, but {type(model).__name__} has no "
                         f"layer stack that supports it (Transformer and SSM encoders do)")
    for m in stacks:
        m.grad_checkpointing = on


def _global_loss(loss, stats: dict, weight: float, env: D.DistEnv):
    """The loss whose DDP-averaged gradient equals the single-process gradient of the global batch:
    (summed loss of this rank) * world_size / (count summed over ranks). Stats are weighted."""
    if not env.active:
        return loss, stats
    if "loss_sum" not in stats or "n" not in stats or not stats["loss_sum"].requires_grad:
        raise ValueError("distributed training needs the objective's step() to return stats "
                         "with a differentiable summed loss 'loss_sum' and a count 'n'")
    n_global = D.all_reduce_(stats["n"].detach().float() * weight, env)
    loss = stats["loss_sum"] * (weight * env.world_size) / n_global.clamp_min(1.0)
    return loss, {k: v.detach() * weight for k, v in stats.items()}


def _selection(objective, cfg: TrainConfig) -> tuple[str, float]:
    """(the validation metric that picks best.pt, +1.0 if higher is better else -1.0)."""
    if cfg.select is None:
        return objective.score, (1.0 if objective.higher_is_better else -1.0)
    reported = getattr(objective, "metric_names", None)
    if reported is not None and cfg.select not in reported:
        raise ValueError(_select_error(cfg.select, reported, objective))
    return cfg.select, (1.0 if TrainConfig.SELECT_METRICS[cfg.select] else -1.0)


def _select_error(select: str, reported, objective) -> str:
    return (f"TrainConfig.select={select!r}, but the {type(objective).__name__} objective reports "
            f"only {sorted(reported)} on validation: select one of those, or None for its default "
            f"({objective.score!r})")


def _kept_files(*paths: Path) -> str:
    """What a failed run leaves behind, for its error message."""
    kept = [p for p in paths if p.exists()]
    if not kept:
        return ("no checkpoint had been written yet (best.pt and last.pt are first written at the "
                "end of epoch 1, last.pt also every ckpt_every steps), so nothing was saved")
    return (" and ".join(str(p) for p in kept) + (" hold" if len(kept) > 1 else " holds")
            + " the last finite state and" + (" were" if len(kept) > 1 else " was")
            + " not overwritten")


def fit(model: torch.nn.Module, objective, task, cfg: TrainConfig, out_dir, *, stage: str,
        meta: dict, resume: bool = False, on_step: Optional[Callable[[int], None]] = None,
        evaluate_test: bool = True, clock: Callable[[], float] = time.monotonic) -> RunResult:
    """Train `model` on task.train with `objective`; select on task.val; report task.test.

    out_dir : folder for best.pt / last.pt; must not hold a previous run unless resume=True.
    meta    : configs stored in every checkpoint (model_config, spec, objective, ...).
    on_step : called with the optimiser step count after each step (tests use it to interrupt).
    clock   : seconds, for the time budget (TrainConfig.max_time) and the history's "time"; tests
              pass a clock that advances with the steps.
    The run stops at the first of: cfg.epochs, cfg.max_steps, cfg.max_time, cfg.patience
    (RunResult.stopped_by says which). Inside an open process group
    (:func:`spt.train.distributed.process_group`) every rank calls fit with the same arguments;
    fit never opens or closes the group itself.
    While it trains, ``out_dir/run.lock`` (:mod:`spt.locks`) says which process does: a second
    process given the same out_dir stops with :class:`RunInUse` instead of training beside it.
    """
    env = D.current_env()
    out = Path(out_dir)
    last_path, best_path = out / "last.pt", out / "best.pt"
    if not resume and (last_path.exists() or best_path.exists()):
        raise FileExistsError(f"{out} already holds a run ({last_path.name}); pass resume=True to "
                              f"continue it, or choose another out_dir (nothing was overwritten)")
    D.barrier(env)  # every rank has looked before rank 0 writes anything
    out.mkdir(parents=True, exist_ok=True)
    lock = out / "run.lock"
    if env.is_main and not locks.acquire(lock):
        raise RunInUse(f"run folder {out} is being trained by another process "
                       f"({locks.describe(lock)}): wait for it to end, then rerun the same "
                       f"command to resume or reuse it")
    try:
        return _train(model, objective, task, cfg, out, stage=stage, meta=meta, resume=resume,
                      on_step=on_step, evaluate_test=evaluate_test, clock=clock)
    finally:
        if env.is_main:
            locks.release(lock)


def _train(model: torch.nn.Module, objective, task, cfg: TrainConfig, out: Path, *, stage: str,
           meta: dict, resume: bool, on_step: Optional[Callable[[int], None]],
           evaluate_test: bool, clock: Callable[[], float]) -> RunResult:
    """fit() in its locked run folder `out`."""
    env = D.current_env()
    observer = current_observer()
    last_path, best_path = out / "last.pt", out / "best.pt"
    device = D.device_for(cfg.device, env)
    model.to(device)
    set_grad_checkpointing(model, cfg.grad_checkpointing)
    names = [n for g in param_groups(model, cfg) for n in g["names"]]  # optimiser order
    n = len(task.train)
    if n == 0:
        raise ValueError(f"task {task.spec.name!r} has an empty training split")
    batches_per_epoch = math.ceil(n / cfg.batch_size)
    steps_per_epoch = math.ceil(batches_per_epoch / cfg.accum_steps)
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    D.reseed(cfg.seed, env, gen)
    select, sign = _selection(objective, cfg)

    # best: sign * the best selection score so far; patience_best: the same over full epochs only;
    # bad_epochs: epochs since patience_best; validated: epochs done at the last full validation;
    # plateau: schedule="plateau"'s best, count of bad validations and lr scale
    state = {"epoch": 0, "batch": 0, "step": 0, "best": -math.inf, "best_epoch": -1,
             "patience_best": -math.inf, "bad_epochs": 0, "validated": 0, "history": [],
             "done": False, "stopped_by": None, "time": 0.0, "plateau": plateau_state(sign > 0)}
    ck = None
    resumed = resume and last_path.exists()
    if resumed:
        ck = read_checkpoint(last_path)
        _check_same_run(ck, meta, cfg, last_path)
        model.load_state_dict(ck["model"])  # before wrapping: every rank starts from the file
    fwd = D.wrap(model, env, cfg.distributed, device)
    opt = build_optimizer(model, cfg)
    # the lambda reads `state` when called, so after a resume it reads the resumed plateau scale
    sched = build_scheduler(opt, cfg, total_steps, scale=lambda: state["plateau"]["scale"],
                            steps_per_epoch=steps_per_epoch)
    if ck is not None:
        D.load_optimizer_state(model, opt, ck["optimizer"], names)
        sched.load_state_dict(ck["scheduler"])
        state = upgrade_run_state(ck["state"])
        state.setdefault("plateau", plateau_state(sign > 0))  # written before schedule="plateau"
        saved_world = ck.get("world_size", 1)
        if saved_world == env.world_size:
            _set_rng_state(ck.get("rng_ranks", [ck["rng"]])[env.rank], gen, device)
        else:  # data order is exact; dropout / masking continue on fresh deterministic streams
            D.reseed(cfg.seed, env, gen, salt=state["step"] + 1)
        if state["done"] and state["stopped_by"] == "max_time" and (
                cfg.max_time is None or state["time"] < cfg.max_time):
            state.update(done=False, stopped_by=None)  # a larger budget: go on where it stopped
        if env.is_main:
            print(f"[spt] resuming {stage} from {last_path} at epoch {state['epoch']}, "
                  f"batch {state['batch']}, step {state['step']}"
                  + (f" on {env.world_size} ranks (saved on {saved_world})"
                     if saved_world != env.world_size else "")
                  + (f" (stopped by {state['stopped_by']})" if state["done"] else ""))
        del ck
    if cfg.compile:
        fwd = torch.compile(fwd)
    curves = Curves(out, cfg.log_every, state["step"] if resumed else 0,
                    {"stage": stage, **meta, "train_config": to_dict(cfg)}, env, device)
    try:

        def snapshot() -> dict:  # full weights; under FSDP a collective, so every rank calls it
            full = D.full_model_state(model) if (env.is_main or D.is_fsdp(model)) else {}
            return {"format": FORMAT, "stage": stage, **meta, "train_config": to_dict(cfg),
                    "model": full}

        def save_last(totals=None) -> None:
            state["time"] = clock() - t0
            totals = D.all_reduce_sums(dict(totals or {}), env)
            rngs = D.gather_objects(_rng_state(gen, device), env)
            snap, optim = snapshot(), D.optimizer_state(model, opt, names)
            if env.is_main:
                state["totals"] = {k: float(v) for k, v in totals.items()}
                atomic_save({**snap, "optimizer": optim, "scheduler": sched.state_dict(),
                             "rng": rngs[0], "rng_ranks": rngs, "world_size": env.world_size,
                             "state": state}, last_path)
            state.pop("totals", None)

        bad = torch.zeros((), dtype=torch.bool, device=device)
        carry: dict = {}  # this rank's training statistics of the epochs since the last validation

        def check_finite() -> None:
            if D.any_rank(bad, env):
                raise NonFiniteLossError(
                    f"{stage}: the training loss became non-finite (NaN/inf) in epoch {state['epoch']} "
                    f"near optimiser step {state['step']} (lr {sched.get_last_lr()[0]:.3g}). The run "
                    f"stopped; {_kept_files(best_path, last_path)}. Try a lower lr, warmup_steps, or "
                    f"grad_clip.")

        def out_of_time() -> bool:  # every rank must call it at the same point (a collective)
            if cfg.max_time is None:
                return False
            over = clock() - t0 >= cfg.max_time
            return D.any_rank(torch.tensor(over), env) if env.active else over

        def stop(reason: str) -> None:
            state.update(done=True, stopped_by=reason)

        def evaluate_split(split: str) -> dict:
            dataset = getattr(task, split)
            if observer is None:
                return evaluate(model, objective, dataset, cfg, device, env=env)
            start = timestamp(device)
            metrics = evaluate(model, objective, dataset, cfg, device, env=env)
            observer({"kind": "eval", "stage": stage, "split": split, "examples": len(dataset),
                      "seconds": timestamp(device) - start})
            return metrics

        model.train()
        t0 = clock() - state["time"]  # training time is counted on from the saved state
        bar = tqdm(total=total_steps, initial=state["step"], desc=stage, unit="step",
                   disable=not (cfg.progress and env.is_main), mininterval=2.0)
        while not state["done"] and state["epoch"] < cfg.epochs:
            epoch = state["epoch"]
            totals: dict = dict(state.pop("totals", {}) if env.is_main else {})  # interrupted epoch
            totals.update(carry)  # a resumed epoch's totals or the carry, never both
            carry = {}
            if state["step"] > 0 and out_of_time():  # spent in the last evaluation, or a smaller budget
                stop("max_time")
                if state["batch"] == 0 and state["validated"] == epoch:  # every epoch was validated
                    save_last()
                    break
            todo = [] if state["done"] else epoch_batches(n, cfg.batch_size, cfg.seed, epoch)
            parts = [D.shard(b, env) for b in todo[state["batch"]:]]  # none: evaluate the partial epoch
            items = objective.epoch_data(task.train, cfg.seed, epoch)  # masks: (seed, epoch, index)
            loader = _loader(items, [ix for ix, _ in parts], cfg, device, cfg.seed * 100_003 + epoch)
            for batch, (_, w) in zip(loader, parts):
                micro = (state["batch"] + 1) % cfg.accum_steps and state["batch"] + 1 < batches_per_epoch
                no_sync = fwd.no_sync if micro and hasattr(fwd, "no_sync") else nullcontext
                with no_sync():
                    with _autocast(device, cfg):
                        loss, stats = objective.step(fwd, _to(batch, device), gen)
                    loss, stats = _global_loss(loss, stats, w, env)
                    curves.batch(batch, loss)
                    bad |= ~torch.isfinite(loss.detach())
                    (loss / cfg.accum_steps).backward()
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0) + v.detach().float()
                state["batch"] += 1
                if micro:
                    continue
                if device.type == "cpu":
                    check_finite()
                norm, lr = None, sched.get_last_lr()[0]
                if cfg.grad_clip:
                    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                elif curves.wants_grad_norm(state["step"] + 1):
                    norm = grad_norm(model)
                opt.step()
                sched.step()
                opt.zero_grad(set_to_none=True)
                state["step"] += 1
                curves.step(state["step"], lr, norm)
                if observer is not None:
                    observer({"kind": "step", "stage": stage, "step": state["step"],
                              "time": timestamp(device)})
                if on_step is not None:
                    on_step(state["step"])
                bar.update(1)
                if cfg.progress and env.is_main and state["step"] % 10 == 0:
                    bar.set_postfix(epoch=epoch + 1, loss=f"{float(loss.detach()):.4f}", refresh=False)
                if cfg.ckpt_every and state["step"] % cfg.ckpt_every == 0:
                    check_finite()
                    save_last(totals)
                if cfg.max_steps is not None and state["step"] >= cfg.max_steps:
                    stop("max_steps")
                    break
                # under torchrun the ranks agree on the clock every 10 steps (a collective, a sync)
                if (not env.active or state["step"] % 10 == 0) and out_of_time():
                    stop("max_time")
                    break
            check_finite()
            # stopped by the clock inside an epoch: the epoch stays open, so a larger budget resumes it
            partial = state["stopped_by"] == "max_time" and state["batch"] < batches_per_epoch
            if not (partial or state["done"] or epoch + 1 >= cfg.epochs
                    or (epoch + 1) % cfg.eval_every == 0):  # no validation (nor last.pt) this epoch
                carry = totals
                state["epoch"] += 1
                state["batch"] = 0
                continue
            reduced = D.all_reduce_sums(totals, env)
            train_m = objective.metrics(reduced) if reduced else {}
            val_m = evaluate_split("val")
            if select not in val_m:
                raise ValueError(_select_error(select, val_m, objective))
            bar.set_postfix({"epoch": epoch + 1, f"val_{select}": f"{val_m[select]:.4f}"})
            score = sign * val_m[select]
            if cfg.schedule == "plateau" and not partial:  # the reduced lr applies from the next step
                if plateau_update(state["plateau"], val_m[select], sign > 0, cfg):
                    apply_now(sched)
            done_epochs = epoch + state["batch"] / batches_per_epoch if partial else epoch + 1
            row = {"epoch": done_epochs, "step": state["step"], "lr": sched.get_last_lr()[0],
                   "time": clock() - t0,
                   **{f"train_{k}": v for k, v in train_m.items()},
                   **{f"val_{k}": v for k, v in val_m.items()}}
            state["history"].append(row)
            curves.validation(row)
            if score > state["best"] or state["best_epoch"] < 0:  # the first evaluation always counts
                state.update(best=score if not math.isnan(score) else -math.inf, best_epoch=done_epochs)
                snap = snapshot()
                if env.is_main:
                    atomic_save({**snap, "epoch": done_epochs, "val_metrics": val_m, "select": select},
                                best_path)
            if not partial:
                if score > state["patience_best"]:
                    state.update(patience_best=score, bad_epochs=0)
                else:  # the epochs since the last validation, less those that ended in the warmup
                    state["bad_epochs"] += sum(
                        1 for e in range(state["validated"] + 1, epoch + 2)
                        if min(e * steps_per_epoch, state["step"]) >= cfg.warmup_steps)
                state["validated"] = epoch + 1
                if cfg.patience is not None and state["bad_epochs"] >= cfg.patience:
                    stop("patience")
                state["epoch"] += 1
                state["batch"] = 0
            save_last(totals if partial else None)

        bar.close()
        del fwd  # the DDP wrapper holds the process group: nothing may keep it once fit returns
        D.barrier(env)  # rank 0 has written best.pt
        best = read_checkpoint(best_path)
        D.load_full_model_state(model, best["model"])
        model.to(device)
        test_m = evaluate_split("test") if evaluate_test else {}
        stopped_by = state["stopped_by"] or ("epochs" if state["epoch"] >= cfg.epochs else "")
        history = _history_dataset(state["history"], stage)
        history.attrs.update(select=select, stopped_by=stopped_by)
        return RunResult(model=model, history=history, best_checkpoint=best_path,
                         best_epoch=best["epoch"], val_metrics=best["val_metrics"],
                         test_metrics=test_m, steps=state["step"], select=select,
                         stopped_by=stopped_by)
    finally:
        curves.close()
