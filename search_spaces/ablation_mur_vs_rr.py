"""MT+MUR vs MT+RR (random points on the sphere of radius r) over r (paper Fig. 4(c)).

Hypothesis: the most uncertain point beats a random one at moderate r (7, 10) and the advantage
vanishes at large r (20, 40), where the linear approximation no longer holds.
    python -m sweeper.run ablation_mur_vs_rr --preset quick   # digits, 2 x 4 radii x 2 seeds, ~6 min on 2 CPU cores
    python -m sweeper.run ablation_mur_vs_rr                  # CIFAR-10, 2 x 5 x 3 = 30 trials
"""
from search_spaces import Sweep
from search_spaces.common import CIFAR, QUICK


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    return Sweep(
        name="ablation_mur_vs_rr", paper_ref="Fig. 4(c)",
        description="MT+MUR vs MT+RR test error over the radius r",
        base={**(QUICK if quick else CIFAR), "method": "mt"},
        grid={"mur": ["direct", "random"],
              "mur_radius": [0.5, 1.0, 2.0, 4.0] if quick else [4.0, 7.0, 10.0, 20.0, 40.0]},
        baseline={"mur": "random"}, seeds=2 if quick else 3, rows=("mur",), cols=("mur_radius",),
        minutes_per_trial=0.8 if quick else 90)
