"""Every study notebook runs at preset=smoke through papermill and writes sound result files;
`spt study run` reuses what is done and runs what is new; every parameter is documented."""
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from spt.cli import main
from spt.studies.commands.runner import list_studies, notebook_parameters, study_notebook
from spt.studies.machinery.cells import load_study

pytest.importorskip("papermill")

# study -> the grid dims its results must have (besides curve dims such as epoch)
DIMS = {
    "01_lra_transformers": {"task", "init", "seed"},
    "02_transformers_vs_s4": {"task", "model", "init", "seed"},
    "03_explicit_priors": {"task", "model", "ssm_init", "init", "seed"},
    "04_data_scales": {"task", "fraction", "init", "seed"},
    "05_text_corpus_pretraining": {"task", "init", "seed"},
    "06_kernel_decay": {"task", "seed", "layer", "lag"},
    "07_additional_modalities": {"task", "model", "init", "seed"},
    "08_compute_tied": {"task", "model", "spt_share", "seed"},
    "09_model_scales": {"model", "size", "init", "seed"},
    "13_modern_architectures": {"task", "model", "init", "seed"},
    "14_priors_and_range": {"task", "model", "prior", "init", "span", "seed"},
}
STUDIES = list(DIMS)


def test_every_study_has_a_notebook_and_a_dims_check():
    assert list(list_studies()) == STUDIES


@pytest.mark.parametrize("name", STUDIES)
def test_every_parameter_is_documented(name):
    params = notebook_parameters(study_notebook(name))
    assert {"preset", "out_dir"} <= set(params)
    for p, info in params.items():
        assert info["help"].strip(), f"{name}: parameter {p} has no help comment"
        assert info["inferred_type_name"] != "None", f"{name}: parameter {p} has no type"


def test_every_notebook_cell_has_an_id():
    """nbformat 4.5 cells need an id: without one, papermill warns on every run (and newer
    nbformat versions refuse the notebook)."""
    import json
    from pathlib import Path
    for path in sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb")):
        nb = json.loads(path.read_text())
        ids = [c.get("id") for c in nb["cells"]]
        assert all(ids) and len(set(ids)) == len(ids), f"{path.name}: cells without a unique id"


def test_notebooks_define_nothing():
    """A notebook calls spt and plots: no function, class or lambda of its own in a code cell
    (what a notebook needs belongs in spt, where it is tested). Lines of shell and magics are
    left out of the parse."""
    import ast
    import json
    for path in sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] != "code":
                continue
            lines = "".join(cell["source"]).splitlines()
            tree = ast.parse("\n".join(x for x in lines if not x.lstrip().startswith(("%", "!"))))
            defined = [type(n).__name__ for n in ast.walk(tree) if isinstance(
                n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))]
            assert not defined, f"{path.name}, cell {i}: defines {defined}; move it into spt"


def _finite_metric(ds: xr.Dataset) -> xr.DataArray:
    metrics = [ds[m] for m in ("test_accuracy", "test_r2") if m in ds]
    return xr.concat(metrics, "m").max("m") if len(metrics) > 1 else metrics[0]


def check_results(name: str, out) -> xr.Dataset:
    ds = load_study(out, name)
    assert DIMS[name] <= set(ds.dims), f"{name}: dims {set(ds.dims)}"
    if name == "06_kernel_decay":
        for t in ds.task.values:
            for var in ("pretrained", "baseline"):
                k = ds[var].sel(task=t).dropna("lag", how="all")
                assert k.sizes["lag"] >= 64 and np.isfinite(k.values).all() and (k.values >= 0).all()
            assert not np.allclose(ds.pretrained.sel(task=t).dropna("lag", how="all"),
                                   ds.baseline.sel(task=t).dropna("lag", how="all"))
        assert np.isfinite(ds.pretrain_val_loss.values).all()
    else:
        m = _finite_metric(ds)
        cells = len(list((Path(out) / name).glob("*.nc")))  # a grid may lack some points
        assert int(np.isfinite(m.values).sum()) == cells, f"{name}: non-finite test metric in {m}"
        steps = ds.steps.values[np.isfinite(m.values)]
        assert np.isfinite(steps).all() and (steps > 0).all()
    return ds


@pytest.mark.parametrize("name", [s for s in STUDIES if s != "04_data_scales"])
def test_study_notebook_runs_at_smoke_preset(name, tmp_path):
    """Each study notebook at its smoke preset through papermill, as `spt study run` runs it: a
    kernel start, the imports and the smoke cells (10-35 s each); the smoke preset is the smallest
    run that reaches every cell of the notebook."""
    assert main(["study", "run", name, "--preset", "smoke", "--out", str(tmp_path)]) == 0
    assert (tmp_path / f"{name}.ipynb").exists()
    check_results(name, tmp_path)


def test_study_run_reuses_finished_cells_and_runs_new_ones(tmp_path):
    """Slow by necessity: two real notebook runs (a kernel each), the second reusing the first's
    cells and computing the new seed's."""
    name = "04_data_scales"
    assert main(["study", "run", name, "--preset", "smoke", "--out", str(tmp_path)]) == 0
    ds = check_results(name, tmp_path)
    # each fraction trains on its own nested subset: fewer examples, fewer scratch steps
    steps = ds.steps.sel(init="scratch", seed=0).squeeze().values
    assert (np.diff(steps) > 0).all(), f"steps per fraction {steps}"
    files = sorted((tmp_path / name).glob("*.nc"))
    assert len(files) == ds.sizes["fraction"] * ds.sizes["init"] * ds.sizes["seed"]
    stamps = {f: f.stat().st_mtime_ns for f in files}
    executed = (tmp_path / f"{name}.ipynb").read_text()
    assert "0 to run" not in executed
    # a new seed: only its cells run, the finished ones are reused and not rewritten
    assert main(["study", "run", name, "--preset", "smoke", "-p", "seeds", "[0, 1]",
                 "--out", str(tmp_path)]) == 0
    assert f"{len(files)} already done, {len(files)} to run" in \
        (tmp_path / f"{name}.ipynb").read_text()
    assert {f: f.stat().st_mtime_ns for f in files} == stamps
    ds2 = check_results(name, tmp_path)
    assert list(ds2.seed.values) == [0, 1]
