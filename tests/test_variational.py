"""Tests for trainables/variational.py: KL values, local reparameterization vs Monte Carlo
weight sampling, mean weights, sparsity threshold, clipping, gradient paths.

    pytest tests/test_variational.py -q
"""
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from trainables.variational import (VDConv2d, VDLinear, kl_divergence, mean_weights, sparsity,
                                    vd_layers)


def _neg_kl_np(log_alpha):
    """Molchanov et al. 2017 eq. 14 in float64 numpy, written independently of the module."""
    k1, k2, k3 = 0.63576, 1.87320, 1.48695
    a = np.asarray(log_alpha, dtype=np.float64)
    return k1 / (1 + np.exp(-(k2 + k3 * a))) - 0.5 * np.log1p(np.exp(-a)) - k1


def _set_log_alpha(layer, log_alpha):
    """theta = 1 makes log(theta^2) == 0, so log_alpha == log_sigma2 exactly."""
    with torch.no_grad():
        layer.theta.fill_(1.0)
        layer.log_sigma2.copy_(torch.as_tensor(log_alpha, dtype=torch.float32).reshape(layer.theta.shape))


# ---------------------------------------------------------------- KL
def test_kl_matches_formula_for_one_layer():
    layer = VDLinear(4, 3)
    la = np.linspace(-7.5, 7.5, 12).reshape(3, 4)
    _set_log_alpha(layer, la)
    assert torch.equal(layer.log_alpha, torch.tensor(la, dtype=torch.float32))
    kl = kl_divergence(layer)
    assert kl.dim() == 0
    np.testing.assert_allclose(kl.item(), -_neg_kl_np(la).mean(), rtol=1e-5)


def test_kl_is_per_weight_mean_over_layers_of_different_sizes():
    rng = np.random.default_rng(0)
    a, b = VDLinear(5, 2, bias=False), VDConv2d(2, 3, 3)
    la_a = rng.uniform(-8, 8, size=(2, 5))
    la_b = rng.uniform(-8, 8, size=(3, 2, 3, 3))
    _set_log_alpha(a, la_a)
    _set_log_alpha(b, la_b)
    net = nn.Sequential(a, nn.ReLU(), nn.Sequential(b))
    expected = -(_neg_kl_np(la_a).sum() + _neg_kl_np(la_b).sum()) / (la_a.size + la_b.size)
    np.testing.assert_allclose(kl_divergence(net).item(), expected, rtol=1e-5)
    # not the mean of the per-layer means (layers have 10 and 54 weights)
    mean_of_means = -(_neg_kl_np(la_a).mean() + _neg_kl_np(la_b).mean()) / 2
    assert abs(kl_divergence(net).item() - mean_of_means) > 1e-3


def test_kl_limits_and_monotonicity():
    layer = VDLinear(1, 1, bias=False)                  # one weight: kl_divergence is its KL
    grid = np.linspace(-8, 8, 161)
    kl = []
    for la in grid:
        _set_log_alpha(layer, [[la]])
        kl.append(kl_divergence(layer).item())
    kl = np.array(kl)
    np.testing.assert_allclose(kl, -_neg_kl_np(grid), rtol=1e-5, atol=1e-7)
    assert (kl > 0).all()                               # a KL is non-negative
    assert (np.diff(kl) < 0).all()                      # decreasing in alpha (more noise, closer to prior)
    assert kl[-1] < 1e-3                                # log_alpha = 8: almost the log-uniform prior
    # log_alpha -> -inf: sigmoid -> 0, so KL -> 0.5 log1p(exp(-log_alpha)) + k1 (about 4.64 at -8)
    np.testing.assert_allclose(kl[0], 0.5 * math.log1p(math.exp(8)) + 0.63576, rtol=1e-4)
    _set_log_alpha(layer, [[50.0]])                     # clipped to 8: same KL as at 8
    assert kl_divergence(layer).item() == pytest.approx(kl[-1], rel=1e-6)


def test_kl_zero_without_vd_layers_and_differentiable():
    kl = kl_divergence(nn.Linear(3, 2))
    assert kl.dim() == 0 and kl.item() == 0.0
    layer = VDConv2d(2, 2, 3)
    kl_divergence(layer).backward()
    # KL depends on log_alpha only, which depends on both theta and log_sigma2
    assert layer.log_sigma2.grad.abs().sum() > 0 and layer.theta.grad.abs().sum() > 0
    # larger log_sigma2 -> larger alpha -> smaller KL
    assert (layer.log_sigma2.grad <= 0).all()


# ---------------------------------------------------------------- log_alpha, sparsity
def test_log_alpha_definition_and_clipping():
    """log_alpha = clip(log_sigma2 - log(clip(theta^2, 1e-15, 1e30)), -8, 8), the authors' svd.py."""
    layer = VDLinear(5, 1, bias=False)
    with torch.no_grad():
        layer.theta.copy_(torch.tensor([[0.5, 2.0, 1e-3, 0.0, 1e-9]]))
        layer.log_sigma2.copy_(torch.tensor([[-1.0, 20.0, -10.0, -40.0, -40.0]]))
    la = layer.log_alpha.detach().numpy()[0].astype(np.float64)
    np.testing.assert_allclose(la[0], -1.0 - np.log(0.25), rtol=1e-6)
    assert la[1] == 8.0                                 # 20 - log 4 = 18.6 -> clipped to 8
    np.testing.assert_allclose(la[2], -10.0 - np.log(1e-6), rtol=1e-5)  # 3.8, inside
    # theta^2 below 1e-15 counts as 1e-15: -40 - log(1e-15) = -5.46 for theta = 0 and theta = 1e-9 alike
    # (log(theta^2 + 1e-8) would give -21.6, clipped to -8, a weight far from pruned)
    np.testing.assert_allclose(la[3:], -40.0 - np.log(1e-15), rtol=1e-5)
    with torch.no_grad():
        layer.log_sigma2.fill_(-30.0)
    assert (layer.log_alpha[0, :3] == -8.0).all()


def test_sparsity_counts_log_alpha_at_least_3():
    a, b = VDLinear(4, 2), VDConv2d(1, 1, 2)
    la_a = np.array([[-8.0, 2.99, 3.0, 3.01], [8.0, 0.0, -3.0, 2.0]])   # 3 pruned (3.0 counts)
    la_b = np.array([2.999, 3.0, 5.0, -1.0])                              # 2 pruned
    _set_log_alpha(a, la_a)
    _set_log_alpha(b, la_b)
    assert (a.log_alpha == 3.0).sum() == 1              # the threshold value is hit exactly
    net = nn.Sequential(a, nn.Linear(2, 2), b)          # the plain Linear does not count
    assert sparsity(net) == pytest.approx(5 / 12, abs=0)
    assert sparsity(a) == 3 / 8 and sparsity(b) == 2 / 4
    assert math.isnan(sparsity(nn.Linear(2, 2)))
    assert isinstance(sparsity(net), float)


# ---------------------------------------------------------------- forward: deterministic paths
@pytest.mark.parametrize("make,x_shape,op", [
    (lambda: VDLinear(5, 3), (4, 5), lambda x, l: F.linear(x, l.theta, l.bias)),
    (lambda: VDConv2d(2, 3, 3, stride=2, padding=1), (2, 2, 7, 7),
     lambda x, l: F.conv2d(x, l.theta, l.bias, 2, 1)),
])
def test_eval_and_mean_weights_use_theta(make, x_shape, op):
    torch.manual_seed(0)
    layer = make()
    with torch.no_grad():
        layer.log_sigma2.fill_(0.0)                     # large noise, so sampling would show
        layer.bias.normal_()
    x = torch.randn(x_shape)
    expected = op(x, layer).detach()
    layer.eval()
    torch.testing.assert_close(layer(x), expected)
    layer.train()
    assert not torch.allclose(layer(x), expected, atol=1e-2)   # train mode samples
    with mean_weights(layer):
        assert layer.sample is False
        torch.testing.assert_close(layer(x), expected)
        torch.testing.assert_close(layer(x), expected)
    assert layer.sample is True
    assert not torch.allclose(layer(x), expected, atol=1e-2)



@pytest.mark.parametrize("make,x_shape,op", [
    (lambda: VDLinear(5, 3), (4, 5), lambda x, l, w: F.linear(x, w, l.bias)),
    (lambda: VDConv2d(2, 3, 3, stride=2, padding=1), (2, 2, 7, 7), lambda x, l, w: F.conv2d(x, w, l.bias, 2, 1)),
])
def test_masked_mean_weights_zero_the_pruned_weights(make, x_shape, op):
    """masked (vd_masked): the deterministic passes, in eval mode and under mean_weights, use theta with the
    weights of log alpha >= 3 zeroed (the authors' MASKED_WEIGHT_MODE); sampling is as without the mask."""
    torch.manual_seed(0)
    layer = make()
    with torch.no_grad():
        pruned = torch.rand_like(layer.theta) < 0.4
        layer.log_sigma2.copy_(torch.where(pruned, 3.5 + torch.log(layer.theta ** 2), torch.full_like(layer.theta, -10.0)))
        layer.bias.normal_()
    assert torch.equal(layer.log_alpha >= 3, pruned) and pruned.any()
    x = torch.randn(x_shape)
    masked = op(x, layer, layer.theta * ~pruned).detach()
    plain = op(x, layer, layer.theta).detach()
    layer.masked = True
    layer.eval()
    torch.testing.assert_close(layer(x), masked)
    assert not torch.allclose(masked, plain, atol=1e-3)
    layer.train()
    with mean_weights(layer):
        torch.testing.assert_close(layer(x), masked)
    torch.manual_seed(1)
    noisy = layer(x)
    layer.masked = False
    torch.manual_seed(1)
    torch.testing.assert_close(layer(x), noisy)                  # the sampled pass does not mask
    layer.eval()
    torch.testing.assert_close(layer(x), plain)


def test_vd_masked_reaches_every_vd_layer_of_the_built_network():
    import copy

    from trainables.config import TrainConfig
    from trainables.models import build_model
    for masked in (False, True):
        net = build_model(TrainConfig(vd=True, vd_masked=masked))
        layers = [m for m in copy.deepcopy(net).modules() if isinstance(m, (VDConv2d, VDLinear))]  # a teacher's copy
        assert layers and all(m.masked is masked for m in layers)


def test_mean_weights_restores_previous_values_even_on_exception():
    a, b = VDLinear(2, 2), VDLinear(2, 2)
    b.sample = False
    net = nn.Sequential(a, b)
    assert len(list(vd_layers(net))) == 2
    with pytest.raises(RuntimeError):
        with mean_weights(net):
            assert not a.sample and not b.sample
            raise RuntimeError("boom")
    assert a.sample is True and b.sample is False


# ---------------------------------------------------------------- local reparameterization vs MC
def _compare_moments(y_layer, y_mc):
    """y_*: (N, ...) samples of the same output distribution; 5 standard errors on mean and var."""
    n = y_layer.shape[0]
    m1, m2 = y_layer.mean(0), y_mc.mean(0)
    v1, v2 = y_layer.var(0), y_mc.var(0)
    se_mean = torch.sqrt(v1 / n + v2 / n)
    se_var = torch.sqrt(torch.tensor(2.0 / (n - 1))) * torch.sqrt(v1 ** 2 + v2 ** 2)
    assert ((m1 - m2).abs() <= 5 * se_mean).all(), ((m1 - m2).abs() / se_mean).max()
    assert ((v1 - v2).abs() <= 5 * se_var).all(), ((v1 - v2).abs() / se_var).max()


def _init_noisy(layer, gen):
    with torch.no_grad():
        layer.theta.copy_(torch.randn(layer.theta.shape, generator=gen))
        alpha = torch.empty(layer.theta.shape).uniform_(0.1, 3.0, generator=gen)
        layer.log_sigma2.copy_(torch.log(alpha) + torch.log(layer.theta ** 2))
        if layer.bias is not None:
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen))
    return alpha  # sigma^2 = alpha theta^2 (inside the clip range)


def test_local_reparameterization_linear_matches_weight_sampling():
    gen = torch.Generator().manual_seed(1)
    n = 20000
    layer = VDLinear(6, 3).train()
    alpha = _init_noisy(layer, gen)
    x = torch.randn(4, 6, generator=gen)                                    # (B, in)
    torch.manual_seed(2)
    with torch.no_grad():
        y_layer = layer(x.repeat(n, 1)).reshape(n, 4, 3)                    # (N, B, out)
        std = torch.sqrt(alpha) * layer.theta.abs()
        w = layer.theta + std * torch.randn((n, 3, 6), generator=gen)      # (N, out, in)
        y_mc = torch.einsum("bi,noi->nbo", x, w) + layer.bias              # (N, B, out)
    _compare_moments(y_layer, y_mc)
    # and the exact moments of op(x, w), w ~ N(theta, alpha theta^2), lie inside the MC error
    var_exact = (x ** 2) @ (alpha * layer.theta.detach() ** 2).T
    assert ((y_layer.var(0) - var_exact).abs() <= 5 * var_exact * math.sqrt(2 / n)).all()


def test_local_reparameterization_conv_matches_weight_sampling():
    gen = torch.Generator().manual_seed(3)
    n, b, cin, cout, k = 4000, 2, 2, 3, 3
    layer = VDConv2d(cin, cout, k, padding=1).train()
    alpha = _init_noisy(layer, gen)
    x = torch.randn(b, cin, 5, 5, generator=gen)
    torch.manual_seed(4)
    with torch.no_grad():
        y_layer = layer(x.repeat(n, 1, 1, 1)).reshape(n, b, cout, 5, 5)
        std = torch.sqrt(alpha) * layer.theta.abs()
        w = layer.theta + std * torch.randn((n,) + tuple(layer.theta.shape), generator=gen)
        y_mc = F.conv2d(x, w.reshape(n * cout, cin, k, k), padding=1)     # (B, N*out, 5, 5)
        y_mc = y_mc.reshape(b, n, cout, 5, 5).transpose(0, 1) + layer.bias[:, None, None]
    _compare_moments(y_layer, y_mc)


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("make,x_shape", [(lambda: VDLinear(5, 4), (64, 5)),
                                          (lambda: VDConv2d(2, 3, 3, padding=1), (16, 2, 4, 4))])
def test_gradients_reach_theta_and_log_sigma2(make, x_shape):
    torch.manual_seed(0)
    layer = make()
    with torch.no_grad():                               # |theta| >= 0.2, log_sigma2 = -2: log_alpha
        layer.theta.copy_(torch.sign(layer.theta) * torch.empty_like(layer.theta).uniform_(0.2, 1))
        layer.log_sigma2.fill_(-2.0)                    # in [-2, 1.3], inside the clip range
    x = torch.randn(x_shape)
    layer.train()
    y = layer(x)
    with torch.no_grad(), mean_weights(layer):
        mu = layer(x)
    # the squared deviation from the mean grows with every sigma^2: dL/dlog_sigma2 > 0 everywhere
    ((y - mu) ** 2).sum().backward()
    assert (layer.log_sigma2.grad > 0).all()
    assert torch.isfinite(layer.theta.grad).all() and layer.theta.grad.abs().sum() > 0
    # the mean path carries theta's gradient: with inputs of mean 1, the noise term's gradient
    # (zero mean, O(sqrt(B))) is small next to the mean term's (O(B))
    x1 = 1 + torch.randn((4096,) + tuple(x_shape[1:]))
    layer.zero_grad(set_to_none=True)
    layer(x1).sum().backward()
    g_sampled = layer.theta.grad.clone()
    layer.zero_grad(set_to_none=True)
    with mean_weights(layer):
        layer(x1).sum().backward()
    torch.testing.assert_close(g_sampled, layer.theta.grad, rtol=0.1, atol=0.0)
    # the mean path alone gives theta a gradient and log_sigma2 none
    layer.zero_grad(set_to_none=True)
    with mean_weights(layer):
        layer(x).sum().backward()
    assert layer.log_sigma2.grad is None and layer.theta.grad.abs().sum() > 0


def test_bf16_autocast_and_channels_last():
    torch.manual_seed(0)
    layer = VDConv2d(3, 4, 3, padding=1).train()
    x = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    y.float().sum().backward()
    assert torch.isfinite(layer.log_sigma2.grad).all()


def test_vd_noise_is_drawn_in_logical_order_whatever_the_memory_format():
    """A VD conv in train mode draws its N(0, 1) noise in logical (NCHW) order: from one seed an NCHW and a
    channels_last layer and input give the same sample to float rounding (noise drawn in memory order
    would put other draws at most positions: differences of order sigma), and the NCHW sample is
    mean + sqrt(var + eps) * torch.randn(shape)."""
    from trainables.variational import EPS

    torch.manual_seed(0)
    layer = VDConv2d(3, 5, 3, padding=1)
    with torch.no_grad():
        layer.log_sigma2.fill_(0.0)  # large variance: the noise dominates the output
    x = torch.randn(4, 3, 6, 6)
    out = {}
    for fmt in (torch.contiguous_format, torch.channels_last):
        m = VDConv2d(3, 5, 3, padding=1)
        m.load_state_dict(layer.state_dict())
        m = m.to(memory_format=fmt)
        torch.manual_seed(1)
        out[fmt] = m(x.contiguous(memory_format=fmt)).detach()
    torch.testing.assert_close(out[torch.channels_last], out[torch.contiguous_format], rtol=1e-5, atol=1e-5)
    mean = F.conv2d(x, layer.theta, layer.bias, padding=1)
    var = F.conv2d(x * x, torch.exp(layer.log_alpha) * layer.theta ** 2, padding=1)
    torch.manual_seed(1)
    want = mean + torch.sqrt(var.clamp_min(0) + EPS) * torch.randn(mean.shape)
    torch.testing.assert_close(out[torch.contiguous_format], want.detach(), rtol=1e-5, atol=1e-5)
