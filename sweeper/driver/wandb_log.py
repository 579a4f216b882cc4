"""Every trial as a Weights & Biases run (`--wandb PROJECT`), logged from the driver by a small tune.Callback.

One run per trial in project PROJECT, grouped by the sweep folder's name (ablation_radius-20260101-120000-1a2b3c),
named by the trial's row, column and seed as the tables label them and tagged with the sweep and preset: the
trial's config as the run's config, every report's numeric metrics as one W&B step at its training `step`,
and at the trial's end its row of trials.parquet (final_*, best_*, bestval_*, medlast_*, as
sweeper/analysis/aggregate.py computes them from its result.json) as the run's summary. The run id follows
from the folder's name and the trial id (`run_id`) and runs open with resume="allow", so `--resume`
continues each trial's run rather than starting another. Nothing runs inside the trials.

wandb is an optional extra. Its error reports (Sentry) are off before it is imported; its system metrics,
machine info and console capture are off too: they would describe the driver, not the trial's node. The API
key stays where wandb keeps it (WANDB_API_KEY, `wandb login`'s ~/.netrc); no file of the experiment holds
it. With WANDB_MODE=offline the runs are written under WANDB_DIR (default ./wandb) for `wandb sync` later.

    pip install -e '.[wandb]'
    WANDB_MODE=offline python -m sweeper.run ablation_radius --preset quick --wandb vbi-mur
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

from sweeper.analysis import aggregate
from sweeper.analysis.labels import trial_labels
from trainables.files import KERNELS_KEY

ENV_DEFAULTS = {"WANDB_ERROR_REPORTING": "false"}  # no crash reports to Sentry
NOT_IN_NAMES = '/\\#?%:'  # characters a W&B project name cannot hold
RUN_SETTINGS = {"console": "off", "x_disable_stats": True, "x_disable_machine_info": True, "silent": True,
                "save_code": False}


class WandbError(ValueError):
    """wandb missing, its settings unreadable, the project name invalid or no API key for online logging;
    the one-line message names the fix."""


def check_wandb(project: str) -> None:
    """Before Ray starts: wandb importable, `project` a W&B project name, and, unless wandb runs offline or
    disabled (WANDB_MODE or `wandb offline`), an API key at hand (read locally, nothing sent)."""
    os.environ.update({k: os.environ.get(k, v) for k, v in ENV_DEFAULTS.items()})
    try:
        import wandb
    except ImportError:
        raise WandbError("--wandb needs wandb: pip install -e '.[wandb]' (or pip install wandb)") from None
    if not project.strip() or any(c in project for c in NOT_IN_NAMES):
        raise WandbError(f"--wandb {project!r} is not a W&B project name (non-empty, none of {NOT_IN_NAMES}); "
                         f"give the entity in WANDB_ENTITY")
    try:
        mode = wandb.setup(settings=wandb.Settings(silent=True)).settings.mode
    except (ValueError, wandb.errors.Error) as e:  # ValueError: pydantic's, for a bad WANDB_* value
        raise WandbError(f"wandb cannot read its settings ({' '.join(str(e).split())[:200]}); fix the WANDB_* "
                         f"environment variables (e.g. WANDB_MODE=offline)") from None
    if mode in ("online", "shared", "run") and not wandb.login(verify=False, prompt=False):
        raise WandbError("--wandb logs to the W&B server but finds no API key; run `wandb login` or set "
                         "WANDB_API_KEY, or set WANDB_MODE=offline to write the runs locally (wandb sync uploads them)")


def run_id(folder: str, trial_id: str) -> str:
    """The W&B run id of trial `trial_id` of the sweep folder named `folder`: the same on every --resume
    (Tune keeps trial ids), distinct across folders (their names end in random digits), 16 hex digits."""
    return hashlib.sha256(f"{folder}/{trial_id}".encode()).hexdigest()[:16]


def report_metrics(result: dict) -> dict:
    """The numbers of one Tune report that the trial reported, under the trials table's names (nested
    dicts as a/b): Ray's bookkeeping, the versions and the CPU kernels left out, strings too."""
    left_out = {*aggregate.RAY_KEYS, *aggregate.VERSION_KEYS, KERNELS_KEY}
    kept = aggregate.flatten({k: v for k, v in result.items() if k not in left_out})
    return {k: v for k, v in kept.items() if isinstance(v, (int, float))}


def final_row(trial_dir: Path) -> dict:
    """The metric columns (final_*, bestval_*, best_*, medlast_*) of the trial's row of trials.parquet,
    from its folder's result.json."""
    row = aggregate.trial_row(trial_dir, "", {}, {})
    return {k: v for k, v in row.items() if k.startswith(tuple(aggregate.WHICH_PREFIX.values()))}


def run_name(config: dict, row_keys: list[str], col_keys: list[str]) -> str:
    """The trial as the tables name it: its row, its column (where the sweep has column keys) and its seed."""
    row, col = trial_labels(config, row_keys, col_keys)
    return " ".join(p for p in (row, col, f"seed={config.get('seed')}") if p)


class TrialRuns:
    """Each trial of the sweep folder `folder` as a run of W&B project `project`: the body of the tune.Callback
    that wandb_callback makes, kept free of Ray so that it is tested on its own."""

    def __init__(self, project: str, folder: str, sweep: str, preset: str, row_keys: list[str], col_keys: list[str]):
        self.project, self.folder, self.tags = project, folder, [sweep, preset]
        self.row_keys, self.col_keys = list(row_keys), list(col_keys)
        self.runs, self.steps = {}, {}  # trial id -> its open wandb Run, the last step that run logged

    def __getstate__(self):  # tuner.pkl keeps the settings, never a live run
        return {**self.__dict__, "runs": {}, "steps": {}}

    def on_trial_start(self, iteration, trials, trial, **info):
        if trial.trial_id in self.runs:  # a retry after a failure goes on in the same run
            return
        import wandb

        try:
            self.runs[trial.trial_id] = wandb.init(
                project=self.project, group=self.folder, id=run_id(self.folder, trial.trial_id), resume="allow",
                reinit="create_new", name=run_name(trial.config, self.row_keys, self.col_keys), tags=self.tags,
                config=dict(trial.config), settings=wandb.Settings(**RUN_SETTINGS))
        except wandb.errors.Error as e:
            print(f"note: trial {trial.trial_id} is not logged to W&B ({' '.join(str(e).split())[:200]})",
                  file=sys.stderr)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        run = self.runs.get(trial.trial_id)
        step = int(result.get("step", result.get("training_iteration", iteration)))
        if run is None or step <= self.steps.get(trial.trial_id, -1):  # a restart repeats logged steps
            return
        run.log(report_metrics(result), step=step, commit=True)  # written now: the final row comes after
        self.steps[trial.trial_id] = step

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.end(trial, exit_code=0)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.end(trial, exit_code=1)

    def on_experiment_end(self, trials, **info):
        for run in self.runs.values():  # trials a stop left paused: --resume continues their runs
            run.finish()
        self.runs.clear()

    def end(self, trial, exit_code: int) -> None:
        """The trial's run gets its row of trials.parquet as summary, then finishes."""
        run = self.runs.pop(trial.trial_id, None)
        if run is None:
            return
        try:
            run.summary.update(final_row(Path(trial.local_path)))
        except (aggregate.AggregateError, OSError) as e:
            print(f"note: W&B run {run.id} has no final row ({' '.join(str(e).split())[:200]})", file=sys.stderr)
        run.finish(exit_code=exit_code)


def wandb_callback(project: str, folder: str, sweep: str, preset: str, row_keys: list[str], col_keys: list[str]):
    """A tune.Callback logging each trial of the sweep folder `folder` as a run of W&B project `project`."""
    from ray import tune

    class SweepWandb(TrialRuns, tune.Callback):
        """TrialRuns as a callback of Tune's."""

    return SweepWandb(project, folder, sweep, preset, row_keys, col_keys)
