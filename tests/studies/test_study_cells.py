"""Study cells: one file per cell, reuse on rerun, never overwrite a different configuration."""
from functools import partial

import numpy as np
import pytest
import xarray as xr

from spt.studies.machinery.cells import Cell, load_study, run_cells
from spt.studies.machinery.job import FunctionJob


def fake_run(value: float, calls_dir, run_dir) -> xr.Dataset:
    """A picklable cell body: records that it ran, returns a scalar and a short curve."""
    calls_dir.mkdir(parents=True, exist_ok=True)
    (calls_dir / f"{value}-{len(list(calls_dir.iterdir()))}").touch()
    curve = xr.DataArray(np.arange(int(value) + 1, dtype=float), dims=("epoch",),
                         coords={"epoch": np.arange(int(value) + 1)})
    return xr.Dataset({"test_accuracy": ((), value / 10), "curve": curve})


def cells(calls, values=(1.0, 2.0, 3.0), extra=None):
    return [Cell({"task": "t", "fraction": v, "seed": 0}, None,
                 FunctionJob(partial(fake_run, v, calls), {"v": v, **(extra or {})}))
            for v in values]


def test_run_cells_writes_one_file_per_cell_and_reuses_them(tmp_path):
    calls = tmp_path / "calls"
    ds = run_cells("st", cells(calls), tmp_path / "out", log=lambda s: None)
    assert dict(ds.sizes) == {"task": 1, "fraction": 3, "seed": 1, "epoch": 4}
    np.testing.assert_allclose(ds.test_accuracy.values.ravel(), [0.1, 0.2, 0.3])
    assert np.isnan(ds.curve.sel(fraction=1.0, epoch=3)).all()  # outer join pads shorter curves
    assert len(list((tmp_path / "out" / "st").glob("*.nc"))) == 3
    assert len(list(calls.iterdir())) == 3
    # rerun: nothing recomputed; one new cell: only it runs
    ds2 = run_cells("st", cells(calls, (1.0, 2.0, 3.0, 4.0)), tmp_path / "out", log=lambda s: None)
    assert len(list(calls.iterdir())) == 4
    assert ds2.sizes["fraction"] == 4
    xr.testing.assert_identical(load_study(tmp_path / "out", "st"), ds2)


def test_a_different_configuration_is_an_error_not_an_overwrite(tmp_path):
    calls = tmp_path / "calls"
    run_cells("st", cells(calls, (1.0,)), tmp_path / "out", log=lambda s: None)
    f = next((tmp_path / "out" / "st").glob("*.nc"))
    before = f.read_bytes()
    with pytest.raises(FileExistsError, match="differs in: lr"):
        run_cells("st", cells(calls, (1.0,), extra={"lr": 0.1}), tmp_path / "out",
                  log=lambda s: None)
    assert f.read_bytes() == before


def test_every_result_made_with_another_configuration_is_named_in_one_error(tmp_path):
    """Results from an older commit differing in a cap: all files at once, with the fix, not one
    file per rerun."""
    calls = tmp_path / "calls"
    run_cells("st", cells(calls), tmp_path / "out", log=lambda s: None)
    with pytest.raises(FileExistsError) as err:
        run_cells("st", cells(calls, extra={"max_time": 60}), tmp_path / "out", log=lambda s: None)
    said = str(err.value)
    assert said.startswith("3 result files in ") and "\n" not in said
    for v in (1, 2, 3):
        assert f"task=t__fraction={v}__seed=0.nc (differs in: max_time)" in said
    assert "delete those files and their run folders" in said
    assert len(list(calls.iterdir())) == 3  # nothing recomputed, nothing overwritten


def test_a_result_file_renamed_over_another_cell_is_refused_naming_it(tmp_path):
    """A copied file would stand in for the cell its name says (that cell showing NaN)."""
    calls = tmp_path / "calls"
    run_cells("st", cells(calls, (1.0, 2.0)), tmp_path / "out", log=lambda s: None)
    folder = tmp_path / "out" / "st"
    one, two = (folder / f"task=t__fraction={v}__seed=0.nc" for v in (1, 2))
    two.unlink()
    one.rename(two)
    with pytest.raises(ValueError, match=r"fraction=2__seed=0.nc holds the result of cell "
                                         r"task=t__fraction=1__seed=0, not of the cell its name"):
        load_study(tmp_path / "out", "st")
    with pytest.raises(ValueError, match="Rename it to task=t__fraction=1__seed=0.nc"):
        run_cells("st", cells(calls, (1.0, 2.0)), tmp_path / "out", log=lambda s: None)


def test_cells_must_share_dims_and_be_distinct(tmp_path):
    a = Cell({"task": "t"}, None, FunctionJob(partial(fake_run, 1.0, tmp_path), {}))
    b = Cell({"model": "m"}, None, FunctionJob(partial(fake_run, 1.0, tmp_path), {}))
    with pytest.raises(ValueError, match="dims"):
        run_cells("st", [a, b], tmp_path)
    with pytest.raises(ValueError, match="same coordinates"):
        run_cells("st", [a, a], tmp_path)
    with pytest.raises(FileNotFoundError, match="spt study run"):
        load_study(tmp_path, "nothing")


@pytest.mark.serial
def test_workers_give_the_same_results(tmp_path):
    one = run_cells("st", cells(tmp_path / "c1"), tmp_path / "o1", log=lambda s: None)
    two = run_cells("st", cells(tmp_path / "c2"), tmp_path / "o2", workers=2, log=lambda s: None)
    for ds in (one, two):  # which code made each cell, when, with how many threads: not a result
        del ds.attrs["provenance"]
    xr.testing.assert_identical(one, two)


def test_task_ref_fraction_is_a_nested_subset_of_the_training_split():
    from spt.studies.machinery.arms import TaskRef
    opts = (("size", 8), ("n_train", 200))
    full, part = (TaskRef("digits", options=opts).load(),
                  TaskRef("digits", fraction=0.25, options=opts).load())
    assert len(full.train) == 200 and len(part.train) == 50
    assert len(part.val) == len(full.val) and len(part.test) == len(full.test)
    rows = {tuple(full.train[i]["inputs"].ravel().tolist()) for i in range(200)}
    assert all(tuple(part.train[i]["inputs"].ravel().tolist()) in rows for i in range(50))


def _tiny_arm():
    from spt.config import ObjectiveConfig, TrainConfig, TransformerConfig
    from spt.studies.machinery.arms import Arm, TaskRef
    ref = TaskRef("digits", options=(("size", 8), ("n_train", 16), ("val_size", 16),
                                     ("test_size", 16)))
    model = TransformerConfig(d_model=8, n_layers=1, n_heads=2, d_ff=16, max_len=64)
    train = TrainConfig(lr=3e-3, batch_size=8, epochs=1, progress=False)
    return ref, Arm(model=model, train=train, objective=ObjectiveConfig("masked"), pretrain=train,
                    lr_grid=(3e-3, 1e-3))


def test_a_stored_result_holds_the_trainconfigs_that_trained_it(tmp_path):
    """The cell's job is at its seed: the TrainConfigs its result file stores are those its
    checkpoints were trained with (seed, lr and all; execution settings aside)."""
    from spt.results import read_result, run_config
    from spt.same_run import differences
    from spt.studies.machinery.cells import cell_file
    from spt.train.checkpoint import read_checkpoint

    ref, arm = _tiny_arm()
    cell = Cell({"task": "digits", "seed": 2}, ref, arm.at(2, device="cpu"))
    run_cells("st", [cell], tmp_path, log=lambda s: None)
    stored = run_config(read_result(cell_file(tmp_path, "st", cell)))["cell"]
    assert stored["seed"] == 2 and stored["arm"]["lr_grid"] == [3e-3, 1e-3]
    runs = tmp_path / "st" / "runs" / cell.key
    trained = {"pretrain": read_checkpoint(runs / "pretrain" / "best.pt")["train_config"],
               "train": read_checkpoint(runs / "finetune_lr=0.003" / "best.pt")["train_config"]}
    for stage, cfg in trained.items():
        assert cfg["seed"] == 2 and cfg["lr"] == 3e-3  # train.lr: the grid's first lr
        assert differences(cfg, stored["arm"][stage]) == []  # the same run
    assert read_checkpoint(runs / "finetune_lr=0.001" / "best.pt")["train_config"]["seed"] == 2


def test_a_cell_refuses_a_job_at_another_seed_and_an_lr_grid_without_train_lr():
    ref, arm = _tiny_arm()
    with pytest.raises(ValueError, match=r"job.at\(2\)"):
        Cell({"task": "digits", "seed": 2}, ref, arm.at(1))
    import dataclasses
    with pytest.raises(ValueError, match="must start with train.lr"):
        dataclasses.replace(arm, lr_grid=(1e-3, 3e-3))


def test_results_stored_before_jobs_carried_their_seed_are_still_their_cells():
    """Older result files stored each stage's TrainConfig at the preset's seed (0) and trained it
    at the cell's: read back, they are the same run as the cell's job now."""
    from spt.compat import cell_seeds_as_trained
    from spt.same_run import differences

    ref, arm = _tiny_arm()
    now = arm.at(2).cell_config(ref)
    old = {**arm.cell_config(ref), "seed": 2}  # the preset's arm, seed 0 in its TrainConfigs
    assert old["arm"]["train"]["seed"] == 0 and differences(old, now)
    assert differences(cell_seeds_as_trained(old), now) == []
    tiny_lm = {"seed": 2, "tiny_lm": {"seed": 0, "lr": 1e-2, "steps": 150}}  # not a TrainConfig
    assert cell_seeds_as_trained(tiny_lm) == tiny_lm
