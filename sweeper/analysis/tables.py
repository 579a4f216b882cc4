"""A sweep's table shaped like the paper's: one line per cell (table_frame), its text and its notes.

Rows are methods and variants ("MT", "MT + VD (entmin 0.1)", "MT + MUR (r 1)": the sweep's `rows`
keys plus every other knob in which the rows differ), columns are data sets and label counts (the
sweep's `cols` keys), cells `mean ± std` over seeds (sample std, ddof=1). Beside them:
  - the paper's published value, and Δ = ours − paper only where the run is configured as the paper
    preset's own row for that cell (sweeper/analysis/paper_results.py: `paper_value`, `protocol_reason`);
    otherwise the reason, naming the fields that differ;
  - in a table with such a Δ, each cell's best test error (best_test: the minimum over evaluations, selected
    on the test set, the authors' kind of number) beside its value, with its own Δ (with_best_test);
  - with a baseline row (Sweep.baseline), each other cell's paired difference from its baseline
    cell over the seeds both ran, with its 95% t-interval (sweeper/analysis/stats.py), `*` where it excludes 0:
    "4.67 ± 0.80 · −1.90 [−2.80, −1.00]*".
The labels are sweeper/analysis/labels.py, the layout sweeper/analysis/layout.py, the paired differences
sweeper/analysis/paired.py, the Markdown / LaTeX / CSV sweeper/analysis/render.py, a search's ranking sweeper/analysis/ranking.py.

    python -m sweeper.report results/table_cifar-20260101-120000 --format latex   # writes table.{md,tex,csv}
    pytest tests/test_report.py -q
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sweeper.analysis.aggregate import MEDIAN_LAST, SELECT_METRIC, AggregateError, config_key, group_keys, summarize
from sweeper.analysis.labels import BEST_HEADER, DATASET_NAMES, WHICH_TEXT, col_label, metric_name, py_value, sort_key
from sweeper.analysis.layout import DIFF_COLS, PLAN_COLS, STAT_COLS, cell_configs, layout_keys, paper_error, row_labels
from sweeper.analysis.paired import LEVEL, baseline_diffs
from sweeper.analysis.paper_results import protocol_reason
from sweeper.analysis.stats import excludes_zero
from trainables.registry import METHODS

# the classical baseline every deep row is compared with in classical_note (the one method without a network)
CLASSICAL = next(m.name for m in METHODS.values() if not m.network)
# A paper table's best_test statistic beside each cell's own value: mean, std and n over seeds of each trial's
# minimum test error, and best_test_mean - paper_mean where delta is set (with_best_test).
BEST_COLS = ("best_test_mean", "best_test_std", "best_test_n", "best_test_delta")


# ---------------------------------------------------------------- the table

def table_frame(summary: pd.DataFrame, rows=("method", "vd", "mur"), cols=(), paper=paper_error,
                protocol=protocol_reason, trials: pd.DataFrame | None = None) -> pd.DataFrame:
    """The tidy table: one line per cell with row/col labels, ours (mean, std, n, counts), the paper's
    (paper_mean, paper_std), delta = mean - paper_mean where the run is the paper preset's own row,
    else NaN with the reason in paper_note, and the DIFF_COLS of baseline_diffs when the summary has
    them (the baseline row's label then ends in "(baseline)"). `paper(cfg) -> (mean, std) | None` and
    `protocol(cfg) -> reason | None` get the cell's full config (TrainConfig defaults for keys the
    sweep did not set). With the summary's `trials`, a table with a delta also gets BEST_COLS
    (with_best_test)."""
    row_keys, col_keys = layout_keys(summary, rows, cols)
    labels = row_labels(summary, rows, cols)
    has_diff = "diff_vs_baseline" in summary.columns
    if has_diff:  # a row is the baseline row if one of its cells is a baseline cell
        base_rows = set(labels[summary["is_baseline"].astype(bool)])
        labels = labels.map(lambda s: f"{s} (baseline)" if s in base_rows else s)
    cfgs = dict(zip(summary.index, cell_configs(summary)))

    def rank(i, ks):
        return tuple(sort_key(k, summary.at[i, k]) for k in ks)

    order = sorted(summary.index, key=lambda i: rank(i, row_keys + col_keys))
    col_order = {c: j for j, c in enumerate(sorted({rank(i, col_keys) for i in summary.index}))}
    out = []
    for i in order:
        r, cfg = summary.loc[i], cfgs[i]
        pv = paper(cfg) if paper is not None else None
        pm, ps = (pv if pv is not None else (math.nan, None))
        reason = protocol(cfg) if pv is not None and protocol is not None else None
        out.append({"row": labels[i],
                    "col": col_label({k: cfg[k] for k in col_keys}) or metric_name(r["metric"]),
                    "col_order": col_order[rank(i, col_keys)],
                    **{k: cfg[k] for k in row_keys + col_keys},
                    **{c: r[c] for c in STAT_COLS},
                    "paper_mean": pm, "paper_std": math.nan if ps is None else ps,
                    "delta": math.nan if reason else r["mean"] - pm, "paper_note": reason or "",
                    **({c: r[c] for c in DIFF_COLS} if has_diff else {}),
                    **({"verdict": r["verdict"]} if "verdict" in summary.columns else {}),  # --seeds auto
                    **{c: r[c] for c in PLAN_COLS if c in summary.columns}})  # planned against present
    table = pd.DataFrame(out)
    dup = table[table.duplicated(["row", "col"], keep=False)] if len(table) else table
    if len(dup):
        raise AggregateError(f"two configs map to the table cell {dup.iloc[0]['row']!r} / {dup.iloc[0]['col']!r}; "
                             f"add the key that tells them apart to the sweep's rows or cols")
    return with_best_test(table, summary.loc[order], trials)


def with_best_test(table: pd.DataFrame, summary: pd.DataFrame, trials: pd.DataFrame | None) -> pd.DataFrame:
    """`table` with BEST_COLS where it compares a test error with the paper (some delta is set), so the
    authors' kind of number (best_test) and its Δ stand beside ours; `summary` holds the table's cells in
    its row order. Unchanged without trials, best_test_error values or a delta, or when it is best_test."""
    compares = bool(len(table)) and table["delta"].notna().any() and set(table["metric"]) == {"test_error"}
    if trials is None or not compares or "best_test" in set(table["which"]) or "best_test_error" not in trials.columns:
        return table
    keys = group_keys(trials)
    best = {config_key(r, keys): r for _, r in summarize(trials, "test_error", "best_test").iterrows()}
    cells = [best.get(config_key(r, keys)) for _, r in summary.iterrows()]  # aligned with the table's rows
    out = table.assign(best_test_mean=[math.nan if c is None else c["mean"] for c in cells],
                       best_test_std=[math.nan if c is None else c["std"] for c in cells],
                       best_test_n=[0 if c is None else int(c["n"]) for c in cells])
    if not out["best_test_mean"].notna().any():
        return table
    return out.assign(best_test_delta=(out["best_test_mean"] - out["paper_mean"]).where(out["delta"].notna()))


def column_order(table: pd.DataFrame) -> list[str]:
    """The table's column labels in its order (table_frame's col_order)."""
    return list(dict.fromkeys(table.sort_values("col_order", kind="stable")["col"])) if len(table) else []


def signed(x: float) -> str:
    """+1.90 / −1.90 (a true minus sign, as in print)."""
    return f"{x:+.2f}".replace("-", "−")


def mean_std(mean: float, std: float, n: int) -> str:
    """"15.61 ± 0.20"; "15.61" for one seed (no spread), "—" for none."""
    return "—" if n == 0 else f"{mean:.2f}" if n == 1 else f"{mean:.2f} ± {std:.2f}"


def cell_text(r) -> str:
    """"15.61 ± 0.20", with the failed / diverged / unfinished trials named beside it, then the paired
    difference from the baseline cell where there is one: "15.61 ± 0.20 · −1.90 [−2.80, −1.00]*"."""
    return value_text(r) + diff_text(r)


def value_text(r) -> str:
    """A cell's own value: "15.61 ± 0.20", "15.61 ± 0.20 (n=3, 1 failed)", "15.61 (n=1)"."""
    n = int(r["n"])
    text = mean_std(r["mean"], r["std"], n)
    extra = [f"{int(r[c])} {w}" for c, w in (("n_failed", "failed"), ("n_diverged", "diverged"),
                                             ("n_incomplete", "unfinished")) if r[c]]
    missing = pd.to_numeric(r.get("n_missing", 0) if hasattr(r, "get") else 0, errors="coerce")  # planned.py
    if missing > 0:  # NaN (a table from before plans were kept) is not
        extra.append(f"{int(missing)} missing")
    if extra or n == 1:
        text += f" (n={n}" + "".join(f", {e}" for e in extra) + ")"
    return text


def diff_text(r) -> str:
    """" · −1.90 [−2.80, −1.00]*" (paired difference vs the baseline, its t-interval, * if it excludes 0),
    " · −1.90 (1 pair)", " · −1.90 (equal on every pair: ...)", " · no paired seeds", each followed by " vs Pi" where the cell was compared with
    its own method's row (baseline_within); "" for a baseline cell or a cell without a baseline."""
    label = r.get("baseline") if hasattr(r, "get") else None
    if not isinstance(label, str) or not label or bool(r.get("is_baseline", False)):
        return ""
    vs = f" vs {label}" if bool(r.get("within_baseline", False)) else ""  # its own method's row
    k = int(r["n_paired"])
    if k == 0:
        return " · no paired seeds" + vs
    if k == 1:
        return f" · {signed(r['diff_vs_baseline'])} (1 pair)" + vs
    lo, hi = r["diff_ci_low"], r["diff_ci_high"]
    star = "*" if excludes_zero(lo, hi) else ""
    text = (f" · {signed(r['diff_vs_baseline'])} [{signed(lo)}, {signed(hi)}]{star}" if math.isfinite(lo)
            else f" · {signed(r['diff_vs_baseline'])} (equal on every pair: no spread, no interval)")  # stats.no_spread
    verdict = r.get("verdict") if hasattr(r, "get") else None  # --seeds auto: "differs at 5 seeds", ...
    return text + (f" ({k} pairs)" if k != int(r["n"]) else "") + vs + (f" ({verdict})" if verdict else "")


def table_notes(table: pd.DataFrame, extra=()) -> list[str]:
    metric, which = table["metric"].iloc[0], table["which"].iloc[0]
    notes = [f"Cells: mean ± sample std (ddof=1) over n finished seeds of the {which} {metric} "
             f"({WHICH_TEXT.get(which, which)}).",
             "Failed, diverged and unfinished trials are never averaged in; a cell names them."]
    if "is_baseline" in table.columns and table["is_baseline"].astype(bool).any():
        base = ", ".join(dict.fromkeys(r.removesuffix(" (baseline)")
                                       for r in table.loc[table["is_baseline"].astype(bool), "row"]))
        notes.append(f"Baseline row: {base}, marked (baseline). After · in every other cell: its paired "
                     f"difference from the baseline cell (ours − baseline, over the seeds both finished), then "
                     f"[the {LEVEL:.0%} t-interval of that mean over the n paired seeds]; * = the interval "
                     f"excludes 0; (k pairs) where fewer than the cell's n seeds paired.")
    if "within_baseline" in table.columns and table["within_baseline"].fillna(False).astype(bool).any():
        notes.append("A difference ending in \"vs X\" is from X, the same method without the variant (so its "
                     "interval isolates the variant's knobs), or the row the sweep names for that method; each "
                     "other method's own base row is compared with the baseline row.")
    has_paper = table["paper_mean"].notna().any()
    if has_paper and metric == "sensitivity_mean":
        notes.append("paper: Table 3 (CIFAR-10, 1000 labels), whose ± is the spread over test points, not "
                     "over seeds (compare it with our sensitivity_std); Δ = ours − paper.")
    elif has_paper:
        notes.append("paper: the authors' published value (their own runs; Tables 1-2 or the text); "
                     "Δ = ours − paper. The paper does not say which number it reports; the authors' code keeps the "
                     "best test error seen during training (--which best_test reads ours that way, and is as "
                     "optimistic).")
    if has_paper and "paper_note" in table.columns and (table["paper_note"].fillna("") != "").any():
        notes.append("no Δ: the run is not configured as the paper preset's own row for that cell (it names the "
                     "first fields that differ, ours then the paper row's), so it is not compared with the paper's "
                     "value.")
    if "best_test_mean" in table.columns:
        notes.append(f"{BEST_HEADER}: mean ± sample std over seeds of each trial's minimum test error over its "
                     f"evaluations ({WHICH_TEXT['best_test']}), beside the {which} value the cell shows; "
                     f"Δ best test = that mean − paper, where Δ is. --which best_test tabulates it.")
    notes += other_papers_notes(table)
    return notes + list(extra)


def classical_note(summary: pd.DataFrame, trials: pd.DataFrame, rows=("method", "vd", "mur"), cols=(),
                   level: float = LEVEL) -> list[str]:
    """One note saying plainly which rows beat the classical baseline (method labelspreading) and which do
    not: each row's paired difference from the LabelSpreading cell of its column over the common seeds,
    'better' / 'worse' where the t-interval excludes 0, else 'no clear difference'. [] without that row."""
    if "method" not in summary.columns or not (summary["method"] == CLASSICAL).any():
        return []
    diffs, _ = baseline_diffs(summary, trials, {"method": CLASSICAL}, rows, cols, level)
    labels = row_labels(summary, rows, cols)
    _, col_keys = layout_keys(summary, rows, cols)
    many_cols = len({tuple(py_value(summary.at[i, k]) for k in col_keys) for i in summary.index}) > 1
    groups = {"better": [], "no clear difference": [], "worse": []}
    for i, r in diffs.iterrows():
        if r["is_baseline"] or not np.isfinite(r["diff_ci_low"]):
            continue
        where = f" ({col_label({k: py_value(r[k]) for k in col_keys})})" if many_cols else ""
        text = (f"{labels[i]}{where} {r['diff_vs_baseline']:+.2f} "
                f"[{r['diff_ci_low']:+.2f}, {r['diff_ci_high']:+.2f}]")
        kind = "better" if r["diff_ci_high"] < 0 else "worse" if r["diff_ci_low"] > 0 else "no clear difference"
        groups[kind].append(text)
    parts = [f"{k}: {'; '.join(v)}" for k, v in groups.items() if v]
    if not parts:
        return []
    return [f"Against LabelSpreading (the classical baseline; paired difference over seeds, {level:.0%} "
            f"t-interval, lower is better) — " + " — ".join(parts) + "."]


def test_beside_note(trials: pd.DataFrame, baseline: dict | None, rows=("method", "vd", "mur"), cols=(),
                     which: str = "final", within=(), baseline_for=None) -> list[str]:
    """For a table of validation error (a choice, e.g. --confirm): the same cells' test error with the same
    paired differences, in one note, marked as not used for the choice. [] without test errors."""
    if "final_test_error" not in trials.columns:
        return []
    test, _ = baseline_diffs(summarize(trials, "test_error", which), trials, baseline, rows, cols,
                             within=within, baseline_for=baseline_for)
    labels = row_labels(test, rows, cols)
    cells = [f"{labels[i]} {r['mean']:.2f}" + diff_text(r) for i, r in test.iterrows() if r["n"] > 0]
    return ["Test error (%), beside and not used for the choice: " + "; ".join(cells) + "."] if cells else []


def other_papers_notes(table: pd.DataFrame) -> list[str]:
    """Other works' published errors for the data sets and label counts the table shows, where the paper
    has none of its own (MNIST): each with its source, never compared cell by cell (their networks and
    protocols differ from ours)."""
    from sweeper.analysis.paper_results import OTHER_PAPERS

    if not {"dataset", "num_labels"} <= set(table.columns) or table["metric"].iloc[0] != "test_error":
        return []
    shown = {(r["dataset"], int(r["num_labels"])) for _, r in table[["dataset", "num_labels"]].iterrows()}
    out = []
    for ds, n in sorted(shown):
        rows = [r for r in OTHER_PAPERS if (r.dataset, r.num_labels) == (ds, n)]
        if rows:
            items = "; ".join(f"{r.model} {r.mean:.2f}" + ("" if r.std is None else f" ± {r.std:.2f}")
                              + f" ({r.source}{'' if r.checked else ', not checked'})" for r in rows)
            out.append(f"Other papers' {DATASET_NAMES.get(ds, ds)}-{n} test errors (%), their own networks and "
                       f"protocols, not comparable cell by cell: {items}. 'not checked': transcribed, not yet "
                       f"compared with the paper (sweeper/analysis/paper_results.py).")
    return out


def _count_span(trials: pd.DataFrame, col: str) -> str:
    """The counts in column `col` of the trials: "k", "lo-hi" where they differ, or "no finished trial"."""
    v = sorted({int(x) for x in pd.to_numeric(trials.get(col, pd.Series(dtype=float)), errors="coerce").dropna()})
    return "no finished trial" if not v else f"{v[0]}" if len(v) == 1 else f"{v[0]}-{v[-1]}"


def fixmatch_note(trials: pd.DataFrame, rows=("method", "vd", "mur"), cols=()) -> list[str]:
    """FixMatch rows: FixMatch's own statistic (each trial's median test error over its last MEDIAN_LAST
    evaluations, as its scripts/extract_accuracy.py reports) beside the final error, the number of
    evaluations behind it, and which labeled splits FixMatch's ± covers against this table's. [] without
    a FixMatch trial."""
    reporting = [m.name for m in METHODS.values() if m.median_last]  # FixMatch
    if "method" not in trials.columns or not trials["method"].isin(reporting).any():
        return []
    fm = trials[trials["method"].isin(reporting)]
    final, med = summarize(fm, "test_error", "final"), summarize(fm, "test_error", "median_last")
    labels = row_labels(final, rows, cols)
    _, col_keys = layout_keys(final, rows, cols)
    many_cols = len({tuple(py_value(final.at[i, k]) for k in col_keys) for i in final.index}) > 1
    show = lambda r: f"{r['mean']:.2f}" + (f" ± {r['std']:.2f}" if np.isfinite(r["std"]) else "")
    cells = []
    for i in final.index:  # summarize groups both by the same keys, in the same order
        where = f" ({col_label({k: py_value(final.at[i, k]) for k in col_keys})})" if many_cols else ""
        cells.append(f"{labels[i]}{where} {show(med.loc[i])} (final {show(final.loc[i])})")
    done = fm[fm["status"] == "finished"]
    n_in, n_of = (_count_span(done, col) for col in ("medlast_n", "medlast_of"))
    every = sorted({int(v) for v in done["eval_every"]}) if "eval_every" in done.columns else []
    period = f", one every {every[0]} steps" if len(every) == 1 else ""
    ls = pd.to_numeric(fm["label_seed"], errors="coerce") if "label_seed" in fm.columns else pd.Series([-1.0])
    ours = ("over seeds on one labeled split" if (ls >= 0).all() else "over seeds, each on its own labeled split")
    return [f"FixMatch's statistic (its scripts/extract_accuracy.py): each trial's median test error over its last "
            f"{MEDIAN_LAST} evaluations, here {n_in} (of {n_of} evaluations{period}), mean ± std over seeds, "
            f"the final error "
            f"beside it: " + "; ".join(cells) + f". `--which median_last` tabulates it. FixMatch's published ± is "
            f"over five labeled splits; this table's is {ours}, so a Δ against the paper's FixMatch number sets "
            f"this mean against a five-split one."]


def subset_note(trials: pd.DataFrame) -> str:
    """Which labeled subset the seeds trained on: one fixed subset (label_seed >= 0, the authors' rule) or a
    new one per seed (label_seed = -1; trials without the key ran before it existed and drew per seed),
    then how many labels each class got (label_rule; trials without the key drew balanced subsets)."""
    ls = pd.to_numeric(trials["label_seed"], errors="coerce").fillna(-1) if "label_seed" in trials.columns \
        else pd.Series(-1, index=trials.index)
    fixed = ", ".join(str(v) for v in sorted({int(v) for v in ls if v >= 0}))
    if fixed and (ls < 0).any():
        which = (f"Labeled subset: fixed (label_seed={fixed}) in some trials, drawn anew for each seed "
                 f"(label_seed=-1) in the others, whose ± also covers which images are labeled.")
    elif fixed:
        walk = "label_pick" in trials.columns and set(trials["label_pick"].fillna("per_class")) == {"shuffle_walk"}
        whose = "the authors' labeled images (label_pick=shuffle_walk)" if walk else \
            "drawn per class (label_pick=per_class), not the authors' images"
        which = (f"Labeled subset: the same for every seed (label_seed={fixed}, the authors' rule), {whose}, so a "
                 f"cell's ± covers training randomness only, as the paper's does.")
    else:
        which = ("Labeled subset: drawn anew for each seed (label_seed=-1), so a cell's ± and its paired interval "
                 "also cover which images are labeled.")
    return f"{which} {RULE_TEXT[_label_rule(trials)]}"


RULE_TEXT = {
    "balanced": "Labels per class: balanced (label_rule=balanced, num_labels / classes each), which keeps a "
                "comparison about the method rather than about a class short of labels.",
    "frequency": "Labels per class: in proportion to the training set's class frequencies, the leftovers one "
                 "each to the lowest class ids (label_rule=frequency, the authors' rule).",
    "mixed": "Labels per class: balanced in some trials, by class frequency (the authors' rule) in others.",
}


def _label_rule(trials: pd.DataFrame) -> str:
    rules = set(trials["label_rule"].fillna("balanced")) if "label_rule" in trials.columns else {"balanced"}
    return rules.pop() if len(rules) == 1 else "mixed"


def val_note(trials: pd.DataFrame) -> str | None:
    """A note when trials never reported a finite val_error (val_size=0: no validation split):
    their validation-based numbers are empty (NaN), not made up. None when every trial with a report
    reported it at least once (bestval_step is set)."""
    reported = trials[trials["n_reports"] > 0] if "n_reports" in trials.columns else trials
    have = np.isfinite(pd.to_numeric(reported["bestval_step"], errors="coerce")) \
        if "bestval_step" in reported.columns else pd.Series(False, index=reported.index)
    missing = int((~have).sum())
    if not missing:
        return None
    who = "No trial" if missing == len(reported) else f"{missing} of {len(reported)} trials"
    return (f"{who} reported {SELECT_METRIC} (val_size=0: no validation split): their validation-based "
            f"numbers (best_val cells, the ranking) are empty; run with val_size > 0 to get them.")
