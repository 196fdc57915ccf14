"""A researcher's own layer class through spt: LayerConfig, LayerStack, Bidirectional, the protocol
(pretrain -> finetune, train_from_scratch) and hub round trips. CPU, tiny sizes.

The layer classes below live in this test module; pytest imports it as ``test_custom_layers``
(tests/ has no __init__.py, so its folder is on sys.path), and that is their import path.
"""
import dataclasses
import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from spt import hub
from spt.config import ObjectiveConfig, TrainConfig
from spt.data import digits_task
from spt.data.collate import pad_collate
from spt.data.task import TaskSpec
from spt.layer_config import LayerConfig, layer_path
from spt.model_config import model_config_from_dict, model_config_to_dict
from spt.models.model import SequenceModel, classifier_model, pretraining_model
from spt.models.user_layers import (
    Bidirectional,
    LayerStack,
    check_causal,
    import_layer,
    reverse_index,
    reverse_valid,
)
from spt.train import finetune, pretrain, train_from_scratch
from spt.train.optim import param_groups


class GatedConv(nn.Module):
    """A researcher's layer: a gated depthwise convolution over time, looking back only (causal) or
    both ways (centred window)."""

    def __init__(self, d_model, causal=False, width=3):
        super().__init__()
        self.causal, self.width = causal, width
        self.conv = nn.Conv1d(d_model, d_model, width, groups=d_model)
        self.gate = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, valid=None):
        left = self.width - 1 if self.causal else (self.width - 1) // 2
        h = F.pad(x.transpose(1, 2), (left, self.width - 1 - left))
        u, g = self.gate(x).chunk(2, dim=-1)
        return self.out(self.conv(h).transpose(1, 2) * torch.sigmoid(g) + u)


class RunningMean(nn.Module):
    """A causal-only layer that reads only x: the mean of the inputs at positions <= t, projected."""

    causal = True

    def __init__(self, d_model):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        n = torch.arange(1, x.shape[1] + 1, dtype=x.dtype)[:, None]
        return self.proj(x.cumsum(1) / n)


class SaysNonCausal(nn.Module):
    causal = False

    def __init__(self, d_model):
        super().__init__()

    def forward(self, x):
        return x


class WrongShape(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.proj = nn.Linear(d_model, 2 * d_model)

    def forward(self, x):
        return self.proj(x)


class NotAModule:
    def __init__(self, d_model):
        pass


def _stack(layer=GatedConv, **kw):
    torch.manual_seed(0)
    return LayerStack(LayerConfig(layer, **{"d_model": 8, "n_layers": 2, **kw})).eval()


def _padded(B=3, L=10, D=8):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(B, L, D, generator=g)
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[0, 6:] = False
    valid[2, 9:] = False
    return x, valid


# ------------------------------------------------------------------ the config

def test_config_stores_the_class_path_and_json_round_trips():
    cfg = LayerConfig(GatedConv, kwargs={"width": 5}, d_model=8)
    assert cfg.layer == layer_path(GatedConv) == f"{GatedConv.__module__}:GatedConv"
    assert cfg.kwargs == (("width", 5),)
    assert LayerConfig(cfg.layer, kwargs=[("width", 5)], d_model=8) == cfg
    assert LayerConfig(f"{GatedConv.__module__}.GatedConv", kwargs={"width": 5}, d_model=8).layer \
        == f"{GatedConv.__module__}.GatedConv"
    # a checkpoint stores the config as JSON (tuples -> lists) and rebuilds an equal one
    cfg = LayerConfig(GatedConv, kwargs={"width": 3, "sizes": [1, 2], "name": "g", "p": 0.5,
                                         "flag": None}, causal=True)
    back = model_config_from_dict(json.loads(json.dumps(model_config_to_dict(cfg))))
    assert back == cfg and hash(back) == hash(cfg) and type(back) is LayerConfig
    assert back.layer_kwargs == {"flag": None, "name": "g", "p": 0.5, "sizes": (1, 2), "width": 3}
    assert dataclasses.replace(back, pooling="max").kwargs == cfg.kwargs


@pytest.mark.parametrize("kw, error, match", [
    (dict(layer="no_colon_or_dot"), ValueError, r"LayerConfig.layer=.*'package.module:ClassName'"),
    (dict(layer="pkg.mod:Cls:x"), ValueError, "LayerConfig.layer"),
    (dict(layer=3), TypeError, "LayerConfig.layer"),
    (dict(kwargs={"opts": {"a": 1}}), TypeError, r"LayerConfig.kwargs\['opts'\].*JSON"),
    (dict(kwargs={"w": torch.ones(2)}), TypeError, r"LayerConfig.kwargs\['w'\]"),
    (dict(kwargs={"w": float("nan")}), ValueError, r"LayerConfig.kwargs\['w'\].*finite"),
    (dict(kwargs={"d_model": 4}), ValueError, "set LayerConfig.d_model instead"),
    (dict(kwargs={"causal": True}), ValueError, "set LayerConfig.causal instead"),
    (dict(kwargs={"not valid": 1}), ValueError, "identifier"),
    (dict(kwargs=[1, 2]), TypeError, "LayerConfig.kwargs must be a dict"),
    (dict(d_model=0), ValueError, "LayerConfig.d_model"),
    (dict(n_layers=2.0), TypeError, "LayerConfig.n_layers"),
    (dict(causal=True, bidirectional=True), ValueError, "cannot be causal"),
    (dict(positions="rotary"), ValueError, "LayerConfig.positions"),
    (dict(pooling="sum"), ValueError, "LayerConfig.pooling"),
    (dict(dropout=1.0), ValueError, "LayerConfig.dropout"),
])
def test_config_errors_name_the_field(kw, error, match):
    with pytest.raises(error, match=match):
        LayerConfig(**{"layer": GatedConv, **kw})


def test_a_class_in_main_or_in_a_function_is_flagged():
    def local():
        class Inner(nn.Module):
            pass
        return Inner

    with pytest.raises(ValueError, match="inside a function.*top level of a module"):
        LayerConfig(local())
    with pytest.warns(UserWarning, match="__main__.*Move the class to a module file"):
        cfg = LayerConfig("__main__:NoSuchLayer")
    with pytest.raises(ImportError, match="no class 'NoSuchLayer' in __main__.*module file"):
        LayerStack(cfg)


@pytest.mark.parametrize("path, error, match", [
    ("no_such_pkg_xyz.layers:Mixer", ImportError, "no module named 'no_such_pkg_xyz.layers'.*PYTHONPATH"),
    ("torch.nn:NoSuchMixer", ImportError, "module 'torch.nn' has no attribute 'NoSuchMixer'"),
    ("torch.nn.functional:relu", TypeError, "not a torch.nn.Module subclass"),
])
def test_bad_class_paths_say_what_is_missing(path, error, match):
    with pytest.raises(error, match=match):
        import_layer(path)


def test_import_layer_takes_colon_and_dotted_paths():
    assert import_layer(layer_path(GatedConv)) is GatedConv
    assert import_layer("torch.nn.Linear") is nn.Linear
    assert import_layer("torch.nn.modules.rnn:LSTM") is nn.LSTM


# ------------------------------------------------------------------ the stack

def test_stack_builds_one_instance_per_block_with_the_config():
    stack = _stack(kwargs={"width": 5}, causal=True)
    layers = [b.layer for b in stack.blocks]
    assert len(layers) == 2 and layers[0] is not layers[1]
    assert all(isinstance(m, GatedConv) and m.causal and m.width == 5 for m in layers)
    assert stack.causal
    names = set(dict(stack.named_parameters()))
    assert {"blocks.0.layer.conv.weight", "blocks.1.norm.weight", "norm.weight"} <= names
    x, valid = _padded()
    assert stack(x, valid).shape == x.shape


@pytest.mark.parametrize("layer, kw, error, match", [
    (SaysNonCausal, dict(causal=True), ValueError, "causal=False but the stack needs causal=True"),
    (SaysNonCausal, dict(bidirectional=True), ValueError, "Bidirectional wrapper needs a causal"),
    (RunningMean, dict(), ValueError, r"LayerConfig\(bidirectional=True\)"),
    (GatedConv, dict(kwargs={"widht": 3}), TypeError, "check LayerConfig.kwargs"),
    (NotAModule, dict(), TypeError, "not a torch.nn.Module subclass"),
])
def test_stack_build_errors(layer, kw, error, match):
    with pytest.raises(error, match=match):
        _stack(layer, **kw)


def test_wrong_output_shape_names_the_layer():
    stack = _stack(WrongShape)
    with pytest.raises(ValueError, match=r"WrongShape returned \(3, 10, 16\) for an input of shape"):
        stack(*_padded())


def test_masked_and_causal_objectives_check_the_stack():
    spec = TaskSpec("toy", seq_len=16, num_classes=3, vocab_size=10)
    with pytest.raises(ValueError, match="masked pretraining needs a bidirectional model: set "
                                         "LayerConfig.causal=False"):
        pretraining_model(LayerConfig(RunningMean, d_model=8, causal=True), spec,
                          ObjectiveConfig("masked", 0.15, "ce"))
    with pytest.raises(ValueError, match="needs LayerConfig.causal=True"):
        pretraining_model(LayerConfig(RunningMean, d_model=8, bidirectional=True), spec,
                          ObjectiveConfig("causal", loss="ce"))
    model = pretraining_model(LayerConfig(RunningMean, d_model=8, bidirectional=True), spec,
                              ObjectiveConfig("masked", 0.15, "ce"))
    assert not model.backbone.causal


# ------------------------------------------------------------------ causality and padding

def _future_grad(stack, t=4, L=10):
    x = torch.randn(1, L, 8, requires_grad=True)
    (stack(x)[0, t] * torch.randn(8)).sum().backward()  # the final LayerNorm's outputs sum to 0
    return x.grad[0, t + 1:].abs().sum().item(), x.grad[0, :t + 1].abs().sum().item()


@pytest.mark.parametrize("layer, kw", [(GatedConv, dict(causal=True)),
                                       (RunningMean, dict(causal=True))])
def test_causal_stack_never_sees_the_future(layer, kw):
    future, past = _future_grad(_stack(layer, **kw))
    assert future == 0 and past > 0
    assert check_causal(_stack(layer, **kw), 8)


@pytest.mark.parametrize("layer, kw", [(GatedConv, dict(bidirectional=True)),
                                       (RunningMean, dict(bidirectional=True)),
                                       (GatedConv, dict())])
def test_bidirectional_stack_sees_both_ways(layer, kw):
    future, past = _future_grad(_stack(layer, **kw))
    assert future > 0 and past > 0
    assert not check_causal(_stack(layer, **kw), 8)


@pytest.mark.parametrize("layer, kw", [(GatedConv, dict(causal=True)),
                                       (GatedConv, dict()),
                                       (GatedConv, dict(bidirectional=True)),
                                       (RunningMean, dict(bidirectional=True))])
def test_padding_does_not_leak_into_real_positions(layer, kw):
    stack = _stack(layer, **kw)
    x, valid = _padded()
    y = stack(x, valid)
    x2 = torch.where(valid[..., None], x, 100 * torch.randn_like(x))
    torch.testing.assert_close(stack(x2, valid)[valid], y[valid])
    # and a padded row's real outputs are those of the row alone
    torch.testing.assert_close(stack(x[:1, :6], None)[0], y[0, :6], rtol=1e-5, atol=1e-5)


def test_reverse_valid_reverses_within_each_rows_length():
    x = torch.arange(12.).reshape(2, 6)
    valid = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    assert reverse_valid(x, valid).tolist() == [[3, 2, 1, 0, 4, 5], [11, 10, 9, 8, 7, 6]]
    assert torch.equal(reverse_valid(x, None), x.flip(1))
    holes = torch.tensor([[1, 0, 1, 1, 0, 1]], dtype=torch.bool)  # pads stay where they are
    assert reverse_index(holes).tolist() == [[5, 1, 3, 2, 4, 0]]
    x3, v3 = _padded()
    torch.testing.assert_close(reverse_valid(reverse_valid(x3, v3), v3), x3, rtol=0, atol=0)
    xg = x3.clone().requires_grad_()
    (reverse_valid(xg, v3) * torch.arange(10.)[:, None]).sum().backward()
    assert xg.grad[0, 0, 0] == 5 and xg.grad[0, 7, 0] == 7  # position 0 of a length-6 row went to 5


def test_bidirectional_sums_a_forward_and_a_reversed_pass():
    torch.manual_seed(0)
    f, b = RunningMean(8), RunningMean(8)
    x, valid = _padded()
    want = f(x) + reverse_valid(b(reverse_valid(x, valid)), valid)
    torch.testing.assert_close(Bidirectional(f, b)(x, valid), want)
    with pytest.raises(ValueError, match="Bidirectional needs causal layers"):
        Bidirectional(f, SaysNonCausal(8))


# ------------------------------------------------------------------ training hooks

def test_grad_checkpointing_gives_the_same_gradients():
    x, valid = _padded()
    grads = []
    for on in (False, True):
        stack = _stack(kwargs={"width": 3}).train()
        stack.grad_checkpointing = on
        stack(x, valid).pow(2).sum().backward()
        grads.append({n: p.grad.clone() for n, p in stack.named_parameters()})
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], msg=n)


def test_layer_optimiser_hints_reach_the_param_groups():
    stack = _stack()
    stack.blocks[0].layer.conv.weight._optim = {"lr": 1e-2, "weight_decay": 0.0}
    groups = param_groups(stack, TrainConfig(lr=1e-3))
    hinted = [g for g in groups if "blocks.0.layer.conv.weight" in g["names"]]
    assert hinted[0]["lr"] == 1e-2 and hinted[0]["names"] == ["blocks.0.layer.conv.weight"]


# ------------------------------------------------------------------ the protocol and the hub

def test_own_layer_through_pretrain_finetune_scratch_and_the_hub(tmp_path):
    task = digits_task(size=8, n_train=32, val_size=32, test_size=32)
    cfg = LayerConfig(GatedConv, kwargs={"width": 5}, d_model=16, n_layers=2,
                      positions="sinusoidal", max_len=64)
    tc = TrainConfig(lr=3e-3, batch_size=16, epochs=1, progress=False, seed=0)
    pt = pretrain(task, cfg, ObjectiveConfig("masked", 0.5, "l1"), tc, tmp_path / "pt")
    ft = finetune(task, pt.best_checkpoint, tc, tmp_path / "ft", trust_remote_code=True)
    sc = train_from_scratch(task, cfg, tc, tmp_path / "sc")
    for run in (pt, ft, sc):
        saved = torch.load(run.best_checkpoint, weights_only=False)
        assert model_config_from_dict(saved["model_config"]) == cfg
        assert "backbone.layers.blocks.1.layer.conv.weight" in saved["model"]
    assert set(ft.test_metrics) == set(sc.test_metrics) == {"loss", "accuracy"}

    batch = pad_collate([task.test[i] for i in range(5)])
    x, valid = batch["inputs"], batch["valid"]
    ft.model.cpu().eval()
    ft.model.save_pretrained(tmp_path / "hub_ft")
    loaded = SequenceModel.from_pretrained(tmp_path / "hub_ft", trust_remote_code=True)
    torch.testing.assert_close(loaded(x, valid), ft.model(x, valid), rtol=0, atol=0)
    assert isinstance(loaded.backbone.layers.blocks[0].layer, GatedConv)

    folder = hub.export_checkpoint(pt.best_checkpoint, tmp_path / "hub_pt", trust_remote_code=True)
    pt_model = hub.load_model(folder, trust_remote_code=True)
    pt.model.cpu().eval()
    torch.testing.assert_close(pt_model(x, valid), pt.model(x, valid), rtol=0, atol=0)


def test_causal_own_layer_pretrains_with_next_token_and_finetunes_from_the_hub(tmp_path):
    task = digits_task(size=8, n_train=16, val_size=16, test_size=16)
    cfg = LayerConfig(RunningMean, d_model=8, n_layers=1, causal=True, pooling="last")
    tc = TrainConfig(lr=3e-3, batch_size=16, epochs=1, progress=False, seed=0)
    pt = pretrain(task, cfg, ObjectiveConfig("causal", loss="l1"), tc, tmp_path / "pt")
    folder = hub.export_checkpoint(pt.best_checkpoint, tmp_path / "hub", trust_remote_code=True)
    a = finetune(task, folder, tc, tmp_path / "ft_hub", trust_remote_code=True)
    b = finetune(task, pt.best_checkpoint, tc, tmp_path / "ft_best", trust_remote_code=True)
    assert a.test_metrics == b.test_metrics


def test_classifier_of_a_bidirectional_stack_round_trips(tmp_path):
    spec = TaskSpec("toy", seq_len=16, num_classes=3, vocab_size=10)
    torch.manual_seed(0)
    model = classifier_model(LayerConfig(RunningMean, d_model=8, bidirectional=True,
                                         positions="learned", max_len=16), spec).eval()
    x = torch.randint(4, 10, (2, 12))
    model.save_pretrained(tmp_path / "m")
    torch.testing.assert_close(
        SequenceModel.from_pretrained(tmp_path / "m", trust_remote_code=True)(x), model(x),
        rtol=0, atol=0)
