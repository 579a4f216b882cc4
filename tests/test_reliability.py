"""Reliability: killed trial workers and drivers recover to the same numbers, NaN runs are marked
diverged, bad input is a one-line error (exit 2) that touches nothing, and atomic writes survive kills.

Processes are really killed (SIGKILL, by their own PIDs) on a local Ray that each test starts
itself, in its own temp dir (never /tmp/ray: other Ray instances may run on the machine), and
stops again; leftovers of a killed driver are found by PID and process start time.

    pytest tests/test_reliability.py -q                # fast: bad input, atomic writes (~20 s)
    pytest tests/test_reliability.py -q -m slow -s     # real Ray: kills and resumes (~4 min on 2 cores)
"""
import builtins
import hashlib
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
from ray import cloudpickle as ray_pickle
from procs import pids_naming
from tinydata import write_cifar10
import torch
import yaml

from search_spaces import get_sweep
from sweeper import check_cluster, report
from sweeper.driver import preflight, ray_session, tuner
from sweeper.driver.stopping import GracefulStop
from sweeper import run as sweeper_run
from sweeper.analysis.aggregate import newest_ray_state, read_reports, write_summary, write_trials
from sweeper.storage import TRIALS_FILE
from trainables.config import TrainConfig
from trainables.files import atomic_write
from trainables.trainer import TERMS, Diverged, Trainer, train

ROOT = Path(__file__).resolve().parents[1]
# Tiny trials of the quick preset: 40 steps, a report + checkpoint every 10.
TINY = ["--set", "steps=40", "--set", "eval_every=10", "--set", "lr_rampdown=10", "--set", "checkpoint_every_s=0",
        "--set", "sensitivity_samples=20", "--live-every", "0"]  # the live page: tests/test_html.py
# The three cells of ablation_radius at r = 1 (LabelSpreading, MT, MT + MUR): a finished trial at once (LabelSpreading)
# and two that run on the two CPUs, which is what the stop-and-resume properties need of a sweep.
THREE = ["--cells", "mur_radius=1.0"]
ONE_CELL = ["--cells", "lr=0.1", "--cells-only"]  # quick_settings' paper-settings row alone: one trial a seed
# Metrics that must be bit-identical to an uninterrupted run on CPU (not wall_time, steps_per_s).
EXACT = ("step", "test_error", "test_error_student", "test_error_teacher", "best_test_error", "loss_total",
         "loss_xent", "loss_cons", "loss_kl", "loss_mur", "loss_entmin", "g0_norm", "lr",
         "sensitivity_mean", "sensitivity_std")


# ---------------------------------------------------------------- helpers: processes (Linux /proc)

def proc_stat(pid: int):
    """(parent pid, start time in clock ticks, state) of a live process, or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[19]), fields[0]


def process_tree(pid: int) -> dict[int, int]:
    """{pid: start time} of `pid` and all its descendants now (start time guards against PID reuse)."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and (st := proc_stat(int(p.name))):
            children.setdefault(st[0], []).append(int(p.name))
    out, todo = {}, [pid]
    while todo:
        q = todo.pop()
        if (st := proc_stat(q)) and st[2] != "Z":
            out[q] = st[1]
            todo += children.get(q, [])
    return out


def alive(procs: dict[int, int]) -> dict[int, int]:
    """The processes of `procs` still running (same PID and start time, not a zombie)."""
    return {p: t for p, t in procs.items() if (st := proc_stat(p)) and st[1] == t and st[2] != "Z"}


def kill_tree(procs: dict[int, int], timeout: float = 20.0) -> int:
    """SIGKILL exactly these processes and whatever they started meanwhile; wait until all are gone."""
    killed, deadline = set(), time.time() + timeout
    while time.time() < deadline:
        now = {}
        for pid in alive(procs):
            now.update(process_tree(pid))
        procs = {**procs, **now}
        left = alive(procs)
        if not left:
            return len(killed)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    raise AssertionError(f"processes still alive after SIGKILL: {sorted(alive(procs))}")


def ray_env(temp: Path) -> dict:
    """This environment with Ray's temp dir moved to `temp` (so the driver's Ray is ours alone)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "RAY_TMPDIR": str(temp), "PYTHONPATH": str(ROOT)}


def short_tmp(prefix: str) -> Path:
    """A short /tmp folder: Ray's unix sockets live under it and their paths are limited to 107 bytes."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


# ---------------------------------------------------------------- helpers: results on disk

def saved_state(exp: Path) -> dict[str, tuple[str, int | None]]:
    """Tune's newest saved experiment state: trial folder -> (status, step of the checkpoint a resume
    restores it from, None if none). This is what `--resume` restores, read the way Tune reads it."""
    state = newest_ray_state(exp) if exp else None
    try:
        trials = json.loads(state.read_text())["trial_data"] if state else []
    except json.JSONDecodeError:  # Tune's sync is copying it from the driver's staging folder: look again
        return {}
    out = {}
    for trial_json, meta_json in trials:
        trial, meta = json.loads(trial_json), json.loads(meta_json)
        manager = ray_pickle.loads(bytes.fromhex(meta["checkpoint_manager"]["value"]))
        latest = manager.latest_checkpoint_result
        out[trial["relative_logdir"]] = (trial["status"], latest.metrics["step"] if latest else None)
    return out


def trial_folders(exp: Path) -> list[Path]:
    return sorted(p.parent for p in exp.glob("*/params.json"))


def starts(reports: list[dict]) -> list[int]:
    """Indices of the reports that open a (re)start of the trial (Ray resets iterations_since_restore)."""
    return [i for i, r in enumerate(reports) if r["iterations_since_restore"] == 1]


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def trial_config(t: dict) -> TrainConfig:
    return TrainConfig.from_dict({k: v for k, v in t.items() if k != "trial_index"})


def reference(t: dict) -> dict:
    """The uninterrupted run: trainables.trainer.train, in this process, on 1 thread like a 1-CPU trial."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return train(trial_config(t), log=None)
    finally:
        torch.set_num_threads(threads)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file under root: size, mtime and SHA-256 (to show that nothing stored was touched)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        elif p.is_dir():
            out[str(p.relative_to(root)) + "/"] = ()
    return out


def cli_trials(*argv: str) -> tuple:
    """(sweep, args, validated trial configs) exactly as `python -m sweeper.run ARGV` builds them."""
    args = sweeper_run.parse_args(list(argv))
    sweep = get_sweep(args.sweep, args.preset)
    if args.cells:
        sweep = preflight.select_cells(sweep, args.cells, compared=not args.cells_only)
    return sweep, args, preflight.trial_configs(sweep, args)


# ---------------------------------------------------------------- a local Ray in this process

@pytest.fixture(scope="module")
def local_ray():
    """Our own local Ray (2 CPUs, no dashboard, own temp dir), shut down and checked gone after."""
    import ray

    temp = short_tmp("rrel")
    ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=str(temp / "ray"),
             log_to_driver=False)
    try:
        yield temp
    finally:
        ray.shutdown()
        deadline = time.time() + 20
        while pids_naming(str(temp)) and time.time() < deadline:
            time.sleep(0.2)
        assert pids_naming(str(temp)) == [], "Ray processes of this test outlived ray.shutdown()"
        shutil.rmtree(temp, ignore_errors=True)


def fit(sweep, trials, args, exp: Path):
    """Run `trials` with the Tuner that sweeper.run builds (its FailureConfig and checkpoints)."""
    exp.mkdir(parents=True)
    (exp / "sweep.json").write_text(json.dumps({**asdict(sweep), "preset": args.preset}, default=str))
    return tuner.build_tuner(sweep, trials, args, exp, {"cpu": 1, "gpu": 0}).fit()


# ---------------------------------------------------------------- 1. a trial worker killed mid-run

@pytest.mark.slow
def test_killed_trial_worker_restarts_from_checkpoint_with_identical_metrics(local_ray, tmp_path):
    # 60 steps: a loaded machine may show the driver a process's first report late, and two kills
    # with a report after each need room
    sweep, args, trials = cli_trials("ablation_radius", "--preset", "quick", "--seeds", "1", *TINY,
                                     "--set", "steps=60", "--storage", str(tmp_path))
    trial = trials[2]  # r = 1.0, seed 0
    exp, kills, stop, problems = tmp_path / "exp", [], threading.Event(), []
    every = trial["eval_every"]

    def killer():
        """SIGKILL the worker twice: right after the first report of each of the first two processes."""
        while len(kills) < 2 and not stop.is_set():
            tdirs = trial_folders(exp) if exp.is_dir() else []
            reports = read_reports(tdirs[0]) if tdirs else []
            fresh = [r for r in reports if r["pid"] not in {k["pid"] for k in kills}]
            if fresh and not fresh[-1]["done"]:
                pid = fresh[-1]["pid"]
                if pid not in process_tree(os.getpid()):  # never kill what this test did not start
                    problems.append(f"worker {pid} is not a process of our Ray")
                    return
                os.kill(pid, signal.SIGKILL)
                kills.append({"pid": pid, "step": fresh[-1]["step"], "t": time.time()})
            time.sleep(0.02)

    watcher = threading.Thread(target=killer, daemon=True)
    t0 = time.time()
    watcher.start()
    try:
        grid = fit(sweep, [trial], args, exp)
    finally:
        stop.set()
        watcher.join()
    wall = time.time() - t0
    assert not problems and len(kills) == 2, f"not killed twice: {kills} {problems}"
    assert grid.num_errors == 0

    (tdir,) = trial_folders(exp)
    reports = read_reports(tdir)
    begin = starts(reports)
    assert len(begin) == 3, "one start plus one restart per kill"
    pids = [reports[i]["pid"] for i in begin]
    assert pids[:2] == [k["pid"] for k in kills] and len(set(pids)) == 3
    for i, k in zip(begin[1:], kills):  # each restart continues right after the killed process's last checkpoint
        assert reports[i - 1]["pid"] == k["pid"] and reports[i - 1]["step"] >= k["step"]
        assert reports[i]["step"] == reports[i - 1]["step"] + every, (reports[i - 1], reports[i])
    assert "Failure # 2" in (tdir / "error.txt").read_text()
    assert reports[-1]["done"] and reports[-1]["step"] == trial["steps"]

    ref = reference(trial)
    for k in EXACT:
        assert same(reports[-1][k], ref[k]), (k, reports[-1][k], ref[k])
    print(json.dumps({"test": "trial worker kill", "kills": len(kills), "restarts": len(begin) - 1,
                      "steps": trial["steps"], "wall_s": round(wall, 1),
                      "final_test_error": reports[-1]["test_error"], "reference": ref["test_error"]}))


# ---------------------------------------------------------------- 3. a forced NaN: diverged, the sweep goes on

@pytest.mark.slow
def test_nan_trial_is_marked_diverged_and_left_out_of_the_mean(local_ray, tmp_path):
    sweep, args, trials = cli_trials("ablation_radius", "--preset", "quick", "--seeds", "1", *TINY,
                                     "--storage", str(tmp_path))
    ok = trials[2]
    nan = {**ok, "lr": 1e12}  # runs beside a normal trial, which must not be disturbed
    with pytest.raises(Diverged) as caught:  # the expected divergence: same config, this process, no Ray
        Trainer(trial_config(nan)).run_interval()
    expected = caught.value
    exp = tmp_path / "exp"
    grid = fit(sweep, [nan, ok], args, exp)
    assert grid.num_errors == 0  # a diverged trial ends normally: no retries, no failure

    reports = {json.loads((t / "params.json").read_text())["lr"]: read_reports(t) for t in trial_folders(exp)}
    (last,) = reports[1e12]  # it stopped at once: one report, before the first evaluation
    assert last["diverged"] == 1 and last["done"] and math.isnan(last["test_error"])
    assert (last["diverged_step"], last["diverged_term"]) == (expected.step, expected.term)
    assert last["diverged_step"] < ok["eval_every"] and last["diverged_term"] in (*TERMS, "total")
    assert reports[ok["lr"]][-1]["done"] and reports[ok["lr"]][-1]["step"] == ok["steps"]

    paths = report.build_report(exp)
    df = pd.read_parquet(paths["trials.parquet"])
    status = dict(zip(df["lr"], df["status"]))
    assert status == {1e12: "diverged", ok["lr"]: "finished"}
    summary = pd.read_csv(paths["summary.csv"]).set_index("lr")
    assert summary.loc[1e12, ["n", "n_diverged", "n_trials"]].tolist() == [0, 1, 1]
    assert math.isnan(summary.loc[1e12, "mean"])  # nothing finished: no mean, rather than a NaN averaged in
    assert summary.loc[ok["lr"], ["n", "n_diverged"]].tolist() == [1, 0]
    assert summary.loc[ok["lr"], "mean"] == reports[ok["lr"]][-1]["test_error"]
    assert "1 diverged" in paths["table.md"].read_text()
    print(json.dumps({"test": "forced NaN", "diverged_step": last["diverged_step"],
                      "diverged_term": last["diverged_term"]}))


# ---------------------------------------------------------------- 2. a driver killed mid-sweep, then resumed

class Driver:
    """`python -m sweeper.run ...` in a subprocess with its own Ray temp dir, or joined to `head` (a
    conftest.RayHead) with --address; SIGKILLed by PID."""

    def __init__(self, argv: list[str], temp: Path, log: Path, new_session: bool = False, head=None, env=None):
        self.log = log
        env = {**(ray_env(temp) if head is None else {**head.env, "RAY_TMPDIR": str(temp)}), **(env or {})}
        argv = argv if head is None else [*argv, "--address", head.address]
        self.proc = subprocess.Popen([sys.executable, "-m", "sweeper.run", *argv], cwd=ROOT, env=env,
                                     stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=new_session)

    def wait_until(self, cond, timeout: float = 240.0):
        deadline = time.time() + timeout
        while not cond():
            assert self.proc.poll() is None, f"driver ended (rc {self.proc.returncode}) before the kill point:\n" \
                                             + self.log.read_text()[-3000:]
            assert time.time() < deadline, "kill point not reached in time"
            time.sleep(0.15)  # each look parses Tune's saved state: a busy loop would take a core

    def kill(self) -> int:
        """SIGKILL the driver, then (by PID) the Ray processes it had started; returns how many."""
        ours = process_tree(self.proc.pid)
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        return kill_tree(ours)

    def finish(self, timeout: float = 300.0) -> int:
        return self.proc.wait(timeout)


def end_driver(d: Driver | None, temp: Path) -> None:
    """A test's clean-up: a driver still running is killed (with its Ray), its Ray temp folder removed."""
    if d is not None and d.proc.poll() is None:
        d.kill()
    shutil.rmtree(temp, ignore_errors=True)


def sweep_state(exp: Path) -> dict[str, list[dict]]:
    return {t.name: read_reports(t) for t in trial_folders(exp)} if exp and exp.is_dir() else {}


def settled_state(exp: Path, quiet_s: float = 1.5, timeout_s: float = 60) -> dict[str, list[dict]]:
    """sweep_state once no trial has written a report for quiet_s: a killed driver's trials on a shared Ray
    head (ray_head) may report once more before Ray ends its job, and a trial that reports first then is
    one the resume starts again."""
    deadline, state = time.time() + timeout_s, sweep_state(exp)
    while time.time() < deadline:
        time.sleep(quiet_s)
        now = sweep_state(exp)
        if now == state:
            return now
        state = now
    raise AssertionError(f"the killed driver's trials still report after {timeout_s} s")


def done(state) -> set[str]:
    return {t for t, r in state.items() if r and r[-1]["done"]}


def partial(state) -> set[str]:
    return {t for t, r in state.items() if r and not r[-1]["done"]}


SAVES_EACH_SECOND = {"TUNE_GLOBAL_CHECKPOINT_S": "1"}  # a driver's env: Tune saves its experiment state each second


class KillPoint:
    """True once >= min_done trials finished and Tune's saved experiment state knows it, and every
    running trial has a checkpoint in that state: a preemption in mid-run that `--resume` can
    continue from each trial's saved checkpoint (a trial that ended after the last save would be
    resumed, and report again, as if still running)."""

    def __init__(self, exp_of, min_done: int):
        self.exp_of, self.min_done = exp_of, min_done

    def __call__(self) -> bool:
        exp = self.exp_of()
        state, saved = sweep_state(exp), saved_state(exp)
        status = lambda t: saved.get(t, (None, None))[0]
        checkpoint = lambda t: saved.get(t, (None, None))[1]
        return len(done(state)) >= self.min_done and all(status(t) == "TERMINATED" for t in done(state)) \
            and bool(partial(state)) and all(checkpoint(t) is not None for t in partial(state))


@pytest.mark.slow
def test_killed_driver_resumes_without_rerunning_finished_trials(ray_head, tmp_path):
    temp, storage = short_tmp("rrdrv"), tmp_path / "results"
    # three trials (LabelSpreading, MT, MT + MUR) on two CPUs; LabelSpreading ends at once, so MT + MUR
    # must run long enough (250 steps) to be killed mid-run twice, after one and after two finished trials: the
    # second kill point comes once MT has finished and Tune's saved state names MT + MUR's checkpoint, which
    # Tune saves every second here (TUNE_GLOBAL_CHECKPOINT_S; its own period starts at 10 s), not after MT + MUR ended
    argv = ["ablation_radius", "--preset", "quick", "--seeds", "1", *THREE, *TINY, "--set", "steps=250",
            "--storage", str(storage)]
    sweep, _, trials = cli_trials(*argv)
    assert len(trials) == 3
    every = trials[0]["eval_every"]
    exp_of = lambda: next(storage.glob("ablation_radius-*"), None)
    kills, t0, d = [], time.time(), None
    try:
        for run, extra, min_done in ((1, [], 1), (2, ["--resume"], 2)):  # 2: the latest experiment
            d = Driver([*argv, *extra], temp, tmp_path / f"driver{run}.log", head=ray_head,
                       env=SAVES_EACH_SECOND)
            d.wait_until(KillPoint(exp_of, min_done))
            n_ray = d.kill()
            state = settled_state(exp_of())  # after the kill, once nothing writes these files any more
            # only finished trials' files: a trial Ray had just launched may have params.json and no result.json yet
            kills.append({"state": state, "saved": saved_state(exp_of()),
                          "files": {t: (exp_of() / t / "result.json").read_bytes() for t in done(state)},
                          "t_s": round(time.time() - t0, 1), "ray_processes_killed": n_ray})
        exp = exp_of()
        d = Driver([*argv, "--resume", str(exp)], temp, tmp_path / "driver3.log", head=ray_head)  # 3: the folder named
        rc = d.finish()
        assert rc == 0, d.log.read_text()[-3000:]
        assert f"resuming {exp}" in d.log.read_text()
    finally:
        end_driver(d, temp)
    wall = time.time() - t0

    final = sweep_state(exp)
    assert len(final) == len(trials) and done(final) == set(final)
    for k in kills:  # finished trials were not run again: results byte for byte as at the kill
        for t in done(k["state"]):
            assert (exp / t / "result.json").read_bytes() == k["files"][t], f"{t} ran again after it finished"
    restarts = {t for k in kills for t in partial(k["state"])}
    for t in restarts:  # an unfinished one went on from the checkpoint Tune's saved state named at its last kill
        # none saved (a trial that first reported between the kill point's look and the kill): from scratch
        saved_step = [k for k in kills if t in partial(k["state"])][-1]["saved"].get(t, (None, None))[1] or 0
        resumed = final[t][starts(final[t])[-1]:]
        assert [r["step"] for r in resumed] == list(range(saved_step + every, trials[0]["steps"] + 1, every)), t
    n_starts = sum(len(starts(r)) for r in final.values())
    # nothing was started more often than the kills explain (a rewritten history shows fewer starts): each
    # kill restarts the trials it left unfinished, those with reports and those launched without one yet
    assert len(trials) <= n_starts <= len(trials) + sum(len(set(k["state"]) - done(k["state"])) for k in kills)

    # the final table equals the uninterrupted runs of the same configs, exactly
    row_of = lambda r: (r["method"], r["mur"], float(r["mur_radius"]))  # LabelSpreading, MT and MUR rows
    refs = {row_of(t): reference(t) for t in trials}
    summary = pd.read_csv(exp / "summary.csv")
    assert sorted(row_of(r) for _, r in summary.iterrows()) == sorted(refs)
    for _, row in summary.iterrows():
        assert row["mean"] == refs[row_of(row)]["test_error"]
        assert (row["n"], row["n_failed"], row["n_diverged"], row["n_incomplete"]) == (1, 0, 0, 0)
    df = pd.read_parquet(exp / "trials.parquet")
    assert set(df["status"]) == {"finished"}
    for _, row in df.iterrows():
        for k in EXACT:
            if k in refs[row_of(row)]:
                assert same(row[f"final_{k}"], refs[row_of(row)][k]), (row_of(row), k)
    print(json.dumps({"test": "driver kill + resume", "trials": len(trials), "driver_kills": len(kills),
                      "resumes": 2, "trial_starts": n_starts, "continued_from_checkpoint": len(restarts),
                      "kills": [{"t_s": k["t_s"], "done": len(done(k["state"])), "running": len(partial(k["state"])),
                                 "processes_killed": k["ray_processes_killed"],
                                 "running_at_step": sorted(k["state"][t][-1]["step"] for t in partial(k["state"]))}
                                for k in kills],
                      "wall_s": round(wall, 1)}))


class SavedCheckpoints:
    """Polled: True once all n_trials trials have reported and every running one's last reported
    checkpoint is the one Tune's saved experiment state names, with an evaluation reported since (the
    training a resume repeats). A trial that had not reported yet would have nothing to resume from."""

    def __init__(self, exp_of, n_trials: int):
        self.exp_of, self.n_trials = exp_of, n_trials

    def __call__(self) -> bool:
        exp = self.exp_of()
        state, saved = sweep_state(exp), saved_state(exp)
        running = partial(state)
        if not running or sum(bool(r) for r in state.values()) < self.n_trials:  # one not started yet (a slow worker start)
            return False
        for t in running:
            ckpts = [r["step"] for r in state[t] if r.get("checkpoint_dir_name")]
            if not ckpts or saved.get(t, (None, None))[1] != ckpts[-1] or state[t][-1]["step"] == ckpts[-1]:
                return False
        return True


class Retraced:
    """Polled: True once every trial that was running at the kill has reported again up to the last step
    it had reported before it (the evaluations a resume repeats are all there)."""

    def __init__(self, exp_of, killed: dict[str, list[dict]]):
        self.exp_of, self.last = exp_of, {t: r[-1]["step"] for t, r in killed.items() if r and not r[-1]["done"]}

    def __call__(self) -> bool:
        state = sweep_state(self.exp_of())
        return all(len(starts(state.get(t, []))) >= 2 and state[t][-1]["step"] >= last for t, last in self.last.items())


@pytest.mark.slow
def test_a_driver_killed_with_the_default_checkpoint_period_resumes_from_each_last_checkpoint(ray_head, tmp_path):
    """The default checkpoint period (checkpoint_every_s=10): the driver's process group is SIGKILLed once
    each running trial has a checkpoint in Tune's saved state and evaluations past it; `--resume`
    continues each trial from that last checkpoint (what was lost: at most one period of training) and
    retraces the evaluations the killed run made past it, bit for bit: the whole state came back (weights,
    optimizer, teacher, data order, random streams). Once it has, the resumed driver is stopped (SIGTERM,
    exit 3): the rest of the trials' 4000 steps would prove nothing more. That a resumed trial ends with the
    metrics of an uninterrupted run is test_killed_driver_resumes_without_rerunning_finished_trials."""
    temp, storage = short_tmp("rrper"), tmp_path / "results"
    # one cell of quick_settings: a plain MT trial (the cheapest step), long enough (also on an idle machine) for a few
    # checkpoints 10 s apart, with evaluations far shorter than that (also on a loaded machine), so some are past
    # each checkpoint; one trial, one trial process a run: the property is each resumed trial's own
    argv = ["quick_settings", "--preset", "quick", "--seeds", "1", *ONE_CELL, "--set", "steps=4000", "--set",
            "eval_every=10", "--set", "sensitivity_samples=20", "--live-every", "0", "--storage", str(storage)]
    sweep, _, trials = cli_trials(*argv)
    cfg = trial_config(trials[0])
    period, every = cfg.checkpoint_every_s, cfg.eval_every
    assert period == TrainConfig().checkpoint_every_s > 0  # nothing in argv changes it
    exp_of = lambda: next(storage.glob("quick_settings-*"), None)
    d, point, t0 = None, SavedCheckpoints(exp_of, len(trials)), time.time()
    try:
        # Tune saves its state every second (TUNE_GLOBAL_CHECKPOINT_S), so that the kill point comes soon after a
        # checkpoint of the trial's own period rather than after the next of Tune's (10 s at first)
        d = Driver(argv, temp, tmp_path / "driver1.log", new_session=True, head=ray_head, env=SAVES_EACH_SECOND)
        d.wait_until(point, timeout=600)
        ours = process_tree(d.proc.pid)
        os.killpg(d.proc.pid, signal.SIGKILL)  # the driver's whole group
        d.proc.wait()
        kill_tree(ours)
        killed, killed_saved = sweep_state(exp_of()), saved_state(exp_of())
        d = Driver([*argv, "--resume", str(exp_of())], temp, tmp_path / "driver2.log", new_session=True, head=ray_head,
                   env=SAVES_EACH_SECOND)
        d.wait_until(Retraced(exp_of, killed), timeout=600)
        d.proc.send_signal(signal.SIGTERM)
        assert d.finish(timeout=300) == 3, d.log.read_text()[-3000:]
    finally:
        end_driver(d, temp)
    wall = time.time() - t0
    exp = exp_of()
    final = sweep_state(exp)
    assert len(final) == len(trials) == 1
    lost = {}
    for t in partial(killed):
        restart = starts(final[t])[-1]
        resumed_from = final[t][restart]["step"] - every
        # exactly the checkpoint Tune's saved state named when the driver died
        assert resumed_from == killed_saved.get(t, (None, None))[1] > 0, (t, resumed_from, killed_saved)
        ckpt = next(r for r in killed[t] if r["step"] == resumed_from)
        # the training lost: from that checkpoint to the last evaluation before the kill, at most one
        # period plus the one evaluation interval that crosses it (tune.py checkpoints at evaluations)
        intervals = [b["time_total_s"] - a["time_total_s"] for a, b in zip(killed[t], killed[t][1:])]
        lost[t] = killed[t][-1]["time_total_s"] - ckpt["time_total_s"]
        assert 0 < lost[t] <= period + max(intervals), (t, lost[t], period, max(intervals))
        assert [r["step"] for r in final[t][restart:]] == list(range(resumed_from + every, final[t][-1]["step"] + 1, every))
        again = {r["step"]: r for r in final[t][restart:]}
        retraced = [r for r in killed[t] if r["step"] > resumed_from]
        assert retraced  # the kill point has an evaluation past the checkpoint
        for r in retraced:
            for k in EXACT:
                if k in r:
                    assert same(again[r["step"]][k], r[k]), (t, r["step"], k, again[r["step"]][k], r[k])
    assert len(lost) >= 1
    n_starts = sum(len(starts(r)) for r in final.values())
    assert n_starts == len(trials) + len(lost)
    print(json.dumps({"test": "driver group SIGKILL + resume, default checkpoint period", "trials": len(trials),
                      "checkpoint_every_s": period, "resumed_mid_run": len(lost),
                      "lost_training_s": {t: round(v, 1) for t, v in lost.items()}, "wall_s": round(wall, 1)}))


@pytest.mark.slow
def test_a_stop_signal_ends_the_sweep_gracefully_and_resume_finishes_it(ray_head, tmp_path):
    """Four runs of one sweep, each stop ending gracefully: exit 3, the report of what finished, the
    --resume command, and no finished trial run again.
    1. Ctrl+C (SIGINT) once a trial finished and another runs. Tune creates a grid's trials lazily (here one
       at a time: --max-concurrent 1), so the stop comes before some exist; --resume rebuilds the grid from
       trials.json and those trials run their own configs, not Tune's stored placeholders (which the
       trainable refuses).
    2. `--resume`, then SIGTERM (what `ray job stop` sends the driver) right after a running trial reports:
       Tune stops the trials and saves its state, resume.txt holds the --resume command, and the stopped
       trials continue from their checkpoints.
    3. `--resume` trains to the end, then SIGHUP after its fit(): exit 3 and resume.txt too.
    4. `--resume` ends with 0, every trial finished, and removes resume.txt."""
    temp, storage = short_tmp("rrterm"), tmp_path / "results"
    # 100 steps: the LabelSpreading row ends at once, so MT and MT + MUR must run long enough to be stopped;
    # one trial at a time, so that each run starts one trial process (Tune reuses it for the next trial)
    argv = ["ablation_radius", "--preset", "quick", "--seeds", "1", *THREE, *TINY, "--set", "steps=100",
            "--max-concurrent", "1", "--storage", str(storage)]
    exp_of = lambda: next(storage.glob("ablation_radius-*"), None)
    d = None
    try:
        d = Driver(argv, temp, tmp_path / "driver1.log", head=ray_head)
        d.wait_until(lambda: len(done(sweep_state(exp_of()))) >= 1 and partial(sweep_state(exp_of())), timeout=600)
        d.proc.send_signal(signal.SIGINT)
        assert d.finish(timeout=300) == 3, d.log.read_text()[-3000:]
        exp = exp_of()
        log = d.log.read_text()
        assert f"--resume {exp}" in log and "interrupted:" in log and (exp / "trials.parquet").is_file(), log[-3000:]
        interrupted = sweep_state(exp)
        created = set(interrupted)
        assert len(created) < 3, created  # the stop came before Tune had created every trial

        d = Driver([*argv, "--resume", str(exp)], temp, tmp_path / "driver2.log", head=ray_head)
        # the signal right after a running trial reports a checkpoint (its line in result.json): the
        # driver has the result then, and registers the checkpoint only after one more call to the trial
        d.wait_until(lambda: any(len(r) > len(interrupted.get(t, [])) for t, r in sweep_state(exp).items()
                                 if r and not r[-1]["done"]), timeout=300)
        at_stop = sweep_state(exp)
        d.proc.send_signal(signal.SIGTERM)
        rc = d.finish(timeout=300)  # seconds, unless a machine is loaded many times over (timeouts: headroom)
        log = d.log.read_text()
        assert rc == 3, log[-3000:]
        assert f"--resume {exp}" in log and "interrupted:" in log and (exp / "trials.parquet").is_file()
        assert (exp / "resume.txt").read_text() == f"{sweeper_run.resume_command('ablation_radius', exp, THREE[1:])}\n"
        waited = "stopping once" in log  # a checkpoint was being registered when the signal came
        stopped = sweep_state(exp)
        # the resumed run trains to the end, then gets SIGHUP (a closed terminal) once fit() is over and the
        # graceful stop's handlers are gone (the test-only pause point): exit 3 and the line kept again
        d = Driver([*argv, "--resume", str(exp)], temp, tmp_path / "driver3.log", head=ray_head,
                   env={"VBI_MUR_PAUSE_AT": "fit_done"})
        d.wait_until(lambda: "paused at fit_done" in d.log.read_text(), timeout=900)
        (exp / "resume.txt").unlink()
        d.proc.send_signal(signal.SIGHUP)
        assert d.finish(timeout=300) == 3, d.log.read_text()[-3000:]
        # the driver's own traceback starts a line; Ray's trial workers' log lines (an actor's teardown may
        # print one) come prefixed with "(train_tune pid=...)"
        assert not [ln for ln in d.log.read_text().splitlines() if ln.startswith("Traceback")], d.log.read_text()[-3000:]
        assert (exp / "resume.txt").is_file()
        d = Driver([*argv, "--resume", str(exp)], temp, tmp_path / "driver4.log", head=ray_head)
        assert d.finish(timeout=900) == 0, d.log.read_text()[-3000:]
        assert not (exp / "resume.txt").exists()  # a run of it that ended with 0 removes it
    finally:
        end_driver(d, temp)
    # finished = reached its 100 steps (Tune marks the trials it stopped on the signal done=True too)
    finished = lambda state: {t for t, r in state.items() if r and r[-1]["step"] == 100}
    final = sweep_state(exp)
    assert len(final) == 3 and finished(final) == set(final)  # LabelSpreading, MT, MT + MUR
    ended = finished(interrupted)
    assert ended and all(final[t] == interrupted[t] for t in ended)  # finished before Ctrl+C: not run again
    planned = json.loads((exp / TRIALS_FILE).read_text())
    ran = sorted((json.loads((exp / t / "params.json").read_text()) for t in final), key=lambda c: c["trial_index"])
    assert ran == [{"trial_index": i, **t} for i, t in enumerate(planned)]  # their own configs, not placeholders
    assert finished(at_stop) <= finished(stopped) and len(finished(stopped)) < 3
    for t in finished(stopped):  # finished before the SIGTERM's resume: not run again
        assert final[t] == stopped[t], f"{t} ran again after it finished"
    for t in {t for t, r in stopped.items() if r} - finished(stopped):  # stopped mid-run (Tune marks them done):
        # continued from a checkpoint no older than the last one it reported before the signal
        last = starts(final[t])[-1]
        assert final[t][last]["step"] > 10, f"{t} restarted from scratch"  # TINY: eval_every=10
        if at_stop.get(t):
            assert final[t][last]["step"] > at_stop[t][-1]["step"], \
                f"{t} lost its checkpoint at step {at_stop[t][-1]['step']}: resumed at {final[t][last]['step']}"
        assert [r["step"] for r in final[t][last:]] == list(range(final[t][last]["step"], 101, 10))
    print(json.dumps({"test": "SIGINT + resume + SIGTERM + resume", "created_at_sigint": len(created),
                      "stop_waited_for_a_save": waited,
                      "resumed_mid_run": len({t for t, r in stopped.items() if r} - finished(stopped))}))


@pytest.mark.slow
def test_a_drivers_own_ray_ends_with_a_group_sigterm_and_with_a_sigkill_of_the_driver(ray_head, tmp_path):
    """A driver that starts its own local Ray (the quick start's way), in three runs of one sweep:
    1. `timeout`, a batch scheduler or a container runtime signals every process of the job (here: the
       driver's session, as `setsid`): the local Ray runs in a process group of its own, so only the
       driver gets the signal, stops Tune as on a driver SIGTERM (report, exit 3, the --resume command)
       and then shuts its Ray down itself; no Ray process of the run is left.
    2. `--resume`, SIGKILLed alone once its trials run: its GCS, raylet and trial workers end by
       themselves (Ray's PR_SET_PDEATHSIG). The raylet's dashboard and runtime-env agents end on their
       own once they see the raylet gone, which on a loaded machine can take over a minute: the test
       stops them by PID.
    3. `--resume` finishes the sweep, running no trial again that had finished. Its property is not its Ray's:
       it joins the pytest process's head (`ray_head`)."""
    temp, storage = short_tmp("rrown"), tmp_path / "results"
    argv = ["ablation_radius", "--preset", "quick", "--seeds", "1", *THREE, *TINY, "--set", "steps=100",
            "--max-concurrent", "1", "--storage", str(storage)]  # one trial process a run
    exp_of = lambda: next(storage.glob("ablation_radius-*"), None)
    agents = (b"ray::DashboardAgent", b"ray::RuntimeEnvAgent")
    d, ray_procs, left = None, {}, None
    try:
        d = Driver(argv, temp, tmp_path / "driver1.log", new_session=True)
        d.wait_until(lambda: partial(sweep_state(exp_of())), timeout=600)  # a trial's first checkpoint
        in_group = [p for p in pids_naming(str(temp)) if os.getpgid(p) == d.proc.pid]
        assert pids_naming(str(temp)) and os.getpgid(d.proc.pid) == d.proc.pid
        assert in_group == [], f"Ray processes {in_group} share the driver's process group"
        os.killpg(d.proc.pid, signal.SIGTERM)  # every process of the driver's group, as `timeout` does
        rc = d.finish(timeout=300)
        log = d.log.read_text()
        assert rc == 3, log[-3000:]
        exp = exp_of()
        assert f"--resume {exp}" in log and "interrupted:" in log, log[-3000:]
        assert "local Ray without a dashboard" in log  # a local dashboard only with --dashboard
        assert (exp / "trials.parquet").is_file() and (exp / "summary.csv").is_file()
        assert pids_naming(str(temp)) == [], "Ray processes of the stopped run are still running"
        stopped = sweep_state(exp)

        d = Driver([*argv, "--resume", str(exp)], temp, tmp_path / "driver2.log", new_session=True)
        d.wait_until(lambda: any(len(r) > len(stopped.get(t, [])) for t, r in sweep_state(exp).items()))
        ray_procs = {p: t for p, t in process_tree(d.proc.pid).items() if p != d.proc.pid}
        assert len(ray_procs) > 3 and all(os.getpgid(p) != d.proc.pid for p in ray_procs)
        names = {p: Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0] for p in ray_procs}
        os.kill(d.proc.pid, signal.SIGKILL)  # the driver alone
        d.proc.wait()
        ours = {p: t for p, t in ray_procs.items() if not names[p].startswith(agents)}
        deadline = time.time() + 60
        while alive(ours) and time.time() < deadline:
            time.sleep(0.2)
        left = {p: names[p] for p in alive(ours)}
        kill_tree(ray_procs)  # the agents
        assert left == {}, f"Ray processes outlived their killed driver: {left}"
        assert pids_naming(str(temp)) == []

        d = Driver([*argv, "--resume", str(exp)], temp, tmp_path / "driver3.log", head=ray_head)
        assert d.finish(timeout=900) == 0, d.log.read_text()[-3000:]
    finally:
        if d is not None and d.proc.poll() is None:
            d.kill()
        kill_tree(ray_procs)
        end_driver(d, temp)
    final = sweep_state(exp)
    assert len(final) == 3 and all(r[-1]["step"] == 100 for r in final.values())
    for t, r in stopped.items():  # what finished before the signal did not run again
        if r and r[-1]["step"] == 100:
            assert final[t] == r, f"{t} ran again after it finished"


@pytest.mark.slow
def test_a_trial_stopped_with_sigstop_is_named_stalled_and_ended_as_failed(ray_head, tmp_path):
    """A trial process that stops (SIGSTOP: a hung data read, a dead-locked library) reports nothing
    more. The driver names it stalled on stderr and, with --end-stalled, ends it as failed, started once
    (no retry), so that the other trials finish and the sweep ends (exit 1); live.json keeps it among the
    trials ended as stalled (while it is only stalled, it is under "stalled": tests/test_stalls.py)."""
    temp, storage = short_tmp("rrstall"), tmp_path / "results"
    # LabelSpreading and MT: MT is stopped, LabelSpreading must still finish (it does at once, so the sweep
    # ends as soon as MT is ended); 1000 steps: MT must still be running once its reports reach the folder
    argv = ["ablation_radius", "--preset", "quick", "--seeds", "1", "--cells", "mur=none", "--cells-only",
            "--set", "steps=1000", "--set", "eval_every=10",
            "--set", "lr_rampdown=10", "--set", "sensitivity_samples=20", "--storage", str(storage),
            "--stall-after", "3", "--end-stalled", "--max-concurrent", "2", "--live-every", "0"]
    exp_of = lambda: next(storage.glob("ablation_radius-*"), None)
    d, stopped = None, None
    try:
        d = Driver(argv, temp, tmp_path / "driver.log", head=ray_head)

        def second_report():  # a trial with a pace (two reports) to stop
            nonlocal stopped
            for t, r in sweep_state(exp_of()).items():
                if len(r) >= 2 and not r[-1]["done"]:
                    stopped = (t, r[-1]["pid"], len(r))
                    return True
            return False

        d.wait_until(second_report)
        os.kill(stopped[1], signal.SIGSTOP)
        # A report the trial sent just before the signal may still land in result.json: count its
        # reports once the driver has named it stalled (it has then been silent for --stall-after s).
        deadline = time.time() + 120
        while f"stalled: trial {stopped[0]}" not in d.log.read_text() and time.time() < deadline:
            time.sleep(0.05)
        # Tune copies result.json from the driver's staging folder into --storage now and then, and a look
        # during a copy can see the file short or empty: count once the folder has settled, on no fewer
        # reports than were already seen (the stopped trial writes no more)
        while (n := len(settled_state(exp_of()).get(stopped[0], []))) < stopped[2]:
            pass
        stopped = (*stopped[:2], n)
        rc = d.finish(timeout=300)
    finally:
        if stopped:
            try:
                os.kill(stopped[1], signal.SIGCONT)
            except ProcessLookupError:  # killed as it should be
                pass
        end_driver(d, temp)
    log = d.log.read_text()
    assert rc == 1, log[-3000:]
    assert f"stalled: trial {stopped[0]} has not reported for" in log and "ending it as failed" in log, log[-3000:]
    assert stopped[0] in json.loads((exp_of() / "live.json").read_text())["ended_stalled"]
    final = sweep_state(exp_of())
    assert len(final[stopped[0]]) == stopped[2] and len(starts(final[stopped[0]])) == 1  # nothing more, no retry
    df = pd.read_parquet(exp_of() / "trials.parquet").set_index("trial_dir")
    assert df.loc[stopped[0], "status"] == "failed"
    assert len(df) == 2 and (df.drop(index=stopped[0])["status"] == "finished").all(), df["status"]
    assert [ln for ln in log.splitlines() if ln.startswith("trial ") and f"{stopped[0]} failed: " in ln]


@pytest.mark.slow
def test_a_full_disk_is_exit_4_with_one_line_and_the_resume_command(ray_head, tmp_path):
    """Results on a 1.5 MB tmpfs: the trials' checkpoints fill it, Tune cannot store its errors (a 0-byte
    error.pkl, which its result grid then fails to read). The driver ends with exit 4 and one line naming
    the folder, its free space and the --resume command, not an uncaught EOFError or UnpicklingError."""
    disk = Path(tempfile.mkdtemp(prefix="rrfull", dir="/tmp"))
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1500k", "tmpfs", str(disk)], capture_output=True,
                           text=True)
    if mount.returncode != 0:
        disk.rmdir()
        pytest.skip(f"cannot mount a small tmpfs here: {mount.stderr.strip()}")
    temp, storage, d = short_tmp("rrfull"), disk / "results", None
    try:
        # one trial (its three checkpoints of 0.5 MB fill the disk); its failure there is retried once
        # (--max-failures 1: each restart fails as the first run does, a trial process more)
        d = Driver(["quick_settings", "--preset", "quick", "--seeds", "1", *ONE_CELL, "--max-failures", "1",
                    "--set", "steps=200", "--set",
                    "eval_every=10", "--set", "lr_rampdown=10", "--set", "checkpoint_every_s=0", "--live-every", "0",
                    "--storage", str(storage)], temp, tmp_path / "driver.log", head=ray_head)
        rc = d.finish(timeout=480)
        exp = next(storage.glob("quick_settings-*"))
        log = d.log.read_text()
    finally:
        end_driver(d, temp)
        subprocess.run(["umount", str(disk)], check=True)
        disk.rmdir()
    assert rc == 4, log[-3000:]
    last = log.strip().splitlines()[-1]
    assert last.startswith(f"error: no space left on the disk of {exp} (") and " MiB free)" in last, last
    assert last.endswith(f"`{sweeper_run.resume_command('quick_settings', exp, ['lr=0.1'], cells_only=True)}`"), last
    assert "EOFError" not in log and "UnpicklingError" not in log


@pytest.mark.slow
def test_a_requested_stop_waits_until_no_trial_is_saving(monkeypatch):
    """sweeper.driver.stopping alone, with stand-in trials: Tune's interrupt (SIGUSR1) comes at the first step
    end with no trial saving, once; after WAIT_S for a save that does not end; at once without the
    callback; and the callback pickles (it is stored with the experiment)."""
    import pickle
    from types import SimpleNamespace

    from sweeper.driver import stopping

    got = []
    old = signal.signal(signal.SIGUSR1, lambda *a: got.append(1))

    def interrupts(step) -> int:
        n = len(got)
        step()
        # the interrupt is os.kill of this process, whose handler runs before step() returns: the wait
        # is only headroom for a signal that would come late
        deadline = time.time() + 0.5
        while len(got) == n and time.time() < deadline:
            time.sleep(0.01)
        return len(got) - n

    saving, idle = SimpleNamespace(is_saving=True), SimpleNamespace(is_saving=False)
    try:
        cb = pickle.loads(pickle.dumps(stopping.StopAfterSaves()))
        with stopping.GracefulStop() as stop:
            cb.setup()
            assert interrupts(lambda: cb.on_step_end(iteration=1, trials=[idle])) == 0  # nothing asked
            assert interrupts(stop.request) == 0
            assert interrupts(lambda: cb.on_step_end(iteration=2, trials=[idle, saving])) == 0
            assert interrupts(lambda: cb.on_step_end(iteration=3, trials=[idle, idle])) == 1
            assert interrupts(lambda: cb.on_step_end(iteration=4, trials=[idle])) == 0  # once only

        with stopping.GracefulStop() as stop:  # a new run's stop: nothing of the last one carries over
            cb.setup()
            monkeypatch.setattr(stopping, "WAIT_S", 0.05)
            stop.request()
            assert interrupts(lambda: cb.on_step_end(iteration=1, trials=[saving])) == 0
            time.sleep(0.1)
            assert interrupts(lambda: cb.on_step_end(iteration=2, trials=[saving])) == 1

        with stopping.GracefulStop() as stop:  # no StopAfterSaves in the run (an experiment stored without it)
            assert interrupts(stop.request) == 1
        assert not stopping.current().requested  # outside a run's block: an inert stop
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_a_stop_signal_prints_the_resume_command_and_writes_trials_parquet_before_the_stop(tmp_path, capfd):
    """What a sender that SIGKILLs seconds after its SIGTERM (`ray job stop`) still gets: the handler itself
    prints the --resume command and starts trials.parquet of the trials as they stand, then asks Tune to stop."""
    from sweeper.driver import stopping

    exp = tmp_path / "ablation_radius-20200101-000000"
    (exp / "sweep.json").parent.mkdir()
    (exp / "sweep.json").write_text(json.dumps({"name": "ablation_radius", "rows": ["method"], "cols": []}))
    for name, steps_done in (("trial_a", 40), ("trial_b", 20)):  # one finished, one stopped half way
        (exp / name).mkdir()
        (exp / name / "params.json").write_text(json.dumps({"method": "mt", "steps": 40, "seed": 0}))
        (exp / name / "result.json").write_text("".join(
            json.dumps({"step": s, "test_error": 50.0 - s / 10, "done": s == 40}) + "\n" for s in range(10, steps_done + 1, 10)))
    interrupts = []
    old = signal.signal(signal.SIGUSR1, lambda *a: interrupts.append(1))  # Tune's interrupt, not running here
    resume = f"python -m sweeper.run ablation_radius --resume {exp}"
    try:
        with stopping.GracefulStop(resume, exp) as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.time() + 5
            while not interrupts and time.time() < deadline:
                time.sleep(0.01)
        # leaving the block waited for the thread: the file is complete
    finally:
        signal.signal(signal.SIGUSR1, old)
    assert stop.stopped.is_set() and interrupts == [1]
    err = capfd.readouterr().err
    assert err.startswith("stopping: ") and err.splitlines()[0].endswith(f"`{resume}`"), err
    df = pd.read_parquet(exp / "trials.parquet").set_index("trial_dir")
    assert df.loc["trial_a", "status"] == "finished" and df.loc["trial_a", "final_test_error"] == 46.0
    assert df.loc["trial_b", "status"] == "incomplete" and df.loc["trial_b", "final_test_error"] == 48.0


def test_a_trial_whose_checkpoint_cannot_be_resumed_is_printed_as_failed_and_exits_1(tmp_path, capsys, monkeypatch):
    """The trainable ends such a trial with one `resume_error` report (no exception, so no retry); the driver
    prints it once among the failures and the sweep's exit status is 1, as for a trial that raised."""
    from types import SimpleNamespace

    monkeypatch.setattr(report, "report_at", lambda exp: {})
    why = "checkpoint at step 10 predates the config field 'translate_pad', which changes the numbers: ..."
    grid = [SimpleNamespace(error=None, metrics={"step": 40, "done": True}, path="trial_a"),
            SimpleNamespace(error=None, metrics={"resume_error": why, "done": True}, path="trial_b")]
    rc = sweeper_run.finish(grid, tmp_path, GracefulStop())
    err = capsys.readouterr().err.splitlines()
    assert rc == 1 and err == [f"trial trial_b failed: {why}"]
    assert sweeper_run.finish(grid[:1], tmp_path, GracefulStop()) == 0


def test_a_failed_trial_is_printed_by_its_cause_and_a_config_error_by_its_message(tmp_path, capsys, monkeypatch):
    """Tune's result holds a RayTaskError whose own first line is a header (function, PID, actor id); the
    driver prints the exception the trial raised instead. A trial that ended itself on a ConfigError
    (`config_error`, no retry) is printed with that message and makes the exit status 1."""
    from types import SimpleNamespace

    from ray.exceptions import RayTaskError

    monkeypatch.setattr(report, "report_at", lambda exp: {})
    try:
        raise OverflowError("cannot convert float infinity to integer")
    except OverflowError as e:
        raised = RayTaskError("train_tune", "Traceback (most recent call last): ...", e, proctitle="ray::ImplicitFunc",
                              pid=4242, ip="127.0.0.1", actor_repr="ImplicitFunc(pid=4242)").as_instanceof_cause()
    why = "device='cuda' but no CUDA GPU is visible; use device='auto' or 'cpu'"
    grid = [SimpleNamespace(error=raised, metrics={}, path="trial_a"),
            SimpleNamespace(error=None, metrics={"config_error": why, "done": True}, path="trial_b")]
    rc = sweeper_run.finish(grid, tmp_path, GracefulStop())
    err = capsys.readouterr().err.splitlines()
    assert rc == 1 and err == ["trial trial_a failed: OverflowError: cannot convert float infinity to integer",
                               f"trial trial_b failed: {why}"]


@pytest.mark.parametrize("env, says", [
    ({}, None),  # not a Ray job: a terminal's Ctrl+C or a scheduler's SIGTERM waits for the driver
    ({"RAY_JOB_CONFIG_JSON_ENV_VAR": "{}"}, "3 s"),  # a job with Ray's default stop wait
    ({"RAY_JOB_CONFIG_JSON_ENV_VAR": "{}", "RAY_JOB_STOP_WAIT_TIME_S": "10"}, "10 s"),
    ({"RAY_JOB_CONFIG_JSON_ENV_VAR": "{}", "RAY_JOB_STOP_WAIT_TIME_S": "60"}, None),
])
def test_a_ray_job_with_a_short_stop_wait_gets_a_note_with_the_fix(env, says):
    from sweeper.driver import stopping

    note = stopping.job_stop_note(env)
    if says is None:
        assert note is None
        return
    assert f"SIGKILLs this driver {says} after its SIGTERM" in note and "\n" not in note
    fix = json.loads(note.split("--runtime-env-json '", 1)[1].split("'", 1)[0])  # the JSON a user pastes
    assert int(fix["env_vars"]["RAY_JOB_STOP_WAIT_TIME_S"]) == stopping.JOB_STOP_WAIT_S
    assert stopping.job_stop_note({**env, **fix["env_vars"]}) is None  # which then silences it


# ---------------------------------------------------------------- 4. bad input: one line, exit 2, nothing touched

@pytest.fixture
def stored(tmp_path):
    """A results root that already holds an experiment of ablation_radius (what must not be touched)."""
    root = tmp_path / "results"
    exp = root / "ablation_radius-20200101-000000"
    tdir = exp / "train_tune_00000_0_trial_index=0"
    tdir.mkdir(parents=True)
    (exp / "sweep.json").write_text(json.dumps({"name": "ablation_radius", "rows": ["method"], "cols": []}))
    (exp / "tuner.pkl").write_bytes(b"Tune's state")  # what --resume needs besides sweep.json
    (tdir / "params.json").write_text(json.dumps({"seed": 0, "mur_radius": 1.0}))
    (tdir / "result.json").write_text(json.dumps({"step": 10, "test_error": 50.0, "done": True}) + "\n")
    (exp / "summary.csv").write_text("mur_radius,mean\n1.0,50.0\n")
    return root


def no_ray(*a, **k):
    raise AssertionError("Ray was started for bad input")


QUICK = ["ablation_radius", "--preset", "quick"]
BAD_INPUT = {  # name -> (argv after the sweep; {root}, {data}, {file} are filled in), words in the error
    "unknown sweep": (["no_such_sweep"], "unknown sweep 'no_such_sweep'; see the sweeps with python -m sweeper.list"),
    "mistyped sweep": (["ablation_radious"], "unknown sweep 'ablation_radious'; did you mean ablation_radius or"),
    "dashboard address": ([*QUICK, "--address", "http://127.0.0.1:8265"], "is a dashboard / job API address"),
    "unknown preset": (["ablation_radius", "--preset", "fast"], "unknown preset 'fast'; valid presets"),
    "mistyped preset": (["ablation_radius", "--preset", "quik"], "unknown preset 'quik'; did you mean quick?"),
    "unknown method": ([*QUICK, "--set", "method=bogus"], "unknown method 'bogus'; choose one of"),
    "unknown config key": ([*QUICK, "--set", "radius=3"], "--set: unknown key(s) ['radius'] (radius: did you mean "
                                                           "mur_radius"),
    "mistyped --set key": ([*QUICK, "--set", "mur_radus=2"], "(mur_radus: did you mean mur_radius?); every key: the "
                                                             "TrainConfig fields"),
    "mistyped --cells key": ([*QUICK, "--cells", "mur_radus=2"], "--cells: unknown key(s) ['mur_radus'] (mur_radus: "
                                                                 "did you mean mur_radius?)"),
    "key no name is close to": ([*QUICK, "--set", "zzzz=1"], "(zzzz: no key is close); every key: the TrainConfig"),
    "storage URI with one slash": ([*QUICK, "--storage", "s3:/bucket/x"],
                                   "--storage s3:/bucket/x is neither a folder nor a URI (no // after s3:); write "
                                   "s3://bucket/x"),
    "data URI without slashes": ([*QUICK, "--data-dir", "gs:bucket/data"], "write gs://bucket/data"),
    "empty storage": ([*QUICK, "--storage", ""], "--storage is empty; name a folder or a URI"),
    "tracking URI with one slash": ([*QUICK, "--mlflow", "http:/127.0.0.1:5000"], "write http://127.0.0.1:5000"),
    "storage of blanks": ([*QUICK, "--storage", "  "], "--storage is empty"),
    "empty data folder name": ([*QUICK, "--data-dir", ""], "--data-dir is empty"),
    "resume DIR makes no results root": ([*QUICK, "--resume", "{data}", "--storage", "{root}/new-root"],
                                         "is not an experiment folder"),
    "--set without =": ([*QUICK, "--set", "steps"], "is not KEY=VALUE"),
    "--set seed": ([*QUICK, "--set", "seed=3"], "seeds are a grid axis: --seeds N (how many) and --seed-start N"),
    "value of the wrong type": ([*QUICK, "--set", "steps=abc"], "steps must be an integer, got 'abc'"),
    "radius 0": ([*QUICK, "--set", "mur_radius=0"], "mur_radius must be > 0, got 0.0"),
    "radius < 0": ([*QUICK, "--set", "mur_radius=-1"], "mur_radius must be > 0, got -1.0"),
    "steps 0": ([*QUICK, "--set", "steps=0"], "steps must be >= 1, got 0"),
    "lr < 0": ([*QUICK, "--set", "lr=-0.1"], "lr must be > 0"),
    "labels > images": ([*QUICK, "--set", "num_labels=1350"], "num_labels=1350 exceeds the 1047 training images"),
    "labels not divisible": ([*QUICK, "--set", "num_labels=105"], "not divisible by the 10 classes"),
    "labels < classes": ([*QUICK, "--set", "num_labels=5"], "below the 10 classes"),
    "negative cons coef": ([*QUICK, "--set", "cons_coef=-1"], "cons_coef must be >= 0, got -1.0"),
    "negative kl coef": ([*QUICK, "--set", "kl_coef=-0.05"], "kl_coef must be >= 0, got -0.05"),
    "negative mur coef": ([*QUICK, "--set", "mur_coef=-4"], "mur_coef must be >= 0, got -4.0"),
    "negative entmin coef": ([*QUICK, "--set", "entmin_coef=-0.1"], "entmin_coef must be >= 0"),
    "seeds 0": ([*QUICK, "--seeds", "0"], "--seeds must be >= 1"),
    "cpus per trial 0": ([*QUICK, "--cpus-per-trial", "0"], "--cpus-per-trial must be > 0"),
    "gpus per trial < 0": ([*QUICK, "--gpus-per-trial", "-1"], "--gpus-per-trial must be >= 0"),
    "max concurrent < 0": ([*QUICK, "--max-concurrent", "-1"], "--max-concurrent must be >= 0"),
    "max failures < 0": ([*QUICK, "--max-failures", "-1"], "--max-failures must be >= 0 (0: a failed trial is not"),
    "missing data folder": (["ablation_radius", "--data-dir", "{data}/nothing"], "does not exist; create it"),
    "data set not in the folder": (["ablation_radius", "--data-dir", "{data}/empty"],
                                   "cifar10 files missing in"),
    "truncated data file": (["ablation_radius", "--data-dir", "{data}/torn"],
                            "data_batch_3 (UnpicklingError: pickle data was truncated); it is corrupt or truncated"),
    "storage not writable": ([*QUICK, "--storage", "{file}/sub"], "cannot be written (Not a directory)"),
    "Ray address does not answer": ([*QUICK, "--address", "127.0.0.1:1"], "Ray address 127.0.0.1:1 does not answer"),
    "Ray client address does not answer": ([*QUICK, "--address", "ray://127.0.0.1:1"],
                                           "Ray address ray://127.0.0.1:1 does not answer"),
    "resume a folder that is not an experiment": ([*QUICK, "--resume", "{data}"], "is not an experiment folder"),
    "resume with nothing to resume": (["ablation_kl", "--preset", "quick", "--resume"], "nothing to resume"),
    "resume with another preset": ([*QUICK, "--resume", "{root}/ablation_radius-20200101-000000"],
                                   "was run with --preset paper, not quick; resume it without --preset"),
    "resume with max failures": (["ablation_radius", "--max-failures", "0", "--resume",
                                  "{root}/ablation_radius-20200101-000000"],
                                 "keeps the --max-failures it was started with; resume it without --max-failures"),
    "resume another sweep's experiment": (["ablation_kl", "--preset", "quick", "--resume",
                                           "{root}/ablation_radius-20200101-000000"],
                                          "holds the sweep 'ablation_radius', not 'ablation_kl'"),
    # values a trial would fail on, or run for ever with: refused before Ray, also by --dry-run (below)
    "lr infinite": ([*QUICK, "--set", "lr=Infinity"], "lr must be a finite number, got inf"),
    "bn_eps infinite": ([*QUICK, "--set", "bn_eps=Infinity"], "bn_eps must be a finite number, got inf"),
    "cons_coef infinite": ([*QUICK, "--set", "cons_coef=Infinity"], "cons_coef must be a finite number, got inf"),
    "checkpoint period infinite": ([*QUICK, "--set", "checkpoint_every_s=Infinity"],
                                   "checkpoint_every_s must be a finite number, got inf"),
    "width NaN": ([*QUICK, "--set", "width=NaN"], "width must be a finite number, got nan"),
    "width 1e6": ([*QUICK, "--set", "width=1e6"], "width=1e+06 makes a network past any device's memory"),
    "steps 1e15": ([*QUICK, "--set", "steps=1e15"], "steps=1000000000000000 is past what a run can finish"),
    "eval_batch 1e15": ([*QUICK, "--set", "eval_batch=1e15"], "eval_batch=1000000000000000 test images"),
    "labeled batch > labels": ([*QUICK, "--set", "batch_labeled=100000"],
                               "batch_labeled=100000 is larger than the 100 labeled images"),
    "data_dir not a data folder": ([*QUICK, "--set", "data_dir={root}/" + "../" * 40 + "etc"], " is not a data folder"),
    "--data-dir not a data folder": ([*QUICK, "--data-dir", "{root}"], " is not a data folder (it holds none of"),
    "device cuda without a GPU": ([*QUICK, "--set", "device=cuda"], "device=cuda, but this machine has no GPU"),
    "device cuda, no GPU a trial": ([*QUICK, "--set", "device=cuda", "--gpus-per-trial", "0"],
                                    "--gpus-per-trial 0 gives none"),
}
DRY_RUN_REFUSES = [n for n in BAD_INPUT if n.split()[0] in ("lr", "bn_eps", "cons_coef", "checkpoint", "width",
                                                            "steps", "eval_batch", "labeled", "data_dir",
                                                            "--data-dir", "device", "empty", "mistyped")] + [
    "storage URI with one slash", "data URI without slashes"]


@pytest.mark.parametrize("given, restarts", [([], 3), (["--max-failures", "0"], 0), (["--max-failures", "5"], 5)])
def test_max_failures_sets_the_restarts_tune_gives_a_failed_trial(given, restarts, tmp_path):
    """--max-failures reaches the Tuner the driver makes (3 without it), and the Tuner a --resume of that
    experiment makes keeps it (no Ray is needed to make either)."""
    from types import SimpleNamespace

    lease, resources, exp = SimpleNamespace(acquire=lambda: None), {"cpu": 1, "gpu": 0}, tmp_path / "exp"
    sweep, args, trials = cli_trials(*QUICK, "--seeds", "1", *given)
    resumed = sweeper_run.parse_args(["ablation_radius", "--resume", str(exp)])
    for a in (args, resumed):
        made = tuner.make_tuner(sweep, trials, a, exp, resources, lease)
        assert made._local_tuner.get_run_config().failure_config.max_failures == restarts, a.resume


@pytest.mark.parametrize("name", sorted(BAD_INPUT))
def test_bad_input_is_one_line_exit_2_before_ray_and_touches_nothing(name, stored, tmp_path, capsys,
                                                                     monkeypatch):
    argv, words = BAD_INPUT[name]
    data = tmp_path / "data"
    (data / "empty").mkdir(parents=True)
    write_cifar10(data / "torn", truncate="data_batch_3")
    (tmp_path / "a_file").write_text("not a folder")
    fill = dict(root=stored, data=data, file=tmp_path / "a_file")
    argv = [a.format(**fill) for a in argv]
    if "--storage" not in argv:
        argv += ["--storage", str(stored)]
    monkeypatch.setattr(ray_session, "connect_ray", no_ray)
    monkeypatch.setattr(tuner, "build_tuner", no_ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU, also on a machine that has one
    before = snapshot(tmp_path)
    rc = sweeper_run.main(argv)
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert words in err and "Traceback" not in err + out
    assert snapshot(tmp_path) == before, "bad input changed stored files"


@pytest.mark.parametrize("name", DRY_RUN_REFUSES)
def test_dry_run_refuses_what_a_trial_would_fail_on(name, stored, capsys, monkeypatch):
    """--dry-run prints the trials it would run: the same checks refuse each of these first, one line."""
    argv, words = BAD_INPUT[name]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU, also on a machine that has one
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert sweeper_run.main([a.format(root=stored) for a in argv] + ["--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and len(err.splitlines()) == 1 and words in err, err


def test_a_dry_run_checks_the_storage_uri_as_a_run_does_and_makes_no_folder(stored, tmp_path, capsys):
    assert sweeper_run.main([*QUICK, "--dry-run", "--storage", "s4://bucket/x"]) == 2
    assert "unsupported scheme s4://" in capsys.readouterr().err
    assert sweeper_run.main([*QUICK, "--dry-run", "--storage", str(tmp_path / "new" / "root")]) == 0
    assert not (tmp_path / "new").exists()
    (tmp_path / "a_file").write_text("x")
    assert sweeper_run.main([*QUICK, "--dry-run", "--storage", str(tmp_path / "a_file" / "root")]) == 2
    assert "cannot be made" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["storage", "data"])
def test_a_cache_folder_that_is_a_file_is_refused_before_ray(where, stored, tmp_path, capsys, monkeypatch):
    """A URI's local copies go to the cache folder: one that cannot be a folder is exit 2 now, not after the
    trials trained (the report of a bucket's experiment is built there)."""
    monkeypatch.setattr(ray_session, "connect_ray", no_ray)
    (tmp_path / "a_file").write_text("x")
    monkeypatch.setenv("VBI_MUR_CACHE", str(tmp_path / "a_file" / "cache"))
    uri = ["--storage", "s3://bucket/x"] if where == "storage" else ["--data-dir", "s3://bucket/data"]
    before = snapshot(stored)
    assert sweeper_run.main([*QUICK, *uri] + (["--storage", str(stored)] if where == "data" else [])) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"VBI_MUR_CACHE={tmp_path / 'a_file' / 'cache'} cannot be a " \
        f"folder: {tmp_path / 'a_file'} is a file" in err
    assert snapshot(stored) == before
    monkeypatch.setenv("VBI_MUR_CACHE", str(tmp_path / "cache"))  # a local sweep needs no cache
    assert sweeper_run.main([*QUICK, "--dry-run", "--storage", str(stored)]) == 0


def test_ray_address_from_the_environment_is_checked_too(stored, capsys, monkeypatch):
    monkeypatch.setattr(ray_session, "connect_ray", no_ray)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    before = snapshot(stored)
    assert sweeper_run.main([*QUICK, "--storage", str(stored)]) == 2
    assert "Ray address 127.0.0.1:1 does not answer" in capsys.readouterr().err
    assert snapshot(stored) == before


def test_a_cluster_ray_cannot_reach_is_one_line_exit_2(stored, capsys, monkeypatch):
    """`--address auto` with no cluster: ray.init raises ConnectionError (simulated: a real `auto` would
    find other Ray instances on a shared machine)."""
    def refuse(address, dashboard=False):
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to\n"
                              "by setting `--address` flag or `RAY_ADDRESS` environment variable.")
    monkeypatch.setattr(ray_session, "connect_ray", refuse)
    monkeypatch.setattr(tuner, "build_tuner", no_ray)
    before = snapshot(stored)
    assert sweeper_run.main([*QUICK, "--address", "auto", "--storage", str(stored)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "cannot connect to Ray at auto: Could not find" in err
    assert snapshot(stored) == before


def test_report_of_a_results_root_is_its_index_and_touches_nothing_stored(stored, capsys):
    before = snapshot(stored)
    assert report.main([str(stored)]) == 0  # a results root: index.html, one row per experiment inside
    out = capsys.readouterr().out
    assert out.startswith("ablation_radius-20200101-000000  ?  ") and f"index: {stored / 'index.html'}" in out
    after = snapshot(stored)
    assert set(after) - set(before) == {"index.html"} and {k: after[k] for k in before} == before


@pytest.mark.slow
def test_cli_process_bad_data_and_storage_exit_2_without_starting_ray(tmp_path, stored):
    """At the process level: no traceback, exit 2, and Ray's temp dir stays empty (no session started)."""
    temp = short_tmp("rrbad")
    try:
        write_cifar10(tmp_path / "torn", truncate="test_batch")
        (tmp_path / "a_file").write_text("x")
        before = snapshot(stored)
        for argv, words in ((["ablation_radius", "--data-dir", str(tmp_path / "torn"), "--storage", str(stored)],
                             "test_batch"),
                            ([*QUICK, "--storage", str(tmp_path / "a_file" / "sub")], "cannot be written")):
            p = subprocess.run([sys.executable, "-m", "sweeper.run", *argv], cwd=ROOT, env=ray_env(temp),
                               capture_output=True, text=True, timeout=120)
            assert p.returncode == 2 and p.stdout == "", p.stderr
            assert len(p.stderr.strip().splitlines()) == 1 and words in p.stderr and "Traceback" not in p.stderr
        assert list(temp.iterdir()) == [] and snapshot(stored) == before
    finally:
        shutil.rmtree(temp, ignore_errors=True)


# ---------------------------------------------------------------- a cluster YAML that Ray would reject

@pytest.mark.parametrize("name", ["aws.yaml", "gcp.yaml", "local.yaml"])
def test_shipped_cluster_yamls_pass_the_preflight_check(name, capsys):
    assert check_cluster.main([str(ROOT / "cluster" / name)]) == 0
    assert capsys.readouterr().out.startswith(f"ok: {ROOT / 'cluster' / name} passes Ray's validation")


def _gpu_type(cfg):
    return next(k for k, t in cfg["available_node_types"].items() if t["resources"].get("GPU"))


CLUSTER_BREAKAGES = {  # name -> (edit of a copy of aws.yaml, words of the error)
    "max_workers a string": (lambda c: c.update(max_workers="eight"), "max_workers: 'eight' is not of type"),
    "fractional GPU": (lambda c: c["available_node_types"][_gpu_type(c)]["resources"].update(GPU=0.5),
                       "resources.GPU: 0.5 is not of type 'integer'"),
    "node type without resources": (lambda c: c["available_node_types"][_gpu_type(c)].pop("resources"),
                                    "'resources' is a required property"),
    "head type not a node type": (lambda c: c.update(head_node_type="nope"),
                                  "`head_node_type` must be one of `available_node_types`"),
    "unknown provider": (lambda c: c["provider"].update(type="nope"), "Unsupported node provider: nope"),
    "no provider": (lambda c: c.pop("provider"), "no provider.type"),
}


@pytest.mark.parametrize("name", sorted(CLUSTER_BREAKAGES))
def test_cluster_yaml_ray_rejects_is_one_line_exit_2(name, tmp_path, capsys):
    edit, words = CLUSTER_BREAKAGES[name]
    cfg = yaml.safe_load((ROOT / "cluster" / "aws.yaml").read_text())
    edit(cfg)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cfg))
    before = snapshot(tmp_path)
    assert check_cluster.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}") and len(err.strip().splitlines()) == 1 and words in err, err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("text, words", [("a: [1,\n", "is not valid YAML at line 2"),
                                         ("- just\n- a list\n", "holds a YAML list, not a cluster config")])
def test_cluster_file_that_is_not_a_config(text, words, tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert check_cluster.main([str(path)]) == 2 and check_cluster.main([str(tmp_path / "none.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and words in err[0] and "does not exist" in err[1]


# ---------------------------------------------------------------- 5. atomic writes survive a kill mid-write

def killed_inside(write, block) -> None:
    """Fork; the child installs `block(signal_parent)` (which makes a write stop half way and wait), then
    runs write(); the parent SIGKILLs the child by its PID as soon as it is blocked there."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        try:
            os.close(r)
            block(lambda: os.write(w, b"x"))
            write()
        finally:
            os._exit(0)
    os.close(w)
    blocked = os.read(r, 1)
    os.close(r)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert blocked == b"x", "the child finished the write before it could be killed"
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def _stall(signal_parent):
    signal_parent()
    time.sleep(60)  # killed here


@pytest.fixture
def small_trainer():
    cfg = TrainConfig(steps=4, eval_every=2, lr_rampdown=2, sensitivity_samples=0, batch_labeled=10,
                      batch_unlabeled=10, width=0.25, device="cpu")
    return Trainer(cfg)


@pytest.mark.parametrize("where", ["while writing the bytes", "after fsync, before the rename"])
def test_trainer_save_killed_mid_write_leaves_the_previous_checkpoint(where, small_trainer, tmp_path):
    tr, path = small_trainer, tmp_path / "trainer.pt"
    tr.save(path)
    old = path.read_bytes()
    step_before = tr.step
    tr.train_step()  # the state to be saved now differs from the stored one

    def block(signal_parent):
        if where == "while writing the bytes":
            real = builtins.open

            class Torn:
                def __init__(self, f):
                    self.f = f

                def __enter__(self):
                    return self

                def __exit__(self, *exc):
                    self.f.close()

                def write(self, b):
                    self.f.write(b[: len(b) // 2])
                    self.f.flush()
                    _stall(signal_parent)

            builtins.open = lambda f, *a, **k: Torn(real(f, *a, **k)) if str(f).endswith(".tmp") else real(f, *a, **k)
        else:
            os.replace = lambda *a, **k: _stall(signal_parent)

    killed_inside(lambda: tr.save(path), block)
    assert path.read_bytes() == old
    fresh = Trainer(tr.cfg, tr.data)
    fresh.load(path)  # loads, and is the previous state
    assert fresh.step == step_before != tr.step
    (tmp,) = [p for p in tmp_path.iterdir() if p != path]  # the interrupted temporary file, never renamed
    if where == "while writing the bytes":
        with pytest.raises(Exception):
            torch.load(tmp, weights_only=False)
    else:
        assert torch.load(tmp, weights_only=False)["step"] == tr.step  # complete, just not renamed


def test_results_tables_killed_mid_write_keep_the_previous_files(tmp_path):
    old_trials = pd.DataFrame({"trial_id": ["a", "b"], "status": ["finished", "diverged"], "final_x": [1.0, 2.0]})
    new_trials = pd.DataFrame({"trial_id": ["a", "b", "c"], "status": ["finished"] * 3, "final_x": [3.0, 4.0, 5.0]})
    old_summary = pd.DataFrame({"mur_radius": [1.0], "mean": [10.5], "n": [2]})
    new_summary = pd.DataFrame({"mur_radius": [1.0], "mean": [99.0], "n": [3]})
    write_trials(old_trials, tmp_path / "trials.parquet")
    write_summary(old_summary, tmp_path)
    stored_trials, stored_summary = pd.read_parquet(tmp_path / "trials.parquet"), pd.read_csv(tmp_path / "summary.csv")
    before = snapshot(tmp_path)

    def torn_parquet(signal_parent):  # pandas killed half way through writing trials.parquet
        real = pd.DataFrame.to_parquet

        def half(self, tmp, *a, **k):
            buf = io.BytesIO()
            real(self, buf, *a, **k)
            Path(tmp).write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
            _stall(signal_parent)
        pd.DataFrame.to_parquet = half

    killed_inside(lambda: write_trials(new_trials, tmp_path / "trials.parquet"), torn_parquet)

    def stop_before_second_rename(signal_parent):  # summary.parquet renamed, killed before summary.csv
        real, calls = os.replace, []

        def replace(src, dst):
            calls.append(dst)
            if len(calls) == 2:
                _stall(signal_parent)
            real(src, dst)
        os.replace = replace

    killed_inside(lambda: write_summary(new_summary, tmp_path), stop_before_second_rename)

    after = snapshot(tmp_path)
    assert after["trials.parquet"] == before["trials.parquet"] and after["summary.csv"] == before["summary.csv"]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "trials.parquet"), stored_trials)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "summary.csv"), stored_summary)
    assert stored_trials["final_x"].tolist() == [1.0, 2.0] and stored_summary["mean"].tolist() == [10.5]
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "summary.parquet"), new_summary)  # renamed: whole
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp"))
    assert len(leftovers) == 2 and all(n.startswith((".trials.parquet.", ".summary.csv.")) for n in leftovers)
    torn = next(p for p in tmp_path.iterdir() if p.name.startswith(".trials.parquet."))
    with pytest.raises(Exception):
        pd.read_parquet(torn)


def test_atomic_write_cleans_up_after_a_failing_writer(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")

    def fails(tmp):
        Path(tmp).write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write(path, fails)
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.txt"]
