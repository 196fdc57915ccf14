"""Study 14: cheap priors against SPT, and the range probe. Each prior arm is its family's arm with
only the prior changed; the probe caps the span it says; the analysis reads shares and spans
right from a hand-made result."""
import dataclasses

import numpy as np
import pytest
import xarray as xr

from spt.analysis.range_probe import span_of
from spt.free_conv_config import FreeConvConfig
from spt.studies import priors_and_range as m14
from spt.studies.machinery.baselines import baseline_gains

STUDY = m14.STUDY


def _arms(preset):
    return {(c["task"], c["model"], c["prior"], c["init"], c["span"]): e.job
            for e in preset.entries for c in [dict(e.coords)]}


@pytest.mark.parametrize("preset", ["laptop", "paper"])
def test_a_prior_changes_the_model_and_nothing_else(preset):
    arms = _arms(STUDY.preset(preset, "DATA"))
    tasks = {k[0] for k in arms if k[1] != "probe"}
    assert tasks
    for task in tasks:
        for init in ("scratch", "spt"):
            t = arms[task, "transformer", "none", init, m14.UNCAPPED]
            a = arms[task, "transformer", "alibi", init, m14.UNCAPPED]
            assert a.model == dataclasses.replace(t.model, positions="alibi")
            b = arms[task, "transformer", "alibi_bias", init, m14.UNCAPPED]
            assert b.model == dataclasses.replace(t.model, locality_bias=True)
            s = arms[task, "s4", "none", init, m14.UNCAPPED]
            tdi = arms[task, "s4", "tdi", init, m14.UNCAPPED]
            assert tdi.model == dataclasses.replace(s.model, task_init="spectrum")
            free = arms[task, "s4", "free_conv", init, m14.UNCAPPED].model
            assert isinstance(free, FreeConvConfig)
            for field in ("d_model", "n_layers", "max_len", "dropout", "norm", "prenorm", "glu",
                          "pooling", "head"):
                assert getattr(free, field) == getattr(s.model, field), field
            for prior_arm, base in ((a, t), (b, t), (tdi, s)):
                assert (prior_arm.train, prior_arm.pretrain, prior_arm.objective) == \
                    (base.train, base.pretrain, base.objective)
            assert (init == "spt") == a.is_spt == tdi.is_spt


def test_the_free_kernel_arm_prints_its_size_beside_the_s4_models():
    """A free kernel is far larger than the S4 it replaces: its arm's note says how much."""
    from spt.paper import ssm_row
    arms = _arms(STUDY.preset("paper", "DATA"))
    note = arms["pathx", "s4", "free_conv", "scratch", m14.UNCAPPED].note
    assert "50.33M weights (6 layers x 2 directions x 256 channels x 16384 lags)" in note
    assert "1.29M parameters in the whole S4 model" in note
    assert arms["pathx", "s4", "none", "scratch", m14.UNCAPPED].model == ssm_row("pathx", "s4").model
    assert "whole S4 model" in STUDY.deviations("paper").to_string()


@pytest.mark.parametrize("preset", ["laptop", "paper", "smoke"])
def test_the_probe_caps_the_span_it_is_filed_under(preset):
    arms = _arms(STUDY.preset(preset, "DATA"))
    probes = {k: a for k, a in arms.items() if k[1] == "probe"}
    assert len({k[4] for k in probes}) >= 3
    for (task, _, prior, init, span), arm in probes.items():
        assert prior == "none" and init == "scratch" and not arm.is_spt
        assert arm.model.n_layers == 1 and arm.model.causal
        assert span_of(arm.model) == (None if span == m14.UNCAPPED else span)


def test_the_laptop_probe_checks_a_known_dependency_length():
    arms = _arms(STUDY.preset("laptop"))
    spans = sorted(k[4] for k in arms if k[0] == "lagged")
    lag = m14.LAGGED["lag"]
    assert lag in spans and any(0 <= k < lag for k in spans) and max(spans) > lag


def test_the_paper_preset_plans_without_a_flag():
    from spt.studies.commands.plan import plan
    plans = plan(STUDY.name, preset="paper", tasks=["listops"])
    assert plans and not [p for p in plans if p.flags], [p.flags for p in plans if p.flags]


def _result():
    """A hand-made study 14 result on one task (digits), 3 seeds."""
    seeds = [0, 1, 2]
    coords = {"task": ["digits"], "model": ["transformer", "s4", "probe"],
              "prior": ["none", "alibi", "free_conv", "tdi"], "init": ["scratch", "spt"],
              "span": [m14.UNCAPPED, 0, 4, 8, 16], "seed": seeds}
    shape = tuple(len(v) for v in coords.values())
    acc, val = np.full(shape, np.nan), np.full(shape, np.nan)
    ds = xr.Dataset({"test_accuracy": (tuple(coords), acc), "val_accuracy": (tuple(coords), val)},
                    coords=coords)

    def put(model, prior, init, span, values, vals=None):
        sel = dict(task="digits", model=model, prior=prior, init=init, span=span)
        ds["test_accuracy"].loc[sel] = values
        ds["val_accuracy"].loc[sel] = values if vals is None else vals

    u = m14.UNCAPPED
    put("transformer", "none", "scratch", u, [0.60, 0.62, 0.61])
    put("transformer", "none", "spt", u, [0.70, 0.74, 0.75])       # SPT +12 points
    put("transformer", "alibi", "scratch", u, [0.65, 0.69, 0.67])  # +6: half of it
    put("transformer", "alibi", "spt", u, [0.76, 0.77, 0.78])
    put("s4", "none", "scratch", u, [0.50, 0.50, 0.50])
    put("s4", "none", "spt", u, [0.70, 0.71, 0.72])                # SPT +21
    put("s4", "free_conv", "scratch", u, [0.70, 0.71, 0.72], [0.9, 0.9, 0.9])  # all of it
    put("s4", "free_conv", "spt", u, [0.72, 0.72, 0.72])
    put("s4", "tdi", "scratch", u, [0.50, 0.51, 0.49], [0.5, 0.5, 0.5])        # none of it
    put("s4", "tdi", "spt", u, [0.70, 0.70, 0.70])
    for span, values in ((u, 0.80), (0, 0.20), (4, 0.30), (8, 0.78), (16, 0.80)):
        put("probe", "none", "scratch", span, [values] * 3)
    return ds


def test_shares_and_the_best_prior():
    sh = m14.shares(_result())
    row = sh.loc[("digits", "transformer", "alibi")]
    assert row["SPT - scratch"] == pytest.approx(12.0)
    assert row["prior - scratch"] == pytest.approx(6.0)
    assert row[m14.SHARE].startswith("50% [")
    assert sh.loc[("digits", "s4", "free_conv")][m14.SHARE].startswith("100% [")
    assert sh.loc[("digits", "s4", "tdi")][m14.SHARE].startswith("0% [")
    assert bool(sh.loc[("digits", "s4", "free_conv")]["best prior"])
    assert not bool(sh.loc[("digits", "s4", "tdi")]["best prior"])
    assert m14.best_prior(_result(), "digits", "s4") == "free_conv"


def test_needed_spans_reads_the_probe():
    spans = m14.needed_spans(_result())
    assert spans.loc["digits", "span needed (mean curve)"] == "8"
    assert spans.loc["digits", "per seed"] == "8, 8, 8"
    assert spans.loc["digits", "span 0 (no context)"] == pytest.approx(20.0)
    assert "span needed: digits 8" in m14.headline(_result())


def test_baselines_add_a_prior_beside_each_scratch_arm_of_another_study():
    from spt.studies.registry import study
    s02 = study("02_transformers_vs_s4")
    plain = s02.preset("paper", "DATA")
    more = s02.preset("paper", "DATA", baselines=["alibi", "tdi"])
    assert s02.preset("paper", "DATA", baselines=[]) == plain
    extra = [e for e in more.entries if e not in plain.entries]
    scratch = {(dict(e.coords)["task"], dict(e.coords)["model"]): e.job for e in plain.entries
               if dict(e.coords)["init"] == "scratch"}
    assert extra and len(extra) == len(scratch)  # one prior per family applies here
    for e in extra:
        c = dict(e.coords)
        base = scratch[c["task"], c["model"]]
        if c["model"] == "transformer":
            assert c["init"] == "scratch+alibi" and e.job.model.positions == "alibi"
        else:
            assert c["init"] == "scratch+tdi" and e.job.model.task_init == "spectrum"
        assert e.job.train == base.train and not e.job.is_spt
    with pytest.raises(ValueError, match="no cheap prior"):
        s02.preset("paper", "DATA", baselines=["rope"])


def test_a_studys_table_shows_its_baselines_gains():
    seeds = [0, 1, 2]
    acc = xr.DataArray([[[0.60, 0.62, 0.61], [0.70, 0.74, 0.75], [0.66, 0.67, 0.68]]],
                       dims=("task", "init", "seed"),
                       coords={"task": ["text"], "init": ["scratch", "spt", "scratch+alibi"],
                               "seed": seeds})
    gains = baseline_gains(xr.Dataset({"test_accuracy": acc}))
    assert list(gains.index) == ["gain: scratch+alibi - scratch (95% CI, seeds ahead)"]
    assert gains.loc[gains.index[0], "text"].startswith("+6.0 [")
    assert baseline_gains(xr.Dataset({"test_accuracy": acc.sel(init=["scratch", "spt"])})) \
        is None


@pytest.mark.parametrize("preset", ["laptop", "paper"])
def test_the_techniques_change_the_supervised_stage_and_nothing_else(preset):
    from spt.studies.machinery.baselines import TECHNIQUES
    p = STUDY.preset(preset, "DATA")
    arms = _arms(p)
    refs = {(c["task"], c["model"], c["prior"], c["init"]): e.ref
            for e in p.entries for c in [dict(e.coords)] if c["span"] == m14.UNCAPPED}
    tasks = {k[0] for k in arms if k[1] != "probe"}
    for task in tasks:
        ref_task = refs[task, "s4", "none", "scratch"].name
        changes, options = TECHNIQUES[ref_task]
        for family, prior, base in (("transformer", "techniques", "none"),
                                    ("s4", "techniques", "none"),
                                    ("s4", "free_conv+techniques", "free_conv")):
            for init in ("scratch", "spt"):
                a = arms[task, family, prior, init, m14.UNCAPPED]
                b = arms[task, family, base, init, m14.UNCAPPED]
                assert a.model == b.model and a.pretrain == b.pretrain
                assert a.objective == b.objective and a.train != b.train
                assert a.train == dataclasses.replace(b.train, **changes)
                ref, base_ref = refs[task, family, prior, init], refs[task, family, base, init]
                assert ref.options == base_ref.options + options
    if preset == "paper":
        assert dict(refs["pathfinder", "s4", "techniques", "scratch"].options)["extra_train"] == \
            ("curv_baseline", "curv_contour_length_9")
        for task in ("text", "retrieval"):
            assert arms[task, "s4", "techniques", "scratch", -1].train.aux_denoise == 1.0


def test_baselines_add_the_techniques_where_the_task_has_them():
    from spt.studies.registry import study
    s01 = study("01_lra_transformers")
    more = s01.preset("paper", "DATA", baselines=["techniques"])
    added = {dict(e.coords)["task"]: e for e in more.entries
             if dict(e.coords)["init"] == "scratch+techniques"}
    assert set(added) == {"listops", "text", "retrieval", "image", "pathfinder", "pathx"}
    assert added["listops"].job.train.augment and not added["listops"].job.train.aux_denoise
    assert added["text"].job.train.aux_denoise == 1.0 and not added["text"].job.train.augment
    assert dict(added["pathfinder"].ref.options)["extra_train"]


def test_a_free_kernel_from_scratch_trains_its_spt_arms_finetuning_budget():
    """An untuned layer gets its SPT arm's budget (as study 13's mixers), not the step caps Gu
    et al. tuned for S4 from scratch (ListOps 76,800 vs 1,200,000 before)."""
    from spt.studies import plan
    from spt.studies.commands.plan import caps

    df = caps(plan("14_priors_and_range", preset="paper"), by=("task", "model", "prior"))
    free = df.xs("s4", level="model").loc[(slice(None), ["free_conv", "free_conv+techniques"]), :]
    assert len(free) >= 6
    for what in ("cap", "budget_h", "patience"):
        assert (free[f"scratch_{what}"] == free[f"finetune_{what}"]).all(), free
    s4 = df.xs(("s4", "none"), level=("model", "prior"))
    assert (s4["scratch_cap"] != s4["finetune_cap"]).any()  # the cited S4 keeps Gu et al.'s
