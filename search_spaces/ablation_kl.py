"""MT+VD over the KL coefficient lambda2, with weight sparsity (paper Fig. ablation (a), (b)).

Hypothesis: too little KL under-regularises, too much prunes useful weights; every value still
beats plain MT. CIFAR-10, 1000 labels.
    python -m sweeper.run ablation_kl --preset quick   # digits, 5 coefficients x 2 seeds, ~4 min on 2 CPU cores
    python -m sweeper.run ablation_kl                  # CIFAR-10, 5 x 3 trials, ~2.3 H100-hours each
"""
from search_spaces import Sweep
from search_spaces.common import CIFAR, QUICK


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    return Sweep(
        name="ablation_kl", paper_ref="Fig. 3(a), 3(b)",
        description="MT+VD test error and sparsity vs the KL coefficient",
        base={**(QUICK if quick else CIFAR), "method": "mt", "vd": True, "entmin_coef": 0.1},
        grid={"kl_coef": [0.01, 0.05, 0.2, 0.5, 1.0] if quick else [0.005, 0.01, 0.05, 0.1, 0.5]},
        seeds=2 if quick else 3, rows=("method", "vd"), cols=("kl_coef",),
        minutes_per_trial=1.0 if quick else 140)
