"""MT+MUR over the radius r (paper Fig. ablation (c): CIFAR-10, 1000 labels, r in {4,7,10,20,40}).

Hypothesis: too small an r finds no uncertain point, too large an r leaves the data manifold;
the paper's error is lowest at r = 10 (17.96 vs MT 19.63).
    python -m sweeper.run ablation_radius --preset quick   # digits, 5 radii x 2 seeds, ~4 min on 2 CPU cores
    python -m sweeper.run ablation_radius                  # CIFAR-10, 5 x 3 trials of 280k steps, ~1.7 H100-hours each (MT+MUR: 48 steps/s)
"""
from search_spaces import Sweep
from search_spaces.common import CIFAR, QUICK


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    return Sweep(
        name="ablation_radius", paper_ref="Fig. 3(c)",
        description="MT+MUR (direct) test error vs the radius r",
        base={**(QUICK if quick else CIFAR), "method": "mt", "mur": "direct"},
        grid={"mur_radius": [0.25, 0.5, 1.0, 2.0, 4.0] if quick else [4.0, 7.0, 10.0, 20.0, 40.0]},
        seeds=2 if quick else 3, rows=("method", "mur"), cols=("mur_radius",),
        minutes_per_trial=0.8 if quick else 100)
