"""Facts the `spt study` help texts, the Makefile and the docstrings state, each from its one
source: the steps `spt study check` takes, which studies take --model, which have a laptop preset."""
import re
import sys
from pathlib import Path

import pytest

from spt.cli import build_parser
from spt.studies.check import STEPS_IN_WORDS, TIMED_STEPS

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
             "spt/studies/check.py": " ".join(sys.modules["spt.studies.check"].__doc__.split())}
    for where, text in texts.items():
        counts = re.findall(r"\b(one|two|three|four|\d+) optimiser steps? (?:per|of each) stage", text)
        assert counts, f"{where} does not say how many optimiser steps per stage the check takes"
        assert set(counts) == {STEPS_IN_WORDS}, (where, counts)


@pytest.mark.parametrize("command", ["list", "run", "check", "plan", "batch"])
def test_no_help_text_prints_a_doubled_percent_sign(command):
    assert "%%" not in help_of("study", command)
