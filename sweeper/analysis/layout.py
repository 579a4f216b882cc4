"""Which keys make a table's rows and columns, the labels that tell rows apart, and the paper's value
of a cell.

    pytest tests/test_report.py -q -k "row_labels or applies"   (applies itself: trainables/config.py)
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sweeper.analysis.aggregate import AggregateError, config_cols
from sweeper.analysis.labels import NAME_KEYS, py_value, row_label
from sweeper.analysis.paper_results import SENSITIVITY_DATA, paper_sensitivity, paper_value
from trainables.config import applies, full_config, train_config_defaults

STAT_COLS = ("metric", "which", "mean", "std", "n", "n_failed", "n_diverged", "n_incomplete", "n_trials", "seeds")
# Columns baseline_diffs adds to a summary: ours - baseline (percent points for errors), its t-interval,
# the label of the row it is compared with, the number of seeds paired, whether the cell is itself a
# baseline cell, and whether it was compared with its own method's row (Sweep.baseline_within).
DIFF_COLS = ("diff_vs_baseline", "diff_ci_low", "diff_ci_high", "baseline", "n_paired", "is_baseline",
             "within_baseline")
VERDICT_COL = "verdict"  # --seeds auto: a cell's sequential verdict, "differs at 5 seeds" (sweeper/seeds/auto_seeds.py)


# ---------------------------------------------------------------- the layout

PLAN_COLS = ("n_planned", "n_missing", "short_why")  # planned against present (sweeper/analysis/planned.py)
SUMMARY_COLS = (*STAT_COLS, *DIFF_COLS, VERDICT_COL, *PLAN_COLS)  # a summary's columns that are not config keys


def config_keys(summary: pd.DataFrame) -> list[str]:
    """The config keys among a summary's columns (aggregate.config_cols); AggregateError for a column that
    is neither one nor declared in SUMMARY_COLS, which would otherwise become a row label."""
    unknown = [c for c in summary.columns if c not in config_cols() and c not in SUMMARY_COLS]
    if unknown:
        raise AggregateError(f"summary column(s) {unknown} are undeclared: neither config keys nor "
                             f"layout.SUMMARY_COLS (statistics, baseline comparison, verdict); declare them there")
    return [c for c in summary.columns if c in config_cols()]


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


def cell_configs(summary: pd.DataFrame) -> list[dict]:
    """Each summary row's full config: TrainConfig defaults for the keys the sweep did not set."""
    keys = config_keys(summary)
    return [full_config({k: py_value(summary.at[i, k]) for k in keys}) for i in summary.index]


def row_labels(summary: pd.DataFrame, rows=("method", "vd", "mur"), cols=()) -> pd.Series:
    """Each summary row's table row label (layout_keys; method / vd / mur name the row even where the
    sweep holds them fixed: "MT + MUR", not "MUR"), aligned with the summary's index. A key that does
    not apply to a row (`applies`: LabelSpreading's α, a plain MT row's KL coefficient) is left out of
    its label, and floats show 3 significant digits, each unless that would give two different rows
    one label."""
    row_keys, col_keys = layout_keys(summary, rows, cols)
    named = [k for k in NAME_KEYS if k in train_config_defaults() and k not in row_keys + col_keys]
    cfgs = cell_configs(summary)

    def labels(keep, value=lambda v: v) -> list[str]:
        return [row_label({k: value(cfg[k]) for k in named + row_keys if keep(k, cfg)}) for cfg in cfgs]

    full = labels(lambda k, cfg: True)
    # shortest first: drop what does nothing for a row and show floats to 3 significant digits, then
    # each alone; the first that keeps the rows of every column apart (rows in different columns may
    # share a label: MT + MUR at r 20 on CIFAR-100 and ICT + MUR at r 20 on both)
    where = [tuple(str(cfg[k]) for k in col_keys) for cfg in cfgs]
    for keep, value in ((applies, _sig3), (applies, lambda v: v), (lambda k, cfg: True, _sig3)):
        short = labels(keep, value)
        if len(set(zip(where, short))) == len(set(zip(where, full))):
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
