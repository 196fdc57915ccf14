"""Study 14 (not in the paper) — how much of SPT's gain a cheap prior recovers, and how long-range
a task really is.

Two lines of work since the paper ask what "SPT adds N points" is measured against:

* Miralles-González et al. 2025 (arXiv 2501.14850): most LRA accuracy comes from short-range
  dependencies; a Transformer from scratch with a suitable positional encoding, and an
  unrestricted convolution kernel, reach the SSMs' numbers.
* Coser, Zollo, Soda & Orvieto 2026 (arXiv 2605.21070): SPT helps mainly by teaching attention to
  favour nearby positions ("proximity interactions"), which label gradients from a random start
  do not find.
* Chen & Chen 2025 (arXiv 2509.20789): a task-dependent initialisation of an SSM (its first
  layer's spectrum matched to the data's) is a data-driven prior that costs no pretraining.

So each model family gets, beside scratch and SPT, its cheap priors (:mod:`spt.studies.machinery.baselines`),
each trained from scratch and under SPT, with the family's own protocol:

    transformer : "alibi"      ALiBi (Press et al. 2022): its fixed distance-decaying attention
                               bias in place of the model's positions, as Press et al. use it
                  "alibi_bias" the same bias on top of the model's own positions: locality
                               given, where each input is kept
    s4          : "free_conv"  the same blocks with an unrestricted kernel, one free weight per
                               lag (spt.models.free_conv)
                  "tdi"        task-dependent initialisation: the first layer's spectrum fitted to
                               the training inputs' (spt.models.task_init; our reading of the paper)

and per task the table reads: scratch, each prior, SPT, SPT on top of the best prior (the prior
whose scratch run validates best), and the **share of SPT's gain a prior recovers**,
mean(prior - scratch) / mean(SPT - scratch) paired by seed, with its Fieller 95% interval
(:func:`spt.results.share_recovered`).

Beside it, the **range probe** (:mod:`spt.analysis.range_probe`): one probe model trained from
scratch with its reach capped at a ladder of spans k (the longest distance between two inputs
that can meet in one output), accuracy against k, and the span the task needs. Span -1 is the
uncapped probe (:data:`UNCAPPED`); the prior and SPT cells carry span -1 too.

Grid: task x model x prior x init x span x seed.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
import xarray as xr

from ..analysis.range_probe import UNCAPPED, capped, needed_span
from ..config import ObjectiveConfig, TrainConfig, replace
from ..data import registry
from ..paper import ssm_row, transformer_row
from ..results import format_gain, format_share, paired_gain, share_recovered
from ..ssm_config import SSMConfig
from .machinery.arms import Arm, TaskRef, task_ref
from .machinery.baselines import PRIORS, family_arms, technique_ref
from .machinery.job import Entry, GridPreset
from .machinery.paper_arms import scratch_arm, spt_arm
from .machinery.smoke import smoke_arm, smoke_digits
from .machinery.study import Study, need_root

NAME = "14_priors_and_range"
TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")


def probe_arms(arm: Arm, spans) -> dict:
    """{span: Arm}: `arm` (a scratch arm) with its reach capped at each span, and UNCAPPED."""
    out = {UNCAPPED: arm}
    for k in spans:
        out[k] = dataclasses.replace(arm, model=capped(arm.model, k))
    return out


def _entries(task: str, ref: TaskRef, families: dict, probe: dict) -> list:
    """Entries of one task: families {family: {(prior, init): Arm}}, probe {span: Arm}. A prior
    that trains with the techniques reads the task with their data options (technique_ref)."""
    out = [Entry((("task", task), ("model", f), ("prior", p), ("init", i), ("span", UNCAPPED)),
                 technique_ref(ref, p, f), arm)
           for f, arms in families.items() for (p, i), arm in arms.items()]
    out += [Entry((("task", task), ("model", "probe"), ("prior", "none"), ("init", "scratch"),
                   ("span", k)), ref, arm) for k, arm in probe.items()]
    return out


# ------------------------------------------------------------------------------- paper preset
PROBE_NOTE = ("range probe (not in the paper): a one-layer causal S4 with the row's protocol, its "
              "kernel truncated past the span (spt.analysis.range_probe)")


def paper_spans(seq_len: int) -> tuple:
    """The probe's ladder on an LRA task: 0 and powers of 4 from 4 up to the sequence length."""
    return (0,) + tuple(4 ** i for i in range(1, 9) if 4 ** i < seq_len)


def paper_probe(task: str) -> Arm:
    """The probe of an LRA task: the S4 row's scratch arm at one causal layer, whose span is its
    reach: a pair d positions apart meets only where the later input sees the earlier one (w >= d).
    A bidirectional probe can also relate them at a position between them (w = d / 2), which it
    learns on some seeds and not others, and a deeper one needs more than the minimum to compose
    them; the causal one-layer probe's knee is exact (tests/test_range_probe.py)."""
    arm = scratch_arm(ssm_row(task, "s4"))
    return dataclasses.replace(arm, model=replace(arm.model, n_layers=1, causal=True),
                               note=PROBE_NOTE)


def paper_task_arms(task: str) -> tuple:
    """(families, probe) of one LRA task: Table 2's rotary Transformer and the final S4 with their
    priors, and the probe ladder."""
    t, s = transformer_row(task, "rotary_masked"), ssm_row(task, "s4")
    families = {"transformer": family_arms("transformer", scratch_arm(t), spt_arm(t), task),
                "s4": family_arms("s4", scratch_arm(s), spt_arm(s), task)}
    return families, probe_arms(paper_probe(task), paper_spans(s.model.max_len))


def paper(data_root=None) -> GridPreset:
    root = need_root(data_root, NAME)
    entries = []
    for t in TASKS:
        entries += _entries(t, task_ref(t, root), *paper_task_arms(t))
    return GridPreset("paper", tuple(entries), seeds=(0, 1, 2), note=(
        "LRA data; Table 2's rotary Transformer and the final S4, each from scratch and with "
        "masked SPT, with and without their cheap priors; the range probe on each task"))


# ------------------------------------------------------------------------------- smoke preset
def smoke(data_root=None) -> GridPreset:
    """Every arm and two probe spans at smoke size on 32 digits per split: the pipeline, end to
    end, in under a minute."""
    ref = dataclasses.replace(smoke_digits(), limit=32)
    families, _ = paper_task_arms("image")
    small = {f: {k: smoke_arm(a, 64, epochs=1, d_model=16, n_layers=1) for k, a in arms.items()}
             for f, arms in families.items()}
    probe = probe_arms(smoke_arm(paper_probe("image"), 64, epochs=1, d_model=16, n_layers=1),
                       (0, 8))
    return GridPreset("smoke", tuple(_entries("digits", ref, small, probe)), seeds=(0,), note=(
        "CPU smoke run: every prior arm from scratch and with SPT at d=16 x 1, one epoch per "
        "stage, 32 digits per split, and the probe at spans 0 and 8; checks the pipeline, not "
        "the finding"))


# ------------------------------------------------------------------------------ laptop preset
# Digits (100 labelled 8x8 scans as 64 pixel tokens): the Transformer and its budgets are the
# quickstart's (where SPT shows at laptop scale, +14.3 points over 6 seeds), the S4 and its
# budgets study 13's laptop S4 (d=32 x 2). The generated lagged copy (spt.data.lagged: 31 tokens,
# the label 8 positions after a marker) checks the probe against a known dependency length; SPT
# cannot help there by construction (the masked symbols are unpredictable), so it runs the probe
# only. The probe: a one-layer causal S4D (d=32, N=16, pre-norm, no dropout) at every span.
LAPTOP_SEEDS = (0, 1, 2, 3)
LAGGED = dict(seq_len=31, lag=8, symbols=3, n_train=1000, val_size=300, test_size=300)
LAPTOP_SPANS = {"digits": (0, 2, 4, 8, 16, 32), "lagged": (0, 4, 6, 8, 12, 16)}
LAPTOP_NOTE = ("laptop preset: the embedded digits as pixel tokens (the quickstart's Transformer, "
               "study 13's laptop S4) and the generated lagged copy (the probe only) stand in for "
               "the LRA tasks")


def laptop_probe(seq_len: int, task: str) -> Arm:
    """The laptop probe: a one-layer causal S4D, uncapped, trained from scratch on `task`."""
    model = SSMConfig(kind="s4d", d_model=32, n_layers=1, d_state=16, dropout=0.0, causal=True,
                      max_len=seq_len)
    if task == "lagged":
        train = TrainConfig(lr=3e-3, batch_size=32, epochs=30, warmup_steps=10,
                            schedule="constant", eval_every=5, progress=False)
    else:
        train = TrainConfig(lr=3e-3, batch_size=16, epochs=150, patience=60, warmup_steps=20,
                            schedule="constant", eval_every=10, progress=False)
    return Arm(model=model, train=train, note=LAPTOP_NOTE)


def laptop_s4_arms() -> tuple[Arm, Arm]:
    """(scratch, masked SPT) of the laptop S4 (d=32 x 2, N = 32) on the digits: 400 pretraining
    steps at lr 2e-3 (half the pixels masked, CE), then at most 150 supervised epochs at lr 1e-3
    with patience 60, validated every 10 epochs."""
    from .machinery.laptop import small_s4
    model = small_s4(64)
    pretrain = TrainConfig(lr=2e-3, batch_size=16, epochs=10**6, max_steps=400, warmup_steps=50,
                           eval_every=10, progress=False)
    supervised = TrainConfig(lr=1e-3, batch_size=16, epochs=150, patience=60, warmup_steps=20,
                             schedule="constant", eval_every=10, progress=False)
    objective = ObjectiveConfig(kind="masked", mask_ratio=0.5, loss="ce")
    return (Arm(model=model, train=supervised, note=LAPTOP_NOTE),
            Arm(model=model, objective=objective, pretrain=pretrain, train=supervised,
                pretrain_val=100, note=LAPTOP_NOTE))


def laptop_families() -> dict:
    """{family: {(prior, init): Arm}} on the digits."""
    from .machinery.digits_setup import LAPTOP
    quick = LAPTOP.arms()
    return {"transformer": family_arms("transformer", quick["scratch"], quick["spt"], "digits"),
            "s4": family_arms("s4", *laptop_s4_arms(), "digits")}


def laptop(data_root=None) -> GridPreset:
    from .machinery.digits_setup import LAPTOP
    lagged = TaskRef("lagged", options=tuple(LAGGED.items()))
    entries = _entries("digits", LAPTOP.task(), laptop_families(),
                       probe_arms(laptop_probe(64, "digits"), LAPTOP_SPANS["digits"]))
    entries += _entries("lagged", lagged, {}, probe_arms(laptop_probe(LAGGED["seq_len"], "lagged"),
                                                         LAPTOP_SPANS["lagged"]))
    return GridPreset("laptop", tuple(entries), seeds=LAPTOP_SEEDS, note=(
        "2-core CPU: 100 digits as 64 pixel tokens (the Transformer with and without ALiBi, the "
        "S4 with and without a free kernel or TDI, each from scratch and with masked SPT) and the "
        "range probe on the digits and on the generated lagged copy (lag 8), 4 seeds"))


PRESETS = {"smoke": smoke, "laptop": laptop, "paper": paper}


# ----------------------------------------------------------------------------------- analysis
def _metric(ds: xr.Dataset) -> str:
    return "test_accuracy" if "test_accuracy" in ds else next(
        v for v in ds.data_vars if v.startswith("test_"))


def _family(ds: xr.Dataset, task: str, family: str, var: str) -> xr.DataArray:
    """`var` of one family's uncapped cells on `task`: over (prior, init, seed)."""
    return ds[var].sel(task=task, model=family, span=UNCAPPED)


def _has(da: xr.DataArray) -> bool:
    return bool(da.notnull().any())


def best_prior(ds: xr.Dataset, task: str, family: str) -> Optional[str]:
    """The family's prior whose scratch run validates best on `task` (mean over seeds), or None."""
    val = _family(ds, task, family, _metric(ds).replace("test_", "val_"))
    scores = {p: float(val.sel(prior=p, init="scratch").mean("seed")) for p in PRIORS[family]
              if p in val.prior.values and _has(val.sel(prior=p, init="scratch"))}
    return max(scores, key=scores.get) if scores else None


SHARE = "share of SPT's gain"  # the shares() column with format_share's text


def shares(ds: xr.Dataset):
    """A DataFrame, one row per (task, family, prior): the mean accuracy of scratch, the prior,
    SPT and SPT with the prior; what the prior adds under SPT (paired by seed: mean, 95% t
    interval, seeds ahead); the prior's gain over scratch and SPT's, paired by seed; the share of
    SPT's gain the prior recovers with its Fieller 95% interval; and whether the prior is the
    family's best (on validation)."""
    import pandas as pd

    m, rows = _metric(ds), []
    for task in [str(t) for t in ds.task.values]:
        for family in [f for f in PRIORS if f in ds.model.values]:
            acc = _family(ds, task, family, m) * 100
            if not _has(acc.sel(prior="none")):
                continue
            scratch, spt = acc.sel(prior="none", init="scratch"), acc.sel(prior="none", init="spt")
            best = best_prior(ds, task, family)
            for prior in [p for p in PRIORS[family] if p in acc.prior.values]:
                mine = acc.sel(prior=prior, init="scratch")
                if not _has(mine):
                    continue
                s = share_recovered(mine, spt, scratch)
                g = paired_gain(mine, scratch)
                on_top = paired_gain(acc.sel(prior=prior, init="spt"), spt)
                rows.append({"task": task, "model": family, "prior": prior,
                             "scratch": float(scratch.mean()), "prior from scratch":
                             float(mine.mean()), "SPT": float(spt.mean()),
                             "SPT + prior": float(acc.sel(prior=prior, init="spt").mean()),
                             "SPT + prior - SPT": format_gain(on_top),
                             "prior - scratch": float(g.gain), "SPT - scratch":
                             float(s.spt_gain), SHARE: format_share(s),
                             "best prior": prior == best})
    return pd.DataFrame(rows).set_index(["task", "model", "prior"]).round(1)


def range_curve(ds: xr.Dataset) -> xr.DataArray:
    """The probe's test accuracy (%) over (task, span, seed); span UNCAPPED is the uncapped
    probe."""
    probe = ds[_metric(ds)].sel(model="probe", prior="none", init="scratch") * 100
    return probe.dropna("span", how="all")


def needed_spans(ds: xr.Dataset, share: float = 0.9):
    """A DataFrame per task: the span the task needs (:func:`needed_span` on the mean curve, then
    on each seed's; "more than K" when no span of the ladder reaches it), the uncapped probe's
    accuracy, chance, and the accuracy with no context (span 0)."""
    import pandas as pd

    curve = range_curve(ds)
    rows = []
    for task in [str(t) for t in curve.task.values]:
        c = curve.sel(task=task).dropna("span", how="all")
        chance = chance_pct(task)
        capped_spans = [int(k) for k in c.span.values if int(k) != UNCAPPED]

        def need(da):
            return needed_span({k: float(da.sel(span=k)) for k in capped_spans},
                               float(da.sel(span=UNCAPPED)), chance, share)
        longest = f"more than {max(capped_spans)}" if capped_spans else "-"
        show = lambda k: longest if k is None else str(k)  # noqa: E731
        mean = c.mean("seed")
        per_seed = [need(c.sel(seed=s)) for s in c.seed.values if _has(c.sel(seed=s))]
        rows.append({"task": task, "span needed (mean curve)": show(need(mean)),
                     "per seed": ", ".join(show(k) for k in per_seed),
                     "uncapped": round(float(mean.sel(span=UNCAPPED)), 1),
                     "span 0 (no context)": round(float(mean.sel(span=0)), 1)
                     if 0 in capped_spans else np.nan, "chance": round(chance, 1)})
    return pd.DataFrame(rows).set_index("task")


def chance_pct(task: str) -> float:
    """Chance accuracy (%) on one of the study's tasks: 100 / its classes (the lagged copy's at
    the study's options)."""
    classes = LAGGED["symbols"] if task == "lagged" else registry.TASKS[task].classes
    return 100.0 / classes


def chance(ds: xr.Dataset) -> dict:
    """{task: chance accuracy (%)} of the tasks in the study's results."""
    return {str(t): chance_pct(str(t)) for t in ds.task.values}


def extra_tables(ds: xr.Dataset) -> list:
    return [("The span each task needs (the range probe)", needed_spans(ds))]


def headline(ds: xr.Dataset) -> str:
    """One line: per task and family, SPT's gain and the share each prior recovers; then the span
    each task needs (the lagged copy's truth beside it)."""
    parts = []
    sh = shares(ds)
    for (task, family), rows in sh.groupby(level=["task", "model"]):
        spt_gain = rows["SPT - scratch"].iloc[0]
        priors = ", ".join(f"{p} recovers {r[SHARE].split(' of ')[0]}"
                           for (_, _, p), r in rows.iterrows())
        parts.append(f"{task} {family}: SPT {spt_gain:+.1f}; {priors}")
    spans = needed_spans(ds)
    need = ", ".join(f"{t} {r['span needed (mean curve)']}" + (
        f" (truth {LAGGED['lag']})" if t == "lagged" else "") for t, r in spans.iterrows())
    return ". ".join(parts + [f"span needed: {need}"])


def table(ds: xr.Dataset):
    """The study's table: :func:`shares` (the priors against SPT), then :func:`needed_spans`."""
    return shares(ds)


STUDY = Study(NAME, "Cheap priors (ALiBi, a free kernel, task-dependent init) against SPT, and "
              "the range each task needs (a probe with a capped reach)",
              ("task", "model", "prior", "init", "span", "seed"), PRESETS, table,
              headline=headline, extra_tables=extra_tables)
