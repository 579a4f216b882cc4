"""Results, checkpoints and data on S3, against a local S3-compatible server (moto's ThreadedMotoServer).

The server runs in this test process on 127.0.0.1 (moto keeps its objects in memory, so the drivers
that are stopped and resumed run as subprocesses and the server outlives them); AWS_ENDPOINT_URL_S3
points every client at it (boto3 here, pyarrow in the drivers, Ray's workers). Dummy credentials;
moto accepts any, except while its own authentication is switched on (refused credentials).

    pytest tests/test_s3.py -q                  # ~2 min on 2 cores (a stopped + resumed sweep, two drivers)
    pytest tests/test_s3.py -q -m "not slow"    # pre-flight errors and data copies only (~10 s)
"""
import json
import logging
import os
import secrets
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
import moto.settings
import numpy as np
import pandas as pd
import pyarrow.fs as pafs
import pytest
from moto.server import ThreadedMotoServer
from procs import pids_naming
from tinydata import write_cifar10

from sweeper import report
from sweeper.driver import ray_session
from sweeper import run as sweeper_run
from sweeper import storage
from sweeper.driver import tuner
from trainables import remote
from trainables.datafiles import DataError, check_readable, read_raw

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "vbi-mur-test"
TINY = ["--seeds", "1", "--set", "steps=20", "--set", "eval_every=10", "--set", "lr_rampdown=10",
        "--set", "checkpoint_every_s=0",  # a checkpoint at every evaluation
        "--set", "sensitivity_samples=20"]
# the sweeps through Ray run the cells of ablation_radius that their property needs, not all five: MT (the
# baseline) and MT + MUR at the smallest and largest radius (two trials at once and a third after them, so that
# a stop finds one trial finished and another mid-run), or MT alone (one trial, for the driver lease)
THREE_CELLS = ["--cells", "method=mt,mur=none|mur_radius=0.25|mur_radius=4.0", "--cells-only"]
BASELINE_CELL = ["--cells", "method=mt,mur=none", "--cells-only"]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 with one bucket; this process's environment points at it."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ENDPOINT_URL_S3": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true",  # never ask 169.254.169.254 for a region or a role
           "VBI_MUR_CACHE": str(tmp_path_factory.mktemp("cache"))}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        client = boto3.client("s3")
        client.create_bucket(Bucket=BUCKET)
        yield client
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        server.stop()


def objects(client, bucket=BUCKET, prefix="") -> dict[str, int]:
    """{key: size} of every object under prefix."""
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return out


def buckets(client) -> list[str]:
    return sorted(b["Name"] for b in client.list_buckets()["Buckets"])


def no_ray(*a, **k):
    raise AssertionError("Ray was started for bad input")


# ---------------------------------------------------------------- pre-flight: one line, exit 2, nothing written

BAD_STORAGE = {  # name -> (--storage, words of the error)
    "missing bucket": ("s3://no-such-bucket/results", ["bucket 'no-such-bucket' of s3://no-such-bucket/results "
                                                       "does not exist", "aws s3 mb s3://no-such-bucket"]),
    "unsupported scheme": ("foo://bucket/results", ["foo://bucket/results: unsupported scheme foo://",
                                                    "s3://BUCKET/PREFIX"]),
    "no bucket named": ("s3://", ["names no bucket"]),
}


@pytest.mark.parametrize("name", sorted(BAD_STORAGE))
def test_bad_storage_uri_is_one_line_exit_2_before_ray_and_writes_nothing(name, s3, tmp_path, monkeypatch, capsys):
    uri, words = BAD_STORAGE[name]
    monkeypatch.chdir(tmp_path)  # a scheme taken for a folder name would show up here ("s3:", "foo:")
    monkeypatch.setattr(ray_session, "connect_ray", no_ray)
    monkeypatch.setattr(tuner, "build_tuner", no_ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    before = (buckets(s3), objects(s3))
    for argv in (["ablation_radius", "--preset", "quick", "--storage", uri],
                 ["ablation_radius", "--preset", "quick", "--storage", uri, "--resume"]):
        assert sweeper_run.main(argv) == 2
        out, err = capsys.readouterr()
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
        assert all(w in err for w in words), err
        assert "Traceback" not in out + err
    assert list(tmp_path.iterdir()) == [] and (buckets(s3), objects(s3)) == before


def test_refused_credentials_are_one_line_exit_2(s3, tmp_path, monkeypatch, capsys):
    """moto with its authentication on knows no access key: every request is refused (HTTP 403)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ray_session, "connect_ray", no_ray)
    before = objects(s3)
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    rc = sweeper_run.main(["ablation_radius", "--preset", "quick", "--storage", f"s3://{BUCKET}/results"])
    out, err = capsys.readouterr()
    assert report.main([f"s3://{BUCKET}/results/ablation_radius-20200101-000000"]) == 2
    rerr = capsys.readouterr().err
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", float("inf"))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert f"s3://{BUCKET}/results: access refused" in err and "AWS_ACCESS_KEY_ID" in err, err
    assert "access refused" in rerr and len(rerr.strip().splitlines()) == 1, rerr
    assert objects(s3) == before and list(tmp_path.iterdir()) == []


def test_report_of_a_uri_that_holds_nothing_is_one_line_exit_2(s3, capsys):
    assert report.main([f"s3://{BUCKET}/results/nothing-here"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"s3://{BUCKET}/results/nothing-here does not exist" in err


@pytest.mark.slow
def test_report_page_and_index_of_a_bucket(s3, tmp_path, capsys):
    """A sweep folder in the bucket: its report (report.html included) is uploaded beside it; the
    bucket's results root gets index.html, one row linking to that page."""
    from test_report import make_table_exp

    exp, _ = make_table_exp(tmp_path, baseline={"method": "mt", "vd": False, "mur": "none"})
    for f in exp.rglob("*"):
        if f.is_file():
            s3.upload_file(str(f), BUCKET, f"pages/{exp.name}/{f.relative_to(exp).as_posix()}")
    assert report.main([f"s3://{BUCKET}/pages/{exp.name}"]) == 0
    have = objects(s3, prefix="pages/")
    assert have[f"pages/{exp.name}/report.html"] > 10_000 and f"pages/{exp.name}/table.csv" in have
    capsys.readouterr()
    assert report.main([f"s3://{BUCKET}/pages"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"{exp.name}  ?  ") and "  36/37  finished  MT + " in out
    index = s3.get_object(Bucket=BUCKET, Key="pages/index.html")["Body"].read().decode()
    assert f'<a href="./{exp.name}/report.html">report.html</a>' in index


def test_storage_writes_lists_and_reads_back(s3):
    root = storage.check(f"s3://{BUCKET}/unit")
    assert str(root) == f"s3://{BUCKET}/unit" and root.path == f"{BUCKET}/unit"
    assert not [k for k in objects(s3, prefix="unit/") if ".write-test" in k]  # the probe is gone again
    for stamp in ("20240101-000000", "20250101-000000"):
        storage.create_experiment(root / f"sweep_a-{stamp}")
        storage.write_text(root / f"sweep_a-{stamp}" / "sweep.json", json.dumps({"name": "sweep_a"}))
    with pytest.raises(FileExistsError):  # a bucket's folder that holds an experiment is not reused
        storage.create_experiment(root / "sweep_a-20250101-000000")
    storage.write_text(root / "sweep_b-20260101-000000" / "sweep.json", "{}")
    storage.write_text(root / "sweep_a-20990101-000000" / "other.txt", "no sweep.json: not an experiment")
    found = storage.experiments(root, "sweep_a")
    assert [str(e) for e in found] == [f"s3://{BUCKET}/unit/sweep_a-{s}" for s in ("20240101-000000", "20250101-000000")]
    assert json.loads(storage.read_text(found[-1] / "sweep.json")) == {"name": "sweep_a"}
    assert storage.ray_storage(found[-1]) == {"name": "sweep_a-20250101-000000", "storage_path": f"{BUCKET}/unit",
                                              "storage_filesystem": root.fs}


def test_pull_skips_a_checkpoint_deleted_between_listing_and_copy(s3, tmp_path, monkeypatch):
    """Tune deletes a running trial's older checkpoints while the live report copies the bucket:
    a MUR checkpoint's x* that is gone by the time it is copied is left out, the rest arrives; the
    weights are never copied."""
    exp = storage.check(f"s3://{BUCKET}/vanish") / "ablation_radius-20260101-000000"
    storage.write_text(exp / "trial_0" / "params.json", json.dumps({"mur": "direct"}))
    storage.write_text(exp / "trial_0" / "result.json", '{"step": 10}\n')
    storage.write_bytes(exp / "trial_0" / "checkpoint_000000" / "trainer.pt", b"weights")
    storage.write_bytes(exp / "trial_0" / "checkpoint_000001" / storage.VIRTUAL_POINTS, b"x*")
    download = remote.download

    def deleted_first(fs, src, dest, size):  # Tune's deletion lands after pull listed the bucket
        if src.endswith(storage.VIRTUAL_POINTS):
            fs.delete_file(src)
        return download(fs, src, dest, size)

    monkeypatch.setattr(remote, "download", deleted_first)
    dest = tmp_path / "cache"
    assert storage.pull(exp, dest) == 4
    assert (dest / "trial_0" / "result.json").read_text() == '{"step": 10}\n'
    assert not (dest / "trial_0" / "checkpoint_000001" / storage.VIRTUAL_POINTS).exists()
    assert not list(dest.glob("trial_0/checkpoint_*/trainer.pt"))


def test_a_report_from_the_bucket_counts_the_planned_trials_as_a_local_one_does(s3, tmp_path, monkeypatch):
    """The report rebuilt from the bucket alone reads the grid's trials.json, as the local report does: a trial
    gone from the bucket is counted missing in its cell, which is not silently short."""
    from test_planned import make_exp, summary_of

    exp, dirs = make_exp(tmp_path / "local")
    shutil.move(str(dirs[1]), str(tmp_path / "aside"))  # one trial of the mur=none cell gone
    for f in exp.rglob("*"):
        if f.is_file():
            s3.put_object(Bucket=BUCKET, Key=f"planned/{exp.name}/{f.relative_to(exp).as_posix()}", Body=f.read_bytes())
    monkeypatch.setenv("VBI_MUR_CACHE", str(tmp_path / "cache"))
    _, cache = storage.report_inputs(f"s3://{BUCKET}/planned/{exp.name}")  # what sweeper.report URI reads
    got, want = summary_of(cache), summary_of(exp)
    assert got.set_index("mur").loc["none", ["n_planned", "n_missing"]].tolist() == [4, 1]
    pd.testing.assert_frame_equal(got, want)


@pytest.mark.parametrize("key", ["../../outside/params.json", "trial_0/../../../outside/result.json",
                                 "/abs/result.json", "trial_0//result.json"])
def test_pull_refuses_a_key_that_would_land_outside_the_cache(key, s3, tmp_path):
    """A bucket's keys are any strings: one with ".." parts, an empty part or a leading "/" would be
    copied outside the cache folder (or over a file of this machine). The report is refused in one
    line that names the key, before anything is copied."""
    exp = storage.check(f"s3://{BUCKET}/escape-{len(key)}") / "ablation_radius-20260101-000000-abcdef"
    storage.write_text(exp / "sweep.json", "{}")
    s3.put_object(Bucket=BUCKET, Key=f"{exp.path.split('/', 1)[1]}/{key}", Body=b"{}")
    dest = tmp_path / "deep" / "cache"
    with pytest.raises(storage.StorageError, match="a key that is not a plain relative path") as e:
        storage.pull(exp, dest)
    assert repr(key) in str(e.value) and "\n" not in str(e.value)
    assert not dest.exists() and list(tmp_path.rglob("*.json")) == []
    assert report.main([str(exp)]) == 2  # sweeper.report: exit 2, no report


def test_two_runs_in_the_same_second_into_one_bucket_get_their_own_folders(s3, capsys, monkeypatch):
    """A frozen clock: both drivers' folders have the same stamp and different suffixes, each its own
    sweep.json and Tune state (a stand-in Tuner writes tuner.pkl as Tune's does)."""
    from types import SimpleNamespace

    t0 = 1767225600.0
    built = []

    class Tuner:
        def __init__(self, exp):
            storage.write_bytes(exp / storage.TUNER_STATE, b"state")
            built.append(exp)

        def fit(self):
            return []

    monkeypatch.setattr(sweeper_run, "time", SimpleNamespace(time=lambda: t0))
    monkeypatch.setattr(sweeper_run, "start_ray", lambda address, args, stop: {"cpu": 1.0, "gpu": 0.0})
    monkeypatch.setattr(tuner, "build_tuner", lambda sweep, trials, args, exp, res: Tuner(exp))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    argv = ["ablation_radius", "--preset", "quick", "--storage", f"s3://{BUCKET}/same-second"]
    assert [sweeper_run.main(argv) for _ in range(2)] == [5, 5]  # no trial reported: no report
    a, b = built
    assert a != b and storage.stamp(a.name) == storage.stamp(b.name) == time.strftime("%Y%m%d-%H%M%S",
                                                                                         time.localtime(t0))
    assert sorted(k for k in objects(s3, prefix="same-second/") if not k.endswith("/")) == sorted(
        f"same-second/{e.name}/{f}" for e in (a, b) for f in ("sweep.json", "trials.json", "tuner.pkl"))
    capsys.readouterr()
    assert sweeper_run.main([*argv, "--resume"]) == 2  # which is the latest? one line naming both
    err = capsys.readouterr().err
    assert "started in the same second" in err and a.name in err and b.name in err


def test_upload_missing_compares_content_not_only_size(s3, tmp_path):
    """The end-of-run check re-uploads an object of the right size and the wrong bytes: by its ETag
    (a plain PutObject's MD5, or pyarrow's one-part multipart ETag), and where there is none
    (a local file system) by reading it back."""
    import pyarrow.fs as pafs

    local = tmp_path / "staging"
    (local / "t").mkdir(parents=True)
    for rel, body in {"a.json": b'{"x": 1}', "t/result.json": b"1\n2\n", "t/params.json": b"{}"}.items():
        (local / rel).write_bytes(body)
    s3.put_object(Bucket=BUCKET, Key="content/a.json", Body=b'{"x": 2}')       # same size, stale
    s3.put_object(Bucket=BUCKET, Key="content/t/params.json", Body=b"{}")      # the same bytes
    fs, path = remote.resolve(f"s3://{BUCKET}/content")
    with fs.open_output_stream(f"{path}/t/result.json") as out:               # pyarrow's upload, stale
        out.write(b"1\n3\n")
    assert storage.upload_missing(local, fs, path) == 2
    assert s3.get_object(Bucket=BUCKET, Key="content/a.json")["Body"].read() == b'{"x": 1}'
    assert s3.get_object(Bucket=BUCKET, Key="content/t/result.json")["Body"].read() == b"1\n2\n"
    assert storage.upload_missing(local, fs, path) == 0
    remote_dir = tmp_path / "elsewhere"
    (remote_dir / "t").mkdir(parents=True)
    (remote_dir / "a.json").write_bytes(b'{"x": 3}')
    assert storage.upload_missing(local, pafs.LocalFileSystem(), str(remote_dir)) == 3
    assert (remote_dir / "a.json").read_bytes() == b'{"x": 1}'
    assert storage.upload_missing(local, pafs.LocalFileSystem(), str(remote_dir)) == 0


@pytest.mark.slow
def test_hpo_study_goes_up_after_each_trial_and_comes_back_on_another_machine(s3, tmp_path, monkeypatch):
    """The Tune callback uploads a consistent snapshot of the SQLite study while Optuna keeps it open;
    prepare_restore on a machine without it (another cache) pulls it back with every trial."""
    from ray import cloudpickle  # what Tune stores tuner.pkl with
    import optuna

    exp = storage.check(f"s3://{BUCKET}/study") / "hpo-20260101-000000"
    study = optuna.create_study(study_name="hpo", storage=f"sqlite:///{storage.local_file(exp, 'optuna.db')}")
    callback = storage.study_upload_callback(exp)
    for k in range(3):  # a trial ends, the callback runs (the study stays open, as during a sweep)
        study.optimize(lambda t: (t.suggest_float("x", -1, 1) - 0.3) ** 2, n_trials=1)
        callback.on_trial_complete(iteration=k, trials=[], trial=None)
        assert f"study/hpo-20260101-000000/{storage.OPTUNA_DB}" in objects(s3, prefix="study/")
    values = sorted(t.value for t in study.trials)
    callback = cloudpickle.loads(cloudpickle.dumps(callback))  # Tune stores its callbacks with the experiment
    callback.on_experiment_end(trials=[])

    monkeypatch.setenv("VBI_MUR_CACHE", str(tmp_path / "other-machine"))
    assert not (storage.local_folder(exp) / storage.OPTUNA_DB).exists()
    assert storage.prepare_restore(exp) == {"path": exp.path, "storage_filesystem": exp.fs}
    back = optuna.load_study(study_name="hpo", storage=f"sqlite:///{storage.local_folder(exp) / storage.OPTUNA_DB}")
    assert sorted(t.value for t in back.trials) == values and len(values) == 3
    assert storage.upload_study(tmp_path) is False  # a local experiment: the study is already there


# ---------------------------------------------------------------- --data-dir URI: copied once per node

def test_data_dir_uri_is_copied_once_per_node_checked_against_sizes(s3, tmp_path, monkeypatch):
    local = write_cifar10(tmp_path / "data")
    for f in sorted(local.rglob("*")):
        if f.is_file():
            s3.upload_file(str(f), BUCKET, f"data/{f.relative_to(local).as_posix()}")
    uri = f"s3://{BUCKET}/data"
    node = tmp_path / "node"
    monkeypatch.setenv("VBI_MUR_CACHE", str(node))
    copied, real = [], remote.download
    monkeypatch.setattr(remote, "download", lambda fs, src, dest, size: copied.append(dest.name) or real(fs, src, dest, size))

    check_readable("cifar10", uri)  # the driver's check: names and sizes in the bucket, nothing copied
    assert copied == [] and not node.exists()
    threads = [threading.Thread(target=read_raw, args=("cifar10", uri)) for _ in range(4)]  # trials starting together
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(copied) == sorted(f.name for f in (local / "cifar-10-batches-py").iterdir())  # each file once
    cache = node / "data" / "s3" / BUCKET / "data" / "cifar-10-batches-py"
    assert sorted(p.name for p in cache.iterdir()) == sorted(copied)  # no temporary files left
    for (x, y), (x0, y0) in zip(read_raw("cifar10", uri), read_raw("cifar10", local)):
        np.testing.assert_array_equal(x, x0)
        np.testing.assert_array_equal(y, y0)
    assert len(copied) == 7  # the later reads copied nothing
    (cache / "test_batch").write_bytes(b"cut short")  # a torn copy (e.g. a node killed mid-copy): copied again
    read_raw("cifar10", uri)
    assert copied[7:] == ["test_batch"] and (cache / "test_batch").stat().st_size == (local / "cifar-10-batches-py" / "test_batch").stat().st_size

    with pytest.raises(DataError, match=r"cifar10 files missing in s3://vbi-mur-test/nothing: "
                                        r"cifar-10-batches-py/data_batch_1, .*aws s3 sync ./data s3://"):
        read_raw("cifar10", f"s3://{BUCKET}/nothing")
    with pytest.raises(DataError, match="download=true fetches into a local folder, not into s3://"):
        check_readable("cifar10", uri, download=True)


def test_a_planted_batch_in_a_data_bucket_runs_nothing_on_the_node(s3, tmp_path, monkeypatch):
    """A data bucket whose CIFAR batch unpickles into a shell command: the node's copy is read with the
    data-only unpickler, so the read is a DataError naming the file and the marker file stays absent."""
    from test_planted import planted_bytes

    local = write_cifar10(tmp_path / "data")
    marker = tmp_path / "ran"
    (local / "cifar-10-batches-py" / "data_batch_2").write_bytes(planted_bytes(marker))
    for f in sorted(local.rglob("*")):
        if f.is_file():
            s3.upload_file(str(f), BUCKET, f"planted/{f.relative_to(local).as_posix()}")
    monkeypatch.setenv("VBI_MUR_CACHE", str(tmp_path / "node"))
    with pytest.raises(DataError, match=r"cifar10 file .*data_batch_2 .*posix\.system.*refused"):
        read_raw("cifar10", f"s3://{BUCKET}/planted")
    assert not marker.exists()


# ---------------------------------------------------------------- the driver lease in a bucket

def lease_of(client, prefix: str) -> dict:
    return json.loads(client.get_object(Bucket=BUCKET, Key=f"{prefix}/driver.lease")["Body"].read())


@pytest.mark.slow
def test_a_bucket_lease_refuses_while_it_beats_and_is_taken_over_once_it_stops(s3, monkeypatch, capsys):
    from sweeper.driver.lease import DriverLease, LeaseHeld

    monkeypatch.setenv("VBI_MUR_LEASE_S", "1")  # a beat every 0.25 s; dead after 1 s without one
    exp = storage.resolve(f"s3://{BUCKET}/lease/exp-a")
    holder = DriverLease(exp, "RESUME")
    holder.acquire()
    assert lease_of(s3, "lease/exp-a")["pid"] == os.getpid()
    time.sleep(2.0)  # longer than the lease: only the heartbeat keeps it
    other = DriverLease(exp, "RESUME")
    with pytest.raises(LeaseHeld, match=rf"held by the driver on .* \(PID {os.getpid()}\) since .*heartbeat \d s ago.*RESUME"):
        other.acquire()
    holder._stop.set()  # the holder stops beating without releasing (its machine paused, then lost)
    holder._beat.join()
    time.sleep(2.5)  # past the 1 s lease by more than the 1 s resolution of the bucket's HTTP dates
    other.acquire()
    assert lease_of(s3, "lease/exp-a")["token"] == other.record["token"]
    assert "took over the lease" in capsys.readouterr().err
    holder._etag = None  # the old holder's release must not delete the new holder's lease
    other.release()
    assert "lease/exp-a/driver.lease" not in objects(s3, prefix="lease/exp-a")


def test_a_bucket_lease_of_a_dead_process_on_this_machine_is_taken_over_at_once(s3, monkeypatch):
    import socket

    from sweeper.driver.lease import DriverLease, LeaseHeld

    monkeypatch.setenv("VBI_MUR_LEASE_S", "3600")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    s3.put_object(Bucket=BUCKET, Key="lease/exp-b/driver.lease",
                  Body=json.dumps({"host": socket.gethostname(), "pid": pid, "start": 1, "since": "then"}).encode())
    exp = storage.resolve(f"s3://{BUCKET}/lease/exp-b")
    mine = DriverLease(exp, "RESUME")
    mine.acquire()
    assert lease_of(s3, "lease/exp-b")["pid"] == os.getpid()
    # a live holder on another machine is waited for (its heartbeat is fresh), whatever its PID
    s3.put_object(Bucket=BUCKET, Key="lease/exp-c/driver.lease",
                  Body=json.dumps({"host": "elsewhere", "pid": pid, "since": "then"}).encode())
    with pytest.raises(LeaseHeld, match=rf"on elsewhere \(PID {pid}\)"):
        DriverLease(storage.resolve(f"s3://{BUCKET}/lease/exp-c"), "RESUME").acquire()
    mine.release()


def test_a_data_uri_without_the_files_is_exit_2_before_ray(s3, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ray_session, "connect_ray", no_ray)
    monkeypatch.setenv("VBI_MUR_CACHE", str(tmp_path / "node"))
    rc = sweeper_run.main(["ablation_radius", "--data-dir", f"s3://{BUCKET}/nothing", "--storage", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "cifar10 files missing in s3://vbi-mur-test/nothing" in err
    assert not (tmp_path / "node").exists() and not (tmp_path / "r").exists()


# ---------------------------------------------------------------- a sweep on S3 through real Ray: stop, resume, report

def trial_reports(s3, prefix: str) -> dict[str, list[dict]]:
    """{trial folder: its reports} from the bucket's result.json files under prefix."""
    out = {}
    for key in objects(s3, prefix=prefix):
        if key.endswith("/result.json"):
            body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
            out[key.split("/")[-2]] = [json.loads(s) for s in body.splitlines() if s.strip()]
    return out


STEPS = 60  # the stopped sweep's trials: 6 evaluations each, a checkpoint at every one


def mid_sweep(temp: Path) -> bool:
    """In the driver's staging copy of its results (Tune writes each report there once the driver has it; the
    bucket's result.json follows at Tune's next sync), a trial has reported its last evaluation (finished) and
    another its second or a later one but not its last (mid-run: it can lose its newest checkpoint to the stop
    and still resume past its first evaluation). A checkpoint in the bucket is not enough: the worker uploads it
    before the driver has the report, and a stop in between leaves that trial unfinished."""
    steps = [[json.loads(s)["step"] for s in f.read_text().splitlines() if s.endswith("}")]
             for f in temp.glob("ray/session_*/artifacts/*/ablation_radius-*/driver_artifacts/trial_*/result.json")]
    return any(s and s[-1] == STEPS for s in steps) and any(len(s) >= 2 and s[-1] < STEPS for s in steps)


@pytest.fixture(scope="module")
def stopped_and_resumed(s3, tmp_path_factory):
    """A sweep with --storage s3://... (three cells), stopped with SIGTERM once a trial has finished and
    another is mid-run, and `--resume`d to the end. Its driver starts its own local Ray, whose trial
    workers get the bucket's settings (endpoint, keys) from the driver's environment, as a user's local
    sweep on a bucket does; that environment holds a unique S3 secret key, access key id and Ray token,
    and the drivers run in a working folder and $HOME of their own, so that every file the sweep writes
    can be searched for them. Ray's temp dir stays until the module's tests are done."""
    tmp = tmp_path_factory.mktemp("stop-resume")
    secret, key_id, token = secrets.token_hex(20), "AKIA" + secrets.token_hex(8).upper(), secrets.token_hex(32)
    temp = Path(tempfile.mkdtemp(prefix="rrs3", dir="/tmp"))  # short: Ray's unix socket paths
    run = {"tmp": tmp, "temp": temp, "home": tmp / "home", "work": tmp / "work", "cache": tmp / "driver-cache",
           "needles": {"AWS_SECRET_ACCESS_KEY": secret.encode(), "AWS_ACCESS_KEY_ID": key_id.encode(),
                       "RAY_AUTH_TOKEN": token.encode()}}
    run["home"].mkdir()
    run["work"].mkdir()
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_TMPDIR": str(temp),
           "PYTHONPATH": str(ROOT), "VBI_MUR_CACHE": str(run["cache"]), "HOME": str(run["home"]),
           "AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret, "RAY_AUTH_TOKEN": token}
    argv = [sys.executable, "-m", "sweeper.run", "ablation_radius", "--preset", "quick", *TINY, *THREE_CELLS,
            "--set", f"steps={STEPS}", "--storage", f"s3://{BUCKET}/results"]
    t0 = time.time()
    proc = None
    try:
        log1 = tmp / "driver1.log"
        proc = subprocess.Popen(argv, cwd=run["work"], env=env, stdout=log1.open("w"), stderr=subprocess.STDOUT)
        deadline = time.time() + 240
        # stop once the driver has a trial's last report (finished) and another's second or a later one
        while not mid_sweep(temp):
            assert proc.poll() is None, log1.read_text()[-3000:]
            assert time.time() < deadline, "the sweep did not reach a finished and a half-run trial in time"
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        run["stop_rc"] = proc.wait(120)
        run["t_stop"] = time.time() - t0
        run["stop_log"] = log1.read_text()
        assert run["stop_rc"] == 3, run["stop_log"][-3000:]
        exps = sorted({k.split("/")[1] for k in objects(s3, prefix="results/ablation_radius-")})
        assert len(exps) == 1, exps
        run["name"], run["exp"] = exps[0], f"s3://{BUCKET}/results/{exps[0]}"
        run["stopped"] = trial_reports(s3, f"results/{exps[0]}/")
        proc = subprocess.run([*argv, "--resume"], cwd=run["work"], env=env, capture_output=True, text=True,
                              timeout=300)
        run["resume"] = proc
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        run["t_resume"] = time.time() - t0
        run["final"] = trial_reports(s3, f"results/{exps[0]}/")
    finally:
        if isinstance(proc, subprocess.Popen) and proc.poll() is None:
            proc.kill()
        for pid in pids_naming(str(temp)):  # the drivers' own local Ray, if one outlived its driver
            os.kill(pid, signal.SIGKILL)
    try:
        yield run
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_sweep_on_s3_stops_resumes_and_reports_from_the_bucket_alone(stopped_and_resumed, s3, tmp_path, monkeypatch):
    """The sweep on S3 (`stopped_and_resumed`): SIGTERM once a trial has finished (exit 3), `--resume`
    (the latest experiment under the bucket's root) finishes it without running a finished trial
    again, and `python -m sweeper.report URI` rebuilds the report from the bucket alone."""
    run = stopped_and_resumed
    exp, name, log, stopped, final = run["exp"], run["name"], run["stop_log"], run["stopped"], run["final"]
    assert f"results: {exp}" in log and f"--resume {exp} {shlex.join(THREE_CELLS)}`" in log, log[-3000:]
    assert f"resuming {exp}" in run["resume"].stdout and f"results: {exp}" in run["resume"].stdout
    assert list(run["work"].glob("s3:*")) == []  # the URI was never taken for a folder of the working folder
    finished = lambda state: {t for t, r in state.items() if r and r[-1]["step"] == STEPS}
    assert finished(final) == set(final) and len(final) == 3  # MT, MT + MUR at two radii
    assert 1 <= len(finished(stopped)) < len(final)
    for t in finished(stopped):  # finished before the stop: not run again
        assert final[t] == stopped[t], f"{t} ran again after it finished"
    resumed = [t for t in set(stopped) - finished(stopped) if stopped[t]]
    assert resumed
    checked = 0
    for t in resumed:  # stopped mid-run: every evaluation to the end, and a trial stopped after two or more
        # continued from a checkpoint (at worst the one before its newest, which a stop can catch before
        # Ray records it; the restore may rewrite result.json, as test_reliability's kill test explains)
        restart = final[t][[i for i, r in enumerate(final[t]) if r["iterations_since_restore"] == 1][-1]]
        assert [r["step"] for r in final[t] if r["step"] >= restart["step"]][-1] == STEPS, final[t]
        if len(stopped[t]) >= 2:
            assert restart["step"] > 10, f"{t} restarted from scratch: {final[t]}"
            checked += 1
    print(json.dumps({"test": "s3 stop/resume", "resumed": len(resumed), "checked_from_checkpoint": checked}))

    # the report from the bucket alone: a fresh cache, the report's files deleted from the bucket first
    for n in ("table.md", "trials.parquet", "summary.csv"):
        s3.delete_object(Bucket=BUCKET, Key=f"results/{name}/{n}")
    monkeypatch.setenv("VBI_MUR_CACHE", str(tmp_path / "report-cache"))
    monkeypatch.chdir(tmp_path)
    t0 = time.time()
    assert report.main([exp]) == 0
    keys = objects(s3, prefix=f"results/{name}/")
    assert all(keys.get(f"results/{name}/{n}", 0) > 0 for n in ("table.md", "trials.parquet", "summary.csv"))
    fs, path = pafs.FileSystem.from_uri(f"{exp}/trials.parquet")
    with fs.open_input_file(path) as f:
        df = pd.read_parquet(f)
    assert len(df) == len(final) and set(df["status"]) == {"finished"}
    cache = tmp_path / "report-cache" / "experiments" / "s3" / BUCKET / "results" / name
    assert list(cache.glob("trial_*/checkpoint_*/virtual_points.npz"))
    assert not list(cache.glob("trial_*/checkpoint_*/trainer.pt"))  # x* comes from virtual_points.npz: no weights copied
    assert list(tmp_path.glob("s3:*")) == []
    print(json.dumps({"test": "s3 stop + resume + report", "trials": len(final),
                      "finished_at_stop": len(finished(stopped)), "stop_s": round(run["t_stop"], 1),
                      "resumed_s": round(run["t_resume"], 1), "report_s": round(time.time() - t0, 1)}))


def test_confirm_reads_a_search_from_the_bucket(s3, tmp_path):
    """--confirm with a search that ran on S3: the trials are read from the bucket's files (nothing is
    written there) and the winner (rank 1 by validation error) and the recorded start point become
    the two rows."""
    from test_report import make_search_exp

    from search_spaces import get_sweep
    from sweeper.seeds.confirm import confirm_sweep

    exp = make_search_exp(tmp_path / "hpo-1", start_points=[{"lr": 0.05, "mur_radius": 0.3}])
    for f in exp.rglob("*"):
        if f.is_file():
            s3.upload_file(str(f), BUCKET, f"searches/hpo-1/{f.relative_to(exp)}")
    s = confirm_sweep(get_sweep("hpo", "quick"), f"s3://{BUCKET}/searches/hpo-1")
    assert (s.variants, s.baseline, s.first_seed) == ([{"lr": 0.05, "mur_radius": 0.3},
                                                      {"lr": 0.10, "mur_radius": 1.0}], {"lr": 0.05, "mur_radius": 0.3}, 1)
    assert not any(k.endswith(("table_ranked.csv", "trials.parquet")) for k in objects(s3, prefix="searches/"))  # read only


def files_holding(root: Path, needles: dict[str, bytes]) -> list[str]:
    """'file: names' for every file under root whose bytes contain needles' values."""
    out = []
    for p in root.rglob("*"):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            if found := [k for k, v in needles.items() if v in data]:
                out.append(f"{p}: {', '.join(found)}")
    return out


@pytest.mark.slow
def test_no_credential_reaches_any_file_the_sweep_writes(stopped_and_resumed, s3):
    """The sweep on S3 (`stopped_and_resumed`: stopped, resumed, with its own local Ray) had a unique S3
    secret key and Ray token in its environment: neither value (nor the access key id) is printed, nor in
    any object of the bucket or any file written on this machine: the results cache, Tune's local staging,
    Ray's temp dir with both drivers' session logs, the working folder and $HOME."""
    run = stopped_and_resumed
    needles, temp = run["needles"], run["temp"]
    printed = run["stop_log"] + run["resume"].stdout + run["resume"].stderr
    assert not any(v.decode() in printed for v in needles.values()), "a credential was printed"
    written = [d for d in (temp, run["home"], run["work"], run["cache"]) if d.is_dir()]
    n_files = sum(1 for d in written for f in d.rglob("*") if f.is_file())
    leaks = [f for d in written for f in files_holding(d, needles)]
    keys = objects(s3, prefix="results/")
    assert any(k.endswith("/trials.parquet") for k in keys) and any(k.endswith("/trainer.pt") for k in keys)
    leaks += [f"s3://{BUCKET}/{k}" for k in keys
              if any(v in s3.get_object(Bucket=BUCKET, Key=k)["Body"].read() for v in needles.values())]
    assert leaks == [], f"credentials written to {leaks}"
    # the places searched hold what the sweep wrote: the report's cache, Tune's staging, Ray's logs
    assert any(run["cache"].rglob("trials.parquet")) and any(temp.rglob("driver_artifacts"))
    assert len(list(temp.rglob("raylet.out"))) >= 2  # the stopped driver's Ray session and the resumed one's
    print(json.dumps({"test": "no credential in written files", "local_files": n_files, "objects": len(keys)}))


@pytest.mark.slow
def test_two_real_drivers_on_one_bucket_experiment(s3, tmp_path):
    """Driver A runs a tiny sweep (one trial) into the bucket; driver B (`--resume` of it) is refused in one line
    naming A while A's lease beats; A is killed with SIGKILL (the lease stays in the bucket) and a
    third driver takes the dead holder's lease over and finishes the sweep."""
    from test_reliability import kill_tree, process_tree

    temp = Path(tempfile.mkdtemp(prefix="rr2d", dir="/tmp"))
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "RAY_TMPDIR": str(temp),
           "PYTHONPATH": str(ROOT), "VBI_MUR_CACHE": str(tmp_path / "driver-cache"), "VBI_MUR_LEASE_S": "8"}
    # no checkpoint before the end (the lease is the property): a SIGKILL then cannot land between Tune's
    # deletion of the checkpoint its last stored state names and the upload of the state naming a newer one
    argv = [sys.executable, "-m", "sweeper.run", "ablation_radius", "--preset", "quick", *TINY, *BASELINE_CELL,
            "--set", "steps=40", "--set", "checkpoint_every_s=3600", "--live-every", "0",
            "--storage", f"s3://{BUCKET}/two-drivers"]
    a = None
    try:
        a = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=(tmp_path / "a.log").open("w"), stderr=subprocess.STDOUT)
        deadline = time.time() + 240
        while not [k for k in objects(s3, prefix="two-drivers/") if "/experiment_state-" in k]:  # resumable
            assert a.poll() is None, (tmp_path / "a.log").read_text()[-3000:]
            assert time.time() < deadline
            time.sleep(0.3)
        (key,) = [k for k in objects(s3, prefix="two-drivers/") if k.endswith("/sweep.json")]
        prefix = key.rsplit("/", 1)[0]
        exp = f"s3://{BUCKET}/{prefix}"
        b = subprocess.run([*argv, "--resume", exp], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert a.poll() is None, "A finished before B asked: the refusal was not tested"
        assert b.returncode == 2, b.stdout + b.stderr
        err = b.stderr.strip()
        assert len(err.splitlines()) == 1 and f"(PID {a.pid})" in err and "heartbeat" in err, err
        held = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{prefix}/driver.lease")["Body"].read())
        assert held["pid"] == a.pid
        kill_tree(process_tree(a.pid))  # A dies holding the lease: the object stays
        assert f"{prefix}/driver.lease" in objects(s3, prefix=prefix)
        c = subprocess.run([*argv, "--resume", exp], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert c.returncode == 0, (c.stdout + c.stderr)[-3000:]
        assert f"took over the lease of {exp}" in c.stderr and f"(PID {a.pid})" in c.stderr
        assert f"{prefix}/driver.lease" not in objects(s3, prefix=prefix)  # released at the end
    finally:
        if a is not None and a.poll() is None:
            kill_tree(process_tree(a.pid))
        for pid in pids_naming(str(temp)):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
    final = trial_reports(s3, f"{prefix}/")
    assert len(final) == 1 and all(r and r[-1]["step"] == 40 for r in final.values()), final


def test_an_unreadable_latest_checkpoint_in_a_bucket_is_named_and_the_older_one_loads(s3, tmp_path, capsys):
    """On a bucket the older checkpoint is found the same way as locally: the checkpoint_NNNNNN folders beside
    Tune's latest, listed on the checkpoint's own file system; an empty trainer.pt there is named and skipped."""
    from ray.tune import Checkpoint

    from trainables.config import TrainConfig
    from trainables.files import CKPT
    from trainables.trainer import Trainer
    from trainables.tune import restore

    cfg = TrainConfig(dataset="digits", num_labels=100, arch="convnet_small", method="mt", steps=20, eval_every=10,
                      lr_rampdown=10, sensitivity_samples=4)
    root = storage.check(f"s3://{BUCKET}/ckpt")
    tr = Trainer(cfg)
    for i in range(2):
        tr.run_interval()
        tr.save(tmp_path / CKPT)
        storage.write_bytes(root / "trial" / f"checkpoint_{i:06d}" / CKPT, (tmp_path / CKPT).read_bytes())
    storage.write_bytes(root / "trial" / "checkpoint_000001" / CKPT, b"")
    latest = Checkpoint(f"{root.path}/trial/checkpoint_000001", filesystem=root.fs)
    loaded = restore(Trainer(cfg), latest, lambda: Trainer(cfg))
    err = capsys.readouterr().err
    assert loaded.step == 10 and "checkpoint unreadable: " in err and "trainer.pt cannot be read" in err
    assert f"trial goes on from the older checkpoint {root.path}/trial/checkpoint_000000 (step 10)" in err
