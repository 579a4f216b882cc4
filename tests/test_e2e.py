"""End to end through a real local Ray (not mocked): a tiny sweep via the CLI, and `ray job submit`."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from notorch import BLOCK_TORCH
from procs import pids_naming

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--seeds", "1", "--set", "steps=20", "--set", "eval_every=10", "--set", "lr_rampdown=10",
        "--set", "sensitivity_samples=20"]
R1_CELLS = ["--cells", "mur_radius=1.0", "--cells-only"]  # ablation_mur_vs_rr's cells at r = 1 (LabelSpreading's too)
# ablation_radius's LabelSpreading and plain MT (mur=none): a trial that ends at once and one that trains
MT_CELLS = ["--cells", "mur=none", "--cells-only"]
pytestmark = pytest.mark.slow


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env["PYTHONPATH"] = str(ROOT)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the job's `python`
    return {**env, **extra}


# sweeper.run's main in a driver where torch cannot be imported: torch is the trials' business
NO_TORCH_DRIVER = BLOCK_TORCH + "from sweeper.run import main; sys.exit(main(sys.argv[1:]))"


def test_tiny_sweep_runs_end_to_end_and_writes_results(tmp_path):
    """A driver that starts its own local Ray with a dashboard, as the quick start does, runs the r = 1 cells
    (LabelSpreading, MT+MUR, the MT+RR baseline) one after another in one trial process, without importing
    torch itself, and writes every result file, the virtual-point plot included."""
    p = subprocess.run([sys.executable, "-c", NO_TORCH_DRIVER, "ablation_mur_vs_rr", "--preset", "quick", *TINY,
                        *R1_CELLS, "--max-concurrent", "1", "--live-every", "0", "--dashboard",
                        "--storage", str(tmp_path)], check=False, cwd=ROOT, env=_env(), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert re.search(r"Ray dashboard: http://127\.0\.0\.1:\d+", p.stdout), p.stdout[:2000]
    exp = next(tmp_path.glob("ablation_mur_vs_rr-*"))
    assert f"results: {exp}" in p.stdout and "MT + MUR" in p.stdout and "MT + RR" in p.stdout
    for f in ("sweep.json", "trials.parquet", "summary.csv", "summary.parquet", "table.md", "table.tex"):
        assert (exp / f).stat().st_size > 0, f
    df = pd.read_parquet(exp / "trials.parquet")
    assert len(df) == 3 and set(df["status"]) == {"finished"}  # MUR and RR points at r = 1 + LabelSpreading
    mt = df[df["method"] == "mt"]
    assert set(mt["mur"]) == {"direct", "random"} and df["final_step"].eq(20).all()
    assert "LabelSpreading" in p.stdout and "(baseline)" in p.stdout  # the classical row, the RR baseline
    assert json.loads((exp / "sweep.json").read_text())["preset"] == "quick"
    # MUR trials leave the appendix figure's x* in their last checkpoint; the report plotted them
    stored = sorted(exp.glob("trial_*/checkpoint_*/virtual_points.npz"))
    assert len(stored) == (df["mur"] != "none").sum() and (exp / "virtual_points.png").stat().st_size > 1000
    assert not list(exp.glob("trial_*/events.out.tfevents*"))  # TensorBoard files only with --tensorboard


def _stop(job, job_id: str, storage: Path) -> float:
    """The stop `ray job stop --no-wait` sends (the Job API's stop request, from this process), then wait
    until the job's driver (every process naming `storage`) has ended and the job is STOPPED; returns the
    seconds from the SIGTERM to the driver's end. The SIGTERM's moment is when the driver's signal handler
    wrote its first line ("stopping: ...") to the job's log file, which the head keeps in its session's logs
    folder."""
    log = job.temp / "session_latest" / "logs" / f"job-driver-{job_id}.log"
    assert "stopping:" not in log.read_text()
    client = _client(job)
    assert client.stop_job(job_id)  # True: the job was running and its stop is under way
    t0 = time.monotonic()
    while "stopping:" not in log.read_text():
        assert time.monotonic() - t0 < 120, "no SIGTERM reached the driver in 2 minutes"
        time.sleep(0.1)
    signalled = time.monotonic()
    while pids_naming(str(storage)):
        assert time.monotonic() - signalled < 120, "the driver outlived its SIGTERM by 2 minutes"
        time.sleep(0.1)
    stop_s = time.monotonic() - signalled
    from ray.job_submission import JobStatus

    deadline = time.time() + 60
    while (status := client.get_job_status(job_id)) != JobStatus.STOPPED:
        assert time.time() < deadline, status
        time.sleep(0.1)
    return stop_s


def _client(job):
    """The Job API of `job`'s head from this process (an HTTP client; a `ray job` CLI call starts a Python
    process that imports Ray), with the head's token in its header."""
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(job.dashboard, headers={"Authorization": f"Bearer {job.env['RAY_AUTH_TOKEN']}"})


def _reports(exp: Path) -> dict[str, list[dict]]:
    return {t.name: [json.loads(x) for x in (t / "result.json").read_text().splitlines() if x.endswith("}")]
            for t in exp.glob("trial_*") if (t / "result.json").is_file()}


def test_ray_job_stop_keeps_what_finished_and_resume_finishes_every_trial(job_head, tmp_path):
    """`ray job stop` mid-sweep, twice: with Ray's default stop wait (3 s, then SIGKILL) the job's log still
    holds the --resume command and trials.parquet what had finished; submitted with the stop wait that
    docs/USAGE.md gives, the stop ends in time, its log ends with the --resume line and trials.parquet
    and summary.csv are written. A third job, the logged --resume command submitted as the docs submit a
    sweep (`ray job submit --working-dir . -- python -m sweeper.run ...`, waiting for it against a head on
    127.0.0.1), finishes every trial: its log streams back, the SDK reports it SUCCEEDED, and each trial
    wrote a TensorBoard file (`--tensorboard` at the start, kept by the resumes). The sweep is
    ablation_radius's LabelSpreading, which ends at once, and plain MT, long enough that each stop lands
    while it trains, in one trial process."""
    from sweeper.driver.stopping import JOB_STOP_WAIT_S

    storage = tmp_path / "stopped"
    # MT's steps left at each stop outlast it: the trial trains on while `ray job stop` starts, reaches the
    # driver and the driver ends, and the second stop comes after the first one's steps (each stop lands
    # tens of steps after its job's first report; the third job trains the rest)
    steps = 500
    argv = ["python", "-m", "sweeper.run", "ablation_radius", "--preset", "quick", "--seeds", "1", *MT_CELLS,
            "--max-concurrent", "1", "--set", f"steps={steps}", "--set", "eval_every=10", "--set", "lr_rampdown=10",
            "--set", "checkpoint_every_s=0", "--set", "sensitivity_samples=20", "--live-every", "0",
            "--storage", str(storage)]
    wait_env = json.dumps({"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(JOB_STOP_WAIT_S)}})
    finished = lambda reports: {t for t, r in reports.items() if r and r[-1]["step"] == steps}
    stops, exp = [], None
    job = job_head
    for i, extra in enumerate(([], ["--runtime-env-json", wait_env])):
        more = ["--resume", str(exp)] if i else ["--tensorboard"]  # a resume keeps the run's loggers
        p = job("submit", "--no-wait", *extra, "--working-dir", ".", "--", *argv, *more)
        job_id = re.search(r"raysubmit_\w+", p.stdout).group(0)
        exp_of = lambda: next(storage.glob("ablation_radius-*"), None)
        before = _reports(exp_of()) if i else {}
        deadline = time.time() + 300
        # stop once a trial finished (LabelSpreading, at once) and a running one reported new steps
        while not (exp_of() and finished(now := _reports(exp_of())) and any(
                len(r) > len(before.get(t, [])) and r[-1]["step"] < steps for t, r in now.items())):
            assert time.time() < deadline, job("logs", job_id).stdout[-3000:]
            time.sleep(0.2)
        exp = exp_of()
        at_stop = finished(_reports(exp))
        stop_s = _stop(job, job_id, storage)
        print(f"ray job stop {i + 1}: the driver ended {stop_s:.1f} s after its SIGTERM")
        log = _client(job).get_job_logs(job_id)
        resume_cmd = f"python -m sweeper.run ablation_radius --resume {exp} {' '.join(MT_CELLS)}"
        assert resume_cmd in log, log[-3000:]
        df = pd.read_parquet(exp / "trials.parquet")  # written at the signal, or by the final report
        assert at_stop <= set(df.loc[df["status"] == "finished", "trial_dir"]), df
        if i == 0:
            assert "note: `ray job stop` SIGKILLs this driver 3 s after its SIGTERM" in log
        else:
            assert "note: `ray job stop`" not in log and "interrupted:" in log
            assert log.rstrip().splitlines()[-1].endswith(f"`{resume_cmd}`"), log[-3000:]
            assert (exp / "summary.csv").is_file()
        stops.append({"stop_wait_s": int(json.loads(extra[1])["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"]) if extra
                      else 3, "sigterm_to_driver_end_s": round(stop_s, 1), "finished_at_stop": len(at_stop),
                      "ended": "on its own" if "interrupted:" in log else "SIGKILLed"})
    p = job("submit", "--working-dir", ".", "--", *resume_cmd.split())
    assert p.returncode == 0 and f"resuming {exp}" in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]
    assert "results:" in p.stdout  # the job's own log (the CLI's output) streams back
    assert "note: `ray job stop`" in p.stdout  # Ray's default stop wait (3 s) is too short: the fix is named
    job_id = re.search(r"Job '(raysubmit_\w+)' succeeded", p.stdout).group(1)
    from ray.job_submission import JobStatus

    assert _client(job).get_job_status(job_id) == JobStatus.SUCCEEDED
    df = pd.read_parquet(exp / "trials.parquet")
    assert sorted(df["method"]) == ["labelspreading", "mt"] and set(df["status"]) == {"finished"}
    assert df["final_step"].eq(steps).all()
    # --tensorboard: each trial's folder has its events (MT's stopped runs and its resumes may each add a file)
    trial_dirs = list(exp.glob("trial_*"))
    assert len(trial_dirs) == 2 and all(list(t.glob("events.out.tfevents*")) for t in trial_dirs)
    print(json.dumps({"test": "ray job stop + resume", "stops": stops}))


def test_hpo_runs_optuna_with_asha_and_ranks_the_trials(ray_head, tmp_path):
    """hpo through a real Ray (the test process's head, joined with --address): Optuna's TPE samples (study
    kept in SQLite), ASHA stops the poor trials at the first rung, and the report ranks them (finished
    first, then the stopped ones)."""
    import optuna

    steps = 40  # two evaluations: ASHA's first rung (half the run) at the first, the end at the second
    p = subprocess.run([sys.executable, "-m", "sweeper.run", "hpo", "--preset", "quick", "--set", f"steps={steps}",
                        "--set", "eval_every=20", "--set", "lr_rampdown=20", "--set", "sensitivity_samples=20",
                        "--live-every", "0", "--storage", str(tmp_path), "--address", ray_head.address], check=False,
                       cwd=ROOT, env=ray_head.env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    exp = next(tmp_path.glob("hpo-*"))
    study = optuna.load_study(study_name="hpo", storage=f"sqlite:///{exp / 'optuna.db'}")
    df = pd.read_parquet(exp / "trials.parquet")
    assert len(study.trials) == len(df) == 12
    lrs = sorted(df["lr"])
    assert len(set(lrs)) == 12 and 0.01 <= lrs[0] and lrs[-1] <= 0.3  # sampled from the search space
    stopped = df[df["status"] == "stopped"]
    assert set(df["status"]) <= {"finished", "stopped"} and len(stopped) >= 1
    assert (stopped["final_step"] < steps).all() and (df.loc[df["status"] == "finished", "final_step"] == steps).all()
    ranked = pd.read_csv(exp / "table_ranked.csv")
    assert len(ranked) == 12 and list(ranked["status"]) == sorted(ranked["status"])  # finished before stopped
    fin = ranked[ranked["status"] == "finished"]["final_val_error"]  # selected on validation, never on test
    assert fin.is_monotonic_increasing and "trials ranked by validation error" in p.stdout
    assert ranked["final_test_error"].notna().all()
    # the first sample is the base values (the quick preset's hand-set ones), and the note says where it landed
    from search_spaces.common import QUICK
    base = {k: QUICK[k] for k in ("cons_coef", "kl_coef", "mur_coef", "mur_radius", "lr")}
    assert study.trials[0].params == base
    assert "The search's first sample is the base values (λ1 2.4, " in (exp / "table_ranked.md").read_text()
    # the study says which trials ASHA stopped (Ray tells it each is COMPLETE), with the ranked table's values
    by_id = {t.user_attrs["tune_trial_id"]: t for t in study.trials}
    assert set(by_id) == set(ranked["trial_id"])
    for _, r in ranked.iterrows():
        t = by_id[r["trial_id"]]
        assert t.value == pytest.approx(r["final_val_error"]) and t.user_attrs["step"] == r["steps"]
        assert t.user_attrs["stopped_early"] == (r["status"] == "stopped")
    # its page in Chromium: the ranked table and Optuna's figures, nothing from the network
    from browser import CHROMIUM, open_page
    if CHROMIUM.is_file():
        seen = open_page(exp / "report.html", tmp_path / "hpo_report.png")
        assert seen["blocked"] == [] and seen["errors"] == []
        assert len(seen["images"]) >= 3 and all(ok and w > 0 for ok, w in seen["images"])
        for fig in ("Optimisation history", "Parallel coordinates", "Parameter importances", "Search: trials ranked"):
            assert fig in seen["text"], fig
        assert seen["progress"] == (f"{(df['status'] == 'finished').sum()} of 12 trials finished, 0 running, 0 failed, "
                                    f"0 diverged, {len(stopped)} stopped early by ASHA")
        assert (tmp_path / "hpo_report.png").stat().st_size > 1000
