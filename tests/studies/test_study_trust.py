"""Batch runs a person can watch and trust: progress lines, result identity that ignores where a
run executed, two runs into one folder, parameters checked before a kernel starts, task subsets."""
from __future__ import annotations

import json
import multiprocessing
import time
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from spt.cli import main
from spt.studies.machinery.cells import Cell, run_cells
from spt.studies.machinery.job import FunctionJob

pytestmark = pytest.mark.serial  # several runs into one folder at once, in processes


def slow_run(value: float, calls_dir: Path, run_dir) -> xr.Dataset:
    """A picklable cell body that records each run (one file per call) and takes a moment."""
    calls_dir.mkdir(parents=True, exist_ok=True)
    (calls_dir / f"{value}-{time.time_ns()}").touch()
    time.sleep(0.3)
    return xr.Dataset({"test_accuracy": ((), value / 10)})


def cells(calls, values=(1.0, 2.0, 3.0, 4.0, 5.0, 6.0), device="auto"):
    train = {"lr": 1e-3, "device": device, "num_workers": 0}
    return [Cell({"fraction": v, "seed": 0}, None,
                 FunctionJob(partial(slow_run, v, calls), {"v": v, "arm": {"train": train}}))
            for v in values]


def _run_into(out: str, calls: str, log_path: str) -> None:
    lines = []
    ds = run_cells("st", cells(Path(calls)), out, log=lines.append)
    Path(log_path).write_text(json.dumps({"lines": lines,
                                          "acc": ds.test_accuracy.values.ravel().tolist()}))


def test_two_runs_into_one_folder_compute_every_cell_exactly_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_run_into, args=(str(tmp_path / "out"), str(tmp_path / "calls"),
                                                  str(tmp_path / f"log{i}.json")))
             for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    runs = sorted(f.name.split("-")[0] for f in (tmp_path / "calls").iterdir())
    assert runs == ["1.0", "2.0", "3.0", "4.0", "5.0", "6.0"]  # each cell once, none twice
    logs = [json.loads((tmp_path / f"log{i}.json").read_text()) for i in range(2)]
    for log in logs:  # both runs return every result
        np.testing.assert_allclose(log["acc"], [0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    assert not list((tmp_path / "out" / "st").glob("*.claim"))


def test_progress_lines_name_each_cell_its_metric_and_time(tmp_path):
    lines = []
    run_cells("st", cells(tmp_path / "calls", (1.0, 2.0)), tmp_path / "out", log=lines.append)
    assert lines[0].startswith("st: 2 cells, 0 already done, 2 to run")
    assert "done 1/2: fraction=1__seed=0: test_accuracy 0.1000 (" in lines[1]
    assert lines[2].rstrip().endswith("s)")


def test_a_stale_claim_of_a_dead_run_is_taken_over(tmp_path):
    import socket

    from spt.studies.machinery.cells import cell_file
    c = cells(tmp_path / "calls", (1.0,))
    claim = cell_file(tmp_path / "out", "st", c[0]).with_suffix(".claim")
    claim.parent.mkdir(parents=True)
    claim.write_text(json.dumps({"host": socket.gethostname(), "pid": 2 ** 22 + 12345}))
    run_cells("st", c, tmp_path / "out", log=lambda s: None)
    assert not claim.exists() and len(list((tmp_path / "calls").iterdir())) == 1


def test_a_study_started_on_one_device_continues_on_another(tmp_path):
    """Where a run executed (device, workers) is not part of a result's identity."""
    calls = tmp_path / "calls"
    run_cells("st", cells(calls, (1.0, 2.0), device="auto"), tmp_path / "out", log=lambda s: None)
    lines = []
    run_cells("st", cells(calls, (1.0, 2.0), device="cpu"), tmp_path / "out", log=lines.append)
    assert "2 already done, 0 to run" in lines[0]
    assert len(list(calls.iterdir())) == 2


def test_real_arms_reuse_across_devices(tmp_path):
    from spt.studies.quickstart import SMOKE, STUDY
    run = STUDY.run
    run(SMOKE, tmp_path, seeds=[0], device="auto")
    stamps = {f: f.stat().st_mtime_ns for f in (tmp_path / "00_quickstart").glob("*.nc")}
    run(SMOKE, tmp_path, seeds=[0], device="cpu")
    assert {f: f.stat().st_mtime_ns for f in stamps} == stamps


@pytest.mark.parametrize("args, message", [
    (["-p", "seeds", "notalist"], "parameter seeds takes type list"),
    (["-p", "seeds", "3"], "parameter seeds takes type list"),
    (["-p", "device", "gpu"], "parameter device takes auto, cpu, cuda"),
    (["--preset", "nonsense"], "unknown preset 'nonsense'; choose from smoke, laptop, paper"),
    (["-p", "workers", "two"], "parameter workers takes type int"),
])
def test_bad_parameters_are_reported_before_a_kernel_starts(args, message, tmp_path, capsys):
    t0 = time.perf_counter()
    code = main(["study", "run", "01_lra_transformers", "--out", str(tmp_path), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert time.perf_counter() - t0 < 10  # no kernel was started
    assert not list(tmp_path.glob("*.ipynb"))


def test_a_study_runs_the_tasks_you_have(tmp_path):
    """Study 01's paper preset on a data root holding only ListOps and Pathfinder."""
    from spt.data.errors import DataMissingError
    from spt.data.fixtures import write_fixtures
    from spt.studies import lra_transformers
    write_fixtures(tmp_path, tasks=["listops", "pathfinder"])
    with pytest.raises(DataMissingError, match="text"):
        lra_transformers.STUDY.cells("paper", data_root=str(tmp_path))
    cs = lra_transformers.STUDY.cells("paper", data_root=str(tmp_path), tasks=["listops", "pathfinder"])
    assert {c.coords["task"] for c in cs} == {"listops", "pathfinder"} and len(cs) == 6
    with pytest.raises(ValueError, match="no task.*'speech'.*its tasks are listops"):
        lra_transformers.STUDY.cells("paper", data_root=str(tmp_path), tasks=["speech"])


def test_a_second_run_into_one_folder_keeps_both_executed_notebooks(tmp_path):
    """While one run writes OUT/<study>.ipynb, another writes OUT/<study>.<pid>.ipynb."""
    import os
    import socket

    from spt.studies.commands.runner import executed_path
    from spt.studies.machinery.claims import release
    first = executed_path(tmp_path, "04_data_scales")
    assert first == tmp_path / "04_data_scales.ipynb"
    # the first run is alive (this process holds its claim): the second gets its own notebook
    second = executed_path(tmp_path, "04_data_scales")
    assert second == tmp_path / f"04_data_scales.{os.getpid()}.ipynb"
    release(first)
    assert executed_path(tmp_path, "04_data_scales") == first
    # a claim left by a dead run does not block
    release(first)
    first.with_suffix(".claim").write_text(json.dumps({"host": socket.gethostname(),
                                                       "pid": 2 ** 22 + 12345}))
    assert executed_path(tmp_path, "04_data_scales") == first


CELLS_MODULE = '''
import time
from functools import partial
from pathlib import Path

import xarray as xr


def body(value, calls, run_dir):
    Path(calls).mkdir(parents=True, exist_ok=True)
    (Path(calls) / f"{value}-{time.time_ns()}").touch()
    time.sleep(0.5)
    return xr.Dataset({"test_accuracy": ((), value / 10)})


def cells(calls):
    from spt.studies.machinery.cells import Cell
    from spt.studies.machinery.job import FunctionJob
    return [Cell({"fraction": v, "seed": 0}, None, FunctionJob(partial(body, v, calls), {"v": v}))
            for v in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)]
'''


def test_two_spt_study_runs_into_one_folder_keep_both_notebooks(tmp_path):
    """Two `spt study run` of one study into one folder at once: every cell computed exactly once,
    both executed notebooks kept. Slow by necessity: two real notebook runs (two kernels) at the
    same time, which is the case checked."""
    import subprocess
    import sys

    import nbformat
    nb_dir = tmp_path / "nb"
    nb_dir.mkdir()
    (nb_dir / "toy_cells.py").write_text(CELLS_MODULE)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    params = nbformat.v4.new_code_cell('out_dir: str = "."  # results folder')
    params.metadata["tags"] = ["parameters"]
    calls = tmp_path / "calls"
    body = nbformat.v4.new_code_cell(
        "import toy_cells\nfrom spt.studies.machinery.cells import run_cells\n"
        f"ds = run_cells('toy', toy_cells.cells({str(calls)!r}), out_dir)\n"
        "assert ds.test_accuracy.size == 6")
    nb.cells = [params, body]
    nbformat.write(nb, nb_dir / "99_toy.ipynb")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "spt.cli", "study", "run", str(nb_dir / "99_toy.ipynb"),
           "--out", str(out), "--quiet"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    runs = sorted(f.name.split("-")[0] for f in calls.iterdir())
    assert runs == ["1.0", "2.0", "3.0", "4.0", "5.0", "6.0"]
    notebooks = sorted(f.name for f in out.glob("99_toy*.ipynb"))
    assert len(notebooks) == 2 and "99_toy.ipynb" in notebooks, notebooks
