"""MT and ICT x {base, +VD, +MUR, +VD+MUR} on CIFAR-10 {1000, 2000, 4000} and CIFAR-100 10000 labels (Tables 1, 3).

Hypothesis: VD and MUR each lower the error of MT and ICT, and together most for MT; they also
lower the sensitivity (Table 3, measured on CIFAR-10 1000 labels). Baseline row: MT.

Paper preset: the authors' settings, entropy minimisation included as in their run file of each
method, variant and data set (search_spaces/common.py AUTHORS_ENTMIN): on CIFAR-10 MT, MT+VD and
ICT use 0.1, MT+MUR and the other ICT rows 0; the row labels name it wherever rows differ in it.
The authors' run files also hold MT and ICT series without it; docs/DECISIONS.md says why Table 1
reports the 0.1 ones, and `--set entmin_coef=0` runs the others (those cells then get no delta).
    python -m sweeper.run table_cifar                  # 8 x 4 x 3 = 96 trials of 280k steps

Quick preset (digits, 100 labels, 5 seeds): MT and ICT x {base, +VD, +MUR, +VD+MUR}, entropy
minimisation 0 in every row so that each row changes the knobs its label names, plus scikit-learn's
LabelSpreading (kernel width chosen on the validation split) as the classical baseline. The supervised
network and the entropy-minimisation rows are left out to fit the quick budget; on digits the MT rows
also grade Table 2's MT findings (table_svhn's quick preset runs the Pi-model's rows).
    python -m sweeper.run table_cifar --preset quick   # digits, 9 rows x 5 seeds

MNIST preset (real MNIST, 100 labels, ConvNet-13 at width 0.5, 5000 steps, common.MNIST): supervised
and MT x {base, +VD, +MUR, +VD+MUR} (entmin 0), 3 seeds, ICT left out as in the quick table. Other papers' MNIST-100 errors are
sweeper.analysis.paper_results.literature("mnist", 100), shown beside the cells, never as the paper's number.
    python -m sweeper.run table_cifar --preset mnist   # 5 rows x 3 seeds, GPU work (common.MNIST says why)
"""
from search_spaces import Sweep
from search_spaces.common import (BASELINE_MT, CIFAR, CIFAR100_RADIUS, LABEL_SPREADING, QUICK, SUPERVISED,
                                  variants)
from search_spaces.common import MNIST, MNIST_MINUTES

QUICK_ROWS = [LABEL_SPREADING] + [{**BASELINE_MT, "method": m, "vd": vd, "mur": mur}  # entmin 0 everywhere
                                   for m in ("mt", "ict") for vd, mur in ((False, "none"), (True, "none"),
                                                                          (False, "direct"), (True, "direct"))]


PRESETS = ("paper", "quick", "mnist")
MNIST_ROWS = [SUPERVISED] + variants("mt", "mnist")  # LabelSpreading: too many images for its rbf kernel


def _mnist_sweep() -> Sweep:
    return Sweep(name="table_cifar", paper_ref="Tables 1 and 3 (MNIST stand-in)", base=dict(MNIST),
                 description="supervised and MT x {-, VD, MUR, VD+MUR} on MNIST, 100 labels",
                 variants=MNIST_ROWS, seeds=3, baseline={"method": "mt", "vd": False, "mur": "none"},
                 rows=("method", "vd", "mur"), cols=("dataset", "num_labels"), minutes_per_trial=MNIST_MINUTES)


def sweep(preset: str) -> Sweep:
    if preset == "mnist":
        return _mnist_sweep()
    if preset == "quick":
        return Sweep(name="table_cifar", paper_ref="Tables 1 and 3", base=dict(QUICK),
                     description="MT/ICT x {-, VD, MUR, VD+MUR} vs LabelSpreading (digits)",
                     variants=QUICK_ROWS, seeds=5, baseline={"method": "mt", "vd": False, "mur": "none"},
                     baseline_within=("method",), rows=("method", "vd", "mur"), cols=("dataset", "num_labels"),
                     minutes_per_trial=0.9)
    settings = [{"dataset": "cifar10", "num_labels": n} for n in (1000, 2000, 4000)]
    settings.append({"dataset": "cifar100", "num_labels": 10000, "mur_radius": CIFAR100_RADIUS})
    return Sweep(name="table_cifar", paper_ref="Tables 1 and 3", base=dict(CIFAR),
                 description="MT/ICT x {-, VD, MUR, VD+MUR} on CIFAR-10/100",
                 variants=[{**r, **s} for s in settings for m in ("mt", "ict") for r in variants(m, s["dataset"])],
                 seeds=3, baseline={"method": "mt", "vd": False, "mur": "none"}, baseline_within=("method",),
                 rows=("method", "vd", "mur", "entmin_coef"), cols=("dataset", "num_labels"), minutes_per_trial=150)
