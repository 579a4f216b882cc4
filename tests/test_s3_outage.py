"""A sweep whose S3 bucket stops answering: a TCP proxy (tests/tcpproxy.py) on 127.0.0.1 between the
sweep (driver and Ray's trial workers, all through AWS_ENDPOINT_URL_S3) and moto's ThreadedMotoServer
is cut mid-sweep and restored on the same port.

- black-holed (connections reset, new ones accepted and never answered) for OUTAGE_S within a retry
  budget of RETRY_BUDGET_S, the default's 60 s in 100 s scaled by a tenth (test_retry_attempts_cover_the_budget
  holds the default's own arithmetic): the sweep finishes (exit 0), every result and kept checkpoint is
  in the bucket, and the report built from the bucket alone equals an uninterrupted run's.
- refused for longer than a small retry budget (VBI_MUR_STORAGE_RETRY_S=1): exit 4 with one line
  naming the storage and the `--resume` command; `--resume` after the outage finishes every trial.

    pytest tests/test_s3_outage.py -q -m "not slow"   # the retrying file system and the proxy (~15 s)
    pytest tests/test_s3_outage.py -q -s              # + an uninterrupted sweep and the two outages (~3 min on 2 cores)
"""
import io
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import boto3
import pandas as pd
import pyarrow.fs as pafs
import pytest
from moto.server import ThreadedMotoServer
from procs import pids_naming
from ray import cloudpickle
from tcpproxy import Proxy

from sweeper import report
from sweeper.driver import ray_session
from sweeper import run as sweeper_run
from sweeper import storage
from trainables import remote

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "vbi-mur-outage"
# one cell of the quick quick_settings sweep (its baseline row, --cells-only: one trial), as MT + MUR (so its last
# checkpoint holds its virtual points too), 40 steps: 4 evaluations, each with a checkpoint. One trial: under an
# outage past the retries every trial fails its uploads, is restarted and fails again (FailureConfig), so the
# trial count sets the test's length, and what the outage tests check is each trial's own (its uploads wait or
# fail, its evaluations and checkpoints reach the bucket).
CELL = ["--cells", "lr=0.1", "--cells-only"]
TINY = ["--seeds", "1", "--set", "mur=direct", "--set", "steps=40", "--set", "eval_every=10", "--set", "lr_rampdown=10",
        "--set", "sensitivity_samples=20", "--set", "checkpoint_every_s=0", *CELL]
N_EVALS = 4
# The property: the default budget (remote.RETRY_S, 100 s) rides out a one-minute outage. The sweep runs it
# at a tenth of both, so that it waits seconds, not a minute.
OUTAGE_S, RETRY_BUDGET_S = 6.0, 10.0
DEFAULT_OUTAGE_S = 60.0


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """(boto3 client straight to the server, the proxy every other client goes through)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    proxy = Proxy((host, port)).start()
    env = {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{proxy.port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true", "VBI_MUR_CACHE": str(tmp_path_factory.mktemp("cache"))}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        client = boto3.client("s3", endpoint_url=f"http://{host}:{port}")  # sees the bucket during a cut
        client.create_bucket(Bucket=BUCKET)
        yield client, proxy
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        proxy.close()
        server.stop()


def objects(client, prefix="") -> dict[str, int]:
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return out


def write_while_cut(fs, key: str, cut_s: float, refuse: bool, proxy: Proxy) -> tuple[bool, float]:
    """(the write succeeded, its seconds) for one object written while the proxy is cut for cut_s."""
    proxy.cut(refuse)
    timer = threading.Timer(cut_s, proxy.restore)
    timer.start()
    t0 = time.monotonic()
    try:
        with fs.open_output_stream(f"{BUCKET}/{key}") as out:
            out.write(b"x" * 1000)
        ok = True
    except OSError:
        ok = False
    took = time.monotonic() - t0
    timer.join()
    return ok, took


# ---------------------------------------------------------------- the file system's retries (no Ray)

def test_retry_attempts_cover_the_budget():
    for budget in (0, 0.1, 2, 60, 100, 300):
        n = remote.retry_attempts(budget)
        waits = [0.05 * 2 ** k for k in range(n - 1)]  # before attempts 2..n: 50 ms, doubling
        assert sum(waits) >= budget and (n == 1 or sum(waits[:-1]) < budget), (budget, n)
    assert remote.retry_attempts(remote.RETRY_S) == 12  # waits add up to 102.35 s: a minute with margin
    # the end-to-end outage runs at a tenth of the default's outage and budget: the same ratio, and its
    # budget's attempts wait out its outage as the default's wait out a minute
    assert OUTAGE_S / RETRY_BUDGET_S == DEFAULT_OUTAGE_S / remote.RETRY_S
    for outage, budget in ((OUTAGE_S, RETRY_BUDGET_S), (DEFAULT_OUTAGE_S, remote.RETRY_S)):
        n = remote.retry_attempts(budget)
        assert sum(0.05 * 2 ** k for k in range(n - 1)) >= budget > outage


@pytest.mark.slow
def test_the_retries_survive_pickling_and_wait_out_a_cut(s3, monkeypatch):
    """Tune pickles the run's file system to each trial. pyarrow's S3FileSystem pickles without its
    retry strategy (3 attempts after unpickling); RetryingS3FileSystem keeps its own: the unpickled
    copy waits out a 2 s refusal that the same file system with a 0.1 s budget (3 attempts, 0.15 s
    of waits) does not."""
    client, proxy = s3
    plain, _ = pafs.FileSystem.from_uri(f"s3://{BUCKET}/x")
    assert "retry_strategy" not in plain.__reduce__()[1][0]  # why the subclass exists
    monkeypatch.setenv("VBI_MUR_STORAGE_RETRY_S", "4")
    fs, _ = remote.resolve(f"s3://{BUCKET}/x")
    shipped = cloudpickle.loads(cloudpickle.dumps(fs))
    assert isinstance(shipped, pafs.S3FileSystem) and shipped.attempts == fs.attempts == 8
    ok, took = write_while_cut(shipped, "survived", 2.0, True, proxy)
    assert ok and took >= 2.0, took
    monkeypatch.setenv("VBI_MUR_STORAGE_RETRY_S", "0.1")
    short = cloudpickle.loads(cloudpickle.dumps(remote.resolve(f"s3://{BUCKET}/x")[0]))
    ok, took = write_while_cut(short, "lost", 2.0, True, proxy)
    assert not ok and took < 1.5, took
    ok, took = write_while_cut(shipped, "blackholed", 4.0, False, proxy)  # attempts time out (3 s)
    assert ok and took >= 4.0, took
    assert set(objects(client)) >= {"survived", "blackholed"} and "lost" not in objects(client)


def test_a_bad_retry_budget_is_one_line_exit_2(s3, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VBI_MUR_STORAGE_RETRY_S", "a minute")
    monkeypatch.setattr(ray_session, "connect_ray", lambda *a, **k: pytest.fail("Ray was started for bad input"))
    assert sweeper_run.main(["ablation_radius", "--preset", "quick", "--storage", f"s3://{BUCKET}/r"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "VBI_MUR_STORAGE_RETRY_S='a minute' is not a number" in err, err


@pytest.mark.slow
def test_a_bucket_that_does_not_answer_at_the_start_is_one_line_exit_2_within_seconds(s3, capsys, monkeypatch):
    """The pre-flight check retries for storage.PREFLIGHT_RETRY_S (5 s), not the run's budget."""
    _, proxy = s3
    monkeypatch.setattr(ray_session, "connect_ray", lambda *a, **k: pytest.fail("Ray was started for bad input"))
    proxy.cut(refuse=True)
    try:
        t0 = time.monotonic()
        rc = sweeper_run.main(["ablation_radius", "--preset", "quick", "--storage", f"s3://{BUCKET}/r"])
        took = time.monotonic() - t0
    finally:
        proxy.restore()
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and f"s3://{BUCKET}/r cannot be used" in err, err
    assert storage.PREFLIGHT_RETRY_S <= took < 30, took  # the run's budget would wait 102 s


@pytest.mark.slow
@pytest.mark.parametrize("resume", ["latest", "folder"])
def test_resume_from_a_bucket_that_does_not_answer_is_one_line_exit_2_within_seconds(resume, s3, capsys,
                                                                                       monkeypatch):
    """--resume reads sweep.json (and lists the root for the latest) with the pre-flight's retries too."""
    client, proxy = s3
    exp = "resume-cut/ablation_radius-20260101-000000-abcdef"
    client.put_object(Bucket=BUCKET, Key=f"{exp}/sweep.json", Body=b'{"name": "ablation_radius"}')
    client.put_object(Bucket=BUCKET, Key=f"{exp}/tuner.pkl", Body=b"state")
    monkeypatch.setattr(ray_session, "connect_ray", lambda *a, **k: pytest.fail("Ray was started for bad input"))
    monkeypatch.setattr(storage, "check", lambda where: storage.resolve(where))  # the root answered before
    argv = ["ablation_radius", "--storage", f"s3://{BUCKET}/resume-cut", "--resume"]
    proxy.cut(refuse=True)
    try:
        t0 = time.monotonic()
        rc = sweeper_run.main(argv + ([f"s3://{BUCKET}/{exp}"] if resume == "folder" else []))
        took = time.monotonic() - t0
    finally:
        proxy.restore()
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "cannot be used" in err, err
    assert storage.PREFLIGHT_RETRY_S <= took < 30, took  # the run's budget would wait 102 s


@pytest.mark.parametrize("port", [40115, 14033, 4013, 9401])
def test_a_port_that_holds_a_status_code_is_no_refused_credential(port):
    """A server that does not answer is named as such whatever its port's digits."""
    down = OSError(f"When getting information for bucket '{BUCKET}': AWS Error NETWORK_CONNECTION during HeadBucket "
                   f"operation: curlCode: 7, Could not connect to server; Details: Failed to connect to 127.0.0.1 "
                   f"port {port} after 0 ms: Couldn't connect to server")
    assert storage.explain(down, f"s3://{BUCKET}/r").startswith(f"s3://{BUCKET}/r cannot be used (")


@pytest.mark.parametrize("code", [401, 403])
def test_http_401_and_403_are_refused_credentials(code):
    """HTTP 401 and 403, as pyarrow writes an S3-compatible server's answer, name the credentials' fix."""
    refused = OSError(f"When reading information for key 'r/x' in bucket '{BUCKET}': AWS Error UNKNOWN "
                      f"(HTTP status {code}) during HeadObject operation: No response body.")
    assert storage.explain(refused, f"s3://{BUCKET}/r").startswith(f"s3://{BUCKET}/r: access refused (")


def test_upload_missing_sends_what_the_bucket_lacks_or_holds_stale(s3, tmp_path):
    client, _ = s3
    local = tmp_path / "staging"
    for rel, body in {"a.json": b"{}", "t/result.json": b"1\n2\n", "t/params.json": b"{}"}.items():
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_bytes(body)
    client.put_object(Bucket=BUCKET, Key="staged/a.json", Body=b"{}")
    client.put_object(Bucket=BUCKET, Key="staged/t/result.json", Body=b"1\n")  # an older upload
    fs, path = remote.resolve(f"s3://{BUCKET}/staged")
    assert storage.upload_missing(local, fs, path) == 2
    assert objects(client, "staged/") == {"staged/a.json": 2, "staged/t/result.json": 4, "staged/t/params.json": 2}
    assert storage.upload_missing(local, fs, path) == 0


# ---------------------------------------------------------------- sweeps through Ray

def driver_env(temp: Path, cache: Path, **extra) -> dict:
    return {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_TMPDIR": str(temp),
            "PYTHONPATH": str(ROOT), "VBI_MUR_CACHE": str(cache), **extra}


def argv(prefix: str, *more) -> list[str]:
    """The sweep's driver on the bucket's `prefix`, the live report off (the report is built at the end)."""
    return sweep_argv(f"s3://{BUCKET}/{prefix}", *more)


def sweep_argv(storage: str, *more) -> list[str]:
    """The sweep's driver on `storage` (a bucket URI or a local folder)."""
    return [sys.executable, "-m", "sweeper.run", "quick_settings", "--preset", "quick", *TINY, "--live-every", "0",
            "--storage", storage, *more]


def experiment(client, prefix: str) -> str:
    exps = sorted({k.split("/")[1] for k in objects(client, f"{prefix}/quick_settings-")})
    assert len(exps) == 1, exps
    return exps[0]


def bucket_report(prefix: str, exp: str, cache: Path) -> dict:
    """The report built from the bucket alone (an empty cache): summary.csv and table.md as text, and
    every trial's evaluations from trials.parquet, keyed by its config, without wall-clock columns."""
    old = os.environ["VBI_MUR_CACHE"]
    os.environ["VBI_MUR_CACHE"] = str(cache)
    try:
        return report_of(f"s3://{BUCKET}/{prefix}/{exp}")
    finally:
        os.environ["VBI_MUR_CACHE"] = old


def report_of(where: str) -> dict:
    """bucket_report's dict for the experiment at `where` (a bucket URI, or a local folder)."""
    paths = report.report_at(where)
    df = pd.read_parquet(paths["trials.parquet"])
    clock = [c for c in df.columns if c in ("trial_id", "trial_dir", "hostname")
             or any(w in c for w in ("time", "steps_per_s", "compile_s"))]  # names and clocks of this run
    return {"summary": paths["summary.csv"].read_text(), "table": paths["table.md"].read_text(),
            "trials": df.drop(columns=clock).sort_values("trial_index").to_csv(index=False)}


def stored_trials(client, prefix: str, exp: str) -> dict[str, dict]:
    """{trial folder: {"steps": evaluated steps in result.json, "checkpoints": {checkpoint: files}}}."""
    out = {}
    keys = objects(client, f"{prefix}/{exp}/")
    for k in keys:
        parts = k.split("/")
        if len(parts) > 3 and parts[2].startswith("trial_"):
            t = out.setdefault(parts[2], {"steps": [], "checkpoints": {}})
            if parts[3] == "result.json":
                body = client.get_object(Bucket=BUCKET, Key=k)["Body"].read().decode()
                t["steps"] = [json.loads(s)["step"] for s in body.splitlines() if s.strip()]
            elif parts[3].startswith("checkpoint_") and parts[4]:  # not the folder's marker object
                t["checkpoints"].setdefault(parts[3], set()).add(parts[4])
    return out


def complete(trials: dict) -> None:
    """The trial evaluated each of steps 10..40 once and keeps the two checkpoints Tune keeps (sweeper.run:
    num_to_keep=2), the last with the MUR trial's virtual points."""
    assert len(trials) == 1 and [t["steps"] for t in trials.values()] == [[10, 20, 30, 40]], trials
    (t,) = trials.values()
    assert t["checkpoints"].keys() == {"checkpoint_000002", "checkpoint_000003"}, trials
    assert t["checkpoints"]["checkpoint_000002"] == {"trainer.pt"}, trials
    assert t["checkpoints"]["checkpoint_000003"] == {"trainer.pt", "virtual_points.npz"}, trials


def no_ray_left(temp: Path, timeout_s: float = 120) -> list[int]:
    """The PIDs of the driver's local Ray still alive after timeout_s (polled): [] when it is gone."""
    deadline = time.time() + timeout_s
    while (left := pids_naming(str(temp))) and time.time() < deadline:
        time.sleep(0.2)
    return left


def stop(proc, temp: Path) -> None:
    if isinstance(proc, subprocess.Popen) and proc.poll() is None:
        proc.kill()
    for pid in pids_naming(str(temp)):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def uninterrupted(ray_head, tmp_path_factory):
    """The report of the same sweep run without an outage. Its property is not the bucket's: it runs on a
    local folder, joining the test process's Ray head (no local Ray of its own to start)."""
    tmp = tmp_path_factory.mktemp("reference")
    p = subprocess.run(sweep_argv(str(tmp / "results"), "--address", ray_head.address), cwd=ROOT,
                       env={**ray_head.env, "VBI_MUR_CACHE": str(tmp / "driver-cache")}, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    (exp,) = (tmp / "results").glob("quick_settings-*")
    steps = [json.loads(s)["step"] for t in exp.glob("trial_*") for s in (t / "result.json").read_text().splitlines()]
    assert steps == [10, 20, 30, 40], steps  # one trial, every evaluation once
    return report_of(str(exp))


def start_until_checkpoint(client, prefix: str, env: dict, log: Path, *more) -> subprocess.Popen:
    """The sweep's driver started on the bucket's `prefix`; returns once a checkpoint is stored there."""
    proc = subprocess.Popen(argv(prefix, *more), cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 400
    try:
        while not any(k.endswith("/trainer.pt") for k in objects(client, f"{prefix}/")):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.time() < deadline, "no checkpoint reached the bucket in time"
            time.sleep(0.2)
    except BaseException:  # the caller never gets the driver to stop: stop it here
        proc.kill()
        raise
    return proc


@pytest.mark.slow
def test_an_outage_within_the_retry_budget_mid_sweep_loses_nothing(s3, uninterrupted, tmp_path):
    """Black-holed for OUTAGE_S once the first checkpoint is in the bucket, with the trial running: the
    trial's uploads and Tune's state uploads wait (a retry budget of RETRY_BUDGET_S, the default's ratio
    of outage to budget), the sweep ends with exit 0, and the bucket holds every evaluation and kept
    checkpoint and the same report."""
    client, proxy = s3
    temp = Path(tempfile.mkdtemp(prefix="rrout", dir="/tmp"))
    log = tmp_path / "driver.log"
    proc = None
    t0 = time.time()
    try:
        proc = start_until_checkpoint(client, "minute", driver_env(temp, tmp_path / "driver-cache",
                                                                   VBI_MUR_STORAGE_RETRY_S=str(RETRY_BUDGET_S)), log)
        proxy.cut()
        t_cut = time.time() - t0
        exp = experiment(client, "minute")
        at_cut = stored_trials(client, "minute", exp)
        time.sleep(OUTAGE_S)
        assert proc.poll() is None, "the sweep ended during the outage:\n" + log.read_text()[-3000:]
        during = proxy.dropped  # connections reset or black-holed by the cut
        proxy.restore()
        rc = proc.wait(600)
        t_end = time.time() - t0
        assert rc == 0, log.read_text()[-3000:]
        assert no_ray_left(temp) == []
    finally:
        proxy.restore()
        stop(proc, temp)
    assert sum(len(t["steps"]) for t in at_cut.values()) < N_EVALS  # the trial still had evaluations to report
    complete(stored_trials(client, "minute", exp))
    got = bucket_report("minute", exp, tmp_path / "report-cache")
    assert got == uninterrupted
    assert pd.read_csv(io.StringIO(got["trials"]))["n_failures"].eq(0).all()  # waited out, no trial restarted
    print(json.dumps({"test": f"bucket black-holed {OUTAGE_S:g} s at a {RETRY_BUDGET_S:g} s budget", "cut_at_s": round(t_cut, 1),
                      "evaluations_stored_at_cut": sum(len(t["steps"]) for t in at_cut.values()),
                      "connections_dropped": during, "after_restore_s": round(t_end - t_cut - OUTAGE_S, 1),
                      "total_s": round(time.time() - t0, 1)}))


@pytest.mark.slow
def test_an_outage_past_the_retries_is_exit_4_with_the_resume_command(s3, uninterrupted, tmp_path):
    """Refused from the first checkpoint on until the driver has ended, with VBI_MUR_STORAGE_RETRY_S=1:
    the trial fails its uploads (and its one restart, --max-failures 1: a restart fails as the first
    run does, each one a trial process more), the bucket cannot take Tune's final state, and the
    driver ends with exit 4 and one line naming the storage and the `--resume` command. Restored,
    `--resume` (default retries) finishes every trial and the report equals the uninterrupted one."""
    client, proxy = s3
    temp = Path(tempfile.mkdtemp(prefix="rrout", dir="/tmp"))
    log = tmp_path / "driver.log"
    proc = None
    t0 = time.time()
    try:
        proc = start_until_checkpoint(client, "long",
                                      driver_env(temp, tmp_path / "driver-cache", VBI_MUR_STORAGE_RETRY_S="1"), log,
                                      "--max-failures", "1")
        proxy.cut(refuse=True)
        t_cut = time.time() - t0
        exp = experiment(client, "long")
        at_cut = stored_trials(client, "long", exp)
        rc = proc.wait(600)
        t_exit = time.time() - t0
        proxy.restore()
        out = log.read_text()
        uri = f"s3://{BUCKET}/long/{exp}"
        lines = [s for s in out.splitlines() if f"storage {uri}" in s]
        assert rc == 4 and len(lines) == 1, out[-5000:]
        assert lines[0].startswith("error: ") and \
            lines[0].endswith(f"`python -m sweeper.run quick_settings --resume {uri} {shlex.join(CELL)}`"), lines
        assert "Traceback" not in lines[0]
        assert no_ray_left(temp) == []
        assert sum(len(t["steps"]) for t in at_cut.values()) < N_EVALS
        p = subprocess.run([*argv("long"), "--resume", uri], cwd=ROOT, env=driver_env(temp, tmp_path / "driver-cache"),
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
        assert no_ray_left(temp) == []
    finally:
        proxy.restore()
        stop(proc, temp)
    complete(stored_trials(client, "long", exp))
    assert bucket_report("long", exp, tmp_path / "report-cache") == uninterrupted
    print(json.dumps({"test": "bucket refused past the retries", "cut_at_s": round(t_cut, 1),
                      "exit_4_after_cut_s": round(t_exit - t_cut, 1), "total_s": round(time.time() - t0, 1)}))
