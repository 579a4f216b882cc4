"""`--seeds auto` on a real quick sweep beside the same sweep's committed fixed-seed runs: trials used,
wall time, and each compared cell's decision.

    python -m sweeper.run ablation_radius --preset quick --seeds auto --storage results
    python benchmarks/seeds_auto_real.py results/ablation_radius-<stamp>-<id> \\
        --fixed docs/runs/ablation_radius-quick-s0-7 docs/runs/ablation_radius-quick-s8-15
    # adds the comparison to benchmarks/results/seeds_auto_real.json (one entry per auto run and fixed seeds)

Hypothesis: the auto run spends fewer trials than a fixed design with as many seeds as its cap (a cell
decided at an early look gets no more seeds) and never decides a cell the other way. The fixed design's
decision here is the plain 95 % paired t-interval over all its seeds; the auto run's interval is wider
(valid under peeking), so where the fixed interval barely excludes 0 the auto run may call the cell
capped, and the table says so rather than assuming agreement. The fixed runs are committed runs of
the same sweep whose seeds together start at the auto run's first seed, so a seed both ran is the same
trial: its error must be equal in both, which checks that the comparison is of decisions, not data.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from study.claims import read_trials  # noqa: E402
from study.committed_runs import machine_info  # noqa: E402
from sweeper.analysis.stats import excludes_zero, paired_diff  # noqa: E402

KEYS = ("method", "mur", "mur_radius")  # what tells ablation_radius's cells apart
METRIC = "final_test_error"


def cell_of(r: dict) -> tuple:
    return str(r["method"]), str(r["mur"]), f"{float(r['mur_radius']):g}"


def errors(trials: list[dict]) -> dict[tuple, dict[int, float]]:
    """{cell: {seed: final test error}} of the finished trials."""
    out: dict[tuple, dict[int, float]] = {}
    for t in trials:
        if t.get("status") == "finished" and t.get(METRIC) not in (None, ""):
            out.setdefault(cell_of(t), {})[int(t["seed"])] = float(t[METRIC])
    return out


def paired(cell: dict[int, float], base: dict[int, float]) -> dict:
    """The plain 95 % paired t-interval of cell - baseline over the seeds both finished."""
    seeds = sorted(set(cell) & set(base))
    mean, lo, hi, n = paired_diff([cell[s] for s in seeds], [base[s] for s in seeds])
    return {"diff": round(mean, 3), "lo": round(lo, 3), "hi": round(hi, 3), "pairs": n,
            "status": "differs" if excludes_zero(lo, hi) else "open"}


def decision(r: dict) -> dict:
    """An auto run's summary row: the deciding look's difference and interval, and its verdict."""
    if not r.get("diff_ci_low"):
        return {}
    return {"diff": round(float(r["diff_vs_baseline"]), 3), "lo": round(float(r["diff_ci_low"]), 3),
            "hi": round(float(r["diff_ci_high"]), 3), "pairs": int(float(r["n_paired"])),
            "status": (r.get("verdict") or "open").split(" at ")[0]}


def compare(fixed: dict, auto: dict) -> tuple[bool, bool]:
    """(agree, opposite): both runs call the cell "differs" the same way, or neither does; opposite when
    both call it "differs" with opposite signs."""
    fd, ad = fixed.get("status") == "differs", auto.get("status") == "differs"
    opposite = fd and ad and (fixed["diff"] > 0) != (auto["diff"] > 0)
    return fd == ad and not opposite, opposite


def wall_min(folder: Path) -> float:
    """A committed run's machine.json, else what `study.docs add` would write for the results folder."""
    if (folder / "machine.json").is_file():
        return json.loads((folder / "machine.json").read_text())["wall_min"]
    return machine_info(folder, {})["wall_min"]


def comparison(auto_dir: Path, fixed_dirs: list[Path]) -> dict:
    meta = json.loads((auto_dir / "sweep.json").read_text())
    if not meta.get("max_seeds"):
        sys.exit(f"{auto_dir} is not a --seeds auto run (its sweep.json has no max_seeds)")
    if tuple(meta["rows"]) + tuple(meta["cols"]) != KEYS:
        sys.exit(f"{meta['name']}'s cells are told apart by {meta['rows'] + meta['cols']}, not {list(KEYS)}; "
                 f"this comparison is written for ablation_radius's cells")
    if meta.get("baseline_within") or meta.get("baseline_for"):  # the fixed side pairs every cell with one row
        sys.exit(f"{meta['name']} pairs cells with baselines of their own (baseline_within / baseline_for); "
                 f"this comparison pairs every cell with the one baseline row: use a sweep with one baseline")
    for d in fixed_dirs:
        fm = json.loads((d / "sweep.json").read_text())
        if (fm["name"], fm.get("preset")) != (meta["name"], meta.get("preset")):
            sys.exit(f"{d} is {fm['name']} --preset {fm.get('preset')}, not {meta['name']} --preset "
                     f"{meta.get('preset')} as {auto_dir}; pass committed runs of the same sweep and preset")
    with open(auto_dir / "summary.csv", newline="") as f:
        summary = {cell_of(r): r for r in csv.DictReader(f)}
    base = next(c for c, r in summary.items() if r["is_baseline"] == "True")
    fixed = errors([t for d in fixed_dirs for t in read_trials(d)])
    auto = errors(pd.read_parquet(auto_dir / "trials.parquet").to_dict("records"))
    shared = [(c, s) for c in auto for s in auto[c] if s in fixed.get(c, {})]
    cells = []
    for c, r in summary.items():
        a = decision(r)
        if not a:
            continue
        f = paired(fixed[c], fixed[base])
        agree, opposite = compare(f, a)
        cells.append({"cell": dict(zip(KEYS, c)), "seeds_fixed": len(fixed[c]), "seeds_auto": len(auto[c]),
                      "fixed": f, "auto": a, "agree": agree, "opposite": opposite})
    return {"sweep": meta["name"], "preset": meta.get("preset"), "max_seeds": meta["max_seeds"],
            "fixed_runs": [d.name for d in fixed_dirs],
            "trials": {"fixed": sum(len(v) for v in fixed.values()), "auto": sum(len(v) for v in auto.values())},
            "wall_min": {"fixed": round(sum(wall_min(d) for d in fixed_dirs), 1), "auto": wall_min(auto_dir)},
            "shared_trials": len(shared),
            "shared_trials_equal": sum(abs(auto[c][s] - fixed[c][s]) < 1e-4 for c, s in shared), "cells": cells}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("auto", type=Path, help="the --seeds auto run's results folder")
    p.add_argument("--fixed", type=Path, nargs="+", required=True,
                   help="committed fixed-seed runs of the same sweep (folders under docs/runs)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/seeds_auto_real.json")
    args = p.parse_args(argv)
    new = comparison(args.auto, args.fixed)
    old = json.loads(args.out.read_text())["runs"] if args.out.is_file() else []
    runs = [r for r in old if (r["max_seeds"], r["fixed_runs"]) != (new["max_seeds"], new["fixed_runs"])] + [new]
    args.out.write_text(json.dumps({"benchmark": "seeds_auto_real", "runs": runs}, indent=1) + "\n")
    print(json.dumps(new, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
