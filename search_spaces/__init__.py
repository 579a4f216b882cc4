"""Search spaces: one module per sweep, found by its file name (the folder is the registry).

Each module `search_spaces/<name>.py` defines `sweep(preset: str) -> Sweep` and a
docstring stating the hypothesis and the command; the cost is measured, not typed here
(`python -m sweeper.list`: each preset's committed run, sweeper/costs.py). A sweep is data:
it never builds a Tuner (that is `sweeper.run`'s job).

    python -m sweeper.list
"""
from __future__ import annotations

import importlib
import itertools
import pkgutil
from dataclasses import dataclass, field
from typing import Any

from trainables.files import closest

PRESETS = ("paper", "quick", "mnist")
SWEEP_PRESETS = ("paper", "quick")  # what a sweep module offers unless it sets its own PRESETS


class SweepError(ValueError):
    """Unknown sweep or preset; the message names the closest valid ones."""


@dataclass(frozen=True)
class Sweep:
    name: str                               # file name of the module
    description: str                        # one line: what of the paper it reproduces
    paper_ref: str                          # e.g. "Fig. 3(c)", "Table 1"
    base: dict[str, Any]                    # TrainConfig overrides shared by every trial
    grid: dict[str, list] = field(default_factory=dict)      # key -> values, Cartesian product
    variants: list[dict[str, Any]] = field(default_factory=lambda: [{}])  # rows like MT, MT+VD, ...
    seeds: int = 3                          # seeds first_seed..first_seed+seeds-1 are a grid axis
    first_seed: int = 0                     # a confirmation run starts past the seed its search used
    rows: tuple[str, ...] = ("method", "vd", "mur")          # config keys forming table rows
    cols: tuple[str, ...] = ()              # config keys forming table columns
    metric: str = "test_error"              # the number a trial returns (percent, lower is better)
    minutes_per_trial: float = 1.0          # planning estimate per trial, set, not measured (sweeper/costs.py)
    search: dict[str, Any] | None = None    # hpo only: {"space": {...}, "num_samples": n, ...}
    baseline: dict[str, Any] | None = None  # the row each cell is compared with, paired over seeds, e.g. {"method": "mt", "mur": "none"}
    baseline_within: tuple[str, ...] = ()  # keys a cell keeps when its baseline is looked for: ("method",) compares Pi+VD with Pi, Pi with MT
    baseline_for: dict[str, dict[str, Any]] = field(default_factory=dict)  # method -> the row its base row is compared with instead of the baseline (VAT+EntMin vs MUT+MUR)
    match_margin: float | None = None       # --seeds auto: a cell whose interval lies inside ± this (metric units) "matches" its baseline and stops; None: only "differs" stops
    max_seeds: int | None = None            # --seeds auto (set by sweeper.run --max-seeds): seeds added per cell while its claim is open, up to this; None: a fixed design of `seeds`
    boundary: str | None = None             # --seeds auto (set by sweeper.run): each look's level rule, one of sweeper.seeds.sequential.BOUNDARIES; None: a fixed design

    def trials(self, seeds: int | None = None) -> list[dict[str, Any]]:
        """Every trial's config dict: base, then a variant, then a grid point, then the seed."""
        n_seeds = self.seeds if seeds is None else seeds
        keys = list(self.grid)
        out = []
        for variant in self.variants:
            for values in itertools.product(*(self.grid[k] for k in keys)):
                for seed in range(self.first_seed, self.first_seed + n_seeds):
                    cfg = {**self.base, **variant, **dict(zip(keys, values)), "seed": seed}
                    out.append(cfg)
        return out


def names() -> list[str]:
    """Every sweep module in this folder, sorted."""
    import search_spaces

    return sorted(m.name for m in pkgutil.iter_modules(search_spaces.__path__)
                  if not m.name.startswith("_") and m.name != "common")


def _module(name: str):
    valid = names()
    if name not in valid:
        raise SweepError(f"unknown sweep {name!r}; "
                         f"{closest(name, valid, 'see the sweeps with python -m sweeper.list')}")
    return importlib.import_module(f"search_spaces.{name}")


def _offered(module) -> tuple[str, ...]:
    return getattr(module, "PRESETS", SWEEP_PRESETS)


def presets(name: str) -> tuple[str, ...]:
    """The presets sweep `name` offers: its module's PRESETS, else SWEEP_PRESETS."""
    return _offered(_module(name))


def default_preset(name: str) -> str:
    """The preset a command without --preset runs: paper where the sweep has one, else its first."""
    offered = presets(name)
    return "paper" if "paper" in offered else offered[0]


def get_sweep(name: str, preset: str = "paper") -> Sweep:
    module = _module(name)  # an unknown name fails first, with the valid ones
    if preset not in PRESETS:
        raise SweepError(f"unknown preset {preset!r}; {closest(preset, PRESETS, 'valid presets: ' + ', '.join(PRESETS))}")
    offered = _offered(module)
    if preset not in offered:
        raise SweepError(f"sweep {name} has no {preset} preset; use {' or '.join(offered)}")
    return module.sweep(preset)
