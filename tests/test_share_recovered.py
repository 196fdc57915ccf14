"""The share of SPT's gain a cheap prior recovers, and its Fieller interval."""
import numpy as np
import pytest
import xarray as xr
from scipy.stats import t as student_t

from spt.results import fieller_ratio, format_share, share_recovered


def _not_rejected(a, b, R, level=0.95):
    """Student's paired t-test of mean(a - R b) = 0 does not reject at `level`."""
    d = a - R * b
    n = len(d)
    return abs(d.mean()) <= student_t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / np.sqrt(n)


def test_a_hand_computed_case():
    # gains of the prior (a) and of SPT (b) over scratch on three seeds
    a, b = np.array([5.0, 7.0, 6.0]), np.array([10.0, 12.0, 14.0])
    ratio, low, high = fieller_ratio(a, b)
    assert ratio == pytest.approx(0.5)  # 6 / 12
    # by hand: s_aa = 1, s_bb = 4, s_ab = 1, t_2(0.975)^2 / 3 = 4.3027^2 / 3 = 6.1710;
    # (144 - 24.684) R^2 - 2 (72 - 6.171) R + (36 - 6.171) = 0
    qa, qb, qc = 144 - 4 * 6.17100, -2 * (72 - 6.17100), 36 - 6.17100
    root = np.sqrt(qb ** 2 - 4 * qa * qc)
    assert low == pytest.approx((-qb - root) / (2 * qa), rel=1e-4)
    assert high == pytest.approx((-qb + root) / (2 * qa), rel=1e-4)


def test_the_interval_is_the_set_the_paired_t_test_does_not_reject():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(3, 8))
        b = rng.normal(10, 3, n)
        a = 0.4 * b + rng.normal(0, 2, n)
        ratio, low, high = fieller_ratio(a, b)
        grid = np.linspace(-3, 3, 1201)
        inside = [R for R in grid if _not_rejected(a, b, R)]
        if np.isfinite(low):
            step = grid[1] - grid[0]
            assert min(inside) == pytest.approx(low, abs=2 * step)
            assert max(inside) == pytest.approx(high, abs=2 * step)
            assert low <= ratio <= high


def test_a_denominator_spanning_zero_bounds_no_ratio():
    a, b = np.array([1.0, 2.0, 1.5]), np.array([3.0, -2.0, 0.5])
    ratio, low, high = fieller_ratio(a, b)
    assert (low, high) == (float("-inf"), float("inf"))
    assert np.isfinite(ratio)


def test_share_recovered_pairs_seeds_and_keeps_other_dims():
    seeds = [0, 1, 2]
    scratch = xr.DataArray([[60.0, 62, 61], [50, 50, 50]], dims=("task", "seed"),
                           coords={"task": ["a", "b"], "seed": seeds})
    spt = scratch + xr.DataArray([[10.0, 12, 14], [20, 21, 22]], dims=("task", "seed"),
                                 coords=scratch.coords)
    prior = scratch + xr.DataArray([[5.0, 7, 6], [20, 21, 22]], dims=("task", "seed"),
                                   coords=scratch.coords)
    s = share_recovered(prior, spt, scratch)
    assert float(s.share.sel(task="a")) == pytest.approx(0.5)
    assert float(s.share.sel(task="b")) == pytest.approx(1.0)
    assert float(s.spt_gain.sel(task="a")) == pytest.approx(12.0)
    assert format_share(s.sel(task="a")).startswith("50% [")
    assert format_share(s.sel(task="a")).endswith("of +12.0")
    with pytest.raises(ValueError, match="level"):
        share_recovered(prior, spt, scratch, level=1.5)


def test_fewer_than_two_seeds_give_no_interval():
    ratio, low, high = fieller_ratio([3.0], [6.0])
    assert ratio == 0.5 and np.isnan(low) and np.isnan(high)
