"""Tests of sweeper.analysis.aggregate on fake Ray Tune folders written here, and one real Ray Tune folder.

    pytest tests/test_aggregate.py -q            # the real-Ray test is marked slow (~20 s)
"""
from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pandas as pd
import pytest

from conftest import write_trial
from sweeper.analysis.aggregate import (AggregateError, check_experiment, group_keys, load_history,
                                        load_trials, newest_ray_state, read_json_lines, summarize, write_summary, write_trials)
from trainables.files import atomic_write

STEPS = (100, 200, 300)


def finished_reports(errors, g0=None):
    """One report per evaluation; the last one has done=True."""
    out = []
    for k, (step, e) in enumerate(zip(STEPS, errors)):
        r = {"step": step, "test_error": float(e), "diverged": 0, "done": k == len(errors) - 1,
             "wall_time": 2.0 * (k + 1), "sparsity": math.nan}
        if g0 is not None:
            r["g0_norm"] = float(g0[k])
        out.append(r)
    return out


@pytest.fixture
def experiment(tmp_path):
    """Two configs: A = MT (4 finished seeds), B = MT+VD+MUR (3 finished, 1 failed, 1 diverged)."""
    rng = np.random.default_rng(0)
    exp = tmp_path / "table_cifar-20260101-000000"
    errs = {"A": rng.uniform(10, 30, size=(4, 3)), "B": rng.uniform(10, 30, size=(3, 3))}
    base = {"dataset": "cifar10", "num_labels": 1000, "data_dir": "/data", "mur_radius": 10.0}
    idx = 0
    for seed in range(4):
        write_trial(exp, idx, {**base, "method": "mt", "vd": False, "mur": "none", "seed": seed, "trial_index": idx},
                    finished_reports(errs["A"][seed]))
        idx += 1
    b = {**base, "method": "mt", "vd": True, "mur": "direct"}
    for seed in range(3):
        write_trial(exp, idx, {**b, "seed": seed, "trial_index": idx}, finished_reports(errs["B"][seed]))
        idx += 1
    # failed after one report with a huge error: must be counted, not averaged
    write_trial(exp, idx, {**b, "seed": 3, "trial_index": idx},
                [{"step": 100, "test_error": 99.0, "diverged": 0, "done": False}], error=True)
    idx += 1
    # diverged: last report diverged=1, test_error NaN, done=True (as trainables.tune reports it)
    write_trial(exp, idx, {**b, "seed": 4, "trial_index": idx},
                [{"step": 100, "test_error": 1.0, "diverged": 0, "done": False},
                 {"step": 200, "test_error": math.nan, "diverged": 1, "diverged_step": 150, "done": True}])
    (exp / "sweep.json").write_text(json.dumps({"name": "table_cifar", "rows": ["method", "vd", "mur"],
                                                "cols": ["dataset", "num_labels"], "metric": "test_error"}))
    return exp, errs


def test_one_row_per_trial_with_status_final_and_best(experiment):
    exp, errs = experiment
    df = load_trials(exp)
    assert len(df) == 9 and df["trial_id"].is_unique
    assert (df["sweep"] == "table_cifar").all()
    by_status = df["status"].value_counts().to_dict()
    assert by_status == {"finished": 7, "failed": 1, "diverged": 1}
    a = df[~df["vd"].astype(bool) & (df["status"] == "finished")].sort_values("seed")
    np.testing.assert_allclose(a["final_test_error"], errs["A"][:, -1])
    np.testing.assert_allclose(a["best_test_error"], errs["A"].min(axis=1))
    assert list(a["best_step"]) == [STEPS[i] for i in errs["A"].argmin(axis=1)]
    assert list(a["n_reports"]) == [3] * 4
    np.testing.assert_allclose(a["wall_time_s"], 6.0)          # the trainer's wall_time at the last report
    failed = df[df["status"] == "failed"].iloc[0]
    assert failed["n_failures"] == 1 and failed["n_reports"] == 1
    assert df.loc[df["status"] == "diverged", "final_diverged_step"].item() == 150
    assert not [c for c in df.columns if c.startswith(("final_config", "final_trial_id", "final_timestamp"))]


def test_summary_mean_sample_std_and_counts(experiment):
    exp, errs = experiment
    df = load_trials(exp)
    s = summarize(df, "test_error", "final").set_index("vd")
    assert "seed" not in s.columns and "trial_index" not in s.columns and "data_dir" not in s.columns
    for vd, key in ((False, "A"), (True, "B")):
        final = errs[key][:, -1]
        assert s.loc[vd, "mean"] == pytest.approx(final.sum() / len(final))
        assert s.loc[vd, "std"] == pytest.approx(math.sqrt(((final - final.mean()) ** 2).sum() / (len(final) - 1)))
        assert s.loc[vd, "n"] == len(final)
    assert (s.loc[True, "n_failed"], s.loc[True, "n_diverged"], s.loc[True, "n_trials"]) == (1, 1, 5)
    assert (s.loc[False, "n_failed"], s.loc[False, "n_diverged"]) == (0, 0)
    assert s.loc[True, "seeds"] == "0,1,2"
    best = summarize(df, "test_error", "best_test").set_index("vd")
    assert best.loc[False, "mean"] == pytest.approx(errs["A"].min(axis=1).mean())
    assert best.loc[True, "std"] == pytest.approx(np.std(errs["B"].min(axis=1), ddof=1))


def test_summary_files_written(experiment, tmp_path):
    exp, _ = experiment
    s = summarize(load_trials(exp))
    paths = write_summary(s, exp)
    back = pd.read_parquet(paths["summary.parquet"])
    pd.testing.assert_frame_equal(back, s, check_dtype=False)
    csv = pd.read_csv(paths["summary.csv"])
    np.testing.assert_allclose(csv["mean"], s["mean"])
    assert not [p for p in os.listdir(exp) if p.endswith(".tmp")]


def test_trials_parquet_round_trip_and_atomic(experiment):
    exp, _ = experiment
    df = load_trials(exp)
    path = write_trials(df, exp / "trials.parquet")
    back = pd.read_parquet(path)
    assert list(back.columns) == list(df.columns)
    np.testing.assert_allclose(back["final_test_error"], df["final_test_error"])
    assert list(back["status"]) == list(df["status"])
    before = path.read_bytes()

    def torn_write(tmp):
        open(tmp, "wb").write(b"half a file")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, torn_write)
    assert path.read_bytes() == before                        # old file intact
    assert not [p for p in os.listdir(exp) if p.endswith(".tmp")]


def test_interrupted_trial_with_torn_last_line(tmp_path):
    exp = tmp_path / "exp"
    p = {"method": "mt", "dataset": "digits", "num_labels": 100}
    write_trial(exp, 0, {**p, "seed": 0}, finished_reports([20.0, 15.0, 12.0]))
    write_trial(exp, 1, {**p, "seed": 1}, finished_reports([22.0, 18.0, 14.0]))
    write_trial(exp, 2, {**p, "seed": 2}, [{"step": 100, "test_error": 21.0, "done": False},
                                           {"step": 200, "test_error": 16.0, "done": False}],
                torn='{"step": 300, "test_err')
    df = load_trials(exp)
    row = df[df["seed"] == 2].iloc[0]
    assert row["status"] == "incomplete" and row["n_reports"] == 2 and row["final_test_error"] == 16.0
    s = summarize(df).iloc[0]
    assert s["n"] == 2 and s["n_incomplete"] == 1
    assert s["mean"] == pytest.approx(13.0) and s["std"] == pytest.approx(math.sqrt(2.0))
    hist = load_history(exp)
    assert len(hist[hist["trial_id"] == "ab12c_00002"]) == 2


def test_trial_without_any_result_is_incomplete(tmp_path):
    exp = tmp_path / "exp"
    write_trial(exp, 0, {"method": "mt", "seed": 0}, None)
    row = load_trials(exp).iloc[0]
    assert row["status"] == "incomplete" and row["n_reports"] == 0


def test_a_record_cut_short_and_then_appended_to_by_a_resumed_trial_is_dropped(tmp_path):
    """A driver killed while Tune flushed a report, then --resume: the restored trial appends its next
    report to the cut-short line. At every cut point (nested config braces included) the reader keeps
    every whole record, in order, and drops only the cut-short piece."""
    cfg = {"method": "mt", "nested": {"lr": 0.1, "sched": {"warmup": [0, 1]}}, "note": "a {brace} in text"}
    recs = [{"step": s, "test_error": 30.0 - s / 10, "done": False, "config": cfg} for s in (10, 20, 30, 40)]
    a, b, c = (json.dumps(r) for r in recs[1:])
    path = tmp_path / "result.json"
    for cut in range(1, len(a) + 1):
        path.write_text(json.dumps(recs[0]) + "\n" + a[:cut] + b + "\n" + c + "\n")
        got, torn = read_json_lines(path)
        kept = recs if cut == len(a) else [recs[0], *recs[2:]]  # a whole record that lost only its newline stays
        assert (got, torn) == (kept, False), cut


@pytest.mark.parametrize("cut", [lambda line: line[:10], lambda line: "garbage" + line],
                         ids=["cut short", "junk before a whole record"])
def test_corrupt_line_before_the_last_is_an_error(tmp_path, cut):
    exp = tmp_path / "exp"
    d = write_trial(exp, 0, {"method": "mt", "seed": 0}, finished_reports([20.0, 15.0, 12.0]))
    lines = (d / "result.json").read_text().split("\n")
    lines[1] = cut(lines[1])
    (d / "result.json").write_text("\n".join(lines))
    with pytest.raises(AggregateError, match=r"result.json: line 2 is not JSON"):
        load_trials(exp)


def test_the_newest_ray_state_is_the_one_tune_restores_by_name_not_by_file_time(tmp_path):
    """A resumed driver writes experiment_state-<its start>.json beside the first driver's; Tune restores
    the greatest name even when a copy (a sync, a restore from a bucket) gave the older file a later mtime."""
    first, second = (tmp_path / f"experiment_state-2026-01-0{d}_00-00-00.json" for d in (1, 2))
    second.write_text("{}")
    first.write_text("{}")
    os.utime(first, (2e9, 2e9))
    assert newest_ray_state(tmp_path) == second and newest_ray_state(tmp_path / "none") is None


def test_ray_state_marks_stopped_and_errored(tmp_path):
    """experiment_state-*.json in Ray 2.x's layout: TERMINATED without done=True is an early stop."""
    exp = tmp_path / "exp"
    d0 = write_trial(exp, 0, {"method": "mt", "seed": 0}, [{"step": 100, "test_error": 30.0, "done": False}])
    d1 = write_trial(exp, 1, {"method": "mt", "seed": 1}, [{"step": 100, "test_error": 30.0, "done": False}])
    d2 = write_trial(exp, 2, {"method": "mt", "seed": 2}, [{"step": 100, "test_error": 30.0}])
    state = {"trial_data": [[json.dumps({"trial_id": f"ab12c_0000{i}", "status": s, "relative_logdir": d.name}), "{}"]
                            for i, (d, s) in enumerate(((d0, "TERMINATED"), (d1, "ERROR"), (d2, "TERMINATED")))]}
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps(state))
    assert list(load_trials(exp)["status"]) == ["stopped", "failed", "finished"]


def test_retried_trial_that_finished_is_finished(tmp_path):
    exp = tmp_path / "exp"
    write_trial(exp, 0, {"method": "mt", "seed": 0}, finished_reports([20.0, 15.0, 12.0]), error=True)
    row = load_trials(exp).iloc[0]
    assert row["status"] == "finished" and row["n_failures"] == 1


def test_missing_config_key_gets_the_trainconfig_default(tmp_path):
    exp = tmp_path / "exp"
    write_trial(exp, 0, {"method": "mt", "seed": 0}, finished_reports([20.0, 15.0, 12.0]))
    write_trial(exp, 1, {"method": "mt", "vd": True, "seed": 0}, finished_reports([20.0, 15.0, 11.0]))
    df = load_trials(exp)
    assert list(df["vd"]) == [False, True]
    assert group_keys(df) == ["method", "vd"]
    assert len(summarize(df)) == 2


def test_versions_reported_or_from_environment(tmp_path):
    exp = tmp_path / "exp"
    write_trial(exp, 0, {"method": "mt", "seed": 0}, [{"step": 1, "test_error": 5.0, "done": True,
                                                        "python_version": "3.0.0", "torch_version": "9.9"}])
    write_trial(exp, 1, {"method": "mt", "seed": 1}, [{"step": 1, "test_error": 5.0, "done": True}])
    df = load_trials(exp).set_index("seed")
    assert df.loc[0, "versions_source"] == "reported" and df.loc[0, "torch_version"] == "9.9"
    assert df.loc[1, "versions_source"] == "aggregation_env"
    assert df.loc[1, "python_version"].count(".") == 2


def test_the_cpu_kernels_come_only_from_the_trial(tmp_path):
    """A trial's reported kernels are a column of their own, not a metric; one that did not report them
    gets none (the aggregating machine may be another kind of CPU)."""
    exp = tmp_path / "exp"
    write_trial(exp, 0, {"method": "mt", "seed": 0}, [{"step": 1, "test_error": 5.0, "done": True,
                                                        "cpu_kernels": "AVX2"}])
    write_trial(exp, 1, {"method": "mt", "seed": 1}, [{"step": 1, "test_error": 5.0, "done": True}])
    df = load_trials(exp).set_index("seed")
    assert df.loc[0, "cpu_kernels"] == "AVX2" and pd.isna(df.loc[1, "cpu_kernels"])
    assert not any("cpu_kernels" in c for c in df.columns if c != "cpu_kernels")


def test_not_an_experiment_folder(tmp_path):
    with pytest.raises(AggregateError, match="does not exist"):
        check_experiment(tmp_path / "nope")
    with pytest.raises(AggregateError, match="not a Ray Tune experiment folder"):
        check_experiment(tmp_path)
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(AggregateError, match="is a file"):
        check_experiment(tmp_path / "f.txt")
    write_trial(tmp_path / "sweep-1", 0, {"seed": 0}, None)
    with pytest.raises(AggregateError, match="holds 1 experiment folder"):
        check_experiment(tmp_path)


def test_unknown_metric_or_which_is_a_clear_error(experiment):
    exp, _ = experiment
    df = load_trials(exp)
    with pytest.raises(AggregateError, match="no trial reported 'accuracy'"):
        summarize(df, "accuracy")
    with pytest.raises(AggregateError, match="'best_test' is defined for the error metrics"):
        summarize(df, "sparsity", "best_test")
    with pytest.raises(AggregateError, match="'best_val' is defined for the error metrics"):
        summarize(df, "sparsity", "best_val")
    with pytest.raises(AggregateError, match="which must be"):
        summarize(df, "test_error", "last")


def test_bestval_takes_the_metrics_at_the_report_of_lowest_validation_error(tmp_path):
    """best_val: the test error where val_error is lowest (first report on ties, NaN val skipped), not
    the lowest test error (best_test); a trial without a validation split (val_size=0) gets NaN and still
    aggregates (it simply is not counted in a best_val mean)."""
    exp = tmp_path / "exp"
    rep = [{"step": 100, "test_error": 30.0, "test_error_student": 31.0, "val_error": 28.0, "done": False},
           {"step": 200, "test_error": 22.0, "test_error_student": 23.0, "val_error": 20.0, "done": False},
           {"step": 300, "test_error": 18.0, "test_error_student": 19.0, "val_error": math.nan, "done": False},
           {"step": 400, "test_error": 15.0, "test_error_student": 16.0, "val_error": 20.0, "done": True}]
    write_trial(exp, 0, {"method": "mt", "seed": 0}, rep)
    write_trial(exp, 1, {"method": "mt", "seed": 1}, finished_reports([20.0, 15.0, 12.0]))   # no val_error
    df = load_trials(exp)
    new, old = df[df["seed"] == 0].iloc[0], df[df["seed"] == 1].iloc[0]
    assert (new["bestval_test_error"], new["bestval_test_error_student"], new["bestval_step"]) == (22.0, 23.0, 200)
    assert new["bestval_val_error"] == 20.0 and new["best_val_error"] == 20.0
    assert (new["best_test_error"], new["best_step"]) == (15.0, 400)          # best_test looks at the test set
    assert math.isnan(old["bestval_test_error"]) and math.isnan(old["bestval_step"])
    assert old["best_test_error"] == 12.0 and old["status"] == "finished"
    assert group_keys(df) == ["method"]                                        # bestval_* are no config keys
    s = summarize(df, "test_error", "best_val").iloc[0]
    assert (s["which"], s["n"], s["mean"], s["seeds"]) == ("best_val", 1, 22.0, "0")
    assert summarize(df, "test_error", "best_test").iloc[0]["which"] == "best_test"
    assert summarize(df, "test_error", "best_test").iloc[0]["mean"] == pytest.approx((15.0 + 12.0) / 2)
    with pytest.raises(AggregateError, match="which must be one of final, best_val, best_test, median_last; got 'best'"):
        summarize(df, "test_error", "best")


@pytest.mark.slow
def test_real_ray_tune_folder(tmp_path):
    """4 trials of a tiny function trainable through ray.tune: 2 finish, 1 diverges, 1 raises."""
    ray = pytest.importorskip("ray")
    from ray import tune

    errors = {0: [30.0, 20.0], 1: [28.0, 22.0], 2: [25.0, math.nan]}

    def trainable(config):
        seed = config["seed"]
        for k, step in enumerate((10, 20)):
            if seed == 3 and k == 1:
                raise RuntimeError("boom")
            err = errors.get(seed, [40.0, 40.0])[k]
            diverged = int(seed == 2 and k == 1)
            tune.report({"step": step, "test_error": err, "best_test_error": err, "diverged": diverged,
                         "diverged_step": step if diverged else -1, "diverged_term": "loss_xent" if diverged else "",
                         "g0_norm": 1.0 / step, "sensitivity_hist": json.dumps({"counts": [1, 2], "edges": [0, 1, 2]}),
                         "wall_time": 0.1 * step, "done": k == 1})

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        space = {"method": "mt", "dataset": "digits", "num_labels": 100, "seed": tune.grid_search([0, 1, 2, 3])}
        tuner = tune.Tuner(trainable, param_space=space,
                           run_config=tune.RunConfig(name="tiny", storage_path=str(tmp_path), verbose=0))
        grid = tuner.fit()                                      # does not raise for the failed trial
        assert sum(r.error is not None for r in grid) == 1
    finally:
        ray.shutdown()
    df = load_trials(tmp_path / "tiny").set_index("seed")
    assert list(df["status"].sort_index()) == ["finished", "finished", "diverged", "failed"]
    assert df.loc[3, "n_failures"] == 1 and df.loc[3, "n_reports"] == 1
    assert (df["versions_source"] == "aggregation_env").all()
    assert df.loc[0, "trial_id"] in df.loc[0, "trial_dir"]
    s = summarize(df.reset_index()).iloc[0]
    assert s["n"] == 2 and s["n_diverged"] == 1 and s["n_failed"] == 1
    assert s["mean"] == pytest.approx(21.0) and s["std"] == pytest.approx(math.sqrt(2.0))
    hist = load_history(tmp_path / "tiny")
    assert set(hist["step"]) == {10, 20} and hist["g0_norm"].notna().all()
    from sweeper.report import build_report                 # the whole report, Ray shut down

    paths = build_report(tmp_path / "tiny")
    assert "21.00 ± 1.41 (n=2, 1 failed, 1 diverged)" in paths["table.md"].read_text()
    assert paths["g0_norm.png"].stat().st_size > 0 and paths["sensitivity_hist.png"].stat().st_size > 0


def test_a_trial_stopped_by_asha_is_stopped_although_tune_marks_it_done(tmp_path):
    """Tune writes done=True into the last report of a trial its scheduler stopped (seen in a real hpo
    run), so a trial with `steps` in its config is finished only when its last report reached them."""
    exp = tmp_path / "exp"
    cases = [  # (last step, done, Ray status, error file) -> status
        (60, True, "TERMINATED", False, "finished"),
        (20, True, "TERMINATED", False, "stopped"),     # ASHA at the first rung
        (40, False, "TERMINATED", False, "stopped"),
        (40, False, "RUNNING", False, "incomplete"),
        (40, False, "ERROR", True, "failed"),
        (60, True, "TERMINATED", True, "finished"),     # failed once, retried, and ran to the end
    ]
    dirs = []
    for i, (step, done, _, err, _) in enumerate(cases):
        rows = [{"step": s, "test_error": 50.0 - s / 2, "done": done and s == step} for s in range(20, step + 1, 20)]
        dirs.append(write_trial(exp, i, {"method": "mt", "seed": i, "steps": 60}, rows, error=err))
    state = {"trial_data": [[json.dumps({"trial_id": f"ab12c_0000{i}", "status": c[2], "relative_logdir": d.name}),
                             "{}"] for i, (d, c) in enumerate(zip(dirs, cases))]}
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps(state))
    assert list(load_trials(exp)["status"]) == [c[-1] for c in cases]


# ---------------------------------------------------------------- the tables' schema

def test_every_column_of_the_tables_is_declared(experiment):
    exp, _ = experiment
    """Each trials-table and summary column is of one declared kind (config key, bookkeeping, metric,
    statistic), the kinds disjoint; the config columns are exactly the config keys the trials had."""
    from sweeper.analysis.aggregate import BOOK_COLS, METRIC_PREFIXES, is_config, config_cols, load_trials, summarize
    from sweeper.analysis.layout import SUMMARY_COLS, config_keys

    assert not config_cols() & set(BOOK_COLS) and not config_cols() & set(SUMMARY_COLS)
    assert not any(c.startswith(METRIC_PREFIXES) for c in config_cols() | set(SUMMARY_COLS))
    trials = load_trials(exp)
    config = [c for c in trials.columns if is_config(c)]  # raises for a column of no declared kind
    assert set(config) == {"dataset", "num_labels", "data_dir", "mur_radius", "method", "vd", "mur", "seed",
                           "trial_index"}
    summary = summarize(trials)
    assert set(config_keys(summary)) == set(config) - {"seed", "trial_index", "data_dir"}


def test_an_undeclared_column_is_an_error_not_a_row_label(experiment):
    exp, _ = experiment
    """A statistic added to a summary without being declared would be taken for a config key and name
    the rows ("MT (spread 1.2)"): it is refused, naming the column and where to declare it."""
    from sweeper.analysis.aggregate import is_config, load_trials, summarize
    from sweeper.analysis.layout import row_labels

    summary = summarize(load_trials(exp))
    assert list(row_labels(summary)) == ["MT", "MT + VD + MUR"]
    summary["spread"] = [1.2, 3.4]
    with pytest.raises(AggregateError, match=r"\['spread'\] are undeclared.*SUMMARY_COLS"):
        row_labels(summary)
    with pytest.raises(AggregateError, match="'rank' is undeclared"):
        is_config("rank")


def test_a_trial_with_a_key_that_is_no_config_field_is_refused(experiment):
    exp, _ = experiment
    """The trainable refuses a key TrainConfig lacks, so a params.json holding one came from other code:
    the report says so in one line instead of making it a row label."""
    from sweeper.analysis.aggregate import load_trials

    write_trial(exp, 9, {"method": "mt", "seed": 0, "trial_index": 9, "old_knob": 1},
                finished_reports([20.0, 19.0, 18.0]))
    with pytest.raises(AggregateError, match=r"\['old_knob'\] are not TrainConfig fields"):
        load_trials(exp)


def test_a_trial_tune_gave_placeholders_instead_of_a_config_is_left_out_by_name(experiment):
    """A grid resumed without its trial list gives the trials Tune had not created yet
    ["__fn_ph", hash] for every value; the trainable refuses them, and the tables leave them out with a
    warning naming each, instead of reading a placeholder as a cell (the report once died on
    int(num_labels) there)."""
    from sweeper.analysis.aggregate import load_trials

    exp, _ = experiment
    before = load_trials(exp)
    ph = lambda i: ["__fn_ph", f"{i:08x}"]
    blank = write_trial(exp, 9, {"trial_index": 9, "method": ph(1), "num_labels": ph(2), "seed": ph(3)},
                        [{"config_error": "placeholders", "done": True}])
    with pytest.warns(UserWarning, match=rf"1 trial\(s\) .* left out: {re.escape(blank.name)}$"):
        df = load_trials(exp)
    pd.testing.assert_frame_equal(df, before)


def test_an_experiment_of_placeholder_trials_only_is_a_clear_error(tmp_path):
    from sweeper.analysis.aggregate import load_trials

    exp = tmp_path / "mut_radius-20260101-000000"
    write_trial(exp, 0, {"trial_index": 0, "method": ["__fn_ph", "0a1b2c3d"]}, [{"config_error": "x", "done": True}])
    with pytest.warns(UserWarning), pytest.raises(AggregateError, match="no trial of .* has a config"):
        load_trials(exp)
