"""The module names an experiment stored while sweeper/ was one flat folder, for `--resume` of it.

Tune pickles some of the driver's objects into an experiment's state by module and name: tuner.pkl
holds `sweeper.tuner.trial_dirname`, `sweeper.stopping.StopAfterSaves`, the live report's and MLflow's
callbacks (with the functions of sweeper.live and sweeper.labels they call), and a search's
searcher (sweeper.optuna_search, sweeper.seed_searcher with sweeper.sequential's Plan). `install()`,
called by tuner.make_tuner on --resume only, lets those old names import as the modules that hold
them now, each when the unpickler first asks for it (Tune keeps the experiment's tuner.pkl as it was
stored, so every later --resume of it needs them again). tests/test_resume_flat_layout.py resumes
such an experiment (tests/fixtures/flat_layout_experiment/).

    python -m sweeper.run quick_settings --resume results/quick_settings-20261127-193748-f9ae8e
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

OLD_NAMES = {  # the flat module name -> where it is now
    "sweeper.tuner": "sweeper.driver.tuner", "sweeper.ray_session": "sweeper.driver.ray_session",
    "sweeper.signals": "sweeper.driver.signals", "sweeper.stopping": "sweeper.driver.stopping",
    "sweeper.live": "sweeper.driver.live", "sweeper.optuna_search": "sweeper.driver.optuna_search",
    "sweeper.mlflow_log": "sweeper.driver.mlflow_log", "sweeper.preflight": "sweeper.driver.preflight",
    "sweeper.provenance": "sweeper.driver.provenance",
    "sweeper.auto_seeds": "sweeper.seeds.auto_seeds", "sweeper.seed_searcher": "sweeper.seeds.seed_searcher",
    "sweeper.sequential": "sweeper.seeds.sequential", "sweeper.confirm": "sweeper.seeds.confirm",
    "sweeper.aggregate": "sweeper.analysis.aggregate", "sweeper.paired": "sweeper.analysis.paired",
    "sweeper.stats": "sweeper.analysis.stats", "sweeper.layout": "sweeper.analysis.layout",
    "sweeper.labels": "sweeper.analysis.labels", "sweeper.tables": "sweeper.analysis.tables",
    "sweeper.render": "sweeper.analysis.render", "sweeper.ranking": "sweeper.analysis.ranking",
    "sweeper.plots": "sweeper.analysis.plots", "sweeper.html": "sweeper.analysis.html",
    "sweeper.index": "sweeper.analysis.index", "sweeper.paper_results": "sweeper.analysis.paper_results",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the module now holding it (the same module object)."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in OLD_NAMES else None

    def create_module(self, spec):
        module = importlib.import_module(OLD_NAMES[spec.name])
        self.own_spec = module.__spec__  # the import sets __spec__ to the alias's: exec_module puts it back
        return module

    def exec_module(self, module):  # already executed under its own name
        module.__spec__ = self.own_spec


def install() -> None:
    """Let the old names import (once per process; no current name is a key, so none is shadowed)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())  # before the path finders: a stale sweeper/X.py elsewhere must not answer
