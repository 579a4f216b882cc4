"""Optuna TPE + ASHA over MT+VD+MUR's coefficients, radius and learning rate (no paper figure: real search).

Hypothesis: the paper's hand-set values (lambda1 10, lambda2 0.05, lambda3 4, r 10, lr 0.1) are
near a good region; the search says how much is left on the table: its first sample is the preset's
hand-set values, and table_ranked.md says where they rank. The Optuna study is kept in SQLite
(`optuna.db` in the experiment folder); ASHA stops poor trials early.
    python -m sweeper.run hpo --preset quick   # digits, 12 samples of 1000 steps
    python -m sweeper.run hpo --preset quick --confirm results/hpo-<stamp>   # winner vs hand-set, 5 fresh seeds
    python -m sweeper.run hpo                  # CIFAR-10 1000 labels, 40 samples (ASHA cuts most short)
"""
from search_spaces import Sweep
from search_spaces.common import CIFAR, QUICK


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    base = {**(QUICK if quick else CIFAR), "method": "mt", "vd": True, "mur": "direct", "entmin_coef": 0.1,
            "val_size": -1,  # the data set's validation split, which the search selects on
            **({} if quick else {"compile": "step"})}  # MT+VD+MUR: common.PAPER_COMPILED
    r = (0.25, 4.0) if quick else (2.0, 40.0)
    return Sweep(
        name="hpo", paper_ref="Eq. 7 coefficients (appendix Training Settings)",
        description="Optuna TPE + ASHA over lambda1, lambda2, lambda3, r and lr of MT+VD+MUR",
        base=base, seeds=1, rows=("method",), cols=(),
        minutes_per_trial=1.2 if quick else 100,  # ASHA stops most early
        search={"space": {"cons_coef": ("loguniform", 1.0, 100.0), "kl_coef": ("loguniform", 0.005, 1.0),
                          "mur_coef": ("loguniform", 0.3, 30.0), "mur_radius": ("loguniform", *r),
                          "lr": ("loguniform", 0.01, 0.3)},
                "grace_fraction": 0.5,  # ASHA's first rung at half the run: past every ramp-up
                "num_samples": 12 if quick else 40, "reduction_factor": 3, "metric": "val_error",
                "start_at_base": True})  # sample 1: the hand-set values (the preset's), for comparison
