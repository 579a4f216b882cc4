"""MT and the Pi-model alone, with VD and with MUR on digits with few labels: VD and MUR at the
paper's scarcest label count (Table 2, 250 SVHN labels).

Hypothesis (Table 2): with 250 labels, the fewest the paper tries on SVHN, adding MUR raises both
MT's and the Pi-model's error, while with 500 and 1000 labels it lowers them: with so few labels the
predictions that MUR's most uncertain point is trained towards are too unreliable. VD still lowers
both errors there. The quick preset's 100 digits labels stand for the paper's 1000; a quarter of
them, 25, rounded up to a balanced count (3 per class), stands for 250. Each +VD and +MUR row is
paired with its own method's base row, the Pi-model's base row with MT's. VD + MUR is left out: the
paper's text makes no claim about it at 250 labels.
    python -m sweeper.run few_labels --preset quick   # digits 30 labels, 6 rows x 5 seeds

The paper preset of this finding is table_svhn's 250-label column; this sweep is its quick stand-in.
"""
from search_spaces import Sweep
from search_spaces.common import QUICK, QUICK_SEEDS, variants

PRESETS = ("quick",)  # table_svhn runs the paper's label counts
NUM_LABELS = 30  # a quarter of the quick preset's 100, as 250 is of Table 2's 1000, balanced: 3 per class


def sweep(preset: str) -> Sweep:
    rows = [r for m in ("mt", "pi") for r in variants(m, "digits")
            if not (r["vd"] and r["mur"] != "none")]  # base, +VD and +MUR
    return Sweep(name="few_labels", paper_ref="Table 2 (250 labels)",
                 description="MT and Pi, alone, +VD and +MUR on digits with 3 labels per class",
                 base={**QUICK, "num_labels": NUM_LABELS}, variants=rows, seeds=QUICK_SEEDS,
                 baseline={"method": "mt", "vd": False, "mur": "none"}, baseline_within=("method",),
                 rows=("method", "vd", "mur", "entmin_coef"), cols=("dataset", "num_labels"),
                 minutes_per_trial=0.9)
