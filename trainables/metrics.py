"""Evaluation metrics: test error, Jacobian sensitivity (paper Table 3) and histograms.

sensitivity(x) = ||J(x)||_F,  J_ij = d p(y=i|x) / d x_j  (paper "Effects of VBI and MUR on
sensitivity"). Both model metrics run the network in eval mode (running BN statistics, no
dropout, no input noise, mean weights under VD) and restore every module's mode after.

    pytest tests/test_metrics.py -q
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@contextlib.contextmanager
def _eval_mode(model: nn.Module):
    """model.eval() inside; each module's own training flag restored on exit."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in modes:
            m.training = training


def sensitivity(model: nn.Module, x: torch.Tensor, chunk: int = 256) -> torch.Tensor:
    """Frobenius norm of d softmax(model(x)) / dx per sample: (B, ...) -> (B,) float32, detached.

    In eval mode samples do not interact, so the backward of sum_b p[b, k] gives row k of
    every sample's Jacobian at once: K backward passes per chunk of `chunk` samples.
    Computed in full precision (autocast off); parameter .grad fields are not touched.
    """
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 2:
        raise ValueError(f"x must be a floating-point tensor (B, ...), got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    out = []
    with _eval_mode(model), torch.enable_grad(), torch.autocast(x.device.type, enabled=False):
        for xc in x.split(chunk):
            xc = xc.detach().requires_grad_(True)  # (b, ...)
            p = F.softmax(model(xc).float(), dim=-1)  # (b, K)
            sq = torch.zeros(len(xc), device=x.device)  # (b,) running sum of squares
            K = p.shape[1]
            for k in range(K):
                (g,) = torch.autograd.grad(p[:, k].sum(), xc, retain_graph=k < K - 1)  # (b, ...)
                sq += g.flatten(1).float().pow(2).sum(dim=1)
            out.append(sq.sqrt())
    return torch.cat(out)  # (B,)


@torch.no_grad()
def error_rate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> float:
    """Percent of samples whose argmax prediction differs from y, in eval mode."""
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"x and y must hold the same non-zero number of samples, got {len(x)} and {len(y)}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    wrong = 0
    with _eval_mode(model):
        for xb, yb in zip(x.split(batch), y.split(batch)):
            pred = model(xb).argmax(dim=-1)  # (b,)
            wrong += int((pred != yb.to(pred.device)).sum())
    return 100.0 * wrong / len(x)


def histogram(values, bins: int = 20, range: tuple[float, float] | None = None) -> dict:
    """{"counts": [int] * bins, "edges": [float] * (bins + 1)}, plain lists (JSON-friendly).

    range None: (min, max) of the values. Values outside `range` are counted in the first
    or last bin, so with a fixed range (e.g. (0, r) to compare runs) the last bin reads
    ">= edges[-2]". Non-finite values (a diverged model) are dropped; the counts sum to
    the number of finite values.
    """
    if isinstance(values, torch.Tensor):
        values = values.detach().float().cpu().numpy()
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if int(bins) != bins or bins < 1:
        raise ValueError(f"bins must be an integer >= 1, got {bins}")
    if range is not None:
        lo, hi = float(range[0]), float(range[1])
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"range must be (low, high) with low < high, got {range}")
        v = np.clip(v, lo, hi)
    counts, edges = np.histogram(v, bins=int(bins), range=range)
    return {"counts": [int(c) for c in counts], "edges": [float(e) for e in edges]}
