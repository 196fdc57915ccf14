"""`spt study list | run | batch`: the study notebooks from the command line (papermill)."""
from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from typing import Optional

from ..atomic import DiskFullError, NotAFolderError, NotWritableError
from .commands.output import stream_notebook_output


def _value(text: str):
    """A -p value typed as YAML would: 3 -> int, 0.5 -> float, true -> bool, [0, 1] -> list."""
    import yaml
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _all_studies() -> dict:
    """{name: Study}: the quickstart, then the paper's studies."""
    from .registry import QUICKSTART, STUDIES
    return {QUICKSTART.name: QUICKSTART, **STUDIES}


def _takes_model(name: str) -> bool:
    """Whether `spt study run NAME` takes --model: a paper study whose Study.takes_models (its
    notebook then has a `models` parameter, spt.studies.commands.run_parameters). The quickstart takes
    your models in notebooks/12_your_architecture.ipynb."""
    from .registry import STUDIES
    return name in STUDIES and STUDIES[name].takes_models


TAKES_MODEL_TOO = "notebooks/12_your_architecture.ipynb runs the quickstart with your layer"


def cmd_list(args) -> int:
    from .commands.notebooks import notebooks_dir
    folder = notebooks_dir(args.notebooks)
    print(f"{'study':<27} {'presets':<26} {'--model':<8} what it compares")
    for name, s in _all_studies().items():
        if (folder / f"{name}.ipynb").is_file():
            print(f"{name:<27} {', '.join(s.presets):<26} {'yes' if _takes_model(name) else '-':<8} "
                  f"{s.title}")
    print(f"(--model: your layer beside the study's models; {TAKES_MODEL_TOO})")
    return 0


def _models(specs: list) -> dict:
    """--model NAME=SPEC, repeated, as {NAME: SPEC}: SPEC is "module:Class" or a JSON / YAML
    mapping {"layer": "module:Class", "kwargs": {...}, "bidirectional": true, ...}."""
    out: dict = {}
    for text in specs:
        name, sep, spec = text.partition("=")
        if not (sep and name.isidentifier() and spec.strip()):
            raise ValueError(f"--model {text!r}: write NAME=module:Class, or NAME='{{\"layer\": "
                             f"\"module:Class\", \"kwargs\": {{...}}, \"bidirectional\": true}}'")
        if name in out:
            raise ValueError(f"--model: the name {name!r} is given twice")
        out[name] = _value(spec) if spec.lstrip().startswith("{") else spec
    return out


@contextmanager
def _out_is_a_folder():
    """A file given as --out (or lying above it) refused as the usage error it is."""
    try:
        yield
    except NotAFolderError as e:
        raise ValueError(f"--out must be a folder, and {e.path} is a file: name a folder (it is "
                         f"created if missing)") from None


def cmd_run(args) -> int:
    from .commands.runner import notebook_parameters, run_study, study_notebook
    from .registry import notebook_study
    params = {k: _value(v) for k, v in args.param}
    nb = study_notebook(args.name, args.notebooks)
    if args.model:
        if "models" not in notebook_parameters(nb):
            raise ValueError(f"study {args.name} takes no models (--model); these do: "
                             f"{', '.join(n for n in _all_studies() if _takes_model(n))} (and "
                             f"{TAKES_MODEL_TOO})")
        params["models"] = {**(params.get("models") or {}), **_models(args.model)}
    preset = args.preset or ("smoke" if notebook_study(nb) is not None else None)
    with _out_is_a_folder():
        out = run_study(args.name, args.out, preset=preset, parameters=params,
                        nb_dir=args.notebooks, log_output=stream_notebook_output(args.quiet),
                        progress=False)
    stem = nb.stem
    print(f"executed notebook: {out}" + ("" if out.stem == stem else
          f" (another run was writing {out.with_name(stem + '.ipynb')})"))
    results = out.parent / stem
    if results.is_dir():
        print(f"results: {results}/")
    return 0


def cmd_batch(args) -> int:
    from .commands.runner import parse_shard, read_grid, run_batch
    with _out_is_a_folder():
        if args.slurm is not None or args.print_sbatch:
            return _submit(args)
        status = run_batch(args.name, read_grid(args.grid), args.out, shard=parse_shard(args.shard),
                           nb_dir=args.notebooks, log_output=stream_notebook_output(args.quiet))
    failed = [c for c, s in status.items() if s.startswith("failed")]
    print(f"{len(status)} batch runs: {len(status) - len(failed)} ok, {len(failed)} failed")
    return 1 if failed else 0


def _submit(args) -> int:
    from .commands.runner import batch_runs, read_grid
    from .commands.slurm import parse_pairs, sbatch_script, slurm_options, submit_batch
    spec = read_grid(args.grid)
    options = slurm_options({**spec.get("slurm", {}), **parse_pairs(args.slurm or [])})
    if args.print_sbatch:
        n = min(options.get("tasks", len(batch_runs(spec))), len(batch_runs(spec)))
        print(sbatch_script(args.out, options, n), end="")
        return 0
    jobs = submit_batch(args.name, spec, args.out, options, nb_dir=args.notebooks,
                        cluster="local" if args.local else "slurm")
    if not args.local:
        return 0
    # the local executor's tasks are children of this process: wait for them
    failed = 0
    for job in jobs:
        try:
            job.result()
        except Exception as e:  # the task's own error; its log is under OUT/slurm
            failed += 1
            print(f"task {job.task_id}: {str(e).strip().splitlines()[0]}", file=sys.stderr)
    print(f"{len(jobs)} task(s): {len(jobs) - failed} done, {failed} failed (logs: {args.out}/slurm)")
    return 1 if failed else 0


def _study_names(names: list) -> list:
    if names == ["all"]:
        from .registry import STUDIES
        return list(STUDIES)
    return names


def _data_root_only(args, command: str) -> dict:
    """The -p parameters of a command that takes only data_root (plan, check, tune), or an
    error."""
    params = {k: _value(v) for k, v in args.param}
    unknown = sorted(set(params) - {"data_root"})
    if unknown:
        raise ValueError(f"{command} takes -p data_root DIR only, got {unknown}")
    return params


def cmd_plan(args) -> int:
    from .commands.plan import SMOKE_PLAN, as_dataframe, format_plans, plan
    params = _data_root_only(args, "spt study plan")
    plans = []
    for name in _study_names(list(args.name)):
        ps = plan(name, preset=args.preset, data_root=params.get("data_root"),
                  tasks=args.tasks or None)
        print(f"== {name} [{args.preset}]: {len(ps)} stages"
              + ("" if params.get("data_root") or args.preset != "paper"
                 else " (sized by the paper's split sizes: spt.data.sizes)"))
        if args.preset == "smoke":
            print(SMOKE_PLAN)
        print(format_plans(ps))
        plans += ps
    flagged = [p for p in plans if p.flags]
    if args.csv:
        as_dataframe(plans).to_csv(args.csv, index=False)
        print(f"table: {args.csv}")
    print(f"{len(plans)} stages, {len(flagged)} flagged")
    if flagged and not args.allow_flags:
        print("spt study plan: flagged stages cannot run as intended (see FLAG lines); pass "
              "--allow-flags to exit 0 anyway", file=sys.stderr)
        return 1
    return 0


def cmd_check(args) -> int:
    from contextlib import nullcontext

    from ..train.distributed import device_for
    from ..train.paths import tuning
    from .commands.check import (
        ESTIMATE_ASSUMPTION,
        as_dataframe,
        check,
        cost_table,
        paths_summary,
        summary,
    )
    params = _data_root_only(args, "spt study check")
    batch = _check_batch(args.batch, device_for(args.device))
    results = []
    with tuning() if args.tune else nullcontext():
        for name in _study_names(list(args.name)):
            results += check(name, preset=args.preset, data_root=params.get("data_root"),
                             batch=batch, device=args.device, only=args.only, sizes=args.sizes,
                             distinct=args.distinct)
    print(summary(results))
    device = str(device_for(args.device))
    print(f"\nestimated wall time on {device} ({ESTIMATE_ASSUMPTION}):")
    print(cost_table(results, device).to_string())
    print(paths_summary(results) + ("" if args.tune else " (cached choices and references: "
                                    "--tune, or `spt tune`, measures them first)"))
    if args.csv:
        as_dataframe(results).to_csv(args.csv, index=False)
        print(f"table: {args.csv}")
    for r in results:
        if not r.ok:
            print(f"\n--- {r.study} {r.coords}:\n{r.traceback}", file=sys.stderr)
    return 0 if all(r.ok for r in results) else 1


def _check_batch(value: Optional[str], device) -> Optional[int]:
    """`spt study check --batch`: a whole number, or "stage" (None: each stage's own batch);
    unset: the stage's own on CUDA, 2 elsewhere."""
    if value is None:
        return None if device.type == "cuda" else 2
    if value == "stage":
        return None
    try:
        batch = int(value)
    except ValueError:
        batch = 0
    if batch < 1:
        raise ValueError(f"--batch must be a whole number >= 1 or 'stage' (each stage's own "
                         f"batch), got {value!r}")
    return batch


def cmd_notebooks_copy(args) -> int:
    from .commands.notebooks import copy_notebooks
    copies = copy_notebooks(args.dest, overwrite=args.force)
    print(f"copied {len(copies)} notebooks to {args.dest}\n"
          f"open them: jupyter lab {args.dest}   (JupyterLab: pip install 'spt[notebooks]')\n"
          f"run your copy of a study: spt study run NAME --notebooks {args.dest} --out OUT")
    return 0


def cmd_notebooks_where(args) -> int:
    from .commands.notebooks import notebooks_dir, packaged_notebooks
    print(f"spt's notebooks: {packaged_notebooks()}\n"
          f"spt study uses: {notebooks_dir(args.notebooks)}")
    return 0


# what a study run needs beyond spt's core, and the package that provides each module
STUDY_PACKAGES = {"papermill": "papermill", "ipykernel": "ipykernel", "nbformat": "nbformat",
                  "nbclient": "nbclient", "jupyter_client": "jupyter-client",
                  "matplotlib": "matplotlib", "ipywidgets": "ipywidgets", "yaml": "pyyaml"}


def missing_package_message(e: ImportError) -> str:
    """The error for a module a study run needs that this environment lacks: what to install."""
    name = (getattr(e, "name", None) or "").split(".")[0]
    if name in STUDY_PACKAGES:
        return (f"{e}: spt study runs notebooks with papermill, whose packages are dependencies "
                f"of spt, but this environment lacks {STUDY_PACKAGES[name]!r} (spt installed "
                f"with --no-deps, or the package removed since). Install them: pip install "
                f"papermill ipykernel matplotlib ipywidgets  (or reinstall spt: pip install "
                f"--force-reinstall spt)")
    return str(e)


def _no_kernel_message(e: Exception) -> str:
    return (f"{e}: papermill runs the notebooks with the Jupyter kernel 'python3' of this "
            f"Python ({sys.executable}). Install it: {sys.executable} -m pip install ipykernel && "
            f"{sys.executable} -m ipykernel install --sys-prefix --name python3")


RESUME = ("finished cells and checkpoints are kept under --out; rerun the same command to "
          "resume")


def _guard(fn, prog: str = "spt study"):
    def run(args) -> int:
        try:
            return fn(args)
        except ImportError as e:
            print(f"{prog}: error: {missing_package_message(e)}", file=sys.stderr)
            return 2
        except (FileNotFoundError, FileExistsError, ValueError) as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 2
        except (DiskFullError, NotWritableError) as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 1
        except Exception as e:  # papermill's execution error: the notebook says what failed
            if type(e).__name__ == "PapermillExecutionError":
                if e.ename == "KeyboardInterrupt":
                    print(f"{prog}: interrupted; {RESUME}", file=sys.stderr)
                    return 130
                said = getattr(e, "kernel_log", None)
                print(f"{prog}: the notebook failed: {e.ename}: {e.evalue}\n(see the executed "
                      f"notebook under --out for the traceback"
                      + (f"; what its processes printed last: {said})" if said else ")"),
                      file=sys.stderr)
                return 1
            if type(e).__name__ == "NoSuchKernel":
                print(f"{prog}: error: {_no_kernel_message(e)}", file=sys.stderr)
                return 2
            if type(e).__name__ == "DeadKernelError":
                said = getattr(e, "kernel_log", None)
                print(f"{prog}: the notebook's kernel died (killed, or out of memory?); "
                      f"{RESUME}" + (f"\n(what the kernel wrote: {said})" if said else ""),
                      file=sys.stderr)
                return 1
            raise
    return run


def _presets_help() -> str:
    """What each preset is (spt.studies.commands.run_parameters.PRESET_SAYS) and which studies have it."""
    from .commands.run_parameters import PRESET_SAYS
    studies = _all_studies()
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
    q.set_defaults(func=_guard(cmd_list))

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
    q.set_defaults(func=_guard(cmd_run))


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
    q.set_defaults(func=_guard(cmd_check))


def cmd_tune(args) -> int:
    from .commands.tune import tune, tune_summary
    params = _data_root_only(args, "spt tune")
    import pandas as pd
    rows = []
    for name in _study_names(list(args.name)):
        rows += tune(name, preset=args.preset, data_root=params.get("data_root"),
                     device=args.device, only=args.only)
    table = pd.DataFrame(rows, columns=["cell", "stage", "kind", "shape", "path", "ms", "error",
                                        "status", "how"])
    with pd.option_context("display.max_colwidth", 60, "display.width", 250):
        print(table.to_string(index=False))
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"table: {args.csv}")
    print(tune_summary(rows))
    return 0 if not any(r["status"].startswith("FAIL") for r in rows) else 1


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
    q.set_defaults(func=_guard(cmd_tune, prog="spt tune"))
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
    q.set_defaults(func=_guard(cmd_plan))


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
    q.set_defaults(func=_guard(cmd_batch))


def add_notebook_commands(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("notebooks", help="copy spt's notebooks to edit and run them",
                              description="spt's notebooks (the studies, the quickstart, the "
                              "walkthrough and the explorers) come with the package.")
    sub = p.add_subparsers(title="notebook commands", metavar="NOTEBOOKS_COMMAND")
    q = sub.add_parser("copy", help="copy them into DIR (to open in JupyterLab)")
    q.add_argument("dest", metavar="DIR", help="folder to copy the notebooks into (created)")
    q.add_argument("--force", action="store_true", help="replace notebooks already in DIR")
    q.set_defaults(func=_guard(cmd_notebooks_copy, "spt notebooks"))
    q = sub.add_parser("where", help="where spt's notebooks are, and which folder spt study uses")
    q.add_argument("--notebooks", help="as for spt study: a folder of notebooks")
    q.set_defaults(func=_guard(cmd_notebooks_where, "spt notebooks"))
    return p
