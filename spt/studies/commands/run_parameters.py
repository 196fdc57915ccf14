"""A study notebook's parameters cell, made from :meth:`Study.run`'s parameters: declared once here.

Every study notebook (01-09) runs its study with ``study.run(preset, out_dir, data_root=...,
seeds=..., workers=..., device=..., paths=..., tasks=..., models=..., baselines=...)``; its
parameters cell declares those arguments, and only those the study takes (``tasks`` where its results have a
"task" dim, ``models`` where :attr:`Study.takes_models`, ``baselines`` where
:attr:`Study.takes_baselines`). :func:`parameters_cell` writes that cell;
tests/studies/test_study_texts.py checks that each notebook holds it word for word and passes every
parameter to ``study.run``, and ``python tools/write_parameter_cells.py`` rewrites the cells after
a change here.

    print(parameters_cell(STUDIES["04_data_scales"]))
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..machinery.baselines import PRIORS
from ..machinery.study import Study

# what each preset is, in the words a parameter's help and `spt study run --help` use; how long
# each laptop preset takes is measured once, in the README's "Measured times"
PRESET_SAYS = {
    "smoke": "CPU, about a minute: checks the pipeline; its numbers mean nothing",
    "laptop": "2-core CPU, tens of minutes, measured in the README: the paper's finding at small "
              "scale",
    "paper": "GPU, the paper's hyper-parameters and data",
    "demo": "what `make demo` runs: the laptop preset's protocol with cheaper cells, fewer seeds",
}


@dataclass(frozen=True)
class Parameter:
    """One line of a parameters cell: ``name: type = default  # help``."""

    name: str
    type: str
    default: str  # source text
    help: str

    def line(self) -> str:
        return f"{self.name}: {self.type} = {self.default}  # {self.help}"


def run_arguments() -> list:
    """The names of Study.run's parameters, in its order (preset and out_dir first)."""
    return [p for p in inspect.signature(Study.run).parameters if p != "self"]


def presets_help(study: Study) -> str:
    """"smoke (...), laptop (...) or paper (...)": the study's presets and what each is."""
    parts = [f"{p} ({PRESET_SAYS[p]})" if p in PRESET_SAYS else p for p in study.presets]
    return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else parts[0]


def takes(study: Study, name: str) -> bool:
    """Whether the study's notebook has parameter `name` (one of :func:`run_arguments`)."""
    if name == "tasks":
        return "task" in study.dims
    if name == "models":
        return study.takes_models
    if name == "baselines":
        return study.takes_baselines
    return True


def parameters(study: Study) -> list:
    """The notebook parameters of `study`, one per argument of Study.run it takes."""
    tasks = _example_tasks(study)
    workers = 0 if "laptop" in study.presets else 1  # the laptop presets fill a CPU's cores
    like = f"the preset's {study.models_like}" if study.models_like else "the preset's first model"
    table = {
        "preset": Parameter("preset", "str", '"smoke"', presets_help(study)),
        "out_dir": Parameter("out_dir", "str", '"results"', f"results go to "
                             f"out_dir/{study.name}/ (one netCDF file per cell; finished cells "
                             f"are reused)"),
        "data_root": Parameter("data_root", "str", '""', "the real data sets' root, read by the "
                               "paper preset (spt data prepare TASK --root DIR); the other "
                               "presets generate or embed their data"),
        "seeds": Parameter("seeds", "list", "[]", "seeds to run; empty: the preset's own"),
        "workers": Parameter("workers", "int", str(workers), "cells run in this many worker "
                             "processes, 0: one per CPU core (1 with a GPU); results agree up to "
                             "float rounding (about 1e-7: each worker gets a share of the CPU "
                             "threads)"),
        "device": Parameter("device", "str", '"auto"', "cpu, cuda, cuda:N or auto"),
        "paths": Parameter("paths", "str", '"auto"', "how the models compute on the device: auto "
                           "(measured, checked against the references, cached: `spt tune`) or "
                           "reference; results agree up to float rounding and are reused across "
                           "both"),
        "tasks": Parameter("tasks", "list", "[]", f"run only these tasks of the preset, e.g. "
                           f"[{', '.join(tasks[:2])}] (empty: all)"),
        "models": Parameter("models", "dict", "{}", 'your layers beside the preset\'s models, '
                            '{name: "module:Class"} or {name: {layer, kwargs, bidirectional}}: '
                            f"each gets the protocol of {like}, sized like it"),
        "baselines": Parameter("baselines", "list", "[]", 'cheap priors trained from scratch '
                               'beside each scratch arm, under init "scratch+<prior>": '
                               f"{_priors_in_words()}, as study 14 runs them; empty: the preset's arms "
                               "only"),
    }
    missing = set(run_arguments()) - set(table)
    if missing:
        raise NotImplementedError(f"Study.run takes {sorted(missing)}: declare the notebook "
                                  f"parameter(s) in spt/studies/commands/run_parameters.py")
    return [table[name] for name in run_arguments() if takes(study, name)]


def parameters_cell(study: Study) -> str:
    """The source of the study notebook's parameters cell."""
    return "\n".join(p.line() for p in parameters(study))


def _example_tasks(study: Study) -> list:
    """The study's tasks, those of its paper preset when it has one."""
    preset = "paper" if "paper" in study.presets else "smoke"
    p = study.preset(preset, "DATA")
    return list(dict.fromkeys(str(dict(e.coords).get("task")) for e in p.entries))


def _priors_in_words() -> str:
    """Every cheap prior by the family it applies to: "alibi, ... (Transformers); ... (S4)"."""
    names = {"transformer": "Transformers", "s4": "S4"}
    return "; ".join(f"{', '.join(priors)} ({names.get(family, family)})"
                     for family, priors in PRIORS.items())
