"""`spt study batch --slurm`: one submitit job array; a pre-empted task is requeued and resumes."""
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import xarray as xr

from spt.studies.commands.runner import batch_runs, shard_from_env
from spt.studies.commands.slurm import (
    SlurmOptionError,
    parse_pairs,
    sbatch_script,
    slurm_options,
    slurm_time_minutes,
    submit_batch,
)

pytestmark = pytest.mark.serial  # submitit's local cluster and SLURM's signals

submitit = pytest.importorskip("submitit")

STUDY = "03_explicit_priors"
SPEC = {"fixed": {"tasks": ["listops"]}, "grid": {"seeds": [[0], [1]]}}


def test_options_are_checked_and_converted_before_anything_is_submitted(tmp_path):
    got = slurm_options(parse_pairs(["partition=gpu", "gpus_per_node=4", "mem=500M",
                                     "time=1-12:30", "array_parallelism=8"]))
    assert got == {"partition": "gpu", "gpus_per_node": 4, "mem": 1, "time": 36 * 60 + 30,
                   "array_parallelism": 8}
    assert [slurm_time_minutes(t) for t in ("90", "90:30", "24:00:00", "2-00", "0:0:30")] == \
        [90, 91, 1440, 2880, 1]
    for bad, says in [({"partiton": "gpu"}, "unknown --slurm option 'partiton'"),
                      ({"time": "24h"}, "not a SLURM time"), ({"time": "0"}, "no time at all"),
                      ({"gpus_per_node": "-1"}, "whole number >= 0"), ({"mem": "lots"}, "64G"),
                      ({"cpus_per_task": "0"}, "whole number >= 1")]:
        with pytest.raises(SlurmOptionError, match=says):
            slurm_options(bad)
    with pytest.raises(SlurmOptionError, match="KEY=VALUE"):
        parse_pairs(["partition"])
    # a grid naming a parameter the notebook lacks: an error, and nothing written under OUT
    with pytest.raises(ValueError, match="has no parameter 'sedes'"):
        submit_batch(STUDY, {"fixed": {}, "grid": {"sedes": [[0]]}}, tmp_path / "out",
                     {"time": 10}, cluster="local")
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_a_login_node_without_a_gpu_submits_a_cuda_batch(tmp_path, monkeypatch):
    """device: cuda is checked for its form on the login node, against the GPUs on the nodes."""
    from spt.studies.commands import slurm

    reached = []

    def no_cluster(out_dir, options, cluster):
        reached.append(cluster)
        raise slurm.NoSlurm("no sbatch here")

    monkeypatch.setattr(slurm, "executor", no_cluster)
    spec = {"fixed": {"device": "cuda"}, "grid": {"seeds": [[0]]}}
    with pytest.raises(slurm.NoSlurm):
        submit_batch(STUDY, spec, tmp_path / "out", {"time": 10}, cluster="slurm")
    assert reached == ["slurm"]
    # run here (the local executor), the same batch needs a GPU on this machine
    with pytest.raises(ValueError, match="no CUDA device"):
        submit_batch(STUDY, spec, tmp_path / "out", {"time": 10}, cluster="local")
    with pytest.raises(ValueError, match="device takes"):
        submit_batch(STUDY, {"fixed": {"device": "gpu"}, "grid": {}}, tmp_path / "out",
                     {"time": 10}, cluster="slurm")


def test_the_sbatch_script_for_given_options(tmp_path):
    text = sbatch_script(tmp_path, slurm_options({
        "partition": "gpu", "account": "lab", "qos": "high", "gpus_per_node": 1,
        "cpus_per_task": 8, "mem": "64G", "time": "24:00:00", "array_parallelism": 2}), n_tasks=5)
    lines = set(text.splitlines())
    for want in ("#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --qos=high",
                 "#SBATCH --gpus-per-node=1", "#SBATCH --cpus-per-task=8", "#SBATCH --mem=64GB",
                 "#SBATCH --time=1440", "#SBATCH --array=0-4%2", "#SBATCH --signal=USR2@90",
                 f"#SBATCH --output={tmp_path}/slurm/%A_%a_0_log.out"):
        assert want in lines, (want, text)
    assert "submitit.core._submit" in text
    # the CLI prints the same script (options from the grid file's slurm: section and --slurm)
    grid = tmp_path / "grid.yaml"
    grid.write_text("fixed: {tasks: [listops]}\ngrid: {seeds: [[0], [1]]}\n"
                    "slurm: {partition: gpu, time: '2:00:00'}\n")
    p = subprocess.run([sys.executable, "-m", "spt.cli", "study", "batch", STUDY, "--grid",
                        str(grid), "--out", str(tmp_path), "--slurm", "time=30",
                        "--print-sbatch"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "#SBATCH --partition=gpu" in p.stdout and "#SBATCH --time=30" in p.stdout
    assert "#SBATCH --array=0-1%2" in p.stdout
    p = subprocess.run([sys.executable, "-m", "spt.cli", "study", "batch", STUDY, "--grid",
                        str(grid), "--out", str(tmp_path), "--slurm", "time=soon"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("spt study: error: --slurm time='soon'")


def test_a_batch_without_a_time_limit_is_refused_and_mem_0_keeps_slurms_meaning(tmp_path):
    """submitit's default time is 5 minutes, which no cell fits in: time= is required, and said."""
    with pytest.raises(SlurmOptionError, match=r"--slurm needs time=\.\.\.: how long one array"):
        sbatch_script(tmp_path, slurm_options({"partition": "gpu"}), 2)
    with pytest.raises(SlurmOptionError, match="--slurm needs time="):
        submit_batch(STUDY, SPEC, tmp_path / "out", {"partition": "gpu"}, cluster="local")
    assert slurm_options({"mem": "0"}) == {"mem": 0}  # SLURM: all of the node's memory
    text = sbatch_script(tmp_path, slurm_options({"mem": "0", "time": "10"}), 1)
    assert "#SBATCH --mem=0GB" in text.splitlines()


@pytest.mark.parametrize("name", ["partition", "account", "qos", "constraint", "time", "mem",
                                  "gpus_per_node", "tasks"])
@pytest.mark.parametrize("bad", ["lab\n#SBATCH --qos=high", "1\nrm -rf ~", "1\r", "1\x00",
                                 "1\u2028"], ids=["directive", "shell", "cr", "nul", "ls"])
def test_no_option_carries_a_line_break_into_the_sbatch_script(name, bad):
    with pytest.raises(SlurmOptionError) as err:
        slurm_options({name: bad})
    said = str(err.value)
    assert said.startswith(f"--slurm {name}={bad!r} holds the control character ")
    assert "Write it on one line, without control characters" in said and "\n" not in said


def test_values_are_quoted_in_the_sbatch_directives(tmp_path):
    out = tmp_path / "my runs"  # a space in the folder: the printed command quotes it too
    text = sbatch_script(out, slurm_options({
        "account": "lab #1", "constraint": "a100&(ib|eth)", "qos": "it's", "time": "1:00:00"}),
        n_tasks=2)
    lines = text.splitlines()
    for want in ("#SBATCH --account='lab #1'", "#SBATCH --constraint='a100&(ib|eth)'",
                 "#SBATCH --qos='it'\"'\"'s'", f"#SBATCH --output='{out}/slurm/%A_%a_0_log.out'"):
        assert want in lines, (want, text)
    assert lines[-1].endswith(f"submitit.core._submit '{out}/slurm'"), lines[-1]
    with pytest.raises(SlurmOptionError, match=r"account='a\\\\b' holds a backslash"):
        slurm_options({"account": "a\\b"})
    with pytest.raises(SlurmOptionError, match="--out .* holds the control character"):
        sbatch_script(tmp_path / "a\nb", {}, 1)


def test_a_grid_file_smuggling_a_directive_is_one_line_and_submits_nothing(tmp_path, capsys):
    from spt.cli import main
    grid = tmp_path / "grid.yaml"
    grid.write_text('fixed: {tasks: [listops]}\ngrid: {seeds: [[0]]}\n'
                    'slurm: {account: "lab\\n#SBATCH --qos=high", time: 10}\n')
    for extra in (["--slurm", "--local"], ["--print-sbatch"]):
        rc = main(["study", "batch", STUDY, "--grid", str(grid), "--out", str(tmp_path / "out")]
                  + extra)
        captured = capsys.readouterr()
        assert rc == 2 and captured.out == "" and captured.err == (
            "spt study: error: --slurm account='lab\\n#SBATCH --qos=high' holds the control "
            "character '\\n': sbatch reads its script line by line, so it would end the "
            "directive. Write it on one line, without control characters (an account name)\n")
    assert not (tmp_path / "out").exists()


def test_shard_auto_reads_the_array_task():
    assert shard_from_env({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "8"}) == (3, 8)
    with pytest.raises(ValueError, match="SLURM_ARRAY_TASK_ID"):
        shard_from_env({})


@pytest.mark.long  # about 100 s on two cores: `make test-long`
@pytest.mark.skipif(torch.cuda.is_available(), reason="its two runs are the same only where "
                    "device auto is the CPU")
def test_a_preempted_array_task_is_requeued_and_ends_with_the_uninterrupted_results(tmp_path,
                                                                                  child_pid):
    # two batch runs of the same cells (device cpu and auto are one device here): task 0 is
    # pre-empted part-way, task 1 runs through; both must end with the same results. Study 01's
    # three smoke ListOps cells: enough to stop one part-way, and a third of study 03's time
    study = "01_lra_transformers"
    spec = {"fixed": {"tasks": ["listops"], "seeds": [0]}, "grid": {"device": ["cpu", "auto"]}}
    out = tmp_path / "runs"
    jobs = submit_batch(study, spec, out, {"time": 15}, cluster="local", log=lambda s: None)
    assert len(jobs) == 2
    run0, run1 = (out / name for name, _ in batch_runs(spec))
    deadline = time.time() + 300
    while not list((run0 / study).glob("*.nc")):  # part-way: one cell of task 0 finished
        assert time.time() < deadline and not jobs[0].done(), jobs[0].stderr()
        time.sleep(0.2)
    task = child_pid(jobs[0]._process.pid, b"submitit.core._submit")
    os.kill(task, signal.SIGUSR2)  # what SLURM sends on pre-emption
    for job in jobs:
        job.result()  # raises if a task failed
    log = jobs[0].stdout() + (jobs[0].stderr() or "")
    assert "requeued, it resumes its batch runs" in log and "Requeued job" in log, log[-3000:]
    assert "already done" in log  # the requeued task read the finished cell back
    assert "Requeued job" not in jobs[1].stdout() + (jobs[1].stderr() or "")

    got = sorted((run0 / study).glob("*.nc"))
    assert len(got) == 3 and [p.name for p in got] == \
        [p.name for p in sorted((run1 / study).glob("*.nc"))]
    for p in got:
        a, b = xr.load_dataset(p), xr.load_dataset(run1 / study / p.name)
        clocks = [v for v in a.variables if str(v).endswith("time")]  # wall times differ
        assert clocks and set(a.data_vars) == set(b.data_vars)
        # every value equal; the attrs differ only by the device each run was given
        xr.testing.assert_equal(a.drop_vars(clocks), b.drop_vars(clocks))
        assert a.attrs["config"].replace('"cpu"', '"auto"') == b.attrs["config"]
    assert (run0 / "DONE").exists() and (run1 / "DONE").exists()


def test_submitting_writes_one_array_through_sbatch_and_says_how_to_follow_it(tmp_path,
                                                                              monkeypatch):
    """submitit's own submission path, against stand-in srun / sbatch commands that keep the
    script they are given and answer as sbatch does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ncp \"$1\" {tmp_path}/submitted.sh\n"
                                    "echo 'Submitted batch job 4242'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    said = []
    spec = {**SPEC, "grid": {"seeds": [[0], [1], [2]]}}
    jobs = submit_batch(STUDY, spec, tmp_path / "runs",
                        slurm_options({"partition": "gpu", "time": "2-00:00:00", "mem": "32G",
                                       "gpus_per_node": 1, "array_parallelism": 2}),
                        log=said.append)
    assert [j.job_id for j in jobs] == ["4242_0", "4242_1", "4242_2"]
    script = (tmp_path / "submitted.sh").read_text()
    for want in ("#SBATCH --array=0-2%2", "#SBATCH --partition=gpu", "#SBATCH --time=2880",
                 "#SBATCH --mem=32GB", "#SBATCH --gpus-per-node=1", "#SBATCH --signal=USR2@90",
                 "#SBATCH --job-name=spt"):
        assert want in script.splitlines(), (want, script)
    assert "squeue -j 4242" in said[0] and "3 batch runs as 3 array task(s), job 4242" in said[0]
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ValueError, match="--local"):
        submit_batch(STUDY, spec, tmp_path / "runs2", {"time": 10})
