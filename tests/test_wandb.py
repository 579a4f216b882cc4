"""`--wandb PROJECT` (sweeper/driver/wandb_log.py): a missing wandb, a bad project name or online logging without
an API key is one line and exit 2 before Ray starts; the callback's pieces log the config, each new step and
the trials table's row (fake wandb, no Ray); a real sweep with WANDB_MODE=offline, stopped and resumed, leaves
one W&B run id per trial whose records (read back from wandb's own run files) equal its result.json and its
trials.parquet row, and no API key in any file.

    pytest tests/test_wandb.py -q
"""
from __future__ import annotations

import json
import math
import os
import pickle
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import write_trial

from sweeper.analysis.aggregate import RAY_KEYS, VERSION_KEYS, load_trials, read_reports
from sweeper.driver.wandb_log import TrialRuns, WandbError, check_wandb, run_id
from sweeper.run import main
from trainables.files import KERNELS_KEY

ROOT = Path(__file__).resolve().parents[1]
FAKE_KEY = "f1e2d3c4b5a6978812345678900fedcba9876543"  # 40 hex digits, the shape of a W&B API key
PREFIXES = ("final_", "best_", "bestval_", "medlast_")  # trials.parquet's metric columns


# ---------------------------------------------------------------- wandb's run files, read back

def records(path: Path):
    """The protobuf Records of a run-*.wandb file: wandb's LevelDB-style log (a 7-byte file header, 32 KiB
    blocks of chunks, each with a 7-byte header: CRC32C, length, type FULL=1 FIRST=2 MIDDLE=3 LAST=4),
    parsed with wandb's own wandb.proto messages; a chunk still being written ends the list."""
    from wandb.proto import wandb_internal_pb2

    data, block, head = path.read_bytes(), 32768, 7
    assert data[:4] == b":W&B", data[:7]
    pos, buf = head, b""
    while pos + head <= len(data):
        left = block - pos % block
        if left < head:  # a block's tail too short for a chunk header is padding
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + head])
        if n == 0 and kind == 0:  # zeros: the rest of the block is padding
            pos += left
            continue
        if pos + head + n > len(data):
            return
        buf, pos = buf + data[pos + head:pos + head + n], pos + head + n
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(buf)
            buf = b""
            yield rec


def item_key(item) -> str:
    return item.key or "/".join(item.nested_key)


def read_runs(wandb_dir: Path) -> dict[str, list[dict]]:
    """Run id -> its offline run folders in the order they were written, each as its run record (config
    decoded), history {step: metrics}, and summary (its updates applied in order)."""
    out: dict[str, list[dict]] = {}
    for f in sorted(wandb_dir.glob("wandb/offline-run-*/run-*.wandb")):
        run, history, summary = None, {}, {}
        for rec in records(f):
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                run = rec.run
            elif kind == "history":
                row = {item_key(i): json.loads(i.value_json) for i in rec.history.item}
                history[rec.history.step.num] = {k: v for k, v in row.items() if not k.startswith("_")}
            elif kind == "summary":
                summary.update({item_key(u): json.loads(u.value_json) for u in rec.summary.update})
        config = {u.key: json.loads(u.value_json) for u in run.config.update if u.key != "_wandb"}
        out.setdefault(run.run_id, []).append({"run": run, "config": config, "history": history,
                                               "summary": summary, "folder": f.parent})
    return out


def same(a, b) -> bool:
    """Equal, NaN equal to NaN (wandb writes a NaN of a summary as null)."""
    nan = lambda v: v is None or (isinstance(v, float) and math.isnan(v))
    return (nan(a) and nan(b)) or a == b


def reported(report: dict) -> dict:
    """The numbers of a result.json line the trial reported: Ray's bookkeeping, the versions and the kernels out."""
    out = {k: v for k, v in report.items() if k not in (*RAY_KEYS, *VERSION_KEYS, KERNELS_KEY)}
    return {k: v for k, v in out.items() if isinstance(v, (int, float))}


# ---------------------------------------------------------------- fast: no Ray

def test_run_ids_follow_the_folder_and_the_trial_id():
    a = run_id("quick_settings-20260101-120000-1a2b3c", "ab12c_00000")
    assert a == run_id("quick_settings-20260101-120000-1a2b3c", "ab12c_00000")  # the same on every --resume
    assert re.fullmatch(r"[0-9a-f]{16}", a)  # a W&B run id: letters and digits, short
    assert len({a, run_id("quick_settings-20260101-120000-1a2b3c", "ab12c_00001"),
                run_id("quick_settings-20260101-120000-9f8e7d", "ab12c_00000")}) == 3


class FakeRun:
    def __init__(self, **kw):
        self.kw, self.id, self.logged, self.summary, self.exit_code = kw, kw["id"], [], {}, None

    def log(self, data, step, commit):
        self.logged.append((step, data))

    def finish(self, exit_code=0):
        self.exit_code = exit_code


def test_trial_runs_log_the_config_each_new_step_and_the_trials_table_row(tmp_path, monkeypatch):
    runs = []
    fake = SimpleNamespace(init=lambda **kw: runs.append(FakeRun(**kw)) or runs[-1], Settings=dict,
                           errors=SimpleNamespace(Error=RuntimeError))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    exp = tmp_path / "quick_settings-20260101-120000-1a2b3c"
    params = {"method": "mt", "vd": False, "mur": "none", "dataset": "digits", "lr": 0.1, "seed": 3, "trial_index": 0}
    tdir = write_trial(exp, 0, params, [
        {"step": 10, "test_error": 50.0, "val_error": 40.0, "note": "text", "grads": {"g0": 1.5}, "done": False},
        {"step": 20, "test_error": 45.0, "val_error": 42.0, "note": "text", "grads": {"g0": 0.5}, "done": False},
        {"step": 30, "test_error": 47.0, "val_error": math.nan, "grads": {"g0": 0.25}, "done": True,
         "python_version": "3.11", KERNELS_KEY: "AVX2"}])
    reports = read_reports(tdir)
    trial = SimpleNamespace(trial_id="ab12c_00000", config=params, local_path=str(tdir))
    cb = TrialRuns("proj", exp.name, "quick_settings", "quick", ["lr"], [])
    cb.on_trial_start(0, [], trial)
    cb.on_trial_start(0, [], trial)  # a retry: the same run
    for r in (reports[0], reports[1], reports[1], reports[2]):  # the restart repeats step 20
        cb.on_trial_result(0, [], trial, r)
    assert pickle.loads(pickle.dumps(cb)).runs == {}  # tuner.pkl keeps no live run
    cb.on_trial_complete(0, [], trial)
    (run,) = runs
    assert {k: run.kw[k] for k in ("project", "group", "id", "resume", "config", "tags")} == {
        "project": "proj", "group": exp.name, "id": run_id(exp.name, "ab12c_00000"), "resume": "allow",
        "config": params, "tags": ["quick_settings", "quick"]}
    assert run.kw["name"] == "lr 0.1 seed=3"
    assert [s for s, _ in run.logged] == [10, 20, 30]
    assert run.logged[0][1] == {"step": 10, "test_error": 50.0, "val_error": 40.0, "grads/g0": 1.5, "done": False,
                                "time_total_s": 1.5}  # no config, trial id, strings, versions or kernels
    row = load_trials(exp).iloc[0]
    columns = [c for c in row.index if c.startswith(PREFIXES)]
    assert set(run.summary) == set(columns) and all(same(run.summary[c], row[c]) for c in columns), run.summary
    assert run.summary["best_test_error"] == 45.0 and run.summary["final_grads/g0"] == 0.25
    assert run.exit_code == 0 and cb.runs == {}


def test_a_missing_wandb_is_one_line_and_exit_2_before_ray(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    assert main(["ablation_radius", "--preset", "quick", "--wandb", "proj", "--storage", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --wandb needs wandb: pip install -e '.[wandb]' (or pip install wandb)"
    assert not list(tmp_path.iterdir())  # nothing written, no Ray started


def test_resume_checks_the_project_the_experiment_started_with(monkeypatch, capsys):
    from sweeper.driver.preflight import InputError
    from sweeper.run import check_wandb_run

    monkeypatch.setitem(sys.modules, "wandb", None)  # a check that runs is the missing-wandb error
    started = {"argv": ["sweeper/run.py", "quick_settings", "--wandb=proj", "--preset", "quick"]}
    with pytest.raises(InputError, match="--wandb needs wandb"):  # resumed without --wandb: its project is checked
        check_wandb_run(SimpleNamespace(wandb=None), started)
    check_wandb_run(SimpleNamespace(wandb="other"), {"argv": ["sweeper/run.py", "quick_settings"]})
    assert capsys.readouterr().err == ("note: --wandb does not apply on --resume; the experiment logs as it "
                                       "started (no W&B)\n")


@pytest.fixture
def bare_wandb(tmp_path, monkeypatch):
    """wandb with no key anywhere (an empty HOME, no WANDB_* in the environment), torn down after."""
    wandb = pytest.importorskip("wandb")
    for k in [k for k in os.environ if k.startswith("WANDB_") or k == "NETRC"]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield wandb
    wandb.teardown()


@pytest.mark.parametrize("name", ["", "team/proj", "a:b", "what?"])
def test_a_name_wandb_refuses_is_one_line(bare_wandb, name):
    with pytest.raises(WandbError, match=r"is not a W&B project name .*WANDB_ENTITY"):
        check_wandb(name)


def test_online_logging_without_an_api_key_is_refused_and_offline_needs_none(bare_wandb, monkeypatch):
    with pytest.raises(WandbError) as e:
        check_wandb("proj")
    assert str(e.value).startswith("--wandb logs to the W&B server but finds no API key; run `wandb login`")
    bare_wandb.teardown()
    monkeypatch.setenv("WANDB_MODE", "offline")
    check_wandb("proj")
    bare_wandb.teardown()
    monkeypatch.setenv("WANDB_MODE", "offlin")
    with pytest.raises(WandbError, match=r"^wandb cannot read its settings \(.*WANDB_MODE=offline\)$"):
        check_wandb("proj")


# ---------------------------------------------------------------- slow: a real sweep, offline

def driver(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sweeper.run", *argv], cwd=ROOT, env=env, stdout=log.open("w"),
                            stderr=subprocess.STDOUT)


def wait_for(cond, proc: subprocess.Popen, log: Path, timeout: float = 300.0) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert proc.poll() is None, f"driver ended (rc {proc.returncode}):\n" + log.read_text()[-3000:]
        assert time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)


def taken_reports(head, storage: Path) -> int:
    """The reports the driver has taken so far (each handed to the W&B callback too): the lines of its trials'
    result.json in Tune's staging copy of the experiment, which the driver writes at once (the results folder
    gets them later, and wandb's run file when wandb flushes it)."""
    exp = next(storage.glob("quick_settings-*"), None)
    if exp is None:
        return 0
    files = head.temp.glob(f"session_*/artifacts/*/{exp.name}/driver_artifacts/trial_*/result.json")
    return sum(len(f.read_text().splitlines()) for f in files)


@pytest.mark.slow
def test_an_offline_sweep_stopped_and_resumed_keeps_one_wandb_run_per_trial_equal_to_its_results(ray_head, tmp_path):
    pytest.importorskip("wandb")
    storage, wandb_dir = tmp_path / "results", tmp_path / "wb"
    wandb_dir.mkdir()
    env = {**ray_head.env, "WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir), "WANDB_API_KEY": FAKE_KEY}
    # two trials one after the other, a checkpoint at every report: the stop comes once the driver has taken two of
    # the first trial's 10 reports, which leaves it most of its steps to be stopped in
    argv = ["quick_settings", "--preset", "quick", "--seeds", "1", "--set", "steps=100", "--set", "eval_every=10",
            "--set", "lr_rampdown=10", "--set", "sensitivity_samples=20", "--set", "checkpoint_every_s=0",
            "--max-concurrent", "1", "--live-every", "0", "--storage", str(storage), "--address", ray_head.address]
    log = tmp_path / "first.log"
    first = driver([*argv, "--wandb", "sweeper-tests"], env, log)
    try:
        wait_for(lambda: taken_reports(ray_head, storage) >= 2, first, log)
        first.send_signal(signal.SIGTERM)  # the graceful stop: exit 3, state saved
        assert first.wait(timeout=300) == 3, log.read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    exp = next(storage.glob("quick_settings-*"))
    log = tmp_path / "resume.log"
    resume = driver(["quick_settings", "--resume", str(exp), "--max-concurrent", "1", "--live-every", "0",
                     "--address", ray_head.address], env, log)  # no --wandb: the stored callbacks log
    assert resume.wait(timeout=600) == 0, log.read_text()[-3000:]

    trials = pd.read_parquet(exp / "trials.parquet")
    by_id = read_runs(wandb_dir)
    assert len(trials) == 2 and set(by_id) == {run_id(exp.name, t) for t in trials["trial_id"]}  # no other run
    continued = 0
    for _, t in trials.iterrows():
        folders = by_id[run_id(exp.name, t["trial_id"])]
        reports = read_reports(exp / t["trial_dir"])
        starts = sum(r["iterations_since_restore"] == 1 for r in reports)
        assert len(folders) == starts  # each start of the trial continued its one run id
        continued += starts > 1
        params = json.loads((exp / t["trial_dir"] / "params.json").read_text())
        for f in folders:
            assert f["run"].project == "sweeper-tests" and f["run"].run_group == exp.name
            assert list(f["run"].tags) == ["quick_settings", "quick"] and f["config"] == params
        history: dict[int, dict] = {}
        for f in folders:  # a step two starts both logged: the later one's numbers, as in result.json
            history.update(f["history"])
        want = {r["step"]: reported(r) for r in reports}
        assert sorted(history) == sorted(want)
        assert all(set(history[s]) == set(want[s]) and all(same(history[s][k], want[s][k]) for k in want[s])
                   for s in want), (history, want)
        summary = folders[-1]["summary"]  # the start that finished the trial wrote its row
        columns = [c for c in trials.columns if c.startswith(PREFIXES) and not pd.isna(t[c])]
        assert columns and all(same(summary.get(c), t[c]) for c in columns), {c: (summary.get(c), t[c]) for c in columns}
        assert {c for c in summary if c.startswith(PREFIXES)} <= set(trials.columns)
    assert continued == 1  # the trial the stop interrupted went on in its run
    for root in (exp, wandb_dir):
        leaked = [p for p in root.rglob("*") if p.is_file() and FAKE_KEY.encode() in p.read_bytes()]
        assert not leaked, leaked
