"""The driver on a shared cluster: no credential stored or printed, one experiment folder per run,
exit codes that say what happened, bad input that ends at once, and shell-safe commands.

Everything runs in this process: `sweeper.run.main` with Ray replaced by stand-ins where a test
needs the driver to go past its checks (the stand-in Tuner writes what Tune's would: tuner.pkl).

    pytest tests/test_safety.py -q     # seconds
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweeper import storage
from sweeper.analysis import index
from sweeper.driver import preflight, ray_session, signals, stopping, tuner
from sweeper import run as sweeper_run
from sweeper.analysis.aggregate import AggregateError
from trainables.remote import redact, secret_in_uri

QUICK = ["ablation_radius", "--preset", "quick"]
T0 = 1767225600.0  # a fixed clock: every run below starts in the same second


def no_ray(*a, **k):
    raise AssertionError("Ray was started for bad input")


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ---------------------------------------------------------------- 1. credentials in a URI

@pytest.mark.parametrize("uri, secret", [
    ("s3://AKIAEXAMPLE:wJalrXUtnFEMI@bucket/results", True),
    ("s3://AKIAEXAMPLE:wJalr/XUtn+FEMI@bucket/results", True),  # an unescaped "/" in the secret
    ("s3://AKIAEXAMPLE@bucket/results", True),                  # an object store's userinfo is a key
    ("gs://user:pw@bucket/x", True),
    ("https://alice:pw@mlflow.example:5000", True),
    ("postgresql://alice:pw@db.example/mlflow", True),
    ("ray://alice:pw@head:10001", True),
    ("https://alice@mlflow.example", False),                    # a user name is no secret
    ("https://mlflow.example:5000/a@b", False),                 # "@" in the path
    ("s3://bucket/results", False),
    ("sqlite:///mlflow.db", False),
    ("./results", False),
    ("user:pw@host", False),                                    # no scheme: a local folder's name
    # the query string: any parameter whose name says it holds a credential
    ("postgresql://alice@127.0.0.1/db?password=pw", True),
    ("postgresql:///db?host=h&user=alice&password=pw", True),
    ("s3://bucket/results?access_key=AKIAX&secret_key=wJalr&endpoint_override=h", True),
    ("https://mlflow.example/?token=pw", True),
    ("https://bucket.example/x?X-Amz-Signature=wJalr", True),
    ("s3://bucket/results?region=eu-west-1&scheme=http", False),
    ("./results?password=pw", False),                           # no scheme: a local folder's name
])
def test_which_uris_carry_credentials(uri, secret):
    assert secret_in_uri(uri) is secret
    if secret:
        masked = redact(uri)
        assert "pw" not in masked and "wJalr" not in masked and "AKIA" not in masked and "***" in masked
        assert masked.split("?")[0] == uri.split("?")[0] if "@" not in uri else "***@" in masked


# option -> (argv after QUICK, the words of the fix); each value holds its own secret
CREDENTIALS = {
    "--storage": (["--storage", "s3://AKIA1:secret-storage@bucket/results"], "AWS_SECRET_ACCESS_KEY"),
    "--data-dir": (["--data-dir", "s3://AKIA2:secret-datadir@bucket/data"], "AWS_PROFILE"),
    "--resume": (["--resume", "s3://AKIA3:secret-resume@bucket/results/ablation_radius-x"], "AWS_ACCESS_KEY_ID"),
    "--mlflow": (["--mlflow", "https://alice:secret-mlflow@mlflow.example"],
                 "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"),
    "--mlflow db": (["--mlflow", "postgresql://alice:secret-pg@db.example/mlflow"], "PGPASSWORD"),
    "--mlflow query": (["--mlflow", "postgresql://alice@127.0.0.1/db?password=secret-query"], "PGPASSWORD"),
    "--mlflow params": (["--mlflow", "postgresql:///db?host=h&user=u&password=secret-params"], "PGPASSWORD"),
    "--storage query": (["--storage", "s3://bucket/r?access_key=AKIA5&secret_key=secret-q&region=x"],
                        "AWS_SECRET_ACCESS_KEY"),
    "--data-dir query": (["--data-dir", "https://data.example/d?token=secret-token"], "own settings"),
    "--set data_dir": (["--set", "data_dir=gs://u:secret-set@bucket/data"], "application default credentials"),
    "--address": (["--address", "ray://alice:secret-address@head:10001"], "RAY_AUTH_TOKEN"),
    "--confirm": (["--confirm", "s3://AKIA4:secret-confirm@bucket/results/hpo-x"], "AWS_SECRET_ACCESS_KEY"),
}


@pytest.mark.parametrize("option", sorted(CREDENTIALS))
def test_a_uri_option_with_credentials_is_exit_2_before_any_work(option, tmp_path, capsys, monkeypatch):
    more, fix = CREDENTIALS[option]
    secret = next(w for a in more for w in re.split(r"[@:=&]", a) if w.startswith("secret-"))
    monkeypatch.chdir(tmp_path)  # a URI taken for a folder would show up here
    monkeypatch.setattr(ray_session, "connect_ray", no_ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    argv = [*QUICK, *more] + ([] if option.startswith("--storage") else ["--storage", str(tmp_path / "results")])
    assert sweeper_run.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"error: {option.split()[0]} ") and len(err.strip().splitlines()) == 1, err
    assert "carries credentials in the URI" in err and fix in err, err
    assert secret not in err, err
    assert list(tmp_path.iterdir()) == []  # no results folder, no cache, nothing


def test_credentials_in_every_uri_at_once_write_nothing_and_echo_none(tmp_path, capsys, monkeypatch):
    """Distinct secrets in every URI a run takes (and RAY_ADDRESS): exit 2, one line, no results
    folder, no cache folder, and none of the secrets nor the access key ids in the output."""
    secrets = {f"s3cr3t-{i}" for i in range(8)} | {f"AKIAKEY{i}" for i in range(5)}
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VBI_MUR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RAY_ADDRESS", "ray://u:s3cr3t-7@head:10001")
    monkeypatch.setattr(ray_session, "connect_ray", no_ray)
    argv = [*QUICK, "--storage", "s3://AKIAKEY0:s3cr3t-0@bucket/results",
            "--data-dir", "s3://AKIAKEY1:s3cr3t-1@bucket/data", "--resume", "s3://AKIAKEY2:s3cr3t-2@bucket/r/e",
            "--mlflow", "https://u:s3cr3t-3@mlflow.example", "--set", "data_dir=s3://AKIAKEY3:s3cr3t-4@bucket/d",
            "--address", "ray://u:s3cr3t-5@head:10001", "--confirm", "s3://AKIAKEY4:s3cr3t-6@bucket/hpo-x"]
    assert sweeper_run.main(argv) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: --storage s3://***@bucket/results carries credentials") and "\n" not in err.strip()
    assert not [s for s in secrets if s in out + err]
    assert list(tmp_path.iterdir()) == []


def test_report_of_a_uri_with_credentials_is_exit_2_and_names_no_secret(tmp_path, capsys, monkeypatch):
    from sweeper import report

    monkeypatch.setenv("VBI_MUR_CACHE", str(tmp_path / "cache"))
    assert report.main(["s3://AKIAKEY:s3cr3t@bucket/results/ablation_radius-x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: s3://***@bucket/results/ablation_radius-x carries credentials") and "s3cr3t" not in err
    assert list(tmp_path.iterdir()) == []  # the cache folder, named after the URI, is not made


# ---------------------------------------------------------------- 2. two runs in the same second

class FakeTuner:
    """What sweeper.run needs of a Tuner: Tune's tuner.pkl written when built, fit() -> no results."""

    def __init__(self, exp_dir):
        storage.write_bytes(exp_dir / storage.TUNER_STATE, b"Tune's state")

    def fit(self):
        return []


def started(monkeypatch, log=None):
    """sweeper.run with a frozen clock and stand-ins for Ray and the Tuner; `log` collects each Tuner's
    experiment folder."""
    monkeypatch.setattr(sweeper_run, "time", SimpleNamespace(time=lambda: T0))
    monkeypatch.setattr(sweeper_run, "start_ray", lambda address, args, stop: {"cpu": 1.0, "gpu": 0.0})
    monkeypatch.setattr(tuner, "build_tuner",
                        lambda sweep, trials, args, exp_dir, res: (log.append(exp_dir) if log is not None else None)
                        or FakeTuner(exp_dir))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_two_runs_in_the_same_second_get_their_own_folders(tmp_path, capsys, monkeypatch):
    built = []
    started(monkeypatch, built)
    root = tmp_path / "results"
    for _ in range(2):  # no trial reports anything: no report, so exit 5 (below)
        assert sweeper_run.main([*QUICK, "--storage", str(root)]) == 5
    a, b = built
    assert a != b and a.parent == b.parent == root
    assert storage.stamp(a.name) == storage.stamp(b.name) == time.strftime("%Y%m%d-%H%M%S", time.localtime(T0))
    for exp in (a, b):
        assert sorted(p.name for p in exp.iterdir()) == ["driver.lock", "sweep.json", "trials.json", "tuner.pkl"]
        assert json.loads((exp / "sweep.json").read_text())["name"] == "ablation_radius"
    capsys.readouterr()
    # --resume without a folder cannot tell which is the latest: one line naming both
    assert sweeper_run.main([*QUICK, "--storage", str(root), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "started in the same second" in err and a.name in err and b.name in err and len(err.splitlines()) == 1
    # either one, named, resumes (the stand-in Tuner.restore)
    monkeypatch.setattr(sweeper_run, "make_tuner", lambda sweep, trials, args, exp, res, lease: FakeTuner(exp))
    (b / "experiment_state-2026-01-01_00-00-00.json").write_text(json.dumps({"trial_data": [], "runner_data": {}}))
    assert sweeper_run.main([*QUICK, "--storage", str(root), "--resume", str(b)]) == 5
    assert f"`python -m sweeper.report {b}`" in capsys.readouterr().err


def test_resume_latest_and_the_index_order_by_the_stamp_then_the_suffix(tmp_path):
    root = tmp_path / "results"
    names = ["ablation_radius-20240101-000000", "ablation_radius-20250101-000000-0a1b2c",
             "ablation_radius-20250101-000001", "ablation_radius-20250102-000000-ffffff"]
    for n in reversed(names):
        (root / n).mkdir(parents=True)
        (root / n / "sweep.json").write_text(json.dumps({"name": "ablation_radius"}))
    assert [e.name for e in storage.experiments(root, "ablation_radius")] == names
    assert [r.folder for r in index.index_rows(root)] == names[::-1]  # newest first
    assert [storage.stamp(n) for n in names] == ["20240101-000000", "20250101-000000", "20250101-000001",
                                                 "20250102-000000"]


def test_a_new_name_holds_the_local_time_and_a_random_suffix():
    names = {storage.experiment_name("hpo", T0) for _ in range(50)}
    assert len(names) == 50
    for n in names:
        prefix, suffix = n.rsplit("-", 1)
        assert prefix == f"hpo-{time.strftime('%Y%m%d-%H%M%S', time.localtime(T0))}" and len(suffix) == 6
        int(suffix, 16)


# ---------------------------------------------------------------- 3. exit codes

def result(error=None, **metrics):
    return SimpleNamespace(error=error, metrics=metrics, path="/r/trial_x")


SWEEP = SimpleNamespace(name="ablation_radius")


@pytest.mark.parametrize("grid, stopped, report_fails, code", [
    ([result(done=True)], False, False, 0),
    ([result(done=True, diverged=1)], False, False, 0),    # a divergence is a result: noted, exit 0
    ([result(error=RuntimeError("boom"))], False, False, 1),
    ([result(done=True)], False, True, 5),                  # the report (or its upload) failed
    ([result(error=RuntimeError("boom"))], False, True, 1),
    ([result(done=True)], True, True, 3),
])
def test_finish_exit_codes(grid, stopped, report_fails, code, tmp_path, capsys, monkeypatch):
    from sweeper import report

    def report_at(exp):
        if report_fails:
            raise AggregateError("the report was built in /cache but not uploaded: refused")
        (tmp_path / "table.md").write_text("| table |")
        return {"table.md": tmp_path / "table.md"}

    monkeypatch.setattr(report, "report_at", report_at)
    exp = tmp_path / "my results" / "ablation_radius-x"
    stop = stopping.GracefulStop(sweeper_run.resume_command(SWEEP.name, exp))  # as run_sweep makes it
    if stopped:
        stop.stopped.set()
    assert sweeper_run.finish(grid, exp, stop) == code
    out, err = capsys.readouterr()
    assert f"results: {exp}" in out
    assert ("diverged" in err) == any(r.metrics.get("diverged") == 1 for r in grid)
    if code == 5:
        assert err.strip().splitlines()[-1] == (f"error: the trials finished but the report was not written; rebuild "
                                                f"it with `python -m sweeper.report '{exp}'`")
    if code == 3:
        assert f"`python -m sweeper.run ablation_radius --resume '{exp}'`" in err


@pytest.mark.parametrize("storage, stopped, failed, no_report, code", [
    (False, False, False, False, 0),
    (False, False, False, True, 5),
    (False, False, True, True, 1),   # a failed trial is the news, not its missing report
    (False, True, True, True, 3),    # stopped: --resume runs the failed trial again and writes the report
    (True, True, True, True, 4),     # the storage does not hold the sweep: nothing else can be trusted
    (True, False, False, False, 4),
    (False, True, False, False, 3),
])
def test_the_exit_status_rules(storage, stopped, failed, no_report, code):
    assert sweeper_run.exit_status(storage=storage, stopped=stopped, failed=failed, no_report=no_report) == code


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_report_keeps_the_resume_line(sig, tmp_path, capsys, monkeypatch):
    from sweeper import report

    def report_at(exp):
        signal.raise_signal(sig)
        raise AssertionError("the signal did not interrupt the report")

    monkeypatch.setattr(report, "report_at", report_at)
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    exp = tmp_path / "ablation_radius-x"
    stop = stopping.GracefulStop(sweeper_run.resume_command(SWEEP.name, exp))
    assert sweeper_run.finish([result(done=True)], exp, stop) == 3
    err = capsys.readouterr().err
    assert f"`python -m sweeper.run ablation_radius --resume {exp}`" in err and len(err.strip().splitlines()) == 1
    assert {s: signal.getsignal(s) for s in old} == old  # the handlers before are back


def test_a_signal_before_fit_stops_the_sweep_once_fit_runs(tmp_path, capsys, monkeypatch):
    """SIGTERM while the Tuner is being built (before sweep.json is written): the driver's handler is
    already in place, so the process lives on; Tune's interrupt (SIGUSR1, which would end a process
    that has no handler for it yet) waits for fit(), and the run ends as interrupted, exit 3, with a
    folder that --resume accepts."""
    sent = []
    started(monkeypatch)
    monkeypatch.setattr(stopping.os, "kill", lambda pid, sig: sent.append(sig))
    old_usr1 = signal.signal(signal.SIGUSR1, signal.SIG_DFL)  # as in a fresh driver: Tune has not run yet

    def build(sweep, trials, args, exp_dir, res):
        signal.raise_signal(signal.SIGTERM)
        return FakeTuner(exp_dir)

    monkeypatch.setattr(tuner, "build_tuner", build)
    try:
        rc = sweeper_run.main([*QUICK, "--storage", str(tmp_path)])
    finally:
        signal.signal(signal.SIGUSR1, old_usr1)
    assert sent == []  # no SIGUSR1 before Tune could take it
    assert rc == 3
    (exp,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert sorted(p.name for p in exp.iterdir()) == ["driver.lock", "resume.txt", "sweep.json", "trials.json",
                                                     "tuner.pkl"]
    assert f"--resume {exp}`" in capsys.readouterr().err
    assert (exp / "resume.txt").read_text() == f"python -m sweeper.run ablation_radius --resume {exp}\n"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("at", signals.PAUSE_POINTS)
def test_a_stop_signal_at_any_moment_of_the_run_ends_with_exit_3_and_the_resume_line(at, sig, tmp_path, capsys,
                                                                                     monkeypatch):
    """Each moment of a run (its pause points, in order: checked, Ray up, fit done, Ray down, the report, the
    report written), each stop signal, raised at that moment: exit 3, no traceback, the last line the --resume
    command (or, before the experiment holds a Tune state, that there is nothing to continue), that command in
    resume.txt, no temporary file left; the handlers before the run are back."""
    started(monkeypatch)
    monkeypatch.setattr(sweeper_run, "pause_point", lambda name: signal.raise_signal(sig) if name == at else None)
    monkeypatch.setattr(stopping.os, "kill", lambda pid, s: None)  # Tune's SIGUSR1: no Tune here
    before = {s: signal.getsignal(s) for s in signals.STOP_SIGNALS}
    assert sweeper_run.main([*QUICK, "--storage", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and {s: signal.getsignal(s) for s in before} == before
    folders = [p for p in tmp_path.iterdir() if p.is_dir()]
    if at == "checked":  # before the lease and the Tuner: no folder
        assert folders == [] and err.strip().splitlines()[-1] == (
            "interrupted before the sweep's first trial was set up: there is nothing to continue; run the command again")
        return
    (exp,) = folders
    resume = f"python -m sweeper.run ablation_radius --resume {exp}"
    assert f"`{resume}`" in err.strip().splitlines()[-1] and "interrupted" in err.strip().splitlines()[-1]
    assert (exp / "resume.txt").read_text() == resume + "\n"
    assert not [p for p in exp.rglob("*") if p.name.endswith(".tmp")]


def test_a_finished_resume_removes_the_kept_resume_line(tmp_path, capsys, monkeypatch):
    from sweeper import report

    started(monkeypatch)
    monkeypatch.setattr(sweeper_run, "pause_point", lambda name: signal.raise_signal(signal.SIGHUP)
                        if name == "fit_done" else None)
    assert sweeper_run.main([*QUICK, "--storage", str(tmp_path)]) == 3
    (exp,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert (exp / "resume.txt").is_file()
    monkeypatch.setattr(sweeper_run, "pause_point", lambda name: None)
    monkeypatch.setattr(sweeper_run, "make_tuner", lambda sweep, trials, args, e, res, lease: FakeTuner(e))
    monkeypatch.setattr(sweeper_run, "check_resumable", lambda e: [])
    monkeypatch.setattr(report, "report_at", lambda e: {})
    assert sweeper_run.main([*QUICK, "--storage", str(tmp_path), "--resume", str(exp)]) == 0
    assert not (exp / "resume.txt").exists()


def test_resume_of_a_folder_without_tune_state_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    exp = tmp_path / "ablation_radius-20200101-000000-abcdef"
    exp.mkdir()
    (exp / "sweep.json").write_text(json.dumps({"name": "ablation_radius", "preset": "quick"}))
    monkeypatch.setattr(ray_session, "connect_ray", no_ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for resume in ([str(exp)], []):
        assert sweeper_run.main([*QUICK, "--storage", str(tmp_path), "--resume", *resume]) == 2
        err = capsys.readouterr().err
        assert err == (f"error: {exp} holds no Tune state (tuner.pkl): it was stopped before its first trial was "
                       f"set up, so there is nothing to continue; start a new run without --resume\n")


# ---------------------------------------------------------------- 4. bad input ends at once

@contextlib.contextmanager
def read_only(folder: Path):
    """`folder` read-only for the block: a read-only bind mount where this process may mount (root
    writes through any mode bits), else its mode bits; pytest.skip with the reason where neither holds."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in (folder, *folder.rglob("*"))}
        for p in modes:
            p.chmod(modes[p] & ~0o222)
        try:
            yield
        finally:
            for p, m in modes.items():
                p.chmod(m)
        return
    bind = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if bind.returncode != 0:
        pytest.skip(f"cannot bind-mount {folder} read-only: {bind.stderr.strip()}")
    try:
        ro = subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], capture_output=True, text=True)
        if ro.returncode != 0:
            pytest.skip(f"cannot remount {folder} read-only: {ro.stderr.strip()}")
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_resume_of_a_read_only_folder_is_one_line_exit_2_before_ray(tmp_path, capsys, monkeypatch):
    """Tune writes its state and each trial's results into the folder it resumes; a read-only one is
    exit 2 with one line naming it, before Ray starts (as --storage for a new run), nothing changed."""
    exp = tmp_path / "ablation_radius-20200101-000000-abcdef"
    (exp / "train_tune_0").mkdir(parents=True)
    (exp / "sweep.json").write_text(json.dumps({"name": "ablation_radius", "preset": "quick"}))
    (exp / storage.TUNER_STATE).write_bytes(b"Tune's state")
    (exp / "train_tune_0" / "result.json").write_text("{}\n")
    monkeypatch.setattr(ray_session, "connect_ray", no_ray)
    monkeypatch.setattr(sweeper_run, "start_ray", no_ray)
    monkeypatch.chdir(tmp_path)
    before = {p: p.read_bytes() for p in exp.rglob("*") if p.is_file()}
    with read_only(exp):
        assert sweeper_run.main(["ablation_radius", "--resume", str(exp), "--storage", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: experiment folder {exp} cannot be written (") and len(err.splitlines()) == 1, err
    assert "make it writable" in err
    assert {p: p.read_bytes() for p in exp.rglob("*") if p.is_file()} == before


def test_argparse_errors_are_one_line_exit_2(capsys):
    for argv in (["ablation_radius", "--seeds", "three"], ["ablation_radius", "--no-such-option"], []):
        with pytest.raises(SystemExit) as e:
            sweeper_run.main(argv)
        err = capsys.readouterr().err
        assert e.value.code == 2 and len(err.strip().splitlines()) == 1, err
        assert err.startswith("sweeper.run: error: ") and err.strip().endswith("see python -m sweeper.run --help")
    assert "'three' is neither a number nor auto" in sweeper_run_error(["ablation_radius", "--seeds", "three"], capsys)


def sweeper_run_error(argv, capsys) -> str:
    with pytest.raises(SystemExit):
        sweeper_run.main(argv)
    return capsys.readouterr().err


NODES = [{"Alive": True, "Resources": {"CPU": 2.0, "memory": 1e9}},
         {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}}]  # a dead node fits no trial


@pytest.mark.parametrize("flags, fits", [
    (["--cpus-per-trial", "2"], True),
    (["--cpus-per-trial", "999"], False),
    (["--gpus-per-trial", "1"], False),
    (["--cpus-per-trial", "0.5", "--gpus-per-trial", "0"], True),
])
def test_a_trial_no_node_can_fit(flags, fits, capsys, monkeypatch):
    """A local Ray never grows: a trial larger than every node is exit 2 before any trial (Ray shut
    down); on a cluster (--address) an autoscaler may add a node, so it is a warning line."""
    import ray

    down = []
    monkeypatch.setattr(ray_session, "connect_ray", lambda address, dashboard=False: SimpleNamespace())
    monkeypatch.setattr(ray, "nodes", lambda: NODES)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    monkeypatch.setattr(ray, "shutdown", lambda: down.append(1))
    args = sweeper_run.parse_args([*QUICK, *flags])
    if fits:
        assert ray_session.start_ray(None, args, stopping.GracefulStop())["cpu"] == args.cpus_per_trial
        assert down == []
        return
    with pytest.raises(preflight.InputError, match="this machine's Ray has 2 CPUs and 0 GPUs; lower "):
        ray_session.start_ray(None, args, stopping.GracefulStop())
    assert down == [1]
    capsys.readouterr()
    assert ray_session.start_ray("10.0.0.1:6379", args, stopping.GracefulStop()) == {"cpu": args.cpus_per_trial,
                                                            "gpu": args.gpus_per_trial or 0.0}
    err = capsys.readouterr().err
    assert err.startswith("warning: no node of the cluster has ") and "stay PENDING" in err and down == [1]


def test_main_ends_with_exit_2_when_no_local_node_fits(tmp_path, capsys, monkeypatch):
    import ray

    monkeypatch.setattr(ray_session, "connect_ray", lambda address, dashboard=False: SimpleNamespace())
    monkeypatch.setattr(ray, "nodes", lambda: NODES)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(tuner, "build_tuner", no_ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert sweeper_run.main([*QUICK, "--storage", str(tmp_path), "--cpus-per-trial", "999"]) == 2
    out, err = capsys.readouterr()
    assert err.startswith("error: 999 CPUs and 0 GPUs per trial") and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no experiment folder


# ---------------------------------------------------------------- 6. commands printed for a shell

@pytest.mark.parametrize("folder", ["results/ablation_radius-x", "/tmp/my results/a$b'c", "s3://b/r/e"])
def test_the_resume_command_survives_a_shell(folder):
    cmd = sweeper_run.resume_command("ablation_radius", folder)
    assert shlex.split(cmd) == ["python", "-m", "sweeper.run", "ablation_radius", "--resume", folder]


def test_the_stop_handlers_come_back_after_ray_takes_sigterm(monkeypatch):
    """ray.init puts a SIGTERM handler of its own in place (one that exits at once); start_ray puts the
    graceful stop back right after it connects, so a SIGTERM then still stops the sweep with its state."""
    import sys

    import ray

    def connect(address, dashboard=False):
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what Ray's driver does
        return SimpleNamespace()

    sent = []
    monkeypatch.setattr(ray_session, "connect_ray", connect)
    monkeypatch.setattr(ray, "nodes", lambda: NODES)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    monkeypatch.setattr(stopping.os, "kill", lambda pid, sig: sent.append(sig))
    old = signal.getsignal(signal.SIGTERM)
    with stopping.GracefulStop() as stop:
        ray_session.start_ray(None, sweeper_run.parse_args(QUICK), stop)
        signal.raise_signal(signal.SIGTERM)  # would be SystemExit(15) under Ray's handler
        assert stop.stopped.is_set()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # a second signal acts at once
    assert signal.getsignal(signal.SIGTERM) is old


def test_a_trial_actor_carries_no_aws_key_and_no_runtime_env_it_does_not_need(monkeypatch):
    """Inside trial_actor_env the actor class Tune makes for the trainable has an empty runtime
    env (Ray then runs it in a worker it keeps started) unless the driver's environment sets a variable
    Tune carries; an AWS key is never carried; after the block, Tune's own defaults are back."""
    from ray.tune.execution.class_cache import _ActorClassCache

    class Trainable:
        pass

    env_of = lambda: _ActorClassCache().get(Trainable)._default_options["runtime_env"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-key")
    monkeypatch.delenv("RAY_CHDIR_TO_TRIAL_DIR", raising=False)
    with ray_session.trial_actor_env():
        assert env_of() == {}
        monkeypatch.setenv("RAY_CHDIR_TO_TRIAL_DIR", "0")
        assert env_of() == {"env_vars": {"RAY_CHDIR_TO_TRIAL_DIR": "0"}}
    assert env_of()["env_vars"] == {"PL_DISABLE_FORK": "1", "RAY_CHDIR_TO_TRIAL_DIR": "0",
                                    "AWS_SECRET_ACCESS_KEY": "s3cr3t-key"}


@pytest.mark.parametrize("env, gpus", [({"CUDA_VISIBLE_DEVICES": ""}, 0), ({"CUDA_VISIBLE_DEVICES": "-1"}, 0),
                                       ({"CUDA_VISIBLE_DEVICES": "0,1"}, 2), ({"CUDA_VISIBLE_DEVICES": "GPU-5f2e"}, 1)])
def test_device_cuda_is_checked_against_the_gpus_a_local_ray_would_give(env, gpus):
    trials = [{"device": "cpu"}, {"device": "cuda"}]
    args = SimpleNamespace(gpus_per_trial=None, address=None)
    assert preflight.local_gpus(env) == gpus
    if gpus:
        preflight.check_device(trials, args, env)
    else:
        with pytest.raises(preflight.InputError, match="this machine has no GPU for a local Ray"):
            preflight.check_device(trials, args, env)
    preflight.check_device(trials, SimpleNamespace(gpus_per_trial=None, address="10.0.0.1:6379"), env)  # a cluster's
    preflight.check_device(trials[:1], args, env)  # no trial on cuda: nothing to check
    with pytest.raises(preflight.InputError, match="--gpus-per-trial 0 gives none"):
        preflight.check_device(trials, SimpleNamespace(gpus_per_trial=0, address="10.0.0.1:6379"), env)


def test_the_data_folder_entries_are_those_of_the_data_sets_layouts():
    from trainables.datafiles import NAMES, dataset_layouts

    tops = {f.split("/")[0] for name in NAMES if name != "digits"
            for layout in dataset_layouts(name) for names in layout for f in names}
    assert set(preflight.DATA_ENTRIES) == tops


def test_a_full_disk_is_told_from_other_errors(tmp_path, monkeypatch):
    import errno

    from ray.exceptions import RayTaskError

    try:
        raise OSError(errno.ENOSPC, "No space left on device")
    except OSError as e:
        in_trial = RayTaskError("train_tune", "Traceback ...", e).as_instanceof_cause()
    assert sweeper_run.disk_full(in_trial, tmp_path)
    assert sweeper_run.disk_full(OSError(28, "Error writing bytes to file. Detail: [errno 28] No space left on device"),
                                 tmp_path)
    assert not sweeper_run.disk_full(OSError(errno.EACCES, "Permission denied"), tmp_path)
    assert not sweeper_run.disk_full(ValueError("boom"), tmp_path)
    assert not sweeper_run.disk_full(EOFError("Ran out of input"), tmp_path)  # with space left: another cause
    monkeypatch.setattr(sweeper_run, "free_bytes", lambda folder: 4096)
    assert sweeper_run.disk_full(EOFError("Ran out of input"), tmp_path)  # Tune's 0-byte error.pkl on a full disk
    import pickle
    try:  # the error.pkl cut midway, as the disk fills while Tune writes it
        pickle.loads(pickle.dumps(ValueError("x" * 100))[:40])
    except Exception as e:  # noqa: BLE001 (what the cut pickle raises is the thing under test)
        cut = e
    assert sweeper_run.disk_full(cut, tmp_path)
    monkeypatch.setattr(sweeper_run, "free_bytes", lambda folder: 2**30)
    assert not sweeper_run.disk_full(cut, tmp_path)  # with space left: another cause


def test_a_resume_whose_tune_state_names_a_missing_module_is_one_line(tmp_path, monkeypatch):
    """Tune pickles the driver's functions by module name into tuner.pkl; an experiment stored by a layout
    whose modules have moved (e.g. sweeper.tuner, before sweeper/driver/) fails to restore: one line naming
    the module and the commit to resume from, not Tune's traceback. The real unpickling error is used."""
    import pickle

    from ray import tune

    def restore(*a, **k):  # what Tune's restore meets on unpickling such a tuner.pkl
        pickle.loads(b"csweeper.tuner\ntrial_dirname\n.")

    monkeypatch.setattr(tune.Tuner, "restore", staticmethod(restore))
    monkeypatch.setattr(tuner, "stored_grid", lambda exp: {})
    monkeypatch.setattr(tuner.store, "prepare_restore", lambda exp: {})
    args = SimpleNamespace(resume=True, set=None, seeds=None)
    with pytest.raises(preflight.InputError, match=r"module 'sweeper.tuner'.*resume it from the commit that "
                                                   r"started it") as e:
        tuner.make_tuner(None, [], args, tmp_path, {"cpu": 1}, lease=None)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("status, noted", [(3, True), (4, False)])
def test_a_resume_line_the_folder_cannot_take_is_a_note_but_after_exit_4_the_error_line_stays_last(
        status, noted, tmp_path, capsys, monkeypatch):
    """Exit 4 is the storage failing (a full disk, a lost bucket): its line already names the folder and the
    --resume command and must stay the last one; after exit 3 a resume.txt the folder refuses is a note."""
    exp = tmp_path / "ablation_radius-x"
    exp.mkdir()
    (exp / storage.TUNER_STATE).write_bytes(b"Tune's state")

    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(storage, "write_text", full)
    sweeper_run.keep_resume_line({"exp_dir": exp, "resume": "python -m sweeper.run x --resume y"}, status)
    err = capsys.readouterr().err
    assert ("note: resume.txt not updated" in err) == noted and not (exp / "resume.txt").exists()
