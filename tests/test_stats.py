"""Tests of sweeper.analysis.stats: the paired t-interval against scipy's paired t-test and a hand computation.

    pytest tests/test_stats.py -q
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from sweeper.analysis.stats import excludes_zero, paired_diff


@pytest.mark.parametrize("level", [0.95, 0.9, 0.99])
def test_interval_equals_scipys_paired_t_test(level):
    a = np.array([12.1, 13.4, 11.8, 12.9, 13.0])     # percent error of a config, seeds 0-4
    b = np.array([13.0, 13.9, 12.5, 13.1, 14.2])     # its baseline, same seeds
    mean, lo, hi, n = paired_diff(a, b, level)
    ci = stats.ttest_rel(a, b).confidence_interval(level)
    assert n == 5 and mean == pytest.approx(np.mean(a - b))
    assert (lo, hi) == pytest.approx((ci.low, ci.high), rel=1e-12)


def test_a_known_sample_by_hand():
    """d = (1, 2, 3): mean 2, sd 1, t(0.975, 2 df) = 4.3027 from a t table, half-width 4.3027 / sqrt(3)."""
    mean, lo, hi, n = paired_diff([11.0, 12.0, 13.0], [10.0, 10.0, 10.0])
    half = 4.302652729749464 / math.sqrt(3)
    assert (mean, n) == (2.0, 3)
    assert (lo, hi) == pytest.approx((2.0 - half, 2.0 + half), rel=1e-9)


def test_fewer_than_two_pairs_have_no_interval():
    mean, lo, hi, n = paired_diff([5.0], [7.5])
    assert (mean, n) == (-2.5, 1) and math.isnan(lo) and math.isnan(hi)
    mean, lo, hi, n = paired_diff([], [])
    assert n == 0 and all(math.isnan(x) for x in (mean, lo, hi))


def test_identical_differences_have_no_interval():
    """Equal differences on every seed (a test set of N images moves in steps of 100/N points) give
    sd 0: no interval and no `*`, as for one pair, whatever the mean; also where float rounding of
    k/N makes the equal differences differ in their last bits."""
    mean, lo, hi, n = paired_diff([3.5, 4.5, 6.0], [2.0, 3.0, 4.5])
    assert (mean, n) == (1.5, 3) and math.isnan(lo) and math.isnan(hi) and not excludes_zero(lo, hi)
    step = 100 / 450
    a, b = [k * step for k in (60, 64, 56)], [k * step for k in (56, 60, 52)]
    mean, lo, hi, n = paired_diff(a, b)
    assert mean == pytest.approx(4 * step) and math.isnan(lo) and not excludes_zero(lo, hi)
    mean, lo, hi, n = paired_diff(b, b)                          # three zeros
    assert (mean, n) == (0.0, 3) and math.isnan(lo)
    # one image apart on one seed: an interval again, scipy's
    a[0] += step
    mean, lo, hi, n = paired_diff(a, b)
    ci = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert (lo, hi) == pytest.approx((ci.low, ci.high), rel=1e-12)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="equal length"):
        paired_diff([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="non-finite"):
        paired_diff([1.0, math.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match="level must be in"):
        paired_diff([1.0, 2.0], [1.0, 2.5], level=95)


def test_excludes_zero():
    assert excludes_zero(0.1, 2.0) and excludes_zero(-3.0, -0.5)
    assert not excludes_zero(-1.0, 1.0) and not excludes_zero(0.0, 1.0) and not excludes_zero(math.nan, math.nan)


def test_a_table_cell_without_spread_says_so_and_has_no_star():
    """The tables' text for a cell whose paired differences are all equal: the mean, no interval, no *."""
    import pandas as pd

    from sweeper.analysis.tables import diff_text

    mean, lo, hi, n = paired_diff([3.5, 4.5, 6.0], [2.0, 3.0, 4.5])
    row = pd.Series({"baseline": "MT", "is_baseline": False, "n_paired": n, "n": n, "diff_vs_baseline": mean,
                     "diff_ci_low": lo, "diff_ci_high": hi})
    assert diff_text(row) == " · +1.50 (equal on every pair: no spread, no interval)"
    row = row.copy()
    row[["diff_ci_low", "diff_ci_high"]] = [0.5, 2.5]
    assert diff_text(row) == " · +1.50 [+0.50, +2.50]*"
