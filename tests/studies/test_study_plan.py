"""`spt study plan`: every stage of every cell sized before anything trains, with the paper's split
sizes when no data root is given, and flags for what cannot work as intended."""
import math
import time

import pytest

from spt.config import TrainConfig
from spt.studies import STUDIES, plan
from spt.studies.cli import cmd_plan
from spt.studies.commands.plan import format_plans, plan_stage
from spt.studies.machinery.arms import TaskRef
from spt.studies.machinery.stages import StageView


def view(stage="finetune", **train):
    cfg = TrainConfig(**{**dict(lr=1e-3, batch_size=10, epochs=5, progress=False), **train})
    return StageView(stage, cfg, None, TaskRef("listops", root="DATA"))


SIZES = {"train": 100, "val": 10, "test": 10}


def test_every_paper_preset_plans_in_seconds_without_data_and_flags_nothing():
    t0 = time.perf_counter()
    plans = [p for name in STUDIES for p in plan(name, preset="paper")]
    assert time.perf_counter() - t0 < 60
    assert len(plans) > 200
    flagged = [(p.study, p.cell, p.stage, p.flags) for p in plans if p.flags]
    assert not flagged
    text = [p for p in plans if p.study == "02_transformers_vs_s4" and p.task == "text"
            and p.stage == "finetune" and p.coords.get("model") == "s4"][0]
    assert text.examples == {"train": 22500, "val": 2500, "test": 25000}  # IMDb, 10% held out
    assert (text.steps_per_epoch, text.cap, text.warmup) == (1407, 50_000, 5000)
    assert text.lr_shape[0] < 0.01 and text.lr_shape[-1] < 0.01  # warmup start, decayed at the cap


def test_retrieval_pretraining_is_planned_in_the_documents_it_reads():
    """Table 4's PT BSZ 32 on Retrieval: 32 pairs, 64 documents a step; an epoch reads all 294,172
    documents of the 147,086 training pairs in 4,597 steps (the authors' AAN collate)."""
    pt = [p for p in plan("01_lra_transformers", preset="paper", tasks=["retrieval"])
          if p.stage == "pretrain" and p.coords.get("init") == "masked"][0]
    assert pt.examples["train"] == 294_172 and pt.batch == 64 and pt.steps_per_epoch == 4_597
    assert any("both documents of 32 pairs (64 documents)" in n and "294,172 documents" in n
               for n in pt.notes), pt.notes
    ft = [p for p in plan("01_lra_transformers", preset="paper", tasks=["retrieval"])
          if p.stage == "finetune" and p.coords.get("init") == "masked"][0]
    assert ft.examples["train"] == 147_086  # the finetuning stage reads pairs


def test_the_small_data_scale_fractions_reach_their_lr_and_decay():
    plans = [p for p in plan("04_data_scales", preset="paper") if p.stage != "pretrain"]
    tiny = [p for p in plans if p.coords["fraction"] == 0.005]
    full = {(p.task, p.stage): p.validations for p in plans if p.coords["fraction"] == 1.0}
    for p in tiny:
        assert p.cap > p.warmup and p.lr_shape[1] > 0.9 and p.lr_shape[-1] < 0.01, p.cell
        assert p.patience_from == p.warmup and p.patience_steps >= p.warmup
        # thinned (every 200 epochs): as many validations as the full data's, not ~7,000
        assert p.validations <= full[p.task, p.stage], (p.cell, p.validations)


def test_the_plan_sizes_steps_caps_and_the_schedule():
    p = plan_stage("s", {"task": "x"}, view(epochs=5, warmup_steps=10, schedule="cosine",
                                            patience=2, eval_every=1), SIZES)
    assert (p.steps_per_epoch, p.cap, p.validations, p.patience_steps) == (10, 50, 5, 20)
    assert p.lr_shape[0] == pytest.approx(0.1) and p.lr_shape[2] < 1
    assert not p.flags
    q = plan_stage("s", {}, view(epochs=10**6, max_steps=30, accum_steps=2), SIZES)
    assert (q.steps_per_epoch, q.cap, q.epochs, q.batch) == (5, 30, None, 20)


@pytest.mark.parametrize("train, sizes, flag", [
    (dict(warmup_steps=50, schedule="constant"), SIZES, "does not end within the run"),
    (dict(), {"train": 100, "val": 0, "test": 10}, "empty val split"),
])
def test_what_cannot_work_is_flagged(train, sizes, flag):
    p = plan_stage("s", {}, view(**train), sizes)
    assert any(flag in f for f in p.flags), p.flags
    assert "FLAG" in format_plans([p])


def test_a_smoke_preset_plans_without_flags_and_says_why():
    """Smoke stages run a few steps with their own warmups: noted as expected, not flagged (an
    empty split still is)."""
    plans = plan("00_quickstart", preset="smoke")
    assert plans and not [p.flags for p in plans if p.flags]
    assert all(any("expected in a smoke preset" in n for n in p.notes) for p in plans)
    smoke = plan_stage("s", {}, view(warmup_steps=50), SIZES, smoke=True)
    assert not smoke.flags and plan_stage("s", {}, view(warmup_steps=50), SIZES).flags
    empty = plan_stage("s", {}, view(), {"train": 100, "val": 0, "test": 10}, smoke=True)
    assert empty.flags == ["empty val split"]


def test_a_cosine_of_a_set_length_that_stays_near_its_peak_is_noted():
    p = plan_stage("s", {}, view(schedule="cosine", max_steps=10**6, schedule_steps=10**6), SIZES)
    assert not p.flags and any("stays at or above" in n for n in p.notes), p.notes


def test_a_periodic_cosine_is_not_flagged():
    p = plan_stage("s", {}, view(epochs=50, schedule="cosine", warmup_steps=2,
                                 schedule_steps=20), SIZES)
    assert not p.flags and math.isclose(min(p.lr_shape), min(p.lr_shape))


def test_the_cli_exits_1_on_a_flag_unless_allowed(monkeypatch, capsys):
    import sys
    plan_module = sys.modules["spt.studies.commands.plan"]  # spt.studies.commands.plan is also the function
    flagged = plan_stage("s", {"task": "x"}, view(warmup_steps=50), SIZES)
    monkeypatch.setattr(plan_module, "plan", lambda *a, **k: [flagged])

    class Args:
        name, preset, param, tasks, csv, allow_flags = ["04_data_scales"], "paper", [], None, \
            None, False
    assert cmd_plan(Args) == 1
    Args.allow_flags = True
    assert cmd_plan(Args) == 0
    assert "FLAG" in capsys.readouterr().out
    Args.allow_flags, Args.preset = False, "smoke"
    monkeypatch.setattr(plan_module, "plan", lambda *a, **k: [])
    assert cmd_plan(Args) == 0
    assert "smoke preset: every stage runs a few steps" in capsys.readouterr().out


def test_plan_reads_the_data_when_given_a_root(tmp_path):
    from spt.data.fixtures import write_fixtures
    write_fixtures(tmp_path, tasks=["listops"])
    plans = plan("01_lra_transformers", preset="paper", data_root=tmp_path, tasks=["listops"])
    assert plans and all(p.examples["train"] < 100 for p in plans)  # the fixture's few examples
