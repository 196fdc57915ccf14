"""Hub checkpoints (spt.hub + SequenceModel's PyTorchModelHubMixin), offline, tiny CPU models."""
import json

import pytest
import torch

from spt import hub
from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data.task import TaskSpec
from spt.model_config import model_config_from_dict
from spt.models.model import SequenceModel, classifier_model, pretraining_model
from spt.ssm_config import SSMConfig

SPEC = TaskSpec("toy", seq_len=24, num_classes=3, vocab_size=12)
CONT = TaskSpec("toyc", seq_len=24, num_classes=None, d_input=2)


def _inputs(spec, B=3, L=20):
    g = torch.Generator().manual_seed(1)
    if spec.is_tokens:
        x = torch.randint(4, spec.vocab_size, (B, L), generator=g)
    else:
        x = torch.randn(B, L, spec.d_input, generator=g)
    valid = torch.ones(B, L, dtype=torch.bool)
    valid[0, 15:] = False
    return x, valid


MODELS = {
    "transformer": TransformerConfig(d_model=16, n_layers=2, n_heads=2, d_ff=32, max_len=32,
                                     positions="rotary", dropout=0.0),
    "s4": SSMConfig(kind="s4", d_model=8, n_layers=2, d_state=8, max_len=32, pooling="max"),
}


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("spec", [SPEC, CONT], ids=["tokens", "continuous"])
def test_save_load_round_trip_identical_outputs(tmp_path, name, spec):
    torch.manual_seed(0)
    model = classifier_model(MODELS[name], spec).eval()
    x, valid = _inputs(spec)
    want = model(x, valid)
    model.save_pretrained(tmp_path / "m")
    assert {"config.json", "model.safetensors", "README.md"} <= {p.name for p in (tmp_path / "m").iterdir()}
    torch.manual_seed(123)  # a different init: the loaded weights must overwrite every parameter
    loaded = SequenceModel.from_pretrained(tmp_path / "m")
    assert not loaded.training
    torch.testing.assert_close(loaded(x, valid), want, rtol=0, atol=0)
    cfg = model_config_from_dict(loaded.hub_config["model_config"])
    assert cfg == MODELS[name] and type(cfg) is type(MODELS[name])
    assert TaskSpec(**loaded.hub_config["spec"]) == spec
    # a fresh model of the same config gives different outputs (so the test can fail)
    assert not torch.equal(classifier_model(MODELS[name], spec).eval()(x, valid), want)


def test_pretraining_model_round_trip_keeps_objective(tmp_path):
    obj = ObjectiveConfig(kind="masked", mask_ratio=0.15, loss="ce")
    model = pretraining_model(MODELS["transformer"], SPEC, obj).eval()
    x, valid = _inputs(SPEC)
    model.save_pretrained(tmp_path / "pt")
    loaded = hub.load_model(tmp_path / "pt")
    assert ObjectiveConfig(**loaded.hub_config["objective"]) == obj
    assert loaded(x, valid).shape == (3, 20, SPEC.vocab_size)
    torch.testing.assert_close(loaded(x, valid), model(x, valid), rtol=0, atol=0)
    card = (tmp_path / "pt" / "README.md").read_text()
    assert "library_name: spt" in card and "toy" in card


def test_not_an_spt_checkpoint_errors(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(hub.NotAnSptCheckpoint, match="no config.json"):
        hub.load_model(empty)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "gpt_neox", "hidden_size": 8}))
    with pytest.raises(hub.NotAnSptCheckpoint, match="transformers model"):
        SequenceModel.from_pretrained(other)
    with pytest.raises(hub.NotAnSptCheckpoint, match="transformers model"):
        hub.load_checkpoint(other)
    with pytest.raises(hub.NotAnSptCheckpoint, match="neither a local folder"):
        hub.load_checkpoint(tmp_path / "does-not-exist")
    bare = SequenceModel(torch.nn.Identity(), torch.nn.Identity())
    with pytest.raises(ValueError, match="no hub_config"):
        bare.save_pretrained(tmp_path / "bare")


def test_weights_missing_is_clear(tmp_path):
    model = classifier_model(MODELS["transformer"], SPEC)
    model.save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(hub.NotAnSptCheckpoint, match="no model.safetensors"):
        SequenceModel.from_pretrained(tmp_path / "m")


SMALL = TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=64, dropout=0.0)
SMALL_TRAIN = TrainConfig(epochs=1, batch_size=20, progress=False, device="cpu")


def _pretrained_hub_folder(tmp_path):
    """A tiny masked pretraining run on digit tokens and its export: (task, run result, folder)."""
    from spt.data.digits import digits_task
    from spt.train import pretrain

    task = digits_task(size=8, n_train=40, val_size=40, test_size=40, tokens=True)
    obj = ObjectiveConfig(kind="masked", mask_ratio=0.5, loss="ce")
    pt = pretrain(task, SMALL, obj, SMALL_TRAIN, tmp_path / "pt")
    return task, pt, hub.export_checkpoint(pt.best_checkpoint, tmp_path / "hub")


def test_export_best_pt_and_load_it_back(tmp_path):
    from spt.train.checkpoint import load_backbone

    task, pt, folder = _pretrained_hub_folder(tmp_path)
    saved = json.loads((folder / "config.json").read_text())
    assert saved["kind"] == "pretraining" and saved["training"]["stage"] == "pretrain"
    ckpt = hub.load_checkpoint(folder)
    for k, v in pt.model.state_dict().items():
        assert torch.equal(ckpt["model"][k], v.cpu()), k
    # the backbone goes into a classifier exactly as from best.pt
    clf = classifier_model(SMALL, task.spec)
    load_backbone(clf, ckpt)
    for k, v in clf.backbone.state_dict().items():
        assert torch.equal(v, pt.model.backbone.state_dict()[k].cpu()), k


def test_load_model_reads_a_local_checkpoint_file_and_never_asks_the_hub_for_a_path(tmp_path):
    """load_model("runs/pt/best.pt") is the model of that run, not 27 s of hub retries."""
    task, pt, folder = _pretrained_hub_folder(tmp_path)
    want = hub.load_model(folder)
    for source in (pt.best_checkpoint, folder / "config.json", folder / "model.safetensors"):
        got = hub.load_model(source)
        assert type(got) is type(want) and got.hub_config["kind"] == "pretraining"
        for k, v in want.state_dict().items():
            assert torch.equal(got.state_dict()[k], v), (source, k)
    for missing in (tmp_path / "runs" / "pt" / "best.pt", "runs/pt/best.pt", "./ckpt"):
        with pytest.raises(FileNotFoundError, match=r"there is no such file or folder, and it is "
                                                    r"not a hub repo id"):
            hub.load_model(missing)


def test_a_hub_folder_records_the_code_that_wrote_it_and_trained_it(tmp_path):
    import spt
    from spt.provenance import commit, describe
    from spt.train.checkpoint import read_checkpoint

    task, pt, folder = _pretrained_hub_folder(tmp_path)
    saved = json.loads((folder / "config.json").read_text())
    assert saved["provenance"]["spt"] == spt.__version__ and saved["provenance"]["commit"] == commit()
    assert saved["provenance"]["torch"] == torch.__version__ and saved["provenance"]["date"]
    trained = read_checkpoint(pt.best_checkpoint)["provenance"]
    assert saved["training"]["provenance"] == trained
    card = (folder / "README.md").read_text()
    assert f"trained with {describe(trained)}" in card
    assert f"- saved with {describe(saved['provenance'])}, torch {torch.__version__}, on " in card
    # a model saved from Python records it too; loaded and saved again, the new writer's
    model = hub.load_model(folder)
    model.save_pretrained(tmp_path / "again")
    again = json.loads((tmp_path / "again" / "config.json").read_text())
    assert again["provenance"]["spt"] == spt.__version__
    assert again["training"] == saved["training"] and again["model_config"] == saved["model_config"]
    assert f"saved with {describe(again['provenance'])}" in (tmp_path / "again" / "README.md").read_text()


def test_finetune_takes_hub_folder_or_loaded_checkpoint(tmp_path):
    """finetune(task, hub folder | spt.hub.load_checkpoint(...)) — needs spt.train.checkpoint.
    load_checkpoint to accept a dict and a hub folder / repo id (see spt.hub's docstring)."""
    from spt.train import finetune

    task, pt, folder = _pretrained_hub_folder(tmp_path)
    tc = SMALL_TRAIN
    a = finetune(task, folder, tc, tmp_path / "ft_folder")
    b = finetune(task, hub.load_checkpoint(folder), tc, tmp_path / "ft_dict")
    c = finetune(task, pt.best_checkpoint, tc, tmp_path / "ft_best")
    assert a.test_metrics == b.test_metrics == c.test_metrics  # same weights, same seed


class _FakeHub:
    """Stands in for the hub offline: push_to_hub uploads into `store/<repo_id>`, downloads read it."""

    def __init__(self, store):
        self.store = store

    def api(self, token=None):
        hub = self

        class Api:
            def create_repo(self, repo_id, **kw):
                return type("Repo", (), {"repo_id": repo_id})()

            def upload_folder(self, repo_id, folder_path, **kw):
                import shutil
                shutil.copytree(folder_path, hub.store / repo_id, dirs_exist_ok=True)
                return f"fake://{repo_id}"
        return Api()

    def download(self, repo_id, filename, **kw):
        from huggingface_hub.errors import EntryNotFoundError
        path = self.store / repo_id / filename
        if not path.is_file():
            raise EntryNotFoundError(f"{repo_id} has no {filename}")
        return str(path)


def test_push_to_hub_and_load_by_repo_id(tmp_path, monkeypatch):
    import huggingface_hub
    import huggingface_hub.hub_mixin as mixin

    fake = _FakeHub(tmp_path / "store")
    monkeypatch.setattr(mixin, "HfApi", fake.api)
    monkeypatch.setattr(mixin, "hf_hub_download", fake.download)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake.download)
    model = classifier_model(MODELS["s4"], SPEC).eval()
    x, valid = _inputs(SPEC)
    assert model.push_to_hub("someone/toy-s4") == "fake://someone/toy-s4"
    assert (tmp_path / "store" / "someone/toy-s4" / "model.safetensors").is_file()
    loaded = SequenceModel.from_pretrained("someone/toy-s4")
    torch.testing.assert_close(loaded(x, valid), model(x, valid), rtol=0, atol=0)
    ckpt = hub.load_checkpoint("someone/toy-s4")
    assert ckpt["path"] == "someone/toy-s4" and ckpt["stage"] == "finetune"
