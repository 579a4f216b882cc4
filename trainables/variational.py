"""Sparse variational dropout (Molchanov et al. 2017): the paper's weight perturbation (VBI).

Each weight w ~ N(theta, sigma^2) with sigma^2 = alpha * theta^2, alpha = exp(log_alpha),
log_alpha = clip(log_sigma2 - log(clip(theta^2, 1e-15, 1e30)), -8, 8) as the authors' svd.py. In training (and `sample` on)
the layers draw pre-activations with the local reparameterization trick; otherwise they
use the mean weights theta (with `masked`, the config's vd_masked, theta zeroed where log_alpha >= 3,
the authors' MASKED_WEIGHT_MODE). `kl_divergence` is the authors' per-weight mean of the
Molchanov approximation; `sparsity` counts weights with log_alpha >= 3.

    pytest tests/test_variational.py -q
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

LOG_ALPHA_MIN, LOG_ALPHA_MAX = -8.0, 8.0
LOG_SIGMA2_INIT = -10.0
PRUNE_LOG_ALPHA = 3.0  # log_alpha >= 3 (alpha ~ 20, dropout rate ~ 0.95) counts as pruned
K1, K2, K3 = 0.63576, 1.87320, 1.48695  # Molchanov et al. 2017, eq. 14
EPS = 1e-8
THETA2_MIN, THETA2_MAX = 1e-15, 1e30  # the authors' log_w_clip bounds on theta^2 before the log (svd.py)


def _log_alpha(theta: torch.Tensor, log_sigma2: torch.Tensor) -> torch.Tensor:
    log_theta2 = torch.log(torch.clamp(theta * theta, THETA2_MIN, THETA2_MAX))
    return torch.clamp(log_sigma2 - log_theta2, LOG_ALPHA_MIN, LOG_ALPHA_MAX)


def _sample(mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    # var >= 0 in exact arithmetic; fast conv algorithms can return -1e-9 ish, hence the clamp
    # noise drawn in logical (NCHW) order: the same draws for any memory format, and no slow strided
    # normal_ (randn_like of a channels_last tensor)
    noise = torch.randn(mean.shape, dtype=mean.dtype, device=mean.device)
    return mean + torch.sqrt(var.clamp_min(0) + EPS) * noise


class VDWeights(nn.Module):
    """What VDLinear and VDConv2d share: weights theta with log_sigma2 of the same shape (output units
    first), a bias, and the forward of the layer's linear map `op(x, weight, bias)` with the local
    reparameterization trick: mean op(x, theta), variance op(x^2, alpha theta^2)."""

    def __init__(self, shape: tuple[int, ...], bias: bool):
        super().__init__()
        self.theta = nn.Parameter(torch.empty(shape))
        self.log_sigma2 = nn.Parameter(torch.full(shape, LOG_SIGMA2_INIT))
        self.bias = nn.Parameter(torch.zeros(shape[0])) if bias else None
        self.sample = True  # False: mean weights even in train mode (see mean_weights)
        self.masked = False  # True: the mean weights with the pruned ones (log_alpha >= PRUNE_LOG_ALPHA) zeroed
        nn.init.kaiming_normal_(self.theta, a=0.1, nonlinearity="leaky_relu")

    def op(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    @property
    def log_alpha(self) -> torch.Tensor:
        return _log_alpha(self.theta, self.log_sigma2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and self.sample):  # deterministic: the mean weights, masked or not
            theta = self.theta * (self.log_alpha < PRUNE_LOG_ALPHA) if self.masked else self.theta
            return self.op(x, theta, self.bias)
        mean = self.op(x, self.theta, self.bias)
        sigma2 = torch.exp(self.log_alpha) * self.theta * self.theta  # theta's shape
        return _sample(mean, self.op(x * x, sigma2, None))


class VDLinear(VDWeights):
    """Linear layer with a factorized Gaussian posterior per weight (theta, log_sigma2): (B, in) -> (B, out)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__((out_features, in_features), bias)  # theta: (out, in)
        self.in_features, self.out_features = in_features, out_features

    def op(self, x, weight, bias):
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class VDConv2d(VDWeights):
    """2-d convolution with a factorized Gaussian posterior per weight (theta, log_sigma2):
    (B, Cin, H, W) -> (B, Cout, H', W')."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, bias: bool = True):
        super().__init__((out_channels, in_channels, kernel_size, kernel_size), bias)  # theta: (Cout, Cin, k, k)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def op(self, x, weight, bias):
        return F.conv2d(x, weight, bias, self.stride, self.padding)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None}")


VD_TYPES = (VDLinear, VDConv2d)


def vd_layers(module: nn.Module) -> Iterator[nn.Module]:
    """Every VDLinear / VDConv2d in module (itself included)."""
    return (m for m in module.modules() if isinstance(m, VD_TYPES))


def kl_divergence(module: nn.Module) -> torch.Tensor:
    """KL(q(w) || log-uniform prior), summed over all VD weights and divided by their count.

    Molchanov's approximation: -KL = k1 sigmoid(k2 + k3 log_alpha) - 0.5 log1p(exp(-log_alpha)) - k1.
    Returns a 0-dim tensor; zero when module has no VD layer.
    """
    total, count = None, 0
    for m in vd_layers(module):
        la = m.log_alpha
        neg_kl = K1 * torch.sigmoid(K2 + K3 * la) - 0.5 * F.softplus(-la) - K1  # softplus(-a) = log1p(exp(-a))
        s = -neg_kl.sum()
        total = s if total is None else total + s
        count += la.numel()
    if total is None:
        p = next(module.parameters(), None)
        return torch.zeros((), device=p.device if p is not None else "cpu")
    return total / count


@torch.no_grad()
def sparsity(module: nn.Module) -> float:
    """Fraction of VD weights with log_alpha >= 3 (pruned); NaN when there are none."""
    pruned, count = 0, 0
    for m in vd_layers(module):
        la = m.log_alpha
        pruned += int((la >= PRUNE_LOG_ALPHA).sum())
        count += la.numel()
    return pruned / count if count else math.nan


@contextlib.contextmanager
def mean_weights(module: nn.Module):
    """Inside: every VD layer uses theta deterministically (even in train mode); restored after."""
    layers = list(vd_layers(module))
    saved = [m.sample for m in layers]
    try:
        for m in layers:
            m.sample = False
        yield module
    finally:
        for m, s in zip(layers, saved):
            m.sample = s
