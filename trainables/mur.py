"""Maximum uncertainty regularization (MUR): the virtual point x* of the paper.

x* = argmax_x H(p(y|x))  s.t.  ||x - x0||_2 <= r          (paper Eq. 9)

approximated four ways (`virtual_point(..., method=...)`), plus VAT's point beside it:
  direct  x* = x0 + r g0 / ||g0||, g0 = dH/dx at x0          (paper Eq. 10)
  pga     projected gradient ascent on H inside the ball     (appendix)
  ga      gradient ascent on the Lagrangian relaxation F(x)  (paper Eq. 11, appendix)
          pga and ga with steps=1 are the direct point: the authors' code uses the direct
          approximation whenever mur_opt_steps == 1, whatever the iteration mode, so their
          iterations start at 2 steps (models/semi_supervised/mean_teacher.py, _mur_loss)
  random  x0 + r u / ||u||, u ~ N(0, I): the RR ablation baseline
  vat     x0 + r d_adv: VAT's virtual adversarial point (Miyato et al. 2018), the point
          whose prediction differs most from p(x0) (MUR: the most uncertain one); r is
          VAT's epsilon, `steps` its power iterations, `xi` its finite-difference scale

Norms are L2 per sample over every non-batch axis, with EPS added to each denominator.
x* is always detached: no gradient flows through its construction.

Batch-norm policy: the forward passes made here (g0 and every ascent step) use batch
statistics but never update the running statistics (`frozen_bn_stats`), as VAT's
official code does for its perturbed passes. Run the loss pass on x* under the same
context so that x* never touches running_mean / running_var.

VAT and the network's own noise (Gaussian input noise, dropout, VD sampling): the p(x0)
pass and every perturbed pass of the power iteration replay the same global-RNG state
(`_same_noise`), so they draw identical noise and KL(p(x0) || p(x0 + xi d)) measures the
perturbation xi d alone, as VAT's official code does by reusing the dropout seed. The
global RNG is left as it was. Precision: xi d is a finite difference, so the power
iteration runs with autocast off (full precision even in a bf16 run) and with TF32 off
(`no_tf32`: on Ampere and newer GPUs cuDNN's float32 convolutions round inputs to TF32's
10-bit mantissa by default, far coarser than xi d), and xi must stay well above x0's
rounding error. Measured on the digits ConvNet in float32 (cosine of one power
step with the exact Gauss-Newton product J^T F J d): xi = 1e-6 (VAT's paper) 0.24, 1e-4
0.98, 1e-3 0.99, 1e-1 0.96; hence TrainConfig.vat_xi = 1e-3.

    pytest tests/test_mur.py -q
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from trainables.config import MUR_KINDS

METHODS = tuple(MUR_KINDS)  # trainables/config.py declares each kind
EPS = 1e-8  # added to every per-sample norm used as a denominator


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of softmax(logits) per row: (B, K) -> (B,); half precision is upcast to float32."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    logp = F.log_softmax(logits, dim=-1)  # (B, K), stable for large logits
    return -(logp.exp() * logp).sum(dim=-1)  # (B,)


@contextlib.contextmanager
def frozen_bn_stats(model: nn.Module):
    """Inside: BatchNorm layers still normalise with batch statistics in train mode, but
    running_mean, running_var and num_batches_tracked keep their values on exit.

    Done by saving the buffers and copying them back (also on exceptions), which is exact
    for any momentum, including momentum=None (cumulative average) and NaN batches.
    """
    saved = []  # (buffer, copy of its value on entry)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            for buf in (m.running_mean, m.running_var, m.num_batches_tracked):
                if buf is not None:
                    saved.append((buf, buf.detach().clone()))
    try:
        yield model
    finally:
        with torch.no_grad():
            # through .data: restoring must not bump the buffer's autograd version, or the graph of
            # an earlier train-mode pass (which saved these buffers) cannot backward. One multi-tensor
            # copy (a kernel per dtype on CUDA) instead of one launch per buffer.
            if saved:
                torch._foreach_copy_([buf.data for buf, _ in saved], [value for _, value in saved])


def _norm(x: torch.Tensor) -> torch.Tensor:
    """Per-sample L2 norm over all non-batch axes, shaped to broadcast: (B, ...) -> (B, 1, ..., 1)."""
    n = torch.linalg.vector_norm(x.flatten(1), dim=1)  # (B,)
    return n.view(-1, *([1] * (x.dim() - 1)))


def _unit(x: torch.Tensor) -> torch.Tensor:
    """x / (||x|| + EPS) per sample."""
    return x / (_norm(x) + EPS)


def entropy_grad(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """g = d sum_b H(softmax(model(x))_b) / dx, same shape as x; one forward and one backward.

    Samples do not interact except through train-mode BatchNorm, so g[b] is the gradient
    of sample b's own entropy up to that coupling (as in the authors' code). Parameter
    .grad fields are not touched; BN running statistics are not updated.
    """
    _check_input(x)
    x = x.detach().requires_grad_(True)
    with frozen_bn_stats(model), torch.enable_grad():
        h = entropy(model(x)).sum()  # scalar
        (g,) = torch.autograd.grad(h, x)
    return g  # (B, ...) like x


def _project(x: torch.Tensor, x0: torch.Tensor, radius: float) -> torch.Tensor:
    """Closest point to x in the L2 ball of `radius` around x0, per sample (appendix PGA)."""
    d = x - x0
    scale = torch.clamp(radius / (_norm(d) + EPS), max=1.0)  # 1 inside the ball
    return x0 + d * scale


def virtual_point(model: nn.Module, x0: torch.Tensor, radius: float, method: str = "direct",
                  step_size: float = 1.0, steps: int = 1, g0: torch.Tensor | None = None,
                  generator: torch.Generator | None = None, xi: float = 1e-3) -> torch.Tensor:
    """The virtual point x* of x0 (B, ...): detached, same shape and dtype as x0.

    radius: r, L2 distance per sample (VAT: epsilon). step_size, steps: alpha and T of
    pga / ga, the number of power iterations of vat (direct and random ignore them). pga and ga
    with steps=1 return the direct point x0 + r g0/||g0|| (step_size unused), as the authors' code.
    g0: dH/dx at x0 if already computed (direct, ga and the first pga step use it instead
    of a new pass; vat ignores it). generator: draws u of `random` and VAT's start d.
    xi: VAT's finite-difference scale (only vat uses it).

    With steps >= 2: pga takes `steps` projected steps from x0. ga starts off x0 because the
    Lagrangian's gradient is undefined at x = x0 (the term (x - x0)(2 - r/||x - x0||) has no
    limit there): its first iteration is the plain ascent step x1 = x0 + step_size * g0, i.e.
    dF/dx at x0 along g0 with the penalty term dropped (where the authors' code lands too: its
    penalty is multiplied by x - x0 = 0); the remaining steps - 1 iterations use the full update
    x <- x + step_size * (dH/dx - (||g0|| / r) (x - x0) (2 - r / ||x - x0||)). No projection.
    """
    if method not in METHODS:
        raise ValueError(f"unknown virtual-point method {method!r}; choose one of {list(METHODS)}")
    radius = float(radius)
    if not radius > 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    if isinstance(steps, bool) or int(steps) != steps or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, got {steps}")
    if MUR_KINDS[method].step_size and not step_size > 0:
        raise ValueError(f"step_size must be > 0 for {method}, got {step_size}")
    if method == "vat" and not xi > 0:
        raise ValueError(f"xi must be > 0 for vat, got {xi}")
    _check_input(x0)
    x0 = x0.detach()
    if g0 is not None:
        if g0.shape != x0.shape:
            raise ValueError(f"g0 has shape {tuple(g0.shape)} but x0 has {tuple(x0.shape)}; "
                             f"pass g0 = entropy_grad(model, x0)")
        g0 = g0.detach()

    if method == "random":
        return x0 + radius * _unit(_gaussian_like(x0, generator))
    if method == "vat":
        return x0 + radius * vat_direction(model, x0, xi, int(steps), generator)
    if g0 is None:
        g0 = entropy_grad(model, x0)  # (B, ...)
    if method == "direct" or int(steps) == 1:  # pga / ga iterate from 2 steps on (authors' code)
        return x0 + radius * _unit(g0)
    if method == "pga":
        x = _project(x0 + step_size * g0, x0, radius)  # first step: the gradient at x0 is g0
        for _ in range(int(steps) - 1):
            x = _project(x + step_size * entropy_grad(model, x), x0, radius)
        return x
    # ga
    lam = _norm(g0) / radius  # (B, 1, ..) ||g0|| / r, a constant
    x = x0 + step_size * g0  # first step, see docstring
    for _ in range(int(steps) - 1):
        d = x - x0
        penalty = lam * d * (2.0 - radius / (_norm(d) + EPS))
        x = x + step_size * (entropy_grad(model, x) - penalty)
    return x


RADIUS_FACTORS = (0.5, 1.0, 2.0, 4.0)  # the appendix figure's radii, as multiples of the trained r


def virtual_point_examples(model: nn.Module, x0: torch.Tensor, radius: float,
                           factors=RADIUS_FACTORS) -> dict:
    """The appendix figure's data: direct x* of the images x0 (N, ...) at radius * each factor.

    Runs the model in eval mode (and puts back its mode), so nothing of its state changes.
    Returns numpy arrays, ready for np.savez: x (N, ...), radii (R,), xstar (R, N, ...).
    """
    was_training = model.training
    model.eval()
    try:
        radii = [float(radius) * f for f in factors]
        xstar = torch.stack([virtual_point(model, x0, r, method="direct") for r in radii])  # (R, N, ...)
    finally:
        model.train(was_training)
    return {"x": x0.detach().float().cpu().numpy(), "radii": np.asarray(radii, dtype=np.float64),
            "xstar": xstar.float().cpu().numpy()}


# ----------------------------------------------------------------------------- VAT

def kl_logits(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """KL(softmax(logits_p) || softmax(logits_q)) per row in float32 (or float64): (B, K), (B, K) -> (B,)."""
    if logits_p.dtype in (torch.float16, torch.bfloat16):
        logits_p = logits_p.float()
    if logits_q.dtype in (torch.float16, torch.bfloat16):
        logits_q = logits_q.float()
    logp, logq = F.log_softmax(logits_p, dim=-1), F.log_softmax(logits_q, dim=-1)  # (B, K)
    return (logp.exp() * (logp - logq)).sum(dim=-1)  # (B,)


@contextlib.contextmanager
def _same_noise(x: torch.Tensor):
    """Inside: the global RNG (CPU, and x's CUDA device) starts from its state on entry; on exit
    it is put back. Two passes each wrapped in this draw the same network noise."""
    devices = [x.device.index if x.device.index is not None else torch.cuda.current_device()] if x.is_cuda else []
    with torch.random.fork_rng(devices=devices):
        yield


@contextlib.contextmanager
def no_tf32():
    """Inside: float32 convolutions and matmuls in full float32 (cuDNN and cuBLAS TF32 off); the
    previous settings are restored after, also when the body raises."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def vat_direction(model: nn.Module, x0: torch.Tensor, xi: float = 1e-3, steps: int = 1,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """VAT's adversarial direction d (B, ...), unit L2 norm per sample, detached.

    d ~ N(0, I) from `generator`, normalised; then `steps` power iterations
        d <- normalize( grad_r KL(p(x0) || p(x0 + r)) at r = xi d ),   p(x0) detached,
    i.e. d <- H d / ||H d|| to first order, H the Hessian of the KL at x0 (per sample, up to
    train-mode BatchNorm coupling): d tends to H's top eigenvector, the direction whose
    prediction changes most. All passes use batch statistics without updating the BN
    running statistics, replay one RNG state and run without autocast and without TF32
    (module docstring).
    Parameter .grad fields are not touched. A zero gradient (e.g. xi below the rounding
    error) gives d = 0, hence x* = x0.
    """
    _check_input(x0)
    x0 = x0.detach()
    d = _unit(_gaussian_like(x0, generator))  # (B, ...)
    full_precision = torch.autocast(x0.device.type, enabled=False)  # a finite difference needs it
    with frozen_bn_stats(model), torch.enable_grad(), full_precision, no_tf32():
        with _same_noise(x0), torch.no_grad():
            logits0 = model(x0)  # (B, K) p(x0), a constant
        for _ in range(int(steps)):
            r = (xi * d).requires_grad_(True)
            with _same_noise(x0):
                kl = kl_logits(logits0, model(x0 + r)).sum()  # samples independent: sum, not mean
            (g,) = torch.autograd.grad(kl, r)  # ~ xi H d: tiny, so rescale before EPS can matter
            d = _unit(_scale_to_max_one(g.detach()))
    return d


def _scale_to_max_one(g: torch.Tensor) -> torch.Tensor:
    """g / max|g| per sample (as VAT's code), so that a tiny g keeps its direction through _unit; 0 stays 0."""
    m = g.flatten(1).abs().amax(dim=1).view(-1, *([1] * (g.dim() - 1)))  # (B, 1, ..., 1)
    return g / m.clamp(min=torch.finfo(g.dtype).tiny)


def _gaussian_like(x0: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """u ~ N(0, I) of x0's shape, dtype and device, drawn with `generator` (on its own device)."""
    dev = x0.device if generator is None else generator.device
    u = torch.randn(x0.shape, generator=generator, device=dev, dtype=x0.dtype)
    return u.to(x0.device)


def _check_input(x: torch.Tensor):
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 2:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        dtype = x.dtype if isinstance(x, torch.Tensor) else ""
        raise ValueError(f"x must be a floating-point tensor of shape (B, ...) with a batch axis, "
                         f"got {got} {dtype}; convert inputs with x.float() and keep the batch axis")
