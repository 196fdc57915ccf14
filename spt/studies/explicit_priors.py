"""Study 03 — Table 7 and Fig. 2: the role of explicit priors. S4 and DLR, each with its
structured initialisation or a random one (N(0, 0.1²)), trained from scratch vs. with SPT, on
ListOps, Text, Image and PathX (paper section 3.3, C.1.3, Table 5).

Grid: task x model x ssm_init x init x seed; model in {"s4", "dlr"}, ssm_init in {"structured",
"random"}, init in {"scratch", "spt"}.
"""
from __future__ import annotations

import xarray as xr

from ..config import replace
from ..paper import ssm_row
from ..paper.results import TABLE7
from .machinery.arms import task_ref
from .machinery.job import Entry, GridPreset
from .machinery.paper_arms import scratch_arm, spt_arm
from .machinery.smoke import smoke_arm, smoke_data_root, smoke_digits, smoke_listops
from .machinery.study import Study, need_root
from .machinery.tables import compare_table, spt_gains, with_gains

NAME = "03_explicit_priors"
TASKS = ("listops", "text", "image", "pathx")
# (model, ssm_init) -> the spt.paper.table5 SSM_ROWS variant
VARIANTS = {("s4", "structured"): "s4", ("s4", "random"): "s4_random",
            ("dlr", "structured"): "dlr", ("dlr", "random"): "dlr_random"}


def paper_arms(task: str) -> dict:
    """{(model, ssm_init, init): Arm} for `task` (Table 5 rows)."""
    out = {}
    for (m, si), variant in VARIANTS.items():
        p = ssm_row(task, variant)
        out[m, si, "scratch"] = scratch_arm(p)
        out[m, si, "spt"] = spt_arm(p)
        if (variant, task) in _THREE_NUMBERS:
            out[m, si, "spt"] = replace(out[m, si, "spt"], note=_THREE_NUMBERS_NOTE)
    return out


# Table 5 cells that print three numbers where the others print (FT-LR, FT-BSZ, PT-LR, PT-BSZ)
_THREE_NUMBERS = {("s4_random", "text"), ("dlr_random", "image")}
_THREE_NUMBERS_NOTE = ("Table 5 prints three numbers in this cell: read as (FT-LR, FT-BSZ, "
                       "PT-BSZ) with PT-LR = FT-LR")


def _entries(tasks) -> tuple:
    return tuple(Entry((("task", name), ("model", m), ("ssm_init", si), ("init", i)), ref, arm)
                 for name, ref, arms in tasks for (m, si, i), arm in arms.items())


def paper(data_root=None) -> GridPreset:
    root = need_root(data_root, NAME)
    return GridPreset("paper", _entries([(t, task_ref(t, root), paper_arms(t)) for t in TASKS]),
                      note="Table 5 S4 / DLR rows (structured and random init), LRA data")


def smoke(data_root=None) -> GridPreset:
    root = str(smoke_data_root())
    tasks = [("listops", smoke_listops(root),
              {k: smoke_arm(a, 128) for k, a in paper_arms("listops").items()}),
             ("digits", smoke_digits(),
              {k: smoke_arm(a, 64) for k, a in paper_arms("image").items()})]
    return GridPreset("smoke", _entries(tasks), note="CPU smoke run: 2-layer S4 / DLR, 2 epochs, "
                      "generated ListOps and digits 8x8 for Image; checks the pipeline only")


LAPTOP_NOTE = ("laptop preset: 100 digits 8x8 (continuous pixels) stand in for the LRA tasks; "
               "d=64 x 3 models, batch 16, laptop lrs and budgets, not Table 5's")


# Pretraining steps of the laptop preset's SPT arms. 1,000 (study 04's fixed budget) taught the
# randomly initialised S4 little (random S4 + SPT 55.1% over 3 seeds, one of them 71.8%);
# 3,000 (430 epochs of the 100 images; the paper pretrains far longer, Table 5) lifted it to
# 76.1%. Both runs are in docs/laptop_presets_measured.md.
LAPTOP_PRETRAIN_STEPS = 3000


def laptop(data_root=None) -> GridPreset:
    """S4 and DLR (Table 5's Image rows at d=64 x 3; DLR keeps its state size 1024), each at
    its structured init and at the random one (N(0, 0.1^2)), on 100 digits 8x8 with continuous
    pixels: SPT (3,000 masked-L1 pretraining steps at lr 3e-3, finetuning at lr 1e-3) vs.
    scratch over lrs {3e-3, 1e-3}, both until validation has not improved for 20 epochs."""
    from .machinery import laptop as lap
    arms = {}
    for (m, si), variant in VARIANTS.items():
        p = ssm_row("image", variant)
        model = lap.ssm(p.model, 64, d_state=p.model.d_state if m == "dlr" else 64)
        two = lap.ssm_arms(model, p.objective, LAPTOP_NOTE, pretrain_steps=LAPTOP_PRETRAIN_STEPS)
        arms[m, si, "scratch"], arms[m, si, "spt"] = two["scratch"], two["spt"]
    return GridPreset("laptop", _entries([("digits", lap.digits(n_train=100), arms)]),
                      seeds=lap.SEEDS, note=(
        "2-core CPU: S4 and DLR (d=64 x 3), structured vs. random init, scratch (lrs {3e-3, "
        "1e-3}) vs. SPT (3,000 masked pretraining steps), on 100 digits 8x8 with continuous "
        "pixels standing in for LRA Image; patience 20 on both sides; 3 seeds"))


PRESETS = {"smoke": smoke, "laptop": laptop, "paper": paper}



def table(ds: xr.Dataset):
    """Mean test accuracy (%) of the eight rows of Table 7, beside the paper's, then SPT's gain
    over scratch per model and init, paired by seed: mean, 95% interval, seeds ahead."""
    names = {("s4", "random", "spt"): "S4 + Rand Init + SPT", ("s4", "random", "scratch"):
             "S4 + Rand Init", ("s4", "structured", "spt"): "S4 + SPT",
             ("s4", "structured", "scratch"): "S4", ("dlr", "random", "spt"):
             "DLR + Rand Init + SPT", ("dlr", "random", "scratch"): "DLR + Rand Init",
             ("dlr", "structured", "spt"): "DLR + SPT", ("dlr", "structured", "scratch"): "DLR"}
    rows = [(n, {"model": m, "ssm_init": si, "init": i}, n) for (m, si, i), n in names.items()]
    gains = spt_gains(ds, [("SPT - scratch", "spt", "scratch")])
    return with_gains(compare_table(ds, rows, TABLE7), gains)


STUDY = Study(NAME, "Table 7 and Fig. 2: S4 and DLR, structured vs. random init, scratch vs. SPT",
              ("task", "model", "ssm_init", "init", "seed"), PRESETS, table, takes_models=True,
              takes_baselines=True)
