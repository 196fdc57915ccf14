"""The quick-start notebook runs through papermill with tiny parameters and writes its results;
the comparison routine and the result files behave."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spt.results import load_results, read_result, run_config, write_result

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "00_quickstart.ipynb"
TINY = dict(seeds=[0, 1], image_size=8, n_train=24, val_size=30, d_model=16, n_layers=1, n_heads=2,
            pretrain_epochs=2, max_epochs=3, patience=2, eval_every=2, pretrain_eval_every=1,
            scratch_lrs=[0.003, 0.001],  # the per-seed scratch grid the notebook offers
            continuous_reference=True)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    papermill = pytest.importorskip("papermill")
    out = tmp_path_factory.mktemp("quickstart")
    papermill.execute_notebook(str(NOTEBOOK), str(out / "executed.ipynb"), kernel_name="python3",
                               parameters={**TINY, "out_dir": str(out), "workers": 1},
                               progress_bar=False,
                               cwd=str(ROOT))
    return out


def test_notebook_writes_quickstart_nc(executed):
    ds = read_result(executed / "quickstart.nc")
    # the laptop preset's structure, shrunk: pixel tokens, the continuous-pixel reference; scratch
    # over the per-seed lr grid that TINY asks for
    assert set(ds.init.values) == {"scratch", "scratch_continuous", "spt"}
    assert list(ds.seed.values) == [0, 1]
    assert ds.test_accuracy.dims == ("init", "seed")
    assert np.isfinite(ds.test_accuracy).all() and ((0 <= ds.test_accuracy) & (ds.test_accuracy <= 1)).all()
    cfg = run_config(ds)
    assert cfg["model"]["d_model"] == 16 and cfg["seeds"] == [0, 1]
    assert cfg["setup"]["tokens"] is True and cfg["setup"]["scratch_lrs"] == [0.003, 0.001]
    assert (ds.steps > 0).all() and (ds.pretrain_steps > 0).all()
    assert list(ds.epochs_run.sel(init="scratch").values) == [3, 3]
    assert (ds.grid_steps.sel(init="scratch") > ds.steps.sel(init="scratch")).all()
    assert set(np.round(ds.lr.sel(init="scratch").values, 6)) <= {0.003, 0.001}
    nb = json.loads((executed / "executed.ipynb").read_text())
    outputs = [o for c in nb["cells"] for o in c.get("outputs", [])]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the figure was not rendered"
    assert any("continuous pixels (this run)" in str(o.get("data", {})) for o in outputs)
    assert len(outputs) < 40, "progress output floods the notebook"
    for lr in ("0.003", "0.001"):
        assert (executed / "00_quickstart" / "runs" / "init=scratch__seed=1" / f"scratch_lr={lr}" /
                "best.pt").exists()


def test_notebook_defaults_are_the_laptop_preset():
    """`make demo` runs the notebook with its defaults: they must be quickstart.LAPTOP's."""
    import dataclasses

    from spt.studies.commands.runner import notebook_parameters
    from spt.studies.quickstart import LAPTOP

    params = notebook_parameters(NOTEBOOK)
    for f in dataclasses.fields(LAPTOP):
        if f.name == "progress":
            continue
        want = getattr(LAPTOP, f.name)
        got = params[f.name]["default"]
        got = eval(got)  # papermill reports the default as source text
        assert (list(want) if isinstance(want, tuple) else want) == got, f.name


def test_pretrain_val_all_is_an_int_the_parameter_check_takes(monkeypatch):
    """"all validation images" is pretrain_val=0 in the notebook (None in the Setup)."""
    import dataclasses

    from spt.studies import quickstart
    from spt.studies.commands.parameters import check_parameters

    check_parameters(NOTEBOOK, {"pretrain_val": 0})
    monkeypatch.setitem(quickstart.SETUPS, "laptop",
                        dataclasses.replace(quickstart.LAPTOP, pretrain_val=None))
    assert quickstart.notebook_parameters("laptop")["pretrain_val"] == 0
    assert "pretrain_val=pretrain_val or None" in NOTEBOOK.read_text()


def test_notebook_has_no_definitions_and_documents_every_parameter():
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(not c.get("outputs") for c in code), "commit the notebook without outputs"
    for c in code:
        src = "".join(c["source"])
        assert "\ndef " not in "\n" + src and "\nclass " not in "\n" + src
    params = [c for c in code if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1
    for line in "".join(params[0]["source"]).splitlines():
        if line and not line.startswith("#"):
            assert ":" in line.split("=")[0] and "#" in line, f"annotate and document: {line}"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


def test_papermill_help_notebook_lists_parameters():
    r = subprocess.run([sys.executable, "-m", "papermill", "--help-notebook", str(NOTEBOOK)],
                       capture_output=True, text=True, check=True)
    nb = json.loads(NOTEBOOK.read_text())
    cell = next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    names = [ln.split(":")[0] for ln in "".join(cell["source"]).splitlines()
             if ln and not ln.startswith("#")]
    assert len(names) >= len(TINY) + 2
    for name in names:  # papermill drops a parameter whose comment it cannot parse
        assert f"  {name}: " in r.stdout, f"papermill --help-notebook does not list {name}"
    assert "labelled training images" in r.stdout


@pytest.mark.serial
def test_rerun_reuses_finished_runs_and_refuses_a_changed_config(tmp_path):
    """Slow by necessity: it trains the quickstart's cells once and reruns them, which is what reuse
    means."""
    from spt.studies.quickstart import STUDY, Setup, summary_table
    run = STUDY.run

    setup = Setup(n_train=16, val_size=20, d_model=16, n_layers=1, n_heads=2, batch_size=8,
                  pretrain_epochs=1, max_epochs=1, patience=1)
    a = run(setup, tmp_path / "runs", seeds=[0])
    parallel = run(setup, tmp_path / "par", seeds=[0, 1], workers=2)
    serial = run(setup, tmp_path / "ser", seeds=[0, 1], workers=1)
    for var in ("test_accuracy", "steps", "curve_train_loss"):
        np.testing.assert_allclose(parallel[var], serial[var], rtol=1e-5)
    best = tmp_path / "runs" / "00_quickstart" / "runs" / "init=spt__seed=0" / "finetune" / "best.pt"
    stamp = best.stat().st_mtime_ns
    b = run(setup, tmp_path / "runs", seeds=[0])
    assert best.stat().st_mtime_ns == stamp
    np.testing.assert_array_equal(a.test_accuracy, b.test_accuracy)
    table = summary_table(a)
    assert list(table.index) == ["scratch", "spt", "spt - scratch"]
    from dataclasses import replace
    with pytest.raises(ValueError, match="mask_ratio"):
        run(replace(setup, mask_ratio=0.25), tmp_path / "runs", seeds=[0])


def test_quickstart_and_a_grid_study_write_the_same_variables(tmp_path):
    """One runner: the quickstart (study 00) and a paper study's grid write the same names."""
    from spt.studies import lra_transformers
    from spt.studies.machinery.cells import run_cells
    from spt.studies.quickstart import SMOKE, STUDY
    run = STUDY.run
    quick = run(SMOKE, tmp_path, seeds=[0])
    digits = [c for c in lra_transformers.STUDY.cells("smoke") if c.coords["task"] == "digits"]
    grid = run_cells(lra_transformers.STUDY, digits, tmp_path)
    assert set(quick.data_vars) == set(grid.data_vars)
    assert {"test_accuracy", "pretrain_val_loss", "pretrain_val_r2", "curve_val_accuracy"} <= \
        set(quick.data_vars)


def test_result_files_are_atomic_and_combine(tmp_path):
    import xarray as xr
    for seed in (0, 1):
        ds = xr.Dataset({"test_accuracy": (("init", "seed"), [[0.5 + seed], [0.6]])},
                        coords={"init": ["scratch", "spt"], "seed": [seed]})
        write_result(ds, tmp_path / f"r{seed}.nc", config={"seed": seed, "nested": {"a": 1}})
    with pytest.raises(FileExistsError):
        write_result(ds, tmp_path / "r1.nc")
    both = load_results(tmp_path)
    assert both.sizes == {"init": 2, "seed": 2}
    assert run_config(read_result(tmp_path / "r0.nc")) == {"seed": 0, "nested": {"a": 1}}
    assert not list(tmp_path.glob(".*tmp"))


def test_combined_string_coords_are_written_whole(tmp_path):
    """Cells read from files carry a fixed-width string encoding; combining a short and a long
    label and writing the result must keep the long one whole."""
    import xarray as xr
    for i, init in enumerate(("scratch", "scratch_continuous")):
        write_result(xr.Dataset({"a": (("init",), [float(i)])}, coords={"init": [init]}),
                     tmp_path / f"{i}.nc")
    both = load_results(tmp_path)
    write_result(both, tmp_path / "out" / "both.nc") if (tmp_path / "out").mkdir() is None else None
    assert sorted(read_result(tmp_path / "out" / "both.nc").init.values) == \
        ["scratch", "scratch_continuous"]


def test_continuous_reference_table_labels_a_recorded_reference():
    import xarray as xr

    from spt.studies.quickstart import RECORDED_CONTINUOUS, continuous_reference_table
    ds = xr.Dataset({"test_accuracy": (("init", "seed"), [[0.5, 0.6], [0.7, 0.9]])},
                    coords={"init": ["scratch", "spt"], "seed": [0, 1]})
    table = continuous_reference_table(ds)
    recorded = [c for c in table.columns if "recorded" in c]
    assert len(recorded) == 1
    assert list(table[recorded[0]].loc[[0, 1]]) == [RECORDED_CONTINUOUS[0], RECORDED_CONTINUOUS[1]]
    assert list(table["spt (tokens)"]) == [70.0, 90.0, 80.0]  # seeds 0, 1 and the mean
    from spt.studies.quickstart import DEMO, LAPTOP
    assert continuous_reference_table(ds, LAPTOP).equals(table)
    other = continuous_reference_table(ds, DEMO)  # another model: the recorded run does not apply
    assert [c for c in other.columns if "laptop preset only" in c]
    assert other.iloc[:, -1].isna().all()


def test_make_demo_runs_the_demo_preset_and_its_parameters_reach_the_notebooks_setup():
    """`make demo` runs `spt study run 00_quickstart --preset demo`: the preset's parameters,
    injected as papermill injects them, build quickstart.DEMO and its seeds in the notebook's own
    cells (run here up to the Setup, without a kernel); the laptop preset stays the notebook's
    defaults and differs from the demo."""
    import re

    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    from spt.studies import quickstart
    from spt.studies.commands.runner import preset_parameters

    recipe = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "spt study run 00_quickstart --preset demo" in recipe
    params = preset_parameters(NOTEBOOK, "demo")
    nb = parameterize_notebook(load_notebook_node(str(NOTEBOOK)), params)
    namespace: dict = {}
    for cell in [c for c in nb.cells if c.cell_type == "code"]:
        src = "\n".join(ln for ln in cell.source.splitlines() if not ln.startswith("%"))
        exec(src, namespace)  # noqa: S102 - the notebook's own cells, up to its Setup
        if "setup" in namespace:
            break
    assert namespace["setup"] == quickstart.DEMO != quickstart.LAPTOP
    assert namespace["seeds"] == [0, 1, 2, 3] and namespace["workers"] == 2
    assert quickstart.preset_of(namespace["setup"]).name == "demo"  # the run prints its note
    text = " ".join("".join(c.source) for c in nb.cells if c.cell_type == "markdown")
    assert not re.search(r"\d+\s*min|minutes", text), "the notebook states a time: its note does"
