"""Faults and hostile input on smoke-size runs: each scenario ends in one clear line that names what
happened and the file, and nothing already finished is lost.

Sections: files that could run code (crafted pickles on every load path, layer classes named by a
file), damaged checkpoints.
"""
import shutil

import pytest
import torch

from spt import hub
from spt.analysis.receptive_field import spt_profiles
from spt.atomic import DamagedFileError
from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data.digits import digits_task
from spt.layer_config import LayerConfig, UntrustedLayerError
from spt.models.model import SequenceModel
from spt.train import finetune, pretrain
from spt.train.checkpoint import (FORMAT, UnsafeCheckpointError, atomic_save, load_checkpoint,
                                  read_checkpoint)

TINY = TransformerConfig(d_model=8, n_layers=1, n_heads=2, d_ff=16, max_len=64, dropout=0.0)
TC = TrainConfig(lr=3e-3, batch_size=16, epochs=1, progress=False, seed=0)
MASKED = ObjectiveConfig("masked", 0.5, "l1")


@pytest.fixture(scope="module")
def task():
    return digits_task(size=8, n_train=16, val_size=16, test_size=16)


@pytest.fixture(scope="module")
def pretrained(task, tmp_path_factory):
    """A finished one-epoch pretraining run folder (best.pt, last.pt)."""
    out = tmp_path_factory.mktemp("pt") / "run"
    pretrain(task, TINY, MASKED, TC, out)
    return out


# ------------------------------------------------------------- no file spt reads runs its code

class _OpensAFile:
    """Unpickling this object calls open(marker, "w"): the stand-in for any code a pickle runs."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _plant(path, marker) -> None:
    """A checkpoint-shaped pickle at `path` whose loading would create `marker`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, "stage": "pretrain", "model": _OpensAFile(marker)}, path)


def _copy_run(pretrained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(pretrained, run)
    return run


LOAD_PATHS = {
    "read_checkpoint": lambda run, task, tmp: read_checkpoint(run / "best.pt"),
    "load_checkpoint(best.pt)": lambda run, task, tmp: load_checkpoint(run / "best.pt"),
    "load_checkpoint(run folder)": lambda run, task, tmp: load_checkpoint(run),
    "finetune": lambda run, task, tmp: finetune(task, run / "best.pt", TC, tmp / "ft"),
    "export_checkpoint": lambda run, task, tmp: hub.export_checkpoint(run, tmp / "hub"),
    "spt_profiles": lambda run, task, tmp: spt_profiles(run / "best.pt", L=16),
    # a finished run rerun with resume reads last.pt, then best.pt for the test split
    "pretrain(resume) of a finished run": lambda run, task, tmp: pretrain(
        task, TINY, MASKED, TC, run, resume=True),
}


@pytest.mark.parametrize("where", list(LOAD_PATHS))
def test_a_crafted_best_pt_runs_no_code_on_any_load_path(where, task, pretrained, tmp_path):
    run = _copy_run(pretrained, tmp_path)
    marker = tmp_path / "code_ran"
    _plant(run / "best.pt", marker)
    with pytest.raises(UnsafeCheckpointError) as err:
        LOAD_PATHS[where](run, task, tmp_path)
    assert not marker.exists()
    assert str(run / "best.pt") in str(err.value) and "refused" in str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_a_crafted_last_pt_runs_no_code_on_resume(task, pretrained, tmp_path):
    run = _copy_run(pretrained, tmp_path)
    marker = tmp_path / "code_ran"
    _plant(run / "last.pt", marker)
    with pytest.raises(UnsafeCheckpointError, match="last.pt"):
        pretrain(task, TINY, MASKED, TC, run, resume=True)
    assert not marker.exists()


def test_a_hub_folder_loads_safetensors_only_never_a_pickle(pretrained, tmp_path):
    folder = hub.export_checkpoint(pretrained, tmp_path / "hub")
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "code_ran"
    _plant(folder / "pytorch_model.bin", marker)
    with pytest.raises(Exception, match="model.safetensors"):
        hub.load_model(folder)
    with pytest.raises(Exception, match="model.safetensors"):
        load_checkpoint(folder)
    assert not marker.exists()


def test_a_flipped_bit_in_a_checkpoint_is_named(tmp_path):
    path = tmp_path / "best.pt"
    atomic_save({"format": FORMAT, "stage": "pretrain", "epoch": 1,
                 "model": {"w": torch.zeros(256, 256)}}, path)
    data = bytearray(path.read_bytes())
    i = data.index(bytes(4 * 64)) + 100  # inside the tensor's zero payload
    data[i] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match="does not match its digest") as err:
        read_checkpoint(path)
    assert str(path) in str(err.value) and "last.pt" in str(err.value)


# ------------------------------------------- a layer class named by a file is imported on trust

OUTSIDE = LayerConfig("tests_outside_layers_module:Mixer", d_model=8, n_layers=1)


def _outside_layer_run(pretrained, tmp_path):
    """The pretrained run with its stored model config pointed at a module outside spt."""
    run = _copy_run(pretrained, tmp_path)
    for name in ("best.pt", "last.pt"):
        ck = read_checkpoint(run / name)
        ck["model_config"] = {"type": "LayerConfig", "layer": OUTSIDE.layer, "d_model": 8,
                              "n_layers": 1}
        atomic_save(ck, run / name)
    return run


UNTRUSTED_PATHS = {
    "load_checkpoint": lambda run, task, tmp, **kw: load_checkpoint(run, **kw),
    "finetune": lambda run, task, tmp, **kw: finetune(task, run, TC, tmp / "ft", **kw),
    "export_checkpoint": lambda run, task, tmp, **kw: hub.export_checkpoint(run, tmp / "hub", **kw),
    "spt_profiles": lambda run, task, tmp, **kw: spt_profiles(run, L=16, **kw),
}


@pytest.mark.parametrize("where", list(UNTRUSTED_PATHS))
def test_a_layer_outside_spt_named_by_a_checkpoint_needs_trust(where, task, pretrained, tmp_path):
    run = _outside_layer_run(pretrained, tmp_path)
    with pytest.raises(UntrustedLayerError, match="trust_remote_code=True") as err:
        UNTRUSTED_PATHS[where](run, task, tmp_path)
    assert str(run / "best.pt") in str(err.value) and OUTSIDE.layer in str(err.value)
    # with trust, spt reads it, and building the model imports the module (missing here)
    if where == "load_checkpoint":
        ck = load_checkpoint(run, trust_remote_code=True)
        assert ck["model_config"]["layer"] == OUTSIDE.layer
    else:
        with pytest.raises(ImportError, match="tests_outside_layers_module"):
            UNTRUSTED_PATHS[where](run, task, tmp_path, trust_remote_code=True)


def test_a_hub_config_naming_a_layer_outside_spt_needs_trust(pretrained, tmp_path):
    import json

    folder = hub.export_checkpoint(pretrained, tmp_path / "hub")
    config = json.loads((folder / "config.json").read_text())
    config["model_config"] = {"type": "LayerConfig", "layer": OUTSIDE.layer, "d_model": 8,
                              "n_layers": 1}
    (folder / "config.json").write_text(json.dumps(config))
    for load in (hub.load_model, SequenceModel.from_pretrained, load_checkpoint):
        with pytest.raises(UntrustedLayerError, match="trust_remote_code=True") as err:
            load(folder)
        assert str(folder) in str(err.value)
        with pytest.raises(ImportError, match="tests_outside_layers_module"):
            load(folder, trust_remote_code=True)


def test_layers_inside_spt_load_without_trust(task, tmp_path):
    cfg = LayerConfig("spt.models.layer_template:DecayMix", kwargs={"decay": 0.9}, d_model=8,
                      n_layers=1)
    pt = pretrain(task, cfg, MASKED, TC, tmp_path / "pt")
    folder = hub.export_checkpoint(pt.best_checkpoint, tmp_path / "hub")
    assert isinstance(hub.load_model(folder), SequenceModel)
    finetune(task, folder, TC, tmp_path / "ft")
