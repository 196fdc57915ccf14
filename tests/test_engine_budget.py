"""The engine's long-run rules: a wall-clock budget (TrainConfig.max_time) that stops cleanly and
resumes exactly, checkpoint selection on a named metric (TrainConfig.select), an honest NaN message
and a progress bar that does not warn.

Time is made deterministic with a clock that advances one second per optimiser step (fit's
``clock`` argument, advanced from ``on_step``), so "stops when the budget is spent" becomes "stops
after step k" and a resumed run can be compared bitwise with an uninterrupted one.
"""
import math
import warnings

import numpy as np
import pytest
import torch

import spt.train.engine as engine
from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data import digits_task
from spt.train import NonFiniteLossError, pretrain, train_from_scratch
from spt.train.optim import lr_factor

MODEL = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=64)  # dropout 0.1
L1 = ObjectiveConfig("masked", 0.5, "l1")
CE = ObjectiveConfig("masked", 0.5, "ce")
STEPS_PER_EPOCH = 4  # 32 examples, batches of 8


@pytest.fixture(scope="module")
def task():
    return digits_task(size=8, n_train=32, val_size=32, test_size=32)


@pytest.fixture(scope="module")
def token_task():
    return digits_task(size=8, n_train=32, val_size=32, test_size=32, tokens=True)


def cfg(**kw):
    return TrainConfig(**{**dict(lr=3e-3, batch_size=8, epochs=10, progress=False, seed=0), **kw})


class StepClock:
    """Seconds = optimiser steps taken in this process (pass .on_step and the clock to fit)."""

    def __init__(self, kill_at=None):
        self.t, self.kill_at = 0.0, kill_at

    def __call__(self) -> float:
        return self.t

    def on_step(self, step: int) -> None:
        self.t += 1.0
        if step == self.kill_at:
            raise KeyboardInterrupt("simulated kill")


def run(task, out, c, clock=None, **kw):
    clock = clock or StepClock()
    return pretrain(task, MODEL, L1, c, out, clock=clock, on_step=clock.on_step, **kw)


def last_state(out):
    return torch.load(out / "last.pt", weights_only=False)


def test_time_budget_stops_cleanly_after_the_step_that_spends_it(task, tmp_path):
    r = run(task, tmp_path / "run", cfg(max_time=5.5))  # spent after step 6, mid-epoch 2
    assert r.steps == 6 and r.stopped_by == "max_time"
    h = r.history
    np.testing.assert_allclose(h["epoch"].values, [1.0, 1.0 + 2 / STEPS_PER_EPOCH])  # partial row
    assert h["step"].values.tolist() == [4, 6] and h.attrs["stopped_by"] == "max_time"
    assert not np.isnan(h["train_loss"].values).any() and not np.isnan(h["val_loss"].values).any()
    best_row = int(np.argmin(h["val_loss"].values))
    assert r.best_epoch == pytest.approx(h["epoch"].values[best_row])
    assert torch.load(r.best_checkpoint, weights_only=False)["epoch"] == pytest.approx(r.best_epoch)
    assert set(r.test_metrics) == {"loss", "r2"}
    s = last_state(tmp_path / "run")["state"]
    assert s["done"] and s["stopped_by"] == "max_time" and s["time"] == 6.0
    assert (s["epoch"], s["batch"]) == (1, 2)  # the epoch stays open for a larger budget
    assert h["lr"].values[-1] > 0  # a run cut by time does not reach the end of its cosine


def test_budget_spent_in_an_evaluation_stops_at_the_epoch_boundary(task, tmp_path, monkeypatch):
    clock = StepClock()
    real = engine.evaluate

    def slow_validation(model, objective, dataset, *a, **kw):
        if dataset is task.val:
            clock.t += 100.0
        return real(model, objective, dataset, *a, **kw)

    monkeypatch.setattr(engine, "evaluate", slow_validation)
    r = run(task, tmp_path / "run", cfg(max_time=50.0), clock=clock)
    assert r.steps == STEPS_PER_EPOCH and r.stopped_by == "max_time"
    assert r.history["epoch"].values.tolist() == [1]  # no empty epoch was evaluated


def test_resumed_with_a_budget_already_spent_it_only_evaluates_its_partial_epoch(task, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):  # last.pt from step 5: epoch 2 open, 5 s spent
        run(task, out, cfg(ckpt_every=1), clock=StepClock(kill_at=6))
    r = run(task, out, cfg(ckpt_every=1, max_time=3.0), resume=True)
    assert r.steps == 5 and r.stopped_by == "max_time"
    np.testing.assert_allclose(r.history["epoch"].values, [1.0, 1.25])


def _same_weights(a, b):
    wa, wb = last_state(a)["model"], last_state(b)["model"]
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0, msg=k)


def test_a_stopped_or_killed_budgeted_run_resumes_to_the_uninterrupted_weights(task, tmp_path):
    budget = cfg(max_time=6.5)  # uninterrupted: stops after step 7, in epoch 2
    full = run(task, tmp_path / "full", budget)
    assert full.steps == 7 and full.stopped_by == "max_time"

    # stopped by a smaller budget after step 3; resumed with the same budget it stays stopped
    small = run(task, tmp_path / "ext", cfg(max_time=2.5))
    assert small.steps == 3
    before = (tmp_path / "ext" / "last.pt").read_bytes()
    again = run(task, tmp_path / "ext", cfg(max_time=2.5), resume=True)
    assert again.steps == 3 and again.stopped_by == "max_time"
    assert (tmp_path / "ext" / "last.pt").read_bytes() == before
    # ... and with the larger budget it goes on inside epoch 1 to where the full run stopped
    ext = run(task, tmp_path / "ext", budget, resume=True)
    assert ext.steps == 7 and ext.stopped_by == "max_time"
    _same_weights(tmp_path / "ext", tmp_path / "full")
    np.testing.assert_allclose(ext.history["epoch"].values, [0.75, 1.0, 1.75])
    common = ext.history.sel(epoch=full.history["epoch"].values)
    np.testing.assert_array_equal(common["val_loss"].values, full.history["val_loss"].values)
    np.testing.assert_array_equal(common["train_loss"].values, full.history["train_loss"].values)

    # killed at step 5 (last saved at the end of epoch 1, 4 s spent), resumed with the same budget
    with pytest.raises(KeyboardInterrupt):
        run(task, tmp_path / "killed", budget, clock=StepClock(kill_at=5))
    assert last_state(tmp_path / "killed")["state"]["time"] == 4.0
    resumed = run(task, tmp_path / "killed", budget, resume=True)
    assert resumed.steps == 7
    _same_weights(tmp_path / "killed", tmp_path / "full")
    np.testing.assert_array_equal(resumed.history["val_loss"].values,
                                  full.history["val_loss"].values)


def test_a_budget_spent_between_validations_validates_before_it_stops(task, tmp_path):
    c = cfg(epochs=7, eval_every=3)
    full = run(task, tmp_path / "full", c)
    # 8 steps: the budget ends with epoch 2, which eval_every=3 does not validate
    stopped = run(task, tmp_path / "run", cfg(epochs=7, eval_every=3, max_time=8))
    assert stopped.stopped_by == "max_time" and list(stopped.history.epoch.values) == [2]
    resumed = run(task, tmp_path / "run", c, resume=True)
    assert list(resumed.history.epoch.values) == [2, 3, 6, 7]
    _same_weights(tmp_path / "run", tmp_path / "full")
    assert resumed.steps == full.steps == 7 * STEPS_PER_EPOCH


def test_select_picks_best_pt_on_the_named_metric(token_task, tmp_path):
    r = pretrain(token_task, MODEL, CE, cfg(epochs=4, select="accuracy"), tmp_path / "acc")
    h = r.history
    assert h.attrs["select"] == "accuracy" and r.select == "accuracy"
    assert r.best_epoch == h["epoch"].values[int(np.argmax(h["val_accuracy"].values))]
    best = torch.load(r.best_checkpoint, weights_only=False)
    assert best["select"] == "accuracy" and best["val_metrics"] == r.val_metrics
    assert pretrain(token_task, MODEL, CE, cfg(epochs=1), tmp_path / "default").select == "loss"


def test_select_changes_the_chosen_epoch_when_metrics_disagree(token_task, tmp_path, monkeypatch):
    real = engine.evaluate
    script = {"loss": [3.0, 2.0, 1.0], "accuracy": [0.1, 0.9, 0.5]}  # best: epoch 3 vs epoch 2

    def scripted(model, objective, dataset, *a, **kw):
        m = real(model, objective, dataset, *a, **kw)
        if dataset is token_task.val:
            i = scripted.calls
            scripted.calls += 1
            m.update(loss=script["loss"][i % 3], accuracy=script["accuracy"][i % 3])
        return m

    monkeypatch.setattr(engine, "evaluate", scripted)
    chosen = {}
    for select in (None, "loss", "accuracy"):
        scripted.calls = 0
        r = pretrain(token_task, MODEL, CE, cfg(epochs=3, select=select), tmp_path / str(select))
        chosen[select] = r.best_epoch
    assert chosen == {None: 3, "loss": 3, "accuracy": 2}


def test_select_errors_name_the_field_and_the_available_metrics(task, tmp_path):
    with pytest.raises(ValueError, match=r"TrainConfig\.select='f1' is not one of"):
        cfg(select="f1")
    with pytest.raises(ValueError, match=r"TrainConfig\.select='accuracy'.*\['loss', 'r2'\]"):
        pretrain(task, MODEL, L1, cfg(epochs=1, select="accuracy"), tmp_path / "run")
    assert not (tmp_path / "run" / "best.pt").exists()


def test_config_checks_budget_and_rsqrt_schedule():
    with pytest.raises(ValueError, match="max_time"):
        cfg(max_time=0)
    with pytest.raises(ValueError, match="warmup_steps"):
        cfg(schedule="rsqrt")
    assert lr_factor(9, 100, 10, "rsqrt") == pytest.approx(1.0)
    assert lr_factor(39, 100, 10, "rsqrt") == pytest.approx(0.5)
    assert lr_factor(10**6, 100, 10, "rsqrt") > 0  # still annealing, whatever the total


def test_progress_bar_does_not_warn_about_requires_grad(task, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_from_scratch(task, MODEL, cfg(epochs=3, progress=True), tmp_path / "run")  # 12 steps
    assert not [w for w in caught if "requires_grad" in str(w.message)]


def test_nan_before_any_checkpoint_says_none_was_written(task, tmp_path, monkeypatch):
    model_ref = {}
    real = engine.build_optimizer

    def spy(model, c):
        model_ref["m"] = model
        return real(model, c)

    def poison(step):  # step 2's loss is NaN, before the first epoch ends
        if step == 1:
            with torch.no_grad():
                for p in model_ref["m"].parameters():
                    p.fill_(math.nan)

    monkeypatch.setattr(engine, "build_optimizer", spy)
    with pytest.raises(NonFiniteLossError) as e:
        train_from_scratch(task, MODEL, cfg(epochs=3), tmp_path / "run", on_step=poison)
    msg = str(e.value)
    assert "no checkpoint had been written yet" in msg and "hold" not in msg
    assert not any((tmp_path / "run" / f).exists() for f in ("best.pt", "last.pt"))
