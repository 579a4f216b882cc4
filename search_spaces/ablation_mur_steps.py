"""MT+MUR with iterative x*: GA vs PGA over step size {0.1,1,10} x steps {2,5,8} (Fig. 4(a),(b), appendix).

Hypothesis: iterating finds more uncertain points than the direct approximation (the baseline row);
the paper's best GA is (0.1, 8) at 17.21 and best PGA (1.0, 2) at 16.81 vs direct 17.96 (CIFAR-10,
1000 labels). Entropy minimisation 0 in every row (the authors' MeanTeacher_MUR run file).
    python -m sweeper.run ablation_mur_steps --preset quick   # digits, LabelSpreading + direct + 2 x 2 x 2 rows, 5 seeds, ~30 min on 2 CPU cores
Measured (2026-11-26, 2-core CPU, 29.3 min, final test error %, 5 seeds): direct 2.76; PGA (alpha,
steps) (0.1, 2) / (0.1, 5) / (10, 2) / (10, 5): 3.24 / 3.02 / 2.71 / 2.71; GA: 3.07 / 2.76 / 3.96 /
3.87; LabelSpreading 4.58. No iterated point beats direct (PGA at alpha 10: -0.04 [-0.70, +0.61] and
-0.04 [-0.97, +0.88]); GA with alpha 10 is worse: +1.20 [+0.45, +1.95] (2 steps), +1.11 [+0.46, +1.76]
(5 steps). On digits iterating does not help, and GA's large steps (held by a penalty, not a
projection) hurt. At 3 seeds
(19.3 min) no interval excluded 0.
    python -m sweeper.run ablation_mur_steps                  # CIFAR-10, (1 + 2 x 9) x 3 = 57 trials
"""
from search_spaces import Sweep
from search_spaces.common import CIFAR, LABEL_SPREADING, QUICK, QUICK_SEEDS, authors_rows


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    sizes, steps = ([0.1, 10.0], [2, 5]) if quick else ([0.1, 1.0, 10.0], [2, 5, 8])
    rows = ([LABEL_SPREADING] if quick else []) + [{"method": "mt", "mur": "direct", "mur_steps": 1}]
    rows += [{"method": "mt", "mur": m, "mur_step_size": a, "mur_steps": s} for m in ("ga", "pga") for a in sizes for s in steps]
    rows = rows if quick else authors_rows(rows, "cifar10")  # paper: the authors' BN statistics pass
    return Sweep(
        name="ablation_mur_steps", paper_ref="Fig. 4(a), 4(b); appendix GA vs PGA",
        description="MT+MUR, GA vs PGA updates of x* over step size and number of steps, against direct",
        base={**(QUICK if quick else CIFAR), "method": "mt"}, variants=rows,
        baseline={"method": "mt", "mur": "direct"}, seeds=QUICK_SEEDS if quick else 3,
        rows=("method", "mur", "mur_steps"),
        cols=("mur_step_size",), minutes_per_trial=1.2 if quick else 200)
