"""Ramp schedules against their closed forms.  pytest tests/test_schedules.py -q"""
import math

import pytest

from trainables.config import ConfigError, TrainConfig
from trainables.schedules import coef_at, ema_decay_at, lr_at, rampdown, rampup


def test_rampup_endpoints_and_midpoint():
    L = 40
    assert rampup(0, L) == pytest.approx(math.exp(-5.0))
    assert rampup(L, L) == 1.0
    assert rampup(L // 2, L) == pytest.approx(math.exp(-5.0 * 0.25))
    assert rampup(10, L) == pytest.approx(math.exp(-5.0 * 0.75 ** 2))
    assert rampup(5 * L, L) == 1.0  # stays at 1 after the ramp
    assert rampup(-3, L) == pytest.approx(math.exp(-5.0))  # clipped below


def test_rampup_monotone_nondecreasing():
    vals = [rampup(s, 37) for s in range(60)]
    assert all(b >= a for a, b in zip(vals, vals[1:]))
    assert all(b > a for a, b in zip(vals[:37], vals[1:38]))  # strictly inside the ramp


def test_rampdown_start_end_and_closed_form():
    total, L = 100, 40
    assert rampdown(0, total, L) == 1.0
    assert rampdown(total - L - 1, total, L) == 1.0
    assert rampdown(total - L, total, L) == 1.0  # p = 0 where the ramp-down starts
    p = (total - 1 - (total - L)) / L  # last update
    assert rampdown(total - 1, total, L) == pytest.approx(math.exp(-12.5 * p * p))
    assert rampdown(total, total, L) == pytest.approx(math.exp(-12.5))
    assert rampdown(total + 10, total, L) == pytest.approx(math.exp(-12.5))  # clipped at p = 1
    # authors' code, not the paper's 1 - exp(...): near zero at the end, not near one
    assert rampdown(total - 1, total, L) < 1e-4


def test_rampdown_last_step_long_ramp_close_to_exp_minus_12_5():
    assert rampdown(280_000 - 1, 280_000, 80_000) == pytest.approx(math.exp(-12.5), rel=1e-3)


def test_rampdown_monotone_nonincreasing():
    vals = [rampdown(s, 90, 30) for s in range(91)]
    assert all(b <= a for a, b in zip(vals, vals[1:]))
    assert all(b < a for a, b in zip(vals[60:90], vals[61:91]))


def test_zero_lengths_mean_no_ramp():
    assert rampup(0, 0) == 1.0 and rampup(7, 0) == 1.0
    assert rampdown(0, 50, 0) == 1.0 and rampdown(49, 50, 0) == 1.0


def test_bad_lengths_raise():
    with pytest.raises(ValueError, match="ramp-up length"):
        rampup(0, -1)
    with pytest.raises(ValueError, match="ramp-down length"):
        rampdown(0, 10, 11)


def test_coef_and_lr_compose_the_ramps():
    cfg = TrainConfig(steps=300, lr=0.2, lr_rampup=50, lr_rampdown=100)
    assert coef_at(25, 4.0, 50) == pytest.approx(4.0 * math.exp(-5 * 0.25))
    assert lr_at(0, cfg) == pytest.approx(0.2 * math.exp(-5))
    assert lr_at(100, cfg) == pytest.approx(0.2)  # plateau
    assert lr_at(200, cfg) == pytest.approx(0.2)  # ramp-down starts
    assert lr_at(250, cfg) == pytest.approx(0.2 * math.exp(-12.5 * 0.25))
    both = TrainConfig(steps=100, lr=0.1, lr_rampup=80, lr_rampdown=60)  # overlapping ramps
    assert lr_at(60, both) == pytest.approx(0.1 * math.exp(-5 * 0.25 ** 2) * math.exp(-12.5 * (20 / 60) ** 2))


def test_ema_decay_constant_and_stepped():
    cfg = TrainConfig(ema_decay=0.99)
    assert ema_decay_at(0, cfg) == 0.99 and ema_decay_at(10**6, cfg) == 0.99
    svhn = TrainConfig(ema_decay=0.99, ema_decay_late=0.999, ema_switch_step=40)
    assert ema_decay_at(39, svhn) == 0.99
    assert ema_decay_at(40, svhn) == 0.999
    assert ema_decay_at(500, svhn) == 0.999


# ---------------------------------------------------------------- FixMatch's cosine decay
def test_cosine_decay_against_its_closed_form():
    from trainables.schedules import cosine_decay

    K = 2 ** 20
    assert cosine_decay(0, K) == 1.0
    assert cosine_decay(K, K) == pytest.approx(math.sin(math.pi / 16), rel=1e-12)  # cos(7 pi / 16) = sin(pi / 16)
    assert cosine_decay(K // 2, K) == pytest.approx(math.cos(7 * math.pi / 32), rel=1e-12)
    for k in (1, 12_345, 458_752, K - 1):
        assert cosine_decay(k, K) == pytest.approx(math.cos(7 * math.pi * k / (16 * K)), rel=1e-12)
    assert cosine_decay(-5, K) == 1.0 and cosine_decay(K + 10, K) == cosine_decay(K, K)  # k clipped to [0, K]
    vals = [cosine_decay(s, 50) for s in range(51)]
    assert all(b < a for a, b in zip(vals, vals[1:])) and min(vals) > 0.19  # never reaches 0
    # its mean over the run: (16 / 7 pi) sin(7 pi / 16), the integral of the cosine, to a Riemann sum
    assert sum(cosine_decay(s, 10_000) for s in range(10_000)) / 10_000 == pytest.approx(
        16 / (7 * math.pi) * math.sin(7 * math.pi / 16), abs=1e-4)
    with pytest.raises(ValueError, match="total >= 1"):
        cosine_decay(0, 0)


def test_lr_schedule_cosine_composes_with_the_rampup():
    cfg = TrainConfig(steps=1000, lr=0.03, lr_schedule="cosine", lr_rampup=0, lr_rampdown=0)
    for k in (0, 1, 500, 999):
        assert lr_at(k, cfg) == pytest.approx(0.03 * math.cos(7 * math.pi * k / 16000), rel=1e-12)
    warm = cfg.replace(lr_rampup=100)
    assert lr_at(50, warm) == pytest.approx(0.03 * math.exp(-5 * 0.25) * math.cos(7 * math.pi * 50 / 16000))
    assert lr_at(500, cfg.replace(lr_schedule="exp")) == 0.03  # exp: no ramp-down at lr_rampdown=0


@pytest.mark.parametrize("bad, words", [
    ({"lr_schedule": "cosine"}, "set lr_rampdown=0 (got 150) or lr_schedule='exp'"),  # the default ramp-down
    ({"lr_schedule": "step"}, "unknown lr_schedule 'step'; choose one of ['exp', 'cosine']"),
])
def test_lr_schedule_config_errors_are_one_line(bad, words):
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict(bad)
    assert words in str(e.value) and "\n" not in str(e.value)
