"""Optuna TPE + ASHA over the shared training settings of plain MT on digits: how the quick preset was tuned.

Hypothesis: the paper's CIFAR settings (lr 0.1, lambda1 10, EMA 0.99, noise 0.15) are not the best
for 8x8 digits in the quick run length; tuned on the validation split (never the test set), the MT baseline
gets strong enough that a gain of VD or MUR over it means something. Only the baseline (MT, no VD,
no MUR, no entropy minimisation) is tuned, so the settings favour no variant under study.
    python -m sweeper.run hpo_base --preset quick   # digits, 20 samples of MT
    python -m sweeper.run hpo_base                  # CIFAR-10 1000 labels, 30 samples (ASHA cuts most short)
Its choice, rounded, is search_spaces/common.py QUICK.
"""
from search_spaces import Sweep
from search_spaces.common import BASELINE_MT, CIFAR, QUICK


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    return Sweep(
        name="hpo_base", paper_ref="appendix Training Settings (the shared settings)",
        description="Optuna TPE + ASHA over lr, lambda1, EMA, input noise, weight decay of MT (validation split)",
        base={**(QUICK if quick else CIFAR), **BASELINE_MT, "val_size": -1},  # selects on validation
        seeds=1, rows=("method",), cols=(),
        minutes_per_trial=0.5 if quick else 50,
        search={"space": {"lr": ("loguniform", 0.01, 0.5), "cons_coef": ("loguniform", 1.0, 100.0),
                          "ema_decay": ("uniform", 0.9, 0.999), "input_noise": ("uniform", 0.0, 0.5),
                          "weight_decay": ("loguniform", 1e-5, 1e-3)},
                # grace period: half the run, past every ramp-up (at 250 steps the coefficient ramp has
                # barely started, and a first search here pruned every large lambda1 there)
                "grace_fraction": 0.5,
                "num_samples": 20 if quick else 30, "reduction_factor": 3, "metric": "val_error",
                "start_at_base": True})  # sample 1: the hand-set values (the preset's), for comparison
