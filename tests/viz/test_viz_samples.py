"""The sample results shipped in spt/samples: present, small, in the layout the explorers read."""
import numpy as np
import pytest

from spt import samples


def test_samples_are_shipped_small_and_documented():
    assert set(samples.names()) >= {"data_scales", "kernels"}
    for name in ("data_scales", "kernels"):
        assert samples.path(name).stat().st_size < 250_000
        assert samples.path(name + ".nc") == samples.path(name)
    prov = (samples.HERE / "PROVENANCE.md").read_text()
    assert "tools/make_sample_results.py" in prov and "data_scales.nc" in prov and "kernels.nc" in prov
    with pytest.raises(FileNotFoundError, match="shipped samples"):
        samples.path("nope")


def test_data_scales_sample_layout():
    ds = samples.load("data_scales")
    for dim in ("task", "model", "fraction", "init", "seed", "epoch"):
        assert dim in ds.dims
    assert list(ds.init.values) == ["scratch", "spt"] and ds.sizes["fraction"] == 2
    acc = ds.test_accuracy.values
    assert np.isfinite(acc).all() and ((acc > 0.1) & (acc <= 1)).all()  # real runs, above chance
    assert ds.curve_val_accuracy.dims[-1] == "epoch" and "made_on" in ds.attrs


def test_kernels_sample_layout():
    ds = samples.load("kernels")
    assert ds.model_abs.dims == ("task", "model", "layer", "channel", "lag")
    assert set(ds.model.values) == {"s4", "dlr"} and int(ds.period.values[0]) == 16
    # pretraining moved the kernels away from the HiPPO init
    assert not np.allclose(ds.model_abs.values, ds.baseline_abs.values, rtol=1e-2)
