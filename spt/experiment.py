"""The core study of the paper in one call: self-pretrain + finetune vs. train from scratch.

:func:`compare_spt_vs_scratch` runs, for each seed, (1) masked or causal self-pretraining on the
task's training split, (2) finetuning of the best pretraining checkpoint, and (3) the same
architecture trained from scratch, and returns an xarray Dataset over (init, seed) that notebooks
plot and :mod:`spt.results` stores. Runs live in ``runs_dir/seed<k>/{pretrain,finetune,scratch}``;
calling it again with the same configuration reuses finished runs and resumes unfinished ones
(a different configuration in the same folder is an error, never silently mixed).
"""
from __future__ import annotations

import dataclasses
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import xarray as xr

from .config import ModelConfig, ObjectiveConfig, TrainConfig, model_config_to_dict, replace, to_dict
from .data.task import Task
from .train import finetune, pretrain, train_from_scratch

INITS = ("scratch", "spt")


def _curves(histories: dict, name: str, seeds: list) -> xr.DataArray:
    """Stack history variable `name` of each (init, seed) run into (init, seed, epoch), NaN-padded."""
    per_init = [xr.concat([histories[init, s][name] for s in seeds], dim="seed", join="outer")
                for init in INITS]
    return xr.concat(per_init, dim="init", join="outer").assign_coords(init=list(INITS), seed=seeds)


def _run_seed(task: Task, model: ModelConfig, objective: ObjectiveConfig, cfgs: tuple, seed: int,
              run_dir: Path, pooling: str | None, threads: int | None) -> dict:
    """Pretrain -> finetune and scratch for one seed (a module-level function: runs in workers)."""
    if threads is not None:
        torch.set_num_threads(threads)
    pretrain_cfg, finetune_cfg, scratch_cfg = cfgs
    metric = "r2" if task.spec.is_regression else "accuracy"
    pt = pretrain(task, model, objective, replace(pretrain_cfg, seed=seed), run_dir / "pretrain",
                  resume=True)
    ft = finetune(task, pt.best_checkpoint, replace(finetune_cfg, seed=seed), run_dir / "finetune",
                  pooling=pooling, resume=True)
    sc_model = model if pooling is None else replace(model, pooling=pooling)
    sc = train_from_scratch(task, sc_model, replace(scratch_cfg, seed=seed), run_dir / "scratch",
                            resume=True)
    out = {"rows": {}, "histories": {}}
    for init, r in (("spt", ft), ("scratch", sc)):
        out["rows"][init] = {f"test_{metric}": r.test_metrics[metric],
                             f"val_{metric}": r.val_metrics[metric], "steps": r.steps,
                             "best_epoch": r.best_epoch, "epochs_run": r.history.sizes["epoch"]}
        out["histories"][init] = r.history
    pt_score = [k for k in pt.val_metrics if k != "loss"][0]
    out["pt_row"] = {"pretrain_steps": pt.steps, f"pretrain_val_{pt_score}": pt.val_metrics[pt_score]}
    out["pt_curve"] = pt.history["val_loss"].rename(epoch="pt_epoch")
    return out


def compare_spt_vs_scratch(task: Task, model: ModelConfig, objective: ObjectiveConfig,
                           pretrain_cfg: TrainConfig, finetune_cfg: TrainConfig,
                           scratch_cfg: TrainConfig, seeds: Sequence[int], runs_dir,
                           *, pooling: str | None = None, workers: int = 1) -> xr.Dataset:
    """SPT (pretrain -> finetune) vs. scratch for each seed; returns a Dataset over (init, seed).

    Data variables (``<m>`` is accuracy, or r2 for regression tasks):
      test_<m>, val_<m>   (init, seed) - of the best-validation weights
      steps, best_epoch, epochs_run (init, seed) - supervised optimiser steps and epochs
      pretrain_steps (seed), pretrain_val_<pm> (seed) - the pretraining run (pm: accuracy or r2)
      curve_train_loss, curve_val_<m> (init, seed, epoch) - training curves
      pretrain_curve_val_loss (seed, pt_epoch)
    The TrainConfig seeds are replaced by each seed in `seeds`.
    workers : seeds run in this many parallel processes, each with an equal share of the torch
              threads (on a small CPU model, 2 one-thread processes do about twice the work of one
              two-thread process). Results do not depend on it.
    """
    runs_dir = Path(runs_dir)
    metric = "r2" if task.spec.is_regression else "accuracy"
    cfgs = (pretrain_cfg, finetune_cfg, scratch_cfg)
    if workers > 1 and len(seeds) > 1:
        threads = max(1, torch.get_num_threads() // workers)
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, len(seeds)), mp_context=ctx) as pool:
            # workers report through the parent: their progress bars would interleave
            quiet = tuple(replace(c, progress=False) for c in cfgs)
            futures = {pool.submit(_run_seed, task, model, objective, quiet, s,
                                   runs_dir / f"seed{s}", pooling, threads): s for s in seeds}
            results = {}
            for f in as_completed(futures):
                s = futures[f]
                results[s] = f.result()
                print(f"seed {s} done: " + ", ".join(
                    f"{i} test {metric} {r[f'test_{metric}']:.4f} ({r['steps']} steps)"
                    for i, r in results[s]["rows"].items()), flush=True)
            results = {s: results[s] for s in seeds}
    else:
        results = {s: _run_seed(task, model, objective, cfgs, s, runs_dir / f"seed{s}", pooling,
                                None) for s in seeds}
    rows = {(i, s): r["rows"][i] for s, r in results.items() for i in INITS}
    histories = {(i, s): r["histories"][i] for s, r in results.items() for i in INITS}
    pt_rows = {s: r["pt_row"] for s, r in results.items()}
    pt_curves = {s: r["pt_curve"] for s, r in results.items()}

    seeds = list(seeds)
    data = {}
    for var in next(iter(rows.values())):
        data[var] = (("init", "seed"), np.array([[rows[i, s][var] for s in seeds] for i in INITS],
                                                dtype=float))
    for var in next(iter(pt_rows.values())):
        data[var] = (("seed",), np.array([pt_rows[s][var] for s in seeds], dtype=float))
    ds = xr.Dataset(data, coords={"init": list(INITS), "seed": seeds})
    ds["curve_train_loss"] = _curves(histories, "train_loss", seeds)
    ds[f"curve_val_{metric}"] = _curves(histories, f"val_{metric}", seeds)
    ds["pretrain_curve_val_loss"] = xr.concat([pt_curves[s] for s in seeds], dim="seed").assign_coords(seed=seeds)
    ds.attrs.update(task=task.spec.name, task_description=task.spec.description,
                    n_train=len(task.train), n_val=len(task.val), n_test=len(task.test))
    ds.attrs["config"] = {
        "task": dataclasses.asdict(task.spec), "model": model_config_to_dict(model),
        "objective": to_dict(objective), "pretrain": to_dict(pretrain_cfg),
        "finetune": to_dict(finetune_cfg), "scratch": to_dict(scratch_cfg), "seeds": seeds,
        "pooling": pooling}
    return ds


def summary_table(ds: xr.Dataset, metric: str = "test_accuracy"):
    """A pandas DataFrame: mean, std, min, max of `metric` per init, and the SPT - scratch gap."""
    import pandas as pd

    v = ds[metric] * 100
    table = pd.DataFrame({"mean": v.mean("seed"), "std": v.std("seed", ddof=1) if v.sizes["seed"] > 1
                          else v.mean("seed") * np.nan, "min": v.min("seed"), "max": v.max("seed"),
                          "mean steps": ds["steps"].mean("seed")}, index=list(ds.init.values))
    gap = (v.sel(init="spt") - v.sel(init="scratch"))
    table.loc["spt - scratch"] = [float(gap.mean()), float(gap.std(ddof=1)) if gap.size > 1
                                  else np.nan, float(gap.min()), float(gap.max()), np.nan]
    return table.round(2)


def describe_budgets(ds: xr.Dataset) -> str:
    """A plain-language account of how long each side trained (for fairness statements)."""
    cfg = ds.attrs["config"]
    cfg = cfg if isinstance(cfg, dict) else __import__("json").loads(cfg)
    sc, ft = ds.sel(init="scratch"), ds.sel(init="spt")
    pat = cfg["scratch"]["patience"]
    lines = [
        f"Scratch: {sc.steps.mean().item():.0f} optimiser steps on average "
        f"(min {sc.steps.min().item():.0f}, max {sc.steps.max().item():.0f}); each run went on "
        f"until validation accuracy had not improved for {pat} epochs "
        f"(epochs run: {', '.join(str(int(e)) for e in sc.epochs_run.values)}; cap "
        f"{cfg['scratch']['epochs']}), and the best-validation epoch is reported.",
        f"Learning rates: pretraining {cfg['pretrain']['lr']:g}, finetuning "
        f"{cfg['finetune']['lr']:g}, scratch {cfg['scratch']['lr']:g}; batch size "
        f"{cfg['scratch']['batch_size']}.",
        f"SPT: {ds.pretrain_steps.mean().item():.0f} masked-denoising steps on the same "
        f"{ds.attrs['n_train']} training inputs (labels unused), then "
        f"{ft.steps.mean().item():.0f} finetuning steps on average, stopped the same way "
        f"(patience {cfg['finetune']['patience']}).",
    ]
    capped = [int(s) for s, e in zip(ds.seed.values, sc.epochs_run.values)
              if e >= cfg["scratch"]["epochs"]]
    if capped:
        lines.append(f"Warning: scratch runs of seeds {capped} hit the epoch cap before validation "
                     f"stopped improving; raise max_epochs for a fair comparison.")
    return "\n".join(lines)
