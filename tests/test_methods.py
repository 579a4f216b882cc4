"""Every loss term's gradient reaches the student, and only the student (never the teacher, never x*)."""
import copy

import pytest
from conftest import reduction_length, rounding_tol
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
    v = Views(x=x.clone(), x2=x + 0.1 * torch.randn_like(x), y_l=torch.randint(0, 10, (L,)), x0=x.clone())
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
    x_in = v.x0 if method == "ict" else v.x  # ICT mixes the batch before augmentation (registry/teacher.py, ict_loss)
    x_in.requires_grad_(True)
    terms, _ = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    gx = torch.autograd.grad(terms["cons"], x_in)[0]  # (B, 1, 8, 8)
    assert gx[L:].abs().sum() > 0
    # and the xent term only sees labeled rows
    v2 = Views(x=v.x.detach().clone().requires_grad_(True), x2=v.x2, y_l=v.y_l, x0=v.x0)
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
        assert torch.equal(a.running_mean, b.running_mean)  # one pass each, same weights and batch: same sums


def _plain_copy(vd_net, cfg):
    """A network without VD layers, dropout or input noise, whose weights are vd_net's mean weights theta
    (and the same biases and BN parameters): built and filled here, not through methods or trainer."""
    from torch import nn

    from trainables.variational import VDConv2d, VDLinear

    plain = build_model(cfg.replace(vd=False, dropout=0.0, input_noise=0.0))
    src = [m for m in vd_net.modules() if isinstance(m, (VDConv2d, VDLinear, nn.BatchNorm2d))]
    dst = [m for m in plain.modules() if isinstance(m, (nn.Conv2d, nn.Linear, nn.BatchNorm2d))]
    assert len(src) == len(dst)
    with torch.no_grad():
        for a, b in zip(src, dst):
            if isinstance(a, nn.BatchNorm2d):
                b.load_state_dict(a.state_dict())
            else:
                b.weight.copy_(a.theta)
                if a.bias is not None:
                    b.bias.copy_(a.bias)
    return plain.train()


def test_pi_vd_target_is_the_mean_weight_network_and_deterministic():
    """theta_sg of the Pi loss under VD: the authors' cons_against_mean (models/semi_supervised/pi.py)."""
    from trainables.methods import Step

    cfg, student, _, v = tiny_setup(method="pi", vd=True, input_noise=0.0)  # noise 0: the target has no other noise
    student.train()
    with torch.no_grad():
        target = _plain_copy(student, cfg)(v.x2).softmax(-1)  # (B, K) batch statistics, as a train-mode pass
    logits = torch.randn(L + U, 10)
    losses = []
    for seed in (1, 2):  # other torch and generator states: the weight noise would differ
        torch.manual_seed(seed)
        step = Step(cfg, student, None, v, torch.Generator().manual_seed(seed))
        step.logits = logits
        losses.append(cfg.spec.loss(step))  # registry/pi.py, pi_loss
    assert torch.equal(losses[0], losses[1])
    # the target by a copy of the network (same math, its own kernels): a forward pass, a softmax over
    # the classes and a mean over the rows of squared differences of probabilities (each at most 1)
    n = reduction_length(student) + target.shape[1] + L + U
    torch.testing.assert_close(losses[0], softmax_mse(logits, target), rtol=0, atol=rounding_tol(1.0, n))
    with torch.no_grad():  # the check can fail: a sampled-weight pass is another target
        sampled = student(v.x2).softmax(-1)
    assert abs(float(softmax_mse(logits, sampled)) - float(losses[0])) > 1e-4


class _Recorder(torch.nn.Module):
    """A network that keeps a copy of every input it is given."""

    def __init__(self, net):
        super().__init__()
        self.net, self.inputs = net, []

    def forward(self, x):
        self.inputs.append(x.detach().clone())
        return self.net(x)


def _shifts(img, t):
    """Every translation of img (C, H, W) by dy, dx in [-t, t] with reflected edges: (n, C, H, W)."""
    p = torch.nn.functional.pad(img[None], (t, t, t, t), mode="reflect")[0]
    H, W = img.shape[1:]
    return torch.stack([p[:, t - dy:t - dy + H, t - dx:t - dx + W] for dy in range(-t, t + 1) for dx in range(-t, t + 1)])


def test_ict_mixes_the_raw_batch_then_augments_and_the_teacher_sees_its_own_views():
    """The authors' ict.py: x_mix = lam x0 + (1 - lam) x0[perm] of the raw batch, then one augmentation
    per mixed image; the teacher's target from its own views: x2 and a fresh augmentation of x0[perm]."""
    from trainables.methods import Step

    cfg, student, teacher, v = tiny_setup(method="ict", translate=1, input_noise=0.0, dropout=0.0)
    s, t = _Recorder(student), _Recorder(teacher)
    torch.manual_seed(5)
    cfg.spec.loss(Step(cfg, s, t, v, torch.Generator().manual_seed(3)))  # registry/teacher.py, ict_loss
    assert len(s.inputs) == 1 and len(t.inputs) == 2
    assert torch.equal(t.inputs[0], v.x2)  # the teacher's own view of x0, not the student's v.x
    x0 = v.x0
    # the teacher's second input: row i is a translation of some raw image x0[perm[i]]
    perm = []
    for row in t.inputs[1]:
        # a translation copies pixels (and zeros the border): an exact match
        hits = [j for j in range(len(x0)) if (_shifts(x0[j], 1) == row).flatten(1).all(1).any()]
        assert len(hits) == 1
        perm.append(hits[0])
    assert sorted(perm) == list(range(len(x0))) and perm != list(range(len(x0)))
    # the student's input: row i is ONE translation of lam_i x0[i] + (1 - lam_i) x0[perm[i]] (mixed, then
    # augmented); mixing two independently shifted views would fit no single shift
    for i, row in enumerate(s.inputs[0]):
        a, b = _shifts(x0[i], 1).flatten(1), _shifts(x0[perm[i]], 1).flatten(1)  # (9, D) each
        d = (a - b)                                                             # row = b + lam (a - b)
        lam = ((row.flatten() - b) * d).sum(1) / d.pow(2).sum(1).clamp_min(1e-12)  # (9,) least squares per shift
        resid = (b + lam[:, None] * d - row.flatten()).abs().amax(1)
        k = int(resid.argmin())
        assert resid[k] < 1e-5 and 0 <= lam[k] <= 1, (i, float(resid[k]))


def test_ict_step_updates_bn_statistics_only_with_the_passes_the_authors_graph_updates():
    """One Trainer step: the running statistics equal those of the student's main pass on v.x (and, with
    bn_clean_pass, its pass on the raw batch), computed here on a copy from the same batches; the mixed
    pass (a graph_replace copy in the authors' graph, without BN update ops) leaves them alone."""
    from search_spaces.common import QUICK
    from trainables.data import load_dataset
    from trainables.trainer import Trainer

    data = load_dataset("digits", n_val=300)
    for clean in (False, True):
        cfg = TrainConfig(**{**QUICK, "method": "ict", "input_noise": 0.0, "dropout": 0.0,
                             "bn_clean_pass": clean})
        tr = Trainer(cfg, data)
        ref = copy.deepcopy(tr.student).train()  # the weights the step's passes use
        seen = []
        views = tr._views
        tr._views = lambda: seen.append(views()) or seen[-1]
        tr.train_step()
        v = seen[0]
        with torch.no_grad():
            ref(v.x)
            if clean:
                ref(v.x0)
        # running statistics: a forward pass up to the BN layer, then a mean (and a variance) over the
        # batch's pixels of each channel, summed in the step's order there and the copy's here
        per_channel = v.x.shape[0] * v.x.shape[2] * v.x.shape[3]
        for (n, a), (_, b) in zip(tr.student.named_buffers(), ref.named_buffers()):
            tol = rounding_tol(float(b.abs().max()) + 1.0, reduction_length(ref) + 2 * per_channel)
            torch.testing.assert_close(a, b, rtol=0, atol=tol, msg=f"{n} (bn_clean_pass={clean})")
