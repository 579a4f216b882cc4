"""UDA with VD and MUR on digits: a method outside the paper, in the combinations the paper gives FixMatch.

Hypothesis: UDA (Xie et al. 2019) differs from FixMatch in its target alone: a soft weak-view
prediction sharpened at T = 0.4 and masked below a top probability of 0.8, KL to the strong view,
against FixMatch's hard pseudo-label masked below 0.95 (trainables/registry/uda.py). So, as the
paper's appendix finds for FixMatch, weight perturbation should change little (UDA + VD near UDA)
and MUR on the strongly augmented point should not help (UDA + MUR no better than UDA). FixMatch,
on the same settings, is the row each is compared with. Of UDA's paper settings it follows the
sharpening temperature 0.4, the confidence threshold 0.8, the KL consistency and its coefficient 1
(cons_coef, as FixMatch's lambda_u here, no ramp-up); not its own RandAugment (this package's
RandAugment + Cutout, FixMatch's strong view), its training-signal annealing, its large unlabeled
batch ratio or its network: the rest is the quick FixMatch preset (search_spaces/fixmatch.py),
50 labels, mu = 7.
    python -m sweeper.run quick_uda --preset quick   # digits, 4 rows x 5 seeds, CPU
"""
from search_spaces import Sweep
from search_spaces.common import QUICK_SEEDS
from search_spaces.fixmatch import FIXMATCH_QUICK

PRESETS = ("quick",)  # UDA has no row of the paper: a CPU-sized study of its combinations
UDA = {"method": "uda", "uda_temperature": 0.4, "uda_threshold": 0.8, "cons_coef": 1.0}
VARIANTS = [{"method": "fixmatch", "vd": False, "mur": "none"}, {**UDA, "vd": False, "mur": "none"},
            {**UDA, "vd": True, "mur": "none"}, {**UDA, "vd": False, "mur": "direct"}]


def sweep(preset: str) -> Sweep:
    return Sweep(name="quick_uda", paper_ref="none (UDA, Xie et al. 2019; the appendix's FixMatch combinations)",
                 description="UDA vs UDA+VD vs UDA+MUR (MUR on the strongly augmented point), FixMatch beside them",
                 base=dict(FIXMATCH_QUICK), variants=VARIANTS, seeds=QUICK_SEEDS, rows=("method", "vd", "mur"),
                 baseline={"method": "fixmatch", "vd": False, "mur": "none"}, minutes_per_trial=0.8)
