"""trainables.classical: LabelSpreading baseline, gamma chosen on validation, against direct scikit-learn runs.

    python -m pytest -q -x tests/test_classical.py
"""
from __future__ import annotations

import math
import types

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.semi_supervised import LabelSpreading

from trainables.classical import GAMMA_MULTIPLIERS, label_spreading, run_label_spreading
from trainables.config import MAX_RBF_ROWS, check_size
from trainables.config import ConfigError, TrainConfig

MULTIPLIERS = [2.0 ** k for k in range(-2, 11)]  # the documented grid, written out independently


@pytest.fixture(scope="module")
def digits():
    """Digits rows in [0, 1]: 450 test, 300 validation, 1047 training, 10 labels per class (fixed)."""
    d = load_digits()
    x, y = d.data / 16.0, d.target.astype(np.int64)  # (1797, 64), (1797,)
    perm = np.random.default_rng(7).permutation(len(y))
    te, va, tr = perm[:450], perm[450:750], perm[750:]
    lab = np.concatenate([tr[y[tr] == c][:10] for c in range(10)])
    unl = np.setdiff1d(tr, lab)
    return dict(x=x, y=y, te=te, va=va, lab=lab, unl=unl)


def split(d, y_val=None, x_val=None):
    x, y = d["x"], d["y"]
    return (x[d["lab"]], y[d["lab"]], x[d["unl"]], x[d["va"]] if x_val is None else x_val,
            y[d["va"]] if y_val is None else y_val, x[d["te"]], y[d["te"]])


def direct_fit(d, gamma):
    """One scikit-learn LabelSpreading on labeled + unlabeled rows (-1), as the docs show it."""
    x_fit = np.vstack([d["x"][d["lab"]], d["x"][d["unl"]]])
    y_fit = np.concatenate([d["y"][d["lab"]], -np.ones(len(d["unl"]), dtype=np.int64)])
    return LabelSpreading(kernel="rbf", gamma=gamma, alpha=0.2, max_iter=100).fit(x_fit, y_fit)


def median_sq(x):
    """Median squared distance over pairs i < j, row by row (not the module's pdist)."""
    return np.median(np.concatenate([((x[i + 1:] - x[i]) ** 2).sum(1) for i in range(len(x) - 1)]))


@pytest.fixture(scope="module")
def direct(digits):
    """The whole selection written directly: grid from the median, errors per gamma, min val error."""
    d = digits
    med = median_sq(np.vstack([d["x"][d["lab"]], d["x"][d["unl"]]]))
    rows = []
    for m in MULTIPLIERS:
        model = direct_fit(d, m / med)
        val = 100 * np.mean(model.predict(d["x"][d["va"]]) != d["y"][d["va"]])
        test = 100 * np.mean(model.predict(d["x"][d["te"]]) != d["y"][d["te"]])
        rows.append((m / med, val, test))
    best = min(range(len(rows)), key=lambda i: rows[i][1])  # first = smallest gamma on ties
    return dict(med=med, rows=rows, best=best)


@pytest.fixture(scope="module")
def result(digits):
    return label_spreading(*split(digits))


def test_default_grid_is_the_documented_log_grid():
    assert list(GAMMA_MULTIPLIERS) == MULTIPLIERS


def test_matches_a_direct_scikit_learn_run(result, direct):
    g, val, test = direct["rows"][direct["best"]]
    assert result["median_sq_dist"] == pytest.approx(direct["med"], rel=1e-12)
    assert result["gamma"] == pytest.approx(g, rel=1e-12)
    assert result["gamma_multiplier"] == MULTIPLIERS[direct["best"]]
    assert result["val_error"] == val and result["test_error"] == test
    assert [round(k / g, 9) for k in result["val_errors"]] == [round(r[0] / g, 9) for r in direct["rows"]]
    assert list(result["val_errors"].values()) == [r[1] for r in direct["rows"]]
    assert list(result["test_errors"].values()) == [r[2] for r in direct["rows"]]
    assert result["test_error"] < 15  # 100 labels on digits: a working baseline, far from 90 % chance


@pytest.mark.slow
def test_validation_rows_never_enter_the_fit(digits, result, direct):
    d = digits
    # labels = what the smallest-gamma model predicts: that gamma now has 0 % validation error and wins
    y_val = direct_fit(d, direct["rows"][0][0]).predict(d["x"][d["va"]])
    noise = np.random.default_rng(1).normal(size=(300, 64))  # and validation images unlike any digit
    first, other_images = label_spreading(*split(d, y_val=y_val)), label_spreading(*split(d, x_val=noise))
    for changed in (first, other_images):
        assert changed["test_errors"] == result["test_errors"]  # the fitted models did not move
    assert first["val_error"] == 0 and first["gamma_multiplier"] == MULTIPLIERS[0] != result["gamma_multiplier"]
    assert first["test_error"] == direct["rows"][0][2]


def test_ties_go_to_the_smaller_gamma(digits):
    r = label_spreading(*split(digits, y_val=np.full(300, 99)))  # no gamma can get one right
    assert set(r["val_errors"].values()) == {100.0}
    assert r["gamma_multiplier"] == MULTIPLIERS[0] and r["gamma"] == min(r["val_errors"])


def test_grid_is_scale_free_and_brackets_the_optimum(digits, result):
    x_l, y_l, x_u, x_val, y_val, x_te, y_te = split(digits)
    scaled = label_spreading(2 * x_l, y_l, 2 * x_u, 2 * x_val, y_val, 2 * x_te, y_te)  # distances x4 exactly
    assert scaled["gamma"] == result["gamma"] / 4
    assert list(scaled["val_errors"].values()) == list(result["val_errors"].values())
    assert scaled["test_error"] == result["test_error"]
    errs = list(result["val_errors"].values())
    # a wide kernel blurs the classes: validation error falls as gamma grows from 1/4 of the heuristic
    assert all(a >= b for a, b in zip(errs[:5], errs[1:5])) and errs[0] > 3 * min(errs)
    assert MULTIPLIERS[0] < result["gamma_multiplier"] < MULTIPLIERS[-1]  # an interior choice


def test_a_row_whose_kernel_underflows_counts_as_an_error(digits):
    x_l, y_l, x_u, _, _, x_te, y_te = split(digits)
    far = np.full((1, 64), 1e3)  # every rbf weight to the fit rows is exp(-huge) = 0: no prediction
    r = label_spreading(x_l, y_l, x_u, far, np.array([0]), x_te, y_te, gammas=(1.0,))
    assert r["val_error"] == 100.0  # scikit-learn's predict would say class 0 (argmax of NaN) and be "right"


def test_too_many_rows_is_a_one_line_error_before_any_work():
    with pytest.raises(ConfigError) as e:
        check_size(MAX_RBF_ROWS + 1)
    msg = str(e.value)
    assert "\n" not in msg and "knn" in msg and str(MAX_RBF_ROWS) in msg and "dense" in msg
    check_size(MAX_RBF_ROWS)
    check_size(10 * MAX_RBF_ROWS, "knn")  # the sparse graph has no such limit
    x_l, y_l = np.eye(10), np.arange(10)
    x_u = np.zeros((MAX_RBF_ROWS - 9, 10))  # 20,001 rows with the labeled ones
    with pytest.raises(ConfigError, match="knn"):
        label_spreading(x_l, y_l, x_u, x_l, y_l, x_l, y_l)
    data = types.SimpleNamespace(x_train=None, y_train=None, x_test=None, y_test=None)  # never touched
    with pytest.raises(ConfigError, match="knn"):
        run_label_spreading(TrainConfig(method="labelspreading"), np.arange(10), np.arange(10, MAX_RBF_ROWS + 1),
                            np.arange(5), data)


def test_knn_kernel_matches_a_direct_run(digits):
    d = digits
    r = label_spreading(*split(d), kernel="knn", n_neighbors=(5, 10))
    x_fit = np.vstack([d["x"][d["lab"]], d["x"][d["unl"]]])
    y_fit = np.concatenate([d["y"][d["lab"]], -np.ones(len(d["unl"]), dtype=np.int64)])
    for k in (5, 10):
        m = LabelSpreading(kernel="knn", n_neighbors=k, alpha=0.2, max_iter=100).fit(x_fit, y_fit)
        assert r["val_errors"][k] == 100 * np.mean(m.predict(d["x"][d["va"]]) != d["y"][d["va"]])
        assert r["test_errors"][k] == 100 * np.mean(m.predict(d["x"][d["te"]]) != d["y"][d["te"]])
    assert r["n_neighbors"] == min((10, 5), key=lambda k: r["val_errors"][k]) and math.isnan(r["gamma"])


def test_run_label_spreading_is_one_trainer_evaluation(digits, result):
    d = digits
    img = lambda i: torch.from_numpy(d["x"][i].astype(np.float32)).view(-1, 1, 8, 8)  # (N, 1, 8, 8) like data.py
    tr = np.concatenate([d["lab"], d["unl"], d["va"]])  # data.x_train holds all three
    data = types.SimpleNamespace(x_train=img(tr), y_train=torch.from_numpy(d["y"][tr]),
                                 x_test=img(d["te"]), y_test=torch.from_numpy(d["y"][d["te"]]))
    n_l, n_u = len(d["lab"]), len(d["unl"])
    idx_l, idx_u, idx_val = (torch.arange(a, b) for a, b in ((0, n_l), (n_l, n_l + n_u), (n_l + n_u, len(tr))))
    cfg = TrainConfig(method="labelspreading", steps=723)
    out = run_label_spreading(cfg, idx_l, idx_u, idx_val, data)
    # float32 images (as the trainer holds them) against the float64 rows of `result`: same choice
    assert out["ls_gamma_multiplier"] == result["gamma_multiplier"]
    assert out["test_error"] == result["test_error"] and out["val_error"] == result["val_error"]
    assert out["test_error_student"] == out["best_test_error"] == out["test_error_at_best_val"] == out["test_error"]
    assert out["step"] == 723 and out["done"] is True and out["diverged"] == 0 and out["wall_time"] > 0
    for k in ("sparsity", "g0_norm", "lr", "loss_total", "test_error_teacher", "sensitivity_mean"):
        assert math.isnan(out[k])
    assert all(isinstance(v, (int, float, str, bool)) for v in out.values())  # flat scalars for tune.report


def test_keys_cover_the_trainers_evaluation():
    from trainables.data import load_dataset
    from trainables.trainer import Trainer

    cfg = TrainConfig(method="supervised", batch_unlabeled=0, steps=1, lr_rampdown=0, sensitivity_samples=0,
                      device="cpu")
    keys = set(Trainer(cfg, load_dataset("digits")).evaluate())
    cls = types.SimpleNamespace(x_train=torch.zeros(40, 1, 8, 8), y_train=torch.arange(40) % 10,
                                x_test=torch.zeros(5, 1, 8, 8), y_test=torch.arange(5))
    torch.manual_seed(0)
    cls.x_train += torch.randn(40, 1, 8, 8)
    out = run_label_spreading(cfg, torch.arange(10), torch.arange(10, 30), torch.arange(30, 40), cls)
    assert keys - set(out) == set(), f"trainer keys missing from the LabelSpreading report: {keys - set(out)}"
