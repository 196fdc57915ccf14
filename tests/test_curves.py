"""Live curves: fit() writes TensorBoard event files that hold the run's history, once per step."""
import numpy as np
import pytest

from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data import digits_task
from spt.train import curves, pretrain, train_from_scratch

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

MODEL = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.1, max_len=64)
OBJ = ObjectiveConfig("masked", 0.5, "l1")


@pytest.fixture(scope="module")
def task():
    return digits_task(size=8, n_train=48, val_size=40, test_size=40)


def cfg(**kw):
    return TrainConfig(**{**dict(lr=3e-3, batch_size=16, epochs=3, progress=False, seed=0,
                                 log_every=1), **kw})


def read_curves(folder) -> dict:
    """{tag: [(step, value), ...]} as TensorBoard's own reader sees the folder (purges applied)."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_the_event_files_hold_the_history_and_a_point_per_step(task, tmp_path, monkeypatch):
    monkeypatch.delenv("SPT_CURVES", raising=False)
    run = pretrain(task, MODEL, OBJ, cfg(), tmp_path / "pt")
    got = read_curves(tmp_path / "pt")
    h = run.history
    for name in h.data_vars:
        split, _, metric = str(name).partition("_")
        if split in ("train", "val"):
            steps, values = zip(*got[f"{split}/{metric}"])
            assert list(steps) == [int(s) for s in h["step"].values], name
            np.testing.assert_allclose(values, h[name].values, rtol=1e-6, err_msg=str(name))
    assert [s for s, _ in got["step/loss"]] == list(range(1, run.steps + 1))
    for tag in ("step/lr", "step/grad_norm", "step/tokens_per_s", "step/peak_memory_gib"):
        assert len(got[tag]) == run.steps and all(v > 0 for _, v in got[tag]), tag
    # the lr of step 1 is the schedule's first value; the tokens are the real digit positions
    assert got["step/lr"][0][1] == pytest.approx(3e-3 * 0.5 * (1 + np.cos(0)), rel=1e-6)
    # a point every log_every steps, averaging the steps since the last one
    run2 = train_from_scratch(task, MODEL, cfg(log_every=2), tmp_path / "sc")
    assert [s for s, _ in read_curves(tmp_path / "sc")["step/loss"]] == \
        list(range(2, run2.steps + 1, 2))


def test_a_resumed_run_continues_its_curves_with_each_step_once(task, tmp_path, monkeypatch):
    monkeypatch.delenv("SPT_CURVES", raising=False)

    def kill_at(n):
        def on_step(step):
            if step == n:
                raise KeyboardInterrupt("simulated kill")
        return on_step

    # last.pt at step 4, killed at step 7: steps 5-7 are logged twice, once by each process
    with pytest.raises(KeyboardInterrupt):
        pretrain(task, MODEL, OBJ, cfg(ckpt_every=4), tmp_path / "k", on_step=kill_at(7))
    before = read_curves(tmp_path / "k")
    assert [s for s, _ in before["step/loss"]] == list(range(1, 8))
    resumed = pretrain(task, MODEL, OBJ, cfg(ckpt_every=4), tmp_path / "k", resume=True)
    pretrain(task, MODEL, OBJ, cfg(ckpt_every=4), tmp_path / "whole")
    got, want = read_curves(tmp_path / "k"), read_curves(tmp_path / "whole")
    assert [s for s, _ in got["step/loss"]] == list(range(1, resumed.steps + 1))
    assert [s for s, _ in got["val/loss"]] == [s for s, _ in want["val/loss"]]
    np.testing.assert_allclose([v for _, v in got["val/loss"]], [v for _, v in want["val/loss"]],
                               rtol=1e-5)
    assert len(list((tmp_path / "k").glob("events.out.tfevents.*"))) == 2


def test_spt_curves_chooses_the_writers_and_names_what_is_wrong(task, tmp_path, monkeypatch):
    monkeypatch.setenv("SPT_CURVES", "none")
    train_from_scratch(task, MODEL, cfg(epochs=1), tmp_path / "off")
    assert not list((tmp_path / "off").glob("events.out.tfevents.*"))
    monkeypatch.setenv("SPT_CURVES", "tensorbord")
    with pytest.raises(curves.CurvesError, match=r"unknown writer\(s\) \['tensorbord'\]"):
        train_from_scratch(task, MODEL, cfg(epochs=1), tmp_path / "typo")
    monkeypatch.setattr(curves, "_installed", lambda module: module != "wandb")
    monkeypatch.setenv("SPT_CURVES", "tensorboard,wandb")
    with pytest.raises(curves.CurvesError, match=r"pip install wandb"):
        train_from_scratch(task, MODEL, cfg(epochs=1), tmp_path / "nowandb")


def test_without_tensorboard_the_default_says_so_once_and_trains(task, tmp_path, monkeypatch,
                                                                 capsys):
    monkeypatch.delenv("SPT_CURVES", raising=False)
    monkeypatch.setattr(curves, "_installed", lambda module: False)
    monkeypatch.setattr(curves, "_SAID", set())
    for name in ("a", "b"):
        train_from_scratch(task, MODEL, cfg(epochs=1), tmp_path / name)
    said = [s for s in capsys.readouterr().err.splitlines() if "no live curves" in s]
    assert said == ["spt: no live curves: the tensorboard package is not installed (pip install "
                    "'spt[tensorboard]'; SPT_CURVES=none silences this)"]


def test_run_names_follow_the_study_layout(tmp_path):
    assert curves.run_names(tmp_path / "02_x" / "runs" / "task=text,seed=0" / "finetune") == \
        ("02_x", "task=text,seed=0/finetune")
    assert curves.run_names(tmp_path / "mine")[0] == "spt"
