"""The training loop reads top to bottom: no function of the engine is longer than a screen."""
import ast
from pathlib import Path

import spt.train.engine as engine


def test_no_engine_function_is_over_60_lines():
    tree = ast.parse(Path(engine.__file__).read_text(encoding="utf-8"))
    long = [(n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > 60]
    assert not long, f"functions of {engine.__file__} over 60 lines: {long}"


def test_the_run_state_round_trips_through_its_saved_dict():
    from spt.train.run_state import RunState
    s = RunState(plateau={"best": 0.0, "bad": 1, "scale": 0.5}, epoch=2, step=9, totals={"n": 3.0})
    assert RunState.from_saved(s.to_dict(), plateau={}) == s
    s.totals = None
    assert "totals" not in s.to_dict() and RunState.from_saved(s.to_dict(), plateau={}) == s
