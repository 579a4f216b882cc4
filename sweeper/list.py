"""List every sweep: what it tests, its trial count per preset and its cost.

A cost is measured, from the preset's committed runs under docs/runs/ (wall time, machine), or says
"no committed run" beside the sweep's planning estimate (Sweep.minutes_per_trial), labelled as one.

    python -m sweeper.list
"""
from __future__ import annotations

import argparse
import sys

from search_spaces import get_sweep, names, presets
from sweeper.costs import NO_RUN, committed


def _n_trials(sweep) -> int:
    return sweep.search["num_samples"] if sweep.search else len(sweep.trials())


def rows() -> list[dict]:
    """One row per sweep; paper_trials is None for a sweep with no paper preset (quick_settings);
    quick_runs: the quick preset's committed runs (sweeper.costs.committed), [] when none."""
    out = []
    for name in names():
        quick = get_sweep(name, "quick")
        paper = get_sweep(name, "paper") if "paper" in presets(name) else None
        nq = _n_trials(quick)
        np_ = _n_trials(paper) if paper else None
        out.append({"name": name, "description": (paper or quick).description,
                    "paper_ref": (paper or quick).paper_ref, "quick_trials": nq,
                    "quick_runs": committed(name, "quick"),
                    "quick_estimate_min": nq * quick.minutes_per_trial, "paper_trials": np_,
                    "paper_runs": committed(name, "paper") if paper else [],
                    "paper_estimate_gpu_h": np_ * paper.minutes_per_trial / 60 if paper else None})
    return out


def quick_text(r: dict) -> str:
    if r["quick_runs"]:
        run = r["quick_runs"][0]
        return f"{run['wall_min']:.1f} min on {run['machine']}"
    return f"{NO_RUN} (estimate {r['quick_estimate_min'] / 2:.0f} min)"


def paper_text(r: dict) -> str:
    if r["paper_trials"] is None:
        return "(quick only)"
    if r["paper_runs"]:
        return f"{r['paper_trials']} trials, {r['paper_runs'][0]['wall_min']:.0f} min"
    return f"{r['paper_trials']} trials, {NO_RUN} (estimate {r['paper_estimate_gpu_h']:.0f} GPU-h)"


def main(argv=None) -> int:
    argparse.ArgumentParser(prog="python -m sweeper.list", description=__doc__.splitlines()[0]).parse_args(argv)
    table = [(r["name"], f"{r['quick_trials']} trials, {quick_text(r)}", paper_text(r),
              f"{r['description']} ({r['paper_ref']})") for r in rows()]
    head = ("sweep", "quick preset: trials, committed run", "paper preset", "what it reproduces")
    widths = [max(len(t[i]) for t in [head, *table]) for i in range(3)]
    for t in [head, *table]:
        print("  ".join(c.ljust(w) for c, w in zip(t, widths)) + "  " + t[3])
    print("committed run: its wall time (docs/runs/<sweep>-<preset>-s<a>-<b>/machine.json); estimate: "
          "Sweep.minutes_per_trial, a planning value (quick: 2 trials at a time on 2 CPU cores; paper: GPU-hours "
          "in all), not a measurement")
    print("run one with: python -m sweeper.run <sweep> --preset quick")
    return 0


if __name__ == "__main__":
    sys.exit(main())
