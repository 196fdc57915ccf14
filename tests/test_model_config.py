"""How checkpoints store model configs, and checkpoints written by the previous version of spt.

tests/fixtures/checkpoints_v1 was written by spt before TransformerConfig got its name (its configs
say "type": "ModelConfig"): two hub folders (a Transformer with learned positions on continuous
inputs, an S4 classifier on tokens), a pretraining best.pt (a Transformer with sinusoidal positions
on tokens), and expected.json with inputs and the outputs those models gave then.
"""
import json
import shutil
from pathlib import Path

import pytest
import torch

from spt import hub
from spt.config import ObjectiveConfig, TransformerConfig
from spt.data.task import TaskSpec
from spt.model_config import model_config_from_dict, model_config_to_dict
from spt.models.model import SequenceModel, classifier_model, pretraining_model
from spt.ssm_config import SSMConfig
from spt.train.checkpoint import load_backbone, load_checkpoint

V1 = Path(__file__).parent / "fixtures" / "checkpoints_v1"
EXPECTED = json.loads((V1 / "expected.json").read_text())


def _inputs(key):
    """key "tokens" (2, 12) ids or "values" (2, 12, 2) floats, and valid (2, 12) bool."""
    return torch.tensor(EXPECTED[key]), torch.tensor(EXPECTED["valid"])


def test_model_configs_round_trip_and_old_names_load():
    t = TransformerConfig(d_model=8, n_heads=2, positions="rotary")
    s = SSMConfig(kind="dlr", d_model=8)
    for cfg in (t, s):
        d = model_config_to_dict(cfg)
        assert d["type"] == type(cfg).__name__
        back = model_config_from_dict(d)
        assert back == cfg and type(back) is type(cfg)
    fields = {k: v for k, v in model_config_to_dict(t).items() if k != "type"}
    for old in ({"type": "ModelConfig", **fields}, fields):  # earlier name; no "type" at all
        back = model_config_from_dict(old)
        assert type(back) is TransformerConfig and back == t
    with pytest.raises(ValueError, match="unknown type 'Mamba'.*TransformerConfig.*SSMConfig"):
        model_config_from_dict({"type": "Mamba"})
    # each model config says which positions its backbone adds; the SSM's is not a stored field
    assert (t.positions, s.positions) == ("rotary", "none")
    assert "positions" not in model_config_to_dict(s)


@pytest.mark.parametrize("name, key", [("hub_transformer_learned", "values"), ("hub_s4", "tokens")])
def test_hub_folders_written_before_load(tmp_path, name, key):
    folder = tmp_path / name
    shutil.copytree(V1 / name, folder)
    saved = json.loads((folder / "config.json").read_text())["model_config"]["type"]
    assert saved in ("ModelConfig", "SSMConfig")
    model = SequenceModel.from_pretrained(folder)  # weights loaded strictly by parameter name
    cfg = model_config_from_dict(model.hub_config["model_config"])
    assert type(cfg) is (TransformerConfig if saved == "ModelConfig" else SSMConfig)
    # written before the model configs had `head`: read as the MLP head those folders hold
    assert "head" not in model.hub_config["model_config"] and cfg.head == "mlp"
    if model.hub_config["kind"] == "classifier":
        assert "head.mlp.0.weight" in model.state_dict()
    x, valid = _inputs(key)
    torch.testing.assert_close(model(x, valid), torch.tensor(EXPECTED[name]))
    ckpt = hub.load_checkpoint(folder)
    assert type(model_config_from_dict(ckpt["model_config"])) is type(cfg)


def test_best_pt_written_before_finetunes_and_exports(tmp_path):
    ckpt = load_checkpoint(V1 / "best_transformer.pt")
    assert ckpt["model_config"]["type"] == "ModelConfig"
    cfg = model_config_from_dict(ckpt["model_config"])
    assert type(cfg) is TransformerConfig and cfg.positions == "sinusoidal"
    assert "head" not in ckpt["model_config"] and cfg.head == "mlp"
    spec = TaskSpec(**ckpt["spec"])
    # the pretraining model loads the whole state dict strictly and computes what it did then
    model = pretraining_model(cfg, spec, ObjectiveConfig(**ckpt["objective"])).eval()
    model.load_state_dict(ckpt["model"], strict=True)
    x, valid = _inputs("tokens")
    torch.testing.assert_close(model(x, valid), torch.tensor(EXPECTED["best_transformer"]))
    # finetune()'s path: a classifier of the checkpoint's own config, its backbone loaded strictly
    clf = classifier_model(cfg, spec)
    load_backbone(clf, ckpt)
    for k, v in clf.backbone.state_dict().items():
        assert torch.equal(v, ckpt["model"]["backbone." + k]), k
    # and export to a hub folder, which now names the config by its new name
    folder = hub.export_checkpoint(V1 / "best_transformer.pt", tmp_path / "hub")
    assert json.loads((folder / "config.json").read_text())["model_config"]["type"] == \
        "TransformerConfig"
    torch.testing.assert_close(hub.load_model(folder)(x, valid),
                               torch.tensor(EXPECTED["best_transformer"]))
