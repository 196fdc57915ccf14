"""Learning-rate schedules and optimiser groups of the engine: the lr reduced when validation
stops improving (schedule="plateau", checked against torch's ReduceLROnPlateau, resumed exactly),
a cosine of a fixed length (TrainConfig.schedule_steps) checked against transformers' own, and
weight decay on every parameter (TrainConfig.wd_groups); patience that does not count the warmup;
the step observer that times runs (spt.train.engine.observe).

Validation metrics are scripted as a function of the optimiser step (the last step taken when
validation runs), so the plateau's decisions are known in advance and the same in a killed and
resumed run as in an uninterrupted one.
"""
import math
import random

import numpy as np
import pytest
import torch
import torch.nn as nn

import spt.train.engine as engine
from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data import digits_task
from spt.models import classifier_model
from spt.train import pretrain
from spt.train.optim import (
    build_optimizer,
    build_scheduler,
    lr_factor,
    param_groups,
    plateau_state,
    plateau_update,
)

MODEL = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.1, max_len=64)
OBJ = ObjectiveConfig("masked", 0.5, "l1")
STEPS_PER_EPOCH = 3  # 48 training examples, batches of 16


@pytest.fixture(scope="module")
def task():
    return digits_task(size=8, n_train=48, val_size=40, test_size=40)


def cfg(**kw):
    return TrainConfig(**{**dict(lr=3e-3, batch_size=16, epochs=2, progress=False, seed=0), **kw})


# ------------------------------------------------------------------ plateau
def torch_plateau(values, higher_is_better: bool, patience: int, factor: float) -> list[float]:
    """The lr scale after each value, by torch's own ReduceLROnPlateau (the engine's settings:
    threshold 1e-4 'rel', no cooldown, min_lr 0; eps 0: spt has no floor on reductions)."""
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
        opt, mode="max" if higher_is_better else "min", factor=factor, patience=patience,
        threshold=1e-4, threshold_mode="rel", cooldown=0, min_lr=0.0, eps=0.0)
    scales = []
    for v in values:
        sched.step(v)
        scales.append(opt.param_groups[0]["lr"])
    return scales


def metric_sequence(rng: np.random.Generator, n: int) -> list[float]:
    """Values with runs of repeats, changes inside the 1e-4 threshold, signs of both kinds, a NaN."""
    v, out = rng.normal(), []
    for _ in range(n):
        move = rng.choice(["same", "tiny", "up", "down"])
        v = {"same": v, "tiny": v * (1 + rng.choice([-1, 1]) * 5e-5), "up": v + abs(rng.normal()),
             "down": v - abs(rng.normal())}[move]
        out.append(float(v))
    out[n // 2] = math.nan
    return out


@pytest.mark.parametrize("higher", [True, False])
@pytest.mark.parametrize("patience,factor", [(0, 0.2), (1, 0.5), (3, 0.2)])
def test_plateau_update_is_torchs_reduce_lr_on_plateau(higher, patience, factor):
    c = cfg(schedule="plateau", plateau_patience=patience, plateau_factor=factor)
    rng = np.random.default_rng(patience * 10 + int(higher))
    for _ in range(20):
        values = metric_sequence(rng, 30)
        state, ours = plateau_state(higher), []
        for v in values:
            plateau_update(state, v, higher, c)
            ours.append(state["scale"])
        np.testing.assert_allclose(ours, torch_plateau(values, higher, patience, factor),
                                   rtol=1e-12)


class Scripted:
    """Validation metric `name` = script(step), step: the last optimiser step taken; kills the run
    (KeyboardInterrupt) after step `kill_at`. Pass .on_step to fit and .evaluate to monkeypatch."""

    def __init__(self, task, name, script, kill_at=None):
        self.task, self.name, self.script, self.kill_at, self.step = task, name, script, kill_at, 0
        self.real = engine.evaluate

    def on_step(self, step: int) -> None:
        self.step = step
        if step == self.kill_at:
            raise KeyboardInterrupt("simulated kill")

    def evaluate(self, model, objective, dataset, *a, **kw):
        m = self.real(model, objective, dataset, *a, **kw)
        if dataset is self.task.val:
            m[self.name] = self.script(self.step)
        return m


def lrs_of_steps(monkeypatch) -> list:
    """The lr each optimiser step of the next fit() runs with (read by a step pre-hook)."""
    seen, real = [], engine.build_optimizer

    def spy(model, c):
        opt = real(model, c)
        opt.register_step_pre_hook(lambda o, args, kw: seen.append(o.param_groups[0]["lr"]))
        return opt

    monkeypatch.setattr(engine, "build_optimizer", spy)
    return seen


@pytest.mark.parametrize("select,higher", [(None, False), ("r2", True)])
def test_plateau_reduces_the_lr_from_the_next_step_after_the_warmup_factor(
        task, tmp_path, monkeypatch, select, higher):
    # validations after steps 3, 6, ..., 18; values chosen so the reductions fall inside the
    # warmup (step 6 < 8) and after it, with a change below torch's threshold that is not better
    base = [1.0, 1.0, 2.0, 2.0 * (1 + 5e-5), 2.0, 2.5]
    values = {3 * (i + 1): (v if higher else 10.0 - v) for i, v in enumerate(base)}  # losses > 0
    c = cfg(epochs=6, lr=1e-3, schedule="plateau", plateau_patience=0, plateau_factor=0.5,
            warmup_steps=8, select=select)
    name = select or "loss"
    script = Scripted(task, name, values.__getitem__)
    monkeypatch.setattr(engine, "evaluate", script.evaluate)
    seen = lrs_of_steps(monkeypatch)
    r = pretrain(task, MODEL, OBJ, c, tmp_path / "run", on_step=script.on_step)
    assert r.select == name and r.steps == 18
    scales = torch_plateau(list(values.values()), higher, 0, 0.5)
    assert scales[-1] < 1.0 and scales[1] < 1.0  # reduced during the warmup and after it
    # step s runs with lr x warmup factor x the scale left by the validations before it
    expected = [c.lr * lr_factor(s, 18, 8, "plateau") * ([1.0] + scales)[s // STEPS_PER_EPOCH]
                for s in range(18)]
    np.testing.assert_allclose(seen, expected, rtol=1e-12)
    # each history row shows the lr of the next step: the reduced one
    np.testing.assert_allclose(
        r.history["lr"].values,
        [c.lr * lr_factor(3 * (i + 1), 18, 8, "plateau") * scales[i] for i in range(6)],
        rtol=1e-12)


def step_script(step: int) -> float:
    """Validation loss after `step`: improves at 9, then flat (3 steps per epoch)."""
    return {3: 1.0, 6: 1.0, 9: 0.9}.get(step, 0.95)


def run_scripted(task, out, c, script, monkeypatch, **kw):
    monkeypatch.setattr(engine, "evaluate", script.evaluate)
    return pretrain(task, MODEL, OBJ, c, out, on_step=script.on_step, **kw)


def last_pt(out):
    return torch.load(out / "last.pt", weights_only=False)


def assert_same_weights(a, b):
    wa, wb = last_pt(a)["model"], last_pt(b)["model"]
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0, msg=k)


# killed with last.pt from step 6 (one bad validation counted), from step 15 (the lr just reduced)
# and from step 16 (mid-epoch, ckpt_every)
@pytest.mark.parametrize("kill_step,ckpt_every,saved_step,saved_scale",
                         [(8, None, 6, 1.0), (17, None, 15, 0.2), (18, 4, 16, 0.2)])
def test_a_killed_plateau_run_resumes_to_the_same_weights_and_lrs(
        task, tmp_path, monkeypatch, kill_step, ckpt_every, saved_step, saved_scale):
    c = cfg(epochs=7, schedule="plateau", plateau_patience=1, ckpt_every=ckpt_every)
    full = run_scripted(task, tmp_path / "full", c, Scripted(task, "loss", step_script),
                       monkeypatch)
    lr = full.history["lr"].values
    assert lr[0] == lr[3] == c.lr and lr[4] == pytest.approx(c.lr * 0.2)  # reduced after step 15
    assert lr[6] == pytest.approx(c.lr * 0.04)  # and again after step 21
    with pytest.raises(KeyboardInterrupt):
        run_scripted(task, tmp_path / "killed", c,
                    Scripted(task, "loss", step_script, kill_at=kill_step), monkeypatch)
    saved = last_pt(tmp_path / "killed")["state"]
    assert (saved["step"], saved["plateau"]["scale"]) == (saved_step, saved_scale)
    resumed = run_scripted(task, tmp_path / "killed", c, Scripted(task, "loss", step_script),
                          monkeypatch, resume=True)
    assert resumed.steps == full.steps == 21
    assert_same_weights(tmp_path / "killed", tmp_path / "full")
    np.testing.assert_array_equal(resumed.history["lr"].values, lr)
    assert last_pt(tmp_path / "killed")["state"]["plateau"] == \
        last_pt(tmp_path / "full")["state"]["plateau"] == {"best": 0.9, "bad": 0, "scale": 0.2 * 0.2}


class StepClock(Scripted):
    """Scripted, and a clock: seconds = optimiser steps taken in this process."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def on_step(self, step: int) -> None:
        self.t += 1.0
        super().on_step(step)


def test_the_partial_validation_of_a_budgeted_run_does_not_count(task, tmp_path, monkeypatch):
    flat = lambda step: 1.0  # noqa: E731  never better after the first validation
    c = cfg(epochs=3, schedule="plateau", plateau_patience=0)
    full = run_scripted(task, tmp_path / "full", c, Scripted(task, "loss", flat), monkeypatch)
    clock = StepClock(task, "loss", flat)
    cut = run_scripted(task, tmp_path / "cut", cfg(epochs=3, schedule="plateau",
                                                  plateau_patience=0, max_time=4.5),
                      clock, monkeypatch, clock=clock)  # stops after step 5: epoch 2 is partial
    np.testing.assert_allclose(cut.history["epoch"].values, [1, 1 + 2 / STEPS_PER_EPOCH])
    assert last_pt(tmp_path / "cut")["state"]["plateau"]["bad"] == 0
    assert cut.history["lr"].values.tolist() == [c.lr, c.lr]  # the partial row did not count
    clock = StepClock(task, "loss", flat)
    clock.step = 5
    ext = run_scripted(task, tmp_path / "cut", c, clock, monkeypatch, clock=clock, resume=True)
    assert_same_weights(tmp_path / "cut", tmp_path / "full")
    np.testing.assert_allclose(ext.history["lr"].sel(epoch=[1, 2, 3]).values,
                               full.history["lr"].values)
    assert full.history["lr"].values.tolist() == pytest.approx([c.lr, c.lr * 0.2, c.lr * 0.04])


@pytest.mark.parametrize("bad", [dict(plateau_patience=-1), dict(plateau_patience=1.5),
                                 dict(plateau_factor=0.0), dict(plateau_factor=1.0),
                                 dict(plateau_factor=2.0)])
def test_plateau_settings_are_checked(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        cfg(schedule="plateau", **bad)


# ------------------------------------------------------------------ patience and warmup
def warmup_script(step: int) -> float:
    """Validation loss after `step`: better after epochs 1 and 2, never again (3 steps / epoch)."""
    return {3: 1.0, 6: 0.9}.get(step, 0.95)


# 3 steps per epoch. warmup 10: epochs 1-3 end inside it (steps 3, 6, 9), epoch 4 after it
# (step 12); warmups 2 and 5 end within the first validated epoch, as if there were none.
@pytest.mark.parametrize("warmup,patience,eval_every,validated", [
    (10, 1, 1, [1, 2, 3, 4]),      # without the warmup: [1, 2, 3]
    (10, 2, 1, [1, 2, 3, 4, 5]),   # without: [1, 2, 3, 4]
    (10, 2, 2, [2, 4, 6]),         # without: [2, 4] (epochs 3 and 4 counted at 4)
    (0, 1, 1, [1, 2, 3]),
    (2, 2, 1, [1, 2, 3, 4]),
    (5, 2, 2, [2, 4]),
])
def test_patience_does_not_count_epochs_that_end_in_the_warmup(
        task, tmp_path, monkeypatch, warmup, patience, eval_every, validated):
    c = cfg(epochs=12, schedule="constant", warmup_steps=warmup, patience=patience,
            eval_every=eval_every)
    r = run_scripted(task, tmp_path / "run", c, Scripted(task, "loss", warmup_script), monkeypatch)
    assert r.history["epoch"].values.tolist() == validated
    assert r.stopped_by == "patience"
    assert r.best_epoch == 2  # epochs in the warmup still update best.pt


# ------------------------------------------------------------------ schedule_steps
def transformers_cosine(warmup: int, steps: int):
    """The lr lambda of transformers.get_cosine_schedule_with_warmup (num_cycles 0.5)."""
    transformers = pytest.importorskip("transformers")
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    return transformers.get_cosine_schedule_with_warmup(opt, warmup, steps).lr_lambdas[0]


@pytest.mark.parametrize("warmup,steps", [(0, 50), (7, 50), (10, 11), (30, 1000)])
def test_schedule_steps_follows_transformers_cosine_after_the_warmup(warmup, steps):
    theirs = transformers_cosine(warmup, steps)
    rng = random.Random(warmup * 1000 + steps)
    fresh = {rng.randrange(warmup, 4 * steps) for _ in range(200)}  # beyond `steps` too
    edges = {warmup, steps - 1, steps, steps + 1, 2 * steps - warmup, 3 * steps}
    for total in (steps // 2 + 1, 5 * steps):  # the run's own length does not matter
        for s in sorted(fresh | edges):
            assert lr_factor(s, total, warmup, "cosine", steps) == pytest.approx(
                theirs(s), rel=1e-12, abs=1e-15), s
    # past `steps` the lr rises again, back to its peak at 2 * steps - warmup
    assert lr_factor(steps, 1, warmup, "cosine", steps) == pytest.approx(0.0, abs=1e-15)
    assert lr_factor(2 * steps - warmup, 1, warmup, "cosine", steps) == pytest.approx(1.0)
    # the warmup is spt's, (step + 1) / warmup: transformers' one step later
    for s in range(warmup):
        assert lr_factor(s, steps, warmup, "cosine", steps) == pytest.approx(theirs(s + 1))
        assert theirs(s) == pytest.approx(s / warmup)


def test_without_schedule_steps_the_cosine_spans_the_run():
    for s in (0, 5, 37, 99, 100, 250):
        assert lr_factor(s, 100, 10, "cosine", None) == lr_factor(s, 100, 10, "cosine")
    assert lr_factor(150, 100, 10, "cosine") == 0.0  # and stays at 0 after the cap


def test_the_scheduler_and_the_run_use_schedule_steps(task, tmp_path):
    warmup, steps = 2, 5
    theirs = transformers_cosine(warmup, steps)
    c = cfg(epochs=4, warmup_steps=warmup, schedule_steps=steps, lr=1e-3)
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=c.lr)
    sched = build_scheduler(opt, c, total_steps=12)
    seen = []
    for _ in range(12):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    expected = [c.lr * (theirs(s) if s >= warmup else (s + 1) / warmup) for s in range(12)]
    np.testing.assert_allclose(seen, expected, rtol=1e-12)
    r = pretrain(task, MODEL, OBJ, c, tmp_path / "run")  # 12 steps; lr past step 5 rises again
    h = r.history
    # each row's lr is the one the next optimiser step would take
    np.testing.assert_allclose(h["lr"].values, [c.lr * theirs(int(s)) for s in h["step"].values],
                               rtol=1e-12)
    assert h["step"].values.tolist() == [3, 6, 9, 12]
    assert h["lr"].sel(epoch=3) > h["lr"].sel(epoch=2)  # steps 6 -> 9, past schedule_steps


def test_schedule_steps_is_checked():
    with pytest.raises(ValueError, match=r"schedule_steps.*schedule='constant'"):
        cfg(schedule="constant", schedule_steps=100)
    with pytest.raises(ValueError, match="schedule_steps"):
        cfg(schedule_steps=0)
    with pytest.raises(ValueError, match="whole number"):
        cfg(schedule_steps=2.5)


# ------------------------------------------------------------------ wd_groups
class Hinted(nn.Module):
    """A linear layer, a norm, a hinted matrix, a vector hinted only for its lr, a frozen one."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.norm = nn.LayerNorm(4)
        self.kernel = nn.Parameter(torch.zeros(4, 4))
        self.kernel._optim = {"lr": 1e-4, "weight_decay": 0.0}
        self.scale = nn.Parameter(torch.ones(4))
        self.scale._optim = {"lr": 1e-4}
        self.frozen = nn.Parameter(torch.zeros(4, 4), requires_grad=False)


def decay_of(groups) -> dict:
    return {n: (g["lr"], g["weight_decay"]) for g in groups for n in g["names"]}


def test_wd_groups_matrices_decays_matrices_only_and_hints_win():
    got = decay_of(param_groups(Hinted(), cfg(weight_decay=0.1)))
    assert got == {"lin.weight": (3e-3, 0.1), "lin.bias": (3e-3, 0.0),
                   "norm.weight": (3e-3, 0.0), "norm.bias": (3e-3, 0.0),
                   "kernel": (1e-4, 0.0), "scale": (1e-4, 0.0)}


def test_wd_groups_all_decays_every_parameter_without_a_weight_decay_hint():
    got = decay_of(param_groups(Hinted(), cfg(weight_decay=0.1, wd_groups="all")))
    assert got == {"lin.weight": (3e-3, 0.1), "lin.bias": (3e-3, 0.1),
                   "norm.weight": (3e-3, 0.1), "norm.bias": (3e-3, 0.1),
                   "kernel": (1e-4, 0.0), "scale": (1e-4, 0.1)}
    # the optimiser holds the same groups, in the same order
    opt = build_optimizer(Hinted(), cfg(weight_decay=0.1, wd_groups="all"))
    assert sorted((g["lr"], g["weight_decay"], len(g["params"])) for g in opt.param_groups) == \
        [(1e-4, 0.0, 1), (1e-4, 0.1, 1), (3e-3, 0.1, 4)]


def test_wd_groups_all_on_a_transformer_decays_biases_and_norms():
    model = classifier_model(MODEL, digits_task(size=8, n_train=10).spec)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    matrices = decay_of(param_groups(model, cfg(weight_decay=0.1)))
    every = decay_of(param_groups(model, cfg(weight_decay=0.1, wd_groups="all")))
    assert sorted(every) == sorted(matrices) == sorted(names)
    vectors = [n for n, p in model.named_parameters() if p.requires_grad and p.ndim < 2]
    assert any("norm" in n for n in vectors) and any(n.endswith("bias") for n in vectors)
    assert all(matrices[n][1] == 0.0 and every[n][1] == 0.1 for n in vectors)
    assert all(every[n] == matrices[n] for n in names if n not in vectors)


def test_wd_groups_is_checked():
    with pytest.raises(ValueError, match=r"wd_groups='some' is not one of \['matrices', 'all'\]"):
        cfg(wd_groups="some")


# ------------------------------------------------------------------ observe
def test_observe_reports_every_step_and_every_evaluation(task, tmp_path):
    events = []
    with engine.observe(events.append):
        r = pretrain(task, MODEL, OBJ, cfg(epochs=2), tmp_path / "run")
    steps = [e for e in events if e["kind"] == "step"]
    evals = [e for e in events if e["kind"] == "eval"]
    assert [e["step"] for e in steps] == list(range(1, r.steps + 1))
    assert r.steps == 2 * STEPS_PER_EPOCH
    times = [e["time"] for e in steps]
    assert all(b > a for a, b in zip(times, times[1:]))
    assert {e["stage"] for e in events} == {"pretrain"}
    assert [(e["split"], e["examples"]) for e in evals] == \
        [("val", len(task.val)), ("val", len(task.val)), ("test", len(task.test))]
    assert all(e["seconds"] > 0 for e in evals)
    # in run order: validation after the last step of its epoch, test after the last validation
    kinds = [(e["kind"], e.get("step", e.get("split"))) for e in events]
    assert kinds.index(("eval", "val")) == kinds.index(("step", STEPS_PER_EPOCH)) + 1
    assert kinds[-1] == ("eval", "test")
    # the first validation was timed between the end of step 3 and the end of step 4
    assert evals[0]["seconds"] < times[STEPS_PER_EPOCH] - times[STEPS_PER_EPOCH - 1]


def test_without_an_observer_fit_takes_no_timestamps(task, tmp_path, monkeypatch):
    events = []
    with engine.observe(events.append):
        pass
    with pytest.raises(RuntimeError, match="boom"), engine.observe(events.append):
        raise RuntimeError("boom")
    assert engine.current_observer() is None  # reset on the way out, even by an exception

    def no_timestamps(device):
        raise AssertionError("fit() took a timestamp without an observer")

    monkeypatch.setattr(engine, "timestamp", no_timestamps)
    r = pretrain(task, MODEL, OBJ, cfg(epochs=1), tmp_path / "run")
    assert r.steps == STEPS_PER_EPOCH and events == []


def test_an_observer_on_cuda_waits_for_the_device_before_each_timestamp(monkeypatch):
    from spt.train import observers
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    observers.timestamp(torch.device("cpu"))
    assert calls == []
    observers.timestamp(torch.device("cuda", 0))
    assert calls == [torch.device("cuda", 0)]


# ------------------------------------------------------------------ files written before the fields
# each new field, with a value other than the one older files ran with
NEW_FIELDS = {"wd_groups": "all", "schedule_steps": 1000, "plateau_patience": 20,
              "plateau_factor": 0.5}


def test_the_new_fields_are_later_train_fields_at_their_defaults():
    from spt.config import LATER_TRAIN_FIELDS, to_dict
    now = to_dict(cfg())
    assert set(NEW_FIELDS) <= set(LATER_TRAIN_FIELDS)
    assert all(now[f] == LATER_TRAIN_FIELDS[f] for f in NEW_FIELDS)


@pytest.mark.parametrize("field", sorted(NEW_FIELDS))
def test_result_files_without_the_new_fields_are_still_their_cells(field):
    from spt.config import to_dict
    from spt.studies.machinery.cells import _canonical
    now = to_dict(cfg())
    old = {k: v for k, v in now.items() if k != field}  # as a file written before the field
    assert _canonical({"arm": {"train": old}}) == _canonical({"arm": {"train": now}})
    other = {**now, field: NEW_FIELDS[field]}
    assert _canonical({"arm": {"train": old}}) != _canonical({"arm": {"train": other}})


def test_a_checkpoint_written_before_the_new_fields_resumes(task, tmp_path):
    c = cfg(epochs=3)
    pretrain(task, MODEL, OBJ, c, tmp_path / "full")
    def kill_at_5(step):
        if step == 5:
            raise KeyboardInterrupt("simulated kill")

    with pytest.raises(KeyboardInterrupt):
        pretrain(task, MODEL, OBJ, c, tmp_path / "old", on_step=kill_at_5)
    ck = last_pt(tmp_path / "old")
    for f in NEW_FIELDS:  # as the older engine wrote it
        del ck["train_config"][f]
    del ck["state"]["plateau"]
    del ck["sha256"]  # nor a digest
    torch.save(ck, tmp_path / "old" / "last.pt")
    pretrain(task, MODEL, OBJ, c, tmp_path / "old", resume=True)
    assert_same_weights(tmp_path / "old", tmp_path / "full")
    for f, v in NEW_FIELDS.items():  # but not into another configuration
        with pytest.raises(ValueError, match=f):
            pretrain(task, MODEL, OBJ, cfg(epochs=3, **{f: v}), tmp_path / "old", resume=True)


# ------------------------------------------------------------------ multistep
@pytest.mark.parametrize("warmup", [0, 4])
def test_multistep_is_torchs_multistep_lr_stepped_once_per_epoch(warmup):
    spe, milestones, gamma = 3, (2, 4, 5), 0.5
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    theirs = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=list(milestones), gamma=gamma)
    steps = [m * spe for m in milestones]
    for epoch in range(7):
        for b in range(spe):
            s = epoch * spe + b
            warm = (s + 1) / warmup if warmup and s < warmup else 1.0
            assert lr_factor(s, 100, warmup, "multistep", None, steps, gamma) == pytest.approx(
                opt.param_groups[0]["lr"] * warm, rel=1e-12)
        opt.step()
        theirs.step()


def test_a_multistep_run_cuts_the_lr_at_its_milestone_epochs(task, tmp_path):
    c = cfg(epochs=4, schedule="multistep", lr_milestones=(1, 3), lr_gamma=0.5, lr=1e-3)
    h = pretrain(task, MODEL, OBJ, c, tmp_path / "run").history
    # each row's lr is the one the next optimiser step takes: epoch e+1 starts after e+1 epochs
    np.testing.assert_allclose(h["lr"].values, [5e-4, 5e-4, 2.5e-4, 2.5e-4], rtol=1e-12)


def test_multistep_settings_are_checked():
    with pytest.raises(ValueError, match="lr_milestones"):
        cfg(schedule="multistep")
    with pytest.raises(ValueError, match="lr_milestones"):
        cfg(lr_milestones=(10,))  # milestones without the multistep schedule
    with pytest.raises(ValueError, match="increasing whole epochs"):
        cfg(schedule="multistep", lr_milestones=(5, 3))
    with pytest.raises(ValueError, match="lr_gamma"):
        cfg(schedule="multistep", lr_milestones=(5,), lr_gamma=0.0)
    assert cfg(schedule="multistep", lr_milestones=[2, 4]).lr_milestones == (2, 4)


@pytest.mark.parametrize("field", ["lr_milestones", "lr_gamma"])
def test_files_without_the_multistep_fields_are_still_their_cells(field):
    from spt.config import LATER_TRAIN_FIELDS, to_dict
    from spt.studies.machinery.cells import _canonical
    assert field in LATER_TRAIN_FIELDS
    now = to_dict(cfg())
    old = {k: v for k, v in now.items() if k != field}
    assert _canonical({"arm": {"train": old}}) == _canonical({"arm": {"train": now}})
