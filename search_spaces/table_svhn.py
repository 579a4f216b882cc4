"""Pi and MT x {base, +VD, +MUR, +VD+MUR} on SVHN {250, 500, 1000} labels (Table 2).

Hypothesis: MUR helps Pi most, VD helps MT most, VD+MUR is best for MT with 500/1000 labels,
and MUR hurts with 250 labels.
    python -m sweeper.run table_svhn --preset quick   # digits, 8 variants x 2 label counts x 2 seeds, ~15 min on 2 cores
    python -m sweeper.run table_svhn                  # 8 x 3 x 3 = 72 trials of 280k steps
"""
from search_spaces import Sweep
from search_spaces.common import QUICK, SVHN_MT, SVHN_PI, variants


def sweep(preset: str) -> Sweep:
    quick = preset == "quick"
    if quick:
        return Sweep(name="table_svhn", paper_ref="Table 2", base=dict(QUICK),
                     description="Pi/MT x {-, VD, MUR, VD+MUR} error table (digits stand-in)",
                     variants=variants("pi", 0.0) + variants("mt"), grid={"num_labels": [50, 100]},
                     seeds=2, rows=("method", "vd", "mur"), cols=("dataset", "num_labels"),
                     minutes_per_trial=1.0)
    rows = [{**SVHN_PI, **v} for v in variants("pi", 0.0)] + [{**SVHN_MT, **v} for v in variants("mt")]
    return Sweep(name="table_svhn", paper_ref="Table 2", base={}, description="Pi/MT x {-, VD, MUR, VD+MUR} on SVHN",
                 variants=rows, grid={"num_labels": [250, 500, 1000]}, seeds=3,
                 rows=("method", "vd", "mur"), cols=("dataset", "num_labels"), minutes_per_trial=150)
