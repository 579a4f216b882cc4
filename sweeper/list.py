"""List every sweep: what it tests, its trial count per preset and a cost estimate.

    python -m sweeper.list
"""
from __future__ import annotations

import argparse
import sys

from search_spaces import get_sweep, names, presets


def _n_trials(sweep) -> int:
    return sweep.search["num_samples"] if sweep.search else len(sweep.trials())


def rows() -> list[dict]:
    """One row per sweep; paper_trials is None for a sweep with no paper preset (quick_settings)."""
    out = []
    for name in names():
        quick = get_sweep(name, "quick")
        paper = get_sweep(name, "paper") if "paper" in presets(name) else None
        nq = _n_trials(quick)
        np_ = _n_trials(paper) if paper else None
        out.append({"name": name, "description": (paper or quick).description,
                    "paper_ref": (paper or quick).paper_ref, "quick_trials": nq,
                    "quick_minutes": nq * quick.minutes_per_trial, "paper_trials": np_,
                    "paper_gpu_hours": np_ * paper.minutes_per_trial / 60 if paper else None})
    return out


def main(argv=None) -> int:
    argparse.ArgumentParser(prog="python -m sweeper.list", description=__doc__.splitlines()[0]).parse_args(argv)
    print(f"{'sweep':<20} {'quick':>14} {'paper':>20}  what it reproduces")
    for r in rows():
        paper = (f"{r['paper_trials']:>4} trials {r['paper_gpu_hours']:>5.0f} GPU-h" if r["paper_trials"] is not None
                 else f"{'(quick only)':>20}")
        print(f"{r['name']:<20} {r['quick_trials']:>4} trials {r['quick_minutes'] / 2:>3.0f}m {paper}  "
              f"{r['description']} ({r['paper_ref']})")
    print("quick: minutes on a 2-core CPU machine (2 trials at a time); paper: GPU-hours in all.")
    print("run one with: python -m sweeper.run <sweep> --preset quick")
    return 0


if __name__ == "__main__":
    sys.exit(main())
