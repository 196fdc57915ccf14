"""Benchmark: the measured implementation paths (TrainConfig.paths="auto") against the reference and
against every fixed choice, per model row of the smoke and laptop presets, in one run.

    python bench/paths.py                      # every distinct smoke and laptop model row (CPU)
    python bench/paths.py --presets laptop     # the laptop rows only
    python bench/paths.py --smoke              # two rows, few repeats: checks the script works
    python bench/paths.py --presets paper -p data_root DIR --device cuda   # on a GPU node

A row is one distinct (model, task, stage) of a study preset's cells: its training step (forward and
backward of the stage's objective on its first real batch, at the stage's own batch size). For each
row, in this process and at the same shapes:

* ``reference`` - every module's reference path and the eager step (TrainConfig.paths="reference");
* ``auto``      - what fit() chooses (spt.train.paths: each module's candidates measured, checked
                  against the reference, the fastest that agrees kept, then the step); its
                  ``overhead`` is the time that measuring took (nothing is cached here: a fresh
                  cache folder), and ``= steps`` that overhead in steps of the chosen path;
* ``best fixed`` - the fastest of every fixed assignment (one path per module kind, and the step)
                  among the candidates that run here.

Step times are medians of --repeat steps in steady state (each assignment's step built and called
once before the timing, as a run's step is), the assignments timed in turns, the order turning
each round, so that a change of load falls on every one alike. ``auto / best`` is the ratio
the issue bounds (<= 1.05 on every CPU row): 1 where auto chose the best fixed assignment
itself, else the two timed again side by side for
6 x --repeat rounds, the median of their per-round ratio (the fastest of many noisy medians is
biased low, so it is not compared with the one it was picked from).
"""
from __future__ import annotations

import argparse
import csv
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spt.config import replace  # noqa: E402
from spt.kernels.paths import STEP, candidates_of, choosers, set_paths  # noqa: E402
from spt.train.graphs import GraphedStep, graphs_unavailable  # noqa: E402
from spt.train.measure import signature, why_unavailable  # noqa: E402
from spt.train.passes import autocast, epoch_batches, loader, to_device  # noqa: E402


def stage_rows(study_names, presets, data_root=None, device="cpu"):
    """[(label, model, objective, batch on device, TrainConfig)]: one per distinct stage."""
    from spt.models.model import classifier_model, pretraining_model
    from spt.studies.registry import QUICKSTART, STUDIES
    from spt.train.objectives import Denoising, Supervised

    studies = {QUICKSTART.name: QUICKSTART, **STUDIES}
    seen, rows = set(), []
    for name in study_names or studies:
        study = studies[name]
        for preset in presets:
            if preset not in study.presets:
                continue
            for entry in study.preset(preset, data_root).entries:
                arm = entry.job
                if not hasattr(arm, "is_spt"):
                    continue  # jobs other than arms (kernel probes, LM finetuning): no stage view
                stages = [("pretrain", arm.pretrain)] if arm.is_spt else []
                stages.append(("supervised", arm.train))
                for stage, cfg in stages:
                    task = arm.task_ref(entry.task).load()
                    if stage == "pretrain":
                        model = pretraining_model(arm.model, task.spec, arm.objective)
                        objective = Denoising(arm.objective, task.spec)
                    else:
                        model, objective = classifier_model(arm.model, task.spec), Supervised(task.spec)
                    cfg = replace(cfg, device=device, num_workers=0)
                    first = epoch_batches(len(task.train), cfg.batch_size, cfg.seed, 0)[0]
                    items = objective.epoch_data(task.train, cfg.seed, 0)
                    batch = to_device(next(iter(loader(items, [first], cfg, torch.device(device),
                                                        cfg.seed))), device)
                    # one row per distinct computation: the model's structure (not its init)
                    # at the batch's shapes, under its objective
                    key = (repr(model), signature((), batch), repr(objective.__dict__.get("cfg")))
                    if key in seen:
                        continue
                    seen.add(key)
                    label = f"{name}/{preset}: {entry.task.name} {arm.model.name} {stage}"
                    rows.append((label, model.to(device), objective, batch, cfg))
    return rows


def step_caller(model, objective, batch, cfg, device, step: str):
    """(a function running one forward + backward at the model's paths, a cleanup)."""
    gen = torch.Generator(device=device).manual_seed(0)
    if step == "graphs":
        graphed = GraphedStep(model, model, objective, cfg, device, gen)
        return (lambda: (graphed(batch), graphed.zero_grad())), graphed.close

    def eager():
        with autocast(device, cfg):
            loss, _ = objective.step(model, batch, gen)
        loss.backward()
        for p in model.parameters():
            p.grad = None
    return eager, (lambda: None)


def time_assignments(model, objective, batch, cfg, device, assignments: dict, repeats: int) -> dict:
    """{name: [step seconds per round]} of each {kind, module name or step: path} assignment, in
    steady state as a run steps: each assignment's step is built once and called once before the
    rounds (static buffers, capture), then timed once a round, the assignments in turns
    (the order turning each round), its module paths set before each of its calls."""
    callers: dict = {}
    try:
        for name, a in assignments.items():
            set_paths(model, {k: v for k, v in a.items() if k != STEP})
            callers[name] = step_caller(model, objective, batch, cfg, device, a.get(STEP, "eager"))
            callers[name][0]()
        seconds: dict = {n: [] for n in assignments}
        names = list(assignments)
        for r in range(repeats + 1):  # the first round warms up
            for name in names[r % len(names):] + names[:r % len(names)]:
                set_paths(model, {k: v for k, v in assignments[name].items() if k != STEP})
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                callers[name][0]()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                seconds[name].append(time.perf_counter() - t0)
        return {n: ts[1:] for n, ts in seconds.items()}
    finally:
        for _, close in callers.values():
            close()


def head_to_head(times: dict, a: str, b: str) -> float:
    """The median over rounds of a's step time over b's in the same round."""
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


def fixed_assignments(model, objective, batch, cfg, device) -> dict:
    """{name: assignment} of every fixed choice: one candidate per module kind (those that can
    run here) and the step."""
    from spt.train.paths import _inputs
    seen = _inputs(model, objective, batch, cfg, device, torch.Generator(device=device))
    options: dict = {}
    for name, m in choosers(model).items():
        if name not in seen:
            continue
        ok = [p for p in candidates_of(m) if why_unavailable(m, p, device, seen[name][0]) is None]
        options[m.path_kind] = sorted(set(options.get(m.path_kind, ok)) & set(ok),
                                      key=ok.index)
    options[STEP] = ["eager"] + (["graphs"] if graphs_unavailable(cfg) is None else [])
    kinds = sorted(k for k, v in options.items() if len(v) > 1)  # one candidate: no choice
    return {", ".join(f"{k} {p}" for k, p in zip(kinds, combo)): dict(zip(kinds, combo))
            for combo in itertools.product(*(options[k] for k in kinds))}


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--studies", nargs="*", default=None, help="study names (default: every study)")
    ap.add_argument("--presets", nargs="*", default=["smoke", "laptop"])
    ap.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                    help="-p data_root DIR for paper presets")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=10, help="timed steps per assignment")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--smoke", action="store_true", help="study 00's smoke row and study 03's "
                    "smoke DLR row, 3 repeats: checks the script")
    a = ap.parse_args(argv)
    params = dict(a.p)
    device = torch.device(a.device)
    if a.smoke:
        a.studies, a.presets, a.repeat = ["00_quickstart", "03_explicit_priors"], ["smoke"], 3
    from spt.train.paths import choose, tuning
    rows = stage_rows(a.studies, a.presets, params.get("data_root"), a.device)
    if a.smoke:  # the first row of each study: a Transformer and an S4
        rows = [next(r for r in rows if r[0].startswith(s)) for s in a.studies]
    print(f"{'row':<56}{'ref ms':>9}{'auto ms':>9}{'best ms':>9}{'auto/best':>10}"
          f"{'overhead s':>11}{'= steps':>8}  best fixed; auto")
    out = []
    for label, model, objective, batch, cfg in rows:
        with tempfile.TemporaryDirectory() as cache, \
                mock.patch.dict(os.environ, {"SPT_PATHS_CACHE": cache}), tuning():
            chosen = choose(model, objective, batch, replace(cfg, paths="auto"), device,
                            torch.Generator(device=device).manual_seed(0), total_steps=None)
        fixed = fixed_assignments(model, objective, batch, cfg, device)
        reference = {k: candidates_of_kind(model, k)[0] for k in next(iter(fixed.values()))
                     if k != STEP}
        times = time_assignments(model, objective, batch, cfg, device,
                                 {"reference": {**reference, STEP: "eager"},
                                  "auto": chosen.paths, **fixed}, a.repeat)
        median = {n: statistics.median(ts) for n, ts in times.items()}
        # the kind of every choosing module (a kind with one candidate is in no Choice)
        auto_kinds = {STEP: chosen.paths[STEP]}
        for n, m in choosers(model).items():
            was = auto_kinds.setdefault(m.path_kind, chosen.paths[n])
            auto_kinds[m.path_kind] = was if was == chosen.paths[n] else "mixed"
        best = min(fixed, key=median.get)
        if all(auto_kinds.get(k) == v for k, v in fixed[best].items()):
            ratio = 1.0  # auto chose the best fixed assignment itself
        else:  # the two again, side by side: the minimum of many noisy medians is biased low
            again = time_assignments(model, objective, batch, cfg, device,
                                     {"auto": chosen.paths, "best": fixed[best]}, 6 * a.repeat)
            ratio = head_to_head(again, "auto", "best")
        row = {"row": label, "reference_ms": 1e3 * median["reference"],
               "auto_ms": 1e3 * median["auto"], "best_ms": 1e3 * median[best],
               "auto_over_best": ratio, "overhead_s": chosen.seconds,
               "overhead_steps": chosen.seconds / median["auto"], "best": best,
               "auto": ", ".join(f"{k} {v}" for k, v in chosen.kinds().items())}
        print(f"{label[:55]:<56}{row['reference_ms']:9.2f}{row['auto_ms']:9.2f}"
              f"{row['best_ms']:9.2f}{row['auto_over_best']:10.3f}{row['overhead_s']:11.2f}"
              f"{row['overhead_steps']:8.0f}  {best}; {row['auto']}", flush=True)
        out.append(row)
    worst = max((r["auto_over_best"] for r in out), default=float("nan"))
    print(f"{len(out)} rows; auto / best fixed at most {worst:.3f} (the bound: 1.05); measuring "
          f"took {sum(r['overhead_s'] for r in out):.1f} s in all, nothing cached")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, list(out[0]))
            w.writeheader()
            w.writerows(out)
    return out


def candidates_of_kind(model, kind: str) -> tuple:
    return next(candidates_of(m) for m in choosers(model).values() if m.path_kind == kind)


if __name__ == "__main__":
    main()
