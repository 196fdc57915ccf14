"""Facts the `spt study` help texts, the Makefile and the docstrings state, each from its one
source: the steps `spt study check` takes, which studies take --model, which have a laptop preset."""
import json
import re
import sys
from pathlib import Path

import pytest

from spt.cli import build_parser, main
from spt.studies.commands import run_parameters
from spt.studies.commands.check import STEPS_IN_WORDS, TIMED_STEPS
from spt.studies.commands.run_parameters import parameters_cell
from spt.studies.machinery.study import Study
from spt.studies.registry import QUICKSTART, STUDIES

ROOT = Path(__file__).resolve().parents[2]


def help_of(*command) -> str:
    """The --help text of `spt COMMAND ...`, as argparse prints it."""
    parser = build_parser()
    for name in command:
        parser = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"
                      ).choices[name]
    return " ".join(parser.format_help().split())


def test_every_text_on_the_check_says_how_many_steps_it_takes():
    assert STEPS_IN_WORDS == ["zero", "one", "two", "three"][TIMED_STEPS]
    texts = {"spt study check --help": help_of("study", "check"),
             "Makefile": " ".join((ROOT / "Makefile").read_text().split()),
             "spt/studies/commands/check.py":
                 " ".join(sys.modules["spt.studies.commands.check"].__doc__.split())}
    for where, text in texts.items():
        counts = re.findall(r"\b(one|two|three|four|\d+) optimiser steps? (?:per|of each) stage", text)
        assert counts, f"{where} does not say how many optimiser steps per stage the check takes"
        assert set(counts) == {STEPS_IN_WORDS}, (where, counts)


@pytest.mark.parametrize("command", ["list", "run", "check", "plan", "batch"])
def test_no_help_text_prints_a_doubled_percent_sign(command):
    assert "%%" not in help_of("study", command)


# ------------------------------------------------------- the study notebooks' parameters cells

def _cells(name):
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"], \
        next("".join(c["source"]) for c in nb["cells"]
             if "parameters" in c["metadata"].get("tags", []))


@pytest.mark.parametrize("name", list(STUDIES))
def test_a_study_notebook_declares_and_passes_exactly_what_study_run_takes(name):
    study = STUDIES[name]
    code, cell = _cells(name)
    assert cell == parameters_cell(study), (
        f"notebooks/{name}.ipynb: its parameters cell is not spt.studies.commands.run_parameters' (run "
        f"`python tools/write_parameter_cells.py`)")
    names = [p.name for p in run_parameters.parameters(study)]
    assert names[:2] == ["preset", "out_dir"] and set(names) <= set(run_parameters.run_arguments())
    assert ("models" in names) == study.takes_models and ("tasks" in names) == ("task" in study.dims)
    call = next(src for src in code if "study.run(" in src)
    call = call[call.index("study.run("):]
    call = call[:call.index(")\n") + 1] if ")\n" in call else call
    assert call.startswith("study.run(preset, out_dir,"), call
    for p in names[2:]:  # as the notebook has it: Study.run reads an empty value as "none given"
        assert re.search(rf"\b{p}={p}(,|\))", call), f"{name}: study.run(...) does not pass {p} as is"


def test_the_parameters_table_covers_every_argument_of_study_run(monkeypatch):
    def run(self, preset="smoke", out_dir="results", *, data_root=None, budget=None):
        pass
    monkeypatch.setattr(Study, "run", run)
    with pytest.raises(NotImplementedError, match=r"\['budget'\].*run_parameters.py"):
        run_parameters.parameters(STUDIES["04_data_scales"])


def test_no_help_text_states_a_run_time():
    """Times are measured, and stated once: in the README's "Measured times"."""
    time = re.compile(r"\b\d+(-\d+)?\s*(min|minutes|s|h|hours)\b")
    for name in STUDIES:
        assert not time.search(_cells(name)[1]), name
    assert not time.search(help_of("study", "run")), help_of("study", "run")


def test_spt_study_list_shows_every_study_its_presets_and_the_model_option(capsys):
    assert main(["study", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert list(rows) == [QUICKSTART.name, *STUDIES]
    for name, study in [(QUICKSTART.name, QUICKSTART), *STUDIES.items()]:
        assert ", ".join(study.presets) in rows[name]
        assert rows[name].split()[len(study.presets) + 1] == (
            "yes" if name in STUDIES and study.takes_models else "-"), rows[name]
    assert "12_your_architecture" in lines[-1]


def test_the_quickstart_takes_every_preset_by_name():
    """`spt study run 00_quickstart --preset P` passes P's settings as the notebook's parameters:
    they pass its checks, and the notebook's Setup of them is the preset's."""
    from spt.studies import quickstart
    from spt.studies.commands.parameters import check_parameters
    from spt.studies.commands.runner import preset_parameters, study_notebook

    nb = study_notebook(QUICKSTART.name)
    for preset in QUICKSTART.presets:
        params = preset_parameters(nb, preset)
        check_parameters(nb, params)
        fields = {k: v for k, v in params.items() if k not in ("seeds", "workers")}
        assert quickstart.Setup(**fields) == quickstart.SETUPS[preset]
        assert params["seeds"] == list(QUICKSTART.preset(preset).seeds)
    with pytest.raises(ValueError, match="unknown preset 'paper'; choose from smoke, laptop"):
        preset_parameters(nb, "paper")
