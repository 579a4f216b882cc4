"""MUT (Pi + MUR without the Pi term) over r, direct vs PGA (lr 0.3, 5 steps) (paper Fig. MUT, SVHN 1000 labels).

Hypothesis: direct MUT is best at small r (3.58 at r = 0.5) and degrades as r grows, while PGA,
which may stop inside the ball, tolerates larger r.
    python -m sweeper.run mut_radius --preset quick   # digits, 2 x 4 radii x 2 seeds, ~6 min on 2 CPU cores
    python -m sweeper.run mut_radius                  # SVHN, 2 x 5 x 3 = 30 trials
"""
from search_spaces import Sweep
from search_spaces.common import QUICK, SVHN_PI


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    return Sweep(
        name="mut_radius", paper_ref="Fig. MUT (ablation), SVHN 1000 labels",
        description="MUT test error vs r, direct vs PGA (step 0.3, 5 steps)",
        base={**(QUICK if quick else SVHN_PI), "method": "mut", "mur_step_size": 0.3},
        variants=[{"mur": "direct", "mur_steps": 1}, {"mur": "pga", "mur_steps": 5}],
        grid={"mur_radius": [0.25, 0.5, 1.0, 2.0] if quick else [0.5, 1.0, 2.0, 5.0, 10.0]},
        baseline={"mur": "direct"}, seeds=2 if quick else 3, rows=("method", "mur"), cols=("mur_radius",),
        minutes_per_trial=0.8 if quick else 120)
