"""Tables shaped like the paper's and the ablation plots, rebuilt from a stored experiment folder.

Rows are methods and variants ("MT", "MT + VD (entmin 0.1)", "MT + MUR": the sweep's `rows` keys
and every other knob in which the rows differ), columns are data sets and label counts (the
sweep's `cols` keys), cells `mean ± std` over seeds (sample std, ddof=1); with a baseline row
(Sweep.baseline) each other cell also shows its paired difference from the baseline over seeds,
with a 95% t-interval; the paper's published value sits beside each cell where the paper has one,
and Δ = ours − paper where the run followed the paper's protocol (sweeper/analysis/paper_results.py),
with the best test error over evaluations (selected on the test set) and its Δ beside them.
Written as table.md, table.tex (plain tabular) and table.csv (tidy: one line per cell), plus
table_sensitivity.* when the trials report a sensitivity (Table 3), table_ranked.* for a search
(hpo, ranked by validation error), trials.parquet, summary.parquet/.csv, and PNG plots, each made
only when the sweep varies what it shows, and report.html, all of it on one self-contained page.
This module arranges them: the tables are sweeper/analysis/tables.py (labels.py, layout.py, paired.py,
render.py, ranking.py), the plots sweeper/analysis/plots.py, the page sweeper/analysis/html.py. Given a results root
instead, it writes the root's index.html (sweeper/analysis/index.py).
Ray is neither imported nor needed.

    python -m sweeper.report results/ablation_radius-20260101-120000 [--format md|latex|csv] [--which final|best_val|best_test|median_last]
    python -m sweeper.report results/          # index.html: one row per sweep folder, with a link to its page
    pytest tests/test_report.py -q
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from sweeper.analysis.aggregate import (SELECT_METRIC, WHICH, AggregateError, check_which,
                                        check_experiment, load_history, load_trials, read_sweep, summarize, write_summary,
                                        write_trials)
from sweeper import storage
from sweeper.seeds.auto_seeds import sequential_diffs
from sweeper.analysis.html import PAGE, write_page
from sweeper.analysis.index import UNREADABLE, index_at, index_text, is_results_root
from sweeper.analysis.plots import (plot_g0, plot_ga_vs_pga, plot_kl, plot_mur_vs_rr, plot_paired_diffs, plot_radius,
                                    plot_sensitivity_hist, virtual_points_from_checkpoint)
from sweeper.analysis.labels import WHICH_TITLE, metric_name
from sweeper.analysis.layout import paper_error, paper_sens
from sweeper.analysis.paired import baseline_diffs
from sweeper.analysis.planned import add_planned, short_cells
from sweeper.analysis.ranking import write_ranking
from sweeper.analysis.render import write_tables
from sweeper.analysis.tables import (classical_note, fixmatch_note, subset_note, table_frame, test_beside_note,
                                     val_note)
from trainables.remote import redact, secret_in_uri

FORMATS = {"md": "table.md", "latex": "table.tex", "csv": "table.csv"}


# ---------------------------------------------------------------- everything from stored results

def build_report(exp_dir: str | Path, fmt: str = "md", which: str = "final") -> dict[str, Path]:
    """Rebuild trials.parquet, summary.*, table.{md,tex,csv}, table_sensitivity.* and the plots.

    Returns {file name: path} of what was written; "table" is the table in `fmt` (md | latex | csv).
    which="final" (default) tabulates each trial's last evaluation; "best_val" the test error at the
    evaluation of lowest validation error; "best_test" the minimum test error over
    evaluations, selected on the test set (optimistic), which is what the paper's numbers are;
    "median_last" each trial's median over its last evaluations (FixMatch's statistic). With
    a baseline in sweep.json, summary.* and the tables carry each cell's paired difference from it
    (paired.baseline_diffs). Nothing is written for a folder that is not a Ray Tune experiment
    (AggregateError).
    """
    if fmt not in FORMATS:
        raise AggregateError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    which = check_which(which)
    exp = check_experiment(exp_dir)
    meta = read_sweep(exp) or {}
    rows, cols = tuple(meta.get("rows") or ("method", "vd", "mur")), tuple(meta.get("cols") or ())
    metric = meta.get("metric") or "test_error"
    trials = load_trials(exp)
    history = load_history(exp)
    paths = {"trials.parquet": write_trials(trials, exp / "trials.parquet")}
    if not (trials["n_reports"] > 0).any():
        raise AggregateError(f"{exp}: no trial has reported yet ({len(trials)} trial folders, all without "
                             f"results); wrote trials.parquet only, run the report again later")
    baseline, within = meta.get("baseline"), tuple(meta.get("baseline_within") or ())
    named = meta.get("baseline_for") or {}
    no_val = val_note(trials)
    summary, notes = baseline_diffs(add_planned(summarize(trials, metric, which), trials, exp, meta), trials,
                                    baseline, rows, cols, within=within, baseline_for=named)
    summary, seq_notes = sequential_diffs(summary, trials, meta)  # --seeds auto: each cell's sequential verdict
    notes = notes + seq_notes + classical_note(summary, trials, rows, cols) + [subset_note(trials)] \
        + fixmatch_note(trials, rows, cols) + [f"Fewer trials than planned: {c}" for c in short_cells(summary)]
    if metric == SELECT_METRIC:  # a table to choose from (--confirm): the test error beside, not used
        notes += test_beside_note(trials, baseline, rows, cols, which, within, named)
    paths.update(write_summary(summary, exp))
    title = meta.get("name", exp.name) + (f": {meta['description']}" if meta.get("description") else "") \
        + (f" ({meta['paper_ref']})" if meta.get("paper_ref") else "")
    table = table_frame(summary, rows, cols, paper_error if metric == "test_error" else None, trials=trials)
    diffs_png = plot_paired_diffs(table, exp / "paired_diffs.png", metric)
    if diffs_png is not None:
        paths["paired_diffs.png"] = diffs_png
    paths.update(write_tables(table, exp, "table", title + WHICH_TITLE[which],
                              notes + ([no_val] if no_val and which == "best_val" else [])))
    search = meta.get("search") or {}
    if search.get("space"):  # a search (hpo): its trials ranked by validation error, best first
        select = search.get("metric", SELECT_METRIC)
        paths.update(write_ranking(trials, [k for k in search["space"] if k in trials.columns], exp,
                                   f"{meta.get('name', exp.name)}: trials ranked by {metric_name(select)}",
                                   select, metric, [no_val] if no_val and select == SELECT_METRIC else [],
                                   start_points=meta.get("start_points")))
    if "final_sensitivity_mean" in trials.columns and np.isfinite(
            pd.to_numeric(trials["final_sensitivity_mean"], errors="coerce")).any():
        sens, sens_notes = baseline_diffs(summarize(trials, "sensitivity_mean", "final"), trials, baseline,
                                          rows, cols, within=within, baseline_for=named)
        paths.update(write_tables(table_frame(sens, rows, cols, paper_sens), exp, "table_sensitivity",
                                  f"{title}: sensitivity (Table 3)", sens_notes))
    plots = {"radius.png": lambda p: plot_radius(trials, p, metric, which),
             "mur_vs_rr.png": lambda p: plot_mur_vs_rr(trials, p, metric, which),
             "ga_vs_pga.png": lambda p: plot_ga_vs_pga(trials, p, metric, which),
             "kl.png": lambda p: plot_kl(trials, history, p, metric, which),
             "sensitivity_hist.png": lambda p: plot_sensitivity_hist(trials, p),
             "g0_norm.png": lambda p: plot_g0(trials, history, p)}
    plots["virtual_points.png"] = lambda p: virtual_points_from_checkpoint(exp, trials, p)
    for name, plot in plots.items():
        out = plot(exp / name)
        if out is not None:
            paths[name] = out
    paths[PAGE] = write_page(exp, which)  # report.html: all of the above on one self-contained page
    paths["table"] = paths[FORMATS[fmt]]
    return paths


def report_at(exp: str | storage.Folder, fmt: str = "md", which: str = "final") -> dict[str, Path]:
    """build_report for a local folder or a URI. For a URI: the report's inputs are
    copied into the local cache folder (storage.report_inputs), the report is built there, and every file it
    wrote (and hpo's optuna.db) is uploaded to exp. Returns {name: local path}; AggregateError as
    build_report, StorageError when the bucket cannot be read or written."""
    exp, cache = storage.report_inputs(exp)
    if isinstance(exp, Path):
        return build_report(exp, fmt, which)
    try:
        paths = build_report(cache, fmt, which)
    except AggregateError as e:  # name the URI, not the cache folder
        raise AggregateError(str(e).replace(str(cache), str(exp))) from None
    try:
        storage.push([*paths.values(), *([cache / storage.OPTUNA_DB] if (cache / storage.OPTUNA_DB).is_file() else [])],
                     cache, exp)
    except OSError as e:
        raise storage.StorageError(f"the report was built in {cache} but not uploaded: "
                                   f"{storage.explain(e, str(exp))}") from None
    return paths


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sweeper.report", description=__doc__.splitlines()[0])
    p.add_argument("results_dir", help="a Ray Tune experiment folder, e.g. results/<sweep>-<stamp> "
                                       "or s3://BUCKET/results/<sweep>-<stamp> (see sweeper/storage.py); "
                                       "a results root (results/, s3://BUCKET/results): its index.html")
    p.add_argument("--format", choices=sorted(FORMATS), default="md", help="table printed (all are written)")
    p.add_argument("--which", choices=WHICH, default="final",
                   help="final: last evaluation (default); best_val: test error where the validation error "
                        "is lowest; best_test: minimum test error over evaluations, selected on "
                        "the test set (optimistic), as the paper's authors kept")
    args = p.parse_args(argv)
    if secret_in_uri(args.results_dir):  # it would name the cache folder and be printed
        print(f"error: {redact(args.results_dir)} carries credentials in the URI; pass it without them and "
              f"{storage.where_keys_go(args.results_dir)}", file=sys.stderr)
        return 2
    try:
        if is_results_root(args.results_dir):  # a results root: its index.html, one row per sweep
            path, rows = index_at(args.results_dir)
            print(index_text(rows))
            for r in rows:
                if r.state == UNREADABLE:
                    print(f"warning: {r.folder} is unreadable ({r.headline}); its row in the index says so", file=sys.stderr)
            print(f"index: {path}")
            return 0
    except (AggregateError, storage.StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        paths = report_at(args.results_dir, args.format, args.which)
    except (AggregateError, storage.StorageError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(paths["table"].read_text())
    for line in short_cells(pd.read_csv(paths["summary.csv"], keep_default_na=False, na_values=[""])):
        print(f"warning: {line}", file=sys.stderr)  # a report of what exists is no failure: exit 0
    if "table_ranked.md" in paths:  # a search (hpo): its trials ranked
        print(paths["table_ranked.md"].read_text())
    plots = [n for n in paths if n.endswith(".png")]
    print(f"plots: {', '.join(plots) if plots else 'none (the sweep varies none of the plotted keys)'}")
    print(f"results: {args.results_dir if '://' in args.results_dir else Path(args.results_dir).expanduser().resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
