"""How a table names things: methods, variants, data sets, config keys and their values, metrics.

A row's name is its method, VD and MUR ("MT + VD + MUR"), every other key in parentheses with its
short name ("r 1"); a column is a data set and its label count ("CIFAR-10 1000").

    python -c "from sweeper.analysis.labels import row_label; print(row_label({'method': 'mt', 'vd': True, 'mur': 'direct'}))"
"""
from __future__ import annotations

import math

import numpy as np

from sweeper.analysis.aggregate import MEDIAN_LAST
from trainables.config import MUR_KINDS, MUR_METHODS
from trainables.registry import METHODS

METHOD_NAMES = {m.name: m.label for m in METHODS.values()}  # trainables/registry/
MUR_NAMES = {name: kind.label for name, kind in MUR_KINDS.items()}  # trainables/config.py
DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "svhn": "SVHN", "digits": "digits", "mnist": "MNIST"}
KEY_NAMES = {"mur_radius": "r", "mur_step_size": "α", "mur_steps": "s", "kl_coef": "KL coef",
             "num_labels": "labels", "entmin_coef": "entmin", "bn_clean_pass": "clean BN pass",
             "cons_coef": "λ1", "mur_coef": "λ3", "dropout_mode": "dropout", "label_rule": "labels by"}
NAME_KEYS = ("method", "vd", "mur")  # form a row's name ("MT + VD + MUR"); every other key goes in parentheses
ORDER = {"method": tuple(sorted(METHODS, key=lambda m: METHODS[m].order)),
         "mur": MUR_METHODS,
         "dataset": ("digits", "mnist", "svhn", "cifar10", "cifar100")}
# What each point of a trial's curve means (notes), and the warning a title carries.
WHICH_TEXT = {"final": "final = at the last evaluation, the honest default",
              "best_val": "best_val = at the evaluation with the lowest validation error (a split held out of "
                          "the training set): the stopping step is selected on validation, the test error "
                          "reported there",
              "best_test": "best_test = the minimum over evaluations: selected on the test set, optimistic; "
                           "what the paper's authors kept",
              "median_last": f"median_last = the median over each trial's last {MEDIAN_LAST} evaluations: FixMatch's "
                             f"statistic"}
BEST_HEADER = "best test (chosen on test)"  # the best_test column beside a paper table's cells: selected on test
WHICH_TITLE = {"final": "", "best_val": " [best_val: stopping step selected on the validation split]",
               "best_test": " [best_test: selected on the test set, optimistic; what the paper's authors kept]",
               "median_last": f" [median_last: median of each trial's last {MEDIAN_LAST} evaluations, "
                              f"FixMatch's statistic]"}


# ---------------------------------------------------------------- labels

def fmt_value(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, float, np.integer, np.floating)):
        return f"{float(v):g}"
    return str(v)


def short_label(key: str, v) -> str:
    """"r 10", "entmin 0.1", "CIFAR-10": a key and its value as a row label's parentheses show them."""
    if key == "dataset":
        return DATASET_NAMES.get(v, str(v))
    if isinstance(v, (bool, np.bool_)):
        return f"{KEY_NAMES.get(key, key)} {'on' if v else 'off'}"
    return f"{KEY_NAMES.get(key, key)} {fmt_value(v)}"


def row_label(cfg: dict) -> str:
    """"MT + VD + MUR" from method/vd/mur, every other key in parentheses by its short name:
    "MT + MUR (r 1, entmin 0)"; "base" if method/vd/mur name nothing and no other key is given."""
    parts = []
    if "method" in cfg:
        parts.append(METHOD_NAMES.get(cfg["method"], str(cfg["method"])))
    if "vd" in cfg and bool(cfg["vd"]):
        parts.append("VD")
    if "mur" in cfg and cfg["mur"] != "none":
        parts.append(MUR_NAMES.get(cfg["mur"], str(cfg["mur"])))
    main = " + ".join(parts)
    others = ", ".join(short_label(k, v) for k, v in cfg.items() if k not in NAME_KEYS)
    if main and others:
        return f"{main} ({others})"
    return main or others or ("base" if cfg else "all")


def col_label(cfg: dict) -> str:
    """"CIFAR-10 1000" from dataset/num_labels, then other keys as "r=10"."""
    parts = []
    if "dataset" in cfg:
        parts.append(DATASET_NAMES.get(cfg["dataset"], str(cfg["dataset"])))
    if "num_labels" in cfg:
        parts.append(fmt_value(cfg["num_labels"]) if "dataset" in cfg else f"{fmt_value(cfg['num_labels'])} labels")
    parts += [f"{KEY_NAMES.get(k, k)}={fmt_value(v)}" for k, v in cfg.items() if k not in ("dataset", "num_labels")]
    return " ".join(parts)


def trial_labels(config: dict, row_keys, col_keys) -> tuple[str, str]:
    """A trial's table row and column labels from its config and the sweep's row and column keys ("" for no
    column keys): how the trackers (MLflow, W&B) name a trial as the tables do."""
    return (row_label({k: config[k] for k in row_keys if k in config}),
            col_label({k: config[k] for k in col_keys if k in config}) if col_keys else "")


def sort_key(key: str, v):
    if key in ORDER and v in ORDER[key]:
        return (0, ORDER[key].index(v), "")
    if isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating)):
        return (2, 0, "") if isinstance(v, float) and math.isnan(v) else (0, float(v), "")
    return (1, 0, str(v))


def metric_name(metric: str) -> str:
    return {"test_error": "test error (%)", "val_error": "validation error (%)",
            "sensitivity_mean": "sensitivity"}.get(metric, metric)


def py_value(v):
    return v.item() if isinstance(v, np.generic) else v
