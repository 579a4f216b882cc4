"""MT+MUR vs MT+RR (random points on the sphere of radius r) over r (paper Fig. 4(c)).

Hypothesis: the most uncertain point beats a random one at moderate r (7, 10) and the advantage
vanishes at large r (20, 40), where the linear approximation no longer holds. Baseline row: RR, so
each MUR cell shows its paired difference from the random point at the same r. Entropy
minimisation 0 in every row (the authors' MeanTeacher_MUR run file).
    python -m sweeper.run ablation_mur_vs_rr --preset quick   # digits, 2 x 3 radii + LabelSpreading, 5 seeds
    python -m sweeper.run ablation_mur_vs_rr                  # CIFAR-10, 2 x 5 x 3 = 30 trials
"""
from search_spaces import Sweep
from search_spaces.common import CIFAR, LABEL_SPREADING, QUICK, QUICK_SEEDS, authors_rows


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    # quick: the fitting r (1) and a large one (4, as ablation_radius); 0.5 and 2 dropped to fit the quick budget
    radii = [1.0, 4.0] if quick else [4.0, 7.0, 10.0, 20.0, 40.0]
    rows = [{"method": "mt", "mur": m, "mur_radius": r} for m in ("direct", "random") for r in radii]
    rows = rows if quick else authors_rows(rows, "cifar10")  # paper: the authors' BN statistics pass
    return Sweep(
        name="ablation_mur_vs_rr", paper_ref="Fig. 4(c)",
        description="MT+MUR vs MT+RR test error over the radius r",
        base=dict(QUICK if quick else CIFAR), variants=([LABEL_SPREADING] if quick else []) + rows,
        baseline={"method": "mt", "mur": "random"}, seeds=QUICK_SEEDS if quick else 3, rows=("method", "mur"), cols=("mur_radius",),
        minutes_per_trial=1.0 if quick else 90)
