"""`spt study run | batch | list`: papermill runs, grids, shards, failures, reruns."""
import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from spt.cli import main
from spt.studies.commands.runner import batch_runs, parse_shard, read_grid, run_batch, run_study

pytest.importorskip("papermill")


def tiny_notebook(path):
    """A notebook with a parameters cell; it writes out_dir/value.json and fails when x == 3."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    p = nbformat.v4.new_code_cell('x: int = 1  # the value\nout_dir: str = "."  # where to write')
    p.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# Tiny study"), p, nbformat.v4.new_code_cell(
        "import json, pathlib\nif x == 3:\n    raise RuntimeError('x is 3')\n"
        "pathlib.Path(out_dir).mkdir(parents=True, exist_ok=True)\n"
        "(pathlib.Path(out_dir) / 'value.json').write_text(json.dumps({'x': x}))")]
    nbformat.write(nb, path)
    return path


def test_grid_file_and_shards_cover_every_cell_once(tmp_path):
    g = tmp_path / "grid.yaml"
    g.write_text("fixed: {out_dir: ignored}\ngrid:\n  x: [1, 2]\n  y: [a, b]\n")
    spec = read_grid(g)
    cells = batch_runs(spec)
    assert [c for c, _ in cells] == ["x=1__y=a", "x=1__y=b", "x=2__y=a", "x=2__y=b"]
    assert cells[3][1] == {"out_dir": "ignored", "x": 2, "y": "b"}
    assert parse_shard("1/2") == (1, 2)
    for bad in ("2/2", "x", "1/0"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)
    g.write_text("grid: {x: 3}\n")
    with pytest.raises(ValueError, match="non-empty list"):
        read_grid(g)


def test_a_key_twice_in_a_grid_file_or_in_fixed_and_grid_is_refused_naming_it(tmp_path):
    """yaml keeps a repeated key's last value silently: the first list of seeds would vanish."""
    g = tmp_path / "grid.yaml"
    g.write_text("grid:\n  seeds: [[0]]\n  x: [1]\n  seeds: [[1]]\n")
    with pytest.raises(ValueError, match=r"grid.yaml: .*the key 'seeds' appears twice"):
        read_grid(g)
    g.write_text("fixed: {x: 1, out_dir: a, x: 2}\ngrid: {y: [1]}\n")
    with pytest.raises(ValueError, match="the key 'x' appears twice"):
        read_grid(g)
    g.write_text("fixed: {x: 1}\ngrid: {x: [1, 2], y: [1]}\n")
    with pytest.raises(ValueError, match="parameter 'x' is both fixed and in the grid"):
        batch_runs(read_grid(g))


def test_distinct_grid_values_get_distinct_run_folders():
    roots = ["/data/lra v1", "/data/lra_v1", "/data/lra/v1", "/data/lrä v1", "/data/lrö v1",
             "data-lra-v1"]
    spec = {"fixed": {}, "grid": {"data_root": roots, "seeds": [[0], [1], [0, 1], "0", 0]}}
    runs = batch_runs(spec)
    names = [name for name, _ in runs]
    assert len(set(names)) == len(names) == len(roots) * 5
    assert [n for n, p in runs if p["seeds"] == 0] == [
        n for n in names if n.endswith("__seeds=0")]  # a plain value keeps its own text
    assert "data_root=data-lra-v1__seeds=0" in names
    assert all(re.fullmatch(r"[A-Za-z0-9.+=_~-]+", n) for n in names), names
    assert batch_runs(spec) == runs  # the same names every time (a rerun finds its DONE runs)
    with pytest.raises(ValueError, match="lists the point .* twice"):
        batch_runs({"fixed": {}, "grid": {"x": [1, 2, 1]}})


def test_two_grid_points_that_would_share_a_folder_are_an_error(monkeypatch):
    from spt.studies.commands import runner
    monkeypatch.setattr(runner, "run_name_part", lambda v: "same")  # a hash collision
    with pytest.raises(ValueError, match="would share the run folder 'x=same'"):
        batch_runs({"fixed": {}, "grid": {"x": [1, 2]}})


def test_batch_shards_cover_every_cell_and_a_failure_spares_the_others(tmp_path):
    nb = tiny_notebook(tmp_path / "tiny.ipynb")
    spec = {"fixed": {}, "grid": {"x": [1, 2, 3, 4]}}
    out = tmp_path / "out"
    s0 = run_batch(str(nb), spec, out, shard=(0, 2), log=lambda s: None)
    s1 = run_batch(str(nb), spec, out, shard=(1, 2), log=lambda s: None)
    assert set(s0) | set(s1) == {"x=1", "x=2", "x=3", "x=4"} and not set(s0) & set(s1)
    assert s0["x=3"].startswith("failed: ") and "x is 3" in s0["x=3"]
    assert (out / "x=3" / "FAILED").exists() and not (out / "x=3" / "DONE").exists()
    for x in (1, 2, 4):
        assert json.loads((out / f"x={x}" / "value.json").read_text()) == {"x": x}
        assert (out / f"x={x}" / "DONE").exists() and (out / f"x={x}" / "tiny.ipynb").exists()
    assert json.loads((out / "batch-status-0of2.json").read_text()) == s0
    # rerun: finished cells are skipped, the failed one is tried again
    again = run_batch(str(nb), spec, out, log=lambda s: None)
    assert again == {"x=1": "skipped", "x=2": "skipped", "x=3": again["x=3"], "x=4": "skipped"}
    assert again["x=3"].startswith("failed")


def test_run_study_checks_parameters_and_saves_the_executed_notebook(tmp_path):
    nb = tiny_notebook(tmp_path / "tiny.ipynb")
    out = run_study(str(nb), tmp_path / "o", parameters={"x": 5})
    assert out == (tmp_path / "o" / "tiny.ipynb").resolve() and out.exists()
    assert json.loads((tmp_path / "o" / "value.json").read_text()) == {"x": 5}
    with pytest.raises(ValueError, match="no parameter.*'nope'.*x, out_dir"):
        run_study(str(nb), tmp_path / "o", parameters={"nope": 1})


def test_a_second_run_names_its_own_notebook_and_the_results_folder_that_exists(capsys,
                                                                               tmp_path):
    from spt.studies.machinery.claims import release, try_claim
    nb = tiny_notebook(tmp_path / "tiny.ipynb")
    out = tmp_path / "o"
    (out / "tiny").mkdir(parents=True)  # the results folder of a study notebook
    first = out / "tiny.ipynb"
    assert try_claim(first)  # the first run is writing OUT/tiny.ipynb
    try:
        assert main(["study", "run", str(nb), "--out", str(out), "--quiet"]) == 0
    finally:
        release(first)
    printed = capsys.readouterr().out.splitlines()
    second = out.resolve() / f"tiny.{os.getpid()}.ipynb"
    assert printed == [f"executed notebook: {second} (another run was writing "
                       f"{out.resolve() / 'tiny.ipynb'})", f"results: {out.resolve() / 'tiny'}/"]
    assert second.exists()


@pytest.mark.serial
def test_what_the_notebook_and_its_worker_processes_print_shows_once(tmp_path):
    """The kernel's own stdout and stderr are not the terminal's: a line printed by a process the
    notebook starts (a cell's worker) reaches the terminal once, through papermill's log."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    p = nbformat.v4.new_code_cell('out_dir: str = "."  # where to write')
    p.metadata["tags"] = ["parameters"]
    nb.cells = [p, nbformat.v4.new_code_cell(
        "import subprocess, sys\nprint('from the kernel')\n"
        "subprocess.run([sys.executable, '-c', 'print(\"from a worker\")'])"),
        nbformat.v4.new_code_cell("import time\ntime.sleep(1)")]  # a study's tables and plots
    nbformat.write(nb, tmp_path / "printing.ipynb")
    # ipykernel captures its processes' output only outside pytest (PYTEST_CURRENT_TEST)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    run = subprocess.run([sys.executable, "-m", "spt.cli", "study", "run",
                          str(tmp_path / "printing.ipynb"), "--out", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         timeout=300)
    lines = run.stdout.splitlines()
    assert run.returncode == 0, lines
    assert lines.count("from the kernel") == 1 and lines.count("from a worker") == 1, lines


def test_a_bad_parameter_is_one_line_in_the_notebook_and_in_papermills_error(tmp_path):
    import papermill as pm
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(
        "from spt.studies.commands.parameters import check_parameters\n"
        f"check_parameters({str(tiny_notebook(tmp_path / 'tiny.ipynb'))!r}, {{'x': 'three'}})")]
    nbformat.write(nb, tmp_path / "checks.ipynb")
    with pytest.raises(pm.PapermillExecutionError) as err:
        pm.execute_notebook(str(tmp_path / "checks.ipynb"), str(tmp_path / "out.ipynb"),
                            kernel_name="python3", progress_bar=False)
    said = [s for s in str(err.value).splitlines() if s.strip() and not s.startswith("---")]
    assert said == ['Exception encountered at "In [1]":', "ParameterError: tiny.ipynb: parameter "
                    "x takes type int (e.g. -p x '3'), got 'three' (str)"], said


def test_cli_study_list_and_errors(capsys, tmp_path):
    assert main(["study", "list"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:-1]]
    assert names == ["00_quickstart", "01_lra_transformers", "02_transformers_vs_s4", "03_explicit_priors",
                     "04_data_scales", "05_text_corpus_pretraining", "06_kernel_decay",
                     "07_additional_modalities", "08_compute_tied", "09_model_scales",
                     "13_modern_architectures", "14_priors_and_range"]
    assert main(["study", "run", "99_nothing", "--out", str(tmp_path)]) == 2
    assert "no study '99_nothing'" in capsys.readouterr().err
    nb = tiny_notebook(tmp_path / "tiny.ipynb")
    g = tmp_path / "g.yaml"
    g.write_text("grid: {x: [2, 3]}\n")
    assert main(["study", "batch", str(nb), "--grid", str(g), "--out", str(tmp_path / "b")]) == 1
    assert "1 ok, 1 failed" in capsys.readouterr().out


def test_each_kernel_gets_its_own_sockets_outside_the_notebooks_folder():
    from spt.studies.commands.runner import kernel_config

    a, b = kernel_config(), kernel_config()
    if "ip" in a.KernelManager:  # Unix sockets (posix): a prefix of their own, in the temp dir
        assert a.KernelManager.ip != b.KernelManager.ip
        assert "notebooks" not in a.KernelManager.ip
