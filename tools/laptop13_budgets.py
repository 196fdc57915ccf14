"""Study 13's laptop rows taken apart (docs/modern_architectures.md, "Why: the laptop budgets").

    python tools/laptop13_budgets.py OUT          # 56 runs, about 45 minutes on 2 cores

Digits (seeds 0-3): study 13's laptop Transformer and the quickstart's, each under study 13's
former laptop budgets (400 pretraining steps; at most 150 supervised epochs, patience 60: what
study 14's laptop S4 still trains) and the quickstart's (what study 13 now trains), from scratch
and with masked SPT. ListOps (seeds 0-2): study 13's Transformer and S4 under its former 6-epoch
supervised budget (patience 3) and under 60 epochs with patience 15.
Each run's test / validation accuracy, epochs run and best epoch go to OUT/<run>.json; a run whose
file exists is not run again.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

from spt.config import replace
from spt.studies import modern_architectures as m13
from spt.studies.machinery.arms import run_arm
from spt.studies.machinery.smoke import laptop_listops
from spt.studies.priors_and_range import laptop_s4_arms
from spt.studies.quickstart import LAPTOP


def digits_runs():
    ours, quick = m13.laptop_arms("digits", 64), LAPTOP.arms()
    old_scratch, old_spt = laptop_s4_arms()
    budgets = {"b13": {"scratch": old_scratch, "spt": old_spt},
               "bquick": {"scratch": quick["scratch"], "spt": quick["spt"]}}
    models = {"t13": ours["transformer", "masked"].model, "tquick": quick["spt"].model}
    for m, model in models.items():
        for b, arms in budgets.items():
            for seed in range(4):
                for init, arm in arms.items():
                    yield f"digits_{m}_{b}_{init}_{seed}", LAPTOP.task(), \
                        dataclasses.replace(arm, model=model), seed


def listops_runs():
    arms = m13.laptop_arms("listops", 128)
    epochs = {"b13": dict(epochs=6, patience=3), "long": dict(epochs=60, patience=15)}
    for budget in ("b13", "long"):
        for model in ("transformer", "s4"):
            for seed in range(3):
                for init in ("scratch", "masked"):
                    arm = arms[model, init]
                    arm = dataclasses.replace(arm, train=replace(arm.train, **epochs[budget]))
                    yield f"listops_{budget}_{model}_{init}_{seed}", laptop_listops(), arm, seed


def main(out: Path) -> None:
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    for name, ref, arm, seed in (*digits_runs(), *listops_runs()):
        path = out / f"{name}.json"
        if path.exists():
            continue
        start = time.time()
        ds = run_arm(ref, arm.at(seed), out / "runs" / name)
        row = {"test": float(ds["test_accuracy"]), "val": float(ds["val_accuracy"]),
               "epochs": float(ds["epochs_run"]), "best_epoch": float(ds["best_epoch"]),
               "seconds": time.time() - start}
        path.write_text(json.dumps(row))
        print(name, row, flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
