"""Live training curves: what fit() writes while it trains, for TensorBoard (and, opt-in, W&B).

Which writers run is a setting of the process (every rank, every notebook kernel and SLURM task
started from it inherits it), read once when fit() starts:

    SPT_CURVES unset or "tensorboard"   TensorBoard event files in each run folder (the default)
    SPT_CURVES="tensorboard,wandb"      also Weights & Biases; "wandb" alone: only W&B
    SPT_CURVES="none"                   no curves

``tensorboard --logdir OUT/<study>`` then shows every run of a study, named by its folder,
``runs/<cell key>/<stage>`` (the cell's coordinates and pretrain / finetune / scratch).

What is written, on the optimiser-step axis (``TrainConfig.log_every``, default 50, sets k):

    step/loss             mean training loss over the last k optimiser steps, over all ranks
    step/lr               learning rate of the step
    step/grad_norm        gradient norm of the step, before clipping
    step/tokens_per_s     real (unpadded) input positions per second over the last k steps, all ranks
    step/peak_memory_gib  CUDA: torch.cuda.max_memory_allocated; CPU: the process's peak RSS
    train/<metric>, val/<metric>   at every validation: the values of the run's history Dataset
                          (``train_<metric>`` / ``val_<metric>``); ``epoch``: epochs completed
    config (text)         the run's configs (model, objective, TrainConfig), as JSON

Only rank 0 writes; every rank takes part in the sums (one collective every k steps).

Resuming: a resumed run starts at the step of its last.pt, S. What the killed process wrote after
S is discarded by TensorBoard's purge (the new event file starts with a ``purge_step`` of S + 1),
so each step appears once. The first loss point after a resume averages the steps since the resume.

The tensorboard package is an optional extra (``pip install 'spt[tensorboard]'``): without it and
with SPT_CURVES unset, fit() says once per process that no curves are written; a writer named in
SPT_CURVES that is not installed is an error before training. W&B (``pip install wandb``) logs
offline into the run folder unless you have logged in (``wandb login``, WANDB_API_KEY) or set
WANDB_MODE; project: the study (or $WANDB_PROJECT), run name: the cell key and stage; a resumed
run continues the same W&B run.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import sys
import time
from pathlib import Path
from typing import Optional, Protocol

import torch

from . import distributed as D

WRITERS = ("tensorboard", "wandb")
_SAID: set = set()


class CurvesError(RuntimeError):
    """SPT_CURVES names a writer that is unknown or not installed."""


class Writer(Protocol):
    def scalars(self, step: int, values: dict) -> None: ...
    def close(self) -> None: ...


def chosen_writers(environ=os.environ) -> tuple[tuple[str, ...], bool]:
    """(the writers SPT_CURVES names, whether it was set). Unknown names are a CurvesError."""
    text = environ.get("SPT_CURVES")
    if text is None:
        return ("tensorboard",), False
    names = tuple(n.strip().lower() for n in text.split(",") if n.strip())
    if names in ((), ("none",)):
        return (), True
    unknown = [n for n in names if n not in WRITERS]
    if unknown:
        raise CurvesError(f"SPT_CURVES={text!r}: unknown writer(s) {unknown}; use a comma-separated "
                          f"list of {', '.join(WRITERS)}, or none")
    return names, True


def run_names(out: Path) -> tuple[str, str]:
    """(project, run name) of a run folder: a study's ``<study>/runs/<cell key>/<stage>`` gives
    (study, "<cell key>/<stage>"); any other folder ("spt", its path)."""
    out = Path(out).resolve()
    if len(out.parents) >= 3 and out.parent.parent.name == "runs":
        return out.parents[2].name, f"{out.parent.name}/{out.name}"
    return "spt", str(out)


def _after_the_last_event_file(out: Path) -> None:
    """Wait, at most a second, until a new event file will sort after those in `out`: TensorBoard
    reads a folder's event files in the order of their names, which start with the second they
    were made in and end in a per-process counter (after 9 comes 10, which sorts first), so a run
    resumed within the second of the last file would be read before it."""
    stamps = [int(f.name.split(".")[3]) for f in out.glob("events.out.tfevents.*")
              if f.name.split(".")[3].isdigit()]
    while stamps and int(time.time()) <= max(stamps):
        time.sleep(0.05)


class TensorBoardWriter:
    """Event files in `out` (torch.utils.tensorboard). purge_step: TensorBoard drops what earlier
    event files in `out` hold at or after this step (a resumed run's repeated steps)."""

    def __init__(self, out: Path, purge_step: Optional[int], config: dict):
        from torch.utils.tensorboard import SummaryWriter

        _after_the_last_event_file(Path(out))
        self.w = SummaryWriter(log_dir=str(out), purge_step=purge_step, flush_secs=30)
        if purge_step is None:
            self.w.add_text("config", "```\n" + json.dumps(config, indent=1, default=str) + "\n```", 0)

    def scalars(self, step: int, values: dict) -> None:
        for tag, v in values.items():
            self.w.add_scalar(tag, v, step)

    def close(self) -> None:
        self.w.close()


class WandbWriter:
    """One W&B run per run folder: the same id on every resume, so its curves continue."""

    def __init__(self, out: Path, purge_step: Optional[int], config: dict):
        import wandb

        project, name = run_names(out)
        run_id = hashlib.sha1(str(Path(out).resolve()).encode()).hexdigest()[:16]
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", project), name=name,
                              id=run_id, resume="allow", dir=str(out), config=config,
                              mode=_wandb_mode(), reinit="create_new")

    def scalars(self, step: int, values: dict) -> None:
        self.run.log(dict(values), step=step)  # W&B ignores steps below its last one

    def close(self) -> None:
        self.run.finish()


def _wandb_mode() -> str:
    """WANDB_MODE when set; "online" once the user has logged in; else "offline"."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    logged_in = os.environ.get("WANDB_API_KEY") or (
        netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="replace"))
    return "online" if logged_in else "offline"


_MAKERS = {"tensorboard": (TensorBoardWriter, "tensorboard", "pip install 'spt[tensorboard]'"),
           "wandb": (WandbWriter, "wandb", "pip install wandb")}


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def open_writers(out: Path, start_step: int, config: dict, names: tuple, explicit: bool) -> list:
    """The writers `names` (from :func:`chosen_writers`; `explicit`: named in SPT_CURVES rather
    than the default). start_step: the step a resumed run starts from (0: a new run)."""
    writers = []
    for name in names:
        cls, module, install = _MAKERS[name]
        if not _installed(module):
            if explicit:
                raise CurvesError(f"SPT_CURVES names {name}, but the {module} package is not "
                                  f"installed: {install}, or drop it from SPT_CURVES")
            if name not in _SAID:
                _SAID.add(name)
                print(f"spt: no live curves: the {module} package is not installed ({install}; "
                      f"SPT_CURVES=none silences this)", file=sys.stderr)
            continue
        writers.append(cls(Path(out), start_step + 1 if start_step else None, config))
    return writers


class Curves:
    """fit()'s side of the curves: called after every optimiser step and every validation.

    Every rank makes one and calls it at the same points (the sums are collectives); only rank 0
    holds writers. With no writer anywhere (SPT_CURVES=none), it does nothing at all."""

    def __init__(self, out: Path, every: int, start_step: int, config: dict, env: D.DistEnv,
                 device: torch.device):
        names, explicit = chosen_writers()
        self.on = bool(names) and every > 0
        self.writers = (open_writers(out, start_step, config, names, explicit)
                        if self.on and env.is_main else [])
        self.every, self.env, self.device = every, env, device
        self._reset()

    def _reset(self) -> None:
        self.loss = torch.zeros((), device=self.device)
        self.tokens = torch.zeros((), device=self.device)
        self.micro = 0
        self.t = time.perf_counter()

    def batch(self, batch: dict, loss: torch.Tensor) -> None:
        """One micro-batch: its loss (this rank's share of the global loss) and real positions."""
        if not self.on:
            return
        self.loss += loss.detach().float() / (self.env.world_size if self.env.active else 1)
        self.micro += 1
        for key, inputs in (("valid", "inputs"), ("valid2", "inputs2")):
            if batch.get(key) is not None:
                self.tokens += batch[key].sum()
            elif inputs in batch:
                self.tokens += batch[inputs].shape[0] * batch[inputs].shape[1]

    def wants_grad_norm(self, step: int) -> bool:
        """Whether the coming optimiser step (numbered `step`, 1-based) is a logged one."""
        return self.on and step % self.every == 0

    def step(self, step: int, lr: float, grad_norm: Optional[torch.Tensor]) -> None:
        """After optimiser step `step` (1-based): every k steps, the sums and the writes."""
        if not self.on or step % self.every:
            return
        sums = D.all_reduce_sums({"loss": self.loss, "tokens": self.tokens}, self.env)
        seconds = max(time.perf_counter() - self.t, 1e-9)
        values = {"step/loss": float(sums["loss"]) / max(self.micro, 1),
                  "step/lr": lr,
                  "step/tokens_per_s": float(sums["tokens"]) / seconds,
                  "step/peak_memory_gib": peak_memory_gib(self.device)}
        if grad_norm is not None:
            values["step/grad_norm"] = float(grad_norm)
        self._write(step, values)
        self._reset()

    def validation(self, row: dict) -> None:
        """A history row (epoch, step, lr, time, train_*, val_*): its metrics at its step."""
        values = {"epoch": row["epoch"]}
        for k, v in row.items():
            for split in ("train", "val"):
                if k.startswith(split + "_"):
                    values[f"{split}/{k[len(split) + 1:]}"] = v
        self._write(row["step"], values)

    def _write(self, step: int, values: dict) -> None:
        values = {k: float(v) for k, v in values.items() if v is not None and math.isfinite(float(v))}
        for w in self.writers:
            w.scalars(step, values)

    def close(self) -> None:
        for w in self.writers:
            w.close()
        self.writers = []


def grad_norm(model: torch.nn.Module) -> torch.Tensor:
    """The total 2-norm of the model's gradients (FSDP's sharded gradients: the full norm)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norm = torch.nn.utils.get_total_norm(grads)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def peak_memory_gib(device: torch.device) -> float:
    """CUDA: the peak of allocated tensor memory; CPU: the peak resident memory of the process."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20  # KiB on Linux
