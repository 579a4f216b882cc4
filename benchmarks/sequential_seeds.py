"""`--seeds auto` simulated: false positives under no effect, power at an effect, and seeds used, against a
fixed design of the same power, for each boundary; then whole sweeps where most cells have no effect.
No Ray, no training: a fake trial's error is a known mean plus Gaussian noise (sd --sd points,
independent per trial), many sweeps of one cell and its baseline at once (numpy, vectorised).

    python benchmarks/sequential_seeds.py                      # writes benchmarks/results/sequential_seeds.json

Hypothesis: the 3-seed look costs power and almost never decides (at 2 degrees of freedom a
Bonferroni look's half-width is about 5.7 sd of the differences), so at the same false-positive
rate a boundary that spends almost nothing early (O'Brien-Fleming type) has more power at a 1-point
effect than Bonferroni over every look, or over the looks without the 3-seed one. Procedures
(sweeper/seeds/sequential.py):
  - Bonferroni over today's looks (3, 5, 8, 12, 16): each look at 1 - alpha/K;
  - Bonferroni without the 3-seed look (5, 8, 12, 16): every configuration starts with 5 seeds;
  - O'Brien-Fleming type over today's looks, calibrated (obf_constant) to the first one's simulated
    false-positive rate, so that the power of the three is compared at one false-positive rate;
  - the kept procedure (the O'Brien-Fleming type calibrated to alpha), alone and with a match margin;
  - plain 95 % at every look: the same stopping with uncorrected intervals, the procedure to avoid.
Each is also run at a larger difference (--large). The fixed design is the smallest n whose plain 95 %
paired t-test (noncentral t, exact) has at least the procedure's power at --effect; it runs n seeds
whatever the result. The null-heavy sweeps: --cells cells compared with one baseline, a fraction
without effect and the rest at --effect, every cell independent (the shared baseline's correlation
left out, as the dry run's estimate does); the adaptive sweep's trials (each cell's seeds, the
baseline as many as its most demanding cell) against the fixed design of the same power (that of
Bonferroni over every look, and that of the kept procedure).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweeper.seeds.auto_seeds import trials_needed  # noqa: E402
from sweeper.seeds.sequential import STATUSES, Plan, simulate  # noqa: E402

DIFFERS = STATUSES.index("differs")
NULL_FRACTIONS = (0.0, 0.5, 0.9)  # the null-heavy sweeps' share of cells without effect


def fixed_power(n: int, effect: float, sd: float, level: float = 0.95) -> float:
    """Power of the two-sided paired t-test over n seeds: the difference of two trials has sd * sqrt(2)."""
    if n < 2:
        return 0.0
    nc = effect / (sd * math.sqrt(2.0)) * math.sqrt(n)
    crit = stats.t.ppf(0.5 + level / 2.0, n - 1)
    return float(stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc))


POWER_CEILING = 0.99  # a simulated power near 1 is matched at this: a fixed design never reaches 1 exactly


def fixed_seeds_for(power: float, effect: float, sd: float, most: int = 200) -> int | None:
    """The fewest seeds of a fixed design whose power reaches `power`, at most POWER_CEILING (None beyond `most`)."""
    return next((n for n in range(2, most + 1) if fixed_power(n, effect, sd) >= min(power, POWER_CEILING)), None)


def measure(name: str, plan: Plan, level: float | None, args) -> dict:
    null = simulate(plan, 0.0, args.sd, args.sweeps, np.random.default_rng(args.seed), level)
    alt = simulate(plan, args.effect, args.sd, args.sweeps, np.random.default_rng(args.seed + 1), level)
    fp = float((null["status"] == DIFFERS).mean())
    power = float(((alt["status"] == DIFFERS) & (alt["mean"] > 0)).mean())
    fixed = fixed_seeds_for(power, args.effect, args.sd)
    big = simulate(plan, args.large, args.sd, args.sweeps, np.random.default_rng(args.seed + 2), level)
    power_big = float(((big["status"] == DIFFERS) & (big["mean"] > 0)).mean())
    levels = list(plan.levels) if level is None else [level] * len(plan.looks)
    return {"procedure": name, "boundary": plan.boundary if level is None else "none", "alpha": plan.alpha,
            "looks": list(plan.looks), "level_per_look": levels, "match_margin": plan.match_margin,
            "false_positive_rate": fp, "false_positive_se": math.sqrt(fp * (1 - fp) / args.sweeps),
            "power": power, "mean_seeds_no_effect": float(null["n"].mean()),
            "mean_seeds_effect": float(alt["n"].mean()),
            "decided_at_first_look_effect": float(((alt["status"] == DIFFERS) & (alt["n"] == plan.looks[0])).mean()),
            "matches_no_effect": float((null["status"] == STATUSES.index("matches")).mean()),
            "fixed_seeds_same_power": fixed, "power_large": power_big, "mean_seeds_large": float(big["n"].mean()),
            "fixed_seeds_same_power_large": fixed_seeds_for(power_big, args.large, args.sd)}


def null_heavy(name: str, plan: Plan, fixed_n: int, args) -> list[dict]:
    """Whole sweeps of args.cells cells and their baseline, a fraction of the cells without effect: mean
    trials of the adaptive sweep and of the fixed design (fixed_n seeds everywhere), and the cells each
    calls "differs" rightly (effect cells, right direction) and wrongly (no-effect cells)."""
    out = []
    for frac in NULL_FRACTIONS:
        nulls = round(frac * args.cells)
        rng = np.random.default_rng(args.seed + 10)
        n = np.zeros((args.sweeps, args.cells + 1), dtype=int)              # (S, 1 + C) seeds: baseline, cells
        right = np.zeros(args.sweeps)
        wrong = np.zeros(args.sweeps)
        for c in range(args.cells):
            r = simulate(plan, 0.0 if c < nulls else args.effect, args.sd, args.sweeps, rng)
            n[:, 1 + c] = r["n"]
            hit = r["status"] == DIFFERS
            if c < nulls:
                wrong += hit
            else:
                right += hit & (r["mean"] > 0)
        trials = trials_needed([None] + [0] * args.cells, n)                # (S,) the dry run's count
        out.append({"procedure": name, "cells": args.cells, "no_effect_cells": nulls,
                    "mean_trials": float(trials.mean()), "fixed_trials": (args.cells + 1) * fixed_n,
                    "fixed_seeds": fixed_n, "right_differs": float(right.mean()), "wrong_differs": float(wrong.mean())})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweeps", type=int, default=20_000, help="simulated sweeps per procedure and effect")
    p.add_argument("--sd", type=float, default=0.8, help="seed-to-seed sd of one trial's error, points")
    p.add_argument("--effect", type=float, default=1.0, help="the cell's true difference from its baseline, points")
    p.add_argument("--large", type=float, default=2.0, help="a second, larger difference, points")
    p.add_argument("--margin", type=float, default=1.0, help="the match margin of the margin procedure, points")
    p.add_argument("--cap", type=int, default=16, help="--max-seeds")
    p.add_argument("--cells", type=int, default=10, help="compared cells of a null-heavy sweep")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/sequential_seeds.json")
    args = p.parse_args(argv)
    bonf = Plan(cap=args.cap, boundary="bonferroni")
    rows = [measure("Bonferroni, every look", bonf, None, args),
            measure("Bonferroni, no 3-seed look", Plan(cap=args.cap, first=5, boundary="bonferroni"), None, args)]
    same_fp = rows[0]["false_positive_rate"]  # the O'Brien-Fleming type compared at Bonferroni's own rate
    rows.append(measure("O'Brien-Fleming type, Bonferroni's false positives",
                        Plan(cap=args.cap, boundary="obf", alpha=same_fp), None, args))
    compared = rows[:3]
    best = max(compared, key=lambda r: r["power"])
    kept = Plan(cap=args.cap, boundary=best["boundary"], first=best["looks"][0])
    rows += [measure("kept", kept, None, args),
             measure("kept + match margin", Plan(cap=args.cap, boundary=kept.boundary, first=kept.first,
                                                 match_margin=args.margin), None, args),
             measure("plain 95 % at every look", bonf, 0.95, args)]
    sweeps = (null_heavy("Bonferroni, every look", bonf, rows[0]["fixed_seeds_same_power"], args)
              + null_heavy("kept", kept, rows[3]["fixed_seeds_same_power"], args)
              + null_heavy("kept + match margin", Plan(cap=args.cap, boundary=kept.boundary, first=kept.first,
                                                       match_margin=args.margin), rows[3]["fixed_seeds_same_power"], args))
    out = {"benchmark": "sequential_seeds", "command": " ".join(["python benchmarks/sequential_seeds.py", *(argv or sys.argv[1:])]),
           "sweeps": args.sweeps, "sd": args.sd, "effect": args.effect, "large": args.large, "cap": args.cap,
           "alpha": kept.alpha, "seed": args.seed, "power_ceiling": POWER_CEILING, "margin": args.margin,
           "best_power": best["procedure"], "kept_boundary": kept.boundary,
           "procedures": rows, "null_heavy": sweeps}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(f"{r['procedure']:>52}: false positives {r['false_positive_rate']:.4f}, power {r['power']:.3f}, "
              f"seeds {r['mean_seeds_no_effect']:.1f} (no effect) / {r['mean_seeds_effect']:.1f} (effect), "
              f"fixed design of that power: {r['fixed_seeds_same_power']}")
    for r in sweeps:
        print(f"{r['procedure']:>20}, {r['no_effect_cells']}/{r['cells']} cells without effect: {r['mean_trials']:.1f} "
              f"trials against {r['fixed_trials']} fixed; differs right {r['right_differs']:.2f}, wrong {r['wrong_differs']:.2f}")
    print(f"best power at {args.effect:g} point: {best['procedure']}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
