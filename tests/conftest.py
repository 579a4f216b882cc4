"""Session-wide guards for the test process, the fixtures and helpers several test files share, and the
rounding tolerances that float comparisons derive from their computation (rounding_tol, reduction_length).

torch and torchvision are imported here, at collection, although the driver imports torchvision
only when a CIFAR/SVHN file is read (trainables/datafiles.py): with torchvision first imported late
in the test process, that process can segfault at interpreter exit after every test has passed
(cause not established). Tests that start Ray in this
process shut it down themselves; the hook below makes sure no Ray is left running at exit.
"""
import json
import math
import socket

import pytest
import torch
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
