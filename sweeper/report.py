"""Tables shaped like the paper's and the ablation plots, rebuilt from a stored experiment folder.

Rows are methods and variants ("MT", "MT + VD (entmin 0.1)", "MT + MUR": the sweep's `rows` keys
and every other knob in which the rows differ), columns are data sets and label counts (the
sweep's `cols` keys), cells `mean ± std` over seeds (sample std, ddof=1); with a baseline row
(Sweep.baseline) each other cell also shows its paired difference from the baseline over seeds,
with a 95% t-interval; the paper's published value sits beside each cell where the paper has one,
and Δ = ours − paper where the run followed the paper's protocol (sweeper/analysis/paper_results.py),
with the best test error over evaluations (selected on the test set) and its Δ beside them.
Written as table.md, table.tex (plain tabular), table.csv (tidy: one line per cell) and table.json (its text,
which report.html renders), plus
table_sensitivity.* when the trials report a sensitivity (Table 3), table_ranked.* for a search
(hpo, ranked by validation error), trials.parquet, history.parquet (each trial's test and validation
error at every evaluation), summary.parquet/.csv, and PNG plots, each made only when the sweep varies what
it shows (curves.png: each cell's test error by step), and report.html, all of it on one self-contained page.
A run kept without its trial folders (docs/runs/<run>: trials.parquet, sweep.json, machine.json) is
rebuilt from its trials.parquet; --out writes everything into another folder and leaves the run's as it is.
This module arranges them: the tables are sweeper/analysis/tables.py (labels.py, layout.py, paired.py,
render.py, ranking.py), the plots sweeper/analysis/plots.py, the page sweeper/analysis/html.py. Given a results root
instead, it writes the root's index.html (sweeper/analysis/index.py).
Ray is neither imported nor needed.

    python -m sweeper.report results/ablation_radius-20260101-120000 [--format md|latex|csv] [--which final|best_val|best_test|median_last]
    python -m sweeper.report docs/runs/ablation_radius-quick-s0-7 --out /tmp/page   # a committed run's page
    python -m sweeper.report results/          # index.html: one row per sweep folder, with a link to its page
    pytest tests/test_report.py -q
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from sweeper.analysis.aggregate import (HISTORY, HISTORY_METRICS, SELECT_METRIC, TRIALS, WHICH, AggregateError,
                                        check_experiment, check_which, load_history, load_trials, read_history,
                                        read_sweep, read_trials, stored_run, summarize, write_history, write_summary,
                                        write_trials)
from sweeper import storage
from sweeper.seeds.auto_seeds import sequential_diffs
from sweeper.analysis.html import CURVES, PAGE, cell_trials, write_page
from sweeper.analysis.index import UNREADABLE, index_at, index_text, is_results_root
from sweeper.analysis.plots import (cell_curves, plot_curves, plot_g0, plot_ga_vs_pga, plot_kl,
                                    plot_mur_vs_rr, plot_paired_diffs, plot_radius, plot_sensitivity_hist,
                                    virtual_points_from_checkpoint)
from sweeper.analysis.labels import WHICH_TITLE, metric_name
from sweeper.analysis.layout import paper_error, paper_sens
from sweeper.analysis.paired import baseline_diffs
from sweeper.analysis.planned import add_planned, short_cells
from sweeper.analysis.ranking import write_ranking
from sweeper.analysis.render import write_tables
from sweeper.analysis.tables import (classical_note, column_order, fixmatch_note, subset_note, table_frame,
                                     test_beside_note, val_note)
from trainables.files import atomic_write
from trainables.remote import redact, secret_in_uri

FORMATS = {"md": "table.md", "latex": "table.tex", "csv": "table.csv"}


# ---------------------------------------------------------------- everything from stored results

def build_report(exp_dir: str | Path, fmt: str = "md", which: str = "final",
                 out: str | Path | None = None) -> dict[str, Path]:
    """Rebuild trials.parquet, history.parquet, summary.*, table.{md,tex,csv,json}, table_sensitivity.*, the
    plots and report.html.

    Returns {file name: path} of what was written; "table" is the table in `fmt` (md | latex | csv).
    which="final" (default) tabulates each trial's last evaluation; "best_val" the test error at the
    evaluation of lowest validation error; "best_test" the minimum test error over
    evaluations, selected on the test set (optimistic), which is what the paper's numbers are;
    "median_last" each trial's median over its last evaluations (FixMatch's statistic). With
    a baseline in sweep.json, summary.* and the tables carry each cell's paired difference from it
    (paired.baseline_diffs). A stored run (aggregate.stored_run: trials.parquet, no trial folders, as
    docs/runs/ keeps one) is rebuilt from its trials.parquet. `out`: the folder everything is written
    to (created), exp_dir only read; default exp_dir itself. Nothing is written for a folder that is
    neither a Ray Tune experiment nor a stored run (AggregateError).
    """
    if fmt not in FORMATS:
        raise AggregateError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    which = check_which(which)
    exp = Path(exp_dir).expanduser() if stored_run(exp_dir) else check_experiment(exp_dir)
    dest = exp if out is None else out_folder(out, exp)
    meta = read_sweep(exp) or {}
    rows, cols = tuple(meta.get("rows") or ("method", "vd", "mur")), tuple(meta.get("cols") or ())
    metric = meta.get("metric") or "test_error"
    trials, history, paths = trials_and_history(exp, dest)
    if not (trials["n_reports"] > 0).any():
        raise AggregateError(f"{exp}: no trial has reported yet ({len(trials)} trial folders, all without "
                             f"results); wrote {' and '.join(paths) or 'nothing'} only, run the report again later")
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
    paths.update(write_summary(summary, dest))
    title = meta.get("name", exp.name) + (f": {meta['description']}" if meta.get("description") else "") \
        + (f" ({meta['paper_ref']})" if meta.get("paper_ref") else "")
    table = table_frame(summary, rows, cols, paper_error if metric == "test_error" else None, trials=trials)
    diffs_png = plot_paired_diffs(table, dest / "paired_diffs.png", metric)
    if diffs_png is not None:
        paths["paired_diffs.png"] = diffs_png
    paths.update(write_tables(table, dest, "table", title + WHICH_TITLE[which],
                              notes + ([no_val] if no_val and which == "best_val" else [])))
    search = meta.get("search") or {}
    if search.get("space"):  # a search (hpo): its trials ranked by validation error, best first
        select = search.get("metric", SELECT_METRIC)
        paths.update(write_ranking(trials, [k for k in search["space"] if k in trials.columns], dest,
                                   f"{meta.get('name', exp.name)}: trials ranked by {metric_name(select)}",
                                   select, metric, [no_val] if no_val and select == SELECT_METRIC else [],
                                   start_points=meta.get("start_points")))
    if "final_sensitivity_mean" in trials.columns and np.isfinite(
            pd.to_numeric(trials["final_sensitivity_mean"], errors="coerce")).any():
        sens, sens_notes = baseline_diffs(summarize(trials, "sensitivity_mean", "final"), trials, baseline,
                                          rows, cols, within=within, baseline_for=named)
        paths.update(write_tables(table_frame(sens, rows, cols, paper_sens), dest, "table_sensitivity",
                                  f"{title}: sensitivity (Table 3)", sens_notes))
    plots = {"radius.png": lambda p: plot_radius(trials, p, metric, which),
             "mur_vs_rr.png": lambda p: plot_mur_vs_rr(trials, p, metric, which),
             "ga_vs_pga.png": lambda p: plot_ga_vs_pga(trials, p, metric, which),
             "kl.png": lambda p: plot_kl(trials, history, p, metric, which),
             "sensitivity_hist.png": lambda p: plot_sensitivity_hist(trials, p),
             "g0_norm.png": lambda p: plot_g0(trials, history, p),
             CURVES: lambda p: plot_curves(cell_curves(cell_trials(table, trials), history),
                                           column_order(table), p)}
    plots["virtual_points.png"] = lambda p: virtual_points_from_checkpoint(exp, trials, p)
    for name, plot in plots.items():
        png = plot(dest / name)
        if png is not None:
            paths[name] = png
    paths[PAGE] = write_page(exp, which, out=dest)  # report.html: all of the above on one self-contained page
    paths["table"] = paths[FORMATS[fmt]]
    return paths


def out_folder(out: str | Path, exp: Path) -> Path:
    """The folder a report goes to when it is not the run's own (created). AggregateError for a file, or for
    the run's folder or a folder inside it: the run's folder is only read."""
    dest = Path(out).expanduser()
    if dest.exists() and not dest.is_dir():
        raise AggregateError(f"--out {dest} is a file; pass a folder (it is created if missing)")
    if dest.resolve().is_relative_to(exp.resolve()):
        raise AggregateError(f"--out {dest} is inside the run's folder {exp}, which the report only reads; "
                             f"pass a folder outside it, or leave --out out to write the report into {exp}")
    dest.mkdir(parents=True, exist_ok=True)
    return dest


def trials_and_history(exp: Path, dest: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Path]]:
    """(trials, history, {name: path written}) of a run. From trial folders: load_trials, and load_history of
    the error curves and the metrics the plots draw per step; both written to `dest` (trials.parquet,
    history.parquet). From a stored run: its trials.parquet and history.parquet (an empty history where it
    has none), copied byte for byte to a `dest` that is not the run's own folder."""
    if not stored_run(exp):
        trials, history = load_trials(exp), load_history(exp, (*HISTORY_METRICS, "g0_norm", "sparsity"))
        return trials, history, {TRIALS: write_trials(trials, dest / TRIALS),
                                 HISTORY: write_history(history, dest / HISTORY)}
    trials, history = read_trials(exp), read_history(exp)
    kept = [n for n in (TRIALS, HISTORY) if (exp / n).is_file()] if dest != exp else []
    written = {n: atomic_write(dest / n, lambda tmp, n=n: shutil.copyfile(exp / n, tmp)) for n in kept}
    return trials, history if history is not None else pd.DataFrame(columns=["trial_id", "step"]), written


def report_at(exp: str | storage.Folder, fmt: str = "md", which: str = "final",
              out: str | Path | None = None) -> dict[str, Path]:
    """build_report for a local folder or a URI. For a URI: the report's inputs are
    copied into the local cache folder (storage.report_inputs), the report is built there, and every file it
    wrote (and hpo's optuna.db) is uploaded to exp. With `out` (a local folder) the report is written there
    and nothing is uploaded. Returns {name: local path}; AggregateError as build_report, StorageError when
    the bucket cannot be read or written."""
    exp, cache = storage.report_inputs(exp)
    if isinstance(exp, Path):
        return build_report(exp, fmt, which, out)
    try:
        paths = build_report(cache, fmt, which, out)
    except AggregateError as e:  # name the URI, not the cache folder
        raise AggregateError(str(e).replace(str(cache), str(exp))) from None
    if out is not None:
        return paths
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
    p.add_argument("--out", metavar="FOLDER", help="write the report into FOLDER (created) and leave the run's "
                                                   "folder as it is; one run's folder only, not a results root")
    args = p.parse_args(argv)
    if secret_in_uri(args.results_dir):  # it would name the cache folder and be printed
        print(f"error: {redact(args.results_dir)} carries credentials in the URI; pass it without them and "
              f"{storage.where_keys_go(args.results_dir)}", file=sys.stderr)
        return 2
    try:
        if is_results_root(args.results_dir):  # a results root: its index.html, one row per sweep
            if args.out:
                print(f"error: --out takes one run's folder; {args.results_dir} is a results root, whose "
                      f"index.html links the pages beside it", file=sys.stderr)
                return 2
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
        paths = report_at(args.results_dir, args.format, args.which, args.out)
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
    if args.out:
        print(f"report written to: {Path(args.out).expanduser().resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
