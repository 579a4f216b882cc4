"""Local autoscaling demo: a fake-GPU Ray cluster on this machine scales up for a sweep and back down.

Starts a head with Ray's fake multi-node provider (cluster/local.yaml; RAY_FAKE_CLUSTER=1, token
auth on, everything on 127.0.0.1, free ports, its own --temp-dir), submits a sweep through the Job
API whose trials each ask for {"GPU": 1}, polls the nodes once a second, and prints and records when
worker nodes were added, when the trials finished and when the idle workers were removed. At the
end it stops its own head, and only it (other people's Ray on this machine is left alone).

Results go to S3 as on a real cluster: a local S3-compatible server (moto's ThreadedMotoServer, in
this process, on 127.0.0.1) holds the bucket `vbi-mur-demo`, the head (and so every fake worker and
the job) gets AWS_ENDPOINT_URL_S3 and dummy credentials, and the sweep runs with
`--storage s3://vbi-mur-demo/results`; the timeline lists what landed in the bucket. Needs
`pip install 'moto[server]' boto3` (the `test` extras); `--results-on local` uses a folder instead.

    python cluster/local_autoscale_demo.py                          # tiny Tune sweep, ~1-2 min
    python cluster/local_autoscale_demo.py --workload sweeper --out cluster/autoscale_times.json
    python cluster/local_autoscale_demo.py --results-on local      # results in the head's temp dir

The job is submitted WITHOUT --working-dir (the fake nodes share one working-dir folder and break on
it): the tiny sweep is this file by absolute path, `sweeper.run` is the installed package.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent


# ---------------------------------------------------------------- the workload (runs as the Ray job)


# the `ray` CLI beside this Python (a venv that is not activated has it off PATH)
RAY_CLI = str(Path(sys.executable).parent / "ray") if (Path(sys.executable).parent / "ray").exists() else "ray"

def tiny_sweep(trials: int, seconds: float, storage: str) -> None:
    """A grid of `trials` function trials, each asking for 1 CPU + 1 (fake) GPU and running `seconds`."""
    import ray
    from ray import tune

    def trainable(config):
        if not ray.get_gpu_ids():  # the (fake) GPU Ray assigned to this trial
            raise RuntimeError("the trial holds no GPU; it must ask for {'gpu': 1}")
        steps = 5
        for i in range(steps):
            time.sleep(seconds / steps)
            tune.report({"step": i + 1, "x2": config["x"] ** 2})

    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1, "gpu": 1}),
        param_space={"x": tune.grid_search(list(range(trials)))},
        # the autoscaler can take down a node that a trial was just placed on, before the trial started there
        # (to it the node still looked idle): Tune then starts that trial again on another node
        run_config=tune.RunConfig(name="tiny", storage_path=storage, verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=2)))
    grid = tuner.fit()
    errors = [r.error for r in grid if r.error is not None]
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(grid)} trials failed, the first with: {errors[0]}")
    print(json.dumps({"trials_done": len(grid), "x2": sorted(r.metrics["x2"] for r in grid)}))


# ---------------------------------------------------------------- the bucket (a local S3-compatible server)

DEMO_BUCKET = "vbi-mur-demo"


def start_s3(temp_dir: Path):
    """moto's S3 server on 127.0.0.1 (a free port) with the bucket DEMO_BUCKET; returns (server, the
    environment that points AWS clients at it: endpoint, dummy credentials, region, no metadata service)."""
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError:
        raise SystemExit("the S3 demo needs a local S3 server: pip install 'moto[server]' boto3 "
                         "(or run with --results-on local)") from None
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ENDPOINT_URL_S3": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "demo",
           "AWS_SECRET_ACCESS_KEY": "demo", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true", "VBI_MUR_CACHE": str(temp_dir / "cache")}
    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"], aws_access_key_id="demo",
                 aws_secret_access_key="demo", region_name="us-east-1").create_bucket(Bucket=DEMO_BUCKET)
    return server, env


def bucket_contents(env: dict) -> dict:
    """{experiment folder: number of objects} under s3://DEMO_BUCKET/results."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"], aws_access_key_id="demo",
                      aws_secret_access_key="demo", region_name="us-east-1")
    out: dict = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=DEMO_BUCKET, Prefix="results/"):
        for o in page.get("Contents", []):
            parts = o["Key"].split("/")
            if len(parts) > 2 and parts[2]:
                out.setdefault(parts[1], []).append(parts[2:])
    return {exp: {"objects": len(keys), "trials": len({k[0] for k in keys if len(k) > 1 and k[0].startswith(("trial_", "trainable_"))}),
                  "report": sorted(k[0] for k in keys if len(k) == 1 and k[0] in ("table.md", "trials.parquet"))}
            for exp, keys in out.items()}


# ---------------------------------------------------------------- the head

HANDED_OUT: set[int] = set()  # the ports free_port gave this process


def free_port() -> int:
    """A port nothing listens on, for a server that binds it seconds later: below the kernel's range of
    ephemeral ports (net.ipv4.ip_local_port_range; any outgoing connection may take one of those in the
    meantime, and a node whose agent cannot bind its port loses its raylet) and above Ray's worker ports
    (10002 to 19999); never the same port twice in this process."""
    range_file = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(range_file.read_text().split()[0]) if range_file.is_file() else 0
    while True:
        if low > 21000:
            port = random.randrange(20000, low)
        else:  # no room below the ephemeral ports: the kernel's pick
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        if port in HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("", port))  # all interfaces: a node's servers listen beyond 127.0.0.1 too
            except OSError:
                continue
        HANDED_OUT.add(port)
        return port


def write_config(dst: Path, gcs_port: int, idle_timeout_minutes: float, max_workers: int) -> dict:
    """cluster/local.yaml with this run's GCS port, idle timeout and worker bound."""
    cfg = yaml.safe_load((HERE / "local.yaml").read_text())
    cfg["provider"]["gcs_address"] = f"127.0.0.1:{gcs_port}"
    cfg["idle_timeout_minutes"] = idle_timeout_minutes
    cfg["max_workers"] = max_workers
    cfg["available_node_types"]["gpu_worker"]["max_workers"] = max_workers
    dst.write_text(yaml.safe_dump(cfg))
    return cfg


def head_env(token: str) -> dict:
    """This process's env with token auth on (the token passed by value) and no other cluster's address."""
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token,
               AUTOSCALER_UPDATE_INTERVAL_S="1",  # autoscaler loop every 1 s instead of 5 s
               RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0",  # SIGTERM: tear down now, no 30 s drain
               RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    env.pop("RAY_ADDRESS", None)
    return env


def start_head(temp_dir: Path, ports: dict, env: dict, log: Path,
               autoscaling_config: Path | None = None) -> subprocess.Popen:
    """`ray start --head --block` on 127.0.0.1 with its own ports and temp dir, no CPU for trials,
    in its own process group; SIGTERM to it stops the processes it started."""
    cmd = [RAY_CLI, "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--port", str(ports["gcs"]), "--dashboard-host", "127.0.0.1",
           "--dashboard-port", str(ports["dashboard"]),
           "--ray-client-server-port", str(ports["client"]),
           "--dashboard-agent-listen-port", str(ports["agent"]),
           "--temp-dir", str(temp_dir), "--num-cpus", "0", "--num-gpus", "0", "--disable-usage-stats"]
    if autoscaling_config is not None:
        cmd.append(f"--autoscaling-config={autoscaling_config}")
    return subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def free_ports() -> dict:
    return {k: free_port() for k in ("gcs", "dashboard", "client", "agent")}


def stop_head(head: subprocess.Popen, temp_dir: Path, grace_s: float = 30.0) -> list[int]:
    """Stop this cluster only: SIGTERM the blocking `ray start`, then any process still naming our
    temp dir (fake worker raylets started by the autoscaler). Returns the pids it had to kill."""
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
    leftovers = pids_using(temp_dir)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in leftovers:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + 5
        while time.time() < deadline and pids_using(temp_dir):
            time.sleep(0.2)
    return leftovers


def pids_using(temp_dir: Path) -> list[int]:
    """Processes whose command line names `temp_dir` (every Ray process of a cluster started with
    --temp-dir does). Linux /proc only; elsewhere [] and stop_head relies on the SIGTERM alone."""
    if not Path("/proc").is_dir():
        return []
    key = str(temp_dir).encode()
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != os.getpid():
            try:
                if key in (p / "cmdline").read_bytes():
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


# ---------------------------------------------------------------- the dashboard's REST API

def api(url: str, token: str | None, body: dict | None = None, timeout: float = 10.0):
    """GET (or POST `body`) a dashboard endpoint with the bearer token; returns the decoded JSON."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_ready(dashboard: str, token: str, head: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if head.poll() is not None:
            raise RuntimeError(f"ray start exited with {head.returncode}; see its log")
        try:
            api(f"{dashboard}/api/version", token, timeout=2)
            alive_nodes(dashboard, token)
            return
        except (urllib.error.URLError, OSError, KeyError, ValueError):
            time.sleep(1)
    raise TimeoutError(f"the head's dashboard {dashboard} did not answer in {timeout_s:.0f} s")


def alive_nodes(dashboard: str, token: str) -> list[dict]:
    """ALIVE nodes from the state API: [{node_id, is_head_node, resources_total, ...}]."""
    out = api(f"{dashboard}/api/v0/nodes?limit=100&detail=false", token)
    return [n for n in out["data"]["result"]["result"] if n["state"] == "ALIVE"]


def job_status(dashboard: str, token: str, job_id: str) -> str:
    return api(f"{dashboard}/api/jobs/{job_id}", token)["status"]


# ---------------------------------------------------------------- the demo

def run_demo(workload: str, trials: int, seconds: float, idle_timeout_minutes: float,
             max_workers: int, timeout_s: float, keep_temp: bool = False, results_on: str = "s3") -> dict:
    """Start the fake autoscaling head, run the workload as a job, watch the nodes; returns the timeline.
    results_on="s3": the job writes to s3://vbi-mur-demo/results on a local S3 server (start_s3)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="rayfk-", dir="/tmp"))  # short: unix socket paths
    ports = free_ports()
    token = secrets.token_hex(32)
    write_config(temp_dir / "local.yaml", ports["gcs"], idle_timeout_minutes, max_workers)
    dashboard = f"http://127.0.0.1:{ports['dashboard']}"
    log = temp_dir / "head.log"
    s3_server, s3_env = start_s3(temp_dir) if results_on == "s3" else (None, {})
    storage = f"s3://{DEMO_BUCKET}/results" if s3_server else str(temp_dir / "results")
    env = dict(head_env(token), RAY_FAKE_CLUSTER="1", **s3_env)  # workers and the job inherit the head's env
    head = start_head(temp_dir, ports, env, log, autoscaling_config=temp_dir / "local.yaml")
    events, samples = [], []
    t0 = time.time()

    def mark(name: str, **kw):
        events.append({"event": name, "t_s": round(time.time() - t0, 1), **kw})
        print(f"[{time.time() - t0:7.1f} s] {name} {kw if kw else ''}", flush=True)

    try:
        wait_ready(dashboard, token, head)
        mark("head_ready", dashboard=dashboard)
        if workload == "tiny":
            entry = (f"{sys.executable} {Path(__file__).resolve()} --tiny-sweep --trials {trials} "
                     f"--seconds {seconds} --storage {storage}")
        else:
            entry = (f"{sys.executable} -m sweeper.run ablation_radius --preset quick --seeds 1 "
                     f"--gpus-per-trial 1 --cpus-per-trial 1 --storage {storage}")
        job_id = api(f"{dashboard}/api/jobs/", token, {"entrypoint": entry})["submission_id"]
        mark("job_submitted", job_id=job_id, entrypoint=entry)
        peak, state, deadline = 0, "PENDING", time.time() + timeout_s
        finished = False
        while time.time() < deadline:
            workers = [n for n in alive_nodes(dashboard, token) if not n["is_head_node"]]
            gpus = sum(n["resources_total"].get("GPU", 0) for n in workers)
            samples.append((round(time.time() - t0, 1), len(workers)))
            if len(workers) > peak:
                peak = len(workers)
                mark("workers_up", workers=peak, gpus=gpus)
            if not finished:
                state = job_status(dashboard, token, job_id)
                if state in ("SUCCEEDED", "FAILED", "STOPPED"):
                    finished = True
                    mark("job_finished", status=state, workers=len(workers))
            elif not workers:
                mark("workers_removed", workers=0)
                break
            time.sleep(1)
        else:
            mark("timeout", state=state, workers=samples[-1][1] if samples else None)
        logs = api(f"{dashboard}/api/jobs/{job_id}/logs", token)["logs"]
        in_bucket = bucket_contents(s3_env) if s3_server else None
    finally:
        killed = stop_head(head, temp_dir)
        mark("head_stopped", leftover_pids_killed=len(killed))
        if s3_server:
            s3_server.stop()
        if not keep_temp:
            shutil.rmtree(temp_dir)
    times = {e["event"]: e["t_s"] for e in events}
    first_up = next((e["t_s"] for e in events if e["event"] == "workers_up"), None)
    return {
        "machine": f"{os.cpu_count()}-core CPU box ({sys.platform})", "workload": workload,
        "trials": trials if workload == "tiny" else "ablation_radius quick, 1 seed",
        "idle_timeout_minutes": idle_timeout_minutes, "max_workers": max_workers,
        "temp_dir": str(temp_dir),
        "peak_workers": peak, "job_status": state, "events": events,
        "storage": storage, "in_bucket": in_bucket,
        "submit_to_first_worker_s": None if first_up is None else round(first_up - times["job_submitted"], 1),
        "submit_to_job_done_s": round(times["job_finished"] - times["job_submitted"], 1)
        if "job_finished" in times else None,
        "job_done_to_all_removed_s": round(times["workers_removed"] - times["job_finished"], 1)
        if "workers_removed" in times else None,
        "workers_over_time": samples, "job_log_tail": logs[-2000:], "job_result": job_result(logs),
        "ok": state == "SUCCEEDED" and peak >= 1 and "workers_removed" in times
        and (not s3_server or any(e["trials"] for e in in_bucket.values())),
    }


def job_result(logs: str) -> dict | None:
    """The tiny workload's summary line ({"trials_done": ..., "x2": [...]}) from the whole job log: worker
    tracebacks printed as the cluster scales down may follow it, so a log tail can miss it."""
    for line in reversed(logs.splitlines()):
        if '{"trials_done"' in line:
            return json.loads(line[line.index('{"trials_done"'):])
    return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", choices=("tiny", "sweeper"), default="tiny",
                   help="tiny: a Tune grid of sleeping GPU trials; sweeper: sweeper.run ablation_radius --preset quick")
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10.0, help="how long one tiny trial runs")
    p.add_argument("--idle-timeout-minutes", type=float, default=0.25)
    p.add_argument("--max-workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    p.add_argument("--out", default=None, help="write the timeline as JSON here")
    p.add_argument("--keep-temp", action="store_true", help="keep the head's temp dir (logs) in /tmp")
    p.add_argument("--results-on", choices=("s3", "local"), default="s3",
                   help="s3 (default): a local S3-compatible server (moto) holds the results, as a bucket "
                        "does on a real cluster; local: a folder in the head's temp dir")
    p.add_argument("--tiny-sweep", action="store_true", help=argparse.SUPPRESS)  # the job's entrypoint
    p.add_argument("--storage", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.tiny_sweep:
        tiny_sweep(a.trials, a.seconds, a.storage)
        return 0
    if a.trials < 1 or a.max_workers < 1 or a.idle_timeout_minutes <= 0:
        p.error("--trials and --max-workers must be >= 1 and --idle-timeout-minutes > 0")
    res = run_demo(a.workload, a.trials, a.seconds, a.idle_timeout_minutes, a.max_workers, a.timeout,
                   a.keep_temp, a.results_on)
    print(json.dumps({k: v for k, v in res.items() if k not in ("workers_over_time", "job_log_tail")}, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))
    if not res["ok"]:
        print("job log tail:\n" + res["job_log_tail"], file=sys.stderr)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
