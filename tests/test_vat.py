"""VAT's virtual adversarial point (mur.vat_direction) and its two uses: VAT alone (method "vat")
and VAT's point inside the MUR loss (mur "vat"), checked against brute force and closed forms.

    pytest tests/test_vat.py -q
"""

import pytest
import torch
import torch.nn as nn

from search_spaces import get_sweep
from trainables.config import ConfigError, TrainConfig
from test_methods import tiny_setup
from trainables.methods import loss_terms, softmax_mse
from trainables.models import GaussianNoise
from trainables.mur import kl_logits, vat_direction, virtual_point


def mlp(D=6, K=4, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D, 16), nn.Tanh(), nn.Linear(16, K)).double()


def linear_model(D=5, K=4, seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D, K)).double()


def fisher(model, x0):
    """Hessian of r -> KL(p(x0) || p(x0 + r)) at r = 0, per sample: J^T (diag p - p p^T) J. (B, D, D)."""
    out = []
    for x in x0:
        J = torch.autograd.functional.jacobian(lambda z: model(z[None])[0], x)  # (K, D)
        p = model(x[None])[0].softmax(-1)
        out.append(J.T @ (torch.diag(p) - torch.outer(p, p)) @ J)
    return torch.stack(out)


def kl_along(model, x0, d, eps):
    """KL(p(x0) || p(x0 + eps d)) per sample. x0 (B, D), d (B, D) or (n, B, D) -> (B,) or (n, B)."""
    with torch.no_grad():
        p0 = model(x0)
        return kl_logits(p0.expand(*d.shape[:-1], -1).reshape(-1, p0.shape[-1]),
                         model((x0 + eps * d).reshape(-1, x0.shape[-1]))).view(d.shape[:-1])


def cosine(a, b):
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))


# ---------------------------------------------------------------- the direction
def test_vat_direction_beats_brute_force_search_over_random_directions():
    model, eps = mlp(), 1e-3  # eps small: the first-order (quadratic) regime of the KL
    x0 = torch.randn(12, 6, dtype=torch.float64)
    d = vat_direction(model, x0, xi=1e-5, steps=20, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(d.norm(dim=1), torch.ones(12, dtype=torch.float64))
    u = torch.randn(5000, 12, 6, dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True)  # 5000 random unit directions per sample
    kl_vat, kl_rand = kl_along(model, x0, d, eps), kl_along(model, x0, u, eps)  # (12,), (5000, 12)
    assert (kl_vat >= kl_rand.max(0).values).all()
    # and the best random direction is far from VAT's gain on average: the search is not trivial
    assert (kl_vat / kl_rand.mean(0)).min() > 1.5


def test_vat_direction_is_the_top_eigenvector_of_the_kl_hessian():
    for model in (mlp(seed=1), linear_model()):
        D = model[0].in_features
        x0 = torch.randn(8, D, dtype=torch.float64)
        lam, V = torch.linalg.eigh(fisher(model, x0))  # ascending
        gap = lam[:, -2] / lam[:, -1]
        assert (gap < 0.8).all()  # the power iteration converges within 40 steps: a meaningful check
        d = vat_direction(model, x0, xi=1e-5, steps=40, generator=torch.Generator().manual_seed(0))
        assert (cosine(d, V[:, :, -1]).abs() > 0.999).all()


def test_one_power_iteration_raises_the_kl_of_its_start():
    """d1 = H d0 / ||H d0|| has a larger Rayleigh quotient than d0 for PSD H: KL(d1) >= KL(d0)."""
    model, eps = mlp(seed=2), 1e-3
    x0 = torch.randn(16, 6, dtype=torch.float64)
    d0 = vat_direction(model, x0, steps=1, generator=torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    start = torch.randn(x0.shape, generator=g, dtype=torch.float64)  # the start d0 was drawn from
    start = start / start.norm(dim=1, keepdim=True)
    H = fisher(model, x0)
    expected = torch.einsum("bij,bj->bi", H, start)
    assert (cosine(d0, expected) > 0.9999).all()  # one step is H d / ||H d|| (finite difference xi=1e-3)
    assert (kl_along(model, x0, d0, eps) >= kl_along(model, x0, start, eps)).all()


def test_vat_replays_the_network_noise_and_leaves_the_global_rng_alone():
    """With noise inside the network, p(x0) and p(x0 + xi d) must share it, or the KL gradient
    measures the noise (0.05) instead of the perturbation (1e-4)."""
    lin = linear_model()
    noisy = nn.Sequential(GaussianNoise(0.05), lin).train()
    x0 = torch.randn(8, 5, dtype=torch.float64)
    V = torch.linalg.eigh(fisher(lin, x0))[1][:, :, -1]  # noise-free top eigenvectors (8, 5)
    torch.manual_seed(7)
    state = torch.get_rng_state()
    d = vat_direction(noisy, x0, xi=1e-4, steps=20, generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch.get_rng_state(), state)
    assert (cosine(d, V).abs() > 0.95).all()


def test_vat_direction_ignores_autocast():
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Linear(4 * 6 * 6, 3))
    x0 = torch.randn(4, 1, 6, 6)
    a = vat_direction(model, x0, steps=2, generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        b = vat_direction(model, x0, steps=2, generator=torch.Generator().manual_seed(0))
    assert b.dtype == torch.float32 and torch.allclose(a, b, atol=1e-6)


class _RecordsTF32(nn.Module):
    """A linear model whose forward records the TF32 settings it runs under."""

    def __init__(self):
        super().__init__()
        self.lin, self.seen = nn.Linear(6, 3), []

    def forward(self, x):
        self.seen.append((torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32))
        return self.lin(x)


@pytest.mark.parametrize("before", [(True, True), (True, False), (False, False)])
def test_vat_power_iteration_runs_with_tf32_off_and_restores_it(before):
    """Every pass of the power iteration sees cuDNN's and cuBLAS's TF32 off (observed from inside the
    model); the caller's settings are back afterwards, also when the model raises."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before
        model = _RecordsTF32()
        vat_direction(model, torch.randn(4, 6), steps=2, generator=torch.Generator().manual_seed(0))
        assert model.seen == [(False, False)] * 3  # p(x0) and two perturbed passes
        assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == before

        def boom(x):
            raise RuntimeError("boom")
        model.forward = boom
        with pytest.raises(RuntimeError):
            vat_direction(model, torch.randn(4, 6), steps=1)
        assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == before
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def test_vat_point_lies_at_epsilon_and_is_reproducible():
    model = mlp()
    x0 = torch.randn(10, 6, dtype=torch.float64)
    a = virtual_point(model, x0, 2.5, "vat", generator=torch.Generator().manual_seed(1))
    b = virtual_point(model, x0, 2.5, "vat", generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and not a.requires_grad
    assert torch.allclose((a - x0).norm(dim=1), torch.full((10,), 2.5, dtype=torch.float64))
    with pytest.raises(ValueError, match="xi"):
        virtual_point(model, x0, 1.0, "vat", xi=0.0)


def test_kl_logits_closed_form():
    p, q = torch.tensor([[0.7, 0.2, 0.1]]), torch.tensor([[0.2, 0.5, 0.3]])
    expected = (p * (p / q).log()).sum(-1)
    assert torch.allclose(kl_logits(p.log() + 3.0, q.log() - 1.0), expected)  # logits: any shift
    assert kl_logits(torch.randn(4, 5), torch.randn(4, 5)).shape == (4,)


# ---------------------------------------------------------------- VAT alone and inside MUR
def _setup(**kw):
    return tiny_setup(**{"input_noise": 0.0, **kw})  # test_methods' tiny model and views, no input noise


def test_vat_alone_is_kl_at_the_vat_point():
    cfg, student, _, v = _setup(method="vat", mur_radius=0.7, mur_steps=2)
    student.eval()
    terms, g0 = loss_terms(cfg, student, None, v, torch.Generator().manual_seed(4))
    assert set(terms) == {"xent", "cons"} and g0 is None
    x_star = virtual_point(student, v.x, 0.7, "vat", steps=2, generator=torch.Generator().manual_seed(4),
                           xi=cfg.vat_xi)
    with torch.no_grad():
        expected = kl_logits(student(v.x), student(x_star)).mean()
    assert torch.allclose(terms["cons"], expected, atol=1e-6) and terms["cons"] > 0


def test_mur_vat_is_the_squared_error_at_the_vat_point():
    """MUR vs VAT is one switch: mur="vat" keeps MUR's loss and changes only the point."""
    cfg, student, teacher, v = _setup(method="mt", mur="vat", mur_radius=0.7)
    student.eval()
    terms, g0 = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(5))
    x_star = virtual_point(student, v.x, 0.7, "vat", generator=torch.Generator().manual_seed(5), xi=cfg.vat_xi)
    with torch.no_grad():
        expected = softmax_mse(student(x_star), student(v.x).softmax(-1))
    assert torch.allclose(terms["mur"], expected, atol=1e-6)
    assert torch.isnan(g0).all()  # no g0 for VAT's point


@pytest.mark.parametrize("kw", [dict(method="vat"), dict(method="vat", vd=True), dict(method="mt", mur="vat"),
                                dict(method="mut", mur="vat"), dict(method="vat", mur="direct")],
                         ids=["vat", "vat-vd", "mt-murvat", "mut-murvat", "vat+mur"])
def test_each_vat_term_reaches_the_student_only(kw):
    cfg, student, teacher, v = _setup(**kw, entmin_coef=0.1)
    if teacher is not None:
        for p in teacher.parameters():
            p.requires_grad_(True)
    terms, _ = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    sp = list(student.parameters())
    for name, t in terms.items():
        assert t.dim() == 0 and torch.isfinite(t)
        g = torch.autograd.grad(t, sp, retain_graph=True, allow_unused=True)
        assert sum(float(gi.abs().sum()) for gi in g if gi is not None) > 0, name
        if teacher is not None:
            gt = torch.autograd.grad(t, list(teacher.parameters()), retain_graph=True, allow_unused=True)
            assert all(gi is None or float(gi.abs().sum()) == 0 for gi in gt), name


def test_vat_loss_has_no_gradient_through_x_star_or_target():
    cfg, student, _, v = _setup(method="vat")
    student.eval()  # no batch coupling, no noise: any x-gradient would come through x* or p(x)
    v.x.requires_grad_(True)
    terms, _ = loss_terms(cfg, student, None, v, torch.Generator().manual_seed(0))
    g = torch.autograd.grad(terms["cons"], v.x, allow_unused=True)[0]
    assert g is None or g.abs().sum() == 0


def test_vat_keeps_bn_running_stats_in_training():
    cfg, student, _, v = _setup(method="vat", dropout=0.0)
    student.train()
    terms, _ = loss_terms(cfg, student, None, v, torch.Generator().manual_seed(0))
    after_main = [b.clone() for b in student.buffers()]
    # only the main pass updates BN: a second main pass on the same batch moves the stats the same way
    fresh = _setup(method="vat", dropout=0.0)[1].train()
    fresh(v.x.detach())
    assert all(torch.equal(a, b) for a, b in zip(after_main, fresh.buffers()))


# ---------------------------------------------------------------- config and sweep
def test_vat_config_errors_are_one_line():
    for bad, words in [({"vat_xi": 0.0}, "vat_xi must be > 0"), ({"method": "vat", "batch_unlabeled": 0},
                                                                   "needs unlabeled data")]:
        with pytest.raises(ConfigError) as e:
            TrainConfig.from_dict(bad)
        assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("preset", ["quick", "paper"])
def test_mur_vs_vat_sweep(preset):
    s = get_sweep("mur_vs_vat", preset)
    trials = s.trials()
    cfgs = [TrainConfig.from_dict(t) for t in trials]
    points = {(c.method, c.mur) for c in cfgs} - {("labelspreading", "none")}  # the quick preset's classical row
    assert {("mt", "direct"), ("mt", "vat"), ("mt", "random"), ("mut", "direct"), ("mut", "vat"),
            ("vat", "none")} == points
    assert any(c.method == "labelspreading" for c in cfgs) == (preset == "quick")
    mt_radii = {c.mur_radius for c in cfgs if c.method == "mt"}
    assert len(mt_radii) >= (1 if preset == "quick" else 2)  # quick: one r (ablation_mur_vs_rr has a large one)
    assert all({c.mur_radius for c in cfgs if c.method == "mt" and c.mur == m} == mt_radii
                                      for m in ("direct", "vat", "random"))
    if preset == "quick":
        assert {c.dataset for c in cfgs} == {"digits"}
    else:
        assert {(c.dataset, c.num_labels) for c in cfgs if c.method in ("mut", "vat")} == {("svhn", 1000)}
        assert {c.dataset for c in cfgs if c.method == "mt"} == {"cifar10"}
    doc = __import__("search_spaces.mur_vs_vat", fromlist=["x"]).__doc__
    assert "python -m sweeper.run mur_vs_vat" in doc
