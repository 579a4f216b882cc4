"""Every trial as an MLflow run, through Ray Tune's own MLflowLoggerCallback (`--mlflow URI`).

One MLflow experiment per sweep folder (named like it: ablation_radius-20260101-120000), one run per
trial, logged from the driver (Ray's callback; nothing runs inside the trials): the trial's config
as parameters, every report's metrics at its training `step` (Ray's callback would use Tune's
iteration count), and the tags `sweep`, `preset`, `folder`, `seed`, `row` and `col` (the trial's
row and column as the table labels them: the sweep's row keys and the other keys its grid varies;
its column keys). mlflow is an optional
extra; its usage telemetry is turned off before it is imported.

    pip install -e '.[mlflow]'
    mlflow server --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port 5000 &
    python -m sweeper.run ablation_radius --preset quick --mlflow http://127.0.0.1:5000
"""
from __future__ import annotations

import os
import urllib.error
import urllib.request

from sweeper.analysis.labels import trial_labels

TELEMETRY_OFF = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}


class MLflowError(ValueError):
    """mlflow missing or its tracking server unreachable; the one-line message names the fix."""


def check_mlflow(uri: str, timeout_s: float = 5.0) -> None:
    """Before Ray starts: mlflow importable, and an http(s) tracking server answering /health
    within timeout_s (mlflow's own client would retry for minutes); any other URI (sqlite:///...)
    must list its experiments."""
    os.environ.update({k: os.environ.get(k, v) for k, v in TELEMETRY_OFF.items()})
    try:
        import mlflow
    except ImportError:
        raise MLflowError("--mlflow needs mlflow: pip install -e '.[mlflow]' (or pip install mlflow)") from None
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s) as r:
                ok = r.status == 200
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise MLflowError(f"MLflow tracking server {uri} unreachable ({reason}); start it (mlflow server "
                              f"--backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port PORT) or fix "
                              f"--mlflow") from None
        if not ok:
            raise MLflowError(f"MLflow tracking server {uri} answered /health with {r.status}; check --mlflow")
        return
    try:
        mlflow.MlflowClient(tracking_uri=uri).search_experiments(max_results=1)
    except Exception as e:  # mlflow raises MlflowException and store-specific errors alike
        raise MLflowError(f"MLflow tracking URI {uri} cannot be used ({type(e).__name__}: "
                          f"{' '.join(str(e).split())[:200]}); pass http://HOST:PORT or sqlite:///PATH") from None


def mlflow_callback(uri: str, folder: str, sweep: str, preset: str, row_keys: list[str], col_keys: list[str]):
    """A tune.Callback logging each trial as a run of MLflow experiment `folder` (the sweep folder's name)."""
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    class SweepMLflow(MLflowLoggerCallback):
        def log_trial_start(self, trial):
            cfg = trial.config
            row, col = trial_labels(cfg, row_keys, col_keys)
            self.tags = {"sweep": sweep, "preset": preset, "folder": folder, "seed": str(cfg.get("seed")),
                         "row": row, **({"col": col} if col_keys else {})}
            super().log_trial_start(trial)

        def log_trial_result(self, iteration, trial, result):
            step = result.get("step", result.get("training_iteration", iteration))
            self.mlflow_util.log_metrics(run_id=self._trial_runs[trial], metrics_to_log=result, step=int(step))

    return SweepMLflow(tracking_uri=uri, experiment_name=folder, save_artifact=False)
