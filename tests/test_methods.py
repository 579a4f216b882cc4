"""Every loss term's gradient reaches the student, and only the student (never the teacher, never x*)."""
import copy

import pytest
import torch

from trainables.config import TrainConfig
from trainables.methods import Views, loss_terms, softmax_mse
from trainables.models import build_model

L, U = 4, 6


def tiny_setup(**kw):
    cfg = TrainConfig(**{"num_labels": 100, **kw})
    torch.manual_seed(0)
    student = build_model(cfg)
    teacher = copy.deepcopy(student) if cfg.uses_teacher else None
    x = torch.randn(L + U, 1, 8, 8)
    v = Views(x=x.clone(), x2=x + 0.1 * torch.randn_like(x), y_l=torch.randint(0, 10, (L,)))
    return cfg, student, teacher, v


def _grads(term, params):
    g = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
    return [torch.zeros_like(p) if gi is None else gi for gi, p in zip(g, params)]


CASES = [dict(method=m, vd=vd, mur=mur, entmin_coef=0.1)
         for m in ("supervised", "pi", "mt", "ict", "mut") for vd in (False, True)
         for mur in ("none", "direct", "pga", "ga", "random") if not (m == "mut" and mur == "none")]


@pytest.mark.parametrize("kw", CASES, ids=lambda k: f"{k['method']}-vd{int(k['vd'])}-{k['mur']}")
def test_each_term_reaches_student_only(kw):
    cfg, student, teacher, v = tiny_setup(**kw, mur_steps=2)
    if teacher is not None:  # let the teacher *could* receive gradient: it must not
        for p in teacher.parameters():
            p.requires_grad_(True)
    terms, g0 = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    expected = {"xent"} | ({"cons"} if kw["method"] in ("pi", "mt", "ict") else set()) \
        | ({"kl"} if kw["vd"] else set()) | ({"mur"} if kw["mur"] != "none" else set()) | {"entmin"}
    assert set(terms) == expected
    sp = list(student.parameters())
    for name, t in terms.items():
        assert t.dim() == 0 and torch.isfinite(t)
        gs = _grads(t, sp)
        assert sum(float(g.abs().sum()) for g in gs) > 0, f"{name} does not reach the student"
        if teacher is not None:
            gt = _grads(t, list(teacher.parameters()))
            assert all(float(g.abs().sum()) == 0 for g in gt), f"{name} leaks into the teacher"
    if kw["vd"]:  # the KL term reaches exactly theta and log_sigma2
        names = [n for n, _ in student.named_parameters()]
        gk = dict(zip(names, _grads(terms["kl"], sp)))
        for n, g in gk.items():
            touched = float(g.abs().sum()) > 0
            assert touched == (n.endswith("theta") or n.endswith("log_sigma2")), n


@pytest.mark.parametrize("method", ["pi", "mt", "ict"])
def test_consistency_trains_on_unlabeled_rows(method):
    """The well-known MT bug: the unlabeled consistency gradient silently lost."""
    cfg, student, teacher, v = tiny_setup(method=method)
    v.x.requires_grad_(True)
    terms, _ = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    gx = torch.autograd.grad(terms["cons"], v.x)[0]  # (B, 1, 8, 8)
    assert gx[L:].abs().sum() > 0
    # and the xent term only sees labeled rows
    v2 = Views(x=v.x.detach().clone().requires_grad_(True), x2=v.x2, y_l=v.y_l)
    terms, _ = loss_terms(cfg, student.eval(), teacher, v2, torch.Generator().manual_seed(0))
    gx = torch.autograd.grad(terms["xent"], v2.x)[0]
    assert gx[:L].abs().sum() > 0 and gx[L:].abs().sum() == 0


@pytest.mark.parametrize("mur", ["direct", "pga", "ga", "random"])
def test_mur_gradient_does_not_flow_through_x_star(mur):
    """d L_MUR / d x0 is zero: x* is detached and the target is stop-gradient."""
    cfg, student, teacher, v = tiny_setup(method="mt", mur=mur, mur_steps=3)
    student.eval()  # no batch coupling, no noise: any x0-gradient would come through x* or target
    terms, _ = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    g = torch.autograd.grad(terms["mur"], v.x, allow_unused=True)[0]
    assert g is None or g.abs().sum() == 0


def test_softmax_mse_closed_form():
    logits = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    target = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    p1 = torch.sigmoid(torch.tensor(2.0))
    expected = ((0.5 - 1) ** 2 + 0.5 ** 2 + (p1 - 0.5) ** 2 + (1 - p1 - 0.5) ** 2) / 2
    assert torch.allclose(softmax_mse(logits, target), expected)


@pytest.mark.parametrize("mur", ["none", "direct", "pga", "ga", "random"])
def test_bn_statistics_policy_only_real_passes_update(mur):
    """The documented policy: the x* search and the x* loss pass never update BN running stats."""
    cfg, student, teacher, v = tiny_setup(method="mt", mur=mur, mur_steps=3)
    bn = [m for m in student.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    assert all(int(m.num_batches_tracked) == 1 for m in bn)  # the main pass on x0 only
    _, s2, _, v2 = tiny_setup(method="mt")  # same init, input and noise: the main pass alone
    s2(v2.x)
    for a, b in zip(bn, [m for m in s2.modules() if isinstance(m, torch.nn.BatchNorm2d)]):
        assert torch.allclose(a.running_mean, b.running_mean, atol=1e-6)
