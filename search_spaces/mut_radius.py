"""MUT (Pi + MUR without the Pi term) over r, direct vs PGA (lr 0.3, 5 steps) (paper Fig. MUT, SVHN 1000 labels).

Hypothesis: direct MUT is best at small r (3.58 at r = 0.5) and degrades as r grows, while PGA,
which may stop inside the ball, tolerates larger r. Baseline row: direct MUT at the same r.
    python -m sweeper.run mut_radius --preset quick   # digits, 2 x 3 radii + LabelSpreading, 5 seeds
    python -m sweeper.run mut_radius                  # SVHN, 2 x 5 x 3 = 30 trials
"""
from search_spaces import Sweep
from search_spaces.common import LABEL_SPREADING, QUICK, QUICK_SEEDS, SVHN_PI


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    # quick: a small and a large r (0.5 dropped to fit the quick budget), and the Pi-model MUT is compared with
    radii = [0.25, 1.0] if quick else [0.5, 1.0, 2.0, 5.0, 10.0]
    rows = [{"method": "mut", "mur": m, "mur_steps": s, "mur_step_size": 0.3, "mur_radius": r}
            for m, s in (("direct", 1), ("pga", 5)) for r in radii]
    rows = ([{"method": "pi", "mur": "none"}] if quick else []) + rows
    return Sweep(
        name="mut_radius", paper_ref="Fig. MUT (ablation), SVHN 1000 labels",
        description="MUT test error vs r, direct vs PGA (step 0.3, 5 steps)",
        base=dict(QUICK if quick else SVHN_PI), variants=([LABEL_SPREADING] if quick else []) + rows,
        baseline={"method": "mut", "mur": "direct"}, seeds=QUICK_SEEDS if quick else 3,
        rows=("method", "mur"), cols=("mur_radius",),
        minutes_per_trial=1.1 if quick else 120)
