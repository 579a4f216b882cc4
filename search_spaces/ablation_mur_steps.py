"""MT+MUR with iterative x*: GA vs PGA over step size {0.1,1,10} x steps {2,5,8} (Fig. 4(a),(b), appendix).

Hypothesis: iterating finds more uncertain points than the direct approximation (the baseline row);
the paper's best GA is (0.1, 8) at 17.21 and best PGA (1.0, 2) at 16.81 vs direct 17.96 (CIFAR-10,
1000 labels). Entropy minimisation 0 in every row (the authors' MeanTeacher_MUR run file).
    python -m sweeper.run ablation_mur_steps --preset quick   # digits, LabelSpreading + direct + 2 x 2 x 2 rows, 5 seeds
    python -m sweeper.run ablation_mur_steps                  # CIFAR-10, (1 + 2 x 9) x 3 = 57 trials
"""
from search_spaces import Sweep
from search_spaces.common import CIFAR, LABEL_SPREADING, QUICK, QUICK_SEEDS, authors_rows


# Quick preset: the cells docs/claims.json names, not the 2 x 3 x 3 grid: GA at (alpha, s) = (0.1, 2), (0.1, 5),
# (1, 2), (10, 2) (alpha and s each varied from (0.1, 2)) and PGA at (0.1, 2) and (1, 2) (GA vs PGA at two
# step sizes), beside direct. Dropped to fit the quick budget: 8 steps (5 stands for "many"), every PGA
# setting with 5 steps, and GA / PGA at (1, 5), (10, 5).
QUICK_CELLS = [("ga", 0.1, 2), ("ga", 0.1, 5), ("ga", 1.0, 2), ("ga", 10.0, 2), ("pga", 0.1, 2), ("pga", 1.0, 2)]


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    rows = ([LABEL_SPREADING] if quick else []) + [{"method": "mt", "mur": "direct", "mur_steps": 1}]
    cells = QUICK_CELLS if quick else [(m, a, s) for m in ("ga", "pga") for a in (0.1, 1.0, 10.0) for s in (2, 5, 8)]
    rows += [{"method": "mt", "mur": m, "mur_step_size": a, "mur_steps": s} for m, a, s in cells]
    rows = rows if quick else authors_rows(rows, "cifar10")  # paper: the authors' BN statistics pass
    return Sweep(
        name="ablation_mur_steps", paper_ref="Fig. 4(a), 4(b); appendix GA vs PGA",
        description="MT+MUR, GA vs PGA updates of x* over step size and number of steps, against direct",
        base={**(QUICK if quick else CIFAR), "method": "mt"}, variants=rows,
        baseline={"method": "mt", "mur": "direct"}, seeds=QUICK_SEEDS if quick else 3,
        rows=("method", "mur", "mur_steps"),
        cols=("mur_step_size",), minutes_per_trial=1.2 if quick else 200)
