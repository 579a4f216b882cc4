"""MUR virtual points against closed forms on a linear-softmax model, autograd and geometry.

    pytest tests/test_mur.py -q
"""
import math

import pytest
import torch
import torch.nn as nn

from trainables.mur import METHODS, entropy, entropy_grad, frozen_bn_stats, virtual_point, virtual_point_examples


# ---------------------------------------------------------------- tiny models and closed forms
def linear_model(D=5, K=4, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D, K)).double()


def mlp(D=6, K=4, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D, 16), nn.Tanh(), nn.Linear(16, K)).double()


def conv_bn(seed=0, momentum=0.1):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4, momentum=momentum), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 5 * 5, 3))


def closed_form_grad(lin: nn.Linear, x):
    """dH/dx for p = softmax(W x + b): -W^T [p * (log p + H)] per sample.  x (B, D) -> (B, D)."""
    logp = torch.log_softmax(x @ lin.weight.T + lin.bias, dim=-1)  # (B, K)
    p = logp.exp()
    H = -(p * logp).sum(-1, keepdim=True)  # (B, 1)
    return -(p * (logp + H)) @ lin.weight  # (B, D)


def per_sample_norm(x):
    return x.flatten(1).norm(dim=1)  # (B,)


def bn_buffers(model):
    return [b.clone() for m in model.modules() if isinstance(m, nn.BatchNorm2d)
            for b in (m.running_mean, m.running_var, m.num_batches_tracked)]


# ---------------------------------------------------------------- entropy
def test_entropy_matches_definition_and_is_stable():
    torch.manual_seed(0)
    logits = torch.randn(7, 5, dtype=torch.float64) * 3
    p = torch.softmax(logits, -1)
    assert torch.allclose(entropy(logits), -(p * p.log()).sum(-1))
    assert torch.allclose(entropy(torch.zeros(3, 10)), torch.full((3,), math.log(10.0)))
    big = entropy(logits + 1e4)  # shift invariance, no overflow
    assert torch.isfinite(big).all() and torch.allclose(big, entropy(logits))
    onehot = entropy(torch.tensor([[1e4, 0.0, 0.0]]))
    assert torch.isfinite(onehot).all() and onehot.item() == pytest.approx(0.0, abs=1e-6)
    assert entropy(torch.randn(2, 3, dtype=torch.bfloat16)).dtype == torch.float32


# ---------------------------------------------------------------- g0
def test_closed_form_entropy_gradient_matches_autograd():
    model = linear_model()
    x = torch.randn(6, 5, dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(entropy(model(xr)).sum(), xr)
    assert torch.allclose(closed_form_grad(model[0], x), auto, atol=1e-12)


def test_entropy_grad_is_closed_form_and_leaves_parameters_alone():
    model = linear_model()
    x = torch.randn(6, 5, dtype=torch.float64)
    g = entropy_grad(model, x)
    assert g.shape == x.shape and g.dtype == x.dtype and not g.requires_grad
    assert torch.allclose(g, closed_form_grad(model[0], x), atol=1e-12)
    assert all(p.grad is None for p in model.parameters())
    for p in model.parameters():  # existing .grad values are not accumulated into either
        p.grad = torch.ones_like(p)
    entropy_grad(model, x)
    assert all(torch.equal(p.grad, torch.ones_like(p)) for p in model.parameters())


def test_entropy_grad_works_under_no_grad():
    model = linear_model()
    x = torch.randn(3, 5, dtype=torch.float64)
    with torch.no_grad():
        g = entropy_grad(model, x)
    assert torch.allclose(g, closed_form_grad(model[0], x), atol=1e-12)


# ---------------------------------------------------------------- direct
@pytest.mark.parametrize("r", [0.3, 2.0, 10.0])
def test_direct_is_closed_form_at_distance_r(r):
    model = linear_model()
    x0 = torch.randn(8, 5, dtype=torch.float64)
    g = closed_form_grad(model[0], x0)
    expected = x0 + r * g / g.norm(dim=1, keepdim=True)
    xs = virtual_point(model, x0, r, method="direct")
    assert xs.shape == x0.shape and xs.dtype == x0.dtype
    assert torch.allclose(xs, expected, atol=1e-9)
    assert torch.allclose(per_sample_norm(xs - x0), torch.full((8,), r, dtype=torch.float64), rtol=1e-5)


def test_direct_norm_is_over_all_non_batch_axes():
    model = conv_bn()
    x0 = torch.randn(4, 2, 5, 5)
    xs = virtual_point(model, x0, 1.5)
    assert torch.allclose(per_sample_norm(xs - x0), torch.full((4,), 1.5), rtol=1e-5)
    g0 = torch.randn(4, 2, 5, 5)  # a given g0 is used as the direction
    xs = virtual_point(model, x0, 1.5, g0=g0)
    assert torch.allclose(xs, x0 + 1.5 * g0 / per_sample_norm(g0).view(4, 1, 1, 1), atol=1e-5)


def test_direct_zero_gradient_does_not_divide_by_zero():
    model = nn.Sequential(nn.Linear(3, 4))
    nn.init.zeros_(model[0].weight)  # uniform prediction everywhere: g0 = 0
    x0 = torch.randn(2, 3)
    xs = virtual_point(model, x0, 5.0)
    assert torch.isfinite(xs).all() and torch.allclose(xs, x0)


# ---------------------------------------------------------------- pga
@pytest.mark.parametrize("step_size", [0.01, 0.3, 3.0, 100.0])
def test_pga_stays_in_ball_at_every_step(step_size):
    model, r = mlp(), 0.7
    x0 = torch.randn(10, 6, dtype=torch.float64)
    for steps in range(1, 6):
        xs = virtual_point(model, x0, r, method="pga", step_size=step_size, steps=steps)
        assert (per_sample_norm(xs - x0) <= r * (1 + 1e-9)).all()


@pytest.mark.parametrize("method", ["pga", "ga"])
def test_one_step_is_the_direct_point_whatever_the_step_size(method):
    """The authors' code uses the direct approximation whenever mur_opt_steps == 1 (iterations start at 2)."""
    model, r = linear_model(), 1.3
    x0 = torch.randn(8, 5, dtype=torch.float64)
    g = closed_form_grad(model[0], x0)
    direct = x0 + r * g / (g.norm(dim=1, keepdim=True) + 1e-8)
    tiny = 1e-3 / g.norm(dim=1).max().item()  # a step that would stay well inside the ball
    for a in (tiny, 1.0, 1e6):
        assert torch.allclose(virtual_point(model, x0, r, method, step_size=a, steps=1), direct, atol=1e-12)
    # two steps do iterate: with the tiny step pga is far inside the ball, not on the sphere
    assert (per_sample_norm(virtual_point(model, x0, r, method, step_size=tiny, steps=2) - x0) < r / 10).all()


def test_pga_two_steps_match_manual_iteration():
    model, r, a = linear_model(), 0.8, 2.0
    x0 = torch.randn(8, 5, dtype=torch.float64)

    def project(x):
        d = x - x0
        n = d.norm(dim=1, keepdim=True)
        return torch.where(n > r, x0 + r * d / n, x)

    x1 = project(x0 + a * closed_form_grad(model[0], x0))
    x2 = project(x1 + a * closed_form_grad(model[0], x1))
    assert torch.allclose(virtual_point(model, x0, r, "pga", step_size=a, steps=2), x2, atol=1e-7)


def test_pga_increases_entropy():
    model, r = mlp(seed=1), 0.5
    torch.manual_seed(1)
    x0 = torch.randn(16, 6, dtype=torch.float64) * 2
    xs = virtual_point(model, x0, r, method="pga", step_size=0.05, steps=8)
    with torch.no_grad():
        h0, hs = entropy(model(x0)), entropy(model(xs))
    assert (hs > h0).all()
    assert (per_sample_norm(xs - x0) > 0).all()


# ---------------------------------------------------------------- ga
def test_ga_first_iteration_is_plain_ascent_from_x0():
    """Two steps: x1 = x0 + a g0 (the penalty vanishes at x0), then one full Lagrangian step from x1."""
    model, r = mlp(), 2.0
    x0 = torch.randn(5, 6, dtype=torch.float64)
    g0 = entropy_grad(model, x0)
    lam = g0.norm(dim=1, keepdim=True) / r
    for a in (0.1, 1.0, 10.0):
        x1 = x0 + a * g0
        d = x1 - x0
        x2 = x1 + a * (entropy_grad(model, x1) - lam * d * (2 - r / d.norm(dim=1, keepdim=True)))
        assert torch.allclose(virtual_point(model, x0, r, "ga", step_size=a, steps=2), x2)


def test_ga_three_steps_match_lagrangian_update():
    model, r, a = linear_model(), 1.5, 0.7
    x0 = torch.randn(6, 5, dtype=torch.float64)
    g0 = closed_form_grad(model[0], x0)
    lam = g0.norm(dim=1, keepdim=True) / r  # ||g0|| / r
    x = x0 + a * g0
    for _ in range(2):
        d = x - x0
        dF = closed_form_grad(model[0], x) - lam * d * (2 - r / d.norm(dim=1, keepdim=True))
        x = x + a * dF
    assert torch.allclose(virtual_point(model, x0, r, "ga", step_size=a, steps=3), x, atol=1e-7)


def test_ga_penalty_term_with_flat_entropy():
    """H flat (zero weights): the update is the penalty alone, d <- d (1 - a (||g0||/r)(2 - r/||d||)),
    which pulls ||d|| towards r/2 from outside and pushes it out from inside."""
    model = nn.Sequential(nn.Linear(3, 4)).double()
    nn.init.zeros_(model[0].weight)
    x0 = torch.randn(4, 3, dtype=torch.float64)
    g0 = torch.randn(4, 3, dtype=torch.float64)
    g0 = g0 / g0.norm(dim=1, keepdim=True)  # ||g0|| = 1, so lambda = 1 / r
    r = 2.0
    for a, d1, d2 in [(1.5, 1.5, 0.75), (0.5, 0.5, 0.75)]:  # d2 = d1 (1 - a/r (2 - r/d1))
        x2 = virtual_point(model, x0, r, "ga", step_size=a, steps=2, g0=g0)
        assert torch.allclose(x2, x0 + d2 * g0, atol=1e-12)
        assert d2 == pytest.approx(d1 * (1 - a / r * (2 - r / d1)))


# ---------------------------------------------------------------- random (RR)
def test_random_at_distance_r_and_isotropic():
    model, n, D, r = linear_model(D=8), 4000, 8, 3.0
    x0 = torch.randn(n, D, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    xs = virtual_point(model, x0, r, method="random", generator=gen)
    assert torch.allclose(per_sample_norm(xs - x0), torch.full((n,), r, dtype=torch.float64), rtol=1e-7)
    u = (xs - x0) / r  # unit directions
    assert u.mean(0).norm() < 0.06  # each coordinate of the mean has sd 1/sqrt(n D) ~ 0.006
    assert torch.allclose(u.T @ u / n, torch.eye(D, dtype=torch.float64) / D, atol=0.02)  # E[u u^T] = I/D


def test_random_is_reproducible_with_generator():
    model = conv_bn()
    x0 = torch.randn(3, 2, 5, 5)
    a = virtual_point(model, x0, 1.0, "random", generator=torch.Generator().manual_seed(5))
    b = virtual_point(model, x0, 1.0, "random", generator=torch.Generator().manual_seed(5))
    c = virtual_point(model, x0, 1.0, "random", generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.allclose(a, c)


# ---------------------------------------------------------------- no gradient through x*
@pytest.mark.parametrize("method", METHODS)
def test_no_gradient_flows_into_x_star(method):
    model = conv_bn()
    leaf = torch.randn(4, 2, 5, 5, requires_grad=True)
    x0 = leaf * 2.0  # a non-leaf with a graph behind it
    g0 = entropy_grad(model, x0).requires_grad_(True)
    for given in (None, g0):
        xs = virtual_point(model, x0, 1.0, method, step_size=0.5, steps=3, g0=given)
        assert not xs.requires_grad and xs.grad_fn is None
    assert leaf.grad is None
    assert all(p.grad is None for p in model.parameters())


# ---------------------------------------------------------------- batch norm policy
@pytest.mark.parametrize("method", METHODS)
def test_virtual_point_keeps_bn_running_stats(method):
    model = conv_bn().train()
    for _ in range(3):
        model(torch.randn(8, 2, 5, 5))  # non-trivial running stats
    before = bn_buffers(model)
    virtual_point(model, torch.randn(8, 2, 5, 5), 1.0, method, steps=3)
    after = bn_buffers(model)
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert model.training


@pytest.mark.parametrize("momentum", [0.1, None])  # None: cumulative moving average
def test_frozen_bn_stats_uses_batch_stats_then_restores_updates(momentum):
    model = conv_bn(momentum=momentum).train()
    x = torch.randn(8, 2, 5, 5)
    model(torch.randn(8, 2, 5, 5))
    before = bn_buffers(model)
    with frozen_bn_stats(model):
        inside = model(x)
    assert all(torch.equal(a, b) for a, b in zip(before, bn_buffers(model)))
    outside = model(x)  # a normal train-mode pass: same batch-stat output, and it updates
    assert torch.allclose(inside, outside)
    assert not all(torch.equal(a, b) for a, b in zip(before, bn_buffers(model)))
    assert bn_buffers(model)[2].item() == before[2].item() + 1  # num_batches_tracked


def test_frozen_bn_stats_restores_on_exception():
    model = conv_bn().train()
    before = bn_buffers(model)
    with pytest.raises(RuntimeError, match="boom"):
        with frozen_bn_stats(model):
            model(torch.randn(4, 2, 5, 5))
            raise RuntimeError("boom")
    assert all(torch.equal(a, b) for a, b in zip(before, bn_buffers(model)))


# ---------------------------------------------------------------- bad input
def test_bad_arguments_raise_clear_errors():
    model, x0 = linear_model(), torch.randn(2, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="direct.*pga.*ga.*random"):
        virtual_point(model, x0, 1.0, method="fgsm")
    for r in (0.0, -1.0):
        with pytest.raises(ValueError, match="radius"):
            virtual_point(model, x0, r)
    with pytest.raises(ValueError, match="steps"):
        virtual_point(model, x0, 1.0, "pga", steps=0)
    with pytest.raises(ValueError, match="step_size"):
        virtual_point(model, x0, 1.0, "ga", step_size=0.0)
    with pytest.raises(ValueError, match="g0"):
        virtual_point(model, x0, 1.0, g0=torch.zeros(3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="floating-point"):
        virtual_point(model, torch.ones(2, 5, dtype=torch.long), 1.0)


def test_virtual_point_examples_are_closed_form_direct_points_and_change_nothing():
    """The appendix figure's data: x0 + r_k g/||g|| at r_k = r * (1/2, 1, 2, 4), with the closed-form g;
    the model's mode and BN running stats are as before."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Linear(4, 4)).double().train()
    x = torch.randn(6, 5, dtype=torch.float64)
    bn = model[1]
    before = [bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone()]
    out = virtual_point_examples(model, x, radius=0.8)
    assert model.training and all(torch.equal(a, b) for a, b in
                                  zip(before, [bn.running_mean, bn.running_var, bn.num_batches_tracked]))
    np = pytest.importorskip("numpy")
    np.testing.assert_allclose(out["radii"], [0.4, 0.8, 1.6, 3.2])
    assert out["x"].shape == (6, 5) and out["xstar"].shape == (4, 6, 5)
    # eval-mode BN is affine, so the whole net is one linear layer W x + b: closed-form gradient
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    W = model[2].weight @ (scale[:, None] * model[0].weight)
    b = model[2].weight @ (scale * (model[0].bias - bn.running_mean) + bn.bias) + model[2].bias
    lin = nn.Linear(5, 4).double()
    with torch.no_grad():
        lin.weight.copy_(W)
        lin.bias.copy_(b)
    g = closed_form_grad(lin, x).detach()
    unit = g / per_sample_norm(g)[:, None]
    for k, r in enumerate(out["radii"]):
        np.testing.assert_allclose(out["xstar"][k], (x + r * unit).numpy(), rtol=1e-5, atol=1e-6)  # stored as float32
