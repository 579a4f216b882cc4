"""Plain MT on digits with element-wise against channel dropout: which the quick network uses.

Hypothesis: on the quick network's small maps (4x4 after the first pooling, 2x2 after the second)
dropping whole channels, as the authors' ConvNet-13 does (noise shape [B, 1, 1, C]), removes a far
larger share of the signal per decision than on ConvNet-13's 16x16 and 8x8 maps, so element-wise
dropout may regularise this network better. The quick preset takes the mode with the lower
validation error here (common.QUICK's dropout_mode); the test error is printed beside it, not used.
Only plain MT is run, so the choice favours no variant under study.
    python -m sweeper.run quick_dropout --preset quick   # digits, 2 rows x 8 seeds
"""
from search_spaces import Sweep
from search_spaces.common import BASELINE_MT, QUICK

PRESETS = ("quick",)  # the question is about the quick network itself


def sweep(preset: str) -> Sweep:
    return Sweep(name="quick_dropout", paper_ref="appendix ConvNet-13 (dropout_2D after each pooling)",
                 description="plain MT on digits: element-wise vs channel dropout (validation)",
                 base={**QUICK, **BASELINE_MT, "val_size": -1},
                 variants=[{"dropout_mode": "channel"}, {"dropout_mode": "element"}],
                 seeds=8, first_seed=1, rows=("dropout_mode",), metric="val_error",
                 baseline={"dropout_mode": "channel"}, minutes_per_trial=0.5)
