"""Learning-rate schedules and optimiser groups of the engine: weight decay on every parameter
(TrainConfig.wd_groups)."""
import pytest
import torch
import torch.nn as nn

from spt.config import TrainConfig, TransformerConfig
from spt.data import digits_task
from spt.models import classifier_model
from spt.train.optim import build_optimizer, param_groups

MODEL = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.1, max_len=64)


def cfg(**kw):
    return TrainConfig(**{**dict(lr=3e-3, batch_size=16, epochs=2, progress=False, seed=0), **kw})


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
NEW_FIELDS = {"wd_groups": "all"}  # each new field with a value other than the older files' own


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
