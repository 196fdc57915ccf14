"""Observers of a training run: timing hooks that fit() calls only while one is set.

    events = []
    with observe(events.append):        # spt.train.engine.observe
        pretrain(task, model_cfg, objective_cfg, train_cfg, "runs/pt")

Under ``observe(callback)`` fit() calls ``callback(event)`` with a dict

* after every optimiser step: ``{"kind": "step", "stage": stage, "step": n, "time": t}``; n is the
  run's optimiser steps so far (counted on across a resume), t is ``time.perf_counter()``;
* after every evaluation: ``{"kind": "eval", "stage": stage, "split": "val" | "test",
  "examples": len(dataset), "seconds": duration}``.

On CUDA each timestamp first waits for the device (``torch.cuda.synchronize``), so the times are
those of the work, not of its launch. Waiting stalls the pipeline, so it happens only while an
observer is set: without one, fit() takes no timestamps and never synchronises.

The observer lives in a ContextVar: it covers fit() calls made inside the ``with`` block, in this
thread (or asyncio task), and nothing else; an inner ``observe`` replaces an outer one until it
exits. fit() reads it once, when it starts.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, Optional

import torch

Observer = Callable[[dict], None]

_OBSERVER: ContextVar[Optional[Observer]] = ContextVar("spt_train_observer", default=None)


@contextmanager
def observe(callback: Observer) -> Iterator[Observer]:
    """Call ``callback(event)`` from every fit() started inside the block (events: above)."""
    token = _OBSERVER.set(callback)
    try:
        yield callback
    finally:
        _OBSERVER.reset(token)


def current_observer() -> Optional[Observer]:
    """The observer set by the innermost open :func:`observe`, or None."""
    return _OBSERVER.get()


def timestamp(device: torch.device) -> float:
    """``time.perf_counter()`` once the work queued on `device` has finished (CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
