"""Loss VALUES against independent expectations: every consistency and MUR term on a linear-softmax
model whose logits, entropy gradient and losses are written out by hand (numpy, float64); the EMA
teacher against its closed form; the teacher's BN statistics; the ramps written out; the paper's
preset constants transcribed from its appendix; SVHN per-feature standardisation; reflect padding;
the weight decay scopes; pga / ga with one step.

    pytest tests/test_loss_values.py -q
"""
import math

import numpy as np
import pytest
from conftest import rounding_tol
import torch
import torch.nn as nn

from search_spaces.common import CIFAR, CIFAR100_RADIUS, SVHN_MT, SVHN_PI
from trainables import schedules
from trainables.config import TrainConfig
from trainables.data import Dataset, augment, fit_standardization, standardize
from trainables.methods import Views, loss_terms
from trainables.models import build_model
from trainables.trainer import Trainer, param_groups

L, U, D, K = 3, 5, 6, 4  # labeled rows, unlabeled rows, input dim (1 x 2 x 3 images), classes
B = L + U
EPS = 1e-8  # the per-sample norm epsilon of the direct point (docs/DECISIONS.md, MUR)


# ----------------------------------------------------------------------------- hand formulas (numpy)

def softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def probs(lin, X):
    """softmax(W x + b) of the rows of X (B, D)."""
    W, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    return softmax(X @ W.T + b)


def entropy_grad(lin, X):
    """dH/dx of H(softmax(W x + b)) per row: dH/dz = -p (log p + H), so dH/dx = -W^T [p (log p + H)]."""
    W = lin.weight.detach().numpy()
    p = probs(lin, X)
    H = -(p * np.log(p)).sum(1, keepdims=True)
    return -(p * (np.log(p) + H)) @ W  # (B, D)


def sq_err(p, q):
    """Squared error summed over classes, averaged over the batch."""
    return ((p - q) ** 2).sum(1).mean()


def direct_point(lin, X, r):
    g = entropy_grad(lin, X)
    return X + r * g / (np.linalg.norm(g, axis=1, keepdims=True) + EPS), g


def flat(x):
    return x.detach().reshape(x.shape[0], -1).numpy()


# ----------------------------------------------------------------------------- the tiny model

def linear(seed):
    torch.manual_seed(seed)
    lin = nn.Linear(D, K).double()
    with torch.no_grad():
        lin.weight.mul_(3.0)  # peaked enough that entropies and their gradients differ across rows
    return lin


def setup(method, seed=0, **kw):
    """cfg, a linear-softmax student (nn.Flatten + nn.Linear), a teacher with other weights, Views."""
    cfg = TrainConfig(method=method, **kw)
    student = nn.Sequential(nn.Flatten(), linear(seed))
    teacher = nn.Sequential(nn.Flatten(), linear(seed + 100)) if cfg.uses_teacher else None
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(B, 1, 2, 3, generator=g, dtype=torch.float64)
    v = Views(x=x.clone(), x2=x + 0.3 * torch.randn(x.shape, generator=g, dtype=torch.float64),
              y_l=torch.tensor([0, 3, 1]), x0=x.clone())  # x0: the batch before augmentation
    return cfg, student, teacher, v


def test_hand_entropy_gradient_is_autograd():
    """The check of the check: the written-out dH/dx equals autograd's on the same model."""
    _, student, _, v = setup("pi")
    x = v.x.clone().requires_grad_(True)
    p = student(x).softmax(-1)
    (g,) = torch.autograd.grad(-(p * p.log()).sum(), x)
    np.testing.assert_allclose(flat(g), entropy_grad(student[1], flat(v.x)), rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- consistency terms

def test_xent_pi_and_entmin_values():
    cfg, student, _, v = setup("pi", entmin_coef=0.1)
    terms, g0 = loss_terms(cfg, student, None, v, torch.Generator().manual_seed(0))
    assert set(terms) == {"xent", "cons", "entmin"} and g0 is None
    lin, X, X2 = student[1], flat(v.x), flat(v.x2)
    p = probs(lin, X)
    xent = -np.log(p[np.arange(L), v.y_l.numpy()]).mean()
    pu = p[L:]
    entmin = -(pu * np.log(pu)).sum(1).mean()
    # the terms come out in float32 (the reference is float64): a dot product of D, a log-softmax over
    # K and a mean over the rows, of terms at most max -log p (xent) and log K (an entropy)
    n = D + 2 * K + B
    assert terms["xent"].item() == pytest.approx(xent, rel=0, abs=rounding_tol(-np.log(p).max(), n))
    assert terms["cons"].item() == pytest.approx(sq_err(p, probs(lin, X2)), rel=1e-5)  # second stochastic pass on x2
    assert terms["entmin"].item() == pytest.approx(entmin, rel=0, abs=rounding_tol(np.log(K), n))


def test_mt_consistency_value():
    cfg, student, teacher, v = setup("mt")
    terms, _ = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    X, X2 = flat(v.x), flat(v.x2)
    expected = sq_err(probs(student[1], X), probs(teacher[1], X2))  # teacher on the second view
    assert terms["cons"].item() == pytest.approx(expected, rel=1e-5)
    # the teacher, not the student, gives the target: a student target would give another number
    assert abs(expected - sq_err(probs(student[1], X), probs(student[1], X2))) > 1e-3


def test_ict_consistency_value_with_the_drawn_lambda_and_permutation():
    """lambda ~ Beta(a, a) per sample from the global RNG, perm from the trainer's generator; the
    student sees lam x0 + (1 - lam) x0[perm] of the raw batch, the target is the same mix of the teacher's
    predictions on its own views (x2 and x0[perm]); translate=0 makes the augmentation the identity."""
    cfg, student, teacher, v = setup("ict", ict_alpha=1.0, translate=0)
    torch.manual_seed(123)
    terms, _ = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(9))
    torch.manual_seed(123)  # the same draws, outside the code under test
    lam = torch.distributions.Beta(1.0, 1.0).sample((B,)).double().numpy()[:, None]  # (B, 1)
    perm = torch.randperm(B, generator=torch.Generator().manual_seed(9)).numpy()
    assert len(set(perm.tolist())) == B and (perm != np.arange(B)).any() and lam.std() > 0.05
    X0, X2 = flat(v.x0), flat(v.x2)
    pt, pt_rand = probs(teacher[1], X2), probs(teacher[1], X0[perm])  # the teacher's own views
    x_mix = lam * X0 + (1 - lam) * X0[perm]
    target = lam * pt + (1 - lam) * pt_rand
    assert terms["cons"].item() == pytest.approx(sq_err(probs(student[1], x_mix), target), rel=1e-5)


def test_ict_mixing_formula_with_a_known_lambda(monkeypatch):
    """lambda fixed at 0.3 for every row (Beta.sample patched): the mix is exactly 0.3 x0 + 0.7 x0[perm]."""
    cfg, student, teacher, v = setup("ict", translate=0)
    monkeypatch.setattr(torch.distributions.Beta, "sample", lambda self, shape=(): torch.full(shape, 0.3))
    terms, _ = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(4))
    perm = torch.randperm(B, generator=torch.Generator().manual_seed(4)).numpy()
    X0 = flat(v.x0)
    expected = sq_err(probs(student[1], 0.3 * X0 + 0.7 * X0[perm]),
                      0.3 * probs(teacher[1], flat(v.x2)) + 0.7 * probs(teacher[1], X0[perm]))
    assert terms["cons"].item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("method", ["supervised", "mut"])
def test_supervised_and_mut_have_no_consistency_term(method):
    cfg, student, teacher, v = setup(method, mur="direct")
    terms, _ = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    assert "cons" not in terms and {"xent", "mur"} <= set(terms)
    assert cfg.spec.loss is None


# ----------------------------------------------------------------------------- MUR as wired

@pytest.mark.parametrize("method", ["supervised", "pi", "mt", "ict", "mut"])
def test_mur_direct_value_per_method(method):
    """x* = x0 + r g0/(||g0|| + eps) with g0 the hand entropy gradient; the target is the student's
    detached prediction on x0, except MUT's: the student's prediction on the second view."""
    r = 0.7
    cfg, student, teacher, v = setup(method, mur="direct", mur_radius=r)
    terms, g0_norm = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    lin, X, X2 = student[1], flat(v.x), flat(v.x2)
    xs, g = direct_point(lin, X, r)
    target = probs(lin, X2) if method == "mut" else probs(lin, X)
    assert terms["mur"].item() == pytest.approx(sq_err(probs(lin, xs), target), rel=1e-5)
    np.testing.assert_allclose(g0_norm.numpy(), np.linalg.norm(g, axis=1), rtol=1e-10)
    assert ("cons" in terms) == (method in ("pi", "mt", "ict"))  # MUT = Pi + MUR with the Pi term off
    # the two targets really differ here, so the MUT branch is told apart
    assert abs(sq_err(probs(lin, xs), probs(lin, X2)) - sq_err(probs(lin, xs), probs(lin, X))) > 1e-4


@pytest.mark.parametrize("mur", ["pga", "ga"])
def test_mur_with_one_step_is_the_direct_value(mur):
    """The authors use the direct approximation whenever mur_opt_steps == 1 (iterations start at 2)."""
    r = 0.7
    cfg, student, teacher, v = setup("mt", mur=mur, mur_radius=r, mur_steps=1, mur_step_size=0.05)
    terms, _ = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    lin, X = student[1], flat(v.x)
    xs, _ = direct_point(lin, X, r)
    assert terms["mur"].item() == pytest.approx(sq_err(probs(lin, xs), probs(lin, X)), rel=1e-5)
    # two steps of size 0.05 stay well inside the ball: a different (smaller) value
    cfg2 = cfg.replace(mur_steps=2)
    terms2, _ = loss_terms(cfg2, student, teacher, setup("mt")[3], torch.Generator().manual_seed(0))
    assert terms2["mur"].item() < 0.5 * terms["mur"].item()


def test_random_regularisation_value():
    """RR: x* = x0 + r u/||u||, u ~ N(0, I) from the trainer's generator; the same squared error."""
    r = 0.7
    cfg, student, _, v = setup("pi", mur="random", mur_radius=r)
    terms, g0_norm = loss_terms(cfg, student, None, v, torch.Generator().manual_seed(5))
    u = torch.randn(v.x.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    u = flat(u)
    X = flat(v.x)
    xs = X + r * u / (np.linalg.norm(u, axis=1, keepdims=True) + EPS)
    assert terms["mur"].item() == pytest.approx(sq_err(probs(student[1], xs), probs(student[1], X)), rel=1e-5)
    assert torch.isnan(g0_norm).all()


# ----------------------------------------------------------------------------- trainer: EMA, BN, ramps

def _tiny_data(n=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 10
    x = torch.randn(n, 1, 8, 8, generator=g) + y.view(-1, 1, 1, 1) * 0.2
    return Dataset("digits", x, y, x[:20].clone(), y[:20].clone(), 10)


def _trainer(**kw):
    base = dict(method="mt", dataset="digits", arch="convnet_small", width=0.25, num_labels=10, val_size=0,
                steps=50, batch_labeled=10, batch_unlabeled=20, lr=0.1, lr_rampup=0, lr_rampdown=0, rampup=0,
                ema_decay=0.9, bn_momentum=0.1, eval_every=50, sensitivity_samples=0, device="cpu")
    return Trainer(TrainConfig(**{**base, **kw}), _tiny_data())


@pytest.mark.parametrize("method, teacher_bn", [("mt", "student"), ("mt", "own"), ("ict", "student"),
                                                ("fixmatch", "student")])
def test_ema_teacher_after_k_steps_is_the_closed_form(method, teacher_bn):
    """teacher_k = d^k t0 + (1 - d) sum_i d^(k-1-i) s_i. Mean Teacher and ICT as the authors' code (the EMA is
    among the update ops the SGD step depends on): s_i is the student BEFORE optimizer step i+1. FixMatch as
    its own code (the EMA runs after the step): s_i is the student AFTER step i+1."""
    tr, k, d = _trainer(method=method, teacher_bn=teacher_bn), 5, 0.9
    t0 = [p.detach().clone().double() for p in tr.teacher.parameters()]
    before, after = [], []
    for _ in range(k):
        before.append([p.detach().clone().double() for p in tr.student.parameters()])
        tr.train_step()
        after.append([p.detach().clone().double() for p in tr.student.parameters()])
    s = after if method == "fixmatch" else before
    for j, pt in enumerate(tr.teacher.parameters()):
        expected = d ** k * t0[j] + (1 - d) * sum(d ** (k - 1 - i) * s[i][j] for i in range(k))
        # k float32 updates t = d t + (1 - d) s, each a few roundings, of values at most this large
        largest = max(float(t0[j].abs().max()), *(float(s[i][j].abs().max()) for i in range(k)))
        torch.testing.assert_close(pt.double(), expected, rtol=0, atol=rounding_tol(largest, 3 * k + 1))
    assert not torch.allclose(next(tr.teacher.parameters()), next(tr.student.parameters()))


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))])
def test_ema_update_equals_a_loop_of_lerp_bit_for_bit(device):
    """The multi-tensor EMA (_foreach_lerp_, _foreach_copy_) = one lerp_ / copy_ per tensor, exactly
    (on CUDA, where it is one fused kernel, too)."""
    tr = _trainer(device=device)
    for _ in range(2):
        tr.train_step()  # teacher and student apart
    for b in tr.student.buffers():
        b.add_(1)  # BN statistics the teacher does not hold yet
    teacher = [p.detach().clone() for p in tr.teacher.parameters()]
    buffers = [b.detach().clone() for b in tr.student.buffers()]
    tr._ema_update(0.9)
    for pt, t, ps in zip(tr.teacher.parameters(), teacher, tr.student.parameters()):
        assert torch.equal(pt, t.lerp_(ps, 1.0 - 0.9))
    for bt, b in zip(tr.teacher.buffers(), buffers):
        assert torch.equal(bt, b)


def _bn_buffers(model):
    return [(n, b) for n, b in model.named_buffers() if n.endswith(("running_mean", "running_var",
                                                                      "num_batches_tracked"))]


def test_teacher_reads_the_students_bn_statistics():
    """teacher_bn="student" (the authors): the teacher's running mean / var are the student's after every
    step; its train-mode passes use batch statistics, so the student's and the teacher's parameters
    follow the same trajectory as with teacher_bn="own", whose teacher keeps statistics of its own."""
    a = _trainer(teacher_bn="student")  # one after the other: each Trainer seeds the global RNG
    for step in range(4):
        a.train_step()
        for (n, bt), (_, bs) in zip(_bn_buffers(a.teacher), _bn_buffers(a.student)):
            assert torch.equal(bt, bs), (step, n)
    b = _trainer(teacher_bn="own")
    for _ in range(4):
        b.train_step()
    for (n, x), (_, y) in zip(a.student.state_dict().items(), b.student.state_dict().items()):
        # same student, buffers included: the same operations on the same numbers in the same order
        # (the BN mode changes only which running statistics the teacher keeps), so exactly equal
        assert torch.equal(x, y), n
    for x, y in zip(a.teacher.parameters(), b.teacher.parameters()):
        assert torch.equal(x, y)
    own = dict(_bn_buffers(b.teacher))
    stu = dict(_bn_buffers(b.student))
    assert int(own["layers.2.num_batches_tracked"]) == 4  # "own": one teacher pass per step
    assert not torch.allclose(own["layers.2.running_mean"], stu["layers.2.running_mean"])
    # at test time the "student" teacher normalises with the student's statistics
    a.teacher.eval()
    twin = _trainer(teacher_bn="own").teacher
    twin.load_state_dict({**a.teacher.state_dict(), **{n: t for n, t in a.student.state_dict().items()
                                                        if "running" in n or "batches" in n}})
    twin.eval()
    x = a.data.x_test[:8]
    with torch.no_grad():
        torch.testing.assert_close(a.teacher(x), twin(x))


def test_ramped_coefficients_written_out():
    tr = _trainer(rampup=100, cons_coef=10.0, kl_coef=0.05, mur_coef=4.0, entmin_coef=0.1)
    ramp = lambda t: math.exp(-5 * (1 - t) ** 2)
    for step, t in ((0, 0.0), (25, 0.25), (60, 0.6), (100, 1.0), (180, 1.0)):
        c = tr.coefficients(step)
        assert c["xent"] == 1.0
        assert c["cons"] == pytest.approx(10.0 * ramp(t), rel=1e-12)
        assert c["kl"] == pytest.approx(0.05 * ramp(t), rel=1e-12)
        assert c["mur"] == pytest.approx(4.0 * ramp(t), rel=1e-12)
        assert c["entmin"] == pytest.approx(0.1 * ramp(t), rel=1e-12)
    # exp(-5) written with 7 significant digits: off by at most half a unit of the last one
    assert tr.coefficients(0)["cons"] == pytest.approx(10 * 0.006737947, rel=0.5e-9 / 0.006737947)


def test_learning_rate_written_out():
    """lr = 0.1 exp(-5 (1 - t)^2) over the first 100 steps, times exp(-12.5 p^2) over the last 200 of 1000."""
    cfg = TrainConfig(steps=1000, lr=0.1, lr_rampup=100, lr_rampdown=200)
    table = {0: 0.1 * math.exp(-5.0), 50: 0.1 * math.exp(-1.25), 100: 0.1, 500: 0.1, 800: 0.1,
             900: 0.1 * math.exp(-12.5 * 0.25), 999: 0.1 * math.exp(-12.5 * 0.995 ** 2)}
    for step, lr in table.items():
        assert schedules.lr_at(step, cfg) == pytest.approx(lr, rel=1e-12), step
    assert schedules.lr_at(50, cfg) == pytest.approx(0.028650479686, rel=1e-9)
    assert schedules.lr_at(900, cfg) == pytest.approx(0.1 * 0.043936933623, rel=1e-9)


# ----------------------------------------------------------------------------- paper presets

# Transcribed from the paper's appendix "Training Settings" (vbi-mur-aaai2021.tex, subsection
# Training-Settings, paragraphs "CIFAR-10 and CIFAR-100" and "SVHN").
PAPER = {
    "CIFAR": dict(ema_decay=0.99, momentum=0.9, weight_decay=0.0001, lr=0.1, cons_coef=10.0, kl_coef=0.05,
                  mur_coef=4.0, mur_radius=10.0, steps=280_000, lr_rampup=10_000, rampup=10_000,
                  lr_rampdown=80_000, batch_labeled=25, batch_unlabeled=75),
    "SVHN_MT": dict(ema_decay=0.99, ema_decay_late=0.999, momentum=0.9, weight_decay=0.0002, lr=0.03,
                    cons_coef=12.0, kl_coef=0.05, mur_coef=2.0, mur_radius=10.0, steps=280_000,
                    lr_rampup=40_000, rampup=40_000, lr_rampdown=0, batch_labeled=25, batch_unlabeled=75),
    "SVHN_PI": dict(momentum=0.9, weight_decay=0.0001, lr=0.01, cons_coef=10.0, kl_coef=0.05, mur_coef=4.0,
                    mur_radius=10.0, steps=280_000, lr_rampup=40_000, rampup=40_000, lr_rampdown=80_000,
                    batch_labeled=25, batch_unlabeled=75),
}
PRESETS = {"CIFAR": CIFAR, "SVHN_MT": SVHN_MT, "SVHN_PI": SVHN_PI}


@pytest.mark.parametrize("name", list(PAPER))
def test_preset_constants_are_the_papers(name):
    preset = PRESETS[name]
    for key, value in PAPER[name].items():
        assert preset[key] == value, f"{name}.{key} = {preset[key]}, the paper's appendix says {value}"
    cfg = TrainConfig(**preset)  # a valid config, with the authors' choices as defaults
    assert (cfg.svhn_norm, cfg.weight_decay_scope, cfg.teacher_bn, cfg.translate_pad) == \
        ("feature", "all", "student", "reflect")


def test_preset_constants_beyond_the_appendix():
    assert CIFAR100_RADIUS == 20.0  # appendix: "20 if the dataset is CIFAR-100"
    assert TrainConfig(**CIFAR).ema_decay_late < 0  # CIFAR: the teacher's momentum is "fixed at 0.99"
    # SVHN MT: "ramped up from 0.99 to 0.999 using a step function"; the authors' train.py switches at the
    # ramp-up length (StepAnnealing(args.rampup_len_step), MeanTeacher/train.py line 322)
    assert SVHN_MT["ema_switch_step"] == SVHN_MT["rampup"]
    assert SVHN_PI["method"] == "pi" and SVHN_MT["method"] == "mt"
    # translation and flip: the authors' run files ("translating_pixels": 4, "flip_horizontally": True for
    # CIFAR-10; 2 and False for SVHN)
    assert (CIFAR["translate"], CIFAR["flip"], SVHN_MT["translate"], SVHN_MT["flip"]) == (4, True, 2, False)


# ----------------------------------------------------------------------------- SVHN per-feature statistics

def test_per_feature_standardisation_on_a_tiny_uint8_array():
    rng = np.random.default_rng(0)
    X_tr = rng.integers(0, 256, (7, 3, 4, 4), dtype=np.uint8)
    X_tr[:, 1, 2, 3] = 200  # a constant feature: zero after standardisation, no NaN (std floored)
    X_te = rng.integers(0, 256, (4, 3, 4, 4), dtype=np.uint8)
    mean, std = fit_standardization(torch.from_numpy(X_tr))
    out_tr = standardize(torch.from_numpy(X_tr), mean, std).numpy()
    out_te = standardize(torch.from_numpy(X_te), mean, std).numpy()
    mu, sd = X_tr.astype(np.float64).mean(0), X_tr.astype(np.float64).std(0)  # per pixel and channel
    # accumulated in float64 (7 images: far below a float32 unit), then rounded once to float32
    one_rounding = float(torch.finfo(torch.float32).eps)
    np.testing.assert_allclose(mean.numpy(), mu, rtol=one_rounding)
    np.testing.assert_allclose(std.numpy(), sd, rtol=one_rounding)
    varying = sd > 0
    np.testing.assert_allclose(out_tr.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(out_tr.std(0)[varying], 1, atol=1e-5)
    assert (out_tr[:, 1, 2, 3] == 0).all() and np.isfinite(out_te[:, varying]).all()
    np.testing.assert_allclose(out_te[:, varying], ((X_te - mu) / np.where(varying, sd, 1))[:, varying],
                               rtol=1e-5, atol=1e-5)
    # per FEATURE, not per image: an image's own mean is not removed
    assert np.abs(out_tr.reshape(7, -1).mean(1)).max() > 0.05


# ----------------------------------------------------------------------------- reflect padding

def test_reflect_convention_is_tensorflows():
    """tf.pad's documented REFLECT example, [[1,2,3],[4,5,6]] padded by 1 row and 2 columns each side:
    [[6,5,4,5,6,5,4],[3,2,1,2,3,2,1],[6,5,4,5,6,5,4],[3,2,1,2,3,2,1]] (edge not repeated). Padding by
    one on both axes is its columns 1..5; augment by translate=1 crops that at the shift."""
    tf_doc = np.array([[6, 5, 4, 5, 6, 5, 4], [3, 2, 1, 2, 3, 2, 1], [6, 5, 4, 5, 6, 5, 4], [3, 2, 1, 2, 3, 2, 1]])
    padded = tf_doc[:, 1:6]  # (4, 5) = [[1,2,3],[4,5,6]] reflect-padded by one on each side
    img = torch.tensor([[1.0, 2, 3], [4, 5, 6]]).view(1, 1, 2, 3).expand(40, 1, 2, 3)
    out = augment(img, 1, False, torch.Generator().manual_seed(0))
    dy, dx = torch.randint(-1, 2, (2, 40), generator=torch.Generator().manual_seed(0))
    for b in range(40):
        expected = padded[1 - dy[b]: 3 - dy[b], 1 - dx[b]: 4 - dx[b]]  # out[i, j] = x[i - dy, j - dx]
        np.testing.assert_array_equal(out[b, 0].numpy(), expected)


def test_reflect_translation_is_numpy_reflect_shifted_and_has_no_zero_border():
    t, Bn = 2, 30
    x = torch.rand(Bn, 3, 8, 8, generator=torch.Generator().manual_seed(1)) + 0.5  # no zero anywhere
    out = augment(x, t, False, torch.Generator().manual_seed(3), pad="reflect")
    dy, dx = torch.randint(-t, t + 1, (2, Bn), generator=torch.Generator().manual_seed(3))
    assert (dy != 0).any() and (dx != 0).any()
    for b in range(Bn):
        p = np.pad(x[b].numpy(), ((0, 0), (t, t), (t, t)), mode="reflect")
        i0, j0 = t - int(dy[b]), t - int(dx[b])
        np.testing.assert_array_equal(out[b].numpy(), p[:, i0:i0 + 8, j0:j0 + 8])
    assert (out != 0).all()  # no constant zero border
    zero = augment(x, t, False, torch.Generator().manual_seed(3), pad="zero")
    shifted = (dy != 0) | (dx != 0)
    assert ((zero == 0).flatten(1).any(1) == shifted).all()  # zero padding leaves zeros exactly where shifted


# ----------------------------------------------------------------------------- weight decay scopes

VD_NET_PARAMS = [  # build_model(arch=convnet_small, vd=True): conv theta/log_sigma2, BN weight/bias, FC
    "layers.1.theta", "layers.1.log_sigma2", "layers.2.weight", "layers.2.bias",
    "layers.5.theta", "layers.5.log_sigma2", "layers.6.weight", "layers.6.bias",
    "layers.9.theta", "layers.9.log_sigma2", "layers.10.weight", "layers.10.bias",
    "layers.12.theta", "layers.12.log_sigma2", "layers.13.weight", "layers.13.bias",
    "layers.17.theta", "layers.17.log_sigma2", "layers.17.bias",
]


@pytest.mark.parametrize("scope, decayed", [
    ("all", [n for n in VD_NET_PARAMS if not n.endswith("log_sigma2")]),  # authors' _l2_reg_loss
    ("weights", ["layers.1.theta", "layers.5.theta", "layers.9.theta", "layers.12.theta", "layers.17.theta"]),
])
def test_weight_decay_scope_lists(scope, decayed):
    model = build_model(TrainConfig(vd=True, width=0.25))
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names.values()) == sorted(VD_NET_PARAMS)
    groups = param_groups(model, 3e-4, scope)
    assert [g["weight_decay"] for g in groups] == [3e-4, 0.0]
    assert sorted(names[id(p)] for p in groups[0]["params"]) == sorted(decayed)
    assert sorted(names[id(p)] for p in groups[1]["params"]) == sorted(set(VD_NET_PARAMS) - set(decayed))


def test_weight_decay_all_is_the_authors_l2_term():
    """SGD's weight_decay w is the gradient of w * sum p^2 / 2 (tf.nn.l2_loss): with no other loss one
    plain SGD step multiplies every decayed parameter by (1 - lr w), BN scale/offset and biases too."""
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(2, 3))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.SGD(param_groups(model, 0.01, "all"), lr=0.5)
    (0 * sum(p.sum() for p in model.parameters())).backward()
    opt.step()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), before[n] * (1 - 0.5 * 0.01), msg=n)
    with pytest.raises(ValueError, match="scope"):
        param_groups(model, 0.01, "bias")
