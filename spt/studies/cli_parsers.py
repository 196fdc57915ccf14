"""The arguments of ``spt study list | run | batch | check | plan``, ``spt tune`` and
``spt notebooks``: each command's parser, wired to its function in :mod:`spt.studies.cli`."""
from __future__ import annotations

import argparse

from .cli import (
    all_studies,
    cmd_batch,
    cmd_check,
    cmd_list,
    cmd_notebooks_copy,
    cmd_notebooks_where,
    cmd_plan,
    cmd_run,
    cmd_tune,
    guarded,
)


def _presets_help() -> str:
    """What each preset is (spt.studies.commands.run_parameters.PRESET_SAYS) and which studies have it."""
    from .commands.run_parameters import PRESET_SAYS
    studies = all_studies()
    names = list(dict.fromkeys(p for s in studies.values() for p in s.presets))
    parts = []
    for p in names:
        have = [n.split("_", 1)[0] for n, s in studies.items() if p in s.presets]
        says = PRESET_SAYS.get(p, "")
        where = ("every study" if len(have) == len(studies) else
                 f"stud{'y' if len(have) == 1 else 'ies'} {', '.join(have)}")
        parts.append(f"{p} ({says + '; ' if says else ''}{where})")
    return "; ".join(parts) + ". Default: smoke. (`make demo` runs the quickstart's demo preset.)"


def add_study_commands(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("study", help="run the paper's studies (notebooks) with papermill")
    sub = p.add_subparsers(title="study commands", metavar="STUDY_COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--notebooks", help="folder of the study notebooks (default: "
                        "$SPT_NOTEBOOKS, ./notebooks, else spt's own: the checkout's or the "
                        "installed package's; `spt notebooks where`)")

    q = sub.add_parser("list", parents=[common], help="the studies, one line each")
    q.set_defaults(func=guarded(cmd_list))

    _add_run(sub, common)
    _add_check(sub)
    _add_plan(sub)
    _add_batch(sub, common)
    return p


def _add_grid_arguments(q, preset_help: str, param_help: str) -> None:
    """The study names, --preset and -p of `spt study check` and `spt study plan`."""
    q.add_argument("name", nargs="+", help="study name(s) (see `spt study list`), or all")
    q.add_argument("--preset", default="paper", help=preset_help)
    q.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                   help=param_help)


def _add_run(sub, common) -> None:
    q = sub.add_parser("run", parents=[common], help="run one study notebook",
                       description="Execute a study notebook with papermill (kernel python3). The "
                       "executed notebook is saved as OUT/NAME.ipynb, the results under OUT/NAME/. "
                       "Rerunning reuses finished results.")
    q.add_argument("name", help="study name (see `spt study list`)")
    q.add_argument("--preset", default=None, help=_presets_help())
    q.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("KEY", "VALUE"),
                   help="a notebook parameter (VALUE read as YAML: 3, 0.5, true, [0, 1])")
    q.add_argument("--model", action="append", default=[], metavar="NAME=SPEC",
                   help="your layer beside the study's models, trained by the protocol of its "
                   "first model and sized like it (the studies `spt study list` marks). SPEC: "
                   "module:Class, or "
                   "JSON {\"layer\": \"module:Class\", \"kwargs\": {...}, \"bidirectional\": "
                   "true} (bidirectional: a causal-only layer for masked SPT). Repeatable")
    q.add_argument("--out", required=True, help="output folder")
    q.add_argument("--quiet", action="store_true", help="do not stream the notebook's output "
                   "(by default each finished cell prints a line: its metric and time)")
    q.set_defaults(func=guarded(cmd_run))


def _add_check(sub) -> None:
    from .commands.check import STEPS_IN_WORDS
    q = sub.add_parser("check", help="dry-run every cell of a preset at its real shapes",
                       description="Build every cell of the study's preset at the task's real "
                       f"length and take {STEPS_IN_WORDS} optimiser steps of each stage (pretraining, "
                       "finetuning from the checkpoint those steps wrote, scratch) on the longest "
                       "examples of each split, evaluation included; the second step is timed for "
                       "the cost estimate. One line per cell: parameters, length, stage times, peak "
                       "memory, estimated hours, pass or the error. Exit 1 if any cell fails. "
                       "Without real data: `spt data fixtures DIR` writes tiny full-length ones.")
    _add_grid_arguments(q, "preset to check (default paper)",
                        "data_root DIR: the data root of the paper preset")
    q.add_argument("--batch", default=None, help="batch size of every stage's steps, or 'stage': "
                   "each stage's own batch (halved, with twice the accumulation, where it runs out "
                   "of memory); default: 'stage' on CUDA, 2 elsewhere")
    q.add_argument("--distinct", action="store_true", help="check one cell per distinct task "
                   "and model (cells that differ only in lr, init or objective share its shapes)")
    q.add_argument("--device", default="auto", help="cpu, cuda or auto (default)")
    q.add_argument("--only", default=None, help="regular expression: check only the cells whose "
                   "'dim=value ...' matches (e.g. 'task=(listops|text)')")
    q.add_argument("--sizes", default="paper", choices=("paper", "data"),
                   help="size the runs of the cost estimate by the paper's split sizes (default: "
                        "right for fixtures) or by the data under data_root")
    q.add_argument("--tune", action="store_true", help="measure every stage's implementation "
                   "paths first, as `spt tune` does, so that the timed steps and the estimate use "
                   "them (otherwise: the cached choices, else the references)")
    q.add_argument("--csv", default=None, help="also write the table to this CSV file")
    q.set_defaults(func=guarded(cmd_check))


def add_tune_command(subparsers) -> argparse.ArgumentParser:
    q = subparsers.add_parser(
        "tune", help="measure a study's implementation paths on this device, ahead of its runs",
        description="For every distinct task and model of the preset's cells, run each stage for "
        "a few steps at its own batch and measure every module's implementation paths on the "
        "device (TrainConfig.paths: each candidate timed, checked against the reference, the "
        "fastest that agrees kept). Prints one table (module kind, shape, path, time, difference "
        "from the reference, chosen or skipped and why) and keeps the choices in the cache, "
        "where the study's runs on this device find them; a second call answers from the cache.")
    _add_grid_arguments(q, "preset to tune (default paper)",
                        "data_root DIR: the data root of the paper preset")
    q.add_argument("--device", default="auto", help="cpu, cuda or auto (default)")
    q.add_argument("--only", default=None, help="regular expression: only the cells whose "
                   "'dim=value ...' matches")
    q.add_argument("--csv", default=None, help="also write the table to this CSV file")
    q.set_defaults(func=guarded(cmd_tune, prog="spt tune"))
    return q


def _add_plan(sub) -> None:
    q = sub.add_parser("plan", help="what every stage of every cell will do, before it trains",
                       description="For every cell and stage of a study's preset: examples, steps "
                       "per epoch, the step cap, warmup, the lr schedule's shape (lr at 0/10/50/100% "
                       "of the cap), patience in steps, validations, time budget; flags what cannot "
                       "work as intended (a warmup that outlasts the run, an empty split) and "
                       "exits 1 on a flag unless --allow-flags. Without "
                       "-p data_root a paper preset is sized by the paper's split sizes.")
    _add_grid_arguments(q, "preset to plan (default paper)",
                        "data_root DIR: size the runs by the data there")
    q.add_argument("--tasks", nargs="*", default=None, help="plan only these tasks")
    q.add_argument("--allow-flags", action="store_true", help="exit 0 even when a stage is flagged")
    q.add_argument("--csv", default=None, help="also write the plan to this CSV file")
    q.set_defaults(func=guarded(cmd_plan))


def _add_batch(sub, common) -> None:
    q = sub.add_parser("batch", parents=[common], help="run a grid of parameter settings",
                       description="Expand a grid file into one papermill run per grid point under "
                       "OUT/<run>/; skip runs already DONE; record failures and go on. Split the "
                       "runs over GPUs / nodes with --shard i/n.")
    q.add_argument("name", help="study name")
    q.add_argument("--grid", required=True, help="YAML file: {fixed: {...}, grid: {param: [..]}}")
    q.add_argument("--out", required=True, help="output folder")
    q.add_argument("--shard", default="0/1", help="take runs i, i+n, i+2n, ... (default 0/1); "
                   "auto: this task's place in a SLURM job array (SLURM_ARRAY_TASK_ID/COUNT)")
    q.add_argument("--quiet", action="store_true", help="do not stream the notebooks' output")
    q.add_argument("--slurm", nargs="*", default=None, metavar="KEY=VALUE",
                   help="submit the batch as one SLURM job array through submitit instead of "
                   "running it here (options also from the grid file's slurm: section): "
                   "partition, account, qos, constraint, gpus_per_node, cpus_per_task, nodes, "
                   "tasks_per_node, mem (64G), time (HH:MM:SS or D-HH:MM:SS), array_parallelism, "
                   "signal_delay_s, tasks (array size; default one per batch run). Logs: OUT/slurm/")
    q.add_argument("--print-sbatch", action="store_true",
                   help="print the sbatch script --slurm would submit, and submit nothing")
    q.add_argument("--local", action="store_true",
                   help="with --slurm: run the array through submitit's local executor on this "
                   "machine (same tasks, signals and requeues; to try a batch before submitting)")
    q.set_defaults(func=guarded(cmd_batch))


def add_notebook_commands(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("notebooks", help="copy spt's notebooks to edit and run them",
                              description="spt's notebooks (the studies, the quickstart, the "
                              "walkthrough and the explorers) come with the package.")
    sub = p.add_subparsers(title="notebook commands", metavar="NOTEBOOKS_COMMAND")
    q = sub.add_parser("copy", help="copy them into DIR (to open in JupyterLab)")
    q.add_argument("dest", metavar="DIR", help="folder to copy the notebooks into (created)")
    q.add_argument("--force", action="store_true", help="replace notebooks already in DIR")
    q.set_defaults(func=guarded(cmd_notebooks_copy, "spt notebooks"))
    q = sub.add_parser("where", help="where spt's notebooks are, and which folder spt study uses")
    q.add_argument("--notebooks", help="as for spt study: a folder of notebooks")
    q.set_defaults(func=guarded(cmd_notebooks_where, "spt notebooks"))
    return p
