"""spt.results.paired_gain: the SPT gain over seeds, paired by seed, with a 95% t interval, checked
against scipy's paired t-test; format_gain's one-cell text; the study tables that report it."""
import numpy as np
import pytest
import xarray as xr
from scipy import stats

from spt.results import format_gain, paired_gain


def seeds(values, task="a"):
    return xr.DataArray([values], dims=("task", "seed"),
                        coords={"task": [task], "seed": range(len(values))})


@pytest.mark.parametrize("n", [2, 3, 6])
def test_the_interval_is_scipys_paired_t_interval(n):
    rng = np.random.default_rng(n)
    spt, scratch = rng.normal(80, 5, n), rng.normal(70, 5, n)
    g = paired_gain(seeds(spt), seeds(scratch)).sel(task="a")
    ci = stats.ttest_rel(spt, scratch).confidence_interval(0.95)
    assert float(g["gain"]) == pytest.approx(np.mean(spt - scratch))
    assert (float(g["low"]), float(g["high"])) == pytest.approx((ci.low, ci.high))
    assert int(g["ahead"]) == int((spt > scratch).sum()) and int(g["n"]) == n


def test_one_seed_has_no_interval_and_missing_pairs_are_left_out():
    g = paired_gain(seeds([0.8]), seeds([0.6])).sel(task="a")
    assert np.isnan(float(g["low"])) and float(g["gain"]) == pytest.approx(0.2)
    assert format_gain(g) == "+0.2 [n < 2], 1/1 ahead"
    h = paired_gain(seeds([0.8, np.nan, 0.9]), seeds([0.6, 0.7, 0.95])).sel(task="a")
    assert int(h["n"]) == 2 and int(h["ahead"]) == 1


def test_format_gain_reads_mean_interval_and_seeds_ahead():
    g = paired_gain(seeds([80.0, 82.0, 90.0]), seeds([70.0, 71.0, 75.0])).sel(task="a")
    text = format_gain(g)
    assert text.startswith("+12.0 [") and text.endswith("], 3/3 ahead")
    with pytest.raises(ValueError, match="level"):
        paired_gain(seeds([1.0]), seeds([0.0]), level=95)


def test_every_accuracy_study_table_reports_the_gain_with_its_interval():
    from spt.studies import lra_transformers
    rng = np.random.default_rng(0)
    ds = xr.Dataset({"test_accuracy": (("task", "init", "seed"), rng.uniform(0.3, 0.9, (1, 3, 3)))},
                    coords={"task": ["listops"], "init": ["scratch", "masked", "causal"],
                            "seed": [0, 1, 2]})
    t = lra_transformers.table(ds)
    row = t.loc["gain: masked SPT - scratch (95% CI, seeds ahead)", "listops"]
    g = paired_gain(ds.test_accuracy.sel(init="masked") * 100,
                    ds.test_accuracy.sel(init="scratch") * 100).sel(task="listops")
    assert row == format_gain(g)
