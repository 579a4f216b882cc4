"""`python -m sweeper.run SWEEP --seeds auto [--max-seeds 16]`: what the driver and the report need
around the sequential procedure (sweeper/seeds/sequential.py), without Ray: the sweep checked and marked
(Sweep.max_seeds), the configurations paired with their baselines, the dry run's trial counts, and
the table's verdict columns rebuilt from the stored trials.

    python -m sweeper.run table_svhn --preset quick --seeds auto --dry-run
    pytest tests/test_seed_searcher.py -q
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd

from search_spaces import Sweep
from sweeper.analysis.aggregate import NON_GROUP_KEYS, config_key, group_keys, seed_values
from sweeper.analysis.paired import baseline_cells
from sweeper.seeds.sequential import FIRST_SEEDS, MAX_SEEDS, Plan, SequentialError, simulate, verdict

SPREAD = 0.8          # seed-to-seed sd of a trial's error (percent points) the dry run assumes
EFFECT = 1.0          # the difference (points) of the dry run's "every cell differs" case
DRY_RUN_SWEEPS = 2000  # simulated sweeps behind the dry run's expected counts
UNSTORED_BOUNDARY = "bonferroni"  # a sweep.json without a boundary is of a run whose looks were all Bonferroni ones


def auto_sweep(sweep: Sweep, max_seeds: int | None) -> Sweep:
    """The sweep marked for `--seeds auto` (max_seeds set, MAX_SEEDS if None; FIRST_SEEDS seeds first);
    SequentialError for a search (hpo), a sweep without a baseline row, or a cap below the first look."""
    max_seeds = MAX_SEEDS if max_seeds is None else max_seeds
    if sweep.search:
        raise SequentialError(f"--seeds auto adds seeds to a grid's open comparisons; {sweep.name} is a search "
                              f"(Optuna samples, no baseline cells): use --seeds N")
    plan = Plan(cap=max_seeds, match_margin=sweep.match_margin)  # the cap and margin checked
    out = replace(sweep, seeds=FIRST_SEEDS, max_seeds=max_seeds, boundary=plan.boundary)
    pairing(configurations(out.trials()), out)  # a sweep that compares nothing is refused now
    return out


def check_resume(meta: dict, sweep: Sweep, auto: bool, max_seeds: int | None, exp) -> None:
    """--resume keeps a --seeds auto run's plan: SequentialError naming the fix where the cap asked for
    (--max-seeds), the sweep's match_margin or this code's boundary is not the one the run started
    with (meta: its sweep.json), and where --seeds auto or --max-seeds is asked of a fixed-seed run.
    The looks' error guarantee holds for a plan fixed before any data: one changed after seeing some
    would let the data choose the plan (a cap raised because a cell was nearly decided, say)."""
    stored = meta.get("max_seeds")
    if not stored:
        if auto or max_seeds is not None:
            raise SequentialError(f"{exp} was run with fixed seeds, not --seeds auto; resume it without --seeds auto "
                                  f"and --max-seeds, or start a new run with --seeds auto")
        return
    void = "changing the plan after seeing data voids its error guarantee"
    if max_seeds is not None and max_seeds != stored:
        raise SequentialError(f"{exp} is a --seeds auto run planned with --max-seeds {stored}, not {max_seeds}: {void}; "
                              f"resume it without --max-seeds, or start a new run with --max-seeds {max_seeds}")
    if sweep.match_margin != meta.get("match_margin"):
        raise SequentialError(f"{exp} is a --seeds auto run planned with match_margin {meta.get('match_margin')}, and "
                              f"sweep {sweep.name} now sets {sweep.match_margin}: {void}; set it back to resume the run, "
                              f"or start a new run")
    boundary = meta.get("boundary") or UNSTORED_BOUNDARY
    if boundary != Plan.boundary:
        raise SequentialError(f"{exp} is a --seeds auto run whose looks use the {boundary} boundary, and this code's "
                              f"use {Plan.boundary}: {void}; resume it with the code it started with (sweep.json: "
                              f"commit {meta.get('commit', '?')}), or start a new run")


def plan_of(sweep: Sweep | dict, trials) -> Plan:
    """The sweep's plan (a Sweep, or its sweep.json); its first seed is the trials' lowest (--seed-start
    moves it)."""
    get = sweep.get if isinstance(sweep, dict) else lambda k: getattr(sweep, k)
    seeds = [int(t["seed"]) for t in trials] if isinstance(trials, list) else pd.to_numeric(trials["seed"]).astype(int)
    return Plan(first_seed=int(min(seeds)), cap=int(get("max_seeds")), match_margin=get("match_margin"),
                boundary=get("boundary") or UNSTORED_BOUNDARY)


def configurations(trials: list[dict]) -> list[dict]:
    """The distinct configurations of a sweep's trial configs (all but the seed), in order."""
    out: dict[str, dict] = {}
    for t in trials:
        cfg = {k: v for k, v in t.items() if k != "seed"}
        out.setdefault(json.dumps(cfg, sort_keys=True, default=str), cfg)
    return list(out.values())


def pairing(cells: list[dict], sweep: Sweep) -> list[int | None]:
    """baseline_of[c]: the configuration cell c is compared with, None for a baseline cell or one without
    a baseline, by the tables' rule (paired.baseline_cells). SequentialError when no cell is compared:
    nothing would ever decide."""
    frame = pd.DataFrame([{k: v for k, v in c.items() if k not in NON_GROUP_KEYS} for c in cells])
    pairs, notes = baseline_cells(frame, sweep.baseline, sweep.rows, sweep.cols, sweep.baseline_within,
                                  sweep.baseline_for)
    out = [pairs.get(c) for c in range(len(cells))]
    if not any(b is not None for b in out):
        why = f" ({notes[0]})" if notes else ""
        raise SequentialError(f"--seeds auto adds seeds where a cell's paired difference from its baseline is open, "
                              f"and sweep {sweep.name} compares no cell with one{why}; set Sweep.baseline to a row "
                              f"of the sweep, or use --seeds N")
    return out


def trials_needed(baseline_of: list[int | None], n: np.ndarray, price: np.ndarray | None = None) -> np.ndarray:
    """Trials of whole sweeps (S,) given each compared cell's seeds n (S, cells; 0 where not compared):
    a configuration runs the first look, its own seeds, and as many as its most demanding dependant.
    With `price` (C,), each configuration's trial-min, their trial-min instead."""
    need = np.maximum(n, FIRST_SEEDS)                                   # (S, C)
    for c, b in enumerate(baseline_of):
        if b is not None:
            need[:, b] = np.maximum(need[:, b], n[:, c])
    return (need if price is None else need * price).sum(axis=1)


def cost_lines(sweep: Sweep, trials: list[dict], preset: str, prices: list[float | None] | None = None,
               how: str | None = None) -> list[str]:
    """The dry run's trial counts and cost: the least, the expected under two stated assumptions (from
    simulated sweeps, every compared cell independent) and the most. `prices`: each configuration's
    (`configurations(trials)`) committed trial-min, None where it has none (costs.trial_prices, `how`
    saying on which CPU kernels); a configuration without one costs Sweep.minutes_per_trial."""
    cells = configurations(trials)
    known = [p for p in prices or [] if p is not None]
    price = np.array([sweep.minutes_per_trial if p is None else p
                      for p in prices or [None] * len(cells)])  # (C,) trial-min of each configuration
    baseline_of = pairing(cells, sweep)
    plan = plan_of(sweep, trials)
    compared = [c for c, b in enumerate(baseline_of) if b is not None]
    expect = {}
    for effect in (0.0, EFFECT):
        rng = np.random.default_rng(0)
        n = np.zeros((DRY_RUN_SWEEPS, len(cells)), dtype=int)
        for c in compared:
            n[:, c] = simulate(plan, effect, SPREAD, DRY_RUN_SWEEPS, rng)["n"]
        expect[effect] = (float(trials_needed(baseline_of, n).mean()),
                          float(trials_needed(baseline_of, n, price).mean()))
    where = "one 2-core CPU machine" if preset == "quick" else "one GPU per trial"
    rule = "O'Brien-Fleming-type" if plan.boundary == "obf" else "Bonferroni"
    cost = lambda k, minutes: f"{k:.0f} trials, {minutes / 60:.1f} trial-hours"
    if not known:
        priced = f"{sweep.minutes_per_trial:g} min per trial, {where}"
    else:
        priced = (f"{len(known)} of {len(cells)} configurations at their committed trial-min"
                  + (f", {len(cells) - len(known)} at {sweep.minutes_per_trial:g} min (Sweep.minutes_per_trial)"
                     if len(known) < len(cells) else "") + (f"; {how}" if how else ""))
    return [f"--seeds auto: {len(cells)} configs, {len(compared)} compared with a baseline; looks at "
            f"{', '.join(map(str, plan.looks))} seeds (seeds {plan.first_seed}-{plan.first_seed + plan.cap - 1} at most), "
            f"each interval at level 1 − {', '.join(f'{1 - lv:.2g}' for lv in plan.levels)} ({rule}, "
            f"{plan.alpha:g} over all looks)",
            f"  least: {cost(len(cells) * plan.looks[0], price.sum() * plan.looks[0])} (every cell decided at "
            f"the first look)",
            f"  expected if no cell differs: {cost(*expect[0.0])}; if every cell differs by {EFFECT:g} point: "
            f"{cost(*expect[EFFECT])} (simulated, seed-to-seed sd {SPREAD:g} points; {priced})",
            f"  most: {cost(len(cells) * plan.cap, price.sum() * plan.cap)} (every cell open to the cap)"]


def sequential_diffs(summary: pd.DataFrame, trials: pd.DataFrame, meta: dict) -> tuple[pd.DataFrame, list[str]]:
    """For a `--seeds auto` sweep: the summary's DIFF_COLS (paired.baseline_diffs) replaced by each cell's
    sequential verdict (the deciding look's mean, interval at the plan's level and pairs), with its
    `verdict` ("differs at 5 seeds", "capped at 16 seeds", ...), and the note naming the procedure.
    The looks are replayed on the summary's metric and `which`: on the final value (the default), what
    the searcher decided on; on another, what that value would have decided."""
    if not meta.get("max_seeds") or "diff_vs_baseline" not in summary.columns or "seed" not in trials.columns:
        return summary, []
    out = summary.copy()
    out["verdict"] = ""
    pairs, _ = baseline_cells(summary, meta.get("baseline"), tuple(meta.get("rows") or ("method", "vd", "mur")),
                              tuple(meta.get("cols") or ()), tuple(meta.get("baseline_within") or ()),
                              meta.get("baseline_for") or {})
    plan = plan_of(meta, trials)
    values = seed_values(trials, summary["metric"].iloc[0], summary["which"].iloc[0])
    ran = _seeds_run(trials)
    gkeys = group_keys(trials)
    key = {i: config_key(summary.loc[i], gkeys) for i in summary.index}
    by_seed = {i: {int(s): values.get(key[i], {}).get(s, np.nan) for s in ran.get(key[i], ())} for i in summary.index}
    for i, j in pairs.items():
        if j is None:
            continue
        v = verdict(by_seed[i], by_seed[j], plan)
        out.loc[i, ["diff_vs_baseline", "diff_ci_low", "diff_ci_high", "n_paired", "verdict"]] = \
            [v.mean, v.lo, v.hi, v.pairs, f"{v.status} at {v.n} seeds"]
    return out, [plan.describe()]


def _seeds_run(trials: pd.DataFrame) -> dict[tuple, set]:
    """{config key: seeds that ended} (finished, failed or diverged: a look counts them, valued or not)."""
    done = trials[trials["status"].isin(("finished", "failed", "diverged"))]
    keys = group_keys(trials)
    out: dict[tuple, set] = {}
    for _, r in done.iterrows():
        out.setdefault(config_key(r, keys), set()).add(int(r["seed"]))
    return out

