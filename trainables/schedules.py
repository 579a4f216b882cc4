"""Ramp schedules of the learning rate, the loss coefficients and the EMA momentum.

`step` everywhere is the number of optimizer steps already taken (0-based): the first
update uses step 0 and the last one step `cfg.steps - 1`. All functions return floats.

    pytest tests/test_schedules.py -q
"""
from __future__ import annotations

import math


def rampup(step: int, length: int) -> float:
    """Sigmoid-shaped ramp-up exp(-5 (1 - t)^2), t = clip(step / length, 0, 1).

    exp(-5) ~ 0.0067 at step 0, 1.0 from step `length` on; length 0 means no ramp (1.0).
    Same curve as Mean Teacher's `sigmoid_rampup` (paper appendix "Training Settings").
    """
    if length < 0:
        raise ValueError(f"ramp-up length must be >= 0, got {length}")
    if length == 0:
        return 1.0
    t = min(max(step / length, 0.0), 1.0)
    return math.exp(-5.0 * (1.0 - t) ** 2)


def rampdown(step: int, total: int, length: int) -> float:
    """Ramp-down over the last `length` of `total` steps: exp(-12.5 p^2).

    p = clip((step - (total - length)) / length, 0, 1) is the fraction of the ramp-down
    elapsed, so the multiplier is 1.0 before and at step total - length and falls to
    exp(-12.5) ~ 3.7e-6 at p = 1. The paper's appendix writes the ramp-down as
    1 - exp(-12.5 x^2); the authors' code (which produced the published numbers)
    computes exp(-12.5 p^2) as above, and we follow the code. length 0: no ramp (1.0).
    """
    if length < 0 or length > total:
        raise ValueError(f"ramp-down length must lie in [0, total={total}], got {length}")
    if length == 0:
        return 1.0
    start = total - length
    if step < start:
        return 1.0
    p = min((step - start) / length, 1.0)
    return math.exp(-12.5 * p * p)


def cosine_decay(step: int, total: int) -> float:
    """FixMatch's LR decay cos(7 pi k / (16 K)), k = step clipped to [0, K], K = total steps.

    1.0 at step 0, cos(7 pi / 16) ~ 0.195 at k = K: the decay never reaches zero, by FixMatch's
    choice (Sohn et al. 2020; google-research/fixmatch `fixmatch.py`, lr * cos(lrate * 7 pi / 16)
    with lrate = k / K clipped to [0, 1]).
    """
    if total < 1:
        raise ValueError(f"cosine decay needs total >= 1 steps, got {total}")
    k = min(max(step, 0), total)
    return math.cos(7.0 * math.pi * k / (16.0 * total))


def coef_at(step: int, value: float, length: int) -> float:
    """A loss coefficient lambda_i(t): `value` ramped up over `length` steps."""
    return value * rampup(step, length)


def lr_at(step: int, cfg) -> float:
    """Learning rate at `step`: cfg.lr x ramp-up(cfg.lr_rampup) x the decay of cfg.lr_schedule: "exp" =
    ramp-down(cfg.lr_rampdown of cfg.steps) (authors), "cosine" = cosine_decay over cfg.steps (FixMatch)."""
    if cfg.lr_schedule == "cosine":
        return cfg.lr * rampup(step, cfg.lr_rampup) * cosine_decay(step, cfg.steps)
    if cfg.lr_schedule != "exp":
        raise ValueError(f"unknown lr_schedule {cfg.lr_schedule!r}; choose 'exp' or 'cosine'")
    return cfg.lr * rampup(step, cfg.lr_rampup) * rampdown(step, cfg.steps, cfg.lr_rampdown)


def ema_decay_at(step: int, cfg) -> float:
    """EMA momentum of the teacher: cfg.ema_decay, stepped to cfg.ema_decay_late at cfg.ema_switch_step.

    The step is off when cfg.ema_decay_late < 0 (CIFAR: constant 0.99); SVHN MT uses
    0.99 -> 0.999 as in Mean Teacher.
    """
    if cfg.ema_decay_late >= 0 and step >= cfg.ema_switch_step:
        return cfg.ema_decay_late
    return cfg.ema_decay
