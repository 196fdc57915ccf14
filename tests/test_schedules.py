"""Learning-rate schedules and optimiser groups of the engine: a cosine of a fixed length
(TrainConfig.schedule_steps) checked against transformers' own, and weight decay on every
parameter (TrainConfig.wd_groups)."""
import random

import numpy as np
import pytest
import torch
import torch.nn as nn

from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data import digits_task
from spt.models import classifier_model
from spt.train import pretrain
from spt.train.optim import build_optimizer, build_scheduler, lr_factor, param_groups

MODEL = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.1, max_len=64)
OBJ = ObjectiveConfig("masked", 0.5, "l1")
STEPS_PER_EPOCH = 3  # 48 training examples, batches of 16


@pytest.fixture(scope="module")
def task():
    return digits_task(size=8, n_train=48, val_size=40, test_size=40)


def cfg(**kw):
    return TrainConfig(**{**dict(lr=3e-3, batch_size=16, epochs=2, progress=False, seed=0), **kw})


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


# ------------------------------------------------------------------ files written before the fields
# each new field, with a value other than the one older files ran with
NEW_FIELDS = {"wd_groups": "all", "schedule_steps": 1000}


@pytest.mark.parametrize("field", sorted(NEW_FIELDS))
def test_result_files_without_the_new_fields_are_still_their_cells(field):
    from spt.config import LATER_TRAIN_FIELDS, to_dict
    from spt.studies.cells import _canonical
    now = to_dict(cfg())
    old = {k: v for k, v in now.items() if k != field}  # as a file written before the field
    assert _canonical({"arm": {"train": old}}) == _canonical({"arm": {"train": now}})
    assert now[field] == LATER_TRAIN_FIELDS[field]  # the default is what older runs ran with
    other = {**now, field: NEW_FIELDS[field]}
    assert _canonical({"arm": {"train": old}}) != _canonical({"arm": {"train": other}})
