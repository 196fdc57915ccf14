"""Worker processes of a study run never outlive it: killing the run (or interrupting it) stops
the cells they compute, instead of leaving them holding the cores until their cells end."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="reads process states in /proc"),
              pytest.mark.serial]  # worker processes, killed and interrupted

SLOW_CELL = '''
import os, time
from pathlib import Path

def run(pids_dir, run_dir):
    Path(pids_dir, str(os.getpid())).touch()  # the test finds the workers by these files
    time.sleep(300)
'''

RUN = '''
import signal
import sys
from functools import partial
sys.path.insert(0, {here!r})
import slow_cell
from spt.studies.machinery.cells import Cell, run_cells
from spt.studies.machinery.job import FunctionJob

if __name__ == "__main__":
    # Ctrl-C raises KeyboardInterrupt, even when this test runs in a background job (which
    # starts with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    cells = [Cell({{"i": i}}, None, FunctionJob(partial(slow_cell.run, {pids!r}), {{"i": i}}))
             for i in range(2)]
    run_cells("slow", cells, {out!r}, workers=2)
'''


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a container's init may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _wait(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def _start(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "slow_cell.py").write_text(SLOW_CELL)
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(RUN.format(here=str(tmp_path), pids=str(pids),
                                                 out=str(tmp_path / "out"))))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    started = _wait(lambda: len(list(pids.iterdir())) == 2 or proc.poll() is not None, 120)
    if not started or proc.poll() is not None:
        proc.kill()
        raise AssertionError(f"the workers did not start: {proc.stderr.read().decode()[-2000:]}")
    return proc, [int(p.name) for p in pids.iterdir()]


@pytest.mark.parametrize("how", ["killed", "interrupted"])
def test_workers_stop_when_the_run_is_killed_or_interrupted(tmp_path, how):
    proc, workers = _start(tmp_path)
    try:
        assert all(_running(w) for w in workers)
        if how == "killed":  # no cleanup code runs in the parent: the workers must notice
            proc.send_signal(signal.SIGKILL)
        else:  # Ctrl-C in the parent: KeyboardInterrupt, which must not wait for the cells
            proc.send_signal(signal.SIGINT)
            assert _wait(lambda: proc.poll() is not None, 30), "the run kept waiting for its cells"
        assert _wait(lambda: not any(_running(w) for w in workers), 15), \
            f"workers still running after the run was {how}"
    finally:
        proc.kill()
        for w in workers:
            if _running(w):
                os.kill(w, signal.SIGKILL)
    if how == "interrupted":  # the run gave its claims back (a killed run's are stale)
        assert not list((tmp_path / "out" / "slow").glob("*.claim"))


def test_a_script_without_a_main_guard_fails_fast_instead_of_waiting(tmp_path):
    """Workers import the script that started the run; a top-level run_cells there would start
    the run again in each worker and wait forever for the parent's claimed cells."""
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "slow_cell.py").write_text(SLOW_CELL)
    script = tmp_path / "unguarded.py"
    body = textwrap.dedent(RUN.format(here=str(tmp_path), pids=str(pids), out=str(tmp_path / "out")))
    script.write_text(body.replace('if __name__ == "__main__":', "if True:"))
    try:
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=120)
    except subprocess.TimeoutExpired:
        raise AssertionError("the unguarded script hung instead of failing") from None
    assert done.returncode != 0
    assert 'if __name__ == "__main__":' in done.stderr
    assert not list(pids.iterdir()), "no cell may have started"
