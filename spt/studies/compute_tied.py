"""Study 08 — Table 8 and Fig. 5: SPT under a fixed compute budget. The total number of epochs
(pretraining + finetuning) is fixed — 150 for Image, 30 for Text — and a share of 0, 20, 40 or 60%
of it goes to SPT (0% = training from scratch for the whole budget). Appendix D.

Grid: task x model x spt_share x seed; model in {"transformer", "s4"}. No early stopping: each
run uses its whole budget, and the best-validation epoch is reported. The curves (curve_train_*,
pretrain_curve_*) are Fig. 5's training curves.
"""
from __future__ import annotations

import xarray as xr

from ..config import replace
from ..paper import ssm_row, transformer_row
from ..paper.appendix import TABLE8_BUDGET_EPOCHS
from ..paper.results import TABLE8
from ..paper.table5 import S4_RETRAINED_NOTE, s4_retrained_scratch
from ..results import format_gain, paired_gain
from .machinery.arms import Arm, task_ref
from .machinery.job import Entry, GridPreset
from .machinery.paper_arms import scratch_arm, spt_arm
from .machinery.smoke import smoke_arm, smoke_digits
from .machinery.study import Study, need_root
from .machinery.tables import mean_rows, with_gains

NAME = "08_compute_tied"
SHARES = (0.0, 0.2, 0.4, 0.6)


def split_budget(arms: dict, budget: int, share: float) -> Arm:
    """The arm that spends round(share * budget) epochs on SPT and the rest on finetuning (share 0:
    the scratch arm for the whole budget). No patience: the budget is the budget."""
    pt_epochs = round(share * budget)
    if pt_epochs == 0:
        a = arms["scratch"]
        return replace(a, train=replace(a.train, epochs=budget, patience=None))
    if pt_epochs >= budget:
        raise ValueError(f"spt_share={share} leaves no finetuning epochs of the {budget}-epoch budget")
    a = arms["spt"]
    return replace(a, pretrain=replace(a.pretrain, epochs=pt_epochs, max_steps=None),
                   train=replace(a.train, epochs=budget - pt_epochs, patience=None))


def paper_arms(task: str) -> dict:
    """{model: {"spt": Arm, "scratch": Arm}} (Table 4 rotary rows, Table 5 S4 rows). S4 from
    scratch is the paper's own run here (Table 8's footnote 5), not the cited one: the authors'
    schedule (spt.paper.table5.s4_retrained_scratch)."""
    t, s = transformer_row(task, "rotary_masked"), ssm_row(task, "s4")
    s4_scratch = replace(scratch_arm(s), train=s4_retrained_scratch(task), note=S4_RETRAINED_NOTE)
    return {"transformer": {"spt": spt_arm(t), "scratch": scratch_arm(t)},
            "s4": {"spt": spt_arm(s), "scratch": s4_scratch}}


def _entries(tasks, shares) -> tuple:
    return tuple(Entry((("task", name), ("model", m), ("spt_share", float(sh))), ref,
                       split_budget(arms, budget, sh))
                 for name, ref, budget, by_model in tasks for m, arms in by_model.items()
                 for sh in shares)


def paper(data_root=None) -> GridPreset:
    root = need_root(data_root, NAME)
    tasks = [(t, task_ref(t, root), TABLE8_BUDGET_EPOCHS[t], paper_arms(t)) for t in ("image", "text")]
    return GridPreset("paper", _entries(tasks, SHARES),
                      note="Table 8: budgets of 150 (Image) and 30 (Text) epochs")


SMOKE_BUDGET = 5


def smoke(data_root=None) -> GridPreset:
    by_model = {m: {k: smoke_arm(a, 64) for k, a in arms.items()}
                for m, arms in paper_arms("image").items()}
    ref = smoke_digits()
    return GridPreset("smoke", _entries([("digits", ref, SMOKE_BUDGET, by_model)], SHARES),
                      note=f"CPU smoke run: digits 8x8, a {SMOKE_BUDGET}-epoch budget, 2-layer "
                           f"models; checks the pipeline, not the paper's numbers")


PRESETS = {"smoke": smoke, "paper": paper}



def table(ds: xr.Dataset):
    """Mean test accuracy (%) per SPT share (rows) and task_model (columns), beside Table 8, then
    each share's gain over the whole budget from scratch (0%), paired by seed: mean, 95%
    interval, seeds ahead."""
    import pandas as pd

    acc = ds["test_accuracy"]
    columns = {f"{t}_{m}": {"task": t, "model": m} for t in acc.task.values
               for m in acc.model.values}
    ours = mean_rows(ds, {f"{float(s):.0%} SPT (ours)": {"spt_share": s}
                          for s in acc.spt_share.values}, columns)
    paper = {f"{s:.0%} SPT (paper)": v for s, v in TABLE8.items()}
    table = pd.DataFrame.from_dict({**ours, **paper}, orient="index").round(2)
    scratch = ds["test_accuracy"].sel(spt_share=0.0) * 100
    gains = {f"gain: {float(s):.0%} SPT - 0% (95% CI, seeds ahead)": {
        f"{t}_{m}": format_gain(paired_gain(ds["test_accuracy"].sel(spt_share=s) * 100,
                                            scratch).sel(task=t, model=m))
        for t in acc.task.values for m in acc.model.values}
        for s in acc.spt_share.values if float(s) > 0 and 0.0 in acc.spt_share.values}
    return with_gains(table, pd.DataFrame.from_dict(gains, orient="index"))


STUDY = Study(NAME, "Table 8 and Fig. 5: a fixed epoch budget with 0 / 20 / 40 / 60% spent on SPT",
              ("task", "model", "spt_share", "seed"), PRESETS, table, takes_models=True)
