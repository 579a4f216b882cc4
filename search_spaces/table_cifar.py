"""MT and ICT x {base, +VD, +MUR, +VD+MUR} on CIFAR-10 {1000, 2000, 4000} and CIFAR-100 10000 labels (Tables 1, 3).

Hypothesis: VD and MUR each lower the error of MT and ICT, and together most for MT; they also
lower the sensitivity (Table 3, measured on CIFAR-10 1000 labels).
    python -m sweeper.run table_cifar --preset quick   # digits, 8 variants x 2 label counts x 2 seeds, ~15 min on 2 cores
    python -m sweeper.run table_cifar                  # 8 x 4 x 3 = 96 trials of 280k steps
"""
from search_spaces import Sweep
from search_spaces.common import CIFAR, CIFAR100_RADIUS, QUICK, variants


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    rows = variants("mt") + variants("ict", entmin_with_vd=0.0)
    if quick:
        return Sweep(name="table_cifar", paper_ref="Tables 1 and 3", base=dict(QUICK),
                     description="MT/ICT x {-, VD, MUR, VD+MUR} error table (digits stand-in)",
                     variants=rows, grid={"num_labels": [50, 100]}, seeds=2,
                     rows=("method", "vd", "mur"), cols=("dataset", "num_labels"), minutes_per_trial=1.0)
    settings = [{"dataset": "cifar10", "num_labels": n} for n in (1000, 2000, 4000)]
    settings.append({"dataset": "cifar100", "num_labels": 10000, "mur_radius": CIFAR100_RADIUS})
    return Sweep(name="table_cifar", paper_ref="Tables 1 and 3", base=dict(CIFAR),
                 description="MT/ICT x {-, VD, MUR, VD+MUR} on CIFAR-10/100",
                 variants=[{**r, **s} for s in settings for r in rows], seeds=3,
                 rows=("method", "vd", "mur"), cols=("dataset", "num_labels"), minutes_per_trial=150)
