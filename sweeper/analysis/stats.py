"""Paired differences over seeds: is one config better than its baseline beyond seed noise?

Two cells of a table that ran the same seeds share each seed's labeled subset, initialisation and
batch order, so seed i of the one and seed i of the other are a pair: the spread of the paired
differences d_i = a_i - b_i is what tells a real change from seed noise (an unpaired comparison of
two means ± std would throw that pairing away). The interval is Student's t over the n pairs,

    mean(d) ± t.ppf((1 + level) / 2, n - 1) * sd(d, ddof=1) / sqrt(n)

the same interval as scipy.stats.ttest_rel(a, b).confidence_interval(level), except where the n
differences are all equal: an error rate over a test set of N images moves in steps of 100/N points
(0.22 at 450), so two configs can differ by the same count on every seed, sd(d) is 0 and the
t-interval has zero width whatever the true seed-to-seed spread. That measures no spread at all, so
such a sample gets no interval (NaN bounds, no `*`), as a single pair gets none.

    python -c "from sweeper.analysis.stats import paired_diff; print(paired_diff([4.1, 4.9, 5.0], [6.0, 6.6, 7.3]))"
    pytest tests/test_stats.py -q
"""
from __future__ import annotations

import math

import numpy as np


def paired_diff(a, b, level: float = 0.95) -> tuple[float, float, float, int]:
    """(mean, lo, hi, n) of the paired differences a - b (same units as a, b: percent error here).

    a, b: equal-length sequences, a[i] and b[i] from the same seed. lo, hi: the two-sided `level`
    t-interval of the mean difference over the n pairs; NaN when n < 2 or the differences are all
    equal (no spread measured: `no_spread`), and the mean too when n == 0. Pairs with a non-finite
    member are the caller's to drop (a diverged seed is not a pair); here they are an error.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired_diff needs two 1-d sequences of equal length (one value per seed), "
                         f"got shapes {a.shape} and {b.shape}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), e.g. 0.95, got {level}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("paired_diff got a non-finite value; drop the seeds that have no finite value "
                         "in both configs before pairing")
    d = a - b  # (n,) one difference per seed
    return (*t_interval(d, level), len(d))


def t_interval(d, level: float) -> tuple[float, float, float]:
    """(mean, lo, hi) of the two-sided Student t-interval of the mean of d (m,) at `level`; lo, hi NaN
    below 2 values or when they are all equal (`no_spread`: zero width would say nothing about the
    spread), and the mean too for no value."""
    # the t quantile that scipy.stats.t.ppf returns (it calls this very function), without importing
    # scipy.stats: every report with a comparison would pay its second-long import for one quantile
    from scipy.special import stdtrit

    d = np.asarray(d, dtype=float)  # (m,) paired differences
    if len(d) == 0:
        return math.nan, math.nan, math.nan
    mean = float(d.mean())
    if len(d) < 2 or no_spread(d):
        return mean, math.nan, math.nan
    half = float(stdtrit(len(d) - 1, (1.0 + level) / 2.0)) * float(d.std(ddof=1)) / math.sqrt(len(d))
    return mean, mean - half, mean + half


def excludes_zero(lo: float, hi: float) -> bool:
    """True when the interval [lo, hi] lies strictly on one side of 0 (NaN bounds: False)."""
    return bool(lo > 0.0 or hi < 0.0)


SPREAD_RTOL = 1e-9  # differences closer than this (relative) are equal: float rounding of k/N, not seed noise


def no_spread(d) -> bool:
    """True when the differences d (m,) are all equal, up to the float rounding of computing them from
    error rates (SPREAD_RTOL): a sample whose sample sd says nothing about the seed-to-seed spread."""
    d = np.asarray(d, dtype=float)
    return bool(len(d) and np.ptp(d) <= SPREAD_RTOL * max(1.0, float(np.abs(d).max())))
