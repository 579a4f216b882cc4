"""TrainConfig validation: unknown keys and out-of-range values fail before any work."""
import math
from dataclasses import fields

import pytest

from trainables.config import ConfigError, TrainConfig


def test_defaults_valid_and_roundtrip():
    cfg = TrainConfig()
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("bad, words", [
    ({"radius": 1.0}, "unknown config key"),
    ({"mur_radius": 0.0}, "mur_radius must be > 0"),
    ({"mur_radius": -1.0}, "mur_radius must be > 0"),
    ({"mur_steps": 0}, "mur_steps must be >= 1"),
    ({"num_labels": 1500}, "exceeds the 1047 training images of digits left after 300 validation images"),
    ({"num_labels": 105}, "not divisible by the 10 classes"),
    ({"dataset": "cifar100", "num_labels": 50}, "below the 100 classes"),
    ({"kl_coef": -0.1}, "kl_coef must be >= 0"),
    ({"method": "vat_only"}, "unknown method"),
    ({"mur": "fgsm"}, "unknown mur"),
    ({"method": "mut"}, "set mur to"),
    ({"steps": 2.5}, "must be an integer"),
    ({"vd": "yes"}, "true or false"),
    ({"lr_rampdown": 10_000}, "longer than steps"),
    ({"ema_decay": 1.5}, "[0, 1]"),
    ({"arch": "convnet13"}, "needs 32x32"),
])
def test_bad_values_are_one_line_errors(bad, words):
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict(bad)
    msg = str(e.value)
    assert words in msg and "\n" not in msg


def test_numpy_and_int_values_coerced():
    np = pytest.importorskip("numpy")
    cfg = TrainConfig.from_dict({"mur_radius": np.float64(2.0), "steps": np.int64(1000), "lr": 1})
    assert cfg.mur_radius == 2.0 and isinstance(cfg.steps, int) and isinstance(cfg.lr, float)


def test_frozen():
    with pytest.raises(Exception):
        TrainConfig().steps = 3


@pytest.mark.parametrize("bad, words", [
    ({"cifar_norm": "channel"}, "cifar_norm='channel' chooses CIFAR's preprocessing, but dataset is 'digits'"),
    ({"dataset": "cifar10", "cifar_norm": "pca"}, "unknown cifar_norm 'pca'; choose one of ['zca', 'channel']"),
    ({"arch": "wrn28_2"}, "set dropout=0 and input_noise=0"),
    ({"arch": "resnet"}, "unknown arch 'resnet'; choose one of ['convnet13', 'convnet_small', 'wrn28_2']"),
])
def test_fixmatch_recipe_keys_are_validated(bad, words):
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict(bad)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_applies_knows_the_fixmatch_recipe_keys():
    from trainables.config import applies

    assert [applies("cifar_norm", {"dataset": d}) for d in ("cifar10", "cifar100", "svhn", "digits", "mnist")] == \
        [True, True, False, False, False]
    assert applies("lr_rampdown", {"lr_schedule": "exp"}) and applies("lr_rampdown", {})
    assert not applies("lr_rampdown", {"lr_schedule": "cosine"})  # the cosine schedule has no ramp-down
    assert applies("lr_schedule", {"method": "fixmatch"}) and applies("arch", {"method": "fixmatch"})


FLOAT_FIELDS = [f.name for f in fields(TrainConfig) if f.type in ("float", float)]


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("name", FLOAT_FIELDS)
def test_every_float_field_refuses_a_non_finite_value(name, value):
    """inf passes `> 0` and `>= 0`, and nan fails no comparison it is not asked for: every float key is
    checked to be finite first (JSON's Infinity and NaN reach --set as these floats)."""
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict({name: value})
    assert str(e.value) == f"{name} must be a finite number, got {value}"


@pytest.mark.parametrize("bad, words", [
    ({"width": 1e6}, "width=1e+06 makes a network past any device's memory; use at most 16"),
    ({"steps": 1e15}, "steps=1000000000000000 is past what a run can finish; use at most 100000000"),
    ({"eval_batch": 1e15}, "eval_batch=1000000000000000 test images in one forward pass would not fit"),
    ({"batch_labeled": 100_000}, "batch_labeled=100000 is larger than the 100 labeled images"),
    ({"batch_labeled": 101}, "batch_labeled=101 is larger than the 100 labeled images"),
    ({"batch_unlabeled": 1048}, "batch_unlabeled=1048 is larger than the 1047 training images of digits"),
])
def test_sizes_past_the_data_or_memory_are_refused(bad, words):
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict(bad)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_the_largest_sizes_allowed_are_valid():
    """The bounds themselves are accepted (a refusal one past each, above)."""
    TrainConfig.from_dict({"width": 16.0, "steps": 10 ** 8, "eval_batch": 1 << 16, "batch_labeled": 100,
                           "batch_unlabeled": 1047, "lr_rampdown": 0})
