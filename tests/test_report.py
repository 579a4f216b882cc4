"""Tests of sweeper.report (and the tables / plots it arranges): paper-shaped tables (md, LaTeX, CSV)
with the paper's values where the protocol matches, paired differences vs a baseline row, row labels
that name every knob, the hpo ranking by validation error, plots, CLI.

    pytest tests/test_report.py -q
"""
from __future__ import annotations

import contextlib
import html
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import torch

from conftest import rounding_tol, write_trial
from notorch import BLOCK_TORCH
from sweeper.analysis.aggregate import AggregateError, load_trials, summarize
from sweeper.analysis.paper_results import paper_value
from sweeper.analysis.plots import plot_virtual_points
from sweeper.report import build_report, main
from sweeper.analysis.layout import row_labels
from sweeper.analysis.paired import baseline_diffs, same_value
from sweeper.analysis.ranking import ranking_frame
from sweeper.analysis.render import to_latex, to_markdown
from sweeper.analysis.tables import cell_text, table_frame

ROOT = Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"


def reports(errors, done=True, steps=None, val=None, **last):
    """One report per evaluation, 100 steps apart (or evenly up to `steps`); val: val_error per report."""
    n = len(errors)
    out = [{"step": 100 * (k + 1) if steps is None else steps * (k + 1) // n, "test_error": float(e),
            "diverged": 0, "done": done and k == n - 1} for k, e in enumerate(errors)]
    for r, v in zip(out, val if val is not None else []):
        r["val_error"] = float(v)
    out[-1].update(last)
    return out


VARIANTS = [("mt", False, "none", 0.0), ("mt", True, "none", 0.1), ("mt", False, "direct", 0.0),
            ("mt", True, "direct", 0.1), ("ict", False, "none", 0.0), ("ict", True, "none", 0.0)]
COLS = [("cifar10", 1000, 10.0), ("cifar100", 10000, 20.0)]


PAPER_STEPS = 280_000  # the paper's protocol (with the default batches of 25 labeled + 75 unlabeled)


def make_table_exp(tmp_path, baseline=None, steps=PAPER_STEPS, within=()):
    """A Table-1-shaped sweep: 6 variants x 2 data sets x 3 seeds of `steps` steps; one extra diverged
    MT trial. The +VD rows of MT run entmin 0.1, the others 0 (a key in lockstep with vd); r follows
    the data set (10, 20). curves[(method, vd, mur, dataset)]: (seed, evaluation) test errors."""
    rng = np.random.default_rng(3)
    exp = tmp_path / "table_cifar-20260101-000000"
    curves, i = {}, 0
    for method, vd, mur, entmin in VARIANTS:
        for ds, n, r in COLS:
            curves[(method, vd, mur, ds)] = rng.uniform(5, 40, size=(3, 3))
            for seed in range(3):
                sens = rng.uniform(0.1, 0.3)
                write_trial(exp, i, {"method": method, "vd": vd, "mur": mur, "entmin_coef": entmin, "dataset": ds,
                                     "num_labels": n, "mur_radius": r, "steps": steps, "val_size": 0, "seed": seed,
                                     "trial_index": i},
                            reports(curves[(method, vd, mur, ds)][seed], steps=steps, sensitivity_mean=sens,
                                    sensitivity_hist=json.dumps({"counts": [5, 3, 2], "edges": [0, 0.1, 0.2, 0.3]})))
                i += 1
    write_trial(exp, i, {"method": "mt", "vd": False, "mur": "none", "entmin_coef": 0.0, "dataset": "cifar10",
                         "num_labels": 1000, "mur_radius": 10.0, "steps": steps, "val_size": 0, "seed": 3,
                         "trial_index": i},
                reports([50.0, math.nan], steps=steps, diverged=1))
    (exp / "sweep.json").write_text(json.dumps({"name": "table_cifar", "description": "MT/ICT table",
                                                "paper_ref": "Table 1", "rows": ["method", "vd", "mur"],
                                                "cols": ["dataset", "num_labels"], "metric": "test_error",
                                                "baseline": baseline, "baseline_within": list(within)}))
    return exp, curves


def _fixture_rows() -> dict:
    """make_table_exp's cells at the paper's steps, every other field at TrainConfig's default, as the paper
    rows protocol_reason compares a run with (the real ones, the paper presets', are checked in
    tests/test_paper_results.py): the table's mechanics are under test here, not the presets."""
    from trainables.config import train_config_defaults
    from sweeper.analysis.paper_results import result_of

    out = {}
    for method, vd, mur, entmin in VARIANTS:
        for ds, n, r in COLS:
            cfg = {**train_config_defaults(), "method": method, "vd": vd, "mur": mur, "entmin_coef": entmin,
                   "dataset": ds, "num_labels": n, "mur_radius": r, "steps": PAPER_STEPS, "val_size": 0}
            out[result_of(cfg)] = cfg
    return out


@contextlib.contextmanager
def fixture_is_paper():
    """Inside: the fixture's own cells are the paper rows (sweeper.analysis.paper_results.reference_configs)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sweeper.analysis.paper_results.reference_configs", _fixture_rows)
        yield


@pytest.fixture
def table_exp(tmp_path):
    return make_table_exp(tmp_path)


@pytest.fixture(scope="module")
def table_built(tmp_path_factory):
    """make_table_exp's folder with its report built once (markdown) for the read-only tests."""
    exp, curves = make_table_exp(tmp_path_factory.mktemp("built"))
    with fixture_is_paper():
        return exp, curves, build_report(exp)


def test_table_cells_paper_values_and_delta(table_built):
    exp, curves, paths = table_built
    t = pd.read_csv(paths["table.csv"])
    assert len(t) == len(VARIANTS) * len(COLS)
    for (method, vd, mur, ds), c in curves.items():
        cell = t[(t["method"] == method) & (t["vd"] == vd) & (t["mur"] == mur) & (t["dataset"] == ds)]
        assert len(cell) == 1
        cell = cell.iloc[0]
        assert cell["mean"] == pytest.approx(np.mean(c[:, -1]))
        assert cell["std"] == pytest.approx(np.std(c[:, -1], ddof=1))
        n_labels = dict((d, n) for d, n, _ in COLS)[ds]
        r = dict((d, rad) for d, _, rad in COLS)[ds]
        pv = paper_value(method, vd, mur, ds, n_labels, mur_radius=r, kl_coef=0.05)
        assert pv is not None                                      # every cell here is in Table 1
        assert cell["paper_mean"] == pytest.approx(pv[0])
        assert cell["delta"] == pytest.approx(cell["mean"] - pv[0])
    mt = t[(t["row"] == "MT (entmin 0)") & (t["col"] == "CIFAR-10 1000")].iloc[0]
    assert (mt["paper_mean"], mt["paper_std"]) == (19.63, 0.33)    # read off the paper's Table 1
    assert (mt["n"], mt["n_diverged"]) == (3, 1)
    md = paths["table.md"].read_text()
    header = md.splitlines()[2]
    assert header.startswith("| Model | CIFAR-10 1000 | best test (chosen on test) | paper | Δ | Δ best test | "
                             "CIFAR-100 10000 | best test (chosen on test) | paper | Δ | Δ best test |")
    assert "1 diverged" in md and "entmin" not in header and "no Δ" not in md
    assert paths["table"] == paths["table.md"]
    # no baseline in the sweep: no paired differences anywhere
    assert "diff_vs_baseline" not in pd.read_csv(paths["summary.csv"]).columns and " · " not in md


def test_row_labels_name_a_key_that_changes_in_lockstep(table_built):
    """entmin goes 0 -> 0.1 exactly when MT's VD turns on, so rows (method, vd, mur) alone would hide it;
    r changes with the data set only (a column), so it stays out of the row labels."""
    t = pd.read_csv(table_built[2]["table.csv"])
    want = {(m, vd, mur): f"{name} (entmin {e:g})" for (m, vd, mur, e), name in zip(
        VARIANTS, ("MT", "MT + VD", "MT + MUR", "MT + VD + MUR", "ICT", "ICT + VD"))}
    got = {(r["method"], r["vd"], r["mur"]): r["row"] for _, r in t.iterrows()}
    assert got == want
    assert got[("mt", True, "none")] == "MT + VD (entmin 0.1)"
    md = table_built[2]["table.md"].read_text()
    assert "| MT + VD (entmin 0.1) |" in md and "| ICT + VD (entmin 0) |" in md and " r " not in md


def test_row_labels_name_the_bn_statistics_pass_of_a_paper_table():
    """The paper preset's rows as sweep modules make them: non-VD MT carries the authors' clean BN pass,
    MT + VD does not; the labels name both knobs in which the rows differ."""
    from search_spaces import get_sweep
    from sweeper.analysis.layout import row_labels

    rows = [t for t in get_sweep("table_cifar", "paper").trials()
            if t["dataset"] == "cifar10" and t["num_labels"] == 1000 and t["method"] == "mt" and t["seed"] == 0]
    from sweeper.analysis.aggregate import NON_GROUP_KEYS

    summary = pd.DataFrame(rows).drop(columns=list(NON_GROUP_KEYS), errors="ignore")  # as a summary groups
    labels = dict(zip(zip(summary["vd"], summary["mur"]), row_labels(summary, ("method", "vd", "mur"))))
    assert labels[(False, "none")] == "MT (entmin 0.1, clean BN pass on)"
    assert labels[(True, "none")] == "MT + VD (entmin 0.1, clean BN pass off)"
    assert labels[(False, "direct")] == "MT + MUR (entmin 0, clean BN pass on)"


def test_row_labels_leave_out_keys_that_do_not_apply_to_a_row():
    """mut_radius-like rows: LabelSpreading has no α or s, direct MUR no α or s; MT without VD no KL
    coefficient. Where leaving a key out would merge two rows, every label keeps it."""
    from sweeper.analysis.layout import row_labels

    summary = pd.DataFrame([
        {"method": "labelspreading", "mur": "none", "vd": False, "mur_step_size": 1.0, "mur_steps": 1, "kl_coef": 0.05},
        {"method": "mut", "mur": "direct", "vd": False, "mur_step_size": 0.3, "mur_steps": 1, "kl_coef": 0.05},
        {"method": "mut", "mur": "pga", "vd": False, "mur_step_size": 0.3, "mur_steps": 5, "kl_coef": 0.05},
        {"method": "mt", "mur": "none", "vd": False, "mur_step_size": 1.0, "mur_steps": 1, "kl_coef": 0.05},
        {"method": "mt", "mur": "none", "vd": True, "mur_step_size": 1.0, "mur_steps": 1, "kl_coef": 0.2},
    ])
    assert list(row_labels(summary, ("method", "vd", "mur"))) == [
        "LabelSpreading", "MUT + MUR", "MUT + MUR (PGA) (α 0.3, s 5)", "MT", "MT + VD (KL coef 0.2)"]
    # VAT alone (registry/vat.py): epsilon is mur_radius, iterations mur_steps, its coefficient cons_coef
    from trainables.config import applies
    vat = {"method": "vat", "mur": "none", "vd": False}
    assert [applies(k, vat) for k in ("mur_radius", "mur_steps", "mur_coef", "mur_step_size", "kl_coef", "cons_coef")] == \
        [True, True, False, False, False, True]
    # lambda1 weighs the consistency term, which supervised and MUT do not have (Method.loss)
    assert [applies("cons_coef", {"method": m}) for m in ("supervised", "mut", "pi", "mt", "ict", "fixmatch")] == \
        [False, False, True, True, True, True]
    # searched values show 3 significant digits, unless that would merge two rows
    found = pd.DataFrame([{"method": "mt", "lr": lr} for lr in (0.0695424, 0.16)])
    assert list(row_labels(found, ("method", "lr"))) == ["MT (lr 0.0695)", "MT (lr 0.16)"]
    close = pd.DataFrame([{"method": "mt", "lr": lr} for lr in (0.06954, 0.06951)])
    assert list(row_labels(close, ("method", "lr"))) == ["MT (lr 0.06954)", "MT (lr 0.06951)"]
    # two MT rows that differ only in a key MT ignores: the labels keep it rather than merge them
    twins = pd.DataFrame([{"method": "mt", "vd": False, "kl_coef": k} for k in (0.05, 0.2)])
    assert list(row_labels(twins, ("method", "vd"))) == ["MT (KL coef 0.05)", "MT (KL coef 0.2)"]
    # a key the sweep lists among its rows but holds at one value (table_svhn's entmin 0) names nothing
    flat = pd.DataFrame([{"method": m, "vd": vd, "mur": "none", "entmin_coef": 0.0} for m in ("pi", "mt")
                         for vd in (False, True)])
    assert list(row_labels(flat, ("method", "vd", "mur", "entmin_coef"))) == ["Π", "Π + VD", "MT", "MT + VD"]


def test_which_best_test_tabulates_the_minimum(table_built):
    exp, curves, _ = table_built
    t = table_frame(summarize(load_trials(exp), "test_error", "best_test"), ("method", "vd", "mur"), ("dataset",))
    c = curves[("ict", True, "none", "cifar100")]
    cell = t[(t["method"] == "ict") & (t["vd"]) & (t["dataset"] == "cifar100")].iloc[0]
    assert cell["mean"] == pytest.approx(c.min(axis=1).mean())
    assert cell["which"] == "best_test"


def test_a_paper_table_shows_the_best_test_error_and_its_delta_beside_the_final_value(table_built):
    """Each cell of a table compared with the paper: the mean ± std over seeds of each trial's minimum test
    error (the diverged extra MT seed left out) and its Δ against the paper, beside the final value and its
    Δ, which stay as they were; a note says the best test error is chosen on the test set."""
    from sweeper.analysis.labels import WHICH_TEXT

    _, curves, paths = table_built
    t = pd.read_csv(paths["table.csv"])
    for (method, vd, mur, ds), c in curves.items():                  # c: (seed, evaluation) test errors
        cell = t[(t["method"] == method) & (t["vd"] == vd) & (t["mur"] == mur) & (t["dataset"] == ds)].iloc[0]
        best = c.min(axis=1)                                          # (seed,) each trial's minimum
        assert (cell["best_test_mean"], cell["best_test_std"]) == pytest.approx((best.mean(), np.std(best, ddof=1)))
        assert cell["best_test_n"] == 3 and cell["which"] == "final"
        assert cell["best_test_delta"] == pytest.approx(best.mean() - cell["paper_mean"])
        assert cell["mean"] == pytest.approx(c[:, -1].mean())
        assert cell["delta"] == pytest.approx(c[:, -1].mean() - cell["paper_mean"])
    c = curves[("mt", True, "none", "cifar10")]
    best, final = c.min(axis=1), c[:, -1]
    md = paths["table.md"].read_text()
    assert (f"| MT + VD (entmin 0.1) | {final.mean():.2f} ± {np.std(final, ddof=1):.2f} | "
            f"{best.mean():.2f} ± {np.std(best, ddof=1):.2f} | 16.35 ± 0.18 | {_minus(final.mean() - 16.35)} | "
            f"{_minus(best.mean() - 16.35)} |") in md
    note = next(line for line in md.splitlines() if line.startswith("- best test (chosen on test): "))
    assert WHICH_TEXT["best_test"] in note and "beside the final value" in note
    assert "best_test_mean" not in pd.read_csv(paths["table_sensitivity.csv"]).columns  # not an error metric


def test_best_test_columns_only_where_the_table_compares_a_final_test_error_with_the_paper(tmp_path, table_built):
    """A quick-preset table (digits: no paper value) and quick-sized runs of the paper's cells (its values
    beside them, no Δ) render as they did without the trials; a --which best_test table already is that
    statistic; trials without best_test_error add nothing."""
    from search_spaces import get_sweep
    from sweeper.analysis.labels import BEST_HEADER
    from sweeper.analysis.tables import BEST_COLS

    sweep = get_sweep("table_svhn", "quick")
    exp = tmp_path / "table_svhn-1"
    for i, cfg in enumerate(sweep.trials()):
        write_trial(exp, i, cfg, reports([30.0, 10.0 + (i * 7919) % 13], steps=cfg["steps"]))
    trials = load_trials(exp)
    quick = table_frame(summarize(trials), sweep.rows, sweep.cols, trials=trials)
    assert quick["delta"].isna().all() and not set(BEST_COLS) & set(quick.columns)
    assert to_markdown(quick) == to_markdown(table_frame(summarize(trials), sweep.rows, sweep.cols))
    assert BEST_HEADER not in to_markdown(quick) and BEST_HEADER not in to_latex(quick)
    short = load_trials(make_table_exp(tmp_path / "short", steps=2000)[0])
    with fixture_is_paper():
        unmatched = table_frame(summarize(short), ("method", "vd", "mur"), ("dataset", "num_labels"), trials=short)
    assert unmatched["paper_mean"].notna().all() and unmatched["delta"].isna().all()
    assert not set(BEST_COLS) & set(unmatched.columns) and BEST_HEADER not in to_markdown(unmatched)
    paper = load_trials(table_built[0])
    rows, cols = ("method", "vd", "mur"), ("dataset", "num_labels")
    with fixture_is_paper():
        best = table_frame(summarize(paper, "test_error", "best_test"), rows, cols, trials=paper)
        bare = table_frame(summarize(paper), rows, cols, trials=paper.drop(columns=["best_test_error"]))
    assert best["delta"].notna().all() and not set(BEST_COLS) & set(best.columns)
    assert bare["delta"].notna().all() and not set(BEST_COLS) & set(bare.columns)


MT_BASE = {"method": "mt", "vd": False, "mur": "none"}


@pytest.fixture(scope="module")
def baseline_built(tmp_path_factory):
    """make_table_exp's folder with MT (no VD, no MUR) as the sweep's baseline, its report built once."""
    exp, curves = make_table_exp(tmp_path_factory.mktemp("baseline"), baseline=MT_BASE)
    return exp, curves, build_report(exp)


def _minus(x: float) -> str:
    return f"{x:+.2f}".replace("-", "\u2212")


def test_summary_has_each_cells_paired_difference_from_the_baseline(baseline_built):
    """Every cell vs MT of its column, paired by seed (MT's diverged seed 3 is not a pair): the mean
    difference and its 95% t-interval equal scipy's paired t-test on the final errors."""
    exp, curves, paths = baseline_built
    s = pd.read_csv(paths["summary.csv"])
    back = pd.read_parquet(paths["summary.parquet"])
    for (method, vd, mur, ds), c in curves.items():
        pick = (s["method"] == method) & (s["vd"] == vd) & (s["mur"] == mur) & (s["dataset"] == ds)
        row = s[pick].iloc[0]
        assert back.loc[pick.to_numpy(), "diff_vs_baseline"].iloc[0] == pytest.approx(row["diff_vs_baseline"],
                                                                                       nan_ok=True)
        if (method, vd, mur) == ("mt", False, "none"):
            assert row["is_baseline"] and math.isnan(row["diff_vs_baseline"]) and row["baseline"] == "MT (entmin 0)"
            continue
        ours, base = c[:, -1], curves[("mt", False, "none", ds)][:, -1]       # (seed,) final errors, seeds 0-2
        ci = scipy.stats.ttest_rel(ours, base).confidence_interval(0.95)
        assert row["diff_vs_baseline"] == pytest.approx(np.mean(ours - base))
        assert (row["diff_ci_low"], row["diff_ci_high"]) == pytest.approx((ci.low, ci.high))
        assert (row["n_paired"], row["baseline"], row["is_baseline"]) == (3, "MT (entmin 0)", False)
    md = paths["table.md"].read_text()
    assert "| MT (entmin 0) (baseline) |" in md and "Baseline row: MT (entmin 0), marked (baseline)" in md
    assert "95% t-interval of that mean over the n paired seeds" in md
    ours, base = curves[("mt", True, "none", "cifar10")][:, -1], curves[("mt", False, "none", "cifar10")][:, -1]
    ci = scipy.stats.ttest_rel(ours, base).confidence_interval(0.95)
    star = "*" if ci.low > 0 or ci.high < 0 else ""
    want = (f"| MT + VD (entmin 0.1) | {ours.mean():.2f} ± {np.std(ours, ddof=1):.2f} · {_minus(np.mean(ours - base))} "
            f"[{_minus(ci.low)}, {_minus(ci.high)}]{star} |")
    assert want in md
    body = [line for line in paths["table.tex"].read_text().splitlines() if line.endswith("\\\\")]
    assert any(r"$\cdot$" in line for line in body) and not any("\u00b7" in line for line in body)


def test_each_method_is_compared_with_its_own_base_row(table_built):
    """A baseline naming vd and mur only matches MT and ICT in each column: a cell takes the one that
    agrees with it on the sweep's other row key (method), so ICT + VD is compared with ICT."""
    exp, curves, _ = table_built
    trials = load_trials(exp)
    out, notes = baseline_diffs(summarize(trials), trials, {"vd": False, "mur": "none"},
                                ("method", "vd", "mur"), ("dataset", "num_labels"))
    assert notes == []
    for (method, vd, mur, ds), c in curves.items():
        row = out[(out["method"] == method) & (out["vd"] == vd) & (out["mur"] == mur) & (out["dataset"] == ds)].iloc[0]
        assert row["baseline"] == {"mt": "MT (entmin 0)", "ict": "ICT (entmin 0)"}[method]
        if not row["is_baseline"]:
            base = curves[(method, False, "none", ds)][:, -1]
            assert row["diff_vs_baseline"] == pytest.approx(np.mean(c[:, -1] - base))


@pytest.mark.slow
def test_baseline_within_method_isolates_the_variant_and_keeps_method_vs_mt(tmp_path):
    """Sweep.baseline_within = ("method",), through build_report from sweep.json: ICT + VD is
    compared with ICT (its own method's base row, marked "vs ICT" in the table), while ICT itself and
    every MT variant are compared with the baseline row MT; the differences are the seed-paired means
    of the curves' final values, and the intervals scipy's paired t-intervals."""
    exp, curves = make_table_exp(tmp_path, baseline=MT_BASE, within=("method",))
    build_report(exp)
    out = pd.read_csv(exp / "summary.csv")
    out = out[out["n"] > 0]
    for (method, vd, mur, ds), c in curves.items():
        row = out[(out["method"] == method) & (out["vd"] == vd) & (out["mur"] == mur) & (out["dataset"] == ds)].iloc[0]
        if (method, vd, mur) == ("mt", False, "none"):
            assert row["is_baseline"] and not row["within_baseline"]
            continue
        own = method == "ict" and (vd, mur) != (False, "none")
        base = curves[(method if own else "mt", False, "none", ds)][:, -1]
        ci = scipy.stats.ttest_rel(c[:, -1], base).confidence_interval(0.95)
        assert (bool(row["within_baseline"]), row["baseline"]) == (own, "ICT (entmin 0)" if own else "MT (entmin 0)")
        assert row["diff_vs_baseline"] == pytest.approx(np.mean(c[:, -1] - base))
        assert (row["diff_ci_low"], row["diff_ci_high"]) == pytest.approx((ci.low, ci.high))
    md = (exp / "table.md").read_text()
    ict_line = next(line for line in md.splitlines() if line.startswith("| ICT + VD "))
    assert ict_line.count(" vs ICT (entmin 0)") == 2  # both columns
    assert not any(" vs " in line for line in md.splitlines() if line.startswith("| ICT (entmin 0)"))
    assert "the same method without the variant" in md


@pytest.mark.parametrize("name,preset", [("table_svhn", "quick"), ("table_cifar", "quick"),
                                         ("table_svhn", "paper"), ("table_cifar", "paper")])
def test_every_table_interval_changes_the_variant_or_the_method_never_both(tmp_path, name, preset):
    """A table's trials, laid out as Ray would store them and run through the real aggregator: every
    deep row is compared with a row of its column that differs from it only in the variant's knobs
    (VD, MUR, entropy minimisation, and on the paper preset the authors' clean BN pass that comes
    with them) or, for a method's base row, in the method and never in VD or MUR (on the quick
    presets in the method alone; on the paper presets Pi's and MT's authors' settings differ too)."""
    from search_spaces import get_sweep
    from trainables.config import applies

    sweep = get_sweep(name, preset)
    exp = tmp_path / f"{name}-1"
    for i, cfg in enumerate(sweep.trials()):
        write_trial(exp, i, cfg, reports([10.0 + (i * 7919) % 13], steps=cfg["steps"]))
    trials = load_trials(exp)
    out, notes = baseline_diffs(summarize(trials), trials, sweep.baseline, sweep.rows, sweep.cols,
                                within=sweep.baseline_within)
    assert notes == [] and out["is_baseline"].sum() == len(out[list(sweep.cols)].drop_duplicates())
    keys = [k for k in sweep.trials()[0] if k != "seed" and k in out.columns]
    labels = row_labels(out, sweep.rows, sweep.cols)
    variant = {"vd", "mur", "entmin_coef"} | ({"bn_clean_pass"} if preset == "paper" else set())
    for i in out.index:
        r = out.loc[i]
        if r["is_baseline"] or r["method"] == "labelspreading":
            continue
        same_col = [j for j in out.index if labels[j] == r["baseline"]
                    and all(same_value(out.loc[j, c], r[c]) for c in sweep.cols)]
        assert len(same_col) == 1 and r["n_paired"] == sweep.seeds, (labels[i], r["baseline"], r["n_paired"])
        base = out.loc[same_col[0]]  # a key that does nothing in the row compared with (MUR's radius in a row
        # without MUR) comes with the variant, as ICT + MUR's run-file radius does
        changed = {k for k in keys if not same_value(r[k], base[k]) and applies(k, dict(base))}
        if r["within_baseline"] or r["method"] == sweep.baseline["method"]:
            assert changed and changed <= variant, (labels[i], r["baseline"], changed)
        elif preset == "quick":
            assert changed == {"method"}, (labels[i], r["baseline"], changed)
        else:
            assert "method" in changed and not changed & {"vd", "mur"}, (labels[i], r["baseline"], changed)


def test_mur_vs_vat_compares_points_within_a_method_and_vat_with_mut(tmp_path):
    """mur_vs_vat quick through the real aggregator: MUT + MUR with MUT + VAT (the point alone
    changes), MUT + VAT with MT + VAT (the method alone), VAT + EntMin with MUT + MUR (baseline_for:
    the paper's comparison), MT's points with MT + VAT at the same r."""
    from search_spaces import get_sweep

    sweep = get_sweep("mur_vs_vat", "quick")
    exp = tmp_path / "mur_vs_vat-1"
    for i, cfg in enumerate(sweep.trials()):
        write_trial(exp, i, cfg, reports([10.0 + (i * 7919) % 13], steps=cfg["steps"]))
    trials = load_trials(exp)
    out, notes = baseline_diffs(summarize(trials), trials, sweep.baseline, sweep.rows, sweep.cols,
                                within=sweep.baseline_within, baseline_for=sweep.baseline_for)
    assert notes == []
    got = {(r["method"], r["mur"], r["mur_radius"]): (r["baseline"].split(" (")[0], bool(r["within_baseline"]))
           for _, r in out.iterrows() if not r["is_baseline"] and r["method"] != "labelspreading"}
    assert got == {("mut", "direct", 0.5): ("MUT + VAT", True),
                   ("mut", "vat", 0.5): ("MT + VAT", False), ("vat", "none", 0.5): ("MUT + MUR", True),
                   ("mt", "direct", 0.5): ("MT + VAT", False), ("mt", "random", 0.5): ("MT + VAT", False)}
    radius = {(r["method"], r["mur"], r["mur_radius"]): r for _, r in out.iterrows()}
    assert radius[("mt", "direct", 0.5)]["n_paired"] == sweep.seeds  # paired with MT + VAT at r = 0.5, its own column


def test_a_baseline_with_one_cell_is_the_baseline_of_every_column(tmp_path):
    """A radius sweep whose columns are r and whose MT row (no MUR) ran at one r: that cell is every
    column's baseline. Seed 3 ran only at r=2, so that cell pairs 3 of its 4 seeds."""
    rng = np.random.default_rng(7)
    exp = tmp_path / "ablation_radius-1"
    final, i = {}, 0
    for mur, r, seeds in [("none", 1.0, 3), ("direct", 0.5, 3), ("direct", 1.0, 3), ("direct", 2.0, 4)]:
        for seed in range(seeds):
            errs = rng.uniform(5, 30, 2)
            final[(mur, r, seed)] = errs[-1]
            write_trial(exp, i, {"method": "mt", "mur": mur, "mur_radius": r, "seed": seed}, reports(errs))
            i += 1
    trials = load_trials(exp)
    rows, cols = ("method", "mur"), ("mur_radius",)
    out, notes = baseline_diffs(summarize(trials), trials, {"method": "mt", "mur": "none"}, rows, cols)
    base = np.array([final[("none", 1.0, s)] for s in range(3)])
    for r in (0.5, 1.0, 2.0):
        row = out[(out["mur"] == "direct") & (out["mur_radius"] == r)].iloc[0]
        ours = np.array([final[("direct", r, s)] for s in range(3)])
        ci = scipy.stats.ttest_rel(ours, base).confidence_interval(0.95)
        assert (row["baseline"], row["n_paired"]) == ("MT", 3)
        assert row["diff_vs_baseline"] == pytest.approx(np.mean(ours - base))
        assert (row["diff_ci_low"], row["diff_ci_high"]) == pytest.approx((ci.low, ci.high))
    assert notes == ["The baseline row ran in one column only (r=1); its cell is the baseline of every column."]
    md = to_markdown(table_frame(out, rows, cols, paper=None), notes=notes)
    assert "| MT (baseline) |" in md and "(3 pairs)" in md and "its cell is the baseline of every column" in md


def test_a_baseline_that_matches_no_row_is_a_note_not_a_crash(table_built):
    exp = table_built[0]
    trials = load_trials(exp)
    out, notes = baseline_diffs(summarize(trials), trials, {"method": "pi"}, ("method", "vd", "mur"), ("dataset",))
    assert out["diff_vs_baseline"].isna().all() and len(notes) == 1
    assert notes[0].startswith("No differences: no row of this table matches the sweep's baseline {'method': 'pi'}")


def test_a_cells_run_without_the_baseline_row_still_pairs_a_baseline_for_cell():
    """mur_vs_vat cut to VAT (--cells method=vat) trains VAT and MUT, the row Sweep.baseline_for names for
    it, but not the sweep's baseline (MT + VAT's point): VAT is still compared with MUT, MUT with nothing,
    and a note says the baseline row did not run. With neither pairable, the old single note."""
    import pandas as pd

    from search_spaces import get_sweep
    from sweeper.analysis.aggregate import NON_GROUP_KEYS
    from sweeper.analysis.paired import baseline_cells
    from sweeper.driver.preflight import select_cells
    from trainables.config import TrainConfig

    cut = select_cells(get_sweep("mur_vs_vat", "quick"), ["method=vat"])
    cfgs = [TrainConfig.from_dict({**cut.base, **v}).to_dict() for v in cut.variants]
    frame = pd.DataFrame([{k: v for k, v in c.items() if k not in NON_GROUP_KEYS} for c in cfgs])
    pairs, notes = baseline_cells(frame, cut.baseline, cut.rows, cut.cols, cut.baseline_within, cut.baseline_for)
    method = {i: c["method"] for i, c in enumerate(cfgs)}
    assert sorted(method.values()) == ["mut", "vat"] and not any(
        all(cfgs[i][k] == v for k, v in cut.baseline.items()) for i in method)
    assert {method[i]: method[j] for i, j in pairs.items()} == {"vat": "mut"}
    assert notes[0].startswith("The sweep's baseline row") and "1 of 2 cells have a difference" in notes[0]
    alone = frame[[m == "mut" for m in frame["method"]]]
    assert baseline_cells(alone, cut.baseline, cut.rows, cut.cols, cut.baseline_within, cut.baseline_for) == \
        ({}, [f"No differences: no row of this table matches the sweep's baseline {cut.baseline}; a run with "
              f"--cells-only leaves it out, elsewhere fix Sweep.baseline (in sweep.json for this folder) to the "
              f"config of one table row."])


def test_delta_only_where_the_run_followed_the_papers_protocol(tmp_path):
    """2000-step runs of Table 1's cells: the paper's value is shown, Δ is not, and the reason is."""
    exp, _ = make_table_exp(tmp_path, steps=2000)
    with fixture_is_paper():
        table = table_frame(summarize(load_trials(exp)), ("method", "vd", "mur"), ("dataset", "num_labels"))
    assert table["paper_mean"].notna().all() and table["delta"].isna().all()
    assert set(table["paper_note"]) == {"no Δ: steps 2000, not 280k"}
    md = to_markdown(table)
    mt = next(line for line in md.splitlines() if line.startswith("| MT (entmin 0) |"))
    assert "| 19.63 ± 0.33 | no Δ: steps 2000, not 280k |" in mt
    assert "not configured as the paper preset's own row for that cell" in md
    # against the real paper presets these fixture runs (TrainConfig's defaults: another network, ...)
    # are no paper configuration either
    real = table_frame(summarize(load_trials(exp)), ("method", "vd", "mur"), ("dataset", "num_labels"))
    assert real["delta"].isna().all() and all(n.startswith("no Δ: ") for n in real["paper_note"])


def test_which_best_val_reports_the_test_error_at_the_best_validation_step(tmp_path, capsys):
    exp = tmp_path / "radius-1"
    test = {0: [30.0, 20.0, 25.0, 17.0], 1: [28.0, 24.0, 18.0, 21.0]}
    val = {0: [31.0, 19.0, 19.0, 23.0], 1: [29.0, 25.0, 20.0, 20.0]}     # ties: the first evaluation wins
    for seed in (0, 1):
        write_trial(exp, seed, {"method": "mt", "seed": seed}, reports(test[seed], val=val[seed]))
    (exp / "sweep.json").write_text(json.dumps({"name": "radius", "rows": ["method"], "cols": []}))
    assert main([str(exp), "--which", "best_val"]) == 0
    out = capsys.readouterr().out
    assert "[best_val: stopping step selected on the validation split]" in out and "best_val test_error" in out
    s = pd.read_csv(exp / "summary.csv").iloc[0]
    assert (s["which"], s["n"]) == ("best_val", 2)
    assert s["mean"] == pytest.approx((20.0 + 18.0) / 2)                  # not the best test errors 17 and 18
    old = tmp_path / "old-1"                                               # trials from before val_error
    for seed in (0, 1):
        write_trial(old, seed, {"method": "mt", "seed": seed}, reports(test[seed]))
    md = build_report(old, which="best_val")["table.md"].read_text()
    assert "| MT | — |" in md and "No trial reported val_error" in md


def _braces_balanced(s: str) -> bool:
    depth = 0
    for ch in re.sub(r"\\[{}]", "", s):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def test_latex_table_is_structurally_valid(table_built):
    tex = table_built[2]["table.tex"].read_text()
    assert _braces_balanced(tex)
    assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") == 1
    spec = re.search(r"\\begin\{tabular\}\{([^}]*)\}", tex).group(1)
    ncols = len(re.findall(r"[lcr]", spec))
    assert ncols == 1 + 5 + 5  # per column: ours, best test, paper, Δ, Δ best test
    rows = [line for line in tex.splitlines() if line.rstrip().endswith("\\\\")]
    assert len(rows) == 1 + len(VARIANTS)
    for line in rows:
        assert len(re.findall(r"(?<!\\)&", line)) == ncols - 1, line
    assert "$\\pm$" in tex and "$\\Delta$" in tex
    assert all(line.startswith("%") for line in tex.splitlines() if "±" in line or "_" in line.replace("\\_", ""))


def test_latex_escapes_special_characters():
    t = pd.DataFrame([{"row": "MT, kl_coef=0.05 & 50%", "col": "Π {x}", "col_order": 0, "metric": "test_error",
                       "which": "final", "mean": 1.0, "std": 0.5, "n": 3, "n_failed": 1, "n_diverged": 0,
                       "n_incomplete": 0, "n_trials": 4, "seeds": "0,1,2", "paper_mean": math.nan,
                       "paper_std": math.nan, "delta": math.nan}])
    tex = to_latex(t)
    assert _braces_balanced(tex)
    assert r"kl\_coef=0.05 \& 50\%" in tex and r"$\Pi$ \{x\}" in tex
    body = [line for line in tex.splitlines() if line.startswith("MT")][0]
    assert len(re.findall(r"(?<!\\)&", body)) == 1


def test_sensitivity_table_uses_table_3(table_built):
    paths = table_built[2]
    s = pd.read_csv(paths["table_sensitivity.csv"])
    cell = s[(s["row"] == "MT + VD + MUR (entmin 0.1)") & (s["col"] == "CIFAR-10 1000")].iloc[0]
    assert (cell["paper_mean"], cell["paper_std"]) == (0.13, 0.29)
    assert s[s["col"] == "CIFAR-100 10000"]["paper_mean"].isna().all()   # Table 3 is CIFAR-10 1000 only


def test_cell_text_names_what_was_left_out():
    r = {"mean": 12.345, "std": 0.5, "n": 2, "n_failed": 1, "n_diverged": 1, "n_incomplete": 0}
    assert cell_text(r) == "12.35 ± 0.50 (n=2, 1 failed, 1 diverged)"
    assert cell_text({**r, "n": 3, "n_failed": 0, "n_diverged": 0}) == "12.35 ± 0.50"
    assert cell_text({**r, "n": 0, "n_failed": 3, "n_diverged": 0}).startswith("— (n=0, 3 failed")


@pytest.fixture
def ablation_exp(tmp_path):
    """Every ablation axis at once: radius x {MUR, RR}, GA/PGA x (alpha, s), VD x KL coefficient."""
    rng = np.random.default_rng(5)
    exp = tmp_path / "ablations-1"
    configs = [{"mur": m, "mur_radius": r} for m in ("direct", "random") for r in (1.0, 4.0)]
    configs += [{"mur": m, "mur_step_size": a, "mur_steps": 2} for m in ("ga", "pga") for a in (0.1, 1.0)]
    configs += [{"vd": True, "kl_coef": k} for k in (0.01, 0.2)]
    i = 0
    for cfg in configs:
        for seed in range(2):
            errs = rng.uniform(5, 30, 3)
            hist = {"counts": rng.integers(0, 9, 4).tolist(), "edges": [0, 0.5, 1, 1.5, 2]} if cfg.get("vd") else {}
            rep = reports(errs, **({"sensitivity_hist": json.dumps(hist)} if hist else {}))
            for k, r in enumerate(rep):
                r["g0_norm"] = math.nan if cfg.get("mur", "none") == "none" else float(rng.uniform(0.1, 2))
                r["sparsity"] = float(rng.uniform(0, 0.5)) if cfg.get("vd") else math.nan
            write_trial(exp, i, {"method": "mt", "dataset": "digits", "num_labels": 100, **cfg, "seed": seed}, rep)
            i += 1
    return exp


@pytest.mark.slow
def test_every_plot_is_written(ablation_exp):
    paths = build_report(ablation_exp)
    for name in ("radius.png", "mur_vs_rr.png", "ga_vs_pga.png", "kl.png", "sensitivity_hist.png", "g0_norm.png"):
        assert name in paths, name
        data = paths[name].read_bytes()
        assert data.startswith(PNG) and len(data) > 1000, name
    assert not list(ablation_exp.glob("*.tmp"))


def test_plots_need_what_they_show(table_built):
    exp, _, paths = table_built
    assert "sensitivity_hist.png" in paths
    for name in ("radius.png", "mur_vs_rr.png", "ga_vs_pga.png", "kl.png", "g0_norm.png"):
        assert name not in paths and not (exp / name).exists()


def test_plot_virtual_points(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 8, 8, generator=g)
    xs = {r: x + r * torch.randn(4, 3, 8, 8, generator=g) for r in (0.5, 1.0, 4.0)}
    out = plot_virtual_points(x, xs, tmp_path / "virtual.png")
    assert out.read_bytes().startswith(PNG) and out.stat().st_size > 1000
    gray = plot_virtual_points(x[:, 0].numpy(), {1.0: xs[1.0][:, 0].numpy()}, tmp_path / "gray.png")
    assert gray.stat().st_size > 1000
    with pytest.raises(ValueError, match=r"x\* at r=2 has shape"):
        plot_virtual_points(x, {2.0: x[:2]}, tmp_path / "bad.png")


def test_virtual_point_mosaic_places_and_scales_every_tile():
    """Tile (i, j) is rows[i][j] mapped by column j's input range to [0, 1] (clipped), 1-pixel gaps."""
    from sweeper.analysis.plots import virtual_point_mosaic

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 2, 4, 5)).astype(np.float32)          # (N, C, H, W)
    xs = x + 3.0 * rng.normal(size=x.shape).astype(np.float32)     # goes outside the input's range
    m = virtual_point_mosaic([x, xs])
    assert m.shape == (2 * 5 - 1, 3 * 6 - 1, 2)
    for j in range(3):
        lo, hi = x[j].min(), x[j].max()
        for i, rows in enumerate((x, xs)):
            want = np.clip((rows[j] - lo) / (hi - lo), 0, 1).transpose(1, 2, 0)
            # a difference and a quotient (and the clip, exact) per pixel, in [0, 1] after the clip
            np.testing.assert_allclose(m[i * 5:i * 5 + 4, j * 6:j * 6 + 5], want, rtol=0, atol=rounding_tol(1.0, 2))
    assert (m[4] == 1).all() and (m[:, 5] == 1).all()            # the gaps are white


@pytest.mark.slow
def test_cli_prints_the_table(table_exp, capsys):
    exp, _ = table_exp
    assert main([str(exp), "--format", "latex", "--which", "best_test"]) == 0
    out = capsys.readouterr().out
    assert "\\begin{tabular}" in out and "best_test test_error" in out and f"results: {exp.resolve()}" in out
    title = out.splitlines()[0]
    assert title.startswith("% table_cifar") and "selected on the test set, optimistic" in title
    assert (exp / "trials.parquet").is_file() and (exp / "summary.csv").is_file()


@pytest.mark.slow
def test_cli_rejects_a_folder_that_is_not_an_experiment(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    proc = subprocess.run([sys.executable, "-m", "sweeper.report", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "not a Ray Tune experiment folder" in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]     # nothing written


def test_build_report_rejects_bad_arguments_before_writing(table_exp):
    exp, _ = table_exp
    with pytest.raises(AggregateError, match="unknown format 'html'"):
        build_report(exp, fmt="html")
    assert not (exp / "trials.parquet").exists()


def test_pooled_histograms_keep_every_test_point():
    from sweeper.analysis.plots import pool_histograms

    same = pool_histograms([(np.array([1.0, 2.0]), np.array([0.0, 1.0, 2.0])), (np.array([3.0, 0.0]), np.array([0.0, 1.0, 2.0]))])
    np.testing.assert_array_equal(same[0], [4.0, 2.0])
    a = (np.array([2.0, 1.0, 0.0]), np.array([0.0, 0.1, 0.2, 0.3]))
    b = (np.array([0.0, 5.0, 1.0]), np.array([0.2, 0.3, 0.4, 0.5]))
    counts, edges = pool_histograms([a, b])
    assert counts.sum() == 9.0 and edges[0] == 0.0 and edges[-1] == 0.5
    centres = np.repeat([0.05, 0.15, 0.25, 0.35, 0.45], [2, 1, 0, 5, 1])        # each count at its bin centre
    np.testing.assert_array_equal(counts, np.histogram(centres, bins=edges)[0])


@pytest.mark.slow
def test_virtual_points_stored_by_the_trial_are_plotted_without_torch(tmp_path):
    """The appendix figure is rebuilt from the virtual_points.npz a MUR trial stores beside its checkpoint
    (x* of test images at 4 radii), in a process where torch cannot be imported; a checkpoint without
    that file, or a sweep without MUR, gives no figure."""
    import json as _json

    from search_spaces.common import QUICK
    from sweeper.analysis.aggregate import load_trials
    from sweeper.analysis.plots import virtual_points_from_checkpoint
    from trainables.config import TrainConfig
    from trainables.mur import virtual_point_examples
    from trainables.trainer import Trainer

    cfg = TrainConfig(**{**QUICK, "method": "pi", "mur": "direct", "steps": 4, "eval_every": 4,
                         "lr_rampdown": 2, "sensitivity_samples": 0})
    tr = Trainer(cfg)
    out = tr.run_interval()
    ck = tmp_path / "trial_0001" / "checkpoint_000000"
    tr.save(ck / "trainer.pt")
    (ck.parent / "params.json").write_text(_json.dumps(cfg.to_dict()))
    (ck.parent / "result.json").write_text(_json.dumps({**out, "trial_id": "0001", "done": True}) + "\n")
    trials = load_trials(tmp_path)
    assert virtual_points_from_checkpoint(tmp_path, trials, tmp_path / "none.png") is None  # no npz stored
    np.savez(ck / "virtual_points.npz", **virtual_point_examples(tr.student, tr.data.x_test[:8], cfg.mur_radius))
    assert virtual_points_from_checkpoint(tmp_path, trials.assign(mur="none"), tmp_path / "none.png") is None
    code = (BLOCK_TORCH +
            "from pathlib import Path\n"
            "from sweeper.analysis.aggregate import load_trials\n"
            "from sweeper.analysis.plots import virtual_points_from_checkpoint\n"
            f"exp = Path({str(tmp_path)!r})\n"
            "png = virtual_points_from_checkpoint(exp, load_trials(exp), exp / 'vp.png')\n"
            "print(png.stat().st_size)")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert int(p.stdout.split()[-1]) > 1000


def make_search_exp(exp, with_val=True, start_points=None):
    """An hpo-shaped folder: 7 trials (2 finished, 3 stopped by ASHA, 1 failed, 1 diverged). The
    validation error ranks the two finished ones opposite to their test error."""
    space = {"lr": ["loguniform", 0.01, 0.3], "mur_radius": ["loguniform", 0.25, 4.0]}
    runs = [  # (lr, r, test errors, val errors, kind)
        (0.10, 1.0, [30, 20, 12.5, 11.0], [31, 21, 12, 8.0], "finished"),
        (0.03, 2.0, [30, 25, 20, 9.0], [29, 26, 19, 12.0], "finished"),   # best test error, worse val error
        (0.20, 0.5, [40, 10.0], [41, 10.5], "stopped"),   # stopped at step 200 with a low error: after finished ones
        (0.05, 0.3, [50, 45, 44.0], [52, 46, 40.0], "stopped"),   # stopped at step 300: before those at 200
        (0.15, 3.0, [35, 15.0], [36, 14.0], "stopped"),
        (0.01, 0.4, [60, 8.0], [61, 5.0], "failed"),
        (0.30, 4.0, [20, math.nan], [21, math.nan], "diverged"),
    ]
    states = []
    for i, (lr, r, errs, val, kind) in enumerate(runs):
        last = {"diverged": 1} if kind == "diverged" else {}
        write_trial(exp, i, {"method": "mt", "lr": lr, "mur_radius": r, "seed": 0},
                    reports(errs, done=kind == "finished", val=val if with_val else None, **last),
                    error=kind == "failed")
        d = next(exp.glob(f"train_tune_ab12c_{i:05d}_*"))
        states.append([json.dumps({"relative_logdir": d.name, "trial_id": f"ab12c_{i:05d}",
                                   "status": "ERROR" if kind == "failed" else "TERMINATED"}), "{}"])
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps({"trial_data": states}))
    (exp / "sweep.json").write_text(json.dumps({"name": "hpo", "rows": ["method"], "cols": [],
                                                "metric": "test_error", "search": {"space": space},
                                                "start_points": start_points}))
    return exp


@pytest.mark.parametrize("point,want", [
    ({"lr": 0.03, "mur_radius": 2.0}, "(lr 0.03, r 2): rank 2 of 5, validation error (%) = 12."),
    ({"lr": 0.05, "mur_radius": 0.3}, "(lr 0.05, r 0.3): rank 3 of 5, stopped early by ASHA at step 300, "
                                      "validation error (%) = 40."),
    ({"lr": 0.01, "mur_radius": 0.4}, "(lr 0.01, r 0.4): not ranked (failed)."),
])
def test_a_search_says_where_its_base_values_landed(tmp_path, point, want):
    """sweep.json start_points (tuner.start_points: the base values, sampled first): the ranked table's
    note gives that trial's rank and validation error, or why it has none."""
    exp = make_search_exp(tmp_path / "hpo-1", start_points=[point])
    md = build_report(exp)["table_ranked.md"].read_text()
    what = want.split(":")[0]
    assert f"- The search's first sample is the base values {what}:{want.split(':', 1)[1]}" in md, md


def test_the_search_sweeps_start_at_their_base_values_and_refuse_one_outside_the_range(capsys):
    from search_spaces import get_sweep
    from sweeper.driver.preflight import trial_configs
    from sweeper.run import main as run_main
    from sweeper.run import parse_args
    from sweeper.driver.tuner import start_points

    for name in ("hpo", "hpo_base"):
        sweep = get_sweep(name, "quick")
        trials = trial_configs(sweep, parse_args([name, "--preset", "quick"]))
        assert start_points(sweep, trials) == [{k: sweep.base[k] for k in sweep.search["space"]}]
    assert run_main(["hpo", "--preset", "quick", "--set", "lr=0.5", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == ("error: search hpo starts at the base value lr=0.5, outside its range "
                                               "[0.01, 0.3]; change --set lr=... or the range in search_spaces/hpo.py")


@pytest.mark.slow
def test_a_search_ranks_its_trials_by_validation_error(tmp_path):
    """hpo: finished trials by final val_error first (the test error beside it, not used), then the
    ASHA-stopped ones (most steps first), failed and diverged left out; build_report writes
    table_ranked.{md,csv} only for a sweep with a search space."""
    exp = make_search_exp(tmp_path / "hpo-20260101-000000")
    paths = build_report(exp)
    ranked = pd.read_csv(paths["table_ranked.csv"])
    assert list(ranked["lr"]) == [0.10, 0.03, 0.05, 0.20, 0.15]       # 0.03 has the lower test error: not first
    assert list(ranked["status"]) == ["finished"] * 2 + ["stopped"] * 3
    assert list(ranked["steps"]) == [400, 400, 300, 200, 200] and list(ranked["rank"]) == [1, 2, 3, 4, 5]
    assert list(ranked["final_val_error"]) == [8.0, 12.0, 40.0, 10.5, 14.0]
    assert list(ranked["final_test_error"]) == [11.0, 9.0, 44.0, 10.0, 15.0]
    assert "best_test_error" not in ranked.columns                      # selected on test: not beside a val choice
    md = paths["table_ranked.md"].read_text()
    assert ("| rank | trial_id | status | steps | lr | mur_radius | final_val_error (ranked by) | "
            "final_test_error (not used for selection) |") in md
    assert "3 stopped early by ASHA" in md and "was not used for selection" in md
    table_exp_dir, _ = make_table_exp(tmp_path / "grid")
    assert "table_ranked.md" not in build_report(table_exp_dir)  # a grid has no ranking


def test_a_search_without_validation_errors_is_listed_unranked(tmp_path):
    """Trials without a validation split (val_size=0): nothing to select on, so no ranking (and none by test
    error); they are listed by steps then trial id, with a note saying why."""
    trials = load_trials(make_search_exp(tmp_path / "hpo-1", with_val=False))
    ranked = ranking_frame(trials, ["lr", "mur_radius"])
    assert ranked["rank"].isna().all() and ranked["final_val_error"].isna().all()
    assert list(ranked["lr"]) == [0.10, 0.03, 0.05, 0.20, 0.15]   # finished by trial id, then stopped by steps
    md = build_report(tmp_path / "hpo-1")["table_ranked.md"].read_text()
    assert "listed unranked" in md and "No trial reported val_error" in md


def test_hpo_without_a_validation_split_is_refused_before_ray(capsys):
    from sweeper.run import main as run_main

    assert run_main(["hpo", "--preset", "quick", "--set", "val_size=0", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: hpo selects on the validation split;")
    assert "val_size" in err[0]


def test_other_papers_mnist_numbers_are_listed_under_an_mnist_table_with_sources():
    from sweeper.analysis.paper_results import OTHER_PAPERS
    from sweeper.analysis.tables import other_papers_notes

    t = pd.DataFrame({"dataset": ["mnist", "digits"], "num_labels": [100, 100], "metric": ["test_error"] * 2})
    notes = other_papers_notes(t)
    mnist = [r for r in OTHER_PAPERS if r.dataset == "mnist" and r.num_labels == 100]
    assert len(notes) == 1 and len(mnist) >= 3
    assert all(f"{r.mean:.2f}" in notes[0] and r.source in notes[0] for r in mnist)
    assert notes[0].count(", not checked)") == sum(not r.checked for r in mnist) > 0
    assert other_papers_notes(t[t["dataset"] == "digits"]) == []  # no other papers' digits numbers


def test_classical_note_sorts_rows_into_better_no_difference_and_worse_than_labelspreading(tmp_path):
    """Per-seed finals chosen so that one row is clearly below LabelSpreading, one clearly above and one
    indistinguishable; the note's intervals equal scipy's paired t-interval."""
    from sweeper.analysis.tables import classical_note

    exp = tmp_path / "table-1"
    ls = np.array([4.0, 5.0, 4.5, 4.2, 4.8])
    rows = {"labelspreading": ls, "mt": ls - np.array([2.0, 2.2, 1.9, 2.1, 2.3]),
            "supervised": ls + np.array([1.0, 1.2, 0.9, 1.1, 1.3]), "pi": ls + np.array([1.0, -1.0, 0.5, -0.6, 0.2])}
    i = 0
    for method, finals in rows.items():
        for seed, e in enumerate(finals):
            write_trial(exp, i, {"method": method, "seed": seed}, reports([30.0, e]))
            i += 1
    trials = load_trials(exp)
    note = classical_note(summarize(trials), trials, ("method",), ())
    assert len(note) == 1
    better, worse = note[0].split("better: ")[1], note[0].split("worse: ")[1]
    assert better.startswith("MT ") and worse.startswith("Supervised ") and "no clear difference: Π" in note[0]
    ci = scipy.stats.ttest_rel(rows["mt"], ls).confidence_interval(0.95)
    assert f"[{ci.low:+.2f}, {ci.high:+.2f}]" in better
    assert classical_note(summarize(trials[trials["method"] != "labelspreading"]),
                          trials[trials["method"] != "labelspreading"], ("method",), ()) == []


@pytest.mark.slow
def test_paired_diffs_plot_draws_every_paired_cell_and_nothing_without_a_baseline(tmp_path):
    """paired_diffs.png: one line per cell with >= 2 paired seeds, its difference and interval those
    of summary.csv (the diverged extra MT seed pairs nothing); no plot without a baseline."""
    from sweeper.analysis.plots import paired_diff_rows

    exp, _ = make_table_exp(tmp_path / "a", baseline=MT_BASE, within=("method",))
    paths = build_report(exp)
    assert paths["paired_diffs.png"].read_bytes()[:8] == PNG
    summary = pd.read_csv(exp / "summary.csv")
    rows = (("method", "vd", "mur"), ("dataset", "num_labels"))
    drawn = paired_diff_rows(table_frame(baseline_diffs(summarize(load_trials(exp)), load_trials(exp), MT_BASE,
                                                        *rows, within=("method",))[0], *rows))
    want = summary[summary["n_paired"] >= 2]
    assert len(drawn) == len(want) == len(VARIANTS) * len(COLS) - len(COLS)  # every cell but MT's
    assert sorted(round(d, 9) for _, d, _, _ in drawn) == sorted(round(d, 9) for d in want["diff_vs_baseline"])
    assert all(lo <= d <= hi for _, d, lo, hi in drawn)
    assert sum(" vs ICT (entmin 0)" in label for label, *_ in drawn) == len(COLS)  # ICT + VD, per column
    exp2, _ = make_table_exp(tmp_path / "b")
    assert "paired_diffs.png" not in build_report(exp2) and not (exp2 / "paired_diffs.png").exists()


def test_confirm_reruns_the_best_trial_and_the_base_values_on_fresh_seeds(tmp_path, capsys):
    """--confirm: the search's rank-1 trial by validation error (lr 0.10, r 1; not the best test error's
    lr 0.03) and its recorded start point, as two rows paired over seeds 1..5 (the search used seed
    0), the start point the baseline; the rest of the config from the best trial."""
    from search_spaces import get_sweep
    from sweeper.seeds.confirm import confirm_sweep
    from sweeper.run import main as run_main
    from trainables.config import TrainConfig

    start = {"lr": 0.05, "mur_radius": 0.3}
    exp = make_search_exp(tmp_path / "hpo-1", start_points=[start])
    s = confirm_sweep(get_sweep("hpo", "quick"), str(exp))
    assert (s.name, s.variants, s.baseline, s.seeds, s.first_seed) == \
        ("hpo_confirm", [start, {"lr": 0.10, "mur_radius": 1.0}], start, 5, 1)
    defaults = {k: v for k, v in TrainConfig().to_dict().items() if k not in ("seed", "lr", "mur_radius")}
    assert s.base == {**defaults, "method": "mt"} and s.rows == ("method", "lr", "mur_radius")
    assert s.metric == "val_error"  # the confirmation decides on validation; the test error is shown beside
    assert [t["seed"] for t in s.trials()] == [1, 2, 3, 4, 5] * 2
    assert not any((exp / n).exists() for n in ("table_ranked.csv", "trials.parquet"))  # the search is only read
    assert run_main(["hpo", "--preset", "quick", "--confirm", str(exp), "--seeds", "3", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "6 trials = 2 configs x 3 seeds" in out and "lr=0.1  mur_radius=1.0  seed=3" in out


@pytest.mark.parametrize("case", ["not a search", "no start point", "another search"])
def test_confirm_refuses_what_it_cannot_confirm_in_one_line(tmp_path, capsys, case):
    from sweeper.run import main as run_main

    exp = make_search_exp(tmp_path / "hpo-1", start_points=None if case == "no start point" else [{"lr": 0.05}])
    sweep = {"not a search": "table_cifar", "another search": "hpo_base"}.get(case, "hpo")
    assert run_main([sweep, "--preset", "quick", "--confirm", str(exp), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    want = {"not a search": "error: --confirm takes a search's experiment folder; table_cifar is not a search",
            "no start point": f"error: --confirm {exp}: this search did not record its start point",
            "another search": f"error: --confirm {exp} holds a hpo experiment, not hpo_base"}[case]
    assert len(err) == 1 and err[0].startswith(want), err


def test_a_validation_table_shows_the_test_error_beside_with_its_paired_interval(tmp_path):
    """A table of validation error (what --confirm decides on): the test error of each row follows in a
    note, with its paired difference from the baseline row (scipy's paired t-interval), marked as not
    used for the choice."""
    exp = tmp_path / "hpo_confirm-1"
    rng = np.random.default_rng(5)
    test = {lr: rng.uniform(1, 5, 4) for lr in (0.16, 0.07)}
    i = 0
    for lr in (0.16, 0.07):
        for seed in range(1, 5):
            write_trial(exp, i, {"method": "mt", "lr": lr, "seed": seed},
                        reports([test[lr][seed - 1]], val=[rng.uniform(1, 5)]))
            i += 1
    (exp / "sweep.json").write_text(json.dumps({"name": "hpo_confirm", "rows": ["method", "lr"], "cols": [],
                                                "metric": "val_error", "baseline": {"lr": 0.16}}))
    md = build_report(exp)["table.md"].read_text()
    assert "| Model | validation error (%) |" in md
    ci = scipy.stats.ttest_rel(test[0.07], test[0.16]).confidence_interval(0.95)
    d = np.mean(test[0.07] - test[0.16])
    star = "*" if ci.low > 0 or ci.high < 0 else ""
    note = next(line for line in md.splitlines() if line.startswith("- Test error (%), beside and not used for the choice: "))
    assert f"MT (lr 0.16) {np.mean(test[0.16]):.2f}" in note
    assert f"MT (lr 0.07) {np.mean(test[0.07]):.2f} · {_minus(d)} [{_minus(ci.low)}, {_minus(ci.high)}]{star}" in note


def test_subset_note_says_whether_the_labeled_subset_was_fixed_or_drawn_per_seed():
    from sweeper.analysis.tables import subset_note

    per_seed = subset_note(pd.DataFrame({"seed": [0, 1], "label_seed": [-1, -1]}))
    fixed = subset_note(pd.DataFrame({"seed": [0, 1], "label_seed": [1003, 1003]}))
    assert "drawn anew for each seed (label_seed=-1)" in per_seed and "fixed" not in per_seed
    assert "the same for every seed (label_seed=1003" in fixed and "training randomness only" in fixed
    assert subset_note(pd.DataFrame({"seed": [0, 1]})) == per_seed  # trials from before the key
    mixed = subset_note(pd.DataFrame({"seed": [0, 1], "label_seed": [1003, -1]}))
    assert "fixed (label_seed=1003) in some trials" in mixed and "label_seed=-1" in mixed
    # and the per-class rule: balanced (also for trials from before the key) or the authors' frequency rule
    assert "label_rule=balanced" in per_seed and "label_rule=balanced" in fixed
    svhn = subset_note(pd.DataFrame({"seed": [0, 1], "label_seed": [1003] * 2, "label_rule": ["frequency"] * 2}))
    assert "label_rule=frequency, the authors' rule" in svhn and "balanced" not in svhn


def test_fixmatch_report_shows_fixmatchs_median_of_the_last_evaluations_beside_the_final(tmp_path):
    """FixMatch rows: the note gives each cell's mean over seeds of the median of each trial's last 20 test
    errors (computed here with numpy) beside the mean final error, the number of evaluations and the
    evaluation period, and says that FixMatch's ± is over five labeled splits; --which median_last
    tabulates the same medians."""
    rng = np.random.default_rng(5)
    exp = tmp_path / "fixmatch-20260101-000000"
    curves, i = {}, 0
    for vd in (False, True):
        curves[vd] = rng.uniform(4, 9, size=(3, 25))  # (seed, evaluation): 25 evaluations, 20 in the median
        for seed in range(3):
            write_trial(exp, i, {"method": "fixmatch", "vd": vd, "mur": "none", "dataset": "cifar10", "num_labels": 250,
                                 "steps": 25 * 1024, "eval_every": 1024, "label_seed": 1003, "val_size": 0,
                                 "seed": seed, "trial_index": i},
                        reports(curves[vd][seed], steps=25 * 1024))
            i += 1
    (exp / "sweep.json").write_text(json.dumps({"name": "fixmatch", "rows": ["method", "vd", "mur"],
                                                "cols": ["dataset", "num_labels"], "metric": "test_error",
                                                "baseline": {"method": "fixmatch", "vd": False, "mur": "none"}}))
    build_report(exp)
    text = (exp / "table.md").read_text()
    for vd in (False, True):
        med = np.median(curves[vd][:, -20:], axis=1)  # (seed,)
        final = curves[vd][:, -1]
        assert f"{med.mean():.2f} ± {med.std(ddof=1):.2f} (final {final.mean():.2f} ± {final.std(ddof=1):.2f})" in text
    assert "last 20 evaluations, here 20 (of 25 evaluations, one every 1024 steps)" in text
    assert "five labeled splits" in text and "over seeds on one labeled split" in text
    s = summarize(load_trials(exp), "test_error", "median_last")
    got = sorted(s["mean"].round(6).tolist())
    assert got == sorted(round(float(np.median(curves[vd][:, -20:], axis=1).mean()), 6) for vd in (False, True))
    build_report(exp, which="median_last")
    assert "[median_last: median of each trial's last 20 evaluations" in (exp / "table.md").read_text()


# ---------------------------------------------------------------- history.parquet and the curves drawn from it

def test_history_holds_every_reported_error_and_the_curves_are_the_mean_and_range_over_seeds(table_built):
    """make_table_exp's trials report known test errors at 3 evaluations: history.parquet holds each of them
    at its step (float32), the diverged trial's NaN evaluation left out; each cell's curve is the mean,
    minimum and maximum over its 3 finished seeds at each step (the diverged seed never averaged in)."""
    from sweeper.analysis.html import CURVE_CAPTION, cell_trials
    from sweeper.analysis.plots import cell_curves

    exp, curves, paths = table_built
    hist, trials = pd.read_parquet(paths["history.parquet"]), pd.read_parquet(exp / "trials.parquet")
    assert list(hist.columns) == ["trial_id", "step", "test_error", "val_error"]
    assert [str(t) for t in hist.dtypes[1:]] == ["int32", "float32", "float32"] and hist["val_error"].isna().all()
    steps = [PAPER_STEPS * (k + 1) // 3 for k in range(3)]
    for _, t in trials.iterrows():
        got = hist[hist["trial_id"] == t["trial_id"]]
        if t["status"] == "diverged":
            assert got["step"].tolist() == [PAPER_STEPS // 2] and got["test_error"].tolist() == [50.0]
            continue
        want = curves[(t["method"], bool(t["vd"]), t["mur"], t["dataset"])][int(t["seed"])]
        assert got["step"].tolist() == steps
        assert got["test_error"].tolist() == want.astype(np.float32).tolist()
    cell = cell_curves(cell_trials(pd.read_csv(paths["table.csv"]), trials), hist)
    assert list(cell.columns) == ["row", "col", "step", "mean", "low", "high", "n"]
    assert len(cell) == len(curves) * 3
    labels = {(m, vd, mur): f"{name} (entmin {e:g})" for (m, vd, mur, e), name in
              zip(VARIANTS, ("MT", "MT + VD", "MT + MUR", "MT + VD + MUR", "ICT", "ICT + VD"))}
    cols = {"cifar10": "CIFAR-10 1000", "cifar100": "CIFAR-100 10000"}
    for (method, vd, mur, ds), c in curves.items():
        got = cell[(cell["row"] == labels[(method, vd, mur)]) & (cell["col"] == cols[ds])].sort_values("step")
        seeds = c.astype(np.float32).astype(float)  # (seed, evaluation), as history.parquet stores them
        assert got["step"].tolist() == steps and got["n"].tolist() == [3, 3, 3]
        # a sum of 3 errors under 40 and a quotient, in float64 both here and in cell_curves
        np.testing.assert_allclose(got["mean"], seeds.mean(axis=0), rtol=0, atol=rounding_tol(3 * 40.0, 4, torch.float64))
        assert got["low"].tolist() == seeds.min(axis=0).tolist() and got["high"].tolist() == seeds.max(axis=0).tolist()
    assert paths["curves.png"].read_bytes().startswith(PNG)
    assert f'alt="{html.escape(CURVE_CAPTION)}"' in paths["report.html"].read_text()


def test_history_stays_small_for_a_long_run(tmp_path):
    """100 trials of 560 evaluations (280k steps, one every 500): history.parquet under 1 MB, as
    docs/RESULTS_FORMAT.md says; every metric but the two errors left out."""
    from sweeper.analysis.aggregate import write_history

    rng = np.random.default_rng(0)
    n, k = 100, 560
    long = pd.DataFrame({"trial_id": np.repeat([f"a5f47_{i:05d}" for i in range(n)], k),
                         "step": np.tile(np.arange(1, k + 1) * 500.0, n), "test_error": rng.uniform(2, 60, n * k),
                         "val_error": rng.uniform(2, 60, n * k), "g0_norm": rng.uniform(0, 1, n * k)})
    path = write_history(long, tmp_path / "history.parquet")
    back = pd.read_parquet(path)
    assert path.stat().st_size < 1_000_000 and list(back.columns) == ["trial_id", "step", "test_error", "val_error"]
    assert len(back) == n * k and back["step"].max() == 280_000
