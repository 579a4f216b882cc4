"""MT+MUR over the radius r (paper Fig. ablation (c): CIFAR-10, 1000 labels, r in {4,7,10,20,40}).

Hypothesis: too small an r finds no uncertain point, too large an r leaves the data manifold;
the paper's error is lowest at r = 10 (17.96 vs MT 19.63). Baseline row: MT without MUR, whose
paired difference every MT+MUR cell shows. Entropy minimisation is 0 in every row (the authors'
MeanTeacher_MUR/run_cifar10.py), so the rows differ only in MUR and r.
    python -m sweeper.run ablation_radius                  # CIFAR-10, (5 + 1) x 3 trials of 280k steps, ~1.7 H100-hours each (MT+MUR: 48 steps/s)

Quick preset (digits, 100 labels, 1000 steps): MT, MT+MUR at three radii (0.5, 1, 2) around the
standardised 64-dim digits' scale, and LabelSpreading as the classical baseline, 3 seeds.
    python -m sweeper.run ablation_radius --preset quick   # digits, 5 rows x 3 seeds, 3.5 min measured on 2 CPU cores

MNIST preset (real MNIST, 100 labels, ConvNet-13 at width 0.5, common.MNIST): MT and MT+MUR at
r in {2, 4, 8, 10, 16}, 3 seeds. The grid is four times the quick radii with r = 4 (0.5, 1, 2, 4 -> 2, 4, 8, 16):
r is an L2 distance per image, and a standardised 32x32 one-channel image has norm ~ sqrt(1024) = 32
against sqrt(64) = 8 for a standardised 8x8 digit, so 4x keeps r / |x|; r = 10 is added because it is
the paper's CIFAR-10 value.
    python -m sweeper.run ablation_radius --preset mnist   # 6 rows x 3 seeds; per trial ~3 GPU-min (hours on a CPU)
"""
from search_spaces import Sweep
from search_spaces.common import BASELINE_MT, CIFAR, LABEL_SPREADING, QUICK, authors_rows
from search_spaces.common import MNIST, MNIST_MINUTES

QUICK_RADII = [0.5, 1.0, 2.0]
# 1000 steps (schedules scaled from QUICK's 1500) and three radii so that 5 rows x 3 seeds fit in 5 minutes
# on 2 cores (with r = 4 as well, 18 trials took 5.4 min; r = 4 gave 4.00 +- 0.38, no gain over MT)
QUICK_SHORT = {**QUICK, "steps": 1000, "lr_rampdown": 250, "rampup": 200, "eval_every": 250}
PAPER_RADII = [4.0, 7.0, 10.0, 20.0, 40.0]


PRESETS = ("paper", "quick", "mnist")
MNIST_RADII = [2.0, 4.0, 8.0, 10.0, 16.0]


def _mnist_sweep() -> Sweep:
    rows = [BASELINE_MT] + [{**BASELINE_MT, "mur": "direct", "mur_radius": r} for r in MNIST_RADII]
    return Sweep(name="ablation_radius", paper_ref="Fig. 3(c) (MNIST stand-in)",
                 description="MT+MUR (direct) test error vs the radius r, against MT, on MNIST",
                 base=dict(MNIST), variants=rows, baseline={"method": "mt", "mur": "none"},
                 seeds=3, rows=("method", "mur"), cols=("mur_radius",), minutes_per_trial=MNIST_MINUTES)


def sweep(preset: str) -> Sweep:
    if preset == "mnist":
        return _mnist_sweep()
    quick = preset == "quick"
    radii = QUICK_RADII if quick else PAPER_RADII
    rows = ([LABEL_SPREADING] if quick else []) + [BASELINE_MT]
    rows += [{**BASELINE_MT, "mur": "direct", "mur_radius": r} for r in radii]
    rows = rows if quick else authors_rows(rows, "cifar10")  # paper: the authors' BN statistics pass
    return Sweep(
        name="ablation_radius", paper_ref="Fig. 3(c)",
        description="MT+MUR (direct) test error vs the radius r, against MT",
        base=dict(QUICK_SHORT if quick else CIFAR), variants=rows, baseline={"method": "mt", "mur": "none"},
        seeds=3, rows=("method", "mur"), cols=("mur_radius",),
        minutes_per_trial=0.5 if quick else 100)
