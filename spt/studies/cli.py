"""`spt study list | run | batch | plan | check`, `spt tune`, `spt notebooks`: the studies from the
command line (the notebooks through papermill). Their arguments: :mod:`spt.studies.cli_parsers`."""
from __future__ import annotations

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


def all_studies() -> dict:
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
    for name, s in all_studies().items():
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
                             f"{', '.join(n for n in all_studies() if _takes_model(n))} (and "
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
    from .commands.check import check
    from .commands.check_results import (
        ESTIMATE_ASSUMPTION,
        as_dataframe,
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


def guarded(fn, prog: str = "spt study"):
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
