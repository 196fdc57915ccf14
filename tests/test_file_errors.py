"""Damaged files spt wrote (checkpoints, result files, hub weights) are named in the error with what
to do; files spt writes through a temp file get the umask's mode, not mkstemp's 0600."""
import os
import stat

import numpy as np
import pytest
import torch
import xarray as xr

from spt import hub
from spt.atomic import DamagedFileError, atomic_dir, atomic_write, current_umask
from spt.config import TransformerConfig
from spt.data.task import TaskSpec
from spt.models.model import SequenceModel, classifier_model
from spt.results import read_result, write_result
from spt.studies import load_study
from spt.train.checkpoint import FORMAT, atomic_save, load_checkpoint, read_checkpoint

SPEC = TaskSpec("toy", seq_len=16, num_classes=3, vocab_size=12)
TINY = TransformerConfig(d_model=8, n_layers=1, n_heads=2, d_ff=16, max_len=16, dropout=0.0)


def _truncate(path, keep: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


@pytest.fixture
def umask():
    """Set the process umask for one test (restored after)."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# ------------------------------------------------------------------------- damaged files are named

def _checkpoint(path):
    atomic_save({"format": FORMAT, "stage": "pretrain", "epoch": 1,
                 "model": {f"w{i}": torch.randn(64, 64) for i in range(4)}}, path)


@pytest.mark.parametrize("name, fix", [("best.pt", "load that last.pt instead"),
                                       ("last.pt", "re-run with resume to start that run over")])
@pytest.mark.parametrize("keep", [0.01, 0.5, 0.0])  # torch: Errno 22 / no central directory / EOF
def test_truncated_checkpoint_names_the_file_and_the_fix(tmp_path, name, fix, keep):
    path = tmp_path / "run" / name
    _checkpoint(path)
    assert read_checkpoint(path)["epoch"] == 1
    _truncate(path, keep)
    with pytest.raises(DamagedFileError, match="truncated or corrupt") as err:
        read_checkpoint(path)
    assert str(path) in str(err.value) and fix in str(err.value)
    assert len(str(err.value).splitlines()) == 1 and err.value.path == path
    if name == "best.pt":  # finetune()'s reader: a file or its run folder
        for arg in (path, path.parent):
            with pytest.raises(DamagedFileError, match=f"checkpoint {path} .*truncated"):
                load_checkpoint(arg)


def test_damaged_checkpoints_of_a_run_and_the_fixes_they_name(tmp_path):
    from spt.config import TrainConfig
    from spt.data import digits_task
    from spt.train import train_from_scratch

    task = digits_task(size=8, n_train=32, val_size=16, test_size=16)
    model = TransformerConfig(d_model=8, n_layers=1, n_heads=2, d_ff=16, dropout=0.0, max_len=64)
    cfg = TrainConfig(lr=3e-3, batch_size=16, epochs=1, progress=False, seed=0)
    run = tmp_path / "run"
    train_from_scratch(task, model, cfg, run)
    _truncate(run / "last.pt", 0.01)
    with pytest.raises(DamagedFileError, match=f"checkpoint {run / 'last.pt'} .*truncated"):
        train_from_scratch(task, model, cfg, run, resume=True)
    (run / "last.pt").unlink()  # the fix the message names: delete it, re-run with resume
    train_from_scratch(task, model, cfg, run, resume=True)
    _truncate(run / "best.pt", 0.5)
    with pytest.raises(DamagedFileError, match=f"checkpoint {run / 'best.pt'} .*truncated"):
        train_from_scratch(task, model, cfg, run, resume=True)  # a finished run reloads best.pt
    assert load_checkpoint(run / "last.pt")["stage"] == "scratch"  # the other fix it names
    (run / "best.pt").unlink()
    (run / "last.pt").unlink()
    assert train_from_scratch(task, model, cfg, run).best_checkpoint.is_file()


def test_missing_checkpoint_is_not_called_damaged(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint file at"):
        read_checkpoint(tmp_path / "last.pt")


def _result(path):
    ds = xr.Dataset({"test_accuracy": (("seed", "epoch"), np.random.rand(2, 50))},
                    coords={"seed": [0, 1]})
    return write_result(ds, path, config={"coords": {"seed": [0, 1]}})


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_truncated_result_file_names_the_file_and_the_fix(tmp_path, keep):
    good, bad = _result(tmp_path / "study" / "a.nc"), _result(tmp_path / "study" / "b.nc")
    _truncate(bad, keep)
    assert float(read_result(good)["test_accuracy"].sum()) > 0
    for load in (lambda: read_result(bad), lambda: load_study(tmp_path, "study")):
        with pytest.raises(DamagedFileError, match=f"result file {bad} .*truncated or corrupt"
                                                   f".*Delete it: a study run recomputes"):
            load()


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_corrupt_hub_weights_name_the_file(tmp_path, keep):
    torch.manual_seed(0)
    classifier_model(TINY, SPEC).save_pretrained(tmp_path / "m")
    weights = tmp_path / "m" / hub.WEIGHTS_NAME
    _truncate(weights, keep)
    for load in (lambda: SequenceModel.from_pretrained(tmp_path / "m"),
                 lambda: hub.load_checkpoint(tmp_path / "m"),
                 lambda: load_checkpoint(tmp_path / "m")):
        with pytest.raises(DamagedFileError, match=f"weights file {weights} .*truncated or "
                                                   f"corrupt.*save_pretrained"):
            load()


# ------------------------------------------------------------------------- modes and atomicity

@pytest.mark.parametrize("mask, want", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_follow_the_umask(tmp_path, umask, mask, want):
    umask(mask)
    assert current_umask() == mask
    atomic_save({"format": FORMAT}, tmp_path / "best.pt")
    _result(tmp_path / "r.nc")
    hub.save_weights(classifier_model(TINY, SPEC), tmp_path / "h")
    for p in ("best.pt", "r.nc", f"h/{hub.WEIGHTS_NAME}"):
        assert _mode(tmp_path / p) == want, p
    assert current_umask() == mask  # reading the umask left it as it was


def test_save_pretrained_follows_the_umask(tmp_path, umask):
    umask(0o022)
    classifier_model(TINY, SPEC).save_pretrained(tmp_path / "m")
    for p in ("config.json", "README.md", hub.WEIGHTS_NAME):
        assert _mode(tmp_path / "m" / p) == 0o644, p


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "f.txt"
    atomic_write(path, lambda tmp: tmp.write_text("old"))

    def broken(tmp):
        tmp.write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, broken)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_atomic_dir_replaces_a_folder_whole_or_not_at_all(tmp_path):
    path = tmp_path / "d"
    atomic_dir(path, lambda tmp: (tmp / "a").write_text("old"))

    def broken(tmp):
        (tmp / "a").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_dir(path, broken)
    assert (path / "a").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["d"]
    atomic_dir(path, lambda tmp: (tmp / "b").write_text("new"))
    assert [p.name for p in path.iterdir()] == ["b"]
    assert [p.name for p in tmp_path.iterdir()] == ["d"]
    atomic_dir(path, lambda tmp: (tmp / "c").write_text("late"), replace=False)  # first one stays
    assert [p.name for p in path.iterdir()] == ["b"]
    assert [p.name for p in tmp_path.iterdir()] == ["d"]


@pytest.mark.parametrize("mask", [0o022, 0o002])
def test_written_folders_follow_the_umask(tmp_path, umask, mask):
    """Folders filled beside their place and renamed in get mkdir's mode, not mkdtemp's 0700."""
    from spt.data.cache import CACHE_DIRNAME, cached_arrays
    from spt.data.fixtures import write_fixtures
    from spt.data.pathfinder_generator import write_pathfinder

    umask(mask)
    src = tmp_path / "src.txt"
    src.write_text("x")
    cached_arrays(tmp_path, "c", 1, [src], lambda w: w.put("x", np.ones(2)))
    write_pathfinder(tmp_path / "pf", 2, 32, batch=2)
    write_fixtures(tmp_path / "fx", ["bidmc"])
    for folder in (tmp_path / CACHE_DIRNAME / "c", tmp_path / "pf", tmp_path / "fx" / "bidmc"):
        assert _mode(folder) == 0o777 & ~mask, folder


def test_tiny_lm_folder_follows_the_umask(tmp_path, umask):
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from spt.models.tiny_lm import TinyLMConfig, train_tiny_text_lm

    umask(0o022)
    cfg = TinyLMConfig(d_model=8, n_layers=1, n_heads=2, d_ff=16, steps=2, seq_len=8, batch_size=2)
    out = train_tiny_text_lm(tmp_path / "lm", cfg, corpus=[b"a tiny corpus of plain text. " * 4])
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    assert _mode(out) == 0o755 and [p.name for p in tmp_path.iterdir()] == ["lm"]


# ------------------------------------------------------------------------- model configs spt lacks

def _stored_configs():
    """(what the error names, a stored model config this spt cannot build): an unknown type, and
    a field its class lacks (MambaConfig's `mixer` is a class attribute, never a stored field)."""
    from spt.mixer_config import MambaConfig
    from spt.model_config import model_config_to_dict
    return [("the unknown type 'RWKVConfig'", {"type": "RWKVConfig", "d_model": 8}),
            ("(MambaConfig) has the field(s) ['mixer'], which MambaConfig does not have",
             {**model_config_to_dict(MambaConfig(d_model=8)), "mixer": "mamba"})]


@pytest.mark.parametrize("says, stored", _stored_configs(), ids=["type", "field"])
def test_a_checkpoint_whose_model_config_spt_lacks_names_the_file_and_the_fix(tmp_path, says,
                                                                              stored):
    from spt.model_config import ModelConfigError
    from spt.provenance import current_provenance, describe
    path = tmp_path / "run" / "best.pt"
    atomic_save({"format": FORMAT, "stage": "pretrain", "model_config": stored,
                 "spec": SPEC.__dict__, "model": {}}, path)
    before = path.read_bytes()
    with pytest.raises(ModelConfigError) as err:
        load_checkpoint(path.parent)  # what finetune(), export_checkpoint() and the probes read
    said = str(err.value)
    assert said.startswith(f"{path}: its model config ") and says in said, said
    assert f"the file was written by {describe(current_provenance())} or edited by hand" in said
    assert "Load it with the spt version that wrote it" in said and "\n" not in said
    assert path.read_bytes() == before


@pytest.mark.parametrize("says, stored", _stored_configs(), ids=["type", "field"])
def test_a_hub_folder_whose_model_config_spt_lacks_names_its_config_json(tmp_path, says, stored):
    import json

    from spt.model_config import ModelConfigError
    folder = tmp_path / "m"
    classifier_model(TINY, SPEC).save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_config": stored}))
    for load in (SequenceModel.from_pretrained, hub.load_checkpoint):
        with pytest.raises(ModelConfigError) as err:
            load(folder)
        said = str(err.value)
        assert said.startswith(f"{folder}/config.json: its model config ") and says in said, said
        assert "Load it with the spt version that wrote it" in said and "\n" not in said
    old = json.loads((folder / "config.json").read_text())
    old.pop("provenance")  # a folder written before spt recorded provenance
    (folder / "config.json").write_text(json.dumps(old))
    with pytest.raises(ModelConfigError, match="written by another spt version or edited by hand"):
        hub.load_model(folder)
