"""The sample results shipped in spt/samples: present, small, in the layout the explorers read."""
import numpy as np
import pytest

from spt import samples


def test_samples_are_shipped_small_and_documented():
    assert set(samples.names()) >= {"data_scales", "kernels"}
    for name in ("data_scales", "kernels"):
        assert samples.path(name).stat().st_size < 600_000  # per-channel kernels: 4 x 64 x 256
        assert samples.path(name + ".nc") == samples.path(name)
    prov = (samples.HERE / "PROVENANCE.md").read_text()
    assert "tools/make_sample_results.py" in prov and "data_scales.nc" in prov and "kernels.nc" in prov
    with pytest.raises(FileNotFoundError, match="shipped samples"):
        samples.path("nope")


def test_data_scales_sample_layout():
    ds = samples.load("data_scales")
    for dim in ("task", "model", "fraction", "init", "seed", "epoch"):
        assert dim in ds.dims
    assert list(ds.init.values) == ["scratch", "spt"] and ds.sizes["fraction"] >= 4
    assert list(ds.model.values) == ["s4"] and ds.sizes["seed"] >= 3
    acc = ds.test_accuracy.values
    assert np.isfinite(acc).all() and ((acc > 0.1) & (acc <= 1)).all()  # real runs, above chance
    assert ds.curve_val_accuracy.dims[-1] == "epoch" and "made_on" in ds.attrs


def test_kernels_sample_layout():
    ds = samples.load("kernels")
    assert ds.model_abs.dims == ("task", "model", "layer", "channel", "lag")
    assert set(ds.model.values) == {"s4"} and int(ds.period.values[0]) == 16
    assert ds.sizes["lag"] == 256 and ds.sizes["layer"] == 4
    # pretraining moved the kernels away from the HiPPO init
    assert not np.allclose(ds.model_abs.values, ds.baseline_abs.values, rtol=1e-2)


def test_provenance_states_what_the_samples_show():
    """PROVENANCE.md's findings are the tool's reading of the shipped numbers (not hand-written)."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "tools" / "make_sample_results.py"
    spec = importlib.util.spec_from_file_location("make_sample_results", path)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    prov = (samples.HERE / "PROVENANCE.md").read_text()
    assert tool.data_scales_finding(samples.load("data_scales")) in prov
    assert tool.kernels_finding(samples.load("kernels")) in prov
