"""A worker node lost mid-trial: a real multi-node Ray on this machine, results and checkpoints in a bucket.

A head with 0 CPUs and two worker nodes with 1 CPU each, each its own `ray start` (127.0.0.1, free
ports, its own --temp-dir, token auth on); results and checkpoints in an S3 bucket on a moto server
(tests/test_s3.py's `s3`; each worker node gets the endpoint and its own dummy credentials, the head
none); the sweep (3 of the quick start's cells, `--cells`, one seed each) runs through the CLI
(`python -m sweeper.run ... --address`, no live page). Right after a running trial's checkpoint is in
Tune's saved state, every process of that trial's node (its `ray start`, raylet, agents, log monitor,
the trial's worker) is SIGKILLed by PID; once the trial reports from the other node, the node is started
again, and a second, uninterrupted sweep of the same trials runs on it and the other node: the
uninterrupted table, and a later trial on the node that came back.

    pytest tests/test_node_loss.py -q -s      # ~2 min on 2 cores
"""
import io
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import demo_module, free_port
from procs import pids_naming

from sweeper.driver import preflight
from test_reliability import (EXACT, Driver, KillPoint, alive, cli_trials, done, kill_tree, partial, proc_stat,
                              process_tree, reference, same, short_tmp, starts, sweep_state)
from test_s3 import BUCKET, objects, s3, trial_reports  # noqa: F401 (s3: the moto server fixture)

ROOT = Path(__file__).resolve().parents[1]
DEMO = demo_module()  # cluster/local_autoscale_demo.py: RAY_CLI
STEPS, EVERY = 150, 50  # 3 checkpoints a trial; an interval long enough to kill the node inside it
# 3 trials: LabelSpreading (ends at once), MT, MT + MUR (r = 1, and MT, the cell it is compared with): the two MT
# trials run side by side, one per node; the other radii of the quick start would only add trials to both sweeps
ARGV = ["ablation_radius", "--preset", "quick", "--seeds", "1",
        "--cells", "method=labelspreading|mur=direct,mur_radius=1",
        "--set", f"steps={STEPS}", "--set", f"eval_every={EVERY}", "--set", "lr_rampdown=50",
        "--set", "sensitivity_samples=20", "--set", "checkpoint_every_s=0",  # a checkpoint at every evaluation
        "--live-every", "0"]  # the live page: tests/test_html.py
NODE_AWS = ("AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
            "AWS_EC2_METADATA_DISABLED")


def node_ports() -> list[str]:
    """Free ports for a node's servers whose defaults are fixed (two nodes on one machine would collide)."""
    names = ("node-manager", "object-manager", "dashboard-agent-listen", "dashboard-agent-grpc", "runtime-env-agent",
             "metrics-export")
    return [a for n in names for a in (f"--{n}-port", str(free_port()))]


def program(pid: int) -> str:
    """What a process runs: its executable's or process title's name, a Python script's name for Python."""
    try:
        args = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
    except OSError:
        return ""
    if args[0].rsplit("/", 1)[-1].startswith("python"):
        args = [a for a in args[1:] if not a.startswith("-")] or args  # python -u SCRIPT ...: the script
    return args[0].rsplit("/", 1)[-1]


class Cluster:
    """A head (0 CPUs) and worker nodes (1 CPU each), each a `ray start --block` in a session of its own;
    every process any of them ever ran is remembered (PID and start time) to check that none is left."""

    def __init__(self, temp: Path, env: dict):
        self.temp, self.env, self.port = temp, env, free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: dict[str, subprocess.Popen] = {}
        self.seen: dict[int, int] = {}
        self.killed: set[str] = set()
        self.start("head", ["--head", "--port", str(self.port), "--num-cpus", "0", "--include-dashboard=false",
                            "--ray-client-server-port", str(free_port())], {})

    def start(self, name: str, args: list[str], env: dict) -> None:
        cmd = [DEMO.RAY_CLI, "start", "--block", "--node-ip-address", "127.0.0.1", "--temp-dir", str(self.temp / name),
               "--disable-usage-stats", *node_ports(), *args]
        self.nodes[name] = subprocess.Popen(cmd, env={**self.env, **env}, stdout=(self.temp / f"{name}.log").open("w"),
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def add_worker(self, name: str, env: dict) -> None:
        self.start(name, ["--address", self.address, "--num-cpus", "1"], env)

    def processes(self) -> dict[int, int]:
        """Every process of every node now; remembered in `seen`."""
        now = {}
        for p in self.nodes.values():
            now.update(process_tree(p.pid))
        self.seen.update(now)
        return now

    def raylets(self) -> dict[int, str]:
        """{raylet PID: node name} of the nodes running now."""
        out = {}
        for name, p in self.nodes.items():
            for pid in process_tree(p.pid):
                if program(pid) == "raylet":
                    out[pid] = name
        return out

    def cpus(self) -> float:
        """Total CPUs of the live nodes, as the GCS sees them (`ray status` talks to the GCS, no dashboard)."""
        p = subprocess.run([DEMO.RAY_CLI, "status", "--address", self.address], env=self.env, capture_output=True, text=True,
                           timeout=60)
        m = re.search(r"/([\d.]+) CPU", p.stdout)
        return float(m.group(1)) if p.returncode == 0 and m else -1.0

    def up(self) -> bool:
        """Every node started and not killed has come up: its `ray start --block` says it now blocks (a look at
        its log, before a `ray status` process is started to ask the GCS)."""
        return all(name in self.killed or "block forever" in (self.temp / f"{name}.log").read_text()
                   for name in self.nodes)

    def wait_cpus(self, n: float, timeout: float = 240.0) -> None:
        deadline, got = time.time() + timeout, "none asked yet (a node not up)"
        while not (self.up() and (got := self.cpus()) == n):
            for name, p in self.nodes.items():
                assert p.poll() is None or name in self.killed, \
                    f"ray start of {name} ended:\n" + (self.temp / f"{name}.log").read_text()[-3000:]
            assert time.time() < deadline, f"the cluster has {got} CPUs, not {n}, after {timeout:.0f} s"
            time.sleep(1.0)
        self.processes()

    def kill(self, name: str) -> dict[int, str]:
        """SIGKILL every process of node `name` by PID (its `ray start`, raylet, agents, log monitor, trial
        workers) and wait until all are gone; {pid: program} of what was killed."""
        self.killed.add(name)
        ours = process_tree(self.nodes[name].pid)
        self.seen.update(ours)
        names = {pid: program(pid) for pid in ours}
        kill_tree(ours)
        self.nodes[name].wait()
        return names

    def stop(self) -> None:
        """SIGTERM each live `ray start --block` (it stops its node's processes), then SIGKILL by PID whatever
        of ours is left (never `ray stop`: it would stop every Ray on the machine)."""
        self.processes()
        for p in self.nodes.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.nodes.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                pass
        kill_tree(alive(self.seen))
        kill_tree({pid: st[1] for pid in pids_naming(str(self.temp)) if (st := proc_stat(pid))})


def node_env(cache: Path) -> dict:
    """A worker node's own storage settings: the S3 endpoint and dummy credentials (sweeper.run ships none of
    the driver's to trials), and its own cache folder."""
    return {**{k: os.environ[k] for k in NODE_AWS}, "VBI_MUR_CACHE": str(cache)}


@pytest.fixture
def cluster(s3, tmp_path, monkeypatch):
    temp = short_tmp("rnl")
    token = secrets.token_hex(32)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "RAY_AUTH", "RAY_ADDRESS"))}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token, RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(ROOT),
               RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0")  # the teardown's SIGTERM: stop now, no 30 s drain
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # the driver's environment (Driver copies os.environ)
    monkeypatch.setenv("RAY_AUTH_TOKEN", token)
    c = Cluster(temp, env)
    try:
        for name in ("n1", "n2"):
            c.add_worker(name, node_env(tmp_path / f"cache-{name}"))
        c.wait_cpus(2.0)
        yield c
    finally:
        c.stop()
        left = alive(c.seen)
        shutil.rmtree(temp, ignore_errors=True)
        assert left == {} and pids_naming(str(temp)) == [], f"processes of the cluster left: {left}"


class Watch(threading.Thread):
    """Polls Tune's staging copy of one experiment's results (the driver writes each report there at once) and
    maps every trial worker's PID to its node while the worker runs (its parent is that node's raylet).

    With lose_a_node: once every running trial has a checkpoint in Tune's saved experiment state, SIGKILLs
    every process of that trial's node; once the trial reports again from the other node, starts the lost
    node again (a new `ray start`, named <node>-again)."""

    def __init__(self, cluster: Cluster, tmp_path: Path, lose_a_node: bool):
        super().__init__(daemon=True)
        self.cluster, self.tmp_path, self.lose_a_node = cluster, tmp_path, lose_a_node
        self.before = set(self.stagings())  # an earlier sweep's experiment
        self.node_of: dict[int, str] = {}  # trial worker PID -> node name
        self.lost: dict = {}
        self.back: dict = {}
        self.problems: list[str] = []
        self.halt = threading.Event()
        self.kill_point = KillPoint(self.exp, min_done=0)
        self.raylets: dict[int, str] = {}
        self.scanned = 0.0

    def stagings(self) -> list[Path]:
        return list(self.cluster.temp.glob("head/session_*/artifacts/*/ablation_radius-*/driver_artifacts"))

    def exp(self) -> Path | None:
        return next((p for p in self.stagings() if p not in self.before), None)

    def run(self):
        try:
            while not self.halt.is_set():
                self.step()
                time.sleep(0.1)  # each look reads the trials' reports and parses Tune's saved state
        except Exception as e:  # the test reports it
            self.problems.append(f"{type(e).__name__}: {e}")

    def step(self):
        exp = self.exp()
        state = sweep_state(exp)
        if time.time() - self.scanned > 1.0:  # a pass over /proc per node: not at every poll (2 cores)
            self.cluster.processes()
            self.scanned = time.time()
        for reports in state.values():
            for r in reports:
                if r["pid"] not in self.node_of and (st := proc_stat(r["pid"])):
                    if st[0] not in self.raylets:  # a node started since
                        self.raylets = self.cluster.raylets()
                    self.node_of[r["pid"]] = self.raylets.get(st[0], f"parent {st[0]}: no raylet of ours")
        if self.lose_a_node and not self.lost:
            running = [t for t in sorted(partial(state))  # a trial with a checkpoint left to make
                       if state[t][-1]["pid"] in self.node_of and state[t][-1]["step"] < STEPS]
            if running and self.kill_point():
                trial, t0 = running[0], time.time()
                node = self.node_of[state[trial][-1]["pid"]]
                killed = self.cluster.kill(node)
                self.lost = {"trial": trial, "node": node, "t": t0, "killed": killed,
                             "state": sweep_state(exp)}  # what the driver has now, after the node is gone
        elif self.lose_a_node and not self.back:
            reports = state[self.lost["trial"]]
            if len(starts(reports)) >= 2 and reports[starts(reports)[-1]]["pid"] in self.node_of:
                name = self.lost["node"] + "-again"
                self.cluster.add_worker(name, node_env(self.tmp_path / f"cache-{name}"))
                self.back = {"node": name, "t": time.time()}  # also when the trial's restart was seen


def sweep_trials(*argv: str) -> list[dict]:
    """The trial configs `python -m sweeper.run ARGV` runs: its grid cut to the cells --cells names."""
    sweep, args, _ = cli_trials(*argv)
    return preflight.trial_configs(preflight.select_cells(sweep, args.cells), args)


def run_sweep(cluster: Cluster, s3, tmp_path: Path, name: str, lose_a_node: bool) -> dict:
    """`python -m sweeper.run ...` against the cluster with results under s3://BUCKET/nodeloss/<name>, to the end."""
    argv = [*ARGV, "--address", cluster.address, "--storage", f"s3://{BUCKET}/nodeloss/{name}"]
    watch = Watch(cluster, tmp_path, lose_a_node)
    t0 = time.time()
    d = Driver(argv, cluster.temp, tmp_path / f"{name}.log")
    watch.start()
    try:
        rc = d.finish(timeout=600)
    finally:
        watch.halt.set()
        watch.join()
        if d.proc.poll() is None:
            d.kill()
    log = d.log.read_text()
    assert rc == 0, log[-4000:]
    assert not watch.problems, watch.problems
    (exp,) = {k.split("/")[2] for k in objects(s3, prefix=f"nodeloss/{name}/ablation_radius-")}
    prefix = f"nodeloss/{name}/{exp}"
    read = lambda key: s3.get_object(Bucket=BUCKET, Key=f"{prefix}/{key}")["Body"].read()
    return {"watch": watch, "reports": trial_reports(s3, prefix + "/"), "summary": read("summary.csv"),
            "trials": pd.read_parquet(io.BytesIO(read("trials.parquet"))), "read": read,
            "wall_s": time.time() - t0, "log": log}


@pytest.mark.slow
def test_a_worker_node_lost_mid_trial_continues_on_the_other_node_from_its_checkpoint(cluster, s3, tmp_path):
    trials = sweep_trials(*ARGV)
    t0 = time.time()
    lost = run_sweep(cluster, s3, tmp_path, "lost", lose_a_node=True)
    w = lost["watch"]
    assert w.lost and w.back, f"no node lost or none back: {w.lost.keys()} {w.back}\n{lost['log'][-3000:]}"
    cluster.wait_cpus(2.0)  # the node is back
    intact = run_sweep(cluster, s3, tmp_path, "intact", lose_a_node=False)  # uninterrupted, the same trials
    wall = time.time() - t0
    final, at_loss, trial, node = lost["reports"], w.lost["state"], w.lost["trial"], w.lost["node"]
    (other,) = {"n1", "n2"} - {node}
    assert len(final) == len(trials) and all(r[-1]["done"] and r[-1]["step"] == STEPS for r in final.values())

    # every process of the node went: its raylet, its other daemons and the trial's worker
    before = at_loss[trial]
    assert w.node_of[before[-1]["pid"]] == node and before[-1]["pid"] in w.lost["killed"]
    assert {"ray", "raylet", "log_monitor.py", "ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= \
        set(w.lost["killed"].values()), w.lost["killed"]
    # the trial continued on the other node right after the checkpoint it had reported last, its history kept
    begin = starts(final[trial])
    assert len(begin) == 2, f"{trial}: not one restart: {begin}"
    restart = final[trial][begin[1]]
    assert final[trial][:begin[1]] == before
    assert restart["step"] == before[-1]["step"] + EVERY, f"{trial} did not continue from step {before[-1]['step']}"
    assert [r["step"] for r in final[trial][begin[1]:]] == list(range(restart["step"], STEPS + 1, EVERY))
    assert w.node_of[restart["pid"]] == other
    assert "Failure # 1" in lost["read"](f"{trial}/error.txt").decode()
    # no other trial ran twice; one that had finished at the loss is unchanged
    for t, reports in final.items():
        assert t == trial or len(starts(reports)) == 1, f"{t} ran again"
        if t in done(at_loss):
            assert reports == at_loss[t], f"{t} ran again after it finished"
    assert lost["trials"].set_index("trial_dir")["n_failures"].to_dict() == {t: int(t == trial) for t in final}

    # the node came back and a later trial ran on it
    assert set(w.node_of.values()) == {"n1", "n2"}
    assert set(intact["watch"].node_of.values()) == {other, w.back["node"]}, intact["watch"].node_of
    assert all(len(starts(r)) == 1 for r in intact["reports"].values())
    # every trial of both sweeps ends as an uninterrupted trainables.trainer.train(cfg), bit for bit, and the
    # table of the sweep that lost a node is the uninterrupted sweep's, byte for byte
    refs = [reference(t) for t in trials]
    for sweep in (lost, intact):
        assert set(sweep["trials"]["status"]) == {"finished"}
        for reports in sweep["reports"].values():
            ref = refs[reports[0]["config"]["trial_index"]]
            for k in EXACT:
                if k in ref:
                    assert same(reports[-1][k], ref[k]), (k, reports[-1][k], ref[k])
    assert lost["summary"] == intact["summary"]
    print(json.dumps({"test": "worker node lost", "trials": len(trials), "killed": sorted(w.lost["killed"].values()),
                      "lost_after_step": before[-1]["step"], "continued_at_step": restart["step"],
                      "loss_to_restart_s": round(w.back["t"] - w.lost["t"], 1), "lost_sweep_s": round(lost["wall_s"], 1),
                      "intact_sweep_s": round(intact["wall_s"], 1), "wall_s": round(wall, 1)}))
