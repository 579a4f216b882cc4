"""MT+VD over the KL coefficient lambda2, with weight sparsity (paper Fig. ablation (a), (b)).

Hypothesis: too little KL under-regularises, too much prunes useful weights; every value still
beats plain MT (the baseline row). CIFAR-10, 1000 labels. Entropy minimisation is the same in
every row: 0.1 on the paper preset (the authors' MeanTeacher and MeanTeacher_VD run_cifar10.py
both use it), 0 on the quick one.
    python -m sweeper.run ablation_kl                  # CIFAR-10, (5 + 1) x 3 trials, ~2.3 H100-hours each
    python -m sweeper.run ablation_kl --preset quick   # digits, 5 coefficients + MT + LabelSpreading, 5 seeds, ~11 min on 2 CPU cores
"""
from search_spaces import Sweep
from search_spaces.common import BASELINE_MT, CIFAR, LABEL_SPREADING, QUICK, QUICK_SEEDS, authors_entmin, authors_rows


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    entmin = 0.0 if quick else authors_entmin("cifar10", "mt", True, "none")
    coefs = [0.01, 0.05, 0.2, 0.5, 1.0] if quick else [0.005, 0.01, 0.05, 0.1, 0.5]
    mt = {**BASELINE_MT, "entmin_coef": entmin}
    rows = ([LABEL_SPREADING] if quick else []) + [mt] + [{**mt, "vd": True, "kl_coef": k} for k in coefs]
    rows = rows if quick else authors_rows(rows, "cifar10")  # paper: MT has the authors' BN pass, MT+VD not
    return Sweep(
        name="ablation_kl", paper_ref="Fig. 3(a), 3(b)",
        description="MT+VD test error and sparsity vs the KL coefficient, against MT",
        base=dict(QUICK if quick else CIFAR), variants=rows, baseline={"method": "mt", "vd": False},
        seeds=QUICK_SEEDS if quick else 3, rows=("method", "vd"), cols=("kl_coef",),
        minutes_per_trial=0.8 if quick else 140)
