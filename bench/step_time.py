"""Step time of the quickstart's training against its floor, on the CPU `make demo` runs on.

    .venv/bin/python bench/step_time.py                 # the laptop quickstart's model and data
    .venv/bin/python bench/step_time.py --steps 300 --repeat 3 --threads 2

For each stage of the demo (masked pretraining, supervised training), one table row each:

    floor       the same model's forward + backward alone, on batches collated once beforehand
                (no optimiser, no data loading, no evaluation): what a step cannot go below
    +optimizer  floor + clip / optimiser step / zero_grad (what any training loop must pay)
    fit         fit()'s wall time over its optimiser steps: everything the demo pays, data
                loading, the objective, logging, evaluation every ``eval_every`` epochs and
                checkpoints included

per-step milliseconds (the best of --repeat runs, so other processes on the machine count as
little as possible) and fit / floor. Before / after in one run:

    git archive cedade5 | tar -x -C /tmp/spt-before
    .venv/bin/python bench/step_time.py --compare /tmp/spt-before,.

measures each checkout in its own process, alternating between them --repeat times (so a change
in the machine's load hits both alike), and prints one table per checkout; the script uses only
fit()'s public arguments, so it runs against older checkouts. The machine's load average is
printed with the table: timings on a shared machine mean little without it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import torch


def _setup(stage: str):
    """(task, model, objective, TrainConfig) of one stage of the laptop quickstart (seed 0)."""
    from spt.config import replace
    from spt.models.model import classifier_model, pretraining_model
    from spt.studies.quickstart import LAPTOP
    from spt.train.objectives import Denoising, Supervised

    arm = LAPTOP.arms()["spt"]
    task = LAPTOP.task().load()
    torch.manual_seed(0)
    if stage == "pretrain":
        from torch.utils.data import Subset

        from spt.data.task import Task

        task = Task(task.spec, task.train, Subset(task.val, range(LAPTOP.pretrain_val)), task.test)
        model = pretraining_model(arm.model, task.spec, arm.objective)
        return task, model, Denoising(arm.objective, task.spec), replace(arm.pretrain, seed=0)
    model = classifier_model(arm.model, task.spec)
    return task, model, Supervised(task.spec), replace(arm.train, seed=0, patience=None)


def _batches(task, objective, cfg, n: int) -> list:
    from spt.data.collate import pad_collate
    from spt.train.engine import epoch_batches

    items = objective.epoch_data(task.train, cfg.seed, 0)
    out = []
    epoch = 0
    while len(out) < n:
        for ix in epoch_batches(len(task.train), cfg.batch_size, cfg.seed, epoch):
            b = pad_collate([items[i] for i in ix])
            if b.get("valid") is not None and bool(b["valid"].all()):
                b["valid"] = None
            out.append(b)
        epoch += 1
    return out[:n]


def _floor(stage: str, steps: int, with_optimizer: bool) -> float:
    """ms per forward + backward (and optimiser step) on pre-collated batches."""
    from spt.train.optim import build_optimizer

    task, model, objective, cfg = _setup(stage)
    model.train()
    opt = build_optimizer(model, cfg) if with_optimizer else None
    batches = _batches(task, objective, cfg, steps)
    gen = torch.Generator().manual_seed(0)
    for b in batches[:5]:  # warm-up
        objective.step(model, b, gen)[0].backward()
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    for b in batches:
        loss, _ = objective.step(model, b, gen)
        loss.backward()
        if opt is not None:
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
        else:
            model.zero_grad(set_to_none=True)
    return 1000 * (time.perf_counter() - t0) / steps


def _fit(stage: str, steps: int) -> float:
    """ms per optimiser step of fit() over `steps` steps (whole epochs, evaluation included)."""
    from spt.config import replace
    from spt.train.engine import fit

    task, model, objective, cfg = _setup(stage)
    per_epoch = math.ceil(len(task.train) / cfg.batch_size)
    epochs = max(1, round(steps / per_epoch))
    cfg = replace(cfg, epochs=epochs, max_steps=None, progress=False)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        r = fit(model, objective, task, cfg, d, stage=stage, meta={}, evaluate_test=False)
        return 1000 * (time.perf_counter() - t0) / r.steps


def measure(stages: list, steps: int) -> dict:
    """{stage: (floor, +optimizer, fit) ms per step}, one run of each."""
    return {s: (_floor(s, steps, False), _floor(s, steps, True), _fit(s, steps)) for s in stages}


def print_table(title: str, best: dict) -> None:
    print(title)
    print("| stage | floor: fwd+bwd (ms) | +optimizer (ms) | fit() per step (ms) | fit / floor |")
    print("|---|---|---|---|---|")
    for stage, (fl, op, ft) in best.items():
        print(f"| {stage} | {fl:.2f} | {op:.2f} | {ft:.2f} | {ft / fl:.2f} |")


def _best(runs: list) -> dict:
    return {s: tuple(min(r[s][i] for r in runs) for i in range(3)) for s in runs[0]}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=280, help="optimiser steps per measurement")
    p.add_argument("--repeat", type=int, default=3, help="the best of this many runs is reported")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: what each of the demo's two worker processes uses)")
    p.add_argument("--stages", default="pretrain,finetune")
    p.add_argument("--compare", default=None,
                   help="comma-separated checkouts to measure alternately, each in its own process")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one run, for --compare
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    stages = a.stages.split(",")
    load0 = os.getloadavg()[0]
    if a.json:
        print(json.dumps(measure(stages, a.steps)))
        return
    if a.compare:
        trees = [os.path.abspath(t) for t in a.compare.split(",")]
        runs: dict = {t: [] for t in trees}
        for _ in range(a.repeat):
            for t in trees:
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "--json",
                                      "--steps", str(a.steps), "--threads", str(a.threads),
                                      "--stages", a.stages, "--repeat", "1"],
                                     env={**os.environ, "PYTHONPATH": t}, check=True,
                                     capture_output=True, text=True).stdout
                runs[t].append(json.loads(out.strip().splitlines()[-1]))
        tables = {t: _best(r) for t, r in runs.items()}
    else:
        import spt
        tables = {os.path.dirname(os.path.dirname(spt.__file__)):
                  _best([measure(stages, a.steps) for _ in range(a.repeat)])}
    print(f"torch {torch.__version__}, {a.threads} thread(s); load average {load0:.2f} at start, "
          f"{os.getloadavg()[0]:.2f} at end; best of {a.repeat} x {a.steps} steps; "
          f"SPT_CURVES={os.environ.get('SPT_CURVES', '(unset: tensorboard)')}")
    for tree, best in tables.items():
        print_table(f"\n{tree}", best)


if __name__ == "__main__":
    main()
