"""The driver's Ray: a local one (in a process session of its own) or a head at `--address`.

`start_ray` connects and says what one trial asks of a node (a trial no node fits: exit 2 on a local
Ray, a warning on a cluster, whose autoscaler may add one); `use_token_if_available` turns on token
auth for a head; `trial_actor_env` keeps the driver's AWS keys and Tune's default variable out of the
trial actors; `env_set` sets Tune's switches for the block around fit().

    python -m sweeper.run ablation_radius --preset quick --address 127.0.0.1:6379
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from sweeper.driver.preflight import InputError


def start_ray(address: str | None, args, stop) -> dict:
    """Connect to Ray (a head at `address`, else a local Ray); each trial's resources {"cpu", "gpu"}.
    `stop` (sweeper/driver/stopping.py) gets its handlers back at once: ray.init took SIGTERM over.
    ConnectionError when no Ray answers at `address`."""
    ctx = connect_ray(address, dashboard=args.dashboard)
    stop.reinstall_handlers()
    if getattr(ctx, "dashboard_url", None):
        print(f"Ray dashboard: http://{ctx.dashboard_url}")
    elif not address:
        print("local Ray without a dashboard (add --dashboard, or submit to a head: see docs/USAGE.md)")
    import ray

    gpus = args.gpus_per_trial
    if gpus is None:
        gpus = 1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
    resources = {"cpu": args.cpus_per_trial, "gpu": gpus}
    if not any(fits(n, resources) for n in ray.nodes() if n.get("Alive")):
        largest = max((n for n in ray.nodes() if n.get("Alive")), default={},
                      key=lambda n: (n.get("Resources", {}).get("GPU", 0), n.get("Resources", {}).get("CPU", 0)))
        have = largest.get("Resources", {})
        need = f"{resources['cpu']:g} CPUs and {resources['gpu']:g} GPUs per trial"
        if not address:  # a local Ray never grows: the trials would wait forever
            ray.shutdown()
            raise InputError(f"{need}, but this machine's Ray has {have.get('CPU', 0):g} CPUs and "
                             f"{have.get('GPU', 0):g} GPUs; lower --cpus-per-trial / --gpus-per-trial")
        print(f"warning: no node of the cluster has {need} now (the largest: {have.get('CPU', 0):g} CPUs, "
              f"{have.get('GPU', 0):g} GPUs); the trials stay PENDING until an autoscaler adds one that does "
              f"(`ray status` shows the pending demand)", file=sys.stderr)
    return resources


def fits(node: dict, resources: dict) -> bool:
    """Whether a node of ray.nodes() has, in all, the CPUs and GPUs one trial asks for."""
    have = node.get("Resources", {})
    return have.get("CPU", 0) >= resources["cpu"] and have.get("GPU", 0) >= resources["gpu"]


def connect_ray(address: str | None, dashboard: bool = False):
    """Join the Ray at `address`, else start a local one, with its dashboard (bound to 127.0.0.1)
    only when asked: it would take CPU from the trials and it goes away with the sweep."""
    import ray

    if address:
        return ray.init(address=address, log_to_driver=True)
    with own_process_group():
        return ray.init(address="local", include_dashboard=dashboard, dashboard_host="127.0.0.1")


@contextlib.contextmanager
def own_process_group():
    """The Ray processes started in this block (a local Ray's GCS, raylet, ...; the raylet's workers
    follow it) run in a session and process group of their own. `timeout`, shells and job runtimes
    signal a job's whole process group; the SIGTERM then reaches only the driver, which stops Tune
    gracefully (stopping.GracefulStop) and shuts its Ray down itself. In the driver's group, Ray's processes
    would die at once on it (Ray blocks SIGINT in them, for Ctrl+C, but not SIGTERM) and leave the
    driver waiting for a dead GCS, with no report. Ray does the same on Windows (CREATE_NEW_PROCESS_GROUP).
    They still die with the driver: Ray sets PR_SET_PDEATHSIG in them, so a killed driver leaks none."""
    from ray._private import services

    popen = services.ConsolePopen  # the Popen that Ray's start_ray_process uses for every process

    class SessionPopen(popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "start_new_session": True})

    services.ConsolePopen = SessionPopen
    try:
        yield
    finally:
        services.ConsolePopen = popen


def use_token_if_available(env=os.environ) -> bool:
    """Ray 2.60 heads enable token auth by default, and a client sends its token only with
    RAY_AUTH_MODE=token. When a token is at hand (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
    ~/.ray/auth_token) and the mode is unset, turn it on so `--address` just works."""
    if "RAY_AUTH_MODE" in env:
        return env["RAY_AUTH_MODE"] == "token"
    if env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH") or Path("~/.ray/auth_token").expanduser().is_file():
        env["RAY_AUTH_MODE"] = "token"
        return True
    return False


@contextlib.contextmanager
def trial_actor_env():
    """What Tune puts into each trial actor's runtime env while this block is open.

    Tune copies the driver's AWS keys (the secret key, session tokens) into every trial actor's
    runtime env, where Ray's runtime env agent logs them in plain text (runtime_env_agent.log) and
    its GCS keeps them (actor table, dashboard). Inside this block it copies none: storage
    credentials come from each node's own settings (environment, profile, instance role; see the
    README), and a local Ray's workers inherit the driver's environment anyway.

    Nor does it add its one default variable (PL_DISABLE_FORK, for PyTorch Lightning, which no trial
    imports). A trial actor with no variable to carry then has an empty runtime env, and Ray runs it in
    one of the workers it keeps started, instead of starting a new process through its runtime env agent
    for every trial process (and leaving the started ones idle). A variable Tune carries when the
    driver's environment sets it (RAY_CHDIR_TO_TRIAL_DIR, Ray Train's) still goes with the actor."""
    from ray.tune.execution import class_cache

    keys = {k for k in class_cache.ENV_VARS_TO_PROPAGATE if k.startswith("AWS_")}
    defaults = dict(class_cache.DEFAULT_ENV_VARS)
    class_cache.ENV_VARS_TO_PROPAGATE -= keys
    class_cache.DEFAULT_ENV_VARS.clear()
    try:
        yield
    finally:
        class_cache.ENV_VARS_TO_PROPAGATE |= keys
        class_cache.DEFAULT_ENV_VARS.update(defaults)


@contextlib.contextmanager
def env_set(**values: str):
    """Environment variables set for the block only (Tune reads some of them inside fit())."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
