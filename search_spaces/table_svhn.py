"""Pi and MT x {base, +VD, +MUR, +VD+MUR} on SVHN {250, 500, 1000} labels (Table 2).

Hypothesis: MUR helps Pi most, VD helps MT most, VD+MUR is best for MT with 500/1000 labels,
and MUR hurts with 250 labels. Baseline row: MT. Entropy minimisation is 0 in every authors' SVHN
run (search_spaces/common.py), so the paper rows differ only in what their labels name.
    python -m sweeper.run table_svhn                  # 8 x 3 x 3 = 72 trials of 280k steps

Quick preset (digits, 100 labels, 5 seeds): the Pi-model's base, +VD, +MUR, +VD+MUR with entmin 0,
and LabelSpreading. Baseline row: Pi. On digits the MT rows would repeat table_cifar's quick rows
(the same data and settings), so Table 2's MT findings are graded on that run; the supervised
network is left out to fit the quick budget.
    python -m sweeper.run table_svhn --preset quick   # digits, 5 rows x 5 seeds

Each variant's paired interval is against its own method's base row (Sweep.baseline_within), Pi and
the supervised row against MT, so every interval changes one knob (on the paper preset, also what
the labels name where the authors' run files differ, e.g. the clean BN pass).
"""
from search_spaces import Sweep
from search_spaces.common import LABEL_SPREADING, QUICK, SVHN_MT, SVHN_PI, variants


def sweep(preset: str) -> Sweep:
    baseline = {"method": "mt", "vd": False, "mur": "none"}
    if preset == "quick":
        rows = [LABEL_SPREADING] + variants("pi", "digits")
        return Sweep(name="table_svhn", paper_ref="Table 2", base=dict(QUICK),
                     description="Pi x {-, VD, MUR, VD+MUR} vs LabelSpreading (digits)",
                     variants=rows, seeds=5, baseline={"method": "pi", "vd": False, "mur": "none"},
                     rows=("method", "vd", "mur", "entmin_coef"), cols=("dataset", "num_labels"),
                     minutes_per_trial=0.9)
    rows = [{**SVHN_PI, **v} for v in variants("pi", "svhn")] + [{**SVHN_MT, **v} for v in variants("mt", "svhn")]
    return Sweep(name="table_svhn", paper_ref="Table 2", base={}, description="Pi/MT x {-, VD, MUR, VD+MUR} on SVHN",
                 variants=rows, grid={"num_labels": [250, 500, 1000]}, seeds=3, baseline=baseline, baseline_within=("method",),
                 rows=("method", "vd", "mur", "entmin_coef"), cols=("dataset", "num_labels"), minutes_per_trial=150)
