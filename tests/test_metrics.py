"""Metrics against autograd's full Jacobian, known predictions and counts.

    pytest tests/test_metrics.py -q
"""
import json

import numpy as np
import pytest
import torch
import torch.nn as nn

from trainables.metrics import error_rate, histogram, sensitivity


def conv_bn_dropout(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.LeakyReLU(0.1), nn.Dropout(0.5),
                         nn.Flatten(), nn.Linear(3 * 4 * 4, 5))


def full_jacobian_norms(model, x):
    """Reference: per sample, autograd's Jacobian of softmax(model(x_b)) w.r.t. x_b, Frobenius norm."""
    out = []
    for xb in x:
        J = torch.autograd.functional.jacobian(lambda v: torch.softmax(model(v[None]), -1)[0], xb)  # (K, C, H, W)
        out.append(J.flatten().norm())
    return torch.stack(out)


def test_sensitivity_equals_frobenius_norm_of_full_jacobian():
    model = conv_bn_dropout().train()
    for _ in range(3):
        model(torch.randn(8, 2, 4, 4) * 2 + 1)  # non-trivial running statistics
    x = torch.randn(7, 2, 4, 4)
    s = sensitivity(model, x, chunk=3)  # chunks of 3, 3, 1
    assert model.training  # mode restored
    model.eval()
    ref = full_jacobian_norms(model, x)
    assert s.shape == (7,) and not s.requires_grad
    assert torch.allclose(s, ref, rtol=1e-4, atol=1e-7)
    assert (s > 0).all()


def test_sensitivity_of_linear_softmax_closed_form():
    """p = softmax(Wx): J = (diag p - p p^T) W."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3, bias=False)).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    W = model[0].weight
    ref = []
    for xb in x:
        p = torch.softmax(W @ xb, -1)
        ref.append(((torch.diag(p) - p[:, None] * p[None]) @ W).norm())
    assert torch.allclose(sensitivity(model, x), torch.stack(ref).float(), rtol=1e-5)


def test_sensitivity_restores_per_module_modes_and_leaves_grads():
    model = conv_bn_dropout().train()
    model[1].eval()  # a frozen BN inside a training model stays frozen
    before = [m.training for m in model.modules()]
    sensitivity(model, torch.randn(2, 2, 4, 4))
    assert [m.training for m in model.modules()] == before
    assert all(p.grad is None for p in model.parameters())
    model.eval()
    sensitivity(model, torch.randn(2, 2, 4, 4))
    assert not model.training


def test_sensitivity_is_deterministic_in_eval_mode_despite_dropout():
    model = conv_bn_dropout().train()
    x = torch.randn(4, 2, 4, 4)
    assert torch.equal(sensitivity(model, x), sensitivity(model, x))
    with torch.no_grad():  # works when called without grad enabled
        assert torch.allclose(sensitivity(model, x, chunk=1), sensitivity(model, x), rtol=1e-5)


def test_sensitivity_rejects_bad_input():
    with pytest.raises(ValueError, match="floating-point"):
        sensitivity(conv_bn_dropout(), torch.ones(2, 2, 4, 4, dtype=torch.long))


class FixedPredictions(nn.Module):
    """Predicts class x[:, 0] (an integer stored as float); counts calls and records its mode."""

    def __init__(self, k=4):
        super().__init__()
        self.k, self.modes = k, []
        self.drop = nn.Dropout(0.9)

    def forward(self, x):
        self.modes.append(self.training)
        return torch.nn.functional.one_hot(x[:, 0].long(), self.k).float() + 0 * self.drop(x[:, :1])


def test_error_rate_on_known_predictions():
    pred = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 0, 1])
    y = torch.tensor([0, 1, 2, 0, 0, 3, 2, 3, 1, 1])  # 3 of 10 wrong
    x = torch.stack([pred.float(), torch.zeros(10)], dim=1)
    model = FixedPredictions().train()
    assert error_rate(model, x, y, batch=3) == pytest.approx(30.0)
    assert model.modes == [False] * 4  # batches of 3, 3, 3, 1, all in eval mode
    assert model.training
    assert error_rate(model, x, pred) == 0.0
    with pytest.raises(ValueError, match="same non-zero number"):
        error_rate(model, x, y[:5])


def test_histogram_counts_and_edges_against_numpy():
    rng = np.random.default_rng(0)
    v = rng.gamma(2.0, size=500)
    h = histogram(torch.tensor(v), bins=12)
    counts, edges = np.histogram(v, bins=12)
    assert h["counts"] == counts.tolist() and np.allclose(h["edges"], edges)
    assert sum(h["counts"]) == 500 and len(h["edges"]) == 13
    json.dumps(h)  # plain Python types


def test_histogram_fixed_range_keeps_every_finite_value():
    v = torch.tensor([-1.0, 0.0, 0.5, 0.99, 1.0, 7.0, float("nan"), float("inf")])
    h = histogram(v, bins=2, range=(0, 1))
    assert h["edges"] == [0.0, 0.5, 1.0]
    assert h["counts"] == [2, 4]  # -1 clipped to the first bin, 7 and 1.0 to the last; nan, inf dropped
    assert sum(histogram(torch.rand(37), bins=5)["counts"]) == 37
    with pytest.raises(ValueError, match="range"):
        histogram(v, range=(1, 1))
    with pytest.raises(ValueError, match="bins"):
        histogram(v, bins=0)
