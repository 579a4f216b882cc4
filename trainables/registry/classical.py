"""scikit-learn's LabelSpreading on the same split as a deep trial (trainables/classical.py): no network."""
from trainables.registry.method import Method


def _check(cfg) -> str | None:
    if cfg.mur != "none" or cfg.vd:
        return "method 'labelspreading' (scikit-learn's LabelSpreading) has no VD or MUR: set vd=false, mur=none"
    return None


# keys: the only TrainConfig fields it reads besides method, vd and mur (config.applies)
LABELSPREADING = Method("labelspreading", label="LabelSpreading", order=1, network=False,
                        keys=("dataset", "num_labels", "label_rule", "label_pick", "val_size", "seed", "label_seed"),
                        check=_check)
