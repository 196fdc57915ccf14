"""The shape of the package: every import arrow points down (no cycle among spt's modules), and a
study is one object whose run, cells, deviations and table are the methods of one class."""
import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "spt"


def module_graph() -> dict:
    """{module: {modules it imports}} over every import statement of every module under spt/
    (function-level imports too: a lazy import is still an arrow)."""
    mods = {}
    for p in ROOT.rglob("*.py"):
        parts = p.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = p
    edges = {m: set() for m in mods}
    for m, p in mods.items():
        package = m if p.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")
                    up = up[:len(up) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            else:
                continue
            for t in targets:
                parts = t.split(".")
                for k in range(len(parts), 0, -1):
                    candidate = ".".join(parts[:k])
                    if candidate in mods:
                        if candidate != m:
                            edges[m].add(candidate)
                        break
    return edges


def cycles(edges: dict) -> list:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_spt():
    edges = module_graph()
    assert len(edges) > 80 and "spt.studies.machinery.study" in edges["spt.studies.transformers_vs_s4"]
    assert cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


STUDY_MODULES = ["quickstart", "lra_transformers", "transformers_vs_s4", "explicit_priors",
                 "data_scales", "text_corpus", "kernel_decay", "modalities", "compute_tied",
                 "model_scales"]


@pytest.mark.parametrize("name", STUDY_MODULES)
def test_a_study_is_one_object_whose_methods_are_the_study_class(name):
    from spt.studies.machinery.study import Study
    study = importlib.import_module(f"spt.studies.{name}").STUDY
    assert type(study) is Study
    for method in ("run", "cells", "deviations", "table", "stage_views", "preset"):
        assert getattr(type(study), method) is getattr(Study, method)
        assert getattr(study, method).__func__ is getattr(Study, method)
    assert study.name.startswith(name == "quickstart" and "00" or "0")
    assert study.dims[-1] == "seed" and set(study.presets) >= {"smoke"}


def test_the_registry_holds_every_study_once():
    from spt.studies import QUICKSTART, STUDIES, study
    assert [s.name[:2] for s in STUDIES.values()] == [f"0{i}" for i in range(1, 10)] + ["13", "14"]
    assert study("00_quickstart") is QUICKSTART and study(STUDIES["06_kernel_decay"]) is \
        STUDIES["06_kernel_decay"]
    with pytest.raises(ValueError, match="no study"):
        study("99_nothing")


# The studies' floors, from the bottom: spt/studies/machinery/ (what a study is made of), the study
# modules (spt/studies/*.py that define a STUDY), the registry (every study by name),
# spt/studies/commands/ (what takes a study by name), and on top the CLI, the laptop results
# tables and the package itself.
REGISTRY = "spt.studies.registry"
STUDIES_TOP = {"spt.studies", "spt.studies.cli", "spt.studies.cli_parsers",
               "spt.studies.laptop_results"}


def studies_floors(edges: dict) -> dict:
    """{floor: its modules} for the floors of spt.studies, bottom first."""
    machinery = {m for m in edges if m.startswith("spt.studies.machinery")}
    commands = {m for m in edges if m.startswith("spt.studies.commands")}
    studies = {m for m in edges if m.startswith("spt.studies.") and m.count(".") == 2
               and m not in STUDIES_TOP | {REGISTRY, "spt.studies.machinery",
                                           "spt.studies.commands"}}
    return {"machinery": machinery, "studies": studies, "registry": {REGISTRY},
            "commands": commands, "top": STUDIES_TOP & set(edges)}


def floor_breaches(edges: dict) -> list:
    """Every arrow that leaves its floor the wrong way: to a floor above, or sideways from one study
    to another; and anything outside spt.studies (but spt.cli) importing it."""
    floors = studies_floors(edges)
    order = list(floors)
    floor_of = {m: i for i, f in enumerate(order) for m in floors[f]}
    bad = []
    for m, targets in edges.items():
        for t in targets:
            if m in floor_of and t in floor_of:
                if floor_of[t] > floor_of[m] or (m != t and m in floors["studies"]
                                                 and t in floors["studies"]):
                    bad.append((m, t))
            elif not m.startswith("spt.studies") and m != "spt.cli" and t.startswith("spt.studies"):
                bad.append((m, t))
    return sorted(bad)


def test_the_studies_floors_point_down_machinery_studies_registry_commands():
    edges = module_graph()
    floors = studies_floors(edges)
    studies = floors["studies"]
    assert len(studies) == 12 and "spt.studies.modern_architectures" in studies
    assert len(floors["machinery"]) > 15 and "spt.studies.machinery.cells" in floors["machinery"]
    assert {"spt.studies.commands.runner", "spt.studies.commands.check",
            "spt.studies.commands.plan"} <= floors["commands"]
    for s in studies:  # every study module is a study
        assert (ROOT / "studies" / f"{s.rsplit('.', 1)[1]}.py").read_text().count("STUDY = ") == 1
    assert edges[REGISTRY] >= studies  # the registry imports every study
    assert REGISTRY in edges["spt.studies.commands.check"]  # a command finds studies there
    assert floor_breaches(edges) == []


def test_the_floor_check_finds_arrows_that_run_up_or_sideways():
    edges = {"spt.studies.a_study": {"spt.studies.b_study"}, "spt.studies.b_study": set(),
             "spt.studies.machinery.cells": {"spt.studies.registry"},
             "spt.studies.c_study": {"spt.studies.commands.runner"},
             "spt.studies.commands.runner": {"spt.studies.registry"},
             "spt.studies.registry": {"spt.studies.a_study", "spt.studies.commands.plan"},
             "spt.studies.commands.plan": set(), "spt.train.engine": {"spt.studies.registry"}}
    assert floor_breaches(edges) == [("spt.studies.a_study", "spt.studies.b_study"),
                                     ("spt.studies.c_study", "spt.studies.commands.runner"),
                                     ("spt.studies.machinery.cells", "spt.studies.registry"),
                                     ("spt.studies.registry", "spt.studies.commands.plan"),
                                     ("spt.train.engine", "spt.studies.registry")]


def filled_from_elsewhere(path: Path) -> list:
    """The module-level statements of `path` that fill a name imported from another module
    (``KNOWN.update(...)``, ``TABLE[key] = ...``, ``REGISTRY.append(...)``): a lookup filled at import
    by whoever imports last, which no import arrow shows."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = {a.asname or a.name.split(".")[0] for node in tree.body
                if isinstance(node, (ast.Import, ast.ImportFrom)) for a in node.names}
    fills = {"update", "setdefault", "append", "extend", "add", "insert", "__setitem__"}
    out = []
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr in fills:
            targets = [node.value.func.value]
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = [t.value for t in getattr(node, "targets", [getattr(node, "target", None)])
                       if isinstance(t, (ast.Subscript, ast.Attribute))]
        out += [f"{path.name}:{node.lineno}" for t in targets
                if isinstance(t, ast.Name) and t.id in imported]
    return out


def test_no_module_fills_another_modules_table_at_import():
    assert [hit for p in sorted(ROOT.rglob("*.py")) for hit in filled_from_elsewhere(p)] == []


def test_the_fill_finder_finds_a_table_filled_at_import(tmp_path):
    p = tmp_path / "registry.py"
    p.write_text("from .study import KNOWN, OTHER\nimport spt\nLOCAL = {}\nLOCAL.update(a=1)\n"
                 "KNOWN.update({'a': 1})\nOTHER['b'] = 2\nspt.x = 3\n")
    assert filled_from_elsewhere(p) == ["registry.py:5", "registry.py:6", "registry.py:7"]


MODEL_KINDS = {"s4", "s4d", "dlr", "mamba", "mamba2", "gated_deltanet", "gla", "lru"}


def kind_switches(path: Path) -> list:
    """Where a module tells models apart by their type instead of asking the config: an
    ``isinstance(x, ...Config)`` of a model config, or ``x.kind == "dlr"`` (==, !=, in) on a model
    kind, outside functions that take one family's config (a parameter annotated with it)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typed = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             and any(a.annotation is not None and "Config" in ast.unparse(a.annotation)
                     for a in f.args.args + f.args.kwonlyargs)
             for n in ast.walk(f)}
    out = []
    for node in ast.walk(tree):
        if id(node) in typed:
            continue
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance" \
                and len(node.args) == 2 and "Config" in ast.unparse(node.args[1]):
            out.append(f"{path.name}:{node.lineno}")
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) \
                and node.left.attr == "kind":
            strings = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
            if strings & MODEL_KINDS:
                out.append(f"{path.name}:{node.lineno}")
    return out


def test_the_studies_ask_a_model_config_instead_of_switching_on_its_kind():
    """Sizes, priors, smoke shapes and departures come from the config's own answers
    (ModelConfigBase: smoke_shape, counting_form, departures; SSMConfig: takes_task_init, dt_rate,
    ssm_copies), so a new model needs no edit here."""
    paths = sorted((ROOT / "studies").rglob("*.py")) + [ROOT / "models" / "model.py"]
    assert [hit for p in paths for hit in kind_switches(p)] == []


def test_the_kind_switch_finder_finds_one(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f(model):\n    return model.kind == 'dlr' or isinstance(model, SSMConfig)\n"
                 "def g(cfg: SSMConfig):\n    return cfg.kind != 'dlr'\n"
                 "def h(o):\n    return o.kind == 'masked'\n")
    assert kind_switches(p) == ["m.py:2", "m.py:2"]
