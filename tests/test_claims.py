"""study/claims.py: a claim's verdict against its declared effect size, on hand-computed cases; one grade
per comparison, each trial counted once (study/evidence.py).

    pytest tests/test_claims.py -q
"""
import json
import math

import pytest
from scipy import stats

from study import claims

NAN = math.nan


@pytest.mark.parametrize("lo, hi, direction, size, want", [
    (-1.6, -0.4, "lower", 0.5, "yes"),
    (-0.3, -0.1, "lower", 0.5, "yes"),           # an effect smaller than the size still shows the direction
    (+0.2, +0.8, "lower", 0.5, "contradicted"),
    (-0.3, +0.4, "lower", 0.5, "absent"),        # inside +- 0.5: the effect that matters is ruled out
    (-0.7, +0.3, "lower", 0.5, "undecided"),     # reaches -0.7: an effect of 0.5 is still possible
    (-0.3, +0.6, "lower", 0.5, "undecided"),
    (+0.4, +2.0, "higher", 0.5, "yes"),
    (-1.6, -0.4, "higher", 0.5, "contradicted"),
    (-0.2, +0.45, "higher", 0.5, "absent"),
    (-0.8, +0.9, "matches", 1.0, "yes"),         # inside +- 1
    (-0.8, +1.2, "matches", 1.0, "undecided"),   # crosses the margin: not shown equal, not shown apart
    (+1.1, +2.0, "matches", 1.0, "contradicted"),
    (-3.0, -1.5, "matches", 1.0, "contradicted"),
    (-0.1, +0.1, "matches", 1.0, "yes"),
    (NAN, NAN, "lower", 0.5, "undecided"),        # one pair: no interval
])
def test_one_interval_decides(lo, hi, direction, size, want):
    assert claims.decide(lo, hi, direction, size) == want


@pytest.mark.parametrize("a, b, want", [
    ("yes", "yes", "yes"),
    ("contradicted", "contradicted", "contradicted"),
    ("absent", "absent", "absent"),
    ("yes", "contradicted", "disagree"),
    ("absent", "yes", "disagree"),               # the effect on one half, ruled out on the other
    ("yes", "undecided", "undecided"),           # one half underpowered: not a disagreement
    ("undecided", "contradicted", "undecided"),
    ("undecided", "undecided", "undecided"),
])
def test_two_halves_combine(a, b, want):
    assert claims.combine([a, b]) == want
    with pytest.raises(ValueError, match="two seed sets"):
        claims.combine([a])


@pytest.mark.parametrize("cells, want", [
    (["yes", "yes", "yes"], "yes"),
    (["yes", "contradicted", "undecided"], "contradicted"),
    (["yes", "disagree"], "disagree"),
    (["yes", "absent"], "absent"),               # "every cell has the effect" fails where it is ruled out
    (["undecided", "absent"], "absent"),
    (["yes", "undecided"], "undecided"),
])
def test_a_claim_of_several_cells(cells, want):
    assert claims.claim_verdict(cells) == want


def test_halves_are_disjoint_and_cover_the_seeds():
    assert claims.halves([4, 0, 3, 1, 2]) == ([0, 1, 2], [3, 4])
    assert claims.halves([10, 11, 0, 1]) == ([0, 1], [10, 11])


def _pair(diffs, ref=5.0):
    """{seed: cell value}, {seed: reference value} with the given paired differences."""
    return {s: ref + d for s, d in enumerate(diffs)}, {s: ref for s in range(len(diffs))}


def _ci(diffs):
    d = [5.0 + x for x in diffs]
    ci = stats.ttest_rel(d, [5.0] * len(d)).confidence_interval(0.95)
    return ci.low, ci.high


def _need(sd, gap):
    """Seeds per half for 80 % power, by scanning n (a second computation of claims.seeds_needed)."""
    return next(n for n in range(2, 5000)
                if (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n) <= gap)


def test_same_sign_with_one_half_underpowered_is_undecided_leaning_yes_with_the_seeds_it_needs():
    first, second = [-1.0, -1.2, -0.8, -1.0], [-2.0, +0.4, -1.5, -0.1]
    a, b = _pair(first + second)
    g = claims.grade_pair(a, b, "lower", 0.5)
    # by hand: first half mean -1.0, sd 0.163, t(3) 3.182 -> [-1.26, -0.74]: yes; second mean -0.8, sd 1.134
    # -> [-2.60, +1.00]: undecided; pooled mean -0.9, sd 0.758, t(7) 2.365 -> [-1.53, -0.27]
    assert [x["verdict"] for x in g["sets"]] == ["yes", "undecided"]
    assert (g["sets"][0]["lo"], g["sets"][0]["hi"]) == pytest.approx(_ci(first))
    assert (g["pooled"]["lo"], g["pooled"]["hi"]) == pytest.approx(_ci(first + second))
    assert g["pooled"]["lo"] == pytest.approx(-1.534, abs=2e-3) and g["pooled"]["verdict"] == "yes"
    assert g["verdict"] == "undecided" and g["lean"] == "yes"
    sd = stats.tstd(first + second)
    # by hand: (2.365 + 0.896) * 0.758 / sqrt(8) = 0.87 <= 0.9, while n = 7 gives 0.96
    assert g["need"] == (_need(sd, 0.9), "yes") and g["need"][0] == 8


def test_two_halves_that_really_disagree():
    a, b = _pair([-1.0, -1.2, -0.8, -1.0] + [+1.0, +1.2, +0.8, +1.0])
    g = claims.grade_pair(a, b, "lower", 0.5)
    assert [x["verdict"] for x in g["sets"]] == ["yes", "contradicted"]
    assert g["verdict"] == "disagree" and g["lean"] is None and g["need"] == (None, "")
    assert g["pooled"]["d"] == pytest.approx(0.0) and g["pooled"]["verdict"] == "undecided"


def test_opposite_signs_that_decide_nothing_do_not_lean():
    a, b = _pair([-1.0, -0.1, -1.9, -0.6] + [+0.9, -0.3, +1.7, +0.5])
    g = claims.grade_pair(a, b, "lower", 0.5)
    assert [x["verdict"] for x in g["sets"]] == ["undecided", "undecided"]
    assert g["verdict"] == "undecided" and g["lean"] is None


def test_absent_and_contradicted_on_both_halves():
    a, b = _pair([0.1, -0.1, 0.0, 0.05] + [-0.05, 0.1, -0.1, 0.0])
    assert claims.grade_pair(a, b, "lower", 0.5)["verdict"] == "absent"
    assert claims.grade_pair(a, b, "matches", 0.5)["verdict"] == "yes"
    a, b = _pair([1.0, 1.2, 0.8, 1.0, 0.9, 1.1, 1.0, 0.95])
    assert claims.grade_pair(a, b, "lower", 0.5)["verdict"] == "contradicted"
    assert claims.grade_pair(a, b, "higher", 0.5)["verdict"] == "yes"
    assert claims.grade_pair(a, b, "matches", 0.5)["verdict"] == "contradicted"


@pytest.mark.parametrize("d, sd, direction, size, want_gap, target", [
    (-1.0, 1.0, "lower", 0.5, 1.0, "yes"),          # excluding 0 (gap 1.0) is nearer than absence
    (+0.6, 1.0, "lower", 0.5, 0.6, "contradicted"),
    (-0.1, 1.0, "lower", 0.5, 0.4, "absent"),       # 0.5 - 0.1 to clear the size; 0.1 to clear 0
    (0.2, 1.0, "matches", 1.0, 0.8, "yes"),
    (1.5, 1.0, "matches", 1.0, 0.5, "contradicted"),
])
def test_seeds_needed_at_the_observed_effect(d, sd, direction, size, want_gap, target):
    assert claims.seeds_needed(d, sd, direction, size) == (_need(sd, want_gap), target)


def test_no_spread_gives_no_seed_count():
    assert claims.seeds_needed(-1.0, 0.0, "lower", 0.5) == (None, "")


# ---------------------------------------------------------------- one grade per comparison

BASE = {"method": "mt", "vd": False, "mur_radius": 1.0, "steps": 1000}


def _run(name, sweep, rows, extra_cols=()):
    """A committed run as committed_runs.read_run gives it, trials as trials.csv strings."""
    trials = []
    for mur, seed, err, *more in rows:
        t = {"mur": mur, "seed": str(seed), "status": "finished", "final_test_error": str(err)}
        t.update({k: str(v) for k, v in zip(extra_cols, more)})
        trials.append(t)
    return {"name": name, "sweep": sweep, "preset": "quick", "seeds": sorted({int(r[1]) for r in rows}),
            "meta": {"base": BASE, "variants": [{"mur": "none"}, {"mur": "direct"}]}, "trials": trials}


MT = {0: 5.0, 1: 6.0, 2: 4.0, 3: 5.5, 4: 4.8, 5: 5.2, 6: 6.1, 7: 4.4}
MUR = {0: 4.0, 1: 5.1, 2: 3.0, 3: 5.0, 4: 4.9, 5: 4.0, 6: 5.0, 7: 4.1}


def _runs():
    table = [_run(f"table-quick-s{lo}-{lo + 1}", "table", [(m, s, v[s]) for m, v in (("none", MT), ("direct", MUR))
                                                            for s in (lo, lo + 1)]) for lo in (0, 2)]
    # the ablation ran the same two configurations on seeds 0-7 (0-3: the same trials as the table's), with
    # a mur_steps column the direct point does not use and a radius cell of its own
    radius = [_run(f"radius-quick-s{lo}-{lo + 3}", "radius",
                   [(m, s, v[s], r, 1) for m, v, r in (("none", MT, 1.0), ("direct", MUR, 1.0), ("direct", MT, 4.0))
                    for s in range(lo, lo + 4)], ("mur_radius", "mur_steps")) for lo in (0, 4)]
    return table + radius


def _claim(name, sweep, effect, cells=({"mur": "direct"},)):
    return {"claim": name, "source": "here", "sweep": sweep, "preset": "quick", "cells": list(cells),
            "against": {"mur": "none"}, "direction": "lower", "effect": effect}


def test_two_claims_naming_one_comparison_get_one_grade_each_trial_counted_once():
    a, b = _claim("MUR helps (table)", "table", 0.4), _claim("MUR at r = 1 helps (radius)", "radius", 0.2,
                                                              [{"mur": "direct", "mur_radius": 1.0}])
    ga, gb = claims.grade_all([a, b, {"claim": "untested", "source": "x", "testable": False, "why": "y"}], _runs())[:2]
    va, vb = ga["cells"][0], gb["cells"][0]
    assert va["pooled"] is vb["pooled"] and va["sets"] is vb["sets"]  # one grade, cited twice
    assert va["pooled"]["n"] == 8 and va["pooled"]["seeds"] == list(range(8))  # seeds 0-3 once, not twice
    ci = stats.ttest_rel([MUR[s] for s in range(8)], [MT[s] for s in range(8)]).confidence_interval(0.95)
    assert (va["pooled"]["lo"], va["pooled"]["hi"]) == pytest.approx((ci.low, ci.high))
    assert [x["seeds"] for x in va["sets"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert va["size"] == 0.2 and ga["verdict"] == gb["verdict"]  # the smaller declared size, one verdict
    assert va["shared"] == ["MUR at r = 1 helps (radius)"] and vb["shared"] == ["MUR helps (table)"]
    assert va["runs"] == ["radius-quick-s0-3", "radius-quick-s4-7", "table-quick-s0-1", "table-quick-s2-3"]
    assert va["sweeps"] == vb["sweeps"] == ["radius", "table"]


def test_one_trial_with_two_results_is_an_error_naming_both_runs():
    runs = _runs()
    runs[0]["trials"][0]["final_test_error"] = "9.9"  # table's MT seed 0: the radius run holds it as 5.0
    with pytest.raises(claims.ClaimError, match="table-quick-s0-1 .*radius-quick-s0-3|radius-quick-s0-3 .*table"):
        claims.grade_all([_claim("MUR helps", "table", 0.4)], runs)


def test_copies_of_a_trial_from_two_kinds_of_cpu_keep_the_first_runs_copy_whole():
    """Another CPU rounds differently: its copy is another trajectory of the seed, not an error, and the
    kept copy is the one of the run whose name sorts first, whatever the order the runs come in."""
    runs = _runs()
    for r in runs:
        r["machine"] = {"cpu": "CPU A" if r["sweep"] == "table" else "CPU B"}
    runs[0]["trials"][0]["final_test_error"] = "9.9"  # table's MT seed 0 (CPU A); the radius run's is 5.0
    for order in (runs, runs[::-1]):
        (va,) = claims.grade_all([_claim("MUR helps", "table", 0.4)], order)[0]["cells"]
        assert va["pooled"]["n"] == 8  # seed 0 once
        diffs = [MUR[s] - MT[s] for s in range(8)]  # radius-quick-s0-3 sorts before table-quick-s0-1
        assert va["pooled"]["d"] == pytest.approx(sum(diffs) / 8)
        assert va["runs"] == ["radius-quick-s0-3", "radius-quick-s4-7"]  # the table's copies are not cited
    runs[1]["trials"][0]["final_test_error"] = "9.8"
    runs[1]["machine"] = {"cpu": "CPU B"}  # still an error between two runs on one kind of CPU
    with pytest.raises(claims.ClaimError, match="table-quick-s2-3 .*radius-quick-s0-3|radius-quick-s0-3 .*table-quick-s2-3"):
        claims.grade_all([_claim("MUR helps", "table", 0.4)], runs)
    # one CPU name with other vector kernels is another kind of CPU: the table's copies go on uncited
    for r in runs:
        r["machine"] = {"cpu": "CPU A", "cpu_kernels": "AVX2" if r["sweep"] == "table" else "AVX512"}
    (va,) = claims.grade_all([_claim("MUR helps", "table", 0.4)], runs)[0]["cells"]
    assert va["runs"] == ["radius-quick-s0-3", "radius-quick-s4-7"]
    runs[1]["machine"] = {"cpu": "CPU A"}  # kernels not recorded: the name decides, one kind of CPU
    with pytest.raises(claims.ClaimError, match="table-quick-s2-3 .*radius-quick-s0-3|radius-quick-s0-3 .*table-quick-s2-3"):
        claims.grade_all([_claim("MUR helps", "table", 0.4)], runs)


def test_the_kernels_a_trial_reported_decide_over_its_runs_machine():
    """A run resumed on another machine holds trials of two kinds; each trials.csv row's own cpu_kernels
    says which trajectory it is, whatever its run's machine.json says."""
    runs = _runs()
    for r in runs:
        r["machine"] = {"cpu": "CPU A", "cpu_kernels": "AVX512"}  # one kind of CPU, by the machines
    runs[0]["trials"][0]["final_test_error"] = "9.9"  # table's MT seed 0; the radius run's copy is 5.0
    with pytest.raises(claims.ClaimError, match="table-quick-s0-1 .*radius-quick-s0-3|radius-quick-s0-3 .*table"):
        claims.grade_all([_claim("MUR helps", "table", 0.4)], runs)
    runs[0]["trials"][0]["cpu_kernels"] = "AVX2"  # that copy says it ran on AVX2: another trajectory
    (va,) = claims.grade_all([_claim("MUR helps", "table", 0.4)], runs)[0]["cells"]
    assert va["pooled"]["n"] == 8 and va["pooled"]["d"] == pytest.approx(sum(MUR[s] - MT[s] for s in range(8)) / 8)
    runs[2]["trials"][0]["cpu_kernels"] = "AVX2"  # both copies on AVX2: one trajectory, and they differ
    assert (runs[2]["trials"][0]["mur"], runs[2]["trials"][0]["seed"]) == ("none", "0")
    with pytest.raises(claims.ClaimError, match="table-quick-s0-1 .*radius-quick-s0-3|radius-quick-s0-3 .*table"):
        claims.grade_all([_claim("MUR helps", "table", 0.4)], runs)


def test_a_metric_one_copy_of_a_trial_lacks_is_read_from_the_other():
    runs = _runs()  # the table's copies of seeds 0-3 come first and lack the sensitivity; the radius run has it
    for t in runs[0]["trials"] + runs[1]["trials"] + runs[3]["trials"]:
        t["final_sensitivity_mean"] = ""
    for t in runs[2]["trials"]:
        t["final_sensitivity_mean"] = str(0.1 * int(t["seed"]) + (0.5 if t["mur"] == "none" else 0.2))
    claim = {**_claim("MUR lowers the sensitivity", "table", 0.01), "metric": "sensitivity_mean"}
    g = claims.grade_all([claim], runs)[0]["cells"][0]
    assert g["pooled"]["seeds"] == [0, 1, 2, 3] and g["pooled"]["d"] == pytest.approx(-0.3)


def test_a_claim_whose_sweep_has_one_committed_run_is_pending():
    g = claims.grade_all([_claim("MUR helps", "table", 0.4)], _runs()[:1] + _runs()[2:])[0]
    assert g["verdict"] is None and g["status"] == "one seed set committed"


def _trials(rows):
    return [{"method": m, "kl_coef": str(k), "seed": str(s), "status": st, "final_test_error": str(v)}
            for m, k, s, st, v in rows]


def test_a_cell_naming_two_configurations_or_none_is_an_error():
    rows = [("vd", k, 0, "finished", 4.0) for k in (0.01, 0.5)] + [("mt", 0.05, 0, "finished", 5.0)]
    with pytest.raises(claims.ClaimError, match="several trials of seed 0"):
        claims.values(_trials(rows), claims.run_configs({"meta": {}, "trials": _trials(rows)}), {"method": "vd"},
                      "test_error", "here")
    run = {"name": "x", "meta": {"base": {}}, "trials": _trials(rows)}
    with pytest.raises(claims.ClaimError, match="no finished trial is the cell"):
        claims.configuration([run], {"method": "vd", "kl_coef": 0.2}, "here")


def test_a_cell_key_its_trials_csv_lacks_is_read_from_the_rows_variant():
    """trials.csv holds the keys a run varies; vd=False, which every variant of this run names and its base
    does not, is read from the variant the row ran, so the cell {"vd": False, ...} finds its trials, and
    vd=True finds none."""
    meta = {"base": {}, "variants": [{"method": "mt", "vd": False, "mur": m} for m in ("none", "direct")]}
    rows = [{"mur": m, "seed": "0", "status": "finished", "final_test_error": v} for m, v in (("none", "5"),
                                                                                           ("direct", "4"))]
    run = {"name": "x", "meta": meta, "trials": rows}
    configs = claims.run_configs(run)
    assert claims.values(rows, configs, {"vd": False, "mur": "direct"}, "test_error", "here") == {0: 4.0}
    assert claims.configuration([run], {"method": "mt", "vd": False, "mur": "none"}, "here")
    with pytest.raises(claims.ClaimError, match="no finished trial is the cell"):
        claims.configuration([run], {"vd": True, "mur": "none"}, "here")


@pytest.mark.parametrize("edit, match", [
    ({"direction": "matches"}, "margin"),
    ({"effect": None}, "effect"),
    ({"effect": -0.5}, "effect"),
    ({"direction": "better"}, "direction"),
    ({"metric": "accuracy"}, "metric"),
    ({"against": None}, "against"),
])
def test_a_malformed_claim_is_a_one_line_error(tmp_path, edit, match):
    good = {"claim": "VD helps", "source": "Table 1", "sweep": "ablation_kl", "preset": "quick",
            "cells": [{"vd": True}], "against": {"vd": False}, "direction": "lower", "effect": 0.5}
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


def test_a_grade_pooling_seeds_of_a_seeds_auto_run_says_its_intervals_are_approximate():
    runs = _runs()
    runs[-1]["meta"] = {**runs[-1]["meta"], "max_seeds": 16}  # radius-quick-s4-7 ran with --seeds auto
    claim = _claim("MUR helps (table)", "table", 0.4)
    g = claims.grade_all([claim], runs)[0]
    assert g["cells"][0]["adaptive"] == ["radius-quick-s4-7"]
    assert "seeds partly chosen by --seeds auto (radius-quick-s4-7): intervals approximate" in \
        claims.evidence_text(claim, g)
    plain = claims.grade_all([claim], _runs())[0]
    assert "--seeds auto" not in claims.evidence_text(claim, plain)
