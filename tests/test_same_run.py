"""One rule for "two configurations are the same run", used by resuming and by study cells."""
import pytest

from spt import same_run
from spt.compat import LATER_TRAIN_FIELDS
from spt.config import TrainConfig, to_dict
from spt.studies.machinery import cells
from spt.train.run_state import check_same_run

FIELD, OLD = next(iter(LATER_TRAIN_FIELDS.items()))


def test_execution_fields_and_later_fields_at_their_old_value_are_not_identity():
    now = {"arm": {"train": {"lr": 1e-3, "device": "cuda", "betas": (0.9, 0.99), FIELD: OLD}}}
    saved = {"arm": {"train": {"lr": 1e-3, "device": "cpu", "betas": [0.9, 0.99]}}}
    assert same_run.differences(saved, now) == []
    other = {"arm": {"train": {"lr": 2e-3, "betas": [0.9, 0.99]}}}
    assert same_run.differences(saved, other) == [("arm.train.lr", 1e-3, 2e-3)]


def test_max_time_may_change_only_for_a_resume():
    a, b = {"train_config": {"max_time": 10.0}}, {"train_config": {"max_time": 20.0}}
    assert same_run.differences(a, b, same_run.RESUMABLE_FIELDS) == []
    assert [p for p, _, _ in same_run.differences(a, b)] == ["train_config.max_time"]


@pytest.mark.parametrize("change, same", [({"device": "cpu"}, True), ({"lr": 0.5}, False),
                                          ({FIELD: OLD}, True)])
def test_cells_and_resume_apply_the_same_rule(tmp_path, change, same):
    base = to_dict(TrainConfig())
    saved = {k: v for k, v in base.items() if k != FIELD}  # as a file older than FIELD
    now = {**base, **change}
    assert (cells._canonical({"train": saved}) == cells._canonical({"train": now})) is same
    ck = {"train_config": saved}
    cfg = TrainConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in now.items()})
    if same:
        check_same_run(ck, {}, cfg, tmp_path / "last.pt")
    else:
        with pytest.raises(ValueError, match="cannot resume"):
            check_same_run(ck, {}, cfg, tmp_path / "last.pt")


def test_a_resume_after_the_training_data_changed_is_refused_naming_the_data(tmp_path):
    """Another fraction or n_train (or other examples of the same size) is another run: a
    finished run is not handed back, a stopped one does not carry on with the new data."""
    from spt.config import TransformerConfig
    from spt.data.digits import digits_task
    from spt.train import train_from_scratch

    model = TransformerConfig(d_model=8, n_layers=1, n_heads=2, d_ff=16, max_len=64)
    cfg = TrainConfig(lr=1e-3, batch_size=8, epochs=1, progress=False)
    task = digits_task(size=8, n_train=16, val_size=8, test_size=8, tokens=True)
    train_from_scratch(task, model, cfg, tmp_path / "run")
    again = train_from_scratch(task, model, cfg, tmp_path / "run", resume=True)  # the same data
    assert again.steps == 2
    from torch.utils.data import Subset

    from spt.data.task import Task
    more = digits_task(size=8, n_train=32, val_size=8, test_size=8, tokens=True)
    shifted = Task(task.spec, Subset(more.train, range(16, 32)), task.val, task.test)
    for other in (more, shifted):  # another n_train; other examples, as many
        with pytest.raises(ValueError, match=r"cannot resume .*the task's data \(split sizes or "
                                             r"examples\): saved"):
            train_from_scratch(other, model, cfg, tmp_path / "run", resume=True)


def test_the_execution_fields_are_the_fields_whose_rule_says_so():
    """A new execution field joins the list by its own declaration, not by a hand-kept list that a
    forgotten entry would make split cell identities."""
    import dataclasses

    from spt.config import EXECUTION_FIELDS
    from spt.config_base import check_fields, execution_fields, rule

    assert EXECUTION_FIELDS == execution_fields(TrainConfig) == {
        "device", "num_workers", "progress", "pin_memory", "prefetch_factor", "distributed",
        "compile", "grad_checkpointing", "eval_batch_size", "log_every", "paths"}
    assert EXECUTION_FIELDS <= same_run.NOT_IDENTITY

    @dataclasses.dataclass(frozen=True)
    class Later(TrainConfig):
        threads: int = dataclasses.field(default=1, metadata=rule("positive", execution=True))

    assert execution_fields(Later) == EXECUTION_FIELDS | {"threads"}
    with pytest.raises(ValueError, match=r"Later.threads must be > 0, got 0"):
        check_fields(Later(threads=0))
