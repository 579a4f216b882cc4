"""The Ray Tune searcher behind `--seeds auto`: it suggests each next trial's config, seeds where a
cell's verdict is still open (sweeper/seeds/sequential.py decides), and says FINISHED when none is.

Tune calls suggest() whenever it could start a trial and on_trial_complete() with each trial's last
result; the searcher keeps every configuration's finished seeds and asks sequential.targets how many
each needs now, so a cell moves to its next look as soon as it and its baseline finished the last
one (no barrier across cells), and trials run as concurrently as resources allow. Tune saves the
searcher beside its experiment state (save / restore below), so `--resume` continues mid-round:
a trial it re-runs completes under the trial id the searcher recorded.

    python -m sweeper.run ablation_radius --preset quick --seeds auto
    pytest tests/test_seed_searcher.py -q
"""
from __future__ import annotations

import json
import math

from ray.tune.search import Searcher

from search_spaces import Sweep
from sweeper.seeds.auto_seeds import configurations, pairing, plan_of
from sweeper.seeds.sequential import Plan, targets, verdict


def searcher_for(sweep: Sweep, trials: list[dict]) -> tuple["SeedSearcher", int]:
    """The searcher of a `--seeds auto` sweep (auto_seeds.auto_sweep) over its first look's trial configs,
    and Tune's num_samples: every configuration at the cap, a bound the searcher's FINISHED comes before."""
    cells = configurations(trials)
    plan = plan_of(sweep, trials)
    return SeedSearcher(cells, pairing(cells, sweep), plan, sweep.metric), len(cells) * plan.cap


class SeedSearcher(Searcher):
    """SeedSearcher(cells, baseline_of, plan, metric): cells are full trial configs without a seed."""

    def __init__(self, cells: list[dict], baseline_of: list[int | None], plan: Plan, metric: str = "test_error"):
        super().__init__(metric=metric, mode="min")
        self.cells = cells
        self.baseline_of = baseline_of
        self.plan = plan
        self.values: list[dict[int, float]] = [{} for _ in cells]  # finished seeds: value, NaN without one
        self.running: dict[str, tuple[int, int]] = {}              # trial id -> (cell, seed), suggested
        self.queue: list[tuple[int, int]] = []                     # (cell, seed) to suggest next

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # the configs come from the sweep, not from a param space

    def suggest(self, trial_id: str) -> dict | str | None:
        self._plan()
        if self.queue:
            c, s = self.queue.pop(0)
            self.running[trial_id] = (c, s)
            return {**self.cells[c], "seed": s}
        return None if self.running else Searcher.FINISHED

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        c, s = self.running.pop(trial_id)
        value = (result or {}).get(self.metric)
        ok = not error and isinstance(value, (int, float)) and math.isfinite(value)
        self.values[c][s] = float(value) if ok else math.nan  # a failed or diverged seed pairs with nothing

    def _plan(self) -> None:
        """Queue the seeds sequential.targets asks for that are neither finished, running nor queued."""
        have = set(self.queue) | set(self.running.values()) | {(c, s) for c, v in enumerate(self.values) for s in v}
        for c, n in enumerate(targets(self.values, self.baseline_of, self.plan)):
            self.queue += [(c, s) for s in self.plan.seeds(n) if (c, s) not in have]

    def verdicts(self) -> list:
        """Each cell's verdict (sequential.Verdict) so far; None for a cell compared with nothing."""
        return [None if b is None else verdict(self.values[c], self.values[b], self.plan)
                for c, b in enumerate(self.baseline_of)]

    # Tune saves this beside its experiment state (searcher-state-*.pkl) and restores it on --resume
    def get_state(self) -> dict:
        return {"values": [{str(s): v for s, v in d.items()} for d in self.values],
                "running": {t: list(cs) for t, cs in self.running.items()},
                "queue": [list(cs) for cs in self.queue]}

    def set_state(self, state: dict) -> None:
        self.values = [{int(s): float(v) for s, v in d.items()} for d in state["values"]]
        self.running = {t: (int(c), int(s)) for t, (c, s) in state["running"].items()}
        self.queue = [(int(c), int(s)) for c, s in state["queue"]]

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "w") as f:
            json.dump(self.get_state(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path) as f:
            self.set_state(json.load(f))
