"""Shared base settings for the sweeps: the paper's protocols and the quick (digits, CPU) preset.

Numbers come from the paper's appendix "Training Settings" and IMPLEMENTATION_NOTES.md.
"""
from __future__ import annotations

# CIFAR-10/100, MT and ICT (appendix, "CIFAR-10 and CIFAR-100").
CIFAR = dict(
    dataset="cifar10", num_labels=1000, arch="convnet13", width=1.0,
    steps=280_000, batch_labeled=25, batch_unlabeled=75,
    lr=0.1, momentum=0.9, weight_decay=1e-4, lr_rampup=10_000, lr_rampdown=80_000, rampup=10_000,
    cons_coef=10.0, kl_coef=0.05, mur_coef=4.0, mur_radius=10.0, ema_decay=0.99,
    translate=4, flip=True, input_noise=0.15, dropout=0.5, eval_every=2000, sensitivity_samples=1000,
)
CIFAR100_RADIUS = 20.0  # "r is set to 10 if the dataset is CIFAR-10 and 20 if CIFAR-100"

# SVHN (appendix, "SVHN"): MT and Pi differ in LR, weight decay and coefficients.
SVHN_MT = dict(
    dataset="svhn", num_labels=1000, arch="convnet13", width=1.0,
    steps=280_000, batch_labeled=25, batch_unlabeled=75,
    method="mt", lr=0.03, momentum=0.9, weight_decay=2e-4, lr_rampup=40_000, lr_rampdown=0,
    rampup=40_000, cons_coef=12.0, kl_coef=0.05, mur_coef=2.0, mur_radius=10.0,
    ema_decay=0.99, ema_decay_late=0.999, ema_switch_step=40_000,   # stepped, as in Mean Teacher
    translate=2, flip=False, input_noise=0.15, dropout=0.5, eval_every=2000, sensitivity_samples=1000,
)
SVHN_PI = {**SVHN_MT, "method": "pi", "lr": 0.01, "weight_decay": 1e-4, "lr_rampdown": 80_000,
           "cons_coef": 10.0, "mur_coef": 4.0, "ema_decay_late": -1.0, "ema_switch_step": 0}

# Quick preset: the embedded digits (1347 train / 450 test 8x8 images), a small ConvNet of the
# same family, CPU-sized. Radii scale with the input: standardised 64-dim digits want r ~ 1.
QUICK = dict(
    dataset="digits", num_labels=100, arch="convnet_small", width=1.0,
    steps=1500, batch_labeled=25, batch_unlabeled=75,
    lr=0.1, momentum=0.9, weight_decay=1e-4, lr_rampup=100, lr_rampdown=375, rampup=300,
    cons_coef=10.0, kl_coef=0.05, mur_coef=4.0, mur_radius=1.0, ema_decay=0.99,
    translate=1, flip=False, input_noise=0.15, dropout=0.5, eval_every=250,
    sensitivity_samples=100, device="cpu", bn_momentum=0.1,  # 0.001 needs ~1e4 steps to settle
)

# Entropy minimisation on unlabeled data (the authors' `cent_u_coeff_max`) is its own knob: it follows
# the authors' run file of each method, variant and data set (clarken92/ConsistencySSL,
# working/semi_supervised/<dir>/run_<data>.py, read at HEAD), never VD or MUR. The paper never mentions
# it. Variants without a run file (no MT+MUR run for CIFAR-100 or SVHN, no +VD+MUR run at all, no Pi
# variant) take the value of the method's other runs on that data set, stated below.
AUTHORS_ENTMIN = {
    # (data set, method, vd, mur != none): coefficient   # source
    ("cifar10", "mt", False, False): 0.1,    # MeanTeacher/run_cifar10.py line 41
    ("cifar10", "mt", True, False): 0.1,     # MeanTeacher_VD/run_cifar10.py line 43
    ("cifar10", "mt", False, True): 0.0,     # MeanTeacher_MUR/run_cifar10.py
    ("cifar10", "mt", True, True): 0.1,      # no run file: MT's and MT+VD's value
    ("cifar10", "ict", False, False): 0.1,   # ICT/run_cifar10.py line 43
    ("cifar10", "ict", True, False): 0.0,    # ICT_VD/run_cifar10.py line 43
    ("cifar10", "ict", False, True): 0.0,    # ICT_MUR/run_cifar10.py line 42 ("May also try 0.1")
    ("cifar10", "ict", True, True): 0.0,     # no run file: ICT+VD's and ICT+MUR's value
    ("cifar100", "mt", False, False): 0.0,   # MeanTeacher/run_cifar100.py line 41
    ("cifar100", "mt", True, False): 0.0,    # MeanTeacher_VD/run_cifar100.py line 42
    ("cifar100", "mt", False, True): 0.0,    # no run file: MT's value
    ("cifar100", "mt", True, True): 0.0,     # no run file: MT's value
    ("cifar100", "ict", False, False): 0.1,  # ICT/run_cifar100.py line 43
    ("cifar100", "ict", True, False): 0.0,   # ICT_VD/run_cifar100.py line 43
    ("cifar100", "ict", False, True): 0.0,   # ICT_MUR/run_cifar100.py line 42
    ("cifar100", "ict", True, True): 0.0,    # no run file: ICT+VD's and ICT+MUR's value
}
# SVHN: 0.0 in every run file (MeanTeacher, MeanTeacher_VD, ICT, ICT_VD, ICT_MUR, PiModel run_svhn.py);
# Pi-model: 0.0 (PiModel/run_cifar10.py, run_svhn.py); MUT, FixMatch, VAT: not in the authors' code, 0.0.


def authors_entmin(dataset: str, method: str, vd: bool, mur: str) -> float:
    """entmin_coef of the authors' run for this data set, method and variant (0.0 where they used none)."""
    return AUTHORS_ENTMIN.get((dataset, method, bool(vd), mur != "none"), 0.0)


def variants(method: str, dataset: str) -> list[dict]:
    """The paper's four rows of a method, base, +VD, +MUR, +VD+MUR, each with the authors' entmin_coef
    for `dataset`. Where that differs between rows, the table's row labels say so."""
    rows = [{"method": method, "vd": vd, "mur": mur} for vd, mur in
            ((False, "none"), (True, "none"), (False, "direct"), (True, "direct"))]
    return [{**r, "entmin_coef": authors_entmin(dataset, method, r["vd"], r["mur"])} for r in rows]


# Quick-preset rows that separate VD, MUR and entropy minimisation (one knob per step from the MT row):
BASELINE_MT = {"method": "mt", "vd": False, "mur": "none", "entmin_coef": 0.0}
SUPERVISED = {"method": "supervised", "vd": False, "mur": "none", "entmin_coef": 0.0}
LABEL_SPREADING = {"method": "labelspreading", "vd": False, "mur": "none", "entmin_coef": 0.0}
