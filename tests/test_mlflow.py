"""`--mlflow URI` (sweeper/driver/mlflow_log.py): a bad URI is one line and exit 2 before Ray starts; a real
`mlflow server` on 127.0.0.1 with a SQLite backend gets one run per trial with its tags, params and
metrics by step, read back with MlflowClient and compared with trials.parquet.

    pytest tests/test_mlflow.py -q
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from conftest import free_port

from search_spaces import get_sweep
from sweeper.driver.preflight import select_cells
from sweeper.run import main

ROOT = Path(__file__).resolve().parents[1]
CELLS = "mur_radius=1.0|mur=random"  # ablation_mur_vs_rr's cells at r = 1 (LabelSpreading's too) and MT+RR at r = 4


def test_unreachable_server_is_one_line_and_exit_2_before_ray(tmp_path, capsys):
    pytest.importorskip("mlflow")
    port = free_port()  # nothing listens there
    assert main(["ablation_radius", "--preset", "quick", "--mlflow", f"http://127.0.0.1:{port}",
                 "--storage", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: MLflow tracking server http://127.0.0.1:{port} unreachable (") and "\n" not in err
    assert not list(tmp_path.iterdir())  # nothing written, no Ray started


@pytest.mark.slow
def test_missing_mlflow_is_one_line_and_exit_2(tmp_path):
    code = ("import sys\n"
            "class _No:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'mlflow':\n"
            "            raise ImportError('no mlflow')\n"
            "sys.meta_path.insert(0, _No())\n"
            "from sweeper.run import main; sys.exit(main(sys.argv[1:]))")
    p = subprocess.run([sys.executable, "-c", code, "ablation_radius", "--preset", "quick", "--mlflow",
                        "http://127.0.0.1:1", "--storage", str(tmp_path)], check=False, cwd=ROOT, capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip() == "error: --mlflow needs mlflow: pip install -e '.[mlflow]' (or pip install mlflow)"


@pytest.mark.slow
def test_every_trial_is_an_mlflow_run_with_its_tags_params_and_metrics(ray_head, tmp_path):
    """A sweep of four trials (one after another in one trial process) against a real `mlflow server`:
    LabelSpreading (one report, at the end), MT+MUR and MT+RR at r = 1, and MT+RR at r = 4 (the same row,
    another column); each is one MLflow run whose tags, params and metric history by step equal its
    trials.parquet row."""
    mlflow = pytest.importorskip("mlflow")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    env.pop("RAY_ADDRESS", None)
    # the tracking API only: without the server's job runner (its scorers' and trace schedulers' processes)
    server_env = {**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), "server", "--backend-store-uri",
                               f"sqlite:///{tmp_path / 'mlflow.db'}", "--default-artifact-root",
                               str(tmp_path / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
                               "--workers", "1"],
                              env=server_env, stdout=(tmp_path / "server.log").open("w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(uri + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None and time.time() < deadline, (tmp_path / "server.log").read_text()[-2000:]
            time.sleep(0.2)
        p = subprocess.run([sys.executable, "-m", "sweeper.run", "ablation_mur_vs_rr", "--preset", "quick",
                            "--seeds", "1", "--set", "steps=20", "--set", "eval_every=10", "--set", "lr_rampdown=10",
                            "--set", "sensitivity_samples=20", "--cells", CELLS, "--cells-only", "--max-concurrent",
                            "1", "--mlflow", uri, "--storage", str(tmp_path / "results"),
                            "--address", ray_head.address, "--live-every", "0"],
                           check=False, cwd=ROOT, env={**env, **ray_head.env}, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        exp = next((tmp_path / "results").glob("ablation_mur_vs_rr-*"))
        trials = pd.read_parquet(exp / "trials.parquet")
        client = mlflow.MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(exp.name)
        runs = client.search_runs([experiment.experiment_id], max_results=100)
        cut = select_cells(get_sweep("ablation_mur_vs_rr", "quick"), [CELLS], compared=False)
        assert len(runs) == len(trials) == len(cut.trials(seeds=1)) == 4
        by_seed_row = {}
        for run in runs:
            tags, params = run.data.tags, run.data.params
            assert tags["sweep"] == "ablation_mur_vs_rr" and tags["preset"] == "quick" and tags["folder"] == exp.name
            t = trials[(trials["trial_index"] == int(params["trial_index"]))].iloc[0]
            assert tags["seed"] == str(t["seed"]) and params["mur"] == str(t["mur"]) and params["steps"] == "20"
            history = client.get_metric_history(run.info.run_id, "test_error")
            # every evaluation at its training step (LabelSpreading, no training loop, reports once at the end)
            assert [m.step for m in history] == ([20] if t["method"] == "labelspreading" else [10, 20])
            assert history[-1].value == pytest.approx(t["final_test_error"])
            by_seed_row[(tags["row"], tags["col"], tags["seed"])] = run
        assert len(by_seed_row) == len(runs)  # row and column (r) tell every trial of one seed apart
        assert {r for r, _, _ in by_seed_row} == {"LabelSpreading", "MT + MUR", "MT + RR"}
        rr_cols = {c for r, c, _ in by_seed_row if r == "MT + RR"}  # one row, two columns
        assert rr_cols == {f"r={r:g}" for r in trials.loc[trials["mur"] == "random", "mur_radius"]} == {"r=1", "r=4"}
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
