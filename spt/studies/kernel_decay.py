"""Study 06 — Fig. 4: kernels learned by self-pretraining vs. HiPPO. S4 is self-pretrained on a
task (masked, Table 5 "S4 + SPT"); K_max[l] = max over channels and directions of |K[c, l]| is
computed per layer for the pretrained model (before finetuning) and for the same configuration at
its HiPPO initialisation (paper section 3.6).

Grid: task x seed. Each result holds ``pretrained`` and ``baseline`` (layer, lag): K_max of the
self-pretrained model and of its HiPPO initialisation, ``pretrain_val_loss``, and the coordinate
``period``: the image row length for visual tasks (the grid lines of Fig. 4), 0 otherwise.
:func:`spt.viz.fig4_kernel_decay` and :func:`spt.viz.explore_kernels` take the result directly.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import xarray as xr

from ..analysis.kernel_decay import kernel_decay, kernel_decay_baseline
from ..config import replace, to_dict
from ..model_config import model_config_to_dict
from ..models.model import count_parameters
from ..ssm_config import ssm_preset
from ..train import pretrain
from .arms import TaskRef
from .cells import Cell, run_cells
from .grid import check_data, need_root, pick_tasks, shrink, smoke_digits, smoke_listops, smoke_train
from .lra_transformers import task_ref
from .smoke import smoke_data_root

STUDY = "06_kernel_decay"
PRESETS = ("smoke", "laptop", "paper")
TASKS = ("image", "text", "pathx", "listops")
PERIODS = {"image": 32, "pathfinder": 32, "pathx": 128, "pathx256": 256, "digits": 8,
           "digits16": 16}
LAPTOP_PRETRAIN_STEPS = 2000
NOTES = {"smoke": "CPU smoke run: 2-layer d=16 S4, 4 pretraining epochs on digits 8x8 and "
                  "generated ListOps; checks the pipeline only",
         "laptop": f"2-core CPU: S4 d=64 x 4 layers masked-pretrained ({LAPTOP_PRETRAIN_STEPS} "
                   f"steps, L1) on the 997 training digits at 16x16 (256 pixels, 16 per row) "
                   f"standing in for LRA Image; 3 seeds",
         "paper": "Table 5 'S4 + SPT' rows, pretraining only, LRA data"}


def kernels_run(ref: TaskRef, model, objective, pretrain_cfg, seed: int, period: int,
                run_dir: Path) -> xr.Dataset:
    """Pretrain S4 on the task, then K_max of its kernels and of its HiPPO initialisation."""
    task = ref.load()
    pt = pretrain(task, model, objective, replace(pretrain_cfg, seed=seed), Path(run_dir) / "pretrain",
                  resume=True)
    L = task.spec.seq_len
    pretrained = kernel_decay(pt.model, L).astype(np.float64)
    baseline = kernel_decay_baseline(pt.model, L, seed=seed).astype(np.float64)
    pretrained.attrs, baseline.attrs = {}, {}
    return xr.Dataset({"pretrained": pretrained, "baseline": baseline,
                       "pretrain_val_loss": ((), float(pt.val_metrics["loss"])),
                       "pretrain_steps": ((), float(pt.steps)),
                       "pretrain_time": ((), float(pt.history["time"].values[-1])),
                       "seq_len": ((), float(L)),
                       "params": ((), float(count_parameters(pt.model)))},
                      coords={"period": period})


def _cell(name: str, ref: TaskRef, p, seed: int, device: str, dry=None) -> Cell:
    model, obj = p.model, p.objective
    pt = replace(p.pretrain, device=device)
    if dry is not None:
        ref, pt = dry.ref(ref), dry.train(pt)
    period = PERIODS.get(name, 0)
    return Cell(coords={"task": name, "seed": seed},
                run=partial(kernels_run, ref, model, obj, pt, seed, period),
                config={"task": ref.to_dict(), "model": model_config_to_dict(model),
                        "objective": to_dict(obj), "pretrain": to_dict(pt), "seed": seed})


def _rows(preset: str, data_root) -> tuple:
    """([(task name, TaskRef, SSMPreset)], the preset's seeds) of a preset."""
    seeds = (0,)
    if preset == "paper":
        root = need_root(data_root, STUDY)
        rows = [(t, task_ref(t, root), ssm_preset(t, "s4")) for t in TASKS]
    elif preset == "smoke":
        root = str(smoke_data_root())
        rows = []
        for name, row, ref, L in (
                ("digits", "image", smoke_digits(300), 64),
                ("listops", "listops", smoke_listops(root),
                 128)):
            p = ssm_preset(row, "s4")
            rows.append((name, ref, replace(p, model=replace(shrink(p.model), max_len=L),
                                            pretrain=smoke_train(p.pretrain, epochs=4))))
    elif preset == "laptop":
        # S4 (the Image row at d=64, 4 layers, so that the layers' kernels can differ) pretrained
        # on the 997 training digits at 16x16 (256 pixels, 16 per row): masked L1, lr 3e-3
        from . import laptop as lap
        p = ssm_preset("image", "s4")
        model = replace(lap.ssm(p.model, 256), n_layers=4)
        rows = [("digits16", lap.digits(size=16),
                 replace(p, model=model,
                         pretrain=lap.pretraining(3e-3, max_steps=LAPTOP_PRETRAIN_STEPS)))]
        seeds = lap.SEEDS
    else:
        raise ValueError(f"study {STUDY}: unknown preset {preset!r}; choose from "
                         f"{', '.join(PRESETS)}")
    return rows, seeds


def cells(preset: str = "smoke", *, data_root=None, seeds=None, device: str = "auto",
          dry=None, tasks=None) -> list:
    """One Cell per task x seed (dry: a :class:`spt.studies.check.DryRun` or None)."""
    rows, own_seeds = _rows(preset, data_root)
    rows = pick_tasks(rows, lambda r: r[0], tasks, STUDY)
    check_data([ref for _, ref, _ in rows], STUDY)  # fail before training, saying what to run
    return [_cell(n, ref, p, int(s), device, dry) for n, ref, p in rows
            for s in (seeds or own_seeds)]


def stage_views(preset: str = "paper", data_root="DATA", tasks=None) -> list:
    """[(coords, [StageView], seeds)] of the preset's tasks: one pretraining stage each."""
    from .stages import StageView
    rows, seeds = _rows(preset, data_root)
    rows = pick_tasks(rows, lambda r: r[0], tasks, STUDY)
    return [({"task": name}, [StageView("pretrain", p.pretrain, p.model, ref,
                                        objective=p.objective, row=p.row)], len(seeds))
            for name, ref, p in rows]


def run(preset: str = "smoke", out_dir="results", *, data_root=None,
        seeds: Optional[Sequence[int]] = None, workers: int = 1, device: str = "auto",
        tasks: Optional[Sequence[str]] = None) -> xr.Dataset:
    """Pretrain (or reuse) and compute kernels; returns Dataset (task, seed, layer, lag)."""
    cs = cells(preset, data_root=data_root, seeds=seeds, device=device, tasks=tasks)
    print(f"{STUDY} [{preset}]: {NOTES.get(preset, '')}")
    return run_cells(STUDY, cs, out_dir, workers=workers)


def deviations(preset: str = "paper", data_root="DATA"):
    """Where the preset departs from the paper and why (a DataFrame; see
    :func:`spt.studies.fidelity.departures_table`): the paper preset's pretraining settings against
    spt/studies/paper_settings.tsv; the smoke and laptop presets, what they stand in for."""
    from .fidelity import departures_table
    if preset not in PRESETS:
        raise ValueError(f"study {STUDY}: unknown preset {preset!r}; choose from "
                         f"{', '.join(PRESETS)}")
    if preset == "paper":
        return departures_table("06", [(c, v) for c, v, _ in stage_views(preset, data_root)])
    what = NOTES[preset] if preset == "smoke" else (
        "laptop preset: " + NOTES["laptop"] + ", not LRA's 1,024-pixel images or Table 5's "
        "d=512 x 6 model and budget")
    task = "digits16" if preset == "laptop" else "all"
    return departures_table("06", [], [({"task": task}, what)])


def half_lag(k_max: np.ndarray, lags: np.ndarray) -> int:
    """The lag by which half of the kernel's total K_max (over `lags`) has accumulated."""
    cum = np.cumsum(k_max) / max(float(k_max.sum()), 1e-30)
    return int(lags[np.argmax(cum >= 0.5)])


def decay_summary(ds: xr.Dataset):
    """How the pretrained kernels differ from HiPPO's, per task and layer (mean over seeds):

    half_lag     : the lag by which half of the kernel's total |K_max| has accumulated (smaller:
                   more local), for the pretrained kernels and the HiPPO baseline;
    row_peak     : for image tasks (period > 0), mean K_max at lags that are multiples of the row
                   length over the mean K_max at the other lags of the same range (1: no peaks at
                   the rows; Fig. 4's PathX panel shows peaks aligned with the 2D structure).
    """
    import pandas as pd
    rows = []
    for task in ds["task"].values:
        d = ds.sel(task=task)
        period = int(d["period"].values) if "period" in d.coords else 0
        lags = d["lag"].values
        for layer in d["layer"].values:
            row = {"task": str(task), "layer": int(layer)}
            for kind in ("pretrained", "baseline"):
                k = d[kind].sel(layer=layer).mean("seed").values
                row[f"half_lag_{kind}"] = half_lag(k, lags)
                if period > 0:
                    on = (lags > 0) & (lags % period == 0)
                    off = (lags > 0) & (lags % period != 0) & (lags < lags[on].max())
                    row[f"row_peak_{kind}"] = round(float(k[on].mean() / k[off].mean()), 3)
            rows.append(row)
    return pd.DataFrame(rows).set_index(["task", "layer"])


def table(ds: xr.Dataset, lags: Sequence[int] = (1, 10, 100)):
    """K_max at a few lags per task and layer, pretrained vs. HiPPO baseline, mean over seeds:
    how fast each layer's kernels decay compared with HiPPO's."""
    lags = [l for l in lags if l < ds.sizes["lag"]]
    both = xr.concat([ds["pretrained"], ds["baseline"]], dim=xr.DataArray(
        ["pretrained", "HiPPO baseline"], dims="kernels"))
    k = both.mean("seed").sel(lag=lags).rename("K_max")
    return k.to_dataframe()["K_max"].unstack("lag").round(4)
