"""The classifier after pooling, the model config's `head`: "mlp" (the default, spt's head since the
start) or "linear" (one Linear, the paper's authors' decoder for S4 / DLR and some Transformers)."""
import dataclasses
import json

import pytest
import torch
import torch.nn as nn

from spt import hub
from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data import digits_task
from spt.data.task import TaskSpec
from spt.free_conv_config import FreeConvConfig
from spt.layer_config import LayerConfig
from spt.model_config import LATER_MODEL_FIELDS, model_config_from_dict, model_config_to_dict
from spt.models import count_parameters
from spt.models.heads import ClassifierHead, PairClassifierHead, pair_features, pool
from spt.models.model import SequenceModel, classifier_model
from spt.sgconv_config import SGConvConfig
from spt.ssm_config import SSMConfig
from spt.train import finetune, pretrain

D = 8
CLS = TaskSpec("cls", seq_len=16, num_classes=5, vocab_size=12)
REG = TaskSpec("reg", seq_len=16, num_classes=None, d_input=2)
PAIR = TaskSpec("pair", seq_len=16, num_classes=2, vocab_size=12, pair=True)
CONFIGS = {
    "transformer": TransformerConfig(d_model=D, n_layers=1, n_heads=2, d_ff=16, max_len=32,
                                     dropout=0.0),
    "s4": SSMConfig(kind="s4", d_model=D, n_layers=1, d_state=4, max_len=32),
    "sgconv": SGConvConfig(d_model=D, n_layers=1, kernel_dim=4, max_len=32),
    "free_conv": FreeConvConfig(d_model=D, n_layers=1, max_len=32),
    "layer": LayerConfig("spt.models.layer_template:DecayMix", d_model=D, n_layers=1),
}


def _linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def _inputs(spec: TaskSpec, B: int = 3, L: int = 10):
    g = torch.Generator().manual_seed(0)
    x = (torch.randint(4, spec.vocab_size, (B, L), generator=g) if spec.is_tokens
         else torch.randn(B, L, spec.d_input, generator=g))
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[0, 6:] = False
    return x, valid


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_model_config_has_an_mlp_head_by_default_and_takes_linear(name):
    cfg = CONFIGS[name]
    assert cfg.head == "mlp"
    assert classifier_model(cfg, CLS).head.kind == "mlp"
    model = classifier_model(dataclasses.replace(cfg, head="linear"), CLS)
    assert [n for n, _ in model.head.named_parameters()] == ["linear.weight", "linear.bias"]


@pytest.mark.parametrize("spec, d_in, n_out", [(CLS, D, 5), (REG, D, 1), (PAIR, 4 * D, 2)],
                         ids=["classification", "regression", "pair"])
def test_linear_head_is_one_linear_layer_of_the_right_shape(spec, d_in, n_out):
    cfg = dataclasses.replace(CONFIGS["transformer"], head="linear")
    torch.manual_seed(0)
    model = classifier_model(cfg, spec).eval()
    (lin,) = _linears(model.head)
    assert (lin.in_features, lin.out_features) == (d_in, n_out)
    assert dict(model.head.named_parameters()).keys() == {"linear.weight", "linear.bias"}
    x, valid = _inputs(spec)
    kw = dict(inputs2=x.flip(0), valid2=valid.flip(0)) if spec.pair else {}
    out = model(x, valid, **kw)
    assert out.shape == (3, n_out)
    # the head is exactly that one Linear of the pooled features
    with torch.no_grad():
        if spec.pair:
            u = pool(model.backbone(x, valid), valid, cfg.pooling)
            v = pool(model.backbone(x.flip(0), valid.flip(0)), valid.flip(0), cfg.pooling)
            want = lin(pair_features(u, v))
        else:
            want = lin(pool(model.backbone(x, valid), valid, cfg.pooling))
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("spec, d_in, n_out", [(CLS, D, 5), (REG, D, 1), (PAIR, 4 * D, 2)],
                         ids=["classification", "regression", "pair"])
def test_mlp_head_keeps_its_shape_and_parameter_names(spec, d_in, n_out):
    model = classifier_model(CONFIGS["transformer"], spec)
    first, last = _linears(model.head)
    assert (first.in_features, first.out_features) == (d_in, D)
    assert (last.in_features, last.out_features) == (D, n_out)
    assert isinstance(model.head.mlp[1], nn.GELU)
    names = {k for k in model.state_dict() if k.startswith("head.")}
    assert names == {"head.mlp.0.weight", "head.mlp.0.bias", "head.mlp.2.weight", "head.mlp.2.bias"}


@pytest.mark.parametrize("spec, d_in, n_out", [(CLS, D, 5), (REG, D, 1), (PAIR, 4 * D, 2)],
                         ids=["classification", "regression", "pair"])
def test_parameter_counts_differ_by_the_mlps_hidden_layer(spec, d_in, n_out):
    cfg = CONFIGS["transformer"]
    mlp = count_parameters(classifier_model(cfg, spec))
    linear = count_parameters(classifier_model(dataclasses.replace(cfg, head="linear"), spec))
    # mlp: (d_in*D + D) + (D*n_out + n_out); linear: d_in*n_out + n_out
    assert mlp - linear == (d_in * D + D) + D * n_out - d_in * n_out


def test_unknown_head_names_the_field_and_the_choices():
    for name, cfg in CONFIGS.items():
        cls = type(cfg).__name__
        with pytest.raises(ValueError, match=rf"{cls}\.head='conv' is not one of \['mlp', 'linear'\]"):
            dataclasses.replace(cfg, head="conv")
    with pytest.raises(ValueError, match=r"ClassifierHead\.head='MLP' is not one of \['mlp', 'linear'\]"):
        ClassifierHead(D, 2, "mean", "MLP")
    with pytest.raises(ValueError, match=r"PairClassifierHead\.head=None is not one of"):
        PairClassifierHead(D, 2, "mean", None)
    with pytest.raises(ValueError, match=r"TransformerConfig\.head='conv'"):
        model_config_from_dict({"type": "TransformerConfig", "head": "conv"})


@pytest.mark.parametrize("name", list(CONFIGS))
def test_stored_configs_without_head_read_as_mlp(name):
    cfg = CONFIGS[name]
    d = model_config_to_dict(cfg)
    # an mlp config is stored as before the field existed: result files and last.pt still match
    assert "head" not in d and LATER_MODEL_FIELDS["head"] == "mlp"
    assert model_config_from_dict(d) == cfg and model_config_from_dict(d).head == "mlp"
    lin = dataclasses.replace(cfg, head="linear")
    d = model_config_to_dict(lin)
    assert d["head"] == "linear"
    assert model_config_from_dict(json.loads(json.dumps(d))) == lin


def test_hub_round_trip_keeps_a_linear_head(tmp_path):
    cfg = dataclasses.replace(CONFIGS["s4"], head="linear")
    for spec in (CLS, PAIR):
        torch.manual_seed(0)
        model = classifier_model(cfg, spec).eval()
        x, valid = _inputs(spec)
        kw = dict(inputs2=x.flip(0), valid2=valid.flip(0)) if spec.pair else {}
        folder = tmp_path / spec.name
        model.save_pretrained(folder)
        saved = json.loads((folder / "config.json").read_text())["model_config"]
        assert saved["head"] == "linear"
        torch.manual_seed(1)
        loaded = SequenceModel.from_pretrained(folder)
        assert model_config_from_dict(loaded.hub_config["model_config"]) == cfg
        assert loaded.head.kind == "linear" and len(_linears(loaded.head)) == 1
        torch.testing.assert_close(loaded(x, valid, **kw), model(x, valid, **kw), rtol=0, atol=0)


def test_hub_folder_without_head_loads_an_mlp_head(tmp_path):
    """An mlp model's hub folder is what spt wrote before the field existed: config.json without
    "head", weights head.mlp.* (tests/test_model_config.py loads folders written back then)."""
    torch.manual_seed(0)
    model = classifier_model(CONFIGS["transformer"], CLS).eval()
    model.save_pretrained(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert "head" not in config["model_config"]
    loaded = hub.load_model(tmp_path / "m")
    assert loaded.head.kind == "mlp"
    x, valid = _inputs(CLS)
    torch.testing.assert_close(loaded(x, valid), model(x, valid), rtol=0, atol=0)
    ckpt = hub.load_checkpoint(tmp_path / "m")
    assert model_config_from_dict(ckpt["model_config"]).head == "mlp"
    assert "head.mlp.0.weight" in ckpt["model"]


@pytest.fixture(scope="module")
def digits():
    return digits_task(size=8, n_train=32, val_size=16, test_size=16)


def _train(**kw):
    return TrainConfig(**{**dict(lr=1e-3, batch_size=16, epochs=1, progress=False, seed=0), **kw})


def test_finetune_builds_the_checkpoints_head_or_the_override(digits, tmp_path):
    obj = ObjectiveConfig("masked", 0.5, "l1")
    cfg = dataclasses.replace(CONFIGS["transformer"], max_len=64, head="linear")
    pt = pretrain(digits, cfg, obj, _train(), tmp_path / "pt")
    ft = finetune(digits, pt.best_checkpoint, _train(), tmp_path / "ft")
    (lin,) = _linears(ft.model.head)
    assert (lin.in_features, lin.out_features) == (D, 10)
    # overrides: an arm may pool or classify differently from the checkpoint's config
    ft2 = finetune(digits, pt.best_checkpoint, _train(), tmp_path / "ft2", head="mlp", pooling="max")
    assert ft2.model.head.kind == "mlp" and ft2.model.head.pooling == "max"
    assert len(_linears(ft2.model.head)) == 2
    # the finetuning checkpoint stores the config it ran with, so it exports and loads
    stored = torch.load(ft2.best_checkpoint, weights_only=False)["model_config"]
    assert model_config_from_dict(stored) == dataclasses.replace(cfg, head="mlp", pooling="max")
    loaded = hub.load_model(hub.export_checkpoint(ft2.best_checkpoint, tmp_path / "hub"))
    assert loaded.head.kind == "mlp" and loaded.head.pooling == "max"
    with pytest.raises(ValueError, match=r"head='conv' is not one of \['mlp', 'linear'\]"):
        finetune(digits, pt.best_checkpoint, _train(), tmp_path / "ft3", head="conv")
