"""Provenance: every result file and checkpoint says which code made it (spt version and commit,
torch, device, host, date); it is kept per cell when results are combined, and it never enters a
result's identity: a cell made by another spt version is reused, with a note."""
import json
import subprocess
from datetime import datetime
from functools import partial

import numpy as np
import pytest
import torch
import xarray as xr

import spt
from spt.provenance import current_provenance, describe, git_commit, same_code
from spt.results import other_code_note, provenance, read_result, run_config, write_result
from spt.studies.machinery.cells import Cell, cell_key, load_study, run_cells
from spt.studies.machinery.job import FunctionJob
from spt.train.checkpoint import FORMAT, atomic_save, read_checkpoint

OLD = {"spt": "0.0.1", "commit": "d" * 40, "torch": "2.0.0", "python": "3.10.0", "platform": "x",
       "host": "old-node", "device": "cuda: Old GPU", "threads": 8, "date": "2025-01-01T00:00:00+00:00"}


def test_a_result_file_records_the_code_that_wrote_it(tmp_path):
    f = write_result(xr.Dataset({"acc": ((), 0.5)}), tmp_path / "r.nc", config={"lr": 0.1})
    ds = read_result(f)
    p = json.loads(ds.attrs["provenance"])
    assert p["spt"] == spt.__version__ and p["torch"] == torch.__version__
    assert p["device"] == "cpu" and p["host"] and p["threads"] == torch.get_num_threads()
    assert datetime.fromisoformat(p["date"]).tzinfo is not None
    assert run_config(ds) == {"lr": 0.1}  # the configuration is untouched by it
    assert p["commit"] is None or len(p["commit"].split("-")[0]) == 40
    row = provenance(ds).iloc[0]
    assert row["spt"] == spt.__version__ and row["host"] == p["host"]


def test_git_commit_names_head_and_uncommitted_changes(tmp_path):
    def git(*a):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t",
                        *a], check=True, capture_output=True)
    assert git_commit(tmp_path) is None  # not a repository
    git("init", "-q")
    (tmp_path / "f").write_text("a")
    git("add", "f")
    git("commit", "-qm", "one")
    head = git_commit(tmp_path)
    assert len(head) == 40 and int(head, 16) >= 0
    (tmp_path / "f").write_text("b")
    assert git_commit(tmp_path) == head + "-dirty"


def test_same_code_compares_version_and_known_commits():
    here = current_provenance()
    assert same_code(here, dict(here, date="another day", host="another host", device="cuda: X"))
    assert not same_code(here, OLD)
    assert same_code({"spt": "1.0", "commit": None}, {"spt": "1.0", "commit": "a" * 40})
    assert not same_code({"spt": "1.0", "commit": "a" * 40}, {"spt": "1.0", "commit": "b" * 40})
    assert describe(OLD) == "spt 0.0.1 (commit dddddddddddd)"
    assert "older" in describe({})


def never_run(run_dir):
    raise AssertionError("a finished cell was recomputed")


def computed(value, run_dir):
    return xr.Dataset({"test_accuracy": ((), value)})


def _write_cell(out, coords, config, prov):
    """A finished cell's file as an spt that recorded `prov` wrote it (None: an spt older than
    provenance)."""
    ds = xr.Dataset({"test_accuracy": ((), 0.5)}).expand_dims({k: [v] for k, v in coords.items()})
    ds.attrs["config"] = json.dumps({"cell": config, "coords": coords}, sort_keys=True)
    if prov:
        ds.attrs["provenance"] = json.dumps(prov)
    f = out / "st" / f"{cell_key(coords)}.nc"
    f.parent.mkdir(parents=True, exist_ok=True)
    ds.to_netcdf(f, engine="netcdf4")
    return f


def test_cells_made_by_another_version_are_reused_and_named(tmp_path):
    out = tmp_path / "out"
    _write_cell(out, {"seed": 0}, {"v": 0}, OLD)
    _write_cell(out, {"seed": 1}, {"v": 1}, None)  # written before spt recorded provenance
    cells = [Cell({"seed": 0}, None, FunctionJob(never_run, {"v": 0})),
             Cell({"seed": 1}, None, FunctionJob(never_run, {"v": 1}, seed=1)),
             Cell({"seed": 2}, None, FunctionJob(partial(computed, 0.75), {"v": 2}, seed=2))]
    ds = run_cells("st", cells, out, log=lambda s: None)
    np.testing.assert_allclose(ds.test_accuracy.values, [0.5, 0.5, 0.75])
    table = provenance(ds).set_index("seed")
    assert table.loc[0, "spt"] == "0.0.1" and table.loc[0, "host"] == "old-node"
    assert table.loc[1].drop("coords", errors="ignore").isna().all()
    assert table.loc[2, "spt"] == spt.__version__
    note = other_code_note(ds)
    assert note.startswith("note: 2 of 3 results were made by other spt code")
    assert "1 by spt 0.0.1 (commit dddddddddddd)" in note and "1 by an spt older" in note
    # load_study keeps the same record per cell
    assert provenance(load_study(out, "st")).set_index("seed").loc[0, "host"] == "old-node"


def test_provenance_is_not_part_of_a_cells_identity(tmp_path):
    """The same cell with another provenance is the same cell; another configuration is not."""
    out = tmp_path / "out"
    f = _write_cell(out, {"seed": 0}, {"v": 0}, OLD)
    before = f.read_bytes()
    run_cells("st", [Cell({"seed": 0}, None, FunctionJob(never_run, {"v": 0}))], out, log=lambda s: None)
    assert f.read_bytes() == before  # read, never rewritten with this version's provenance
    with pytest.raises(FileExistsError, match="differs in: v"):
        run_cells("st", [Cell({"seed": 0}, None, FunctionJob(never_run, {"v": 1}))], out, log=lambda s: None)


def test_results_all_made_here_give_no_note(tmp_path):
    cells = [Cell({"seed": s}, None, FunctionJob(partial(computed, 0.5), {"v": s}, seed=s)) for s in (0, 1)]
    ds = run_cells("st", cells, tmp_path, log=lambda s: None)
    assert other_code_note(ds) is None and len(provenance(ds)) == 2


def test_a_checkpoint_records_the_code_that_wrote_it(tmp_path):
    atomic_save({"format": FORMAT, "stage": "pretrain", "model": {"w": torch.ones(2)}},
                tmp_path / "best.pt")
    ck = read_checkpoint(tmp_path / "best.pt")  # its digest covers the provenance too
    assert ck["provenance"]["spt"] == spt.__version__
    assert ck["provenance"]["torch"] == torch.__version__ and ck["provenance"]["date"]
    atomic_save({"other": 1}, tmp_path / "x.pt")  # not an spt checkpoint: stored as given
    assert "provenance" not in read_checkpoint(tmp_path / "x.pt")


def test_study_run_prints_the_note(tmp_path, monkeypatch, capsys):
    """Study.run passes what run_cells combined through other_code_note, and prints it."""
    import importlib

    from spt.studies.data_scales import STUDY
    study_module = importlib.import_module("spt.studies.machinery.study")

    _write_cell(tmp_path, {"seed": 0}, {"v": 0}, OLD)
    cells = [Cell({"seed": 0}, None, FunctionJob(never_run, {"v": 0}))]
    reused = run_cells("st", cells, tmp_path, log=lambda s: None)
    monkeypatch.setattr(study_module, "run_cells", lambda *a, **k: reused)
    STUDY.run("smoke", tmp_path)
    assert "note: 1 of 1 results were made by other spt code (1 by spt 0.0.1" in capsys.readouterr().out
