"""Study 01 — Table 1: Transformers of Tay et al.'s sizes, trained from scratch vs. masked and
causal self-pretraining, on the six LRA tasks (paper section 3.1, Table 4 rows marked †).

Grid: task x init x seed, init in {"scratch", "masked", "causal"}; model = "transformer".
Scratch uses the architecture and finetuning settings of the masked row, run until validation stops
improving (the paper quotes Tay et al.'s from-scratch numbers; we also train it ourselves).
"""
from __future__ import annotations

import dataclasses

import xarray as xr

from ..config import replace
from ..paper import transformer_row
from ..paper.results import TABLE1
from ..paper.table4 import SECOND_MASKED_ROW, SECOND_ROW_NOTE
from .machinery.arms import Arm, task_ref
from .machinery.job import Entry, GridPreset
from .machinery.smoke import smoke_arm, smoke_data_root, smoke_digits, smoke_listops
from .machinery.study import Study, need_root
from .machinery.tables import compare_table, spt_gains, with_gains, with_your_models

NAME = "01_lra_transformers"
TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
INITS = ("scratch", "masked", "causal")

def paper_arms(task: str) -> dict[str, Arm]:
    """The three arms of Table 1 for `task`, from Table 4 (on Pathfinder and PathX the causal row
    is Table 4's second "Masked SPT†" row: spt.paper.table4.SECOND_MASKED_ROW)."""
    m, c = transformer_row(task, "masked"), transformer_row(task, "causal")
    masked = Arm(model=m.model, objective=m.objective, pretrain=m.pretrain, train=m.finetune,
                 row=m.row)
    causal = Arm(model=c.model, objective=c.objective, pretrain=c.pretrain, train=c.finetune,
                 row=c.row, note=SECOND_ROW_NOTE if task in SECOND_MASKED_ROW else "")
    scratch = Arm(model=m.model, train=m.finetune, row=m.row,
                  note="Table 1 quotes Tay et al.'s from-scratch numbers; we train the masked "
                       "row's model with its finetuning settings")
    return {"scratch": scratch, "masked": masked, "causal": causal}


def paper(data_root=None) -> GridPreset:
    root = need_root(data_root, NAME)
    entries = tuple(Entry((("task", t), ("init", i)), task_ref(t, root), arm)
                    for t in TASKS for i, arm in paper_arms(t).items())
    return GridPreset("paper", entries, seeds=(0,), note="Table 4 rows marked †, LRA data")


# smoke stand-ins: (coord name, paper row it shrinks, task reference, sequence length).
# Pathfinder (1,024 pixels) is left out of the smoke runs: too slow for CI on two cores.
def _smoke_tasks(root: str):
    return (("listops", "listops", smoke_listops(root), 128),
            ("digits", "image", smoke_digits(), 64))


def smoke(data_root=None) -> GridPreset:
    root = str(smoke_data_root())
    entries = []
    for name, row, ref, L in _smoke_tasks(root):
        for i, arm in paper_arms(row).items():
            if name == "digits" and arm.objective is not None:
                arm = dataclasses.replace(arm, objective=replace(arm.objective, loss="l1"))
            entries.append(Entry((("task", name), ("init", i)), ref, smoke_arm(arm, L)))
    return GridPreset("smoke", tuple(entries), seeds=(0,),
                      note="CPU smoke run: 2-layer d=32 models, 2 epochs, generated ListOps "
                           "(<=100 symbols), digits 8x8 standing in for Image. "
                           "It checks the pipeline; its numbers are not the paper's.")


def laptop(data_root=None) -> GridPreset:
    """The quickstart's laptop setting (spt.studies.quickstart.LAPTOP: 100 digits as 64 pixel
    tokens, a d=64 x 3 Transformer, scratch at lr 1e-3, patience 100) with the three
    arms of Table 1: scratch, masked SPT and causal SPT. The causal arm is the masked arm with a
    causal model and next-token CE pretraining, at the same lrs and budgets."""
    from .machinery.digits_setup import LAPTOP
    arms = LAPTOP.arms()
    masked = arms["spt"]
    causal = dataclasses.replace(masked, model=replace(masked.model, causal=True),
                                 objective=replace(masked.objective, kind="causal"),
                                 note=LAPTOP_NOTE)
    ref = LAPTOP.task()
    entries = tuple(Entry((("task", "digits"), ("init", i)), ref,
                          dataclasses.replace(a, note=LAPTOP_NOTE))
                    for i, a in (("scratch", arms["scratch"]), ("masked", masked),
                                 ("causal", causal)))
    return GridPreset("laptop", entries, seeds=(0, 1, 2), note=(
        "2-core CPU, ~10 min: 100 labelled digits as 64 pixel tokens (LRA Image's encoding) "
        "standing in for the six LRA tasks, a d=64 x 3 Transformer (the LRA Image row's size); "
        "scratch (lr 1e-3, chosen on validation over {3e-3, 1e-3}) vs. masked and causal SPT "
        "(pretraining lr 3e-3, 250 epochs; finetuning lr 1e-3), patience 100 everywhere; 3 seeds"))


LAPTOP_NOTE = ("laptop preset: digits 8x8 as pixel tokens stand in for the LRA tasks; the "
               "quickstart's laptop lrs and budgets (mean pooling, dropout 0.1), not Table 4's")

PRESETS = {"smoke": smoke, "laptop": laptop, "paper": paper}


def table(ds: xr.Dataset):
    """Mean test accuracy (%) per init x task, beside Table 1 (and a row per init of each of your
    models, when the run had ``models=``), then the gain of each SPT over scratch, paired by
    seed: mean, 95% interval, seeds ahead."""
    rows = [("Transformer", {"init": "scratch"}, "Transformer (Tay et al.)"),
            ("Transformer + Masked SPT", {"init": "masked"}, "Transformers + Masked SPT"),
            ("Transformer + Causal SPT", {"init": "causal"}, "Transformers + Causal SPT")]
    gains = spt_gains(ds, [("masked SPT - scratch", "masked", "scratch"),
                           ("causal SPT - scratch", "causal", "scratch")])
    return with_gains(compare_table(ds, with_your_models(ds, rows, "transformer"), TABLE1), gains)


STUDY = Study(NAME, "Table 1: Transformers of Tay et al.'s sizes, scratch vs. masked and causal SPT",
              ("task", "init", "seed"), PRESETS, table, takes_models=True,
              takes_baselines=True)
