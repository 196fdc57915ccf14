"""A batch of study runs as one SLURM job array, through submitit.

    spt study batch 02_transformers_vs_s4 --grid grid.yaml --out runs \\
        --slurm partition=gpu gpus_per_node=1 cpus_per_task=8 mem=64G time=24:00:00

    jobs = submit_batch("02_transformers_vs_s4", read_grid("grid.yaml"), "runs",
                        slurm_options({"partition": "gpu", "time": "24:00:00"}))

Task i of an array of n runs :func:`spt.studies.commands.runner.run_batch` with shard (i, n): the batch runs
i, i + n, ... (by default n is the number of batch runs, one per task). Logs go to
``OUT/slurm/<job>_<task>_0_log.{out,err}``.

Pre-emption and time limits: SLURM signals a task (USR2, ``signal_delay_s`` = 90 s before its time
limit, or when it is pre-empted); submitit then calls :meth:`BatchTask.checkpoint`, which stops the
notebook's kernel and hands submitit the same task to requeue. The requeued task runs the same
shard: batch runs with DONE are skipped, finished cells are read back from their result files, and
the cell that was training resumes from its ``last.pt``. Nothing finished is computed again.
submitit requeues a task at most 3 times after a time-out (pre-emptions do not count).

A script that trains on several GPUs (``torchrun``, :mod:`spt.train.distributed`) goes through
:func:`submit_command` with the same options; a requeued command simply runs again, so the
script should pass ``resume=True`` to pretrain / finetune.
"""
from __future__ import annotations

import math
import os
import re
import shlex
import signal
import sys
import unicodedata
from pathlib import Path
from typing import Optional, Sequence

# spt's option name -> (submitit's parameter, converter, what it takes)
OPTIONS = {
    "partition": ("slurm_partition", str, "a partition name"),
    "account": ("slurm_account", str, "an account name"),
    "qos": ("slurm_qos", str, "a quality of service name"),
    "constraint": ("slurm_constraint", str, "a node feature, e.g. a100"),
    "gpus_per_node": ("gpus_per_node", "count", "a whole number >= 0"),
    "cpus_per_task": ("cpus_per_task", "count", "a whole number >= 1"),
    "nodes": ("nodes", "count", "a whole number >= 1"),
    "tasks_per_node": ("tasks_per_node", "count", "a whole number >= 1"),
    "mem": ("mem_gb", "memory", "memory per node: 64G, 500M, 1T or a number of GB (0: all of "
                                "the node's memory, as SLURM reads --mem=0)"),
    "time": ("timeout_min", "time", "a SLURM time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
                                    "D-HH:MM:SS"),
    "array_parallelism": ("slurm_array_parallelism", "count", "a whole number >= 1: tasks running "
                                                              "at once"),
    "signal_delay_s": ("slurm_signal_delay_s", "count", "seconds before the time limit at which "
                                                        "the task is told to checkpoint"),
    "tasks": (None, "count", "a whole number >= 1: the array's size (default: one task per "
                             "batch run)"),
}


class SlurmOptionError(ValueError):
    """An option of --slurm (or a grid file's slurm: section) that SLURM or submitit cannot take."""


class NoSlurm(ValueError):
    """This machine has no SLURM commands (srun / sbatch) to submit with."""


def slurm_time_minutes(text) -> int:
    """A SLURM --time value in whole minutes (rounded up): "90", "90:30", "24:00:00", "2-00",
    "2-12:30", "2-12:30:00"."""
    s = str(text).strip()
    m = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", s)
    if not m:
        raise SlurmOptionError(f"--slurm time={text!r} is not a SLURM time; use {OPTIONS['time'][2]}")
    days, a, b, c = (int(g) if g is not None else None for g in m.groups())
    if days is None:  # minutes | minutes:seconds | hours:minutes:seconds
        seconds = a * 60 if b is None else (a * 60 + b if c is None else a * 3600 + b * 60 + c)
    else:  # days-hours | days-hours:minutes | days-hours:minutes:seconds
        seconds = days * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    if seconds <= 0:
        raise SlurmOptionError(f"--slurm time={text!r} is no time at all; use {OPTIONS['time'][2]}")
    return math.ceil(seconds / 60)


def _memory_gb(text) -> int:
    """Whole GB, rounded up; 0 keeps SLURM's meaning of --mem=0: all of each node's memory."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([MGT]?)B?", str(text).strip(), flags=re.I)
    if not m:
        raise SlurmOptionError(f"--slurm mem={text!r}: use {OPTIONS['mem'][2]}")
    scale = {"": 1, "M": 1 / 1024, "G": 1, "T": 1024}[m.group(2).upper()]
    amount = float(m.group(1)) * scale
    return 0 if amount == 0 else max(1, math.ceil(amount))


def _control_characters(text: str) -> list:
    """The characters of `text` that break a line or control a terminal (Unicode Cc, Zl, Zp)."""
    return [c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp")]


def _log_folder(out_dir) -> Path:
    """OUT/slurm, where the tasks write their logs: its path goes into the sbatch directives too,
    so it may not hold a control character either."""
    control = _control_characters(str(Path(out_dir).resolve()))
    if control:
        raise SlurmOptionError(f"--out {str(out_dir)!r} holds the control character "
                               f"{control[0]!r}, which would end an sbatch directive (the logs go "
                               f"under it): name a folder without one")
    return Path(out_dir) / "slurm"


def _check_characters(name: str, value) -> None:
    """Refuse what a value cannot carry into an sbatch directive. submitit writes each option as
    ``#SBATCH --name=<value>`` with the value shell-quoted (shlex.quote), and sbatch reads those
    quotes; but it reads the script line by line, so a line break (or any control character)
    would end the directive and start another line (a second ``#SBATCH`` directive, or a shell
    command), and it reads a backslash as an escape even inside quotes, dropping it."""
    text = str(value)
    control = _control_characters(text)
    if control:
        raise SlurmOptionError(f"--slurm {name}={text!r} holds the control character "
                               f"{control[0]!r}: sbatch reads its script line by line, so it "
                               f"would end the directive. Write it on one line, without control "
                               f"characters ({OPTIONS[name][2]})")
    if "\\" in text:
        raise SlurmOptionError(f"--slurm {name}={text!r} holds a backslash, which sbatch reads as "
                               f"an escape and drops; use {OPTIONS[name][2]}")


def slurm_options(given: dict) -> dict:
    """spt's SLURM options (name -> value, as given on the command line or in YAML), checked and
    converted: {option: value}. Unknown names, malformed values and characters that an sbatch
    directive cannot carry (:func:`_check_characters`) are a SlurmOptionError naming the option."""
    out = {}
    for name, value in given.items():
        if name not in OPTIONS:
            raise SlurmOptionError(f"unknown --slurm option {name!r}; options: {', '.join(OPTIONS)}")
        _check_characters(name, value)
        _, kind, says = OPTIONS[name]
        if kind == "count":
            try:
                v = int(str(value))
            except ValueError:
                v = -1
            if v < (0 if name in ("gpus_per_node", "signal_delay_s") else 1):
                raise SlurmOptionError(f"--slurm {name}={value!r}: use {says}")
            out[name] = v
        elif kind == "time":
            out[name] = slurm_time_minutes(value)
        elif kind == "memory":
            out[name] = _memory_gb(value)
        else:
            if not str(value).strip():
                raise SlurmOptionError(f"--slurm {name} is empty: use {says}")
            out[name] = str(value)
    return out


def parse_pairs(pairs: Sequence[str]) -> dict:
    """["partition=gpu", "time=24:00:00"] -> {"partition": "gpu", "time": "24:00:00"}."""
    out = {}
    for p in pairs:
        key, eq, value = p.partition("=")
        if not eq or not key:
            raise SlurmOptionError(f"--slurm takes KEY=VALUE pairs (e.g. partition=gpu), got {p!r}")
        out[key.strip()] = value.strip()
    return out


def _submitit_params(options: dict) -> dict:
    """Checked options (:func:`slurm_options`) as submitit's AutoExecutor parameters. `time` is
    required: without it submitit asks SLURM for 5 minutes, which no study cell fits in, and a
    task killed at its limit is requeued only 3 times."""
    if "time" not in options:
        raise SlurmOptionError("--slurm needs time=...: how long one array task may run (it runs "
                               "its share of the batch's cells one after another), e.g. "
                               "time=24:00:00; `spt study check` estimates a cell's time. "
                               f"Use {OPTIONS['time'][2]}")
    return {OPTIONS[k][0]: v for k, v in options.items() if OPTIONS[k][0]}


def executor(out_dir, options: dict, cluster: Optional[str] = "slurm"):
    """A submitit executor writing under ``out_dir/slurm``. cluster: "slurm", "local" (submitit's
    local executor: the same tasks, signals and requeues as processes on this machine; tests use
    it) or None (submitit's choice: SLURM where sbatch exists, else local)."""
    try:
        import submitit
    except ImportError:
        raise ImportError("spt study batch --slurm needs submitit: pip install 'spt[slurm]'") from None
    try:
        ex = submitit.AutoExecutor(folder=_log_folder(out_dir), cluster=cluster)
    except RuntimeError as e:  # submitit: 'Could not detect "srun"'
        raise NoSlurm(f"cannot submit to SLURM from this machine ({e}); run the command on the "
                      f"cluster's login node, or add --local to try the array here") from None
    params = _submitit_params(options)
    if ex.cluster != "slurm":  # SLURM-only settings mean nothing to the local executor
        params = {k: v for k, v in params.items() if not k.startswith("slurm_")}
    ex.update_parameters(name="spt", **params)
    return ex


def sbatch_script(out_dir, options: dict, n_tasks: int = 1) -> str:
    """The sbatch script submitit writes for these options (what `--slurm ... --print-sbatch`
    shows), for an array of `n_tasks`."""
    from submitit.slurm.slurm import _make_sbatch_string

    folder = _log_folder(out_dir).resolve()
    params = _submitit_params(options)
    kw = {"time": params.pop("timeout_min")}
    for ours, theirs in (("slurm_partition", "partition"), ("slurm_account", "account"),
                         ("slurm_qos", "qos"), ("slurm_constraint", "constraint"),
                         ("slurm_array_parallelism", "array_parallelism"),
                         ("slurm_signal_delay_s", "signal_delay_s"),
                         ("gpus_per_node", "gpus_per_node"), ("cpus_per_task", "cpus_per_task"),
                         ("nodes", "nodes"), ("tasks_per_node", "ntasks_per_node")):
        if ours in params:
            kw[theirs] = params.pop(ours)
    if "mem_gb" in params:
        kw["mem"] = f"{params.pop('mem_gb')}GB"
    command = f"{shlex.quote(sys.executable)} -u -m submitit.core._submit {shlex.quote(str(folder))}"
    return _make_sbatch_string(command=command,
                               folder=folder, job_name="spt", map_count=n_tasks, **kw)


def _stop_children() -> None:
    """Kill this process's child processes (the notebook kernel and what it started), so that
    nothing of the stopped task keeps training, nor holds its claims, beside the requeued one."""
    try:
        import psutil
    except ImportError:  # SLURM kills the whole job's processes when it requeues anyway
        return
    kids = psutil.Process().children(recursive=True)
    for p in kids:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(kids, timeout=10)


class BatchTask:
    """One array task: run_batch's shard (task, n_tasks) of a batch; submitit pickles it.

    checkpoint() is submitit's hook for pre-emption and time-outs: stop the kernel, requeue the
    same task (its shard resumes where it stopped)."""

    def __init__(self, study: str, spec: dict, out_dir: str, n_tasks: int, nb_dir=None):
        self.study, self.spec, self.out_dir, self.n_tasks = study, spec, str(out_dir), n_tasks
        self.nb_dir = None if nb_dir is None else str(nb_dir)

    def __call__(self, task: int) -> dict:
        from .output import stream_notebook_output
        from .runner import run_batch

        stream_notebook_output()
        status = run_batch(self.study, self.spec, self.out_dir, shard=(task, self.n_tasks),
                           nb_dir=self.nb_dir, log_output=True)
        failed = {k: v for k, v in status.items() if v.startswith("failed")}
        if failed:  # the task fails in SLURM's accounting too; the other runs are done
            raise RuntimeError(f"{len(failed)} of {len(status)} batch runs failed: "
                               + "; ".join(f"{k}: {v}" for k, v in failed.items()))
        return status

    def checkpoint(self, task: int):
        import submitit

        print(f"spt: task {task} of {self.n_tasks} stopped by SLURM (time limit or pre-emption); "
              f"requeued, it resumes its batch runs from their checkpoints", flush=True)
        _stop_children()
        return submitit.helpers.DelayedSubmission(self, task)


class CommandTask:
    """A command (e.g. ``torchrun --nproc_per_node 4 train.py``) as a requeueable SLURM job."""

    def __init__(self, argv: Sequence[str], cwd: Optional[str] = None):
        self.argv, self.cwd = list(argv), cwd

    def __call__(self) -> int:
        import subprocess

        rc = subprocess.run(self.argv, cwd=self.cwd).returncode
        if rc:
            raise RuntimeError(f"{' '.join(self.argv)} exited with {rc}")
        return rc

    def checkpoint(self):
        import submitit

        _stop_children()
        return submitit.helpers.DelayedSubmission(self)


def submit_batch(study: str, spec: dict, out_dir, options: dict, *, nb_dir=None,
                 cluster: Optional[str] = "slurm", log=print) -> list:
    """Check every batch run's parameters, then submit the batch as one job array; returns
    submitit's jobs (one per task)."""
    from ...atomic import writable_dir
    from .notebooks import study_notebook
    from .parameters import check_parameters
    from .runner import batch_runs

    _submitit_params(options)  # time= is required: refused before anything is checked or made
    nb = study_notebook(study, nb_dir)
    runs = batch_runs(spec)
    for _, params in runs:  # the GPUs are the compute nodes': a login node has none
        check_parameters(nb, {**params, "out_dir": ""}, runs_here=cluster != "slurm")
    n = min(options.get("tasks", len(runs)), len(runs))
    _log_folder(out_dir)  # refused before anything is made
    writable_dir(out_dir)  # the tasks, their logs and results go there: fail now, not on a node
    ex = executor(out_dir, options, cluster)
    jobs = ex.map_array(BatchTask(nb.stem, spec, str(Path(out_dir).resolve()), n, nb_dir),
                        range(n))
    job_id = str(jobs[0].job_id).split("_")[0]
    follow = (f"squeue -j {job_id}    " if ex.cluster == "slurm" else "") + \
        f"tail -f {jobs[0].paths.stdout}"
    log(f"submitted {nb.stem}: {len(runs)} batch runs as {n} array task(s), job {job_id} "
        f"({ex.cluster})\n"
        f"  follow:   {follow}\n"
        f"  curves:   tensorboard --logdir {out_dir}\n"
        f"  status:   {out_dir}/<run>/DONE or FAILED; {out_dir}/batch-status-<i>of{n}.json")
    return jobs


def submit_command(argv: Sequence[str], out_dir, options: dict, *,
                   cluster: Optional[str] = "slurm"):
    """Submit one command (a multi-GPU training script under torchrun, say) with these options;
    requeued on pre-emption or time-out. Returns submitit's job."""
    ex = executor(out_dir, options, cluster)
    return ex.submit(CommandTask(argv, os.getcwd()))
