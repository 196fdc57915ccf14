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

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import xarray as xr

from ..analysis.kernel_decay import kernel_decay, kernel_decay_baseline
from ..config import ObjectiveConfig, TrainConfig, replace, to_dict
from ..model_config import model_config_to_dict
from ..models.model import count_parameters
from ..paper import ssm_row
from ..provenance import current_provenance
from ..ssm_config import SSMConfig
from ..train import pretrain
from .machinery.arms import TaskRef, task_ref
from .machinery.job import Entry, GridPreset, Job, at_seed
from .machinery.smoke import shrink, smoke_data_root, smoke_digits, smoke_listops, smoke_train
from .machinery.stages import StageView
from .machinery.study import Study, need_root

NAME = "06_kernel_decay"
TASKS = ("image", "text", "pathx", "listops")
PERIODS = {"image": 32, "pathfinder": 32, "pathx": 128, "pathx256": 256, "digits": 8,
           "digits16": 16}
LAPTOP_PRETRAIN_STEPS = 2000


def kernels_run(ref: TaskRef, model, objective, pretrain_cfg, period: int,
                run_dir: Path) -> xr.Dataset:
    """Pretrain S4 on the task (at `pretrain_cfg`'s seed), then K_max of its kernels and of its
    HiPPO initialisation drawn with the same seed."""
    task = ref.load()
    seed = pretrain_cfg.seed
    pt = pretrain(task, model, objective, pretrain_cfg, Path(run_dir) / "pretrain", resume=True)
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
                      coords={"period": period},
                      attrs={"provenance": current_provenance(paths={"pretrain": pt.paths})})


@dataclass(frozen=True)
class KernelProbe(Job):
    """One cell's job: self-pretrain S4 on the task, then K_max of its kernels and of its HiPPO
    initialisation (:func:`kernels_run`); a Job, see :mod:`spt.studies.machinery.job`."""

    model: SSMConfig
    objective: ObjectiveConfig
    pretrain: TrainConfig
    period: int = 0
    row: tuple = ()
    note: str = ""

    def to_dict(self) -> dict:
        return {"model": model_config_to_dict(self.model), "objective": to_dict(self.objective),
                "pretrain": to_dict(self.pretrain)}

    @property
    def seed(self) -> int:
        return self.pretrain.seed

    def at(self, seed: int, device: Optional[str] = None, paths=None) -> "KernelProbe":
        return dataclasses.replace(self, pretrain=at_seed(self.pretrain, seed, device, paths))

    def run(self, task, run_dir) -> xr.Dataset:
        return kernels_run(task, self.model, self.objective, self.pretrain, self.period, run_dir)

    def stages(self, ref: TaskRef) -> list:
        return [StageView("pretrain", self.pretrain, self.model, ref, objective=self.objective,
                          row=self.row)]

    def dry(self, dry) -> "KernelProbe":
        return dataclasses.replace(self, pretrain=dry.train(self.pretrain))


def _preset(name: str, rows, seeds: tuple, note: str) -> GridPreset:
    """A GridPreset of (task name, TaskRef, PaperRow) rows: one KernelProbe per task."""
    return GridPreset(name, tuple(
        Entry((("task", task),), ref, KernelProbe(p.model, p.objective, p.pretrain,
                                                  PERIODS.get(task, 0), row=p.row))
        for task, ref, p in rows), seeds=seeds, note=note)


def paper(data_root=None) -> GridPreset:
    """Table 5's "S4 + SPT" rows, pretraining only, on LRA."""
    root = need_root(data_root, NAME)
    return _preset("paper", [(t, task_ref(t, root), ssm_row(t, "s4")) for t in TASKS], (0,),
                   "Table 5 'S4 + SPT' rows, pretraining only, LRA data")


def smoke(data_root=None) -> GridPreset:
    """2-layer d=16 S4, 4 pretraining epochs on digits 8x8 and generated ListOps."""
    root = str(smoke_data_root())
    rows = []
    for name, row, ref, L in (("digits", "image", smoke_digits(300), 64),
                              ("listops", "listops", smoke_listops(root), 128)):
        p = ssm_row(row, "s4")
        rows.append((name, ref, replace(p, model=replace(shrink(p.model), max_len=L),
                                        pretrain=smoke_train(p.pretrain, epochs=4))))
    return _preset("smoke", rows, (0,), "CPU smoke run: 2-layer d=16 S4, 4 pretraining epochs on "
                   "digits 8x8 and generated ListOps; checks the pipeline only")


def laptop(data_root=None) -> GridPreset:
    """S4 (the Image row at d=64, 4 layers, so that the layers' kernels can differ) pretrained
    on the 997 training digits at 16x16 (256 pixels, 16 per row): masked L1, lr 3e-3."""
    from .machinery import laptop as lap
    p = ssm_row("image", "s4")
    model = replace(lap.ssm(p.model, 256), n_layers=4)
    rows = [("digits16", lap.digits(size=16),
             replace(p, model=model,
                     pretrain=lap.pretraining(3e-3, max_steps=LAPTOP_PRETRAIN_STEPS)))]
    return _preset("laptop", rows, lap.SEEDS, (
        f"2-core CPU: S4 d=64 x 4 layers masked-pretrained ({LAPTOP_PRETRAIN_STEPS} steps, L1) on "
        f"the 997 training digits at 16x16 (256 pixels, 16 per row) standing in for LRA Image, "
        f"not LRA's 1,024-pixel images or Table 5's d=512 x 6 model and budget; 3 seeds"))


PRESETS = {"smoke": smoke, "laptop": laptop, "paper": paper}


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


def headline(ds: xr.Dataset) -> str:
    """K_max of the pretrained kernels over HiPPO's at lags 1 and 10, mean over layers and seeds."""
    lags = [lag for lag in (1, 10) if lag < ds.sizes["lag"]]
    ratio = (ds["pretrained"] / ds["baseline"]).mean(
        [d for d in ds["pretrained"].dims if d != "lag"])
    return "pretrained / HiPPO K_max " + ", ".join(
        f"{float(ratio.sel(lag=lag)):.2f} at lag {lag}" for lag in lags)


STUDY = Study(NAME, "Fig. 4: kernels learned by SPT vs. their HiPPO initialisation, per layer",
              ("task", "seed"), PRESETS, table, headline=headline)
