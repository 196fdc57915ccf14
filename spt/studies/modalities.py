"""Study 07 — Table 3: additional modalities. Speech Commands (causal and bidirectional models),
sCIFAR (RGB pixel sequences) and BIDMC (HR / RR / SpO2 regression, R²), Transformers and S4,
trained from scratch vs. with SPT (paper section 3.7, C.1.6, C.3, Tables 4 and 6).

Grid: task x model x init x seed; task in {"speech_causal", "speech_bi", "scifar", "bidmc_hr",
"bidmc_rr", "bidmc_spo2"}, model in {"transformer", "s4"}, init in {"scratch", "spt"}. Results carry
test_accuracy for the classification tasks and test_r2 for BIDMC (NaN elsewhere).

The settings are Table 6's rows (spt.paper.table6): its learning rates and batch sizes, and the
S4 of each modality as the authors' configs give it (the paper prints no S4 sizes).
"""
from __future__ import annotations

import xarray as xr

from ..config import replace
from ..paper import table6
from ..paper.results import TABLE3
from .machinery.arms import TaskRef
from .machinery.job import Entry, GridPreset
from .machinery.paper_arms import scratch_arm, spt_arm
from .machinery.smoke import smoke_arm, smoke_data_root, smoke_digits
from .machinery.study import Study, need_root
from .machinery.tables import compare_table, spt_gains, with_gains

NAME = "07_additional_modalities"
TASKS = table6.TASKS


def s4_arms(task: str) -> dict:
    """{"spt": Arm, "scratch": Arm} of Table 6's S4 row for `task`."""
    row = table6.s4_row(task)
    return {"spt": replace(spt_arm(row), note=table6.S4_NOTE), "scratch": scratch_arm(row)}


def paper_arms(task: str) -> dict:
    """{(model, init): Arm} for `task`."""
    t, s4 = table6.transformer_row(task), s4_arms(task)
    return {("transformer", "scratch"): scratch_arm(t), ("transformer", "spt"): spt_arm(t),
            ("s4", "scratch"): s4["scratch"], ("s4", "spt"): s4["spt"]}


def _task_ref(task: str, root) -> TaskRef:
    loader, options, _ = table6.TASK_DATA[task]
    return TaskRef(loader, root=root, options=options)


def paper(data_root=None) -> GridPreset:
    root = need_root(data_root, NAME)
    entries = tuple(Entry((("task", t), ("model", m), ("init", i)),
                          _task_ref(t, root), arm)
                    for t in TASKS for (m, i), arm in paper_arms(t).items())
    return GridPreset("paper", entries, note="Tables 4 and 6; Speech Commands, CIFAR-10, BIDMC")


def smoke(data_root=None) -> GridPreset:
    root = str(smoke_data_root())
    digits = smoke_digits()
    stand_ins = (("digits_causal", "speech_causal", digits, 64),
                 ("digits_bi", "speech_bi", digits, 64),
                 ("synthetic_hr", "bidmc_hr", TaskRef("bidmc", root=root, options=(("target", "HR"),)),
                  128))
    entries = tuple(Entry((("task", name), ("model", m), ("init", i)), ref, smoke_arm(arm, L))
                    for name, row, ref, L in stand_ins for (m, i), arm in paper_arms(row).items())
    return GridPreset("smoke", entries, note="CPU smoke run: no speech / CIFAR / BIDMC data offline, "
                      "so digits 8x8 stand in for the causal and bidirectional classification "
                      "rows and a synthetic regression in BIDMC's .ts format for BIDMC HR; 2-layer "
                      "models, 2 epochs. It checks the pipeline, not the paper's numbers.")


PRESETS = {"smoke": smoke, "paper": paper}



def table(ds: xr.Dataset):
    """Mean test accuracy (%) and R² per task, beside Table 3, then SPT's gain over scratch per
    model, paired by seed: mean, 95% interval, seeds ahead."""
    rows = [("S4", {"model": "s4", "init": "scratch"}, "S4"),
            ("Transformers", {"model": "transformer", "init": "scratch"}, "Transformers"),
            ("S4 + SPT", {"model": "s4", "init": "spt"}, "S4 + SPT"),
            ("Transformers + SPT", {"model": "transformer", "init": "spt"}, "Transformers + SPT")]
    parts = []
    pairs = [("SPT - scratch", "spt", "scratch")]
    if "test_accuracy" in ds:
        parts.append(with_gains(compare_table(ds, rows, TABLE3, metric="test_accuracy"),
                                spt_gains(ds, pairs, metric="test_accuracy")))
    if "test_r2" in ds:
        parts.append(with_gains(compare_table(ds, rows, {}, metric="test_r2"),
                                spt_gains(ds, pairs, metric="test_r2")).add_suffix(" (R²)"))
    import pandas as pd
    table = pd.concat(parts, axis=1)
    blank = lambda v: v in ("", "-") or (isinstance(v, float) and v != v)  # noqa: E731
    return table.drop(columns=[c for c in table.columns if all(map(blank, table[c]))])


STUDY = Study(NAME, "Table 3: Speech Commands, sCIFAR and BIDMC, Transformers and S4, scratch vs. SPT",
              ("task", "model", "init", "seed"), PRESETS, table, takes_models=True,
              takes_baselines=True)
