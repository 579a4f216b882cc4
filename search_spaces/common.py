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
    steps=400, batch_labeled=25, batch_unlabeled=75,
    lr=0.1, momentum=0.9, weight_decay=1e-4, lr_rampup=40, lr_rampdown=100, rampup=100,
    cons_coef=10.0, kl_coef=0.05, mur_coef=4.0, mur_radius=1.0, ema_decay=0.99,
    translate=1, flip=False, input_noise=0.15, dropout=0.5, eval_every=100,
    sensitivity_samples=100, device="cpu", bn_momentum=0.1,  # 0.001 needs ~1e4 steps to settle
)

# The four variants of every table row: base, +VD, +MUR, +VD+MUR (MT+VD adds entmin 0.1, as the authors).
def variants(method: str, entmin_with_vd: float = 0.1) -> list[dict]:
    return [
        {"method": method, "vd": False, "mur": "none"},
        {"method": method, "vd": True, "mur": "none", "entmin_coef": entmin_with_vd},
        {"method": method, "vd": False, "mur": "direct"},
        {"method": method, "vd": True, "mur": "direct", "entmin_coef": entmin_with_vd},
    ]
