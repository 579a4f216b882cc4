"""Planned against present: a cell with fewer trials than the run planned says so, and why.

Fake experiments laid out as sweeper.run and Ray Tune lay them out (sweep.json, trials.json, Tune's
experiment_state, trial folders), with trials taken away in the ways a user meets: a folder moved
aside, a params.json gone, a result.json cut short, a trial Tune never created.

    pytest tests/test_planned.py -q
"""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import write_trial

from sweeper.analysis.planned import add_planned, plan, short_cells
from sweeper.analysis.aggregate import load_trials, summarize
from sweeper.report import main as report_main

ROWS = [("none", 40.0), ("direct", 30.0)]  # mur, test error
SEEDS = 4


def make_exp(tmp_path, created: int | None = None, search: bool = False):
    """A grid of 2 rows x 4 seeds (trial_index 0-7), every trial finished; Tune's state lists the first
    `created` trials (all by default). Returns the experiment and its trial folders by trial_index."""
    exp = tmp_path / "ablation_radius-20260101-000000-abcdef"
    configs = [{"method": "mt", "mur": mur, "seed": s, "steps": 300, "trial_index": i * SEEDS + s}
               for i, (mur, _) in enumerate(ROWS) for s in range(SEEDS)]
    dirs, states = {}, []
    for c in configs:
        err = dict(ROWS)[c["mur"]] + c["seed"]
        d = write_trial(exp, c["trial_index"], c, [{"step": 150, "test_error": err + 5},
                                                   {"step": 300, "test_error": err, "done": True}])
        dirs[c["trial_index"]] = d
        states.append([json.dumps({"relative_logdir": d.name, "status": "TERMINATED", "trial_id": d.name,
                                   "config": c}), "{}"])
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text(
        json.dumps({"trial_data": states[:created], "runner_data": {}}))
    meta = {"name": "ablation_radius", "rows": ["method", "mur"], "cols": [], "metric": "test_error",
            "n_trials": len(configs), "baseline": {"mur": "none"}}
    if search:
        meta["search"] = {"space": {"mur_coef": ["uniform", 0, 1]}, "num_samples": len(configs)}
    (exp / "sweep.json").write_text(json.dumps(meta))
    (exp / "trials.json").write_text(json.dumps(configs))
    return exp, dirs


def summary_of(exp):
    trials = load_trials(exp)
    return add_planned(summarize(trials), trials, exp)


def test_a_whole_run_is_as_planned(tmp_path):
    exp, _ = make_exp(tmp_path)
    s = summary_of(exp)
    assert s["n_planned"].tolist() == [SEEDS, SEEDS] and s["n_missing"].tolist() == [0, 0]
    assert short_cells(s) == []


def test_each_way_a_trial_goes_short_is_counted_and_named(tmp_path):
    exp, dirs = make_exp(tmp_path, created=7)  # trial 7 never created by Tune
    shutil.rmtree(dirs[7])
    shutil.move(str(dirs[1]), str(tmp_path / "aside"))  # the advice a torn params.json's message gives
    (dirs[2] / "params.json").unlink()
    with (dirs[3] / "result.json").open("r+") as f:  # its last report cut: Tune ended it, nothing will append
        text = f.read()
        f.seek(0), f.truncate(), f.write(text[: text.rindex('{"step": 300') + 12])
    s = summary_of(exp).set_index("mur")
    assert s.loc["none", "n_planned"] == SEEDS and s.loc["none", "n_missing"] == 2
    assert s.loc["none", "n"] == 1 and s.loc["none", "n_incomplete"] == 1  # seed 0 averaged, seed 3 cut (stopped)
    why = s.loc["none", "short_why"]
    assert f"{dirs[1].name}: folder missing" in why and f"{dirs[2].name}/params.json missing" in why
    assert f"{dirs[3].name}/result.json cut short" in why
    assert s.loc["direct", "n_missing"] == 1 and s.loc["direct", "short_why"] == "trial 7: not started (Tune had " \
                                                                                  "not created it)"


def test_a_cell_with_no_trial_left_is_a_row_of_n_0(tmp_path):
    exp, dirs = make_exp(tmp_path)
    for i in range(SEEDS, 2 * SEEDS):
        shutil.rmtree(dirs[i])
    s = summary_of(exp).set_index("mur")
    assert s.loc["direct", "n"] == 0 and s.loc["direct", "n_planned"] == SEEDS and s.loc["direct", "n_missing"] == SEEDS


def test_the_report_says_so_in_the_table_the_summary_and_one_stderr_line_per_cell_and_exits_0(tmp_path, capsys):
    exp, dirs = make_exp(tmp_path)
    for i in (1, 2, 3):
        shutil.move(str(dirs[i]), str(tmp_path / f"aside{i}"))
    assert report_main([str(exp)]) == 0
    out, err = capsys.readouterr()
    warnings = [ln for ln in err.splitlines() if ln.startswith("warning: ")]
    assert len(warnings) == 1 and "cell method=mt, mur=none: 1 of 4 planned trials present, 1 averaged" in warnings[0]
    assert all(dirs[i].name in warnings[0] for i in (1, 2, 3))
    assert "40.00 (n=1, 3 missing)" in out and "Fewer trials than planned" in (exp / "table.md").read_text()
    csv = pd.read_csv(exp / "summary.csv")
    assert csv.set_index("mur").loc["none", ["n_planned", "n_missing"]].tolist() == [4, 3]
    assert csv.set_index("mur").loc["direct", ["n_planned", "n_missing"]].tolist() == [4, 0]
    assert "3 missing" in (exp / "report.html").read_text()


def test_a_search_plans_the_samples_tune_drew(tmp_path):
    exp, dirs = make_exp(tmp_path, search=True)
    (exp / "trials.json").unlink()  # a search keeps none: its plan is Tune's state
    shutil.rmtree(dirs[5])
    p = plan(exp)
    assert len(p) == 2 * SEEDS and {q["trial_dir"] for q in p} == {d.name for d in dirs.values()}
    s = summary_of(exp).set_index("mur")
    assert s.loc["direct", "n_missing"] == 1 and f"{dirs[5].name}: folder missing" in s.loc["direct", "short_why"]


@pytest.mark.parametrize("keep", ["no sweep.json", "a grid without trials.json"])
def test_a_run_that_keeps_no_plan_is_summarised_as_before(keep, tmp_path):
    exp, _ = make_exp(tmp_path)
    (exp / ("sweep.json" if keep == "no sweep.json" else "trials.json")).unlink()
    trials = load_trials(exp)
    assert add_planned(summarize(trials), trials, exp).equals(summarize(trials))
