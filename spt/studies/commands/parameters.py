"""A notebook's parameters checked before any work: their names, types and values.

Every notebook declares its parameters in its "parameters" cell, each with a type annotation
(``workers: int = 0  # ...``). Two routes set them:

* ``spt study run`` / ``spt study batch`` call :func:`check_parameters` before a kernel starts;
* plain ``papermill NB OUT -p name value`` starts the kernel itself, so every notebook's first cell
  after its parameters calls :func:`check_namespace` on its globals: the same checks, before the
  notebook reads data or trains, and a misspelled name (which papermill only warns about) is an
  error there too.

Both raise :class:`ParameterError` (a ValueError) naming the notebook, the parameter, what it takes
and, for a misspelled name, the nearest parameter.
"""
from __future__ import annotations

import difflib
import math
import re
from pathlib import Path
from typing import Any

from ...config import MAX_SEED
from ..machinery.study import check_data
from ..registry import notebook_study

# the notebooks' annotation -> the Python types a value may have
_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "list": (list,),
          "dict": (dict,)}
_EXAMPLES = {"list": "[0, 1, 2]", "int": "3", "float": "0.5", "bool": "true", "str": "text",
             "dict": "{a: 1}"}
DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:[0-9]+)?)$")
# names a kernel has before any cell runs (IPython's), besides the _-prefixed ones
_KERNEL_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}


class ParameterError(ValueError):
    """A notebook parameter with an unknown name, a wrong type or a value it cannot take."""

    def _render_traceback_(self) -> list:
        """What IPython shows in the notebook (and papermill reprints): this one line, not the
        frames of the checks that found it."""
        return [f"ParameterError: {self}"]


def notebook_parameters(nb: Path) -> dict:
    """{name: {"inferred_type_name", "default", "help"}} of the notebook's parameters cell
    (read quietly: papermill would log "Input Notebook:" here and again when it executes it)."""
    import logging

    import papermill as pm
    log = logging.getLogger("papermill")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        return pm.inspect_notebook(str(nb))
    finally:
        log.setLevel(level)


def check_parameters(nb: Path, params: dict, runs_here: bool = True) -> None:
    """Names, types (the notebook's annotations) and values of `params` (the ones given, not the
    notebook's defaults) for notebook `nb`; raises ParameterError naming the first wrong one.
    runs_here=False (a batch submitted to SLURM from a login node): the device is checked for its
    form only, not against this machine's GPUs; the compute node checks it again before it runs."""
    nb = Path(nb)
    known = notebook_parameters(nb)
    for name in params:
        if name not in known:
            near = difflib.get_close_matches(name, list(known), n=1)
            raise ParameterError(
                f"{nb.name} has no parameter {name!r}"
                + (f" (did you mean {near[0]!r}?)" if near else "")
                + f"; its parameters: {', '.join(known)} (`papermill --help-notebook {nb}`)")
    for name, value in params.items():
        _check_type(nb.name, name, value, known[name]["inferred_type_name"])
    _check_values(nb, params, runs_here)


def check_namespace(notebook: str, namespace: dict) -> None:
    """Check the parameters of a running notebook (its ``globals()``), for plain papermill runs:
    every declared parameter's type and value, and any other plain value in the namespace (a
    parameter papermill injected under a name the notebook does not declare). Call it in the
    first cell after the parameters cell, before any other import."""
    from .notebooks import study_notebook

    nb = study_notebook(notebook)
    given = {k: v for k, v in namespace.items()
             if not k.startswith("_") and k not in _KERNEL_NAMES and _plain(v)}
    check_parameters(nb, given)


def _plain(v: Any) -> bool:
    """A value papermill can inject (JSON-like data), not a module, class or function."""
    return v is None or isinstance(v, (bool, int, float, str, list, dict, tuple))


def _check_type(notebook: str, name: str, value: Any, want: str) -> None:
    ok = _TYPES.get(want)
    if ok and (not isinstance(value, ok) or (want != "bool" and isinstance(value, bool))):
        raise ParameterError(f"{notebook}: parameter {name} takes type {want} (e.g. -p {name} "
                             f"{_EXAMPLES[want]!r}), got {value!r} ({type(value).__name__})")


def _fail(notebook: str, name: str, takes: str, value: Any) -> None:
    raise ParameterError(f"{notebook}: parameter {name} takes {takes}, got {value!r}")


def _check_values(nb: Path, params: dict, runs_here: bool = True) -> None:
    """The values no notebook can use, whatever its study: negative counts, seeds that repeat,
    a device this machine lacks; and for a study, its presets, tasks and models."""
    name = nb.name
    for key, v in params.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, int) and v < 0:
            _fail(name, key, "a number >= 0 (counts, sizes and seeds are never negative)", v)
        if isinstance(v, float) and not math.isfinite(v):
            _fail(name, key, "a finite number", v)
    seeds = params.get("seeds")
    if isinstance(seeds, list):
        if not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_SEED
                   for s in seeds):
            _fail(name, "seeds", f"a list of ints from 0 to {MAX_SEED} (e.g. [0, 1, 2])", seeds)
        if len(set(seeds)) != len(seeds):
            _fail(name, "seeds", "distinct seeds (a repeated seed would compute the same run "
                                 "twice)", seeds)
    if "device" in params:
        _check_device(name, params["device"], runs_here)
    if "paths" in params and params["paths"] not in ("auto", "reference"):
        _fail(name, "paths", "auto or reference", params["paths"])
    study = notebook_study(nb)
    if study is not None and any(k in params for k in ("preset", "tasks", "models",
                                                       "data_root")):
        _check_study(name, study, params)


def _check_device(notebook: str, device: Any, runs_here: bool = True) -> None:
    import torch

    device = str(device)
    if not DEVICE.match(device):
        _fail(notebook, "device", "auto, cpu, cuda, cuda:N or mps", device)
    if not runs_here:
        return
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ParameterError(f"{notebook}: parameter device is {device!r}, but this machine "
                                 f"has no CUDA device torch can use (torch.cuda.is_available() is "
                                 f"False; torch {torch.__version__}): pass -p device cpu, or auto "
                                 f"to use a GPU where there is one")
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            _fail(notebook, "device", f"cuda:0 .. cuda:{torch.cuda.device_count() - 1} on this "
                                      f"machine", device)
    if device == "mps" and not torch.backends.mps.is_available():
        raise ParameterError(f"{notebook}: parameter device is 'mps', but this machine has no "
                             f"Apple GPU torch can use: pass -p device cpu or auto")


def _check_study(notebook: str, study, params: dict) -> None:
    """The preset exists, its tasks include `tasks`, your `models` build, and a preset that reads
    real data has a data_root holding every task it needs."""
    preset = params.get("preset", "smoke")
    if isinstance(preset, str) and preset not in study.presets:
        raise ParameterError(f"{notebook}: unknown preset {preset!r}; choose from "
                             f"{', '.join(study.presets)}")
    if not isinstance(preset, str):
        return
    try:
        p = study.preset(preset, params.get("data_root") or None,
                         tasks=params.get("tasks") or None, models=params.get("models") or None)
    except (ValueError, TypeError) as e:
        raise ParameterError(f"{notebook}: {e}") from None
    check_data([e.task for e in p.entries], study.name)
