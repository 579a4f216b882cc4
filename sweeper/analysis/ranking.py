"""A search's (hpo) trials ranked by their validation error, best first, with the test error beside.

    pytest tests/test_report.py -q -k rank
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from sweeper.analysis.aggregate import SELECT_METRIC
from sweeper.analysis.labels import metric_name, short_label
from sweeper.analysis.paired import same_value
from sweeper.analysis.render import grid_json, grid_markdown
from trainables.files import atomic_write


# ---------------------------------------------------------------- a search (hpo): its trials ranked

def ranking_frame(trials: pd.DataFrame, keys: list[str], select: str = SELECT_METRIC,
                  report: str = "test_error") -> pd.DataFrame:
    """A search's trials ranked by their final `select` (the validation error: the test set plays no part
    in the choice), with the final `report` (test error) beside it: those that ran every step first;
    then those ASHA stopped early, most steps first, by `select` where they stopped (not comparable with
    the finished ones, hence apart). Failed and diverged trials, and trials without a finite `select`,
    are left out; if no trial reported `select` at all (val_size=0: no validation split), the
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


def ranking_grid(ranked: pd.DataFrame, title: str = "", top: int = 10, notes=()) -> dict:
    """The first `top` rows of ranking_frame as a grid (render.grid: title, header, rows, notes; numbers to
    3 significant digits); the final_<metric> columns are headed by what they are for (ranked by / not
    used for selection)."""
    def cell(v) -> str:
        if isinstance(v, (float, np.floating)) and math.isnan(v):
            return "—"
        return f"{v:.3g}" if isinstance(v, (float, np.floating)) else str(v)

    metric_cols = [c for c in ranked.columns if c.startswith("final_")]
    names = {c: f"{c} (ranked by)" if j == 0 else f"{c} (not used for selection)"
             for j, c in enumerate(metric_cols)}
    n_stopped = int((ranked["status"] == "stopped").sum())
    how = "ranked" if ranked["rank"].notna().any() or not len(ranked) else "listed unranked"
    out = [f"{len(ranked)} trials {how} ({n_stopped} stopped early by ASHA, listed after every finished one); "
           f"the first {min(top, len(ranked))} shown, all in the .csv."]
    if len(metric_cols) > 1:
        out.append(f"Ranked by {metric_cols[0]}, on the validation split held out of the training set; "
                   f"{metric_cols[1]} is shown beside it and was not used for selection.")
    return {"title": title, "header": [names.get(c, c) for c in ranked.columns],
            "rows": [[cell(v) for v in row] for row in ranked.head(top).itertuples(index=False)],
            "notes": [*out, *notes]}


def ranking_markdown(ranked: pd.DataFrame, title: str = "", top: int = 10, notes=()) -> str:
    """ranking_grid as a Markdown table, every column right-aligned."""
    g = ranking_grid(ranked, title, top, notes)
    return grid_markdown(g, ["---:"] * len(g["header"]))


def start_notes(trials: pd.DataFrame, ranked: pd.DataFrame, points, select: str = SELECT_METRIC) -> list[str]:
    """Where each start point of a search (sweep.json start_points: the base values, sampled first)
    landed: its rank among the finished trials and its `select`, or what became of it."""
    def hit(df: pd.DataFrame, point: dict) -> pd.DataFrame:  # the trials that ran exactly these values
        return df[[all(same_value(r[k], v) for k, v in point.items()) for _, r in df.iterrows()]] if len(df) else df

    notes = []
    for point in points or []:
        what = ", ".join(short_label(k, v) for k, v in point.items())
        mine, ever = hit(ranked, point), hit(trials, point)
        if len(mine):
            r = mine.iloc[0]
            where = (f"rank {int(r['rank'])} of {len(ranked)}" if pd.notna(r["rank"]) else "unranked") + \
                (f", stopped early by ASHA at step {int(r['steps'])}" if r["status"] == "stopped" else "")
            notes.append(f"The search's first sample is the base values ({what}): {where}, "
                         f"{metric_name(select)} = {float(r[f'final_{select}']):.3g}.")
        else:
            status = ", ".join(sorted(set(ever["status"]))) if len(ever) else "not run yet"
            notes.append(f"The search's first sample is the base values ({what}): not ranked ({status}).")
    return notes


def write_ranking(trials: pd.DataFrame, keys: list[str], folder: Path, title: str, select: str = SELECT_METRIC,
                  report: str = "test_error", notes=(), start_points=None) -> dict[str, Path]:
    """table_ranked.md, .csv (ranking_frame) and .json (ranking_grid) in folder, each written atomically; with
    start_points, a note on where the base values landed (start_notes)."""
    ranked = ranking_frame(trials, keys, select, report)
    g = ranking_grid(ranked, title, notes=[*start_notes(trials, ranked, start_points, select), *notes])
    md, js = grid_markdown(g, ["---:"] * len(g["header"])), grid_json(g)
    return {"table_ranked.md": atomic_write(folder / "table_ranked.md", lambda t: Path(t).write_text(md)),
            "table_ranked.csv": atomic_write(folder / "table_ranked.csv", lambda t: ranked.to_csv(t, index=False)),
            "table_ranked.json": atomic_write(folder / "table_ranked.json", lambda t: Path(t).write_text(js))}
