"""Session-wide guards for the test process, the fixtures and helpers several test files share, and the
rounding tolerances that float comparisons derive from their computation (rounding_tol, reduction_length).

torch and torchvision are imported here, at collection, although the driver imports torchvision
only when a CIFAR/SVHN file is read (trainables/datafiles.py): with torchvision first imported late
in the test process, that process can segfault at interpreter exit after every test has passed
(cause not established). Tests that start Ray in this
process shut it down themselves; the hook below makes sure no Ray is left running at exit.
"""
import functools
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torchvision  # noqa: F401


if os.environ.get("PYTEST_XDIST_WORKER"):
    # two test processes on two cores: torch's default of one thread per core in each would
    # oversubscribe them, and contended threads slow a CPU step far more than the halving
    torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The files with the most slow tests first, each file's tests together and in their order: under
    `-n 2 --dist loadfile` a file is one unit of work handed to whichever process is free, so the long
    files start at once and the short ones fill the gaps at the end, instead of a long file coming last."""
    n_slow: dict = {}
    for item in items:
        n_slow[item.path] = n_slow.get(item.path, 0) + (item.get_closest_marker("slow") is not None)
    order = {path: i for i, path in enumerate(dict.fromkeys(item.path for item in items))}
    items.sort(key=lambda item: (-n_slow[item.path], order[item.path]))  # stable within a file


def pytest_sessionfinish(session, exitstatus):
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="module")
def digits():
    """The bundled digits as the trainer loads them (trainables.data.Dataset), one per test module."""
    from trainables.data import load_dataset

    return load_dataset("digits")


def write_trial(exp, idx, params, reports, error=False, torn=None):
    """A trial folder as Ray Tune 2.x lays it out: params.json, result.json (JSON lines, each with the
    trial's config and its time so far; `torn`: a half-written last line), error.txt on error."""
    d = exp / f"train_tune_ab12c_{idx:05d}_{idx}_seed={params.get('seed')}_2026-01-01_00-00-00"
    d.mkdir(parents=True)
    (d / "params.json").write_text(json.dumps(params, indent=2))
    if reports is not None:
        text = "".join(json.dumps({**r, "trial_id": f"ab12c_{idx:05d}", "config": params,
                                   "time_total_s": 1.5 * (i + 1)}) + "\n" for i, r in enumerate(reports))
        (d / "result.json").write_text(text + (torn or ""))
    if error:
        (d / "error.txt").write_text("Failure # 1 (occurred at 2026-01-01_00-00-05)\nRuntimeError: boom\n")
    return d


@functools.cache
def demo_module():
    """cluster/local_autoscale_demo.py (a script, not a package) imported by path, once per process."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "cluster" / "local_autoscale_demo.py"
    spec = importlib.util.spec_from_file_location("local_autoscale_demo", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def free_port() -> int:
    """A TCP port nothing listens on, safe to hand to a server that binds it seconds later (the demo
    cluster's picker: below the kernel's ephemeral ports, never the same one twice in this process)."""
    return demo_module().free_port()

class RayHead:
    """A Ray head on 127.0.0.1 (free ports, its own short temp dir, token auth as Ray 2.60 heads have it
    by default) that drivers join with `--address`, and, with `dashboard`, `ray job` reaches at `dashboard`.

    Without a log monitor: no test reads a trial's printed lines through its driver, and the monitor lists
    and reads the node's log files ten times a second for as long as the head lives (a session-long head
    runs the whole slow suite). Without the dashboard (and its agent and module processes) unless the Job
    API is what is tested."""

    def __init__(self, temp: Path, log: Path, num_cpus: int = 2, dashboard: bool = True):
        root = Path(__file__).resolve().parents[1]
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        self.env = {**env, "PYTHONPATH": str(root), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
                    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}  # a job's `python`
        self.temp, gcs, dash = temp, free_port(), free_port()
        self.address = f"127.0.0.1:{gcs}"
        self.dashboard = f"http://127.0.0.1:{dash}" if dashboard else None
        self.ray = str(Path(sys.executable).parent / "ray")
        web = ["--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash)] if dashboard else ["--include-dashboard", "false"]
        self.proc = subprocess.Popen([self.ray, "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
                                      "--port", str(gcs), *web, "--include-log-monitor", "false",
                                      "--ray-client-server-port", str(free_port()),
                                      "--dashboard-agent-listen-port", str(free_port()), "--temp-dir", str(temp),
                                      "--num-cpus", str(num_cpus), "--disable-usage-stats"],
                                     env=self.env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + 120
        # up: the Job API answers; without it, `ray start` has printed that the runtime started
        up = (lambda: self.job("list", timeout=60).returncode == 0) if dashboard else \
            (lambda: "Ray runtime started" in log.read_text())
        while not up():
            assert self.proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(1 if dashboard else 0.2)

    def job(self, cmd: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """`ray job CMD --address DASHBOARD ARGS`, run from the repository."""
        return subprocess.run([self.ray, "job", cmd, "--address", self.dashboard, *args],
                              cwd=Path(__file__).resolve().parents[1], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    __call__ = job

    def close(self) -> None:
        from procs import pids_naming

        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        for pid in pids_naming(str(self.temp)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _head(tmp_path_factory, name: str, dashboard: bool):
    import tempfile

    temp = Path(tempfile.mkdtemp(prefix="rhead", dir="/tmp"))  # short: Ray's unix socket paths
    head = RayHead(temp, tmp_path_factory.mktemp(name) / "head.log", dashboard=dashboard)
    try:
        yield head
    finally:
        head.close()


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory):
    """One Ray head for the drivers of this pytest process whose property does not need a Ray of their
    own (one that starts and ends with the driver): each driver joins it with `--address` in
    `ray_head.env`, which saves a local Ray's start and shutdown per driver. No dashboard: `job_head`."""
    yield from _head(tmp_path_factory, "ray_head", dashboard=False)


@pytest.fixture(scope="module")
def job_head(tmp_path_factory):
    """A Ray head with its dashboard, for a module whose tests submit jobs (`job_head.job("submit", ...)`)."""
    yield from _head(tmp_path_factory, "job_head", dashboard=True)


def rounding_tol(magnitude: float, n: int, dtype=torch.float32, lam: float = 8.0) -> float:
    """How far apart two results of the same computation in `dtype` may be when they differ only in
    rounding (another summation order: thread count, kernel, batch size, fused graph). n counts the
    roundings along the longest chain (a sum of n terms: n) and magnitude bounds the sum of the
    absolute values of the terms. With rounding errors independent and of mean zero, each result lies
    within lam * sqrt(n) * u * magnitude of the exact value (u = eps / 2) except with probability at
    most 2 n exp(-lam**2 / 2) (Higham and Mary, A new approach to probabilistic rounding error analysis,
    SIAM J. Sci. Comput. 41(5), 2019): 1e-11 for n = 2000 at lam = 8, so the two differ by at most
    lam * sqrt(n) * eps * magnitude. The worst case, n * u per result, is the same with n for sqrt(n)."""
    return lam * math.sqrt(n) * torch.finfo(dtype).eps * magnitude

def reduction_length(model) -> int:
    """The roundings along a forward (or backward) pass of `model`, to first order: the summed fan-in
    of its convolutions and linear layers (each output is a dot product of that length) plus 10 per
    layer for the element-wise work (normalisation, activation, bias)."""
    n = 0
    for m in model.modules():
        w = getattr(m, "weight", None)
        if isinstance(w, torch.Tensor) and w.dim() >= 2:
            n += w[0].numel() + 10
    return n
