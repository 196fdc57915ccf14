"""Faults and hostile input on smoke-size runs: each scenario ends in one clear line that names what
happened and the file, and nothing already finished is lost.

Sections: files that could run code (crafted pickles on every load path, layer classes named by a
file), damaged checkpoints.
"""
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import torch
import xarray as xr

from spt import hub, locks
from spt.analysis.receptive_field import spt_profiles
from spt.atomic import DamagedFileError
from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
from spt.data.digits import digits_task
from spt.layer_config import LayerConfig, UntrustedLayerError
from spt.models.model import SequenceModel
from spt.studies.machinery import cells
from spt.studies.machinery.cells import Cell, run_cells
from spt.studies.machinery.job import FunctionJob
from spt.train import RunInUse, finetune, pretrain
from spt.train.checkpoint import FORMAT, UnsafeCheckpointError, atomic_save, load_checkpoint, read_checkpoint

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


# ------------------------------------------------------------- worker processes and claims

CELLS = '''
import os, time
from pathlib import Path
import xarray as xr

def run(folder, i, run_dir):
    """Tell the test this process runs cell i, then wait for its go (or its 'fast' file)."""
    folder = Path(folder)
    (folder / f"started_{i}_{os.getpid()}").touch()
    end = time.monotonic() + 120
    while not (folder / "go").exists() and time.monotonic() < end:
        time.sleep(0.1)
    return xr.Dataset({"test_accuracy": ((), float(i))})
'''

RUN_CELLS = '''
import sys
from dataclasses import replace
from functools import partial
sys.path.insert(0, {here!r})
import fault_cells
from spt.studies.machinery.cells import Cell, run_cells
from spt.studies.machinery.job import FunctionJob

if __name__ == "__main__":
    cells = [Cell({{"i": i}}, None, FunctionJob(partial(fault_cells.run, {here!r}, i), {{"i": i}}))
             for i in range(2)]
    ds = run_cells("faults", cells, {out!r}, workers={workers})
    print("RESULT", sorted(ds.test_accuracy.values.ravel().tolist()))
'''


def _started(folder) -> dict:
    """{cell i: pid} of the cells the runs have started."""
    return {int(p.name.split("_")[1]): int(p.name.split("_")[2])
            for p in folder.glob("started_*")}


def _wait_for(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def _launch(tmp_path, workers: int):
    (tmp_path / "fault_cells.py").write_text(CELLS)
    script = tmp_path / f"run_{workers}.py"
    script.write_text(textwrap.dedent(RUN_CELLS.format(here=str(tmp_path), workers=workers,
                                                       out=str(tmp_path / "out"))))
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.serial
def test_a_killed_worker_ends_the_run_naming_its_cell_and_the_rerun_resumes(tmp_path):
    """Slow by necessity: two spawned worker processes, one killed with SIGKILL mid-cell, and the
    rerun to the end."""
    run = _launch(tmp_path, workers=2)
    try:
        assert _wait_for(lambda: len(_started(tmp_path)) == 2 or run.poll() is not None, 120), \
            "the two cells did not start"
        os.kill(_started(tmp_path)[1], signal.SIGKILL)  # what the out-of-memory killer does
        out, err = run.communicate(timeout=30)  # within seconds, not forever
    finally:
        run.kill()
    assert run.returncode != 0
    last = err.strip().splitlines()[-1]
    assert "WorkerKilled: study faults, cell i=1: worker killed (out of memory?) by SIGKILL" in last
    assert "rerun the same command to resume" in last
    folder = tmp_path / "out" / "faults"
    assert not list(folder.glob("*.claim")), "the run kept claims"
    assert not list(folder.glob("*.nc"))
    (tmp_path / "go").touch()
    rerun = _launch(tmp_path, workers=2)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err[-2000:]
    assert "RESULT [0.0, 1.0]" in out


@pytest.mark.serial
def test_two_runs_into_one_folder_divide_the_cells(tmp_path):
    first = _launch(tmp_path, workers=1)
    second = None
    try:
        assert _wait_for(lambda: len(_started(tmp_path)) == 1, 120), "the first run did not start"
        second = _launch(tmp_path, workers=1)
        # the second run takes the cell the first has not started, instead of waiting for it
        assert _wait_for(lambda: len(_started(tmp_path)) == 2, 120), \
            "the second run did not take the other cell"
        assert len(set(_started(tmp_path).values())) == 2
        (tmp_path / "go").touch()
        for run in (first, second):
            out, err = run.communicate(timeout=120)
            assert run.returncode == 0, err[-2000:]
            assert "RESULT [0.0, 1.0]" in out
    finally:
        for run in (first, second):
            if run is not None:
                run.kill()


def _claims_study(tmp_path):
    return [Cell({"i": i}, None, FunctionJob(partial(_value, i), {"i": i})) for i in range(2)]


def _value(i, run_dir):
    return xr.Dataset({"test_accuracy": ((), float(i))})


def _claim_of(tmp_path, i):
    return tmp_path / "out" / "faults" / f"i={i}.claim"


def test_an_empty_claim_blocks_only_for_a_minute(tmp_path):
    claim = _claim_of(tmp_path, 0)
    claim.parent.mkdir(parents=True)
    claim.write_text("")  # a process died between creating the claim and writing it
    old = time.time() - 120
    os.utime(claim, (old, old))
    ds = run_cells("faults", _claims_study(tmp_path), tmp_path / "out", log=lambda s: None)
    assert sorted(ds.test_accuracy.values.ravel()) == [0.0, 1.0]
    assert not claim.exists()


def test_a_claim_from_another_host_is_named_while_fresh_and_taken_over_when_stale(
        tmp_path, monkeypatch):

    monkeypatch.setattr(cells, "WAIT_POLL", 0.05)
    claim = _claim_of(tmp_path, 1)
    claim.parent.mkdir(parents=True)
    claim.write_text(json.dumps({"host": "node17", "pid": 4242, "since": time.time() - 3600}))
    lines, result = [], {}
    t = threading.Thread(target=lambda: result.update(ds=cells.run_cells(
        "faults", _claims_study(tmp_path), tmp_path / "out", log=lines.append)), daemon=True)
    t.start()
    assert _wait_for(lambda: any("waiting for 1 cell" in s for s in lines), 30)
    waiting = next(s for s in lines if "waiting for 1 cell" in s)
    assert "host node17, pid 4242, held for 60 min" in waiting and "refreshed" in waiting
    assert "taken over when not refreshed for 10 min" in waiting
    assert t.is_alive()  # a fresh claim is honoured
    old = time.time() - locks.STALE_AFTER - 5
    os.utime(claim, (old, old))  # node17 stopped refreshing it: its run is gone
    t.join(30)
    assert not t.is_alive() and sorted(result["ds"].test_accuracy.values.ravel()) == [0.0, 1.0]


def test_a_lock_is_written_whole_and_released_only_by_its_holder(tmp_path):
    path = tmp_path / "x.claim"
    assert locks.acquire(path)
    who = json.loads(path.read_text())
    assert set(who) == {"host", "pid", "since"}
    assert not locks.acquire(path)  # held by this live process
    path.write_text(json.dumps({**who, "pid": who["pid"] + 1}))  # taken over by another
    locks.release(path)
    assert path.exists()
    assert not list(tmp_path.glob(".*.tmp"))


# ------------------------------------------------------------- one process per run folder

@pytest.mark.serial
def test_a_second_process_training_the_same_run_folder_is_refused(task, tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out = tmp_path / "run"
        out.mkdir()
        (out / "run.lock").write_text(json.dumps({"host": socket.gethostname(),  # written by it
                                                  "pid": sleeper.pid, "since": time.time()}))
        with pytest.raises(RunInUse, match=f"pid {sleeper.pid}") as err:
            pretrain(task, TINY, MASKED, TC, out, resume=True)
        assert str(out) in str(err.value) and "rerun the same command" in str(err.value)
        assert not (out / "last.pt").exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    pretrain(task, TINY, MASKED, TC, out, resume=True)  # its holder is gone: taken over
    assert (out / "best.pt").exists() and not (out / "run.lock").exists()
    assert os.path.exists(out / "last.pt")


# ------------------------------------------------------------- moved folders, deleted results

class _Stop(Exception):
    pass


def _stop_at(n):
    def on_step(step):
        if step == n:
            raise _Stop
    return on_step


def test_a_moved_results_folder_resumes(task, pretrained, tmp_path):
    tc = TrainConfig(lr=3e-3, batch_size=8, epochs=2, progress=False, seed=0)  # 2 steps an epoch
    shutil.copytree(pretrained, tmp_path / "a" / "pt")
    with pytest.raises(_Stop):  # interrupted in epoch 2, after epoch 1's last.pt
        finetune(task, tmp_path / "a" / "pt" / "best.pt", tc, tmp_path / "a" / "ft",
                 on_step=_stop_at(3))
    shutil.move(tmp_path / "a", tmp_path / "b")
    moved = finetune(task, tmp_path / "b" / "pt" / "best.pt", tc, tmp_path / "b" / "ft",
                     resume=True)
    whole = finetune(task, pretrained / "best.pt", tc, tmp_path / "whole")
    assert moved.test_metrics == whole.test_metrics and moved.steps == whole.steps == 4
    # other weights under the same path are another run
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "b", other)
    ck = read_checkpoint(other / "pt" / "best.pt")
    ck["model"] = {k: v + 1 for k, v in ck["model"].items()}
    atomic_save(ck, other / "pt" / "best.pt")
    with pytest.raises(ValueError, match="pretrained_weights"):
        finetune(task, other / "pt" / "best.pt", replace(tc, epochs=3), other / "ft",
                 resume=True)


def test_following_the_advice_for_a_changed_cell_recomputes_it(tmp_path):
    from spt.studies.quickstart import STUDY, Setup
    setup = Setup(n_train=16, val_size=20, d_model=16, n_layers=1, n_heads=2, batch_size=8,
                  pretrain_epochs=1, max_epochs=1, patience=1)
    STUDY.run(setup, tmp_path, seeds=[0])
    changed = replace(setup, mask_ratio=0.25)
    for _ in range(4):  # do what each message says, as a user would
        try:
            ds = STUDY.run(changed, tmp_path, seeds=[0])
            break
        except ValueError as e:
            message = str(e)
            assert len(message.splitlines()) == 1
            result = Path(message.split(" holds a result")[0])
            assert result.suffix == ".nc" and "mask_ratio" in message
            folder = Path(message.split("cell's run folder ")[1].split(" (")[0])
            assert folder.is_dir()
            result.unlink()
            shutil.rmtree(folder)
    else:
        raise AssertionError("the advice did not lead to a rerun that works")
    assert float(ds.test_accuracy.sel(init="spt").item()) >= 0


def test_export_checkpoint_never_overwrites_a_hub_folder_unasked(pretrained, tmp_path):
    folder = hub.export_checkpoint(pretrained, tmp_path / "hub")
    weights = (folder / "model.safetensors").read_bytes()
    (folder / "README.md").write_text("my notes")
    with pytest.raises(FileExistsError, match="overwrite=True") as err:
        hub.export_checkpoint(pretrained, folder)
    assert str(folder) in str(err.value)
    assert (folder / "README.md").read_text() == "my notes"
    assert (folder / "model.safetensors").read_bytes() == weights
    hub.export_checkpoint(pretrained, folder, overwrite=True)
    assert isinstance(hub.load_model(folder), SequenceModel)
    (tmp_path / "empty").mkdir()  # an empty folder is a fine place to export to
    hub.export_checkpoint(pretrained, tmp_path / "empty")


# ------------------------------------------------------------- parameters, both routes

@pytest.mark.parametrize("params, says", [
    (["-p", "workers", "-1"], "parameter workers takes a number >= 0"),
    (["-p", "seeds", "[0, -2]"], "parameter seeds takes a list of ints from 0 to 4294967295"),
    (["-p", "seeds", "[1, 1]"], "distinct seeds"),
    (["-p", "seeds", "[12345678901234567890]"], "seeds takes a list of ints from 0 to 4294967295"),
    (["-p", "tasks", "[listops, imagee]"], "no task(s) ['imagee']; its tasks are"),
    (["-p", "preset", "papr"], "unknown preset 'papr'; choose from smoke, paper"),
    (["-p", "preset", "paper"], "pass data_root"),
    (["-p", "worker", "2"], "has no parameter 'worker' (did you mean 'workers'?)"),
    (["-p", "device", "gpu"], "parameter device takes auto, cpu, cuda, cuda:N or mps"),
])
def test_spt_study_run_checks_every_parameter_before_a_kernel_starts(params, says, tmp_path,
                                                                    capsys):
    from spt.cli import main
    rc = main(["study", "run", "02_transformers_vs_s4", "--out", str(tmp_path)] + params)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and says in err, err
    assert len(err.splitlines()) == 1
    assert not list(tmp_path.glob("*.ipynb")), "a kernel ran"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has CUDA")
def test_device_cuda_without_cuda_is_refused_before_a_kernel_starts(tmp_path, capsys):
    from spt.cli import main
    rc = main(["study", "run", "02_transformers_vs_s4", "--out", str(tmp_path), "-p", "device",
               "cuda"])
    err = capsys.readouterr().err
    assert rc == 2 and "no CUDA device" in err and "-p device cpu" in err


@pytest.mark.parametrize("params, says", [
    ({"n_train": "abc"}, "parameter n_train takes type int (e.g. -p n_train '3'), got 'abc'"),
    ({"n_trian": 50}, "has no parameter 'n_trian' (did you mean 'n_train'?)"),
    ({"workers": -2}, "parameter workers takes a number >= 0"),
])
def test_plain_papermill_stops_at_the_first_cell_naming_the_parameter(params, says, tmp_path):
    import papermill as pm

    from spt.studies.commands.runner import study_notebook
    out = tmp_path / "out.ipynb"
    with pytest.raises(pm.PapermillExecutionError) as err:
        pm.execute_notebook(str(study_notebook("00_quickstart")), str(out),
                            parameters={**params, "out_dir": str(tmp_path / "results")},
                            kernel_name="python3", progress_bar=False)
    assert "ParameterError" in str(err.value) and says in str(err.value)
    assert err.value.exec_count == 3  # parameters, papermill's injected cell, then the check
    assert not (tmp_path / "results").exists()


# ------------------------------------------------------------- the dry run needs only its data

def test_study_check_only_needs_the_data_of_the_cells_it_checks(tmp_path, capsys):
    from spt.cli import main
    from spt.data.fixtures import write_fixtures
    write_fixtures(tmp_path / "data", tasks=["pathfinder"])
    rc = main(["study", "check", "02_transformers_vs_s4", "--preset", "paper", "-p", "data_root",
               str(tmp_path / "data"), "--device", "cpu",
               "--only", "task=pathfinder model=transformer init=scratch"])
    out = capsys.readouterr()
    assert rc == 0, out.err[-2000:]
    assert "1 cells: 1 passed, 0 failed" in out.out
    rc = main(["study", "check", "02_transformers_vs_s4", "--preset", "paper", "-p", "data_root",
               str(tmp_path / "data"), "--device", "cpu", "--only", "task=pathfindr"])
    assert rc == 2 and "matches none of its cells" in capsys.readouterr().err


# ------------------------------------------------------------- full disk, read-only folders

def _in_own_mount_namespace(script: str, *args) -> subprocess.CompletedProcess:
    """Run `script` as root of a new user + mount namespace, where it may mount a tmpfs of any
    size (a real full disk, a real read-only file system) without touching the machine's mounts;
    skips the test where the kernel does not allow unprivileged namespaces."""
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"no user/mount namespaces here (unshare: {probe.stderr.strip()[:80]})")
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", sys.executable,
                           "-c", textwrap.dedent(script), *map(str, args)],
                          capture_output=True, text=True, timeout=600)


DISK_FULL = '''
import subprocess, sys
from pathlib import Path
mnt = Path(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mnt)], check=True)
from spt.studies.quickstart import STUDY, SMOKE
try:
    STUDY.run(SMOKE, mnt, seeds=[0, 1])
    print("NO ERROR")
except Exception as e:
    print("ERROR", type(e).__name__, "|", str(e))
stamps = {p: p.stat().st_mtime_ns for p in mnt.rglob("*.nc")}
print("FINISHED BEFORE", len(stamps))
subprocess.run(["mount", "-o", "remount,size=16m", str(mnt)], check=True)  # space freed
ds = STUDY.run(SMOKE, mnt, seeds=[0, 1])
print("RESUMED", ds.test_accuracy.size, all(p.stat().st_mtime_ns == t for p, t in stamps.items()))
print("LEFT", [p.name for p in mnt.rglob("*") if p.suffix in (".tmp", ".claim", ".lock")])
'''


@pytest.mark.serial
def test_a_full_disk_is_one_line_and_the_rerun_resumes(tmp_path):
    (tmp_path / "mnt").mkdir()
    done = _in_own_mount_namespace(DISK_FULL, tmp_path / "mnt")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines()
                 if line.split(" ", 1)[0] in ("ERROR", "FINISHED", "RESUMED", "LEFT"))
    error = lines["ERROR"]
    assert error.startswith("DiskFullError | no space left on the device holding "), error
    assert "nothing was half-written" in error and "rerun the same command to resume" in error
    assert int(lines["FINISHED"].split()[-1]) >= 1  # the run got somewhere before the disk filled
    assert lines["RESUMED"] == "4 True"  # every cell, the finished ones untouched
    assert lines["LEFT"] == "[]"


def test_a_full_disk_under_spt_study_run_is_one_line_and_no_half_notebook(tmp_path, capsys,
                                                                          monkeypatch):
    """papermill's writes of the executed notebook filling the disk (ENOSPC raised through its
    write path, half a notebook on disk): one line naming the folder and the free space, and no
    notebook, whole or half, under the executed notebook's name."""
    import errno

    import papermill

    from spt.cli import main

    def fills_the_disk(nb, out, **kw):
        Path(out).write_text('{"cells": [{"cell_type": "code", "sou')  # cut off mid-write
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(papermill, "execute_notebook", fills_the_disk)
    rc = main(["study", "run", "00_quickstart", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1, err
    assert err.startswith(f"spt study: error: no space left on the device holding "
                          f"{tmp_path / 'out'} (") and "MiB free" in err
    assert "rerun the same command to resume" in err
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if "ipynb" in p.name) == []


READ_ONLY = '''
import subprocess, sys
from pathlib import Path
mnt = Path(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], check=True)
from spt.studies.quickstart import STUDY, SMOKE
STUDY.run(SMOKE, mnt / "done", seeds=[0])
subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
ds = STUDY.run(SMOKE, mnt / "done", seeds=[0])  # finished results read from a read-only folder
print("READ", ds.test_accuracy.size)
try:
    STUDY.run(SMOKE, mnt / "new", seeds=[0])
except Exception as e:
    print("ERROR", type(e).__name__, "|", str(e))
cli = subprocess.run([sys.executable, "-m", "spt.cli", "study", "run", "03_explicit_priors",
                      "--out", str(mnt / "cli")], capture_output=True, text=True)
print("CLI", cli.returncode, "|", cli.stderr.strip().replace("\\n", " // "))
grid = Path(sys.argv[2])
batch = subprocess.run([sys.executable, "-m", "spt.cli", "study", "batch", "03_explicit_priors",
                        "--grid", str(grid), "--out", str(mnt / "batch")], capture_output=True,
                       text=True)
print("BATCH", batch.returncode, "|", batch.stderr.strip().replace("\\n", " // "))
'''


@pytest.mark.serial
def test_a_read_only_folder_is_one_line_before_any_work(tmp_path):
    """Slow by necessity: a real read-only file system in its own mount namespace, one smoke study
    run into it before and three command-line runs against it."""
    (tmp_path / "mnt").mkdir()
    (tmp_path / "grid.yaml").write_text("fixed: {tasks: [listops]}\ngrid: {seeds: [[0]]}\n")
    done = _in_own_mount_namespace(READ_ONLY, tmp_path / "mnt", tmp_path / "grid.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines()
                 if line.split(" ", 1)[0] in ("READ", "ERROR", "CLI", "BATCH"))
    assert lines["READ"] == "2"
    assert lines["ERROR"].startswith("NotWritableError | cannot write "), lines["ERROR"]
    assert "not writable (Read-only file system)" in lines["ERROR"]
    for cli in ("CLI", "BATCH"):  # spt study run and spt study batch alike
        rc, err = lines[cli].split(" | ")
        assert rc == "1" and " // " not in err and "Read-only file system" in err, err
        assert err.startswith("spt study: error: cannot write ") and "choose another output" in err


def test_a_file_as_out_is_one_line_saying_out_must_be_a_folder(tmp_path, capsys):
    from spt.cli import main
    grid = tmp_path / "grid.yaml"
    grid.write_text("fixed: {tasks: [listops]}\ngrid: {seeds: [[0]]}\n")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    batch = ["study", "batch", "03_explicit_priors", "--grid", str(grid), "--out"]
    for argv in (["study", "run", "03_explicit_priors", "--out", str(notes)],
                 batch + [str(notes)], batch + [str(notes / "under")],
                 batch + [str(notes), "--slurm", "time=10", "--local"]):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and err == (f"spt study: error: --out must be a folder, and {notes} is a "
                                   f"file: name a folder (it is created if missing)\n"), (argv, err)
    assert notes.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == \
        ["grid.yaml", "notes.txt"]


# ------------------------------------------------------------- Ctrl-C and a dead kernel

# study 02's four smoke ListOps cells (a Transformer and an S4, from scratch and with SPT): enough
# for a cell to finish before each fault and for some to be left for the rerun
STUDY_RUN = [sys.executable, "-m", "spt.cli", "study", "run", "02_transformers_vs_s4", "-p", "tasks",
             "[listops]"]
# as outside pytest: ipykernel captures its processes' output only without PYTEST_CURRENT_TEST
TERMINAL_ENV = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def _run_until_a_cell_is_done(out, act):
    """Start `spt study run` (its own session, as a terminal would), call act(process) once the
    first cell is done, and return (exit code, the lines a terminal shows: stdout and stderr)."""
    # a terminal's Ctrl-C reaches a process whose SIGINT is at its default; a test run started
    # in the background of a non-interactive shell inherits SIGINT ignored, so reset it
    run = subprocess.Popen(STUDY_RUN + ["--out", str(out)], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True,
                           env=TERMINAL_ENV,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    try:
        for line in run.stdout:
            lines.append(line.rstrip("\n"))
            if "done 1/" in line:
                act(run)
                break
        lines += run.stdout.read().splitlines()
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    return run.returncode, lines


@pytest.mark.serial
@pytest.mark.skipif(sys.platform != "linux", reason="reads process parents in /proc")
def test_ctrl_c_and_a_dead_kernel_end_in_one_line_and_the_rerun_resumes(tmp_path, child_pid):
    """Slow by necessity: a real `spt study run` (papermill, a kernel, worker processes) interrupted
    twice, by Ctrl-C and by killing the kernel, and rerun to its end; signals reach only real
    processes."""
    out = tmp_path / "out"
    rc, lines = _run_until_a_cell_is_done(out, lambda run: os.killpg(run.pid, signal.SIGINT))
    assert rc == 130 and not any("Traceback" in s for s in lines), "\n".join(lines[-30:])
    # the kernel shares the process group, so it gets the Ctrl-C too and asyncio may print a
    # pending-task notice as it exits; spt itself says one line
    # one line: the study's own (how many cells are done, where) when the notebook got to say
    # it before spt stopped, else spt's; never the kernel's "[IPKernelApp] ERROR" line
    said = [s for s in lines if "interrupt" in s.lower()]
    assert len(said) == 1 and said[0] in (
        "spt: interrupted; what was finished is kept (results, checkpoints); rerun the same "
        "command to resume",
        f"02_transformers_vs_s4: interrupted with 1 of 4 cells done (kept in {out}/"
        f"02_transformers_vs_s4); rerun the same command to resume the others from their last "
        f"checkpoints"), "\n".join(lines[-30:])
    rc, lines = _run_until_a_cell_is_done(out, lambda run: os.kill(child_pid(run.pid, b"ipykernel"),
                                                                   signal.SIGKILL))
    # no traceback from spt or papermill; the killed kernel's own children (a worker it was
    # spawning, its multiprocessing resource tracker) may still print theirs
    assert rc == 1 and not any(s.lstrip().startswith("File") and "multiprocessing" not in s
                               for s in lines), "\n".join(lines[-30:])
    said = [s for s in lines if s.startswith("spt study: the notebook's kernel died (killed, or "
                                             "out of memory?)")]
    assert len(said) == 1 and said[0].endswith("rerun the same command to resume"), lines[-5:]
    again = subprocess.run(STUDY_RUN + ["--out", str(out)], capture_output=True, text=True,
                           timeout=600, env=TERMINAL_ENV)
    assert again.returncode == 0, again.stderr[-3000:]
    done_before = int(re.search(r"4 cells, (\d) already done", again.stderr).group(1))
    assert done_before >= 2, again.stderr[-3000:]  # one cell before each fault, at least
    resumes = [s for s in (again.stdout + again.stderr).splitlines()
               if s.startswith("[spt] resuming")]
    assert len(resumes) == len(set(resumes)), resumes  # each said once, not twice


def test_the_smoke_data_says_once_why_it_is_written(tmp_path, capsys):
    from spt.studies.machinery.smoke import smoke_data_root

    smoke_data_root(tmp_path / "smoke")
    smoke_data_root(tmp_path / "smoke")
    said = [s for s in capsys.readouterr().err.splitlines() if s.startswith("spt: writing")]
    assert len(said) == 1 and "shared by every smoke study, whichever tasks it uses" in said[0]


def test_smoke_data_that_cannot_be_written_names_spt_smoke_data(tmp_path):
    """A read-only home (here: the cache folder under a file, which no write gets past either)."""
    from spt.atomic import NotWritableError
    from spt.studies.machinery.smoke import smoke_data_root

    (tmp_path / "home").write_text("not a folder")
    with pytest.raises(NotWritableError) as e:
        smoke_data_root(tmp_path / "home" / "smoke")
    said = str(e.value)
    assert "cannot write the generated smoke data into" in said and "\n" not in said
    assert "Set SPT_SMOKE_DATA to a writable folder" in said


# ------------------------------------------------------------- non-finite values

def _every_config():
    """One valid instance of every config class a run or a checkpoint holds."""
    from spt.free_conv_config import FreeConvConfig
    from spt.mixer_config import MIXER_CONFIGS
    from spt.sgconv_config import SGConvConfig
    from spt.ssm_config import SSMConfig
    return [TransformerConfig(), ObjectiveConfig(), TrainConfig(), SSMConfig(), SGConvConfig(),
            FreeConvConfig(), LayerConfig("spt.models.layer_template:DecayMix"),
            *(cls() for cls in MIXER_CONFIGS)]


def test_every_numeric_config_field_refuses_nan_and_infinity():
    import dataclasses
    checked = 0
    for cfg in _every_config():
        for f in dataclasses.fields(cfg):
            kind = str(f.type)
            if not ("int" in kind or "float" in kind) or "bool" in kind:
                continue
            for bad in (float("nan"), float("inf"), -float("inf")):
                with pytest.raises(ValueError) as err:
                    replace(cfg, **{f.name: bad})
                assert str(err.value) == (f"{type(cfg).__name__}.{f.name}={bad!r} is not a finite "
                                          f"number: give a finite value"), str(err.value)
            checked += 1
    assert checked > 80  # every class's numbers, not a few
    with pytest.raises(ValueError, match=r"TrainConfig.betas=\(0.9, nan\) holds nan, not a finite"):
        TrainConfig(betas=(0.9, float("nan")))
    for cfg in _every_config():  # the valid ones still build, and store as they did
        assert replace(cfg) == cfg


def test_every_integer_config_field_refuses_a_fraction_naming_the_field():
    """batch_size=16.5, epochs=1.5, d_ff=32.5, seed=1e30: refused at construction, not rounded
    later or refused deep inside torch; a seed too large for torch's generators likewise."""
    import dataclasses

    from spt.config_base import _int_fields
    checked = 0
    for cfg in _every_config():
        for name in _int_fields(type(cfg)):
            for bad in (getattr(cfg, name) or 1) + 0.5, True:
                with pytest.raises(TypeError, match=rf"^{type(cfg).__name__}\.{name}=.* must be "
                                                    rf"a whole number \(an int\)"):
                    replace(cfg, **{name: bad})
            checked += 1
    assert checked > 30
    assert {"batch_size", "epochs", "seed"} <= _int_fields(TrainConfig)
    assert "d_ff" in _int_fields(TransformerConfig)
    with pytest.raises(TypeError, match=r"TrainConfig.seed=1e\+30 must be a whole number"):
        TrainConfig(seed=1e30)
    with pytest.raises(ValueError, match=r"TrainConfig.seed=10{20} is larger than spt's largest"):
        TrainConfig(seed=10 ** 20)
    assert dataclasses.replace(TrainConfig(), batch_size=16).batch_size == 16


def test_too_many_workers_are_capped_at_the_cores_with_a_note(monkeypatch):
    from spt.studies.machinery import workers
    monkeypatch.setattr(workers.os, "cpu_count", lambda: 2)
    said = []
    assert workers.auto_workers(1000, said.append) == 2
    assert said == ["workers=1000 is more than this machine's 2 CPU cores: running 2 at a time "
                    "(each worker is a process training one cell)"]
    assert workers.auto_workers(2, said.append) == 2 and len(said) == 1


def _with_nan(task, split: str, index: int):
    """A copy of `task` whose `split` example `index` holds a NaN input."""
    from spt.data.digits import TensorSequenceDataset
    from spt.data.task import Task
    data = getattr(task, split)
    inputs = data.inputs.clone()
    inputs[index, 5, 0] = float("nan")
    return Task(**{**task.__dict__, split: TensorSequenceDataset(inputs, data.labels)})


@pytest.mark.parametrize("split, index", [("test", 5), ("val", 0), ("train", 11)])
def test_a_non_finite_input_is_named_before_it_reaches_a_loss(task, split, index, tmp_path):
    from spt.train import NonFiniteInputError, train_from_scratch
    out = tmp_path / "run"
    with pytest.raises(NonFiniteInputError) as err:
        train_from_scratch(_with_nan(task, split, index), TINY, TC, out)
    said = str(err.value)
    assert said.startswith(f"example {index} of the {split} split (its dataset[{index}]) holds "
                           f"NaN or infinity in its inputs: fix or drop that example"), said
    assert "\n" not in said and "lr" not in said  # the data, not the learning rate
    # what the run wrote before it met the example is kept: with the data fixed, the finished
    # training resumes to its test without a step more
    kept = {"test": {"best.pt", "last.pt"}, "val": set(), "train": set()}[split]
    assert {p.name for p in out.glob("*.pt")} == kept
    if kept:
        before = (out / "best.pt").read_bytes()
        again = train_from_scratch(task, TINY, TC, out, resume=True)
        assert again.steps == 1 and (out / "best.pt").read_bytes() == before
        assert all(math.isfinite(v) for v in again.test_metrics.values())


def test_the_batch_check_names_a_label_and_passes_large_finite_values():
    from spt.train.passes import NonFiniteInputError, check_finite_inputs
    batch = {"inputs": torch.full((4, 8, 1), 3e38), "label": torch.zeros(4),
             "valid": torch.ones(4, 8, dtype=torch.bool)}
    check_finite_inputs(batch, [3, 4, 5, 6], "train")  # its sum overflows; every value is finite
    batch["label"][2] = -float("inf")
    with pytest.raises(NonFiniteInputError, match=r"^example 5 of the val split \(its dataset\[5\]\) "
                                                  r"holds NaN or infinity in its label: "):
        check_finite_inputs(batch, [3, 4, 5, 6], "val")
