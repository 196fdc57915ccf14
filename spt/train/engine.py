"""The training engine behind pretrain(), finetune() and train_from_scratch().

``fit`` trains a model with an objective (:mod:`spt.train.objectives`) on a task's train split,
evaluates on validation every ``TrainConfig.eval_every`` epochs (and after the last), keeps the
best-validation weights in ``best.pt`` (selected on ``TrainConfig.select``, or the objective's
default metric), and the full resumable state in ``last.pt`` at every validation (both written
atomically). A killed run continues from ``last.pt`` with
``resume=True`` and ends with the same weights as an uninterrupted run: the data order depends
only on (seed, epoch), and every random state is saved. A run ends at ``TrainConfig.epochs``,
``max_steps``, ``max_time`` (training time, counted across resumes; see TrainConfig for how a
budgeted run stops and resumes) or ``patience``, whichever comes first (:meth:`_Run.stopping`).

A run reads top to bottom in :class:`_Run`: ``restore`` (a fresh start or last.pt), then epochs
(``epoch`` -> ``train_batches`` -> ``accumulate`` / ``optimizer_step``), each ending in
``validate_and_save`` when a validation is due, then ``finish``. Its counters are a
:class:`~spt.train.run_state.RunState`.

Inside the process group a torchrun script opens (:mod:`spt.train.distributed`) the same ``fit``
trains on every rank: each rank takes its shard of every global batch, losses are scaled so the
averaged gradient is the global batch's, statistics are summed over ranks, and rank 0 writes the
checkpoints. The training step has no host-device synchronisation on CUDA: statistics stay on
the device and are read at the end of an epoch, at checkpoints, and every 10 steps for the
progress bar when it is on (and for the ranks to agree on the time budget when there is one).
Before the first step the model's implementation paths are set (``TrainConfig.paths``: measured,
checked and cached by :mod:`spt.train.paths`; a resumed run takes those its last.pt recorded, so
it resumes bit-identical). With the step's path "graphs" each micro-batch's forward and backward
run through :class:`~spt.train.graphs.GraphedStep` (static buffers, replayed as a CUDA graph on
CUDA); the optimiser step stays the eager one. The paths are stored in every checkpoint and in
``RunResult.paths``.

``observe(callback)`` (:mod:`spt.train.observers`) times a run: under it fit() reports every
optimiser step and every evaluation to `callback`, synchronising with the device for each
timestamp; without it nothing is timed.
"""
from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Optional

import torch
from tqdm.auto import tqdm

from ..config import TrainConfig, to_dict
from ..data.registry import augmentation_for, augmented
from ..data.task import data_identity
from . import distributed as D
from .checkpoint import FORMAT, atomic_save, read_checkpoint
from .curves import Curves, grad_norm
from .graphs import GraphedStep
from .observers import current_observer, observe, timestamp  # noqa: F401  (observe: public here)
from .optim import apply_now, build_optimizer, build_scheduler, param_groups, plateau_state, plateau_update
from .passes import autocast, check_finite_inputs, epoch_batches, evaluate, loader, to_device
from .result import RunResult, history_dataset, non_finite_error
from .run_folder import open_run_folder
from .run_setup import choose_paths, run_sizes, select_error, selection, set_grad_checkpointing
from .run_state import RunState, check_same_run, restore_rng, resume_note, rng_state


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
    While it trains, ``out_dir/run.lock`` says which process does (:mod:`spt.train.run_folder`): a
    second process given the same out_dir stops with RunInUse instead of training beside it.
    """
    out = Path(out_dir)
    with open_run_folder(out, resume, D.current_env()):
        run = _Run(model, objective, task, cfg, out, stage=stage, meta=meta, on_step=on_step,
                   clock=clock)
        run.restore(resume)
        return run.train(evaluate_test)


class _Run:
    """One fit() in its locked run folder `out`: what it trains with, its RunState, and the parts
    of training as methods, in the order a run calls them."""

    def __init__(self, model: torch.nn.Module, objective, task, cfg: TrainConfig, out: Path, *,
                 stage: str, meta: dict, on_step: Optional[Callable[[int], None]],
                 clock: Callable[[], float]):
        self.env, self.observer = D.current_env(), current_observer()
        self.model, self.objective, self.task, self.cfg = model, objective, task, cfg
        self.out, self.stage, self.on_step, self.clock = out, stage, on_step, clock
        # what the checkpoints store and a resume checks: the configs, and the data's identity
        self.meta = {**meta, "data": data_identity(task)}
        self.last_path, self.best_path = out / "last.pt", out / "best.pt"
        self.device = D.device_for(cfg.device, self.env)
        model.to(self.device)
        set_grad_checkpointing(model, cfg.grad_checkpointing)
        self.names = [n for g in param_groups(model, cfg) for n in g["names"]]  # optimiser order
        self.n, self.group, self.batches_per_epoch, self.steps_per_epoch, self.total_steps = \
            run_sizes(task, cfg)
        if cfg.augment:
            augmentation_for(task.spec)  # a task without one is refused before any work
        self.gen = torch.Generator(device=self.device).manual_seed(cfg.seed)
        D.reseed(cfg.seed, self.env, self.gen)
        self.select, self.sign = selection(objective, cfg)
        self.state = RunState(plateau=plateau_state(self.sign > 0))
        self.bad = torch.zeros((), dtype=torch.bool, device=self.device)  # a non-finite loss seen
        self.carry: dict = {}  # this rank's training statistics of the epochs since the last validation
        self.resumed = False

    # ------------------------------------------------------------------ restore
    def restore(self, resume: bool) -> None:
        """The optimiser and schedule, fresh or (resume=True and a last.pt exists) as saved."""
        ck = read_checkpoint(self.last_path) if resume and self.last_path.exists() else None
        if ck is not None:
            check_same_run(ck, self.meta, self.cfg, self.last_path)
            self.model.load_state_dict(ck["model"])  # before wrapping: every rank starts from the file
        self.chosen = choose_paths(self.model, self.objective, self.task, self.cfg, self.device,
                                   self.gen, ck, group=self.group, total_steps=self.total_steps,
                                   env=self.env, stage=self.stage)
        self.fwd = D.wrap(self.model, self.env, self.cfg.distributed, self.device)
        self.opt = build_optimizer(self.model, self.cfg)
        # the scale is read at every step, so after a resume it is the resumed plateau's
        self.sched = build_scheduler(self.opt, self.cfg, self.total_steps,
                                     scale=lambda: self.state.plateau["scale"],
                                     steps_per_epoch=self.steps_per_epoch)
        if ck is not None:
            self._resume_from(ck)
        if self.cfg.compile:
            self.fwd = torch.compile(self.fwd)
        self.graphed = (GraphedStep(self.model, self.fwd, self.objective, self.cfg, self.device,
                                    self.gen, self.env)
                        if self.chosen.paths.get("step") == "graphs" else None)

    def _resume_from(self, ck: dict) -> None:
        """The optimiser, schedule, RunState and RNG states as last.pt `ck` saved them."""
        D.load_optimizer_state(self.model, self.opt, ck["optimizer"], self.names)
        self.sched.load_state_dict(ck["scheduler"])
        self.state = s = RunState.from_saved(ck["state"], plateau_state(self.sign > 0))
        self.resumed = True
        saved_world = restore_rng(ck, self.gen, self.device, self.cfg.seed, s.step, self.env)
        s.reopen(self.cfg.max_time)
        if self.env.is_main:
            print(resume_note(s, self.stage, self.last_path, self.env.world_size, saved_world))

    # ------------------------------------------------------------------ the run
    def train(self, evaluate_test: bool) -> RunResult:
        """Epochs until the stopping rule or cfg.epochs ends the run, then :meth:`finish`."""
        cfg, env = self.cfg, self.env
        self.curves = Curves(self.out, cfg.log_every, self.state.step if self.resumed else 0,
                             {"stage": self.stage, **self.meta, "train_config": to_dict(cfg)},
                             env, self.device)
        try:
            self.model.train()
            self.t0 = self.clock() - self.state.time  # training time is counted on from the saved state
            self.bar = tqdm(total=self.total_steps, initial=self.state.step, desc=self.stage,
                            unit="step", disable=not (cfg.progress and env.is_main), mininterval=2.0)
            while not self.state.done and self.state.epoch < cfg.epochs:
                if not self.epoch():
                    break
            return self.finish(evaluate_test)
        finally:
            self.curves.close()
            if self.graphed is not None:
                self.graphed.close()

    def epoch(self) -> bool:
        """(The rest of) epoch state.epoch, then its validation when one is due: every eval_every
        epochs, after the last, and when the run stops. False: the run ended before the epoch,
        with every epoch validated and last.pt written."""
        s, cfg = self.state, self.cfg
        epoch = s.epoch
        saved, s.totals = s.totals, None  # an interrupted epoch's statistics (summed, on rank 0)
        totals: dict = dict(saved or {}) if self.env.is_main else {}
        totals.update(self.carry)  # a resumed epoch's totals or the carry, never both
        self.carry = {}
        reason = self.stopping("epoch")  # the last evaluation spent the budget, or a smaller one
        if reason is not None:
            s.stop(reason)
            if s.batch == 0 and s.validated == epoch:  # nothing trained since the last validation
                self.save_last()
                return False
        if not s.done:
            self.train_batches(epoch, totals)
        self.check_finite()
        # stopped by the clock inside an epoch: the epoch stays open, so a larger budget resumes it
        partial = s.stopped_by == "max_time" and s.batch < self.batches_per_epoch
        if partial or s.done or epoch + 1 >= cfg.epochs or (epoch + 1) % cfg.eval_every == 0:
            self.validate_and_save(epoch, totals, partial)
        else:  # no validation (nor last.pt) this epoch
            self.carry = totals
            s.next_epoch()
        return True

    def train_batches(self, epoch: int, totals: dict) -> None:
        """The rest of the epoch's batches (this rank's shard of each), an optimiser step every
        accum_steps of them, until the epoch ends or the stopping rule ends the run."""
        s, cfg = self.state, self.cfg
        todo = epoch_batches(self.n, cfg.batch_size, cfg.seed, epoch, self.group)
        parts = [D.shard(b, self.env) for b in todo[s.batch:]]
        train = self.task.train
        if cfg.augment:  # a fresh label-preserving draw per (seed, epoch, example)
            train = augmented(train, self.task.spec, cfg.seed, epoch)
        items = self.objective.epoch_data(train, cfg.seed, epoch)  # masks: (seed, epoch, index)
        batches = loader(items, [ix for ix, _ in parts], cfg, self.device, cfg.seed * 100_003 + epoch)
        for batch, (ix, w) in zip(batches, parts):
            check_finite_inputs(batch, ix, "train")
            micro = bool((s.batch + 1) % cfg.accum_steps) and s.batch + 1 < self.batches_per_epoch
            loss = self.accumulate(batch, w, micro, totals)
            s.batch += 1
            if micro:
                continue
            self.optimizer_step(epoch, loss, totals)
            reason = self.stopping("step")
            if reason is not None:
                s.stop(reason)
                return

    def accumulate(self, batch: dict, weight: float, micro: bool, totals: dict) -> torch.Tensor:
        """Forward and backward of one micro-batch (`weight`: its share of the global batch); its
        statistics are added to `totals`. micro: more micro-batches follow before the step (DDP
        skips its gradient all-reduce)."""
        if self.graphed is not None:  # the same step over static buffers, replayed on CUDA
            loss, stats = self.graphed(to_device(batch, self.device))
        else:
            loss, stats = self._eager_step(batch, weight, micro)
        self.curves.batch(batch, loss)
        self.bad |= ~torch.isfinite(loss.detach())
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v.detach().float()
        return loss

    def _eager_step(self, batch: dict, weight: float, micro: bool) -> tuple:
        """(loss, stats) of one micro-batch, its backward taken (DDP's all-reduce skipped while
        `micro`)."""
        no_sync = self.fwd.no_sync if micro and hasattr(self.fwd, "no_sync") else nullcontext
        with no_sync():
            with autocast(self.device, self.cfg):
                loss, stats = self.objective.step(self.fwd, to_device(batch, self.device), self.gen)
            loss, stats = D.global_loss(loss, stats, weight, self.env)
            (loss / self.cfg.accum_steps).backward()
        return loss, stats

    def optimizer_step(self, epoch: int, loss: torch.Tensor, totals: dict) -> None:
        """Clip, step, schedule; then the step's curves, observer, progress and checkpoint."""
        s, cfg = self.state, self.cfg
        if self.device.type == "cpu":
            self.check_finite()
        norm, lr = None, self.sched.get_last_lr()[0]
        if self.graphed is not None:
            self.graphed.prepare_step()
        if cfg.grad_clip:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        elif self.curves.wants_grad_norm(s.step + 1):
            norm = grad_norm(self.model)
        self.opt.step()
        self.sched.step()
        if self.graphed is not None:
            self.graphed.zero_grad()
        else:
            self.opt.zero_grad(set_to_none=True)
        s.step += 1
        self.curves.step(s.step, lr, norm)
        if self.observer is not None:
            self.observer({"kind": "step", "stage": self.stage, "step": s.step,
                           "time": timestamp(self.device)})
        if self.on_step is not None:
            self.on_step(s.step)
        self.bar.update(1)
        if cfg.progress and self.env.is_main and s.step % 10 == 0:
            self.bar.set_postfix(epoch=epoch + 1, loss=f"{float(loss.detach()):.4f}", refresh=False)
        if cfg.ckpt_every and s.step % cfg.ckpt_every == 0:
            self.check_finite()
            self.save_last(totals)

    # ------------------------------------------------------------------ stopping
    def stopping(self, at: str) -> Optional[str]:
        """The one stopping rule: why the run stops now, or None. Asked after every optimiser step
        (at="step"), at the start of an epoch ("epoch") and after a full validation
        ("validation"); the epoch limit (cfg.epochs) bounds the loop of :meth:`train`.

        max_steps : cfg.max_steps optimiser steps taken (after a step);
        max_time  : cfg.max_time seconds of training spent (after a step, where under torchrun
                    the ranks agree on the clock every 10 steps, a collective; and at an epoch's
                    start, where the last validation may have spent it);
        patience  : cfg.patience epochs without a better validation score (after a validation).
        """
        s, cfg = self.state, self.cfg
        if at == "validation":
            return "patience" if cfg.patience is not None and s.bad_epochs >= cfg.patience else None
        if at == "step" and cfg.max_steps is not None and s.step >= cfg.max_steps:
            return "max_steps"
        clock_due = s.step > 0 if at == "epoch" else (not self.env.active or s.step % 10 == 0)
        return "max_time" if clock_due and self.out_of_time() else None

    def out_of_time(self) -> bool:
        """Whether cfg.max_time is spent (every rank must call it at the same point: a collective)."""
        if self.cfg.max_time is None:
            return False
        over = self.clock() - self.t0 >= self.cfg.max_time
        return D.any_rank(torch.tensor(over), self.env) if self.env.active else over

    def check_finite(self) -> None:
        """Stop with NonFiniteLossError once any rank has seen a non-finite loss (a collective)."""
        if D.any_rank(self.bad, self.env):
            raise non_finite_error(self.stage, self.state.epoch, self.state.step,
                                   self.sched.get_last_lr()[0], self.best_path, self.last_path)

    # ------------------------------------------------------------------ validate and save
    def validate_and_save(self, epoch: int, totals: dict, partial: bool) -> None:
        """Validate; a better score writes best.pt; a full epoch counts toward patience (and the
        plateau schedule) and closes the epoch; last.pt is written. partial: the clock stopped
        the run inside the epoch, which stays open."""
        s, cfg, select = self.state, self.cfg, self.select
        reduced = D.all_reduce_sums(totals, self.env)
        train_m = self.objective.metrics(reduced) if reduced else {}
        val_m = self.evaluate_split("val")
        if select not in val_m:
            raise ValueError(select_error(select, val_m, self.objective))
        self.bar.set_postfix({"epoch": epoch + 1, f"val_{select}": f"{val_m[select]:.4f}"})
        score = self.sign * val_m[select]
        if cfg.schedule == "plateau" and not partial:  # the reduced lr applies from the next step
            if plateau_update(s.plateau, val_m[select], self.sign > 0, cfg):
                apply_now(self.sched)
        done_epochs = epoch + s.batch / self.batches_per_epoch if partial else epoch + 1
        row = {"epoch": done_epochs, "step": s.step, "lr": self.sched.get_last_lr()[0],
               "time": self.clock() - self.t0,
               **{f"train_{k}": v for k, v in train_m.items()},
               **{f"val_{k}": v for k, v in val_m.items()}}
        s.history.append(row)
        self.curves.validation(row)
        if score > s.best or s.best_epoch < 0:  # the first evaluation always counts
            s.best, s.best_epoch = (score if not math.isnan(score) else -math.inf), done_epochs
            snap = self.snapshot()
            if self.env.is_main:
                atomic_save({**snap, "epoch": done_epochs, "val_metrics": val_m, "select": select},
                            self.best_path)
        if not partial:  # the epochs without a better score, toward cfg.patience
            s.count_patience(epoch, score, self.steps_per_epoch, cfg.warmup_steps)
            reason = self.stopping("validation")
            if reason is not None:
                s.stop(reason)
            s.next_epoch()
        self.save_last(totals if partial else None)

    def evaluate_split(self, split: str) -> dict:
        """The metrics of the current weights on task.<split>; timed for the observer, if any."""
        dataset = getattr(self.task, split)
        start = timestamp(self.device) if self.observer is not None else None
        metrics = evaluate(self.model, self.objective, dataset, self.cfg, self.device, env=self.env,
                           split=split)
        if self.observer is not None:
            self.observer({"kind": "eval", "stage": self.stage, "split": split,
                           "examples": len(dataset), "seconds": timestamp(self.device) - start})
        return metrics

    def snapshot(self) -> dict:
        """The checkpoint's configs and full weights (under FSDP a collective: every rank calls it)."""
        full = D.full_model_state(self.model) if (self.env.is_main or D.is_fsdp(self.model)) else {}
        return {"format": FORMAT, "stage": self.stage, **self.meta,
                "train_config": to_dict(self.cfg), "model": full, "paths": self.chosen.paths}

    def save_last(self, totals: Optional[dict] = None) -> None:
        """last.pt: weights, optimiser, schedule, every rank's RNG and the RunState (with an open
        epoch's summed `totals`)."""
        s, env = self.state, self.env
        s.time = self.clock() - self.t0
        totals = D.all_reduce_sums(dict(totals or {}), env)
        rngs = D.gather_objects(rng_state(self.gen, self.device), env)
        snap, optim = self.snapshot(), D.optimizer_state(self.model, self.opt, self.names)
        if env.is_main:
            s.totals = {k: float(v) for k, v in totals.items()}
            atomic_save({**snap, "optimizer": optim, "scheduler": self.sched.state_dict(),
                         "rng": rngs[0], "rng_ranks": rngs, "world_size": env.world_size,
                         "state": s.to_dict()}, self.last_path)
        s.totals = None

    # ------------------------------------------------------------------ the end
    def finish(self, evaluate_test: bool) -> RunResult:
        """The best weights loaded back, tested, and the run's result."""
        s, cfg = self.state, self.cfg
        self.bar.close()
        self.fwd = None  # the DDP wrapper holds the process group: nothing may keep it once fit returns
        D.barrier(self.env)  # rank 0 has written best.pt
        best = read_checkpoint(self.best_path)
        D.load_full_model_state(self.model, best["model"])
        self.model.to(self.device)
        test_m = self.evaluate_split("test") if evaluate_test else {}
        stopped_by = s.stopped_by or ("epochs" if s.epoch >= cfg.epochs else "")
        history = history_dataset(s.history, self.stage, select=self.select, stopped_by=stopped_by)
        return RunResult(model=self.model, history=history, best_checkpoint=self.best_path,
                         best_epoch=best["epoch"], val_metrics=best["val_metrics"],
                         test_metrics=test_m, steps=s.step, select=self.select,
                         stopped_by=stopped_by, paths=self.chosen.kinds())
