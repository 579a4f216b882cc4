"""Session-wide guards for the test process (not fixtures of any one test), and the rounding
tolerances that float comparisons derive from their computation (rounding_tol, reduction_length).

torch and torchvision are imported here, at collection, although the driver imports torchvision
only when a CIFAR/SVHN file is read (trainables/datafiles.py): with torchvision first imported late
in the test process, that process can segfault at interpreter exit after every test has passed
(cause not established). Tests that start Ray in this
process shut it down themselves; the hook below makes sure no Ray is left running at exit.
"""
import math

import torch
import torchvision  # noqa: F401


def pytest_sessionfinish(session, exitstatus):
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()



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
