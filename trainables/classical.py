"""The classical baseline row: scikit-learn's LabelSpreading on the same data as a deep trial.

Same labeled subset, same unlabeled training images, same test images as a deep trial of the
same config; the kernel width is chosen on the held-out validation split (never in the fit),
and the test error is reported at that choice. No torch here: plain numpy rows (flattened images).

    python -m trainables.classical --seeds 5      # digits, 100 labels, 5 labeled subsets, seconds

Kernel width. LabelSpreading's rbf kernel is exp(-gamma ||x - x'||^2). gamma is searched on a
log grid of multiples of 1 / median squared distance between the fit rows (the median
heuristic), not of absolute values: the grid then does not depend on the units of the inputs
(standardised 64-dim digits and ZCA 3072-dim CIFAR differ by orders of magnitude in ||x - x'||^2),
and scaling the images by s scales the chosen gamma by 1/s^2 and changes no prediction.
On digits (100 labels) the validation error is far higher at a fraction of the heuristic than on
the plateau it reaches from about 16 times it (label spreading wants a local graph), and well above
2^10 times it the kernel rows of some points underflow to zero; hence multipliers 2^-2 .. 2^10 in
factors of 2, and the choice made on validation.

Memory: the rbf kernel is a dense N x N float64 matrix (plus copies), so more than
config.MAX_RBF_ROWS fit rows is refused with the fix; kernel="knn" (a sparse k-nearest-neighbour graph,
n_neighbors chosen on validation) runs on larger sets.
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from trainables.config import check_size

GAMMA_MULTIPLIERS = tuple(2.0 ** k for k in range(-2, 11))  # x 1 / median ||x - x'||^2 of the fit rows
N_NEIGHBORS = (5, 10, 20, 40)  # kernel="knn" grid
MEDIAN_ROWS = 2_000  # rows (a fixed random subset when there are more) for the median distance


def median_sq_distance(x: np.ndarray, max_rows: int = MEDIAN_ROWS) -> float:
    """Median of ||x_i - x_j||^2 over pairs i < j of the rows of x (of a fixed random subset of max_rows)."""
    from scipy.spatial.distance import pdist

    if len(x) > max_rows:
        x = x[np.sort(np.random.default_rng(0).choice(len(x), max_rows, replace=False))]
    return float(np.median(pdist(x, "sqeuclidean")))


def _errors(model, x: np.ndarray, y: np.ndarray) -> float:
    """Error in percent of model.predict; a row whose kernel weights all underflow (NaN) counts as wrong."""
    if len(y) == 0:
        return math.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        proba = model.predict_proba(x)  # (M, K); predict() is classes_[argmax] of the same
    pred = model.classes_[proba.argmax(1)]
    pred[~np.isfinite(proba).all(1)] = -1  # argmax of a NaN row is class 0 by accident, not a prediction
    return 100.0 * float(np.mean(pred != y))


def label_spreading(x_l, y_l, x_u, x_val, y_val, x_test, y_test, gammas=GAMMA_MULTIPLIERS, alpha: float = 0.2,
                    max_iter: int = 100, kernel: str = "rbf", n_neighbors=N_NEIGHBORS) -> dict:
    """Fit LabelSpreading on labeled + unlabeled rows for each grid value; pick it on validation.

    x_*: (N, D) rows; y_l, y_val, y_test: (N,) int labels >= 0. The fit sees x_l (labeled) and x_u
    (marked -1) only; validation and test rows are predicted with the fitted model's predict.
    kernel "rbf": gamma = m / median ||x - x'||^2 (fit rows) for m in `gammas`; "knn": n_neighbors.
    The grid value with the lowest validation error wins, ties to the smaller gamma (smoother) or
    the larger n_neighbors (smoother). Returns val_error and test_error (percent, at the choice),
    gamma (NaN for knn), n_neighbors (None for rbf), gamma_multiplier, median_sq_dist, and
    val_errors / test_errors: {grid value (gamma or n_neighbors): percent}.
    """
    from sklearn.semi_supervised import LabelSpreading

    def f64(a):  # (N, ...) -> (N, D) float64; N may be 0 (no validation rows)
        a = np.asarray(a, dtype=np.float64)
        return a.reshape(a.shape[0], int(np.prod(a.shape[1:])))

    x_l, x_u, x_val, x_test = f64(x_l), f64(x_u), f64(x_val), f64(x_test)
    y_l, y_val, y_test = (np.asarray(a, dtype=np.int64) for a in (y_l, y_val, y_test))
    check_size(len(x_l) + len(x_u), kernel)
    if len(y_l) == 0 or y_l.min() < 0:
        raise ValueError("label_spreading needs labeled rows with labels >= 0 (-1 marks unlabeled rows internally)")
    x_fit = np.concatenate([x_l, x_u])  # (L + U, D): validation rows never enter
    y_fit = np.concatenate([y_l, np.full(len(x_u), -1, dtype=np.int64)])
    if kernel == "rbf":
        med = median_sq_distance(x_fit)
        grid = [m / med for m in gammas]  # increasing with the multipliers
        make = lambda g: LabelSpreading(kernel="rbf", gamma=g, alpha=alpha, max_iter=max_iter)
    else:
        med = math.nan
        grid = sorted(n_neighbors, reverse=True)  # smoother first, so ties go to the larger graph
        make = lambda k: LabelSpreading(kernel="knn", n_neighbors=k, alpha=alpha, max_iter=max_iter)
    if len(grid) > 1 and len(y_val) == 0:
        raise ValueError("choosing the kernel width needs validation rows; hold out a validation split "
                         "(val_size > 0) or pass a grid of one value")
    val_errors, test_errors = {}, {}
    for g in grid:
        with np.errstate(divide="ignore", invalid="ignore"):
            model = make(g).fit(x_fit, y_fit)
        val_errors[g], test_errors[g] = _errors(model, x_val, y_val), _errors(model, x_test, y_test)
    best = min(grid, key=lambda g: (0.0 if math.isnan(val_errors[g]) else val_errors[g], grid.index(g)))
    rbf = kernel == "rbf"
    return {"val_error": val_errors[best], "test_error": test_errors[best], "kernel": kernel,
            "gamma": best if rbf else math.nan, "n_neighbors": None if rbf else best,
            "gamma_multiplier": gammas[grid.index(best)] if rbf else math.nan, "median_sq_dist": med,
            "val_errors": val_errors, "test_errors": test_errors}


def _np(t) -> np.ndarray:
    """A torch tensor (any device) or array-like as a numpy array."""
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


def run_label_spreading(cfg, idx_l, idx_u, idx_val, data, kernel: str = "rbf", log=None) -> dict:
    """One trainer-shaped evaluation of LabelSpreading for `cfg` (method labelspreading).

    idx_l, idx_u, idx_val: indices into data.x_train (the deep trial's labeled, unlabeled and
    validation sets); data: a trainables.data.Dataset (tensors on any device) or anything with
    x_train, y_train, x_test, y_test. The keys are Trainer.evaluate's; metrics that do not apply
    (losses, lr, sparsity, sensitivity, a teacher) are NaN; ls_* describe the choice.
    """
    t0 = time.perf_counter()
    check_size(len(idx_l) + len(idx_u), kernel)  # before any copy
    idx_l, idx_u, idx_val = (_np(i).astype(np.int64) for i in (idx_l, idx_u, idx_val))
    x, y = _np(data.x_train), _np(data.y_train)  # (N, C, H, W), (N,)
    r = label_spreading(x[idx_l], y[idx_l], x[idx_u], x[idx_val], y[idx_val],
                        _np(data.x_test), _np(data.y_test), kernel=kernel)
    wall = time.perf_counter() - t0
    nan = math.nan
    out = {"step": cfg.steps, "epoch_fraction": nan,
           "test_error": r["test_error"], "test_error_student": r["test_error"], "test_error_teacher": nan,
           "val_error": r["val_error"], "val_error_student": r["val_error"], "val_error_teacher": nan,
           "best_val_error": r["val_error"], "test_error_at_best_val": r["test_error"],
           "best_test_error": r["test_error"], "lr": nan, "sparsity": nan, "g0_norm": nan,
           **{f"loss_{k}": nan for k in ("total", "xent", "cons", "kl", "mur", "entmin")},
           "sensitivity_mean": nan, "sensitivity_std": nan,
           "ls_kernel": r["kernel"], "ls_gamma": r["gamma"], "ls_gamma_multiplier": r["gamma_multiplier"],
           "ls_n_neighbors": nan if r["n_neighbors"] is None else r["n_neighbors"],
           "ls_median_sq_dist": r["median_sq_dist"],
           "ls_val_errors": json.dumps({f"{k:.6g}": v for k, v in r["val_errors"].items()}),
           "diverged": 0, "diverged_step": -1, "diverged_term": "", "wall_time": wall, "steps_per_s": nan,
           "compile_s": 0.0, "compile_mode": "none",
           "done": True}
    if log:
        choice = (f"gamma {r['gamma']:.4g} (x{r['gamma_multiplier']:g} / median)" if kernel == "rbf"
                  else f"n_neighbors {r['n_neighbors']}")
        log(f"[labelspreading] {kernel} {choice}  val_error {r['val_error']:.2f}  "
            f"test_error {r['test_error']:.2f}  {wall:.2f} s")
    return out


def main(argv=None):
    """Digits, 100 labels, the trainer's validation split: test error and time over labeled subsets."""
    from trainables.config import TrainConfig
    from trainables.data import labeled_split, load_dataset, validation_indices

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--num-labels", type=int, default=100)
    p.add_argument("--kernel", default="rbf", choices=("rbf", "knn"))
    a = p.parse_args(argv)
    data = load_dataset("digits", n_val=TrainConfig(dataset="digits").n_val)  # fitted outside validation
    rows = []
    for seed in range(a.seeds):
        cfg = TrainConfig(method="labelspreading", dataset="digits", num_labels=a.num_labels, seed=seed)
        idx_val = validation_indices(cfg.dataset, len(data.y_train), cfg.n_val)
        idx_l, idx_u = labeled_split(data.y_train, cfg.num_labels, cfg.num_classes, seed,
                                     val_idx=idx_val, rule=cfg.label_rule, pick=cfg.label_pick)
        out = run_label_spreading(cfg, idx_l, idx_u, idx_val, data, kernel=a.kernel, log=print)
        rows.append((out["test_error"], out["val_error"], out["wall_time"]))
    te, ve, wt = np.array(rows).T
    print(f"{a.seeds} labeled subsets: test_error {te.mean():.2f} ± {te.std(ddof=1) if a.seeds > 1 else 0:.2f} %, "
          f"val_error {ve.mean():.2f} %, {wt.mean():.2f} s per run")


if __name__ == "__main__":
    main()
