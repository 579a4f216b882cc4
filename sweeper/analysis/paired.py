"""Each cell's paired difference from its baseline cell over the seeds both ran, with its t-interval.

With a baseline row (Sweep.baseline), every other cell is compared with the baseline cell of its
column (or its own method's base row, Sweep.baseline_within) seed by seed (sweeper/analysis/stats.py).

    pytest tests/test_report.py -q -k baseline
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from sweeper.analysis.aggregate import config_key, group_keys, seed_values
from sweeper.analysis.labels import col_label, py_value
from sweeper.analysis.layout import cell_configs, config_keys, layout_keys, row_labels
from sweeper.analysis.stats import paired_diff
from trainables.config import train_config_defaults

LEVEL = 0.95  # confidence level of the paired t-interval


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
    out = with_diff_cols(summary)
    if not len(out):
        return out, []
    pairs, notes = baseline_cells(summary, baseline, rows, cols, within, baseline_for)
    fill_diffs(out, pairs, row_labels(summary, rows, cols), cell_seed_values(summary, trials), level)
    return out, notes


def with_diff_cols(summary: pd.DataFrame) -> pd.DataFrame:
    """A copy of the summary with DIFF_COLS added, each cell at "not compared"."""
    out = summary.copy()
    out["diff_vs_baseline"] = out["diff_ci_low"] = out["diff_ci_high"] = math.nan
    out["baseline"] = None
    out["n_paired"] = 0
    out["is_baseline"] = False
    out["within_baseline"] = False
    return out


def cell_seed_values(summary: pd.DataFrame, trials: pd.DataFrame) -> dict:
    """{cell index: {seed: value}}: each cell's finished trials with a finite value of the summary's metric
    (`seed_values`), so that a cell and its baseline are paired by seed."""
    values = seed_values(trials, summary["metric"].iloc[0], summary["which"].iloc[0])
    gkeys = group_keys(trials)
    return {i: values.get(config_key(summary.loc[i], gkeys), {}) for i in summary.index}


def fill_diffs(out: pd.DataFrame, pairs: dict, labels: dict, by_seed: dict, level: float) -> None:
    """out's DIFF_COLS, in place, from the pairing (baseline_cells): a baseline cell marked, every other
    paired cell's mean difference from its baseline cell over the seeds both ran, with its t-interval."""
    base = [i for i, j in pairs.items() if j is None]
    for i, j in pairs.items():
        if j is None:
            out.loc[i, ["baseline", "is_baseline"]] = [labels[i], True]
            continue
        seeds = sorted(set(by_seed[i]) & set(by_seed[j]), key=str)
        d, lo, hi, n = paired_diff([by_seed[i][s] for s in seeds], [by_seed[j][s] for s in seeds], level)
        out.loc[i, ["diff_vs_baseline", "diff_ci_low", "diff_ci_high", "baseline", "n_paired", "within_baseline"]] = \
            [d, lo, hi, labels[j], n, j not in base]
    out["n_paired"] = out["n_paired"].astype(int)


def baseline_cells(summary: pd.DataFrame, baseline: dict | None, rows=("method", "vd", "mur"), cols=(),
                   within: tuple[str, ...] = (), baseline_for: dict | None = None) -> tuple[dict, list[str]]:
    """({cell index: its baseline cell's index, None for a baseline cell}, notes): the pairing that
    baseline_diffs describes, from the summary's config columns only (no results needed, so the
    `--seeds auto` searcher pairs configurations before they run). A cell without exactly one
    baseline cell is left out, and the notes say why."""
    if not baseline or not len(summary):
        return {}, []
    defaults = train_config_defaults()
    keys = config_keys(summary)
    unknown = sorted(k for k in baseline if k not in keys and k not in defaults)
    if unknown:
        return {}, [f"No differences: the sweep's baseline {baseline} names {unknown}, which are not config keys; "
                    f"fix Sweep.baseline (in sweep.json for this folder) to the config of one table row."]
    cfgs = cell_configs(summary)
    is_base = [all(same_value(cfg[k], v) for k, v in baseline.items()) for cfg in cfgs]
    labels = row_labels(summary, rows, cols)
    _, col_keys = layout_keys(summary, rows, cols)
    idx = list(summary.index)
    cells = Cells(idx, dict(zip(idx, cfgs)), {i: tuple(cfg[k] for k in col_keys) for i, cfg in zip(idx, cfgs)}, rows)
    base = [j for j, b in zip(idx, is_base) if b]
    pairs: dict = {}
    ambiguous = []
    for pos, (i, cfg) in enumerate(zip(idx, cfgs)):
        if is_base[pos]:
            pairs[i] = None
            continue
        cand = baseline_candidates(cells, i, baseline, base, within, baseline_for)
        if len(cand) > 1:
            ambiguous.append(f"{labels[i]} ({', '.join(labels[j] for j in cand)})")
        if len(cand) == 1:
            pairs[i] = cand[0]
    if not base and not pairs:  # a --cells-only run leaves the baseline out on purpose
        return {}, [f"No differences: no row of this table matches the sweep's baseline {baseline}; a run "
                    f"with --cells-only leaves it out, elsewhere fix Sweep.baseline (in sweep.json for this "
                    f"folder) to the config of one table row."]
    notes = pairing_notes(cells, base, col_keys, ambiguous)
    if not base:  # a --cells run without the baseline row: the cells with a row of their own still pair
        notes.insert(0, f"The sweep's baseline row {baseline} did not run; {len(pairs)} of {len(idx)} cells have a "
                        f"difference, from their own method's base row or the row Sweep.baseline_for names.")
    return pairs, notes


@dataclass
class Cells:
    """A summary's cells for the pairing: their indices, each one's config and column (the values of the
    column keys), and the table's row keys."""
    idx: list
    cfg_of: dict
    col_of: dict
    rows: tuple

    def matching(self, target: dict) -> list:
        """The cells whose config holds every value of `target`."""
        return [j for j in self.idx if all(same_value(self.cfg_of[j][k], v) for k, v in target.items())]

    def pick(self, i, target: dict, pool: list) -> list:
        """The cells of `pool` that are cell i's baseline: same column (or the pool's only column),
        narrowed to those agreeing with cell i on the `rows` keys that `target` leaves open."""
        col_of, cfg_of, rows = self.col_of, self.cfg_of, self.rows
        cand = [j for j in pool if col_of[j] == col_of[i]] or (pool if len({col_of[j] for j in pool}) == 1 else [])
        if len(cand) > 1:
            cand = [j for j in cand if all(same_value(cfg_of[j][k], cfg_of[i][k]) for k in rows if k not in target)]
        return cand


def baseline_candidates(cells: Cells, i, baseline: dict, base: list, within: tuple[str, ...],
                        baseline_for: dict | None) -> list:
    """Cell i's baseline cells by the first rule that finds any: its own method's base row (`within`),
    the row `baseline_for` names for its method, else the baseline row (`base`, its cells)."""
    cfg, cand = cells.cfg_of[i], []
    own = {**baseline, **{k: cfg[k] for k in within if k in cfg}}  # Pi + VD -> Pi
    if within and not all(same_value(cfg[k], v) for k, v in own.items()):
        cand = cells.pick(i, own, cells.matching(own))
    named = (baseline_for or {}).get(cfg.get("method"))
    if not cand and named:  # the row the sweep names for this method's base row
        cand = cells.pick(i, named, [j for j in cells.matching(named) if j != i])
    if not cand:  # no own-method row (or the cell is it): the baseline row
        cand = cells.pick(i, baseline, base)
    return cand


def pairing_notes(cells: Cells, base: list, col_keys: list, ambiguous: list[str]) -> list[str]:
    """What the tables say under the pairing: a baseline row that ran in one column only, and the cells
    left without a difference because their baseline is ambiguous."""
    col_of = cells.col_of
    notes = []
    if len({col_of[j] for j in base}) == 1 and len(col_keys) and len({col_of[i] for i in cells.idx}) > 1:
        notes.append(f"The baseline row ran in one column only ({col_label(dict(zip(col_keys, col_of[base[0]])))}); "
                     f"its cell is the baseline of every column.")
    if ambiguous:
        notes.append(f"No difference for {len(ambiguous)} cell(s) whose baseline is ambiguous: "
                     f"{'; '.join(ambiguous[:3])}; add the key that tells them apart to Sweep.baseline.")
    return notes


def same_value(a, b) -> bool:
    """Config values equal (NaN equals NaN; 10 equals 10.0; numpy scalars as Python ones)."""
    a, b = py_value(a), py_value(b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False
