"""sweeper/docgen/claims.py: a claim's verdict over two seed sets, on hand-computed cases.

    pytest tests/test_claims.py -q
"""
import json
import math

import pytest

from sweeper.docgen import claims

NAN = math.nan


@pytest.mark.parametrize("lo, hi, direction, margin, want", [
    (-1.6, -0.4, "lower", None, "for"),
    (-2.0, +0.1, "lower", None, "open"),
    (+0.2, +0.8, "lower", None, "against"),
    (+0.4, +2.0, "higher", None, "for"),
    (-0.6, +1.9, "higher", None, "open"),
    (-1.6, -0.4, "higher", None, "against"),
    (-0.8, +0.9, "matches", 1.0, "for"),      # inside +- 1
    (-0.8, +1.2, "matches", 1.0, "open"),     # crosses the margin: not shown equal, not shown apart
    (+1.1, +2.0, "matches", 1.0, "against"),  # wholly outside the margin
    (-3.0, -1.5, "matches", 1.0, "against"),
    (NAN, NAN, "lower", None, "open"),        # one pair: no interval
])
def test_outcome_of_one_cell(lo, hi, direction, margin, want):
    assert claims.outcome(lo, hi, direction, margin) == want


@pytest.mark.parametrize("outcomes, want", [
    (["for", "for"], "yes"),
    (["for", "open"], "no"),
    (["for", "against"], "contradicted"),
    (["open", "against"], "contradicted"),
    ([], "no"),
])
def test_set_verdict(outcomes, want):
    assert claims.set_verdict(outcomes) == want


@pytest.mark.parametrize("a, b, want", [
    ("yes", "yes", "yes"),
    ("yes", "no", "no"),
    ("no", "no", "no"),
    ("contradicted", "contradicted", "contradicted"),
    ("contradicted", "yes", "mixed"),
    ("no", "contradicted", "mixed"),
])
def test_two_seed_sets_combine(a, b, want):
    assert claims.combine([a, b]) == want
    with pytest.raises(ValueError, match="two seed sets"):
        claims.combine([a])


def _trials(rows):
    return [{"method": m, "kl_coef": str(k), "seed": str(s), "status": st, "final_test_error": str(v)}
            for m, k, s, st, v in rows]


def test_compare_pairs_by_seed_drops_unfinished_trials_and_reads_unvaried_keys_from_the_base():
    from scipy import stats

    rows = [("mt", 0.05, s, "finished", v) for s, v in zip(range(4), (5.0, 6.0, 4.0, 5.5))]
    rows += [("vd", 0.01, s, "finished", v) for s, v in zip(range(3), (4.0, 5.1, 3.0))]
    rows += [("vd", 0.01, 3, "failed", 1.0)]  # not a pair
    base = {"vd": True}  # a key the sweep does not vary
    c = claims.compare(_trials(rows), base, {"method": "vd", "kl_coef": 0.01, "vd": True},
                       {"method": "mt", "kl_coef": None}, "test_error", "here")
    assert c["ref"] == {"method": "mt", "vd": True} and c["n"] == 3
    ci = stats.ttest_rel([4.0, 5.1, 3.0], [5.0, 6.0, 4.0]).confidence_interval(0.95)
    assert c["d"] == pytest.approx(-2.9 / 3) and (c["lo"], c["hi"]) == pytest.approx((ci.low, ci.high))


def test_a_cell_naming_two_configurations_or_none_is_an_error():
    rows = [("vd", k, 0, "finished", 4.0) for k in (0.01, 0.5)] + [("mt", 0.05, 0, "finished", 5.0)]
    with pytest.raises(claims.ClaimError, match="several trials of seed 0"):
        claims.compare(_trials(rows), {}, {"method": "vd"}, {"method": "mt"}, "test_error", "here")
    with pytest.raises(claims.ClaimError, match="no finished trial is the cell"):
        claims.compare(_trials(rows), {}, {"method": "vd", "kl_coef": 0.2}, {"method": "mt", "kl_coef": None},
                       "test_error", "here")


@pytest.mark.parametrize("edit, match", [
    ({"direction": "matches"}, "margin"),
    ({"direction": "better"}, "direction"),
    ({"metric": "accuracy"}, "metric"),
    ({"against": None}, "against"),
])
def test_a_malformed_claim_is_a_one_line_error(tmp_path, edit, match):
    good = {"claim": "VD helps", "source": "Table 1", "sweep": "ablation_kl", "preset": "quick",
            "cells": [{"vd": True}], "against": {"vd": False}, "direction": "lower"}
    bad = {k: v for k, v in {**good, **edit}.items() if v is not None}
    path = tmp_path / "claims.json"
    path.write_text(json.dumps([good]))
    assert claims.load(path) == [good]
    path.write_text(json.dumps([bad]))
    with pytest.raises(claims.ClaimError, match=match) as e:
        claims.load(path)
    assert "\n" not in str(e.value)
    path.write_text(json.dumps([{"claim": "CIFAR-100 too", "source": "Table 1", "testable": False}]))
    with pytest.raises(claims.ClaimError, match="why"):
        claims.load(path)
