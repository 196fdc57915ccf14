"""Study 02 — Table 2 and Fig. 1: rotary Transformers and S4, trained from scratch vs. masked SPT,
on LRA (paper section 3.2; Table 4 "Rotary" rows, Table 5 "S4 + SPT", C.1.2 for PathX-256).

Grid: task x model x init x seed; model in {"transformer", "s4"}, init in {"scratch", "spt"}.
PathX-256 is run for S4 only (the paper marks the Transformer infeasible there).
"""
from __future__ import annotations

import xarray as xr

from ..paper import ssm_row, transformer_row
from ..paper.appendix import pathx256_s4_row
from ..paper.results import TABLE2
from .machinery.arms import task_ref
from .machinery.job import Entry, GridPreset
from .machinery.paper_arms import scratch_arm, spt_arm
from .machinery.smoke import smoke_arm, smoke_data_root, smoke_digits, smoke_listops
from .machinery.study import Study, need_root
from .machinery.tables import compare_table, spt_gains, with_gains, with_your_models

NAME = "02_transformers_vs_s4"
TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")


def pathx256_s4():
    """(SPT arm, scratch arm) of S4 on PathX-256 (C.1.2, spt.paper.appendix.pathx256_s4_row)."""
    row = pathx256_s4_row()
    return spt_arm(row), scratch_arm(row)


def paper_arms(task: str) -> dict:
    """{(model, init): Arm} for `task`."""
    if task == "pathx256":
        spt, scratch = pathx256_s4()
        return {("s4", "spt"): spt, ("s4", "scratch"): scratch}
    t, s = transformer_row(task, "rotary_masked"), ssm_row(task, "s4")
    return {("transformer", "scratch"): scratch_arm(t), ("transformer", "spt"): spt_arm(t),
            ("s4", "scratch"): scratch_arm(s), ("s4", "spt"): spt_arm(s)}


def paper(data_root=None) -> GridPreset:
    root = need_root(data_root, NAME)
    entries = tuple(Entry((("task", t), ("model", m), ("init", i)), task_ref(t, root), arm)
                    for t in TASKS + ("pathx256",) for (m, i), arm in paper_arms(t).items())
    return GridPreset("paper", entries, note="Table 4 rotary rows, Table 5 S4 rows, LRA data")


def smoke(data_root=None) -> GridPreset:
    root = str(smoke_data_root())
    tasks = (("listops", "listops", smoke_listops(root), 128),
             ("digits", "image", smoke_digits(), 64))
    entries = tuple(Entry((("task", name), ("model", m), ("init", i)), ref, smoke_arm(arm, L))
                    for name, row, ref, L in tasks for (m, i), arm in paper_arms(row).items())
    return GridPreset("smoke", entries, note="CPU smoke run: 2-layer models, 2 epochs, generated "
                      "ListOps and digits 8x8 for Image; checks the pipeline, not the paper's numbers")


PRESETS = {"smoke": smoke, "paper": paper}



def table(ds: xr.Dataset):
    """Mean test accuracy (%) per model x init x task, beside Table 2 (and a row per init of each
    of your models, when the run had ``models=``), then SPT's gain over scratch per model, paired
    by seed: mean, 95% interval, seeds ahead."""
    rows = [("Transformer + Rotary", {"model": "transformer", "init": "scratch"},
             "Transformers + Rotary"),
            ("Transformer + Rotary + Masked SPT", {"model": "transformer", "init": "spt"},
             "Transformers + Rotary + Masked SPT"),
            ("S4", {"model": "s4", "init": "scratch"}, "S4"),
            ("S4 + Masked SPT", {"model": "s4", "init": "spt"}, "S4 + Masked SPT")]
    gains = spt_gains(ds, [("SPT - scratch", "spt", "scratch")])
    return with_gains(compare_table(ds, with_your_models(ds, rows, "transformer"), TABLE2), gains)


STUDY = Study(NAME, "Table 2 and Fig. 1: rotary Transformers and S4, scratch vs. masked SPT",
              ("task", "model", "init", "seed"), PRESETS, table, takes_models=True,
              takes_baselines=True)
