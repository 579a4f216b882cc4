"""What one trial is: the full configuration of a trials.csv row, and the keys that make two trials the
same run but for the seed. The claims count each (configuration, seed) once by it (study/evidence.py),
and `sweeper.run --dry-run` prices a planned trial at its configuration's committed trial-min by it
(costs.py).

    python -c "from sweeper.trial_identity import identity, row_config; \
print(identity(row_config({'method': 'mt', 'seed': '0'}, {})))"
"""
from __future__ import annotations

from trainables.config import NOT_COMPARED, applies, full_config, train_config_defaults
from trainables.files import KERNELS_KEY

DEFAULTS = train_config_defaults()
# trials.csv columns that are not configuration (nor final_*); cpu_kernels: what the trial ran on
ROW_KEYS = ("seed", "status", "wall_time_s", KERNELS_KEY)


def typed(key: str, value):
    """A config value as TrainConfig types it (trials.csv gives strings; floats at its 6 significant digits,
    so a base value and a CSV value of one float compare equal)."""
    default = DEFAULTS.get(key)
    if isinstance(value, list):  # hashable, as an identity needs
        return tuple(typed(key, v) for v in value)
    if isinstance(value, str) and key in DEFAULTS and not isinstance(default, str):
        if isinstance(default, bool):
            return value.strip().lower() == "true"
        value = float(value)
    if isinstance(default, bool) or isinstance(value, bool):
        return value
    if isinstance(default, int) and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(default, float) and isinstance(value, (int, float)):
        return float(f"{float(value):.6g}")
    return value


def _config_cols(row: dict) -> list[str]:
    return [k for k in row if k not in ROW_KEYS and not k.startswith("final_")]


def row_config(row: dict, meta: dict) -> dict:
    """The full configuration a trials.csv row ran (config.full_config of the sweep's base < its variant <
    the row's keys), typed as TrainConfig types it."""
    cols = [k for k in _config_cols(row) if row[k] not in (None, "")]
    cfg = dict(meta.get("base") or {})
    for variant in meta.get("variants") or []:  # the one the row ran; keys it shares with all others are not in the row
        if all(k not in cols or typed(k, row[k]) == typed(k, v) for k, v in variant.items()):
            cfg.update(variant)
            break
    cfg.update({k: row[k] for k in cols})
    return {k: typed(k, v) for k, v in full_config(cfg).items()}


def identity(cfg: dict) -> tuple:
    """What makes two trials the same run, but for the seed: the keys that apply to this config."""
    return tuple(sorted((k, v) for k, v in cfg.items() if k not in NOT_COMPARED and applies(k, cfg)))
