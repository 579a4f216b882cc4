"""`--seeds auto` simulated: false positives under no effect, power at an effect, and seeds used, against a
fixed design of the same power. No Ray, no training: a fake trial's error is a known mean plus
Gaussian noise (sd --sd points, independent per trial), many sweeps of one cell and its baseline at once.

    python benchmarks/sequential_seeds.py                      # writes benchmarks/results/sequential_seeds.json

Procedures, each over the same planned looks (sweeper/seeds/sequential.py):
  - bonferroni: each look's paired t-interval at level 1 - alpha/K, stop at the first that excludes 0;
  - bonferroni + match margin: also stop when the interval lies inside ± --margin;
  - plain 95 % at every look: the same stopping with uncorrected intervals, the procedure to avoid.
Each is also run at a larger difference (--large). The fixed design is the smallest n whose plain 95 % paired t-test (noncentral t, exact) has at least
the procedure's power at --effect; it runs n seeds whatever the result.
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

from sweeper.seeds.sequential import STATUSES, Plan, simulate  # noqa: E402

DIFFERS = STATUSES.index("differs")


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
    return {"procedure": name, "looks": list(plan.looks), "level_per_look": plan.level if level is None else level,
            "match_margin": plan.match_margin,
            "false_positive_rate": fp, "false_positive_se": math.sqrt(fp * (1 - fp) / args.sweeps),
            "power": power, "mean_seeds_no_effect": float(null["n"].mean()),
            "mean_seeds_effect": float(alt["n"].mean()),
            "matches_no_effect": float((null["status"] == STATUSES.index("matches")).mean()),
            "fixed_seeds_same_power": fixed, "power_large": power_big, "mean_seeds_large": float(big["n"].mean()),
            "fixed_seeds_same_power_large": fixed_seeds_for(power_big, args.large, args.sd)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweeps", type=int, default=20_000, help="simulated sweeps per procedure and effect")
    p.add_argument("--sd", type=float, default=0.8, help="seed-to-seed sd of one trial's error, points")
    p.add_argument("--effect", type=float, default=1.0, help="the cell's true difference from its baseline, points")
    p.add_argument("--large", type=float, default=2.0, help="a second, larger difference, points")
    p.add_argument("--margin", type=float, default=1.0, help="the match margin of the second procedure, points")
    p.add_argument("--cap", type=int, default=16, help="--max-seeds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/sequential_seeds.json")
    args = p.parse_args(argv)
    plan = Plan(cap=args.cap)
    rows = [measure("bonferroni", plan, None, args),
            measure("bonferroni + match margin", Plan(cap=args.cap, match_margin=args.margin), None, args),
            measure("plain 95 % at every look", plan, 0.95, args)]
    out = {"benchmark": "sequential_seeds", "command": " ".join(["python benchmarks/sequential_seeds.py", *(argv or sys.argv[1:])]),
           "sweeps": args.sweeps, "sd": args.sd, "effect": args.effect, "large": args.large, "cap": args.cap, "alpha": plan.alpha,
           "seed": args.seed, "power_ceiling": POWER_CEILING, "procedures": rows}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(f"{r['procedure']:>28}: false positives {r['false_positive_rate']:.3f}, power {r['power']:.3f}, "
              f"seeds {r['mean_seeds_no_effect']:.1f} (no effect) / {r['mean_seeds_effect']:.1f} (effect), "
              f"fixed design of that power: {r['fixed_seeds_same_power']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
