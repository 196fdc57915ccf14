"""TrainConfig.eval_every: validation every k epochs trains exactly the same steps, counts
patience in epochs, resumes exactly from a kill between validations (a time budget spent between
them: test_engine_budget.py), and leaves checkpoints and result files written before the field
existed usable."""
import pytest
import torch

from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data import digits_task
from spt.studies.machinery.cells import _canonical
from spt.train import pretrain, train_from_scratch

MODEL = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.1, max_len=64)
OBJ = ObjectiveConfig("masked", 0.5, "l1")  # 48 examples, batches of 16: 3 steps per epoch


@pytest.fixture(scope="module")
def task():
    return digits_task(size=8, n_train=48, val_size=40, test_size=40)


def cfg(**kw):
    return TrainConfig(**{**dict(lr=3e-3, batch_size=16, epochs=7, progress=False, seed=0), **kw})


def last_weights(run_dir):
    return torch.load(run_dir / "last.pt", weights_only=False)["model"]


def assert_same_weights(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)


def test_validating_every_third_epoch_trains_the_same_steps(task, tmp_path):
    every = pretrain(task, MODEL, OBJ, cfg(), tmp_path / "every")
    third = pretrain(task, MODEL, OBJ, cfg(eval_every=3), tmp_path / "third")
    assert list(every.history.epoch.values) == [1, 2, 3, 4, 5, 6, 7]
    assert list(third.history.epoch.values) == [3, 6, 7]  # and always after the last epoch
    assert third.steps == every.steps == 21
    assert_same_weights(last_weights(tmp_path / "third"), last_weights(tmp_path / "every"))
    # validation reads the same weights at the epochs both runs validated
    for e in (3, 6, 7):
        assert float(third.history.val_loss.sel(epoch=e)) == pytest.approx(
            float(every.history.val_loss.sel(epoch=e)), rel=1e-6)
    # the train loss of a validated row covers the epochs since the previous validation
    mean_4_to_6 = float(every.history.train_loss.sel(epoch=[4, 5, 6]).mean())
    assert float(third.history.train_loss.sel(epoch=6)) == pytest.approx(mean_4_to_6, rel=1e-5)


def test_patience_counts_epochs_not_validations(task, tmp_path):
    flat = dict(epochs=50, lr=1e-9, patience=4)  # validation accuracy never improves
    one = train_from_scratch(task, MODEL, cfg(**flat), tmp_path / "one")
    three = train_from_scratch(task, MODEL, cfg(**flat, eval_every=3), tmp_path / "three")
    assert list(one.history.epoch.values) == [1, 2, 3, 4, 5]  # 4 epochs after the best (1)
    assert list(three.history.epoch.values) == [3, 6, 9]  # the first validation >= 4 after 3
    assert one.stopped_by == three.stopped_by == "patience"


def _interrupt_at(step_to_fail):
    def on_step(step):
        if step == step_to_fail:
            raise KeyboardInterrupt("simulated kill")
    return on_step


def test_a_run_killed_between_validations_resumes_to_the_same_weights(task, tmp_path):
    c = cfg(epochs=5, eval_every=2)
    full = pretrain(task, MODEL, OBJ, c, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):  # step 10 is in epoch 4; epoch 3 was not validated
        pretrain(task, MODEL, OBJ, c, tmp_path / "killed", on_step=_interrupt_at(10))
    saved = torch.load(tmp_path / "killed" / "last.pt", weights_only=False)["state"]
    assert saved["epoch"] == 2 and saved["step"] == 6  # last.pt is written at validations
    resumed = pretrain(task, MODEL, OBJ, c, tmp_path / "killed", resume=True)
    assert_same_weights(last_weights(tmp_path / "killed"), last_weights(tmp_path / "full"))
    assert resumed.steps == full.steps == 15
    assert list(resumed.history.epoch.values) == [2, 4, 5]


def test_a_checkpoint_written_before_eval_every_existed_resumes(task, tmp_path):
    c = cfg(epochs=3)
    pretrain(task, MODEL, OBJ, c, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        pretrain(task, MODEL, OBJ, c, tmp_path / "old", on_step=_interrupt_at(5))
    ck = torch.load(tmp_path / "old" / "last.pt", weights_only=False)
    del ck["train_config"]["eval_every"]  # as the older engine wrote it
    ck["state"]["bad_evals"] = ck["state"].pop("bad_epochs")
    del ck["state"]["validated"]
    del ck["sha256"]  # nor a digest
    torch.save(ck, tmp_path / "old" / "last.pt")
    pretrain(task, MODEL, OBJ, c, tmp_path / "old", resume=True)
    assert_same_weights(last_weights(tmp_path / "old"), last_weights(tmp_path / "full"))
    with pytest.raises(ValueError, match="eval_every"):  # but not into another configuration
        pretrain(task, MODEL, OBJ, cfg(epochs=3, eval_every=2), tmp_path / "old", resume=True)


def test_result_files_without_the_field_are_still_their_cells():
    old = {"arm": {"train": {"lr": 1e-3, "patience": 100}}}
    assert _canonical(old) == _canonical({"arm": {"train": {"lr": 1e-3, "patience": 100,
                                                            "eval_every": 1}}})
    assert _canonical(old) != _canonical({"arm": {"train": {"lr": 1e-3, "patience": 100,
                                                            "eval_every": 2}}})


@pytest.mark.parametrize("bad", [0, 1.5])
def test_eval_every_must_be_a_positive_whole_number(bad):
    with pytest.raises(ValueError, match="eval_every"):
        TrainConfig(eval_every=bad)

