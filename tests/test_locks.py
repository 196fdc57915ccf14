"""Lock files (spt.locks) whose pid no longer means their holder: a pid reused by an unrelated
process (a restarted container numbers its processes from 1 again), a lock naming this very
process that it never took, a live pid whose lock stopped being refreshed."""
import json
import os
import socket
import subprocess
import sys
import threading
import time
from functools import partial

import pytest
import xarray as xr

from spt import locks
from spt.studies.machinery.cells import Cell, run_cells
from spt.studies.machinery.job import FunctionJob

pytestmark = pytest.mark.serial  # processes whose pids the locks name


@pytest.fixture
def sleeper():
    """A live process of this host that holds no lock (the stand-in for a reused pid)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def _write_lock(path, pid, since, age=0.0):
    path.write_text(json.dumps({"host": socket.gethostname(), "pid": pid, "since": since}))
    t = time.time() - age
    os.utime(path, (t, t))


def test_a_lock_whose_pid_now_runs_a_younger_process_is_taken_over(tmp_path, sleeper):
    path = tmp_path / "x.claim"
    _write_lock(path, sleeper.pid, since=time.time() - 300)  # written before the sleeper started
    assert locks.acquire(path)
    assert json.loads(path.read_text())["pid"] == os.getpid()
    locks.release(path)


def test_a_live_holder_keeps_its_lock_until_it_stops_refreshing_it(tmp_path, sleeper):
    path = tmp_path / "x.claim"
    time.sleep(2.5)  # the lock is written after its holder started (beyond the 2 s of slack)
    _write_lock(path, sleeper.pid, since=time.time())
    assert not locks.acquire(path)
    assert "ends or the lock is not refreshed for 10 min" in locks.describe(path)
    _write_lock(path, sleeper.pid, since=time.time(), age=locks.STALE_AFTER + 5)
    assert locks.acquire(path)  # on this host too, ten minutes without a refresh: gone or frozen
    locks.release(path)


def test_a_lock_naming_this_process_is_taken_unless_this_process_took_it(tmp_path):
    path = tmp_path / "x.claim"
    _write_lock(path, os.getpid(), since=time.time())  # an earlier process with this pid
    assert locks.acquire(path)
    assert not locks.acquire(path)  # now it does hold it
    locks.release(path)
    assert not path.exists()


def _value(i, run_dir):
    return xr.Dataset({"test_accuracy": ((), float(i))})


def test_a_study_run_takes_over_a_claim_whose_pid_was_reused(tmp_path, sleeper):
    claim = tmp_path / "out" / "reused" / "i=0.claim"
    claim.parent.mkdir(parents=True)
    _write_lock(claim, sleeper.pid, since=time.time() - 3600)
    cells = [Cell({"i": i}, None, FunctionJob(partial(_value, i), {"i": i})) for i in range(2)]
    lines = []
    ds = run_cells("reused", cells, tmp_path / "out", log=lines.append)
    assert sorted(ds.test_accuracy.values.ravel()) == [0.0, 1.0]
    assert not claim.exists() and not any("waiting" in s for s in lines)


def test_a_run_says_which_cells_another_run_computed(tmp_path, monkeypatch):
    from spt.studies.machinery import cells as cells_module
    monkeypatch.setattr(cells_module, "WAIT_POLL", 0.05)
    study = [Cell({"i": i}, None, FunctionJob(partial(_value, i), {"i": i})) for i in range(2)]
    claim = tmp_path / "out" / "shared" / "i=1.claim"
    claim.parent.mkdir(parents=True)
    claim.write_text(json.dumps({"host": "node17", "pid": 4242, "since": time.time()}))
    lines, result = [], {}
    t = threading.Thread(target=lambda: result.update(ds=run_cells(
        "shared", study, tmp_path / "out", log=lines.append)), daemon=True)
    t.start()
    end = time.monotonic() + 30
    while not any("waiting for 1 cell" in s for s in lines) and time.monotonic() < end:
        time.sleep(0.05)
    run_cells("shared", study[1:], tmp_path / "other", log=lambda s: None)  # node17's run
    (tmp_path / "other" / "shared" / "i=1.nc").rename(claim.with_suffix(".nc"))
    t.join(30)
    assert not t.is_alive() and sorted(result["ds"].test_accuracy.values.ravel()) == [0.0, 1.0]
    assert any("done 1/2" in s for s in lines)
    assert lines[-1].strip() == (f"the other 1 of the 2 cells were computed by another run into "
                                 f"{tmp_path / 'out' / 'shared'}: all 2 cells are done")
