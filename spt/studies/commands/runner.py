"""Run study notebooks with papermill: one run (`run_study`) or a grid of runs (`run_batch`).

    run_study("04_data_scales", out_dir="out", preset="smoke")      # out/04_data_scales.ipynb
                                                                   # + out/04_data_scales/*.nc
    run_study("00_quickstart", out_dir="out", preset="smoke")       # the quickstart's smoke Setup
    run_batch("02_transformers_vs_s4", grid, out_dir="out", shard=(0, 2))

A batch grid (YAML) has `fixed` parameters and a `grid` of parameters whose lists are crossed:

    fixed: {preset: paper, data_root: /data/lra}
    grid:
      seeds: [[0], [1], [2]]
      device: [cuda]

Each batch run (one point of the grid) is one papermill run into ``<out>/<run name>/`` (its
results, its executed notebook, and DONE or FAILED). Runs with DONE are skipped; a failing run is
recorded and the others go on; ``shard=(i, n)`` takes the runs whose index is i modulo n, so n
GPUs / nodes cover every run exactly once. (A batch run's notebook then runs its study's cells.)
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import tempfile
import traceback
import uuid
from pathlib import Path
from typing import Optional

from ...atomic import writable_dir
from ..registry import notebook_study
from .notebooks import list_studies, notebooks_dir, study_notebook  # noqa: F401  (public here)
from .parameters import check_parameters, notebook_parameters  # noqa: F401  (public here)

KERNEL = "python3"


def kernel_config():
    """How papermill's kernel talks to it: over local Unix sockets where the system has them
    (the kernel then needs no TCP port, and ipykernel has nothing to warn about), else TCP."""
    from traitlets.config import Config

    config = Config()
    # each kernel gets its own socket prefix: jupyter_client's default ("kernel-ipc" in the working
    # directory) is shared by every kernel started there, and two runs at once would cross wires
    prefix = Path(tempfile.gettempdir()) / f"spt-kernel-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    if os.name == "posix" and len(str(prefix)) < 90:  # a Unix socket path holds ~107 bytes
        config.KernelManager.transport = "ipc"
        config.KernelManager.ip = str(prefix)
    return config


def kernel_manager(log_path: Path):
    """A kernel manager class whose kernel writes its own stdout and stderr to `log_path`, not
    to this terminal. What the notebook prints (the kernel's cells and the worker processes they
    start) reaches the notebook, and papermill's log, through ipykernel's capture of the kernel's
    output; the terminal copy ipykernel also writes would print each of those lines twice, along
    with the kernel's own log lines ("[IPKernelApp] ERROR | KeyboardInterrupt caught in kernel")."""
    from jupyter_client import AsyncKernelManager

    class QuietKernelManager(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd, **kw):
            with open(log_path, "ab") as f:  # the kernel holds its own copy of the descriptor
                return await super()._async_launch_kernel(kernel_cmd, **{**kw, "stdout": f,
                                                                         "stderr": f})
    return QuietKernelManager


def executed_path(out_dir: Path, stem: str) -> Path:
    """OUT/<stem>.ipynb, or OUT/<stem>.<pid>.ipynb while another live run is writing that one."""
    from ..machinery.claims import try_claim
    out_nb = out_dir / f"{stem}.ipynb"
    return out_nb if try_claim(out_nb) else out_dir / f"{stem}.{os.getpid()}.ipynb"


def preset_parameters(nb: Path, preset: str) -> dict:
    """The notebook parameters that run preset `preset`: {"preset": preset}, or the preset's
    settings for a notebook that has them as parameters (the quickstart:
    :attr:`Study.settings`)."""
    if "preset" in notebook_parameters(nb):
        return {"preset": preset}
    study = notebook_study(nb)
    if study is None or study.settings is None:
        from .parameters import ParameterError
        raise ParameterError(f"{nb.name} has no presets (no parameter 'preset'): set its "
                             f"parameters with -p NAME VALUE (`papermill --help-notebook {nb}`)")
    try:
        return study.settings.parameters(preset)
    except ValueError as e:
        from .parameters import ParameterError
        raise ParameterError(f"{nb.name}: {e}") from None


def run_study(name: str, out_dir, *, preset: Optional[str] = None, parameters: Optional[dict] = None,
              nb_dir=None, log_output: bool = False, progress: bool = False) -> Path:
    """Execute the study notebook with papermill (kernel python3) into ``out_dir/<name>.ipynb``
    (``<name>.<pid>.ipynb`` while another run is writing that one); the notebook writes its
    results under ``out_dir``. log_output streams the notebook's output (one line per finished
    cell) to the ``papermill`` logger. Returns the executed notebook's path.
    A failing notebook raises papermill's PapermillExecutionError (the executed notebook, with
    the error in it, is still written); a kernel that dies raises nbclient's DeadKernelError.
    Either has ``kernel_log`` when the kernel wrote to its own stdout or stderr: the file that
    holds it (the last lines of a failing cell's worker processes may be only there)."""
    import papermill as pm

    nb = study_notebook(name, nb_dir)
    out_dir = Path(out_dir).resolve()
    params = {**(preset_parameters(nb, preset) if preset is not None else {}),
              **(parameters or {})}
    params["out_dir"] = str(out_dir)
    check_parameters(nb, params)
    writable_dir(out_dir)
    from ..machinery.claims import release
    out_nb = executed_path(out_dir, nb.stem)
    fd, kernel_log = tempfile.mkstemp(prefix=f"spt-kernel-{nb.stem}-", suffix=".log")
    os.close(fd)
    # papermill rewrites its output after every cell; it goes to `partial` and becomes out_nb
    # whole, so a full disk never leaves a half-written notebook under the executed one's name
    partial = out_nb.with_name(f".{out_nb.name}.partial")
    try:
        pm.execute_notebook(str(nb), str(partial), parameters=params, kernel_name=KERNEL,
                            config=kernel_config(), kernel_manager_class=kernel_manager(
                                Path(kernel_log)),
                            cwd=str(nb.parent), log_output=log_output, progress_bar=progress)
    except Exception as e:
        full = _disk_full(e, out_nb)
        if full is not None:
            partial.unlink(missing_ok=True)
            Path(kernel_log).unlink(missing_ok=True)
            raise full from None
        if partial.exists():  # a failed cell: the notebook with its error, for the traceback
            os.replace(partial, out_nb)
        # what the kernel and its processes wrote (its last lines may not have reached the
        # notebook before it failed or died): kept, and named in the error message
        if Path(kernel_log).stat().st_size:
            e.kernel_log = kernel_log
        else:
            Path(kernel_log).unlink(missing_ok=True)
        raise
    else:
        os.replace(partial, out_nb)
        Path(kernel_log).unlink(missing_ok=True)
    finally:
        release(out_nb)
    return out_nb


def _disk_full(e: BaseException, out_nb: Path):
    """A one-line DiskFullError when `e` (papermill writing the executed notebook `out_nb`, or the
    notebook's own DiskFullError) is the disk under its folder filling up; else None."""
    from ...atomic import DiskFullError, free_bytes, output_error
    out_dir = out_nb.parent
    free = free_bytes(out_dir)
    inner = getattr(e, "ename", None) == "DiskFullError"
    if not inner and not isinstance(output_error(e, out_nb, free), DiskFullError):
        return None
    return DiskFullError(out_dir, (
        f"no space left on the device holding {out_dir} ({free / 2 ** 20:.1f} MiB free): the "
        f"executed notebook was not written; finished cells and checkpoints are kept. Free some "
        f"space, then rerun the same command to resume"))


# ------------------------------------------------------------------------------------------ batch

def _unique_key_loader():
    """yaml's safe loader, refusing a mapping that names a key twice (yaml keeps the last one
    silently, so a grid's first list of seeds would vanish)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} appears twice in one mapping: keep one",
                        key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)
    return Loader


def read_grid(path) -> dict:
    """A batch grid file: {"fixed": {...}, "grid": {name: [values...]}} (YAML or JSON)."""
    import yaml

    path = Path(path)
    try:
        spec = yaml.load(path.read_text(), Loader=_unique_key_loader())
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"cannot read grid file {path}: {e}") from None
    if not isinstance(spec, dict) or not set(spec) <= {"fixed", "grid", "slurm"} or "grid" not in spec:
        raise ValueError(f"{path}: a grid file has a `grid:` mapping (parameter -> list of values) "
                         f"and optionally `fixed:` (parameter -> value) and `slurm:` (option -> "
                         f"value, for --slurm); got keys "
                         f"{sorted(spec) if isinstance(spec, dict) else type(spec).__name__}")
    for k, v in spec["grid"].items():
        if not isinstance(v, list) or not v:
            raise ValueError(f"{path}: grid parameter {k!r} must be a non-empty list of values")
    if not isinstance(spec.get("slurm") or {}, dict):
        raise ValueError(f"{path}: `slurm:` must map option names to values (partition: gpu, ...)")
    return {"fixed": spec.get("fixed") or {}, "grid": spec["grid"], "slurm": spec.get("slurm") or {}}


_SAFE = re.compile(r"[A-Za-z0-9.+-]+")


def _is_json_scalar(text: str) -> bool:
    try:
        return not isinstance(json.loads(text), str)
    except ValueError:
        return False


def run_name_part(v) -> str:
    """One grid value in a run folder's name: its text where that is a plain file name that
    names only this value (``0``, ``0.5``, ``cuda``, ``laptop``), else a readable slug plus a
    short hash of the exact value (``/data/lra v1`` -> ``data-lra-v1~3b5e0c``), so that distinct
    values never share a folder."""
    text = v if isinstance(v, str) else json.dumps(v)
    plain = bool(_SAFE.fullmatch(text)) and not text.startswith("-") and not text.endswith("-")
    if isinstance(v, str) and _is_json_scalar(text):
        plain = False  # the string "1" beside the number 1, "true" beside true
    if plain:
        return text
    slug = re.sub(r"[^A-Za-z0-9.+-]+", "-", text).strip("-")[:40] or "x"
    digest = hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest()[:6]
    return f"{slug}~{digest}"


def batch_runs(spec: dict) -> list[tuple[str, dict]]:
    """[(run name, notebook parameters)] of a batch grid in a fixed order: the product of the
    grid lists, in file order. Each is one papermill run of the notebook (whose own study cells
    it then runs or reuses) into ``OUT/<run name>/``; the name joins ``param=value`` per grid
    parameter (:func:`run_name_part`), distinct for distinct grid points."""
    keys = list(spec["grid"])
    both = sorted(set(keys) & set(spec["fixed"]))
    if both:
        raise ValueError(f"parameter {both[0]!r} is both fixed and in the grid: a batch run would "
                         f"take the grid's value silently; keep it in one of `fixed:` and `grid:`")
    runs, seen = [], {}
    for values in itertools.product(*(spec["grid"][k] for k in keys)):
        params = {**spec["fixed"], **dict(zip(keys, values))}
        name = "__".join(f"{k}={run_name_part(v)}" for k, v in zip(keys, values))
        if name in seen and seen[name] != values:
            raise ValueError(f"grid points {dict(zip(keys, seen[name]))} and "
                             f"{dict(zip(keys, values))} would share the run folder {name!r}")
        if name in seen:
            raise ValueError(f"the grid lists the point {dict(zip(keys, values))} twice (run "
                             f"{name!r}): list each value once")
        seen[name] = values
        runs.append((name, params))
    return runs


def shard_from_env(environ=os.environ) -> tuple[int, int]:
    """--shard auto: (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT) of a task of your own sbatch
    array (``#SBATCH --array=0-7``)."""
    try:
        return int(environ["SLURM_ARRAY_TASK_ID"]), int(environ["SLURM_ARRAY_TASK_COUNT"])
    except (KeyError, ValueError):
        raise ValueError("--shard auto reads SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT, which "
                         "SLURM sets in the tasks of a job array (#SBATCH --array=0-N); outside "
                         "one, give --shard i/n") from None


def parse_shard(text: str) -> tuple[int, int]:
    """"i/n", or "auto": this task's place in a SLURM job array (:func:`.slurm.shard_from_env`)."""
    if text == "auto":
        return shard_from_env()
    m = re.fullmatch(r"(\d+)/(\d+)", text or "")
    if not m or not 0 <= int(m.group(1)) < int(m.group(2)):
        raise ValueError(f"--shard must be i/n with 0 <= i < n (e.g. 0/4) or auto, got {text!r}")
    return int(m.group(1)), int(m.group(2))


def run_batch(name: str, spec: dict, out_dir, *, shard: tuple[int, int] = (0, 1), nb_dir=None,
              log=print, log_output: bool = False) -> dict:
    """Run this shard's batch runs, skipping finished ones; returns {run: "done" | "skipped" |
    "failed: <error>"} and writes it to ``out_dir/batch-status-<i>of<n>.json``."""
    nb = study_notebook(name, nb_dir)
    runs = batch_runs(spec)
    for _, params in runs:
        check_parameters(nb, {**params, "out_dir": ""})
    i, n = shard
    mine = [r for k, r in enumerate(runs) if k % n == i]
    out_dir = writable_dir(out_dir)  # a read-only folder or a file fails here, before any run
    status = {}
    log(f"{nb.stem}: {len(runs)} batch runs, shard {i}/{n} runs {len(mine)}")
    for run, params in mine:
        run_dir = out_dir / run
        done, failed = run_dir / "DONE", run_dir / "FAILED"
        if done.exists():
            status[run] = "skipped"
            log(f"  skip  {run} (DONE)")
            continue
        run_dir.mkdir(parents=True, exist_ok=True)
        failed.unlink(missing_ok=True)
        try:
            run_study(str(nb), run_dir, parameters=params, log_output=log_output)
        except Exception as e:  # a failing run must not stop the others
            msg = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
            failed.write_text(json.dumps({"parameters": params, "error": msg,
                                          "traceback": traceback.format_exc()}, indent=1))
            status[run] = f"failed: {msg}"
            log(f"  FAIL  {run}: {msg} (details: {failed})")
            continue
        done.write_text(json.dumps({"parameters": params}, indent=1))
        status[run] = "done"
        log(f"  done  {run}")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"batch-status-{i}of{n}.json").write_text(json.dumps(status, indent=1))
    return status
