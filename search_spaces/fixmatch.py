"""FixMatch with VD and MUR: FM, FM+VD, FM+MUR on CIFAR-10 with 250 labels (paper appendix).

Hypothesis (the paper's appendix): with strong augmentation, weight perturbation adds nothing
(FM+VD = FM, 5.07% error) and MUR on the strongly augmented point hurts (FM+MUR 13.45%): the
predictions on A(x_u) are too unreliable for the most uncertain point to be a useful target.
    python -m sweeper.run fixmatch --preset quick   # digits 50 labels, 3 rows + LabelSpreading, 5 seeds, ~10 min on 2 CPU cores
    python -m sweeper.run fixmatch                  # CIFAR-10 250 labels, 3 x 3 trials of 2^20 steps

Taken from FixMatch (Sohn et al. 2020): tau = 0.95, lambda_u = 1 (cons_coef, no ramp-up),
mu = 7 (64 labeled + 448 unlabeled per batch), 2^20 steps, Nesterov SGD lr 0.03 momentum 0.9,
weight decay 5e-4, weak view = flip + translate by 12.5% (4 px), strong view = RandAugment
(2 ops, random magnitudes) + Cutout (trainables/augment_strong.py), evaluation of an EMA of
the weights (decay 0.999), no dropout / input noise. Not taken: WRN-28-2 (we train the paper's
ConvNet-13 on ZCA inputs) and the cosine LR decay lr cos(7 pi k / 16 K): our schedule is the
authors' exp ramp-down, here over the last 458,752 steps (7/16 of the run), which gives the
same mean LR (0.71 lr) as the cosine. FM+MUR: direct MUR at r = 10 (the CIFAR-10 radius).
Cost, measured on one H200 (benchmarks/trainer_throughput.py --family fixmatch): FM 18.9,
FM+VD 8.9, FM+MUR 13.9 steps/s, so 2^20 steps take about 15, 33 and 21 GPU-hours per trial.
"""
from search_spaces import Sweep
from search_spaces.common import CIFAR, LABEL_SPREADING, QUICK, QUICK_SEEDS

FIXMATCH = dict(
    method="fixmatch", fm_threshold=0.95, cons_coef=1.0, rampup=0, lr=0.03, momentum=0.9,
    weight_decay=5e-4, lr_rampup=0, ema_decay=0.999, input_noise=0.0, dropout=0.0,
    fm_ops=2, fm_cutout=0.5, entmin_coef=0.0,
)
FIXMATCH_CIFAR = {**CIFAR, **FIXMATCH, "num_labels": 250, "batch_labeled": 64, "batch_unlabeled": 448,
                  "steps": 2 ** 20, "lr_rampdown": 7 * 2 ** 20 // 16, "translate": 4, "flip": True,
                  "eval_every": 8192}  # compile "auto" from CIFAR: eager for FixMatch (unmeasured compiled)
# digits: 5 labels per class (CIFAR's 250 = 25 per class), mu = 7, EMA 0.99 for so short a run; the quick
# preset's run length and schedule; at 400 steps FM does no better than LabelSpreading. FixMatch's lr 0.03
# kept over 0.1 on the validation split (FM, seeds 0 and 1, 1500 steps; test not used).
FIXMATCH_QUICK = {**QUICK, **FIXMATCH, "num_labels": 50, "batch_labeled": 16, "batch_unlabeled": 112,
                  "ema_decay": 0.99}

VARIANTS = [{"vd": False, "mur": "none"}, {"vd": True, "mur": "none"}, {"vd": False, "mur": "direct"}]


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    return Sweep(
        name="fixmatch", paper_ref="Appendix, FixMatch (CIFAR-10, 250 labels)",
        description="FM vs FM+VD vs FM+MUR (MUR on the strongly augmented point)",
        base=dict(FIXMATCH_QUICK if quick else FIXMATCH_CIFAR),
        variants=([LABEL_SPREADING] if quick else []) + [{"method": "fixmatch", **v} for v in VARIANTS],
        baseline={"method": "fixmatch", "vd": False, "mur": "none"}, seeds=QUICK_SEEDS if quick else 3, rows=("method", "vd", "mur"), cols=("dataset", "num_labels"),
        minutes_per_trial=0.8 if quick else 1380)
