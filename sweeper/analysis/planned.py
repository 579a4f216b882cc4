"""Planned against present: how many trials each cell of a run was planned to have, and why any is short.

A table averages the trials whose folders it finds; a trial folder moved aside, one Tune never created
(a sweep stopped early), or a result.json cut short would otherwise only lower a cell's `n`. The plan:
  a grid            its trials.json (every trial's config, in trial_index order; sweeper/driver/tuner.py)
  --seeds auto      the trials Tune's newest experiment_state holds: the seeds its looks have asked for so far
  a search (hpo)    the samples Tune has drawn so far (its trial budget is sweep.json's num_samples)
A planned trial is matched to a trial folder by trial_index (a grid) or by the folder Tune's state names
(the others). `add_planned` gives each summary cell `n_planned` and `n_missing` (planned trials without a
readable folder) and `short_why`: each missing trial with its reason (never created, folder missing,
params.json missing) and each present trial that Tune ended but whose result.json lacks its end (missing,
or cut short), named by folder. A cell planned but with no trial present is a row of n = 0.

    python -c "from sweeper.analysis.planned import short_cells; ..."   (sweeper.report prints them)
    pytest tests/test_planned.py -q
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from sweeper.analysis.aggregate import (config_key, flatten, group_keys, read_json_lines, read_ray_states,
                                        read_sweep)
from sweeper.analysis.layout import PLAN_COLS, config_keys
from sweeper.storage import TRIALS_FILE, grid_meta
from trainables.config import full_config
from trainables.files import unresolved

ENDED = ("TERMINATED", "ERROR")  # Tune's statuses of a trial that will write no more reports


def tune_trials(exp: Path) -> list[dict]:
    """The trials of Tune's newest experiment_state (aggregate.read_ray_states): {"trial_dir", "status",
    "config"}; [] without one."""
    return [{"trial_dir": d, "status": t["status"], "config": t["config"]} for d, t in read_ray_states(exp).items()]


def plan(exp: Path, meta: dict | None = None) -> list[dict] | None:
    """Every planned trial: {"config", "trial_index", "trial_dir" (where Tune created it, else None),
    "status"}; None where the run keeps no plan (a grid from before trials.json, an experiment without
    sweep.json)."""
    meta = read_sweep(exp) if meta is None else meta
    if not meta:
        return None
    created = tune_trials(exp)
    if not grid_meta(meta):
        return [{"config": t["config"], "trial_index": t["config"].get("trial_index"), "trial_dir": t["trial_dir"],
                 "status": t["status"]} for t in created if not unresolved(t["config"])]
    if not (exp / TRIALS_FILE).is_file():
        return None
    configs = json.loads((exp / TRIALS_FILE).read_text())
    by_index = {t["config"].get("trial_index"): t for t in created}
    return [{"config": c, "trial_index": c.get("trial_index", i),
             "trial_dir": by_index.get(c.get("trial_index", i), {}).get("trial_dir"),
             "status": by_index.get(c.get("trial_index", i), {}).get("status")} for i, c in enumerate(configs)]


def why_missing(exp: Path, p: dict) -> str:
    """Why a planned trial has no row: never created, its folder gone, or its params.json gone."""
    if not p["trial_dir"]:
        return f"trial {p['trial_index']}: not started (Tune had not created it)"
    folder = exp / p["trial_dir"]
    if not folder.is_dir():
        return f"{p['trial_dir']}: folder missing"
    return f"{p['trial_dir']}/params.json missing"


def why_short(exp: Path, trial: pd.Series, status: str | None) -> str | None:
    """Why a present trial that Tune ended has no end in its result.json (missing, or its last line cut)."""
    if status not in ENDED or trial["status"] not in ("incomplete", "stopped"):  # stopped: also by ASHA, whole
        return None
    result = exp / trial["trial_dir"] / "result.json"
    if not result.is_file():
        return f"{trial['trial_dir']}/result.json missing"
    _, torn = read_json_lines(result)
    return f"{trial['trial_dir']}/result.json cut short (its last line is torn)" if torn else None


def add_planned(summary: pd.DataFrame, trials: pd.DataFrame, exp: Path, meta: dict | None = None) -> pd.DataFrame:
    """`summary` (aggregate.summarize of `trials`) with PLAN_COLS, and a row of n = 0 for each planned cell
    that has no trial present; unchanged where the run keeps no plan."""
    planned = plan(exp, meta)
    if planned is None:
        return summary
    keys = group_keys(trials)
    present_index = set(pd.to_numeric(trials["trial_index"], errors="coerce").dropna().astype(int)) \
        if "trial_index" in trials.columns else set()
    present_dirs = set(trials["trial_dir"])
    grid = grid_meta(meta or read_sweep(exp) or {})
    counts: dict[tuple, dict] = {}
    status = {}
    for p in planned:
        cfg = full_config(flatten(p["config"]))
        cell = counts.setdefault(config_key(cfg, keys), {"cfg": cfg, "n_planned": 0, "why": []})
        cell["n_planned"] += 1
        here = p["trial_index"] in present_index if grid else p["trial_dir"] in present_dirs
        if not here:
            cell["why"].append((why_missing(exp, p), True))
        if p["trial_dir"]:
            status[p["trial_dir"]] = p["status"]
    for _, t in trials.iterrows():
        if (w := why_short(exp, t, status.get(t["trial_dir"]))) and config_key(t, keys) in counts:
            counts[config_key(t, keys)]["why"].append((w, False))
    out = summary.copy()
    for c in PLAN_COLS:
        out[c] = 0 if c != "short_why" else ""
    index = {config_key(r, keys): i for i, r in out.iterrows()}
    extra = []
    for key, cell in counts.items():
        row = {"n_planned": cell["n_planned"], "n_missing": sum(m for _, m in cell["why"]),
               "short_why": "; ".join(w for w, _ in cell["why"])}
        if key in index:
            for c, v in row.items():
                out.at[index[key], c] = v
        else:  # planned, none present: a cell of n = 0
            extra.append({**{k: cell["cfg"][k] for k in keys}, "metric": out["metric"].iloc[0],
                          "which": out["which"].iloc[0], "mean": math.nan, "std": math.nan, "n": 0, "n_failed": 0,
                          "n_diverged": 0, "n_incomplete": 0, "n_trials": 0, "seeds": "", **row})
    if extra:
        out = pd.concat([out, pd.DataFrame(extra)], ignore_index=True)
    return out


def short_cells(summary: pd.DataFrame) -> list[str]:
    """One line per cell with fewer trials present than planned, or a present trial cut short: its config
    keys, the counts and the reasons (for stderr and the table's notes)."""
    if "n_planned" not in summary.columns:
        return []
    keys = [k for k in config_keys(summary) if summary[k].nunique(dropna=False) > 1 or k in ("method", "vd", "mur")]
    lines = []
    for _, r in summary.iterrows():
        why = r["short_why"] if isinstance(r["short_why"], str) else ""  # read back from a CSV: NaN for none
        if int(r["n_missing"]) or why:
            cell = ", ".join(f"{k}={r[k]}" for k in keys)
            lines.append(f"cell {cell}: {int(r['n_trials'])} of {int(r['n_planned'])} planned trials present, "
                         f"{int(r['n'])} averaged; {why}")
    return lines
