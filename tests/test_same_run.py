"""One rule for "two configurations are the same run", used by resuming and by study cells."""
import pytest

from spt import same_run
from spt.compat import LATER_TRAIN_FIELDS
from spt.config import TrainConfig, to_dict
from spt.studies.machinery import cells
from spt.train import engine

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
        engine._check_same_run(ck, {}, cfg, tmp_path / "last.pt")
    else:
        with pytest.raises(ValueError, match="cannot resume"):
            engine._check_same_run(ck, {}, cfg, tmp_path / "last.pt")
