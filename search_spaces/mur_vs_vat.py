"""MUR vs VAT: the most uncertain point vs the virtual adversarial point, side by side.

Two parts, each a config switch away from the other:
1. MT with the MUR loss at three points over the radius r (VAT's epsilon): MUR (direct), VAT's
   point (mur=vat: the same squared-error loss at VAT's power-iteration point) and RR (random).
   CIFAR-10 1000 labels, the paper's MT protocol and radius grid (as ablation_mur_vs_rr).
2. MUT (Pi + MUR without the Pi term) vs VAT on SVHN 1000 labels: MUT with MUR's point, MUT
   with VAT's point, and VAT alone (method=vat: VAT's KL loss, alpha = 1 as cons_coef, plus
   entropy minimisation 1.0, i.e. VAT+EntMin, whose reported SVHN 1000-label error is 3.86 +- 0.11).
Hypothesis: MUR's point beats VAT's and RR's at moderate r (the paper's argument: VAT's x* may be
a confident point of another class, MUR's is always the most uncertain one); at large r all three
leave the data manifold and converge. On SVHN, MUT (paper: 3.58 at r = 0.5) beats VAT+EntMin (3.86).
VAT uses one power iteration (mur_steps = 1, Miyato et al.) and xi = 1e-3 (trainables/mur.py).
    python -m sweeper.run mur_vs_vat --preset quick   # digits, (3 x 2 + 3 + LabelSpreading) x 5 = 50 trials
    python -m sweeper.run mur_vs_vat                  # (3 x 5 + 3 x 4) x 3 = 81 trials of 280k steps
Cost: a trial's steps cost about MT+MUR's plus VAT's extra passes (docs/PERFORMANCE.md has MT+MUR's).
"""
from search_spaces import Sweep
from search_spaces.common import CIFAR, LABEL_SPREADING, QUICK, QUICK_SEEDS, SVHN_PI, authors_rows

POINTS = ("direct", "vat", "random")  # MUR, VAT, RR
VAT_ALONE = {"method": "vat", "mur": "none", "cons_coef": 1.0, "entmin_coef": 1.0}


def _part2(base: dict, radii: list[float]) -> list[dict]:
    rows = [{"method": "mut", "mur": "direct"}, {"method": "mut", "mur": "vat"}, VAT_ALONE]
    return [{**base, **row, "mur_radius": r} for row in rows for r in radii]


def sweep(preset: str) -> Sweep:
    if preset == "quick":
        # r = 0.5 only (2.0 dropped to fit the quick budget; ablation_mur_vs_rr has MUR and RR at a large r)
        part1 = [{**QUICK, "method": "mt", "mur": m, "mur_radius": 0.5} for m in POINTS]
        part2 = _part2(QUICK, [0.5]) + [{**QUICK, **LABEL_SPREADING, "mur_radius": 0.5}]
        seeds, minutes = QUICK_SEEDS, 0.8
    else:
        part1 = authors_rows([{**CIFAR, "method": "mt", "mur": m, "mur_radius": r} for m in POINTS
                              for r in (4.0, 7.0, 10.0, 20.0, 40.0)], "cifar10")  # the authors' BN pass
        part2 = _part2({**SVHN_PI, "num_labels": 1000}, [0.5, 1.0, 3.5, 10.0])
        seeds, minutes = 3, 100
    return Sweep(
        name="mur_vs_vat", paper_ref="Sec. Connection to Adversarial Learning; Ablation, MUT (SVHN 1000)",
        description="MUR vs VAT vs RR points (MT, over r) and MUT vs VAT (SVHN 1000 labels)",
        base={}, variants=part1 + part2, baseline={"method": "mt", "mur": "vat"}, baseline_within=("method",),
        baseline_for={"vat": {"method": "mut", "mur": "direct"}},  # the paper: MUT vs VAT + EntMin
        seeds=seeds, rows=("method", "mur"),
        cols=("dataset", "mur_radius"), minutes_per_trial=minutes)
