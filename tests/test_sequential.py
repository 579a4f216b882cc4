"""Tests of sweeper.seeds.sequential (`--seeds auto`): planned looks, each look's t-interval (Bonferroni and the
O'Brien-Fleming-type boundary) against scipy's quantiles, no decision without spread, verdicts on hand-computed cases, which seeds an open cell asks for, and the
false-positive rate under optional stopping, simulated.

    pytest tests/test_sequential.py -q
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from sweeper.analysis.stats import t_interval
from sweeper.seeds.sequential import (STATUSES, Plan, SequentialError, decide, obf_constant, simulate, targets,
                                       verdict)


def seeds_of(values, first_seed=0):
    return {first_seed + i: float(v) for i, v in enumerate(values)}


@pytest.mark.parametrize("cap, looks", [(16, (3, 5, 8, 12, 16)), (3, (3,)), (10, (3, 5, 8, 10)), (4, (3, 4))])
def test_looks_grow_by_half_and_end_at_the_cap(cap, looks):
    plan = Plan(cap=cap, boundary="bonferroni")
    assert plan.looks == looks and Plan(cap=cap).looks == looks
    assert plan.levels == pytest.approx([1 - 0.05 / len(looks)] * len(looks))


def test_bad_settings_are_one_line_errors():
    with pytest.raises(SequentialError, match="--max-seeds must be >= 3"):
        Plan(cap=2)
    with pytest.raises(SequentialError, match="match_margin must be > 0"):
        Plan(match_margin=0.0)


def test_interval_is_students_t_at_the_bonferroni_level():
    """d = (1, 2, 3): mean 2, sd 1; at 5 planned looks each interval is at level 1 - 0.05/5 = 0.99."""
    plan = Plan(cap=16, boundary="bonferroni")
    mean, lo, hi = t_interval([1.0, 2.0, 3.0], plan.levels[0])
    half = stats.t.ppf(1 - 0.01 / 2, 2) * 1.0 / math.sqrt(3)
    assert mean == 2.0 and (lo, hi) == pytest.approx((2 - half, 2 + half), rel=1e-12)
    assert math.isnan(t_interval([1.0], 0.99)[1]) and math.isnan(t_interval([], 0.99)[0])


@pytest.mark.parametrize("boundary", ["bonferroni", "obf"])
def test_a_look_without_spread_decides_nothing(boundary):
    """A 450-image test set's error moves in steps of 100/450 points: three seeds can differ by the
    same count of images. Equal differences give sd 0, a zero-width interval that measures no spread:
    the look is open ("differs" would follow from any nonzero mean, "matches" from three zeros).
    The errors are k/450 computed in floats, so the equal differences differ in their last bits."""
    step = 100 / 450
    base = seeds_of([k * step for k in (56, 60, 52)])
    cell = seeds_of([k * step for k in (60, 64, 56)])           # 4 images more wrong on every seed
    plan = Plan(cap=16, match_margin=1.0, boundary=boundary)
    v = verdict(cell, base, plan)
    assert (v.status, v.n, v.pairs) == ("open", 3, 3)
    assert v.mean == pytest.approx(4 * step) and math.isnan(v.lo) and math.isnan(v.hi)
    assert verdict(dict(base), base, plan).status == "open"      # three zeros: no "matches"
    assert targets([base, cell], [None, 0], plan) == [5, 5]      # the next look's seeds, as for any open cell
    # one image apart on one seed: spread, and the look is made as before
    cell[2] += step
    assert math.isfinite(verdict(cell, base, plan).lo)


def test_decide():
    assert decide(0.1, 2.0, None) == "differs" and decide(-2.0, -0.1, 1.0) == "differs"
    assert decide(-0.5, 0.5, 1.0) == "matches"
    assert decide(-0.5, 1.5, 1.0) == "open" and decide(-0.5, 0.5, None) == "open"
    assert decide(math.nan, math.nan, 1.0) == "open"


def test_a_large_difference_is_decided_at_the_first_look():
    base = seeds_of([10.0, 11.0, 12.0])
    cell = seeds_of([12.0, 13.1, 13.9])                      # d = (2.0, 2.1, 1.9): mean 2, sd 0.1
    half = stats.t.ppf(1 - 0.01 / 2, 2) * 0.1 / math.sqrt(3)
    v = verdict(cell, base, Plan(cap=16, boundary="bonferroni"))
    assert (v.status, v.n, v.pairs) == ("differs", 3, 3)
    assert (v.mean, v.lo, v.hi) == pytest.approx((2.0, 2.0 - half, 2.0 + half), rel=1e-9)


def test_the_correction_keeps_open_what_a_plain_95_interval_would_decide():
    """d = (1, 1.5, 2): the plain 95 % interval [0.26, 2.74] excludes 0, the 99 % one does not."""
    base, cell = seeds_of([10.0] * 3), seeds_of([11.0, 11.5, 12.0])
    assert stats.ttest_rel([11.0, 11.5, 12.0], [10.0] * 3).confidence_interval(0.95).low > 0
    v = verdict(cell, base, Plan(cap=16, boundary="bonferroni"))
    assert (v.status, v.n) == ("open", 3)
    assert targets([base, cell], [None, 0], Plan(cap=16, boundary="bonferroni")) == [5, 5]  # both run seeds 3 and 4 next


def test_a_cell_decided_at_the_second_look():
    """d = (1, 2, 3, 2, 2): open at 3 (half-width 5.7), at 5 mean 2, sd sqrt(0.5): [0.54, 3.46] at 99 %."""
    base, cell = seeds_of([10.0] * 5), seeds_of([11.0, 12.0, 13.0, 12.0, 12.0])
    half = stats.t.ppf(0.995, 4) * math.sqrt(0.5) / math.sqrt(5)
    v = verdict(cell, base, Plan(cap=16, boundary="bonferroni"))
    assert (v.status, v.n, v.pairs) == ("differs", 5, 5) and v.lo == pytest.approx(2 - half)
    # the look at 5 is made only once both ran seeds 0-4
    v = verdict(cell, {s: base[s] for s in range(4)}, Plan(cap=16, boundary="bonferroni"))
    assert (v.status, v.n) == ("open", 3)


def test_matches_within_the_margin():
    base, cell = seeds_of([10.0, 11.0, 12.0]), seeds_of([10.01, 10.99, 12.0])  # d = (0.01, -0.01, 0)
    assert verdict(cell, base, Plan(cap=16, match_margin=1.0, boundary="bonferroni")).status == "matches"
    assert verdict(cell, base, Plan(cap=16, boundary="bonferroni")).status == "open"


def test_open_at_the_cap_is_capped():
    d = [1.0, -1.0] * 8                                       # mean 0 at every even look
    base, cell = seeds_of([10.0] * 16), seeds_of([10.0 + x for x in d])
    v = verdict(cell, base, Plan(cap=16, boundary="bonferroni"))
    assert (v.status, v.n, v.pairs) == ("capped", 16, 16) and v.mean == 0.0
    assert targets([base, cell], [None, 0], Plan(cap=16, boundary="bonferroni")) == [3, 3]  # nothing more: only the first look's


def test_a_seed_without_a_value_is_no_pair():
    base = seeds_of([10.0, 11.0, 12.0])
    cell = {0: 12.0, 1: math.nan, 2: 13.0}                   # pairs: d = (2, 1)
    v = verdict(cell, base, Plan(cap=16, boundary="bonferroni"))
    assert (v.status, v.n, v.pairs, v.mean) == ("open", 3, 2, 1.5)


def test_targets_extend_open_cells_and_their_baselines_only():
    base = seeds_of([10.0, 11.0, 12.0])
    decided = seeds_of([15.0, 16.1, 16.9])
    open_ = seeds_of([11.0, 11.5, 12.0])
    other = seeds_of([12.0, 10.5, 12.5])                      # d = (1, -1, 0.5) from cell 2: open
    # cell 3 is compared with cell 2 (Pi + VD with Pi), cell 2 with the baseline
    assert targets([base, decided, open_, other], [None, 0, 0, 2], Plan(cap=16, boundary="bonferroni")) == [5, 3, 5, 5]
    # before any look: the first look's seeds for everyone
    assert targets([{}, {}, {}], [None, 0, 0], Plan(cap=16, boundary="bonferroni")) == [3, 3, 3]


def test_seeds_start_at_first_seed():
    base = seeds_of([10.0, 11.0, 12.0], first_seed=16)
    cell = seeds_of([12.0, 13.1, 13.9], first_seed=16)
    assert Plan(first_seed=16, boundary="bonferroni").seeds(3) == [16, 17, 18]
    assert verdict(cell, base, Plan(first_seed=16, boundary="bonferroni")).status == "differs"
    assert verdict(cell, base, Plan(first_seed=0, boundary="bonferroni")).n == 0  # seeds 0-2 never ran


def test_simulation_replays_the_same_procedure_as_verdict():
    """The vectorised simulation is a second implementation: on the same draws it must give each
    sweep the same verdict and seed count as the look-by-look replay."""
    plan = Plan(cap=12, match_margin=1.0)
    out = simulate(plan, effect=0.8, sd=0.8, sweeps=300, rng=np.random.default_rng(7))
    rng = np.random.default_rng(7)
    cell = rng.normal(0.8, 0.8, (300, 12))
    base = rng.normal(0.0, 0.8, (300, 12))
    for i in range(300):
        v = verdict(dict(enumerate(cell[i])), dict(enumerate(base[i])), plan)
        assert (STATUSES[out["status"][i]], out["n"][i]) == (v.status, v.n)
        assert out["mean"][i] == pytest.approx(v.mean)


def test_false_positive_rate_under_optional_stopping_is_at_most_alpha():
    """No effect, 20,000 simulated sweeps (standard error of a rate near 5 %: 0.15 points): the
    Bonferroni procedure says "differs" at most 5 % of the time, the O'Brien-Fleming-type boundary,
    calibrated on other draws (obf_constant), about 5 % (within 3 standard errors); stopping at the
    first plain 95 % interval that excludes 0 does so far more often, which this many sweeps tells apart."""
    differs = STATUSES.index("differs")
    fp = (simulate(Plan(cap=16, boundary="bonferroni"), 0.0, 0.8, 20_000, np.random.default_rng(0))["status"]
          == differs).mean()
    obf = (simulate(Plan(cap=16), 0.0, 0.8, 20_000, np.random.default_rng(3))["status"] == differs).mean()
    naive = (simulate(Plan(cap=16), 0.0, 0.8, 20_000, np.random.default_rng(1), level=0.95)["status"] == differs).mean()
    assert fp <= 0.05
    assert abs(obf - 0.05) < 3 * math.sqrt(0.05 * 0.95 / 20_000)
    assert naive > 0.08


def test_the_obrien_fleming_levels_follow_their_formula():
    """p_k = 2 (1 - Phi(c sqrt(n_K / n_k))) with the calibrated c: the first look strictest, the last
    looser than a Bonferroni look but stricter than alpha alone; the constant near the normal-theory
    O'Brien-Fleming value for 5 looks (2.04), which t-statistics at few seeds move only a little."""
    plan = Plan(cap=16)
    c = obf_constant(plan.looks, 0.05)
    p = [2 * stats.norm.sf(c * math.sqrt(16 / n)) for n in plan.looks]
    assert plan.levels == pytest.approx([1 - x for x in p], rel=1e-12)
    assert list(plan.levels) == sorted(plan.levels, reverse=True)
    assert 0.01 < 1 - plan.levels[-1] < 0.05 and 1 - plan.levels[0] < 1e-4
    assert 1.9 < c < 2.2


def test_power_grows_with_the_effect():
    plan = Plan(cap=16)
    differs = STATUSES.index("differs")
    power = [(simulate(plan, e, 0.8, 4000, np.random.default_rng(2))["status"] == differs).mean() for e in (0.5, 1.0, 2.0)]
    assert power[0] < power[1] < power[2] and power[2] > 0.95


def test_the_benchmarks_fixed_design_power_matches_a_simulated_t_test():
    """benchmarks/sequential_seeds.py's exact power (noncentral t) of a fixed paired t-test, against
    rejections counted over simulated sweeps of the same design (scipy's ttest_rel)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "sequential_seeds.py"
    spec = importlib.util.spec_from_file_location("sequential_seeds", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rng = np.random.default_rng(3)
    a, b = rng.normal(1.0, 0.8, (20_000, 6)), rng.normal(0.0, 0.8, (20_000, 6))   # (sweeps, seeds)
    rejected = (stats.ttest_rel(a, b, axis=1).pvalue < 0.05).mean()
    assert bench.fixed_power(6, 1.0, 0.8) == pytest.approx(rejected, abs=0.015)
    n = bench.fixed_seeds_for(0.8, 1.0, 0.8)
    assert bench.fixed_power(n, 1.0, 0.8) >= 0.8 > bench.fixed_power(n - 1, 1.0, 0.8)


def test_the_default_boundary_is_the_committed_simulations_most_powerful():
    """benchmarks/results/sequential_seeds.json compares the boundaries at one false-positive rate; the
    plan `--seeds auto` runs by default is the one with the most power there, with its first look."""
    import json
    from pathlib import Path

    d = json.loads((Path(__file__).resolve().parents[1] / "benchmarks/results/sequential_seeds.json").read_text())
    compared = [r for r in d["procedures"] if r["procedure"] != "kept" and "kept" not in r["procedure"]
                and r["boundary"] != "none"]
    best = max(compared, key=lambda r: r["power"])
    assert len(compared) == 3 and best["procedure"] == d["best_power"]
    assert (best["boundary"], best["looks"][0]) == (Plan().boundary, Plan().first) == (d["kept_boundary"], 3)
    # the three compared at one false-positive rate: within 3 standard errors of each other
    fp = [r["false_positive_rate"] for r in compared]
    assert max(fp) - min(fp) < 3 * max(r["false_positive_se"] for r in compared) * math.sqrt(2)
