"""One driver per experiment (sweeper/driver/lease.py), Tune's state never half-read and tuner.pkl pinned
(sweeper/driver/tune_state.py): a second driver is refused in one line naming the holder, a dead holder's
lease is taken over, a torn newest state falls back to the previous complete one or is refused, and
a replaced tuner.pkl is refused before Tune unpickles it.

    pytest tests/test_one_driver.py -q -m "not slow"   # leases, torn states, tuner.pkl (~15 s)
    pytest tests/test_one_driver.py -q -m slow -s      # two real drivers, locally and on moto's S3 (~4 min)
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from sweeper.driver import lease as lease_mod
from sweeper import run as sweeper_run
from sweeper import storage
from sweeper.driver import tune_state, tuner
from sweeper.driver.lease import DriverLease, LeaseHeld
from sweeper.driver.preflight import InputError

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["ablation_radius", "--preset", "quick"]


def no_ray(*a, **k):
    raise AssertionError("Ray was started")


# ---------------------------------------------------------------- the local lock, held by another process

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from sweeper.driver.lease import DriverLease
    DriverLease(Path(sys.argv[1]), "resume").acquire()
    print("held", flush=True)
    time.sleep(600)
""")


def hold(exp: Path) -> subprocess.Popen:
    """Another process that takes the lease on exp and keeps it until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(exp)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_local_lease_held_by_a_live_process_refuses_and_a_killed_one_is_taken_over(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    proc = hold(exp)
    try:
        with pytest.raises(LeaseHeld) as e:
            DriverLease(exp, "RESUME-COMMAND").acquire()
        msg = str(e.value)
        assert f"(PID {proc.pid})" in msg and socket.gethostname() in msg and "since 20" in msg
        assert "RESUME-COMMAND" in msg and f"kill {proc.pid}" in msg and "\n" not in msg
    finally:
        proc.send_signal(signal.SIGKILL)  # dies without releasing
        proc.wait()
    mine = DriverLease(exp, "resume")
    mine.acquire()  # the kernel dropped the dead holder's lock: no manual step
    assert json.loads((exp / "driver.lock").read_text())["pid"] == os.getpid()
    mine.release()
    again = DriverLease(exp, "resume")
    again.acquire()  # released: free again
    again.release()


def write_experiment(root: Path, states: dict[str, str], n_trials: int = 2, digest: str | None = None) -> Path:
    """An experiment folder as sweeper.run leaves it: sweep.json, tuner.pkl, Tune's state files."""
    exp = root / "ablation_radius-20200101-000000"
    exp.mkdir(parents=True)
    meta = {"name": "ablation_radius", "preset": "quick", "n_trials": n_trials, "search": None, "max_seeds": None}
    (exp / "tuner.pkl").write_bytes(b"Tune's tuner")
    if digest:
        meta["tuner_digest"] = digest
    (exp / "sweep.json").write_text(json.dumps(meta))
    for name, text in states.items():
        (exp / name).write_text(text)
    return exp


def state_json(configs: list[dict]) -> str:
    """An experiment state in the layout Tune 2.x writes (trial_data: [trial JSON, runtime JSON] pairs)."""
    trials = [[json.dumps({"trial_id": f"t{i}", "config": c, "status": "TERMINATED"}), "{}"]
              for i, c in enumerate(configs)]
    return json.dumps({"trial_data": trials, "runner_data": {}, "stats": {}})


def grid_config(i: int) -> dict:
    return {"trial_index": i, "method": "mt", "dataset": "digits", "seed": 0, "data_dir": "/data", "steps": 40}


def test_a_second_resume_is_refused_in_one_line_before_ray_and_touches_nothing(tmp_path, monkeypatch, capsys):
    exp = write_experiment(tmp_path / "results", {"experiment_state-2020-01-01_00-00-00.json":
                                                  state_json([grid_config(0), grid_config(1)])})
    before = {p.name: p.read_bytes() for p in exp.iterdir()}
    monkeypatch.setattr(sweeper_run, "start_ray", no_ray)
    proc = hold(exp)
    try:
        assert sweeper_run.main([*QUICK, "--storage", str(tmp_path / "results"), "--resume"]) == 2
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"PID {proc.pid}" in err and "is held by the driver on" in err, err
    assert f"--resume {exp}" in err
    after = {p.name: p.read_bytes() for p in exp.iterdir()}
    assert {k: v for k, v in after.items() if k != "driver.lock"} == before


# ---------------------------------------------------------------- torn and foreign Tune states

OLD, NEW = "experiment_state-2020-01-01_00-00-00.json", "experiment_state-2020-01-02_00-00-00.json"


def test_a_torn_newest_state_falls_back_to_the_previous_complete_one(tmp_path):
    complete = state_json([grid_config(0), grid_config(1)])
    newer = state_json([grid_config(0), grid_config(1)])
    exp = write_experiment(tmp_path, {OLD: complete, NEW: newer[: len(newer) // 2],
                                      "basic-variant-state-2020-01-02_00-00-00.json": "{}"})
    notes = tune_state.check_state(exp, json.loads((exp / "sweep.json").read_text()))
    assert len(notes) == 1 and NEW in notes[0] and f"previous complete state {OLD}" in notes[0]
    # Tune now picks OLD (the greatest name); the torn run's state files are kept, renamed
    assert max(p.name for p in exp.glob("experiment_state-*.json")) == OLD
    assert (exp / (NEW + ".torn")).read_text() == newer[: len(newer) // 2]
    assert (exp / "basic-variant-state-2020-01-02_00-00-00.json.torn").is_file()
    assert (exp / OLD).read_text() == complete


def test_a_state_with_bytes_that_are_not_utf8_is_torn_too(tmp_path):
    """Tune writes ASCII (json.dumps escapes the rest): a byte like 0xff is damage, read as torn."""
    complete = state_json([grid_config(0), grid_config(1)])
    cut = complete.encode()[:200] + b"\xff\xfe"
    exp = write_experiment(tmp_path, {OLD: complete})
    (exp / NEW).write_bytes(cut)
    notes = tune_state.check_state(exp, json.loads((exp / "sweep.json").read_text()))
    assert len(notes) == 1 and "UnicodeDecodeError" in notes[0] and (exp / (NEW + ".torn")).read_bytes() == cut


def test_resume_of_a_torn_state_without_an_earlier_one_is_one_line_exit_2_before_ray(tmp_path, monkeypatch, capsys):
    text = state_json([grid_config(0), grid_config(1)])
    exp = write_experiment(tmp_path / "results", {OLD: text[:100]})
    monkeypatch.setattr(sweeper_run, "start_ray", no_ray)
    assert sweeper_run.main([*QUICK, "--storage", str(tmp_path / "results"), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{exp / OLD} is torn (JSONDecodeError" in err and "no earlier" in err, err
    assert (exp / OLD).read_text() == text[:100]  # kept as it was


@pytest.mark.parametrize("configs, words", [
    ([{}, grid_config(1)], "has the config {}"),
    ([grid_config(0), grid_config(2)], "not distinct points of the grid of 2 trials"),
    ([grid_config(1), grid_config(1)], "not distinct points"),
    ([{**grid_config(0), "trial_index": None}, grid_config(1)], "not distinct points"),
])
def test_a_state_whose_trials_are_not_the_sweeps_grid_is_refused(configs, words, tmp_path):
    exp = write_experiment(tmp_path, {OLD: state_json([grid_config(0), grid_config(1)]), NEW: state_json(configs)})
    with pytest.raises(InputError, match="does not hold this sweep's trials") as e:
        tune_state.check_state(exp, json.loads((exp / "sweep.json").read_text()))
    assert words in str(e.value)


def test_resume_without_a_saved_state_is_one_line_exit_2_before_ray(tmp_path, monkeypatch, capsys):
    """A driver killed before Tune's first save leaves sweep.json and tuner.pkl only: Tune would start
    over with one trial of an empty config."""
    exp = write_experiment(tmp_path / "results", {})
    monkeypatch.setattr(sweeper_run, "start_ray", no_ray)
    assert sweeper_run.main([*QUICK, "--storage", str(tmp_path / "results"), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{exp} holds no saved Tune state" in err, err


def test_a_complete_state_of_the_grid_passes_untouched(tmp_path):
    exp = write_experiment(tmp_path, {OLD: state_json([grid_config(0)]), NEW: state_json([grid_config(1), grid_config(0)])})
    assert tune_state.check_state(exp, json.loads((exp / "sweep.json").read_text())) == []
    assert sorted(p.name for p in exp.iterdir()) == sorted([OLD, NEW, "sweep.json", "tuner.pkl"])


def test_the_trainable_refuses_an_empty_config_once_without_training(monkeypatch):
    """A config no sweep made ends its trial with one `config_error` report (no exception for Ray to retry)."""
    from trainables import tune as trainable

    reports = []
    monkeypatch.setattr(trainable, "tune", SimpleNamespace(report=lambda m, **kw: reports.append(m),
                                                          get_checkpoint=lambda: None))
    trainable.train_tune({})
    trainable.train_tune({"trial_index": 0, "method": "mt", "dataset": "digits", "seed": 0})
    assert [r["done"] for r in reports] == [True, True] and len(reports) == 2
    assert reports[0][trainable.CONFIG_ERROR].startswith("trial config [] lacks method, dataset, seed, data_dir")
    assert "lacks data_dir" in reports[1][trainable.CONFIG_ERROR]


# ---------------------------------------------------------------- tuner.pkl pinned by its digest

class FakeTuner:
    """What sweeper.run needs of a new Tuner: Tune's tuner.pkl written when built, fit() -> no results."""

    def __init__(self, exp_dir):
        storage.write_bytes(exp_dir / storage.TUNER_STATE, b"Tune's tuner state")

    def fit(self):
        return []


def test_a_replaced_tuner_pkl_is_refused_and_runs_nothing(tmp_path, monkeypatch, capsys):
    from test_planted import planted_bytes

    monkeypatch.setattr(sweeper_run, "start_ray", lambda address, args, stop: {"cpu": 1.0, "gpu": 0.0})
    monkeypatch.setattr(tuner, "build_tuner", lambda sweep, trials, args, exp, res: FakeTuner(exp))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    root = tmp_path / "results"
    assert sweeper_run.main([*QUICK, "--storage", str(root)]) == 5  # no trial reported: no report
    (exp,) = storage.experiments(root, "ablation_radius")
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text(state_json([grid_config(0)]))
    marker = tmp_path / "ran"
    (exp / "tuner.pkl").write_bytes(planted_bytes(marker))
    capsys.readouterr()
    code = sweeper_run.main([*QUICK, "--storage", str(root), "--resume"])  # the real Tuner.restore
    err = capsys.readouterr().err.strip()
    assert not marker.exists()
    assert code == 2
    assert json.loads((exp / "sweep.json").read_text())["tuner_digest"] == tune_state.sha256_hex(b"Tune's tuner state")
    assert len(err.splitlines()) == 1 and f"{exp / 'tuner.pkl'} is not the file this experiment wrote" in err, err
    (exp / "tuner.pkl").write_bytes(b"Tune's tuner stat")  # cut short: corrupted, refused the same way
    assert sweeper_run.main([*QUICK, "--storage", str(root), "--resume"]) == 2
    assert "replaced or corrupted" in capsys.readouterr().err


# ---------------------------------------------------------------- a grid's trials.json, for the trials Tune had not created

def test_a_new_grid_keeps_its_trials_and_a_torn_edited_or_lost_list_is_refused_before_ray(tmp_path, monkeypatch,
                                                                                           capsys):
    """A new grid experiment writes its exact trial configs to trials.json, whose SHA-256 sweep.json
    records; --resume refuses (exit 2, one line, Ray not started) a list that is not that file, since
    it would give the trials Tune creates after the stop other configs than the run started with."""
    from sweeper.driver.preflight import trial_configs
    from search_spaces import get_sweep

    monkeypatch.setattr(sweeper_run, "start_ray", lambda address, args, stop: {"cpu": 1.0, "gpu": 0.0})
    monkeypatch.setattr(tuner, "build_tuner", lambda sweep, trials, args, exp, res: FakeTuner(exp))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    root = tmp_path / "results"
    argv = [*QUICK, "--seeds", "2", "--set", "lr=0.25", "--storage", str(root)]
    assert sweeper_run.main(argv) == 5  # no trial reported: no report
    (exp,) = storage.experiments(root, "ablation_radius")
    want = trial_configs(get_sweep("ablation_radius", "quick"), sweeper_run.parse_args(argv))
    kept = (exp / storage.TRIALS_FILE).read_bytes()
    assert json.loads(kept) == want and {t["lr"] for t in json.loads(kept)} == {0.25}  # the --set is in it
    meta = json.loads((exp / "sweep.json").read_text())
    assert meta["trials_digest"] == tune_state.sha256_hex(kept)
    assert tune_state.grid_trials(exp, meta) == want
    (exp / "experiment_state-2026-01-01_00-00-00.json").write_text(state_json([grid_config(0)]))
    monkeypatch.setattr(sweeper_run, "start_ray", no_ray)
    for damage, words in ((kept[:-9], "is not the list this experiment wrote"),
                          (kept.replace(b"0.25", b"0.35"), "torn or edited"),
                          (None, "trials.json is missing")):
        capsys.readouterr()
        if damage is None:
            (exp / storage.TRIALS_FILE).unlink()
        else:
            (exp / storage.TRIALS_FILE).write_bytes(damage)
        assert sweeper_run.main([*QUICK, "--storage", str(root), "--resume"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err, err


def test_the_grid_rebuilt_from_trials_json_fills_in_what_tune_stored_as_placeholders(tmp_path):
    """Tune stores a grid's sample_from functions as placeholders (tuner.pkl, each trial's config until
    it is created) and resolves them only with the functions of the param_space it is given: the space
    rebuilt from trials.json turns the stored placeholders of every trial back into that trial's config."""
    from ray.tune.impl.placeholder import create_resolvers_map, inject_placeholders, resolve_placeholders
    from ray.tune.search.variant_generator import generate_variants

    trials = [{"method": "mt", "seed": s, "lr": 0.1 * s, "mur_radius": r} for s in range(3) for r in (0.25, 4.0)]
    stored = inject_placeholders(tuner.grid_space(trials), create_resolvers_map())  # what tuner.pkl keeps
    assert stored["method"][0] == "__fn_ph"
    fresh = create_resolvers_map()
    inject_placeholders(tuner.grid_space(json.loads(json.dumps(trials))), fresh)  # --resume's param_space
    made = []
    for _, config in generate_variants(stored):  # trial_index resolved, the rest still placeholders
        assert config["method"][0] == "__fn_ph"
        resolve_placeholders(config, fresh)
        made.append(config)
    assert made == [{"trial_index": i, **t} for i, t in enumerate(trials)]


def test_a_grid_folder_without_trials_json_is_resumed_as_stored_saying_what_cannot_run(tmp_path, capsys):
    """No trials.json (and no trials_digest): Tune's stored space is kept (None), with a note only where
    Tune had not created every trial of the grid by the stop."""
    state = "experiment_state-2020-01-01_00-00-00.json"
    part = write_experiment(tmp_path / "a", {state: state_json([grid_config(0)])}, n_trials=3)
    assert tuner.stored_grid(part) is None
    err = capsys.readouterr().err
    assert "keeps no trials.json, so the 2 trial(s) Tune had not created" in err and len(err.splitlines()) == 1
    whole = write_experiment(tmp_path / "b", {state: state_json([grid_config(0), grid_config(1)])}, n_trials=2)
    assert tuner.stored_grid(whole) is None and capsys.readouterr().err == ""


def test_the_trainable_refuses_a_config_of_placeholders_in_one_line(monkeypatch):
    from trainables import tune as trainable

    reports = []
    monkeypatch.setattr(trainable, "tune", SimpleNamespace(report=lambda m, **kw: reports.append(m),
                                                          get_checkpoint=lambda: None))
    config = {**grid_config(3), "method": ("__fn_ph", "1a2b3c4d"), "seed": ("__fn_ph", "5e6f7a8b")}
    trainable.train_tune(config)
    assert len(reports) == 1 and reports[0]["done"] is True
    assert reports[0][trainable.CONFIG_ERROR].startswith("trial config has Tune's placeholders for method, seed ")


def test_lease_seconds_must_be_a_number(monkeypatch):
    monkeypatch.setenv("VBI_MUR_LEASE_S", "soon")
    with pytest.raises(InputError, match="VBI_MUR_LEASE_S='soon' is not a number of seconds"):
        lease_mod.lease_s()


# ---------------------------------------------------------------- two real drivers on one local experiment

# one trial at a time: each driver starts one trial process (Tune reuses it for the next trial); what these tests
# check is the driver's lease and Tune's saved state, not two trials at once
TINY = ["--seeds", "1", "--set", "steps=40", "--set", "eval_every=10", "--set", "lr_rampdown=10",
        "--set", "checkpoint_every_s=0", "--set", "sensitivity_samples=20", "--live-every", "0", "--max-concurrent", "1"]
# the three cells of ablation_radius at r = 1 (LabelSpreading, MT, MT + MUR): a run that ends and is resumed
THREE = ["--cells", "mur_radius=1.0"]


def finished_reports(exp: Path) -> dict[str, int]:
    """{trial folder: the step of its last report} from each result.json."""
    out = {}
    for f in exp.glob("*/result.json"):
        lines = [json.loads(s) for s in f.read_text().splitlines() if s.strip()]
        out[f.parent.name] = lines[-1]["step"] if lines else None
    return out


@pytest.mark.slow
def test_two_real_drivers_on_one_local_experiment(ray_head, tmp_path):
    """Driver A runs a tiny sweep; driver B (`--resume` of A's folder) is refused in one line naming A and
    leaves A's files alone; A is killed with SIGKILL (no release) and a third `--resume` finishes the sweep."""
    from test_reliability import kill_tree, process_tree

    env = ray_head.env
    root = tmp_path / "results"
    argv = [sys.executable, "-m", "sweeper.run", *QUICK, *TINY, "--storage", str(root), "--address", ray_head.address]
    exp = None
    a = None
    try:
        a = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=(tmp_path / "a.log").open("w"), stderr=subprocess.STDOUT)
        deadline = time.time() + 240
        while not list(root.glob("ablation_radius-*/experiment_state-*.json")):  # Tune's first save: resumable
            assert a.poll() is None, (tmp_path / "a.log").read_text()[-3000:]
            assert time.time() < deadline
            time.sleep(0.2)
        (exp,) = [p.parent for p in root.glob("ablation_radius-*/sweep.json")]
        pinned = {n: (exp / n).read_bytes() for n in ("sweep.json", "tuner.pkl")}
        b = subprocess.run([*argv, "--resume", str(exp)], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)
        assert a.poll() is None, "A finished before B asked: the refusal was not tested"
        assert b.returncode == 2, b.stdout + b.stderr
        err = b.stderr.strip()
        assert len(err.splitlines()) == 1 and f"(PID {a.pid})" in err and socket.gethostname() in err, err
        assert json.loads((exp / "driver.lock").read_text())["pid"] == a.pid
        assert {n: (exp / n).read_bytes() for n in pinned} == pinned and not list(exp.glob("*.torn"))
        kill_tree(process_tree(a.pid))  # A dies holding the lease
        c = subprocess.run([*argv, "--resume", str(exp)], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=400)
        assert c.returncode == 0, (c.stdout + c.stderr)[-3000:]
        assert f"resuming {exp}" in c.stdout
    finally:
        if a is not None and a.poll() is None:
            kill_tree(process_tree(a.pid))
    steps = finished_reports(exp)
    assert len(steps) == 5 and set(steps.values()) == {40}, steps  # LabelSpreading reports once, at the end


@pytest.mark.slow
def test_a_real_torn_state_falls_back_and_runs_no_empty_trial(ray_head, tmp_path):
    """A tiny sweep run to its end, `--resume`d once (Tune saves a second run's state), then that newest
    state cut in half: the next `--resume` restores the first run's complete state, runs no trial
    again (no new trial folder, every result.json unchanged) and exits 0."""
    env = ray_head.env
    root = tmp_path / "results"
    argv = [sys.executable, "-m", "sweeper.run", *QUICK, *TINY, *THREE, "--storage", str(root), "--address", ray_head.address]
    for extra in ([], ["--resume"]):
        p = subprocess.run([*argv, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    (exp,) = storage.experiments(root, "ablation_radius")
    states = sorted(exp.glob("experiment_state-*.json"))
    assert len(states) == 2, states
    results = {f: f.read_bytes() for f in exp.glob("*/result.json")}
    text = states[-1].read_text()
    states[-1].write_text(text[: len(text) // 2])
    p = subprocess.run([*argv, "--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert len(list(exp.glob("*/params.json"))) == 3 and all(  # no trial of an empty config
        json.loads(f.read_text()).get("method") for f in exp.glob("*/params.json"))
    assert {f: f.read_bytes() for f in exp.glob("*/result.json")} == results  # nothing ran again
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert f"{states[-1]} is torn" in p.stderr and f"previous complete state {states[0].name}" in p.stderr
    assert (exp / (states[-1].name + ".torn")).read_text() == text[: len(text) // 2]
