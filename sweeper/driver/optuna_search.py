"""Ray Tune's OptunaSearch, with each study trial saying how its Tune trial ended.

Ray's OptunaSearch tells the study a trial is COMPLETE with its last value also when ASHA stopped it
early, so a dashboard over the study (optuna-dashboard sqlite:///.../optuna.db) would rank a value
taken at step 500 beside values taken at the end of the run. Before that tell, this searcher sets
user attributes on the study trial: `tune_trial_id`, `step` (where it ended), `steps` (the run's
length) and `stopped_early` (True when it ended before `steps` without an error), so the dashboard's
trial table and filters show which values are not comparable; the same trials are "stopped" in
trials.parquet and table_ranked.md.

    optuna-dashboard sqlite:///results/hpo-<stamp>/optuna.db     # user attributes in each trial's detail
"""
from __future__ import annotations

from ray.tune.search.optuna import OptunaSearch


class MarkedOptunaSearch(OptunaSearch):
    """OptunaSearch(..., steps=N): N is the trials' configured length in steps (their `steps` config)."""

    def __init__(self, *args, steps: int, **kwargs):
        super().__init__(*args, **kwargs)
        self._steps = int(steps)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False):
        ot_trial = self._ot_trials.get(trial_id)
        if ot_trial is not None and trial_id not in self._completed_trials:
            step = (result or {}).get("step")
            ot_trial.set_user_attr("tune_trial_id", trial_id)
            ot_trial.set_user_attr("steps", self._steps)
            if step is not None:
                ot_trial.set_user_attr("step", int(step))
            ot_trial.set_user_attr("stopped_early", bool(not error and step is not None and step < self._steps))
        super().on_trial_complete(trial_id, result, error)
