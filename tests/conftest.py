"""Session-wide guards for the test process, and the fixtures and helpers several test files share.

torch and torchvision are imported here, at collection, although the driver imports torchvision
only when a CIFAR/SVHN file is read (trainables/datafiles.py): with torchvision first imported late
in the test process, that process can segfault at interpreter exit after every test has passed
(cause not established). Tests that start Ray in this
process shut it down themselves; the hook below makes sure no Ray is left running at exit.
"""
import json
import socket

import pytest
import torch  # noqa: F401
import torchvision  # noqa: F401


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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
