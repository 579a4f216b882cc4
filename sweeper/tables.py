"""Tables shaped like the paper's: row and column labels, the layout, cell text, Markdown / LaTeX / CSV.

Rows are methods and variants ("MT", "MT + VD (entmin 0.1)", "MT + MUR (r 1)": the sweep's `rows`
keys plus every other knob in which the rows differ), columns are data sets and label counts (the
sweep's `cols` keys), cells `mean ± std` over seeds (sample std, ddof=1). Beside them:
  - the paper's published value, and Δ = ours − paper only where the run is configured as the paper
    preset's own row for that cell (sweeper/paper_results.py: `paper_value`, `protocol_reason`);
    otherwise the reason, naming the fields that differ;
  - with a baseline row (Sweep.baseline), each other cell's paired difference from its baseline
    cell over the seeds both ran, with its 95% t-interval (sweeper/stats.py), `*` where it excludes 0:
    "4.67 ± 0.80 · −1.90 [−2.80, −1.00]*".
A search (hpo) also gets its trials ranked by validation error (`ranking_frame`).

    python -m sweeper.report results/table_cifar-20260101-120000 --format latex   # writes table.{md,tex,csv}
    pytest tests/test_report.py -q
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from sweeper.aggregate import (SELECT_METRIC, AggregateError, atomic_write, config_key, group_keys, seed_values, summarize,
                               train_config_defaults)
from sweeper.paper_results import SENSITIVITY_DATA, paper_sensitivity, paper_value, protocol_reason
from sweeper.stats import excludes_zero, paired_diff
from trainables.config import applies

STAT_COLS = ("metric", "which", "mean", "std", "n", "n_failed", "n_diverged", "n_incomplete", "n_trials", "seeds")
# Columns baseline_diffs adds to a summary: ours - baseline (percent points for errors), its t-interval,
# the label of the row it is compared with, the number of seeds paired, whether the cell is itself a
# baseline cell, and whether it was compared with its own method's row (Sweep.baseline_within).
DIFF_COLS = ("diff_vs_baseline", "diff_ci_low", "diff_ci_high", "baseline", "n_paired", "is_baseline",
             "within_baseline")
LEVEL = 0.95  # confidence level of the paired t-interval
METHOD_NAMES = {"supervised": "Supervised", "pi": "Π", "mt": "MT", "ict": "ICT", "mut": "MUT", "fixmatch": "FM",
                "vat": "VAT", "labelspreading": "LabelSpreading"}
MUR_NAMES = {"direct": "MUR", "pga": "MUR (PGA)", "ga": "MUR (GA)", "random": "RR", "vat": "VAT"}
DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "svhn": "SVHN", "digits": "digits", "mnist": "MNIST"}
KEY_NAMES = {"mur_radius": "r", "mur_step_size": "α", "mur_steps": "s", "kl_coef": "KL coef",
             "num_labels": "labels", "entmin_coef": "entmin", "bn_clean_pass": "clean BN pass",
             "cons_coef": "λ1", "mur_coef": "λ3"}
NAME_KEYS = ("method", "vd", "mur")  # form a row's name ("MT + VD + MUR"); every other key goes in parentheses
ORDER = {"method": ("supervised", "labelspreading", "pi", "mt", "ict", "mut", "fixmatch", "vat"),
         "mur": ("none", "direct", "pga", "ga", "random", "vat"),
         "dataset": ("digits", "mnist", "svhn", "cifar10", "cifar100")}
# What each point of a trial's curve means (notes), and the warning a title carries.
WHICH_TEXT = {"final": "final = at the last evaluation, the honest default",
              "best_val": "best_val = at the evaluation with the lowest validation error (a split held out of "
                          "the training set): the stopping step is selected on validation, the test error "
                          "reported there",
              "best_test": "best_test = the minimum over evaluations: selected on the test set, optimistic; "
                           "what the paper's authors kept"}
WHICH_TITLE = {"final": "", "best_val": " [best_val: stopping step selected on the validation split]",
               "best_test": " [best_test: selected on the test set, optimistic; what the paper's authors kept]"}


# ---------------------------------------------------------------- labels

def _value(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, float, np.integer, np.floating)):
        return f"{float(v):g}"
    return str(v)


def _short(key: str, v) -> str:
    """"r 10", "entmin 0.1", "CIFAR-10": a key and its value as a row label's parentheses show them."""
    if key == "dataset":
        return DATASET_NAMES.get(v, str(v))
    if isinstance(v, (bool, np.bool_)):
        return f"{KEY_NAMES.get(key, key)} {'on' if v else 'off'}"
    return f"{KEY_NAMES.get(key, key)} {_value(v)}"


def row_label(cfg: dict) -> str:
    """"MT + VD + MUR" from method/vd/mur, every other key in parentheses by its short name:
    "MT + MUR (r 1, entmin 0)"; "base" if method/vd/mur name nothing and no other key is given."""
    parts = []
    if "method" in cfg:
        parts.append(METHOD_NAMES.get(cfg["method"], str(cfg["method"])))
    if "vd" in cfg and bool(cfg["vd"]):
        parts.append("VD")
    if "mur" in cfg and cfg["mur"] != "none":
        parts.append(MUR_NAMES.get(cfg["mur"], str(cfg["mur"])))
    main = " + ".join(parts)
    others = ", ".join(_short(k, v) for k, v in cfg.items() if k not in NAME_KEYS)
    if main and others:
        return f"{main} ({others})"
    return main or others or ("base" if cfg else "all")


def col_label(cfg: dict) -> str:
    """"CIFAR-10 1000" from dataset/num_labels, then other keys as "r=10"."""
    parts = []
    if "dataset" in cfg:
        parts.append(DATASET_NAMES.get(cfg["dataset"], str(cfg["dataset"])))
    if "num_labels" in cfg:
        parts.append(_value(cfg["num_labels"]) if "dataset" in cfg else f"{_value(cfg['num_labels'])} labels")
    parts += [f"{KEY_NAMES.get(k, k)}={_value(v)}" for k, v in cfg.items() if k not in ("dataset", "num_labels")]
    return " ".join(parts)


def _sort_key(key: str, v):
    if key in ORDER and v in ORDER[key]:
        return (0, ORDER[key].index(v), "")
    if isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating)):
        return (2, 0, "") if isinstance(v, float) and math.isnan(v) else (0, float(v), "")
    return (1, 0, str(v))


def _metric_name(metric: str) -> str:
    return {"test_error": "test error (%)", "val_error": "validation error (%)",
            "sensitivity_mean": "sensitivity"}.get(metric, metric)


def _py(v):
    return v.item() if isinstance(v, np.generic) else v


# ---------------------------------------------------------------- the layout

def config_keys(summary: pd.DataFrame) -> list[str]:
    """The config keys among a summary's columns (not its statistics nor the baseline comparison)."""
    return [c for c in summary.columns if c not in STAT_COLS and c not in DIFF_COLS]


def layout_keys(summary: pd.DataFrame, rows, cols) -> tuple[list[str], list[str]]:
    """Row and column keys. Columns: the sweep's `cols`. Rows: the sweep's `rows` (those beyond
    method / vd / mur only where they take more than one value), then every other
    config key that takes more than one value across the summary, so that the labels name each knob
    in which the rows differ, one that changes in lockstep with another too (entmin 0 -> 0.1 exactly
    when VD turns on). A key constant within every column (it follows the columns, e.g. r = 10 on
    CIFAR-10 and 20 on CIFAR-100) does not tell rows apart and stays out."""
    keys = config_keys(summary)
    # a `rows` key beyond method/vd/mur that one value fills everywhere tells no rows apart: left out
    row_keys = [k for k in rows if k in keys and (k in NAME_KEYS or summary[k].nunique(dropna=False) > 1)]
    col_keys = [k for k in cols if k in keys and k not in row_keys]
    for k in keys:
        if k in row_keys or k in col_keys or summary[k].nunique(dropna=False) < 2:
            continue
        if col_keys and summary.groupby(col_keys, dropna=False)[k].nunique(dropna=False).max() < 2:
            continue  # follows the columns
        row_keys.append(k)
    return row_keys, col_keys


def _cell_configs(summary: pd.DataFrame) -> list[dict]:
    """Each summary row's full config: TrainConfig defaults for the keys the sweep did not set."""
    defaults = train_config_defaults()
    keys = config_keys(summary)
    return [{**defaults, **{k: _py(summary.at[i, k]) for k in keys}} for i in summary.index]


def row_labels(summary: pd.DataFrame, rows=("method", "vd", "mur"), cols=()) -> pd.Series:
    """Each summary row's table row label (layout_keys; method / vd / mur name the row even where the
    sweep holds them fixed: "MT + MUR", not "MUR"), aligned with the summary's index. A key that does
    not apply to a row (`applies`: LabelSpreading's α, a plain MT row's KL coefficient) is left out of
    its label, and floats show 3 significant digits, each unless that would give two different rows
    one label."""
    row_keys, col_keys = layout_keys(summary, rows, cols)
    named = [k for k in NAME_KEYS if k in train_config_defaults() and k not in row_keys + col_keys]
    cfgs = _cell_configs(summary)

    def labels(keep, value=lambda v: v) -> list[str]:
        return [row_label({k: value(cfg[k]) for k in named + row_keys if keep(k, cfg)}) for cfg in cfgs]

    full = labels(lambda k, cfg: True)
    # shortest first: drop what does nothing for a row and show floats to 3 significant digits, then
    # each alone; the first that keeps every row's label distinct
    for keep, value in ((applies, _sig3), (applies, lambda v: v), (lambda k, cfg: True, _sig3)):
        short = labels(keep, value)
        if len(set(short)) == len(set(full)):
            return pd.Series(short, index=summary.index, dtype=object)
    return pd.Series(full, index=summary.index, dtype=object)


def _sig3(v):
    """A float to 3 significant digits (7.53708 -> 7.54); anything else as it is."""
    if isinstance(v, (float, np.floating)) and math.isfinite(v):
        return float(f"{float(v):.3g}")
    return v


# ---------------------------------------------------------------- the paper's values

def paper_error(cfg: dict):
    """The authors' published error for a full config dict, or None."""
    return paper_value(cfg["method"], cfg["vd"], cfg["mur"], cfg["dataset"], cfg["num_labels"],
                       mur_radius=cfg.get("mur_radius"), kl_coef=cfg.get("kl_coef"),
                       mur_step_size=cfg.get("mur_step_size"), mur_steps=cfg.get("mur_steps"))


def paper_sens(cfg: dict):
    """Table 3's sensitivity for a full config dict (CIFAR-10, 1000 labels only), or None."""
    if (cfg["dataset"], int(cfg["num_labels"])) != SENSITIVITY_DATA or paper_error(cfg) is None:
        return None  # Table 3 measured the Table 1 runs: same settings (r, KL coefficient) required
    return paper_sensitivity(cfg["method"], cfg["vd"], cfg["mur"])


# ---------------------------------------------------------------- paired comparison with the baseline row

def baseline_diffs(summary: pd.DataFrame, trials: pd.DataFrame, baseline: dict | None,
                   rows=("method", "vd", "mur"), cols=(), level: float = LEVEL,
                   within: tuple[str, ...] = (), baseline_for: dict | None = None) -> tuple[pd.DataFrame, list[str]]:
    """The summary with DIFF_COLS added, and notes on what could not be compared; unchanged without a baseline.

    baseline: {config key: value} naming the baseline row (Sweep.baseline), e.g. {"method": "mt",
    "vd": False, "mur": "none"}; a key the trials do not set is compared at its TrainConfig default.
    A cell's baseline cell is the summary row that matches `baseline` in the cell's column (equal
    column keys); if the baseline row has one cell only (MT without MUR in a sweep whose columns are
    r), that cell is the baseline of every column; several candidates in a column are narrowed to
    the one that agrees with the cell on the sweep's other `rows` keys (ICT + VD vs ICT). The cell
    and its baseline are paired by seed (finished trials with a finite value: `seed_values`):
    diff_vs_baseline = mean over pairs of (cell - baseline) in the summary's metric, diff_ci_low /
    high its `level` t-interval (NaN below 2 pairs), n_paired the pairs. Baseline cells themselves
    have is_baseline True and no difference.

    within (Sweep.baseline_within), e.g. ("method",): a cell keeps its own value of these keys when
    its baseline is looked for, so Pi + VD is compared with Pi (the baseline's other keys, the cell's
    method) and only the variant changes; a cell that is itself its method's base row (Pi), or whose
    method has none, is compared with the baseline row (MT), or, where baseline_for (Sweep.baseline_for)
    names a row for its method, with that row (VAT + EntMin with MUT + MUR, the paper's comparison).
    within_baseline marks the cells compared with a row other than the baseline row.
    """
    if not baseline:
        return summary, []
    out = summary.copy()
    out["diff_vs_baseline"] = out["diff_ci_low"] = out["diff_ci_high"] = math.nan
    out["baseline"] = None
    out["n_paired"] = 0
    out["is_baseline"] = False
    out["within_baseline"] = False
    if not len(out):
        return out, []
    defaults = train_config_defaults()
    keys = config_keys(summary)
    unknown = sorted(k for k in baseline if k not in keys and k not in defaults)
    if unknown:
        return out, [f"No differences: the sweep's baseline {baseline} names {unknown}, which are not config keys; "
                     f"fix Sweep.baseline (in sweep.json for this folder) to the config of one table row."]
    cfgs = _cell_configs(summary)
    is_base = [all(_same(cfg[k], v) for k, v in baseline.items()) for cfg in cfgs]
    if not any(is_base):
        return out, [f"No differences: no row of this table matches the sweep's baseline {baseline}; "
                     f"fix Sweep.baseline (in sweep.json for this folder) to the config of one table row."]
    labels = row_labels(summary, rows, cols)
    _, col_keys = layout_keys(summary, rows, cols)
    idx = list(summary.index)
    cfg_of = dict(zip(idx, cfgs))
    matching = lambda target: [j for j in idx if all(_same(cfg_of[j][k], v) for k, v in target.items())]
    base = [j for j, b in zip(idx, is_base) if b]
    col_of = {i: tuple(cfg[k] for k in col_keys) for i, cfg in zip(idx, cfgs)}
    one_cell = len({col_of[j] for j in base}) == 1

    def pick(i: int, target: dict, pool: list) -> list:
        """The cells of `pool` that are cell i's baseline: same column (or the pool's only column),
        narrowed to those agreeing with cell i on the `rows` keys that `target` leaves open."""
        cand = [j for j in pool if col_of[j] == col_of[i]] or (pool if len({col_of[j] for j in pool}) == 1 else [])
        if len(cand) > 1:
            cand = [j for j in cand if all(_same(cfg_of[j][k], cfg_of[i][k]) for k in rows if k not in target)]
        return cand

    values = seed_values(trials, summary["metric"].iloc[0], summary["which"].iloc[0])
    gkeys = group_keys(trials)
    by_seed = {i: values.get(config_key(summary.loc[i], gkeys), {}) for i in idx}
    ambiguous = []
    for pos, (i, cfg) in enumerate(zip(idx, cfgs)):
        if is_base[pos]:
            out.loc[i, ["baseline", "is_baseline"]] = [labels[i], True]
            continue
        cand = []
        own = {**baseline, **{k: cfg[k] for k in within if k in cfg}}  # Pi + VD -> Pi
        if within and not all(_same(cfg[k], v) for k, v in own.items()):
            cand = pick(i, own, matching(own))
        named = (baseline_for or {}).get(cfg.get("method"))
        if not cand and named:  # the row the sweep names for this method's base row
            cand = pick(i, named, [j for j in matching(named) if j != i])
        if not cand:  # no own-method row (or the cell is it): the baseline row
            cand = pick(i, baseline, base)
        if len(cand) > 1:
            ambiguous.append(f"{labels[i]} ({', '.join(labels[j] for j in cand)})")
        if len(cand) != 1:
            continue
        j = cand[0]
        seeds = sorted(set(by_seed[i]) & set(by_seed[j]), key=str)
        d, lo, hi, n = paired_diff([by_seed[i][s] for s in seeds], [by_seed[j][s] for s in seeds], level)
        out.loc[i, ["diff_vs_baseline", "diff_ci_low", "diff_ci_high", "baseline", "n_paired", "within_baseline"]] = \
            [d, lo, hi, labels[j], n, j not in base]
    out["n_paired"] = out["n_paired"].astype(int)
    notes = []
    if one_cell and len(col_keys) and len({col_of[i] for i in idx}) > 1:
        notes.append(f"The baseline row ran in one column only ({col_label(dict(zip(col_keys, col_of[base[0]])))}); "
                     f"its cell is the baseline of every column.")
    if ambiguous:
        notes.append(f"No difference for {len(ambiguous)} cell(s) whose baseline is ambiguous: "
                     f"{'; '.join(ambiguous[:3])}; add the key that tells them apart to Sweep.baseline.")
    return out, notes


def _same(a, b) -> bool:
    """Config values equal (NaN equals NaN; 10 equals 10.0; numpy scalars as Python ones)."""
    a, b = _py(a), _py(b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


# ---------------------------------------------------------------- the table

def table_frame(summary: pd.DataFrame, rows=("method", "vd", "mur"), cols=(), paper=paper_error,
                protocol=protocol_reason) -> pd.DataFrame:
    """The tidy table: one line per cell with row/col labels, ours (mean, std, n, counts), the paper's
    (paper_mean, paper_std), delta = mean - paper_mean where the run followed the paper's protocol,
    else NaN with the reason in paper_note, and the DIFF_COLS of baseline_diffs when the summary has
    them (the baseline row's label then ends in "(baseline)"). `paper(cfg) -> (mean, std) | None` and
    `protocol(cfg) -> reason | None` get the cell's full config (TrainConfig defaults for keys the
    sweep did not set)."""
    row_keys, col_keys = layout_keys(summary, rows, cols)
    labels = row_labels(summary, rows, cols)
    has_diff = "diff_vs_baseline" in summary.columns
    if has_diff:  # a row is the baseline row if one of its cells is a baseline cell
        base_rows = set(labels[summary["is_baseline"].astype(bool)])
        labels = labels.map(lambda s: f"{s} (baseline)" if s in base_rows else s)
    cfgs = dict(zip(summary.index, _cell_configs(summary)))

    def rank(i, ks):
        return tuple(_sort_key(k, summary.at[i, k]) for k in ks)

    order = sorted(summary.index, key=lambda i: rank(i, row_keys + col_keys))
    col_order = {c: j for j, c in enumerate(sorted({rank(i, col_keys) for i in summary.index}))}
    out = []
    for i in order:
        r, cfg = summary.loc[i], cfgs[i]
        pv = paper(cfg) if paper is not None else None
        pm, ps = (pv if pv is not None else (math.nan, None))
        reason = protocol(cfg) if pv is not None and protocol is not None else None
        out.append({"row": labels[i],
                    "col": col_label({k: cfg[k] for k in col_keys}) or _metric_name(r["metric"]),
                    "col_order": col_order[rank(i, col_keys)],
                    **{k: cfg[k] for k in row_keys + col_keys},
                    **{c: r[c] for c in STAT_COLS},
                    "paper_mean": pm, "paper_std": math.nan if ps is None else ps,
                    "delta": math.nan if reason else r["mean"] - pm, "paper_note": reason or "",
                    **({c: r[c] for c in DIFF_COLS} if has_diff else {})})
    table = pd.DataFrame(out)
    dup = table[table.duplicated(["row", "col"], keep=False)] if len(table) else table
    if len(dup):
        raise AggregateError(f"two configs map to the table cell {dup.iloc[0]['row']!r} / {dup.iloc[0]['col']!r}; "
                             f"add the key that tells them apart to the sweep's rows or cols")
    return table


def _signed(x: float) -> str:
    """+1.90 / −1.90 (a true minus sign, as in print)."""
    return f"{x:+.2f}".replace("-", "−")


def cell_text(r) -> str:
    """"15.61 ± 0.20", with the failed / diverged / unfinished trials named beside it, then the paired
    difference from the baseline cell where there is one: "15.61 ± 0.20 · −1.90 [−2.80, −1.00]*"."""
    n = int(r["n"])
    text = "—" if n == 0 else f"{r['mean']:.2f}" if n == 1 else f"{r['mean']:.2f} ± {r['std']:.2f}"
    extra = [f"{int(r[c])} {w}" for c, w in (("n_failed", "failed"), ("n_diverged", "diverged"),
                                             ("n_incomplete", "unfinished")) if r[c]]
    if extra or n == 1:
        text += f" (n={n}" + "".join(f", {e}" for e in extra) + ")"
    return text + diff_text(r)


def diff_text(r) -> str:
    """" · −1.90 [−2.80, −1.00]*" (paired difference vs the baseline, its t-interval, * if it excludes 0),
    " · −1.90 (1 pair)", " · no paired seeds", each followed by " vs Pi" where the cell was compared with
    its own method's row (baseline_within); "" for a baseline cell or a cell without a baseline."""
    label = r.get("baseline") if hasattr(r, "get") else None
    if not isinstance(label, str) or not label or bool(r.get("is_baseline", False)):
        return ""
    vs = f" vs {label}" if bool(r.get("within_baseline", False)) else ""  # its own method's row
    k = int(r["n_paired"])
    if k == 0:
        return " · no paired seeds" + vs
    if k == 1:
        return f" · {_signed(r['diff_vs_baseline'])} (1 pair)" + vs
    lo, hi = r["diff_ci_low"], r["diff_ci_high"]
    star = "*" if excludes_zero(lo, hi) else ""
    text = f" · {_signed(r['diff_vs_baseline'])} [{_signed(lo)}, {_signed(hi)}]{star}"
    return text + (f" ({k} pairs)" if k != int(r["n"]) else "") + vs


def _grid(table: pd.DataFrame) -> tuple[list[str], list[list[str]], list[int]]:
    """Header, body cells and each column's width: ours, then paper and Δ where the paper has a value."""
    rows = list(dict.fromkeys(table["row"]))
    cols = list(dict.fromkeys(table.sort_values("col_order", kind="stable")["col"]))
    has_paper = {c: table.loc[table["col"] == c, "paper_mean"].notna().any() for c in cols}
    header = ["Model"]
    for c in cols:
        header += [c, "paper", "Δ"] if has_paper[c] else [c]
    body = []
    for rl in rows:
        line = [rl]
        for c in cols:
            hit = table[(table["row"] == rl) & (table["col"] == c)]
            r = hit.iloc[0] if len(hit) else None
            line.append(cell_text(r) if r is not None else "")
            if has_paper[c]:
                if r is None or pd.isna(r["paper_mean"]):
                    line += ["", ""]
                else:
                    p = f"{r['paper_mean']:.2f}" + ("" if pd.isna(r["paper_std"]) else f" ± {r['paper_std']:.2f}")
                    note = r.get("paper_note", "")
                    d = note if isinstance(note, str) and note else "" if pd.isna(r["delta"]) else _signed(r["delta"])
                    line += [p, d]
        body.append(line)
    return header, body, [3 if has_paper[c] else 1 for c in cols]


def _notes(table: pd.DataFrame, extra=()) -> list[str]:
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
                     "Δ = ours − paper. The paper's errors are the best test error seen during training "
                     "(--which best_test compares like with like, and is as optimistic).")
    if has_paper and "paper_note" in table.columns and (table["paper_note"].fillna("") != "").any():
        notes.append("no Δ: the run is not configured as the paper preset's own row for that cell (it names the "
                     "first fields that differ, ours then the paper row's), so it is not compared with the paper's "
                     "value.")
    notes += _other_papers_notes(table)
    return notes + list(extra)


def classical_note(summary: pd.DataFrame, trials: pd.DataFrame, rows=("method", "vd", "mur"), cols=(),
                   level: float = LEVEL) -> list[str]:
    """One note saying plainly which rows beat the classical baseline (method labelspreading) and which do
    not: each row's paired difference from the LabelSpreading cell of its column over the common seeds,
    'better' / 'worse' where the t-interval excludes 0, else 'no clear difference'. [] without that row."""
    if "method" not in summary.columns or not (summary["method"] == "labelspreading").any():
        return []
    diffs, _ = baseline_diffs(summary, trials, {"method": "labelspreading"}, rows, cols, level)
    labels = row_labels(summary, rows, cols)
    _, col_keys = layout_keys(summary, rows, cols)
    many_cols = len({tuple(_py(summary.at[i, k]) for k in col_keys) for i in summary.index}) > 1
    groups = {"better": [], "no clear difference": [], "worse": []}
    for i, r in diffs.iterrows():
        if r["is_baseline"] or not np.isfinite(r["diff_ci_low"]):
            continue
        where = f" ({col_label({k: _py(r[k]) for k in col_keys})})" if many_cols else ""
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


def _other_papers_notes(table: pd.DataFrame) -> list[str]:
    """Other works' published errors for the data sets and label counts the table shows, where the paper
    has none of its own (MNIST): each with its source, never compared cell by cell (their networks and
    protocols differ from ours)."""
    from sweeper.paper_results import OTHER_PAPERS

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
                       f"compared with the paper (sweeper/paper_results.py).")
    return out


def to_markdown(table: pd.DataFrame, title: str = "", notes=()) -> str:
    """The table as Markdown, its notes (what a cell is, the baseline, the paper) as a list below it."""
    header, body, _ = _grid(table)

    def md_row(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = [f"### {title}", ""] if title else []
    lines += [md_row(header), "|" + "|".join(["---"] + [":-:"] * (len(header) - 1)) + "|"]
    lines += [md_row(line) for line in body]
    return "\n".join(lines + [""] + [f"- {n}" for n in _notes(table, notes)]) + "\n"


_TEX_ESCAPE = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_TEX_UNICODE = {"Π": r"$\Pi$", "α": r"$\alpha$", "±": r"$\pm$", "Δ": r"$\Delta$", "−": "-", "—": "--",
                "·": r"$\cdot$"}


def tex(s: str) -> str:
    """Text -> LaTeX: special characters escaped, the few Greek letters and ± in math mode."""
    s = "".join(_TEX_ESCAPE.get(ch, ch) for ch in s)
    return "".join(_TEX_UNICODE.get(ch, ch) for ch in s)


def to_latex(table: pd.DataFrame, title: str = "", notes=()) -> str:
    """The table as a plain LaTeX tabular, title and notes as % comments above it."""
    header, body, widths = _grid(table)
    spec = "l|" + "|".join("c" * w for w in widths)
    lines = [f"% {title}"] if title else []
    lines += [f"% {n}" for n in _notes(table, notes)]
    lines += [rf"\begin{{tabular}}{{{spec}}}", r"\hline", " & ".join(map(tex, header)) + r" \\", r"\hline"]
    lines += [" & ".join(map(tex, line)) + r" \\" for line in body]
    lines += [r"\hline", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_tables(table: pd.DataFrame, folder: Path, stem: str, title: str = "", notes=()) -> dict[str, Path]:
    """<stem>.md, <stem>.tex and <stem>.csv in folder, each written atomically."""
    md, tx = to_markdown(table, title, notes), to_latex(table, title, notes)
    return {f"{stem}.md": atomic_write(folder / f"{stem}.md", lambda t: Path(t).write_text(md)),
            f"{stem}.tex": atomic_write(folder / f"{stem}.tex", lambda t: Path(t).write_text(tx)),
            f"{stem}.csv": atomic_write(folder / f"{stem}.csv", lambda t: table.to_csv(t, index=False))}


def val_note(trials: pd.DataFrame) -> str | None:
    """A note when trials never reported val_error (run before the trainer held out a validation split):
    their validation-based numbers are empty (NaN), not made up. None when every trial with a report
    reported it at least once (bestval_step is set)."""
    reported = trials[trials["n_reports"] > 0] if "n_reports" in trials.columns else trials
    have = np.isfinite(pd.to_numeric(reported["bestval_step"], errors="coerce")) \
        if "bestval_step" in reported.columns else pd.Series(False, index=reported.index)
    missing = int((~have).sum())
    if not missing:
        return None
    who = "No trial" if missing == len(reported) else f"{missing} of {len(reported)} trials"
    return (f"{who} reported {SELECT_METRIC} (run before the trainer held out a validation split): their "
            f"validation-based numbers (best_val cells, the ranking) are empty; rerun them to get a validation split.")


def subset_note(trials: pd.DataFrame) -> str:
    """Which labeled subset the seeds trained on: one fixed subset (label_seed >= 0, the authors' rule) or a
    new one per seed (label_seed = -1; trials without the key ran before it existed and drew per seed)."""
    ls = pd.to_numeric(trials["label_seed"], errors="coerce").fillna(-1) if "label_seed" in trials.columns \
        else pd.Series(-1, index=trials.index)
    fixed = ", ".join(str(v) for v in sorted({int(v) for v in ls if v >= 0}))
    if fixed and (ls < 0).any():
        return (f"Labeled subset: fixed (label_seed={fixed}) in some trials, drawn anew for each seed "
                f"(label_seed=-1) in the others, whose ± also covers which images are labeled.")
    if fixed:
        return (f"Labeled subset: the same for every seed (label_seed={fixed}, the authors' rule), so a cell's ± "
                f"covers training randomness only, as the paper's does.")
    return ("Labeled subset: drawn anew for each seed (label_seed=-1), so a cell's ± and its paired interval "
            "also cover which images are labeled.")


# ---------------------------------------------------------------- a search (hpo): its trials ranked

def ranking_frame(trials: pd.DataFrame, keys: list[str], select: str = SELECT_METRIC,
                  report: str = "test_error") -> pd.DataFrame:
    """A search's trials ranked by their final `select` (the validation error: the test set plays no part
    in the choice), with the final `report` (test error) beside it: those that ran every step first;
    then those ASHA stopped early, most steps first, by `select` where they stopped (not comparable with
    the finished ones, hence apart). Failed and diverged trials, and trials without a finite `select`,
    are left out; if no trial reported `select` at all (trials from before the validation split), the
    finished and stopped ones are listed unranked (rank NaN), by steps then trial id.
    Columns: rank, trial_id, status, steps, the searched `keys`, final_<select>, final_<report>."""
    sel, rep = f"final_{select}", f"final_{report}"
    t = trials.copy()
    for c in (sel, rep):
        if c not in t.columns:
            t[c] = math.nan
    value = np.isfinite(pd.to_numeric(t[sel], errors="coerce"))
    ranked = bool(value.any())
    ok = t[t["status"].isin(("finished", "stopped")) & (value if ranked else True)].copy()
    ok["steps"] = pd.to_numeric(ok.get("final_step"), errors="coerce")
    ok["_stopped"] = ok["status"] != "finished"
    by = ["_stopped", "steps", sel] if ranked else ["_stopped", "steps", "trial_id"]
    ok = ok.sort_values(by, ascending=[True, False, True], kind="stable")
    out = ok[list(dict.fromkeys(["trial_id", "status", "steps", *keys, sel, rep]))].reset_index(drop=True)
    out.insert(0, "rank", range(1, len(out) + 1) if ranked else [math.nan] * len(out))
    return out


def ranking_markdown(ranked: pd.DataFrame, title: str = "", top: int = 10, notes=()) -> str:
    """The first `top` rows of ranking_frame as a markdown table (numbers to 3 significant digits); the
    final_<metric> columns are headed by what they are for (ranked by / not used for selection)."""
    def cell(v) -> str:
        if isinstance(v, (float, np.floating)) and math.isnan(v):
            return "—"
        return f"{v:.3g}" if isinstance(v, (float, np.floating)) else str(v)

    metric_cols = [c for c in ranked.columns if c.startswith("final_")]
    names = {c: f"{c} (ranked by)" if j == 0 else f"{c} (not used for selection)"
             for j, c in enumerate(metric_cols)}
    head = [names.get(c, c) for c in ranked.columns]
    lines = [f"### {title}", ""] if title else []
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join(["---:"] * len(head)) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in ranked.head(top).itertuples(index=False)]
    n_stopped = int((ranked["status"] == "stopped").sum())
    how = "ranked" if ranked["rank"].notna().any() or not len(ranked) else "listed unranked"
    lines += ["", f"- {len(ranked)} trials {how} ({n_stopped} stopped early by ASHA, listed after every finished "
                  f"one); the first {min(top, len(ranked))} shown, all in the .csv."]
    if len(metric_cols) > 1:
        lines.append(f"- Ranked by {metric_cols[0]}, on the validation split held out of the training set; "
                     f"{metric_cols[1]} is shown beside it and was not used for selection.")
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def start_notes(trials: pd.DataFrame, ranked: pd.DataFrame, points, select: str = SELECT_METRIC) -> list[str]:
    """Where each start point of a search (sweep.json start_points: the base values, sampled first)
    landed: its rank among the finished trials and its `select`, or what became of it."""
    def hit(df: pd.DataFrame, point: dict) -> pd.DataFrame:  # the trials that ran exactly these values
        return df[[all(_same(r[k], v) for k, v in point.items()) for _, r in df.iterrows()]] if len(df) else df

    notes = []
    for point in points or []:
        what = ", ".join(_short(k, v) for k, v in point.items())
        mine, ever = hit(ranked, point), hit(trials, point)
        if len(mine):
            r = mine.iloc[0]
            where = (f"rank {int(r['rank'])} of {len(ranked)}" if pd.notna(r["rank"]) else "unranked") + \
                (f", stopped early by ASHA at step {int(r['steps'])}" if r["status"] == "stopped" else "")
            notes.append(f"The search's first sample is the base values ({what}): {where}, "
                         f"{_metric_name(select)} = {float(r[f'final_{select}']):.3g}.")
        else:
            status = ", ".join(sorted(set(ever["status"]))) if len(ever) else "not run yet"
            notes.append(f"The search's first sample is the base values ({what}): not ranked ({status}).")
    return notes


def write_ranking(trials: pd.DataFrame, keys: list[str], folder: Path, title: str, select: str = SELECT_METRIC,
                  report: str = "test_error", notes=(), start_points=None) -> dict[str, Path]:
    """table_ranked.md and table_ranked.csv (ranking_frame) in folder, each written atomically; with
    start_points, a note on where the base values landed (start_notes)."""
    ranked = ranking_frame(trials, keys, select, report)
    md = ranking_markdown(ranked, title, notes=[*start_notes(trials, ranked, start_points, select), *notes])
    return {"table_ranked.md": atomic_write(folder / "table_ranked.md", lambda t: Path(t).write_text(md)),
            "table_ranked.csv": atomic_write(folder / "table_ranked.csv", lambda t: ranked.to_csv(t, index=False))}
