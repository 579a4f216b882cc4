"""FixMatch, FM+VD and FM+MUR: the threshold mask, the network that makes the pseudo-labels, the
strong augmentation (RandAugment + Cutout) on the strong branch only, and gradients to the student only.

    pytest tests/test_fixmatch.py -q
"""
import copy
import math

import pytest
from conftest import reduction_length, rounding_tol
import torch
import torch.nn.functional as F

from search_spaces import get_sweep
from search_spaces.common import QUICK
from trainables import augment_strong
from trainables.augment_strong import GEOMETRIC, OPS, magnitude, apply_op, cutout, strong_augment
from trainables.config import ConfigError, TrainConfig
from trainables.data import augment, load_dataset
from trainables.methods import Step, Views, loss_terms
from trainables.models import build_model
from trainables.mur import entropy_grad, virtual_point
from trainables.registry.fixmatch import pseudo_labels
from trainables.trainer import Trainer
from trainables.variational import VDConv2d, VDLinear


def weak_logits(cfg, student, v, logits):
    """Step.weak_logits of a step whose main pass gave `logits` (B, K): (U, K)."""
    step = Step(cfg, student, None, v, torch.Generator())
    step.logits = logits
    return step.weak_logits()


L, U = 4, 8


def digits():
    return load_dataset("digits")


# fm_published works on 8-bit pixels, so its configs name a pixel-standardised data set (small RGB images here)
PUBLISHED = {"dataset": "cifar10", "cifar_norm": "channel", "arch": "convnet_small", "fm_published": True}


def _setup(**kw):
    cfg = TrainConfig(**{"num_labels": 100, "method": "fixmatch", "input_noise": 0.0, "dropout": 0.0, **kw})
    torch.manual_seed(0)
    student = build_model(cfg)
    teacher = copy.deepcopy(student) if cfg.uses_teacher else None
    x = torch.randn(L + U, 3, 8, 8) if cfg.fm_published else torch.randn(L + U, 1, 8, 8)
    xs = strong_augment(x[L:], torch.Generator().manual_seed(1))
    v = Views(x=x.clone(), x2=x + 0.1 * torch.randn_like(x), y_l=torch.randint(0, 10, (L,)), xs=xs)
    return cfg, student, teacher, v


# ---------------------------------------------------------------- mask and pseudo-labels
def test_mask_is_max_prob_at_or_above_tau():
    """FixMatch's code keeps a pseudo-label where max p >= tau: two equal logits give p = 0.5 exactly."""
    _, tie = pseudo_labels(torch.zeros(3, 2), 0.5)
    assert tie.tolist() == [1.0, 1.0, 1.0]
    tau = 0.95
    a = math.log(tau / (1 - tau))  # 2 classes: p = sigmoid(a) = tau exactly
    logits = torch.tensor([[a + 1e-3, 0.0], [a - 1e-3, 0.0], [0.0, a + 1e-3], [0.0, a - 1e-3],
                           [0.0, 0.0], [10.0, 0.0]])
    y, mask = pseudo_labels(logits, tau)
    assert y.tolist() == [0, 0, 1, 1, 0, 0]  # argmax (ties: first class)
    assert mask.tolist() == [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    _, mask0 = pseudo_labels(logits, 0.0)  # tau = 0 keeps everything
    assert mask0.sum() == 6
    # 10 classes: max prob crafted around tau
    for p_max, kept in [(0.951, 1.0), (0.949, 0.0)]:
        rest = (1 - p_max) / 9
        probs = torch.full((1, 10), rest)
        probs[0, 3] = p_max
        y, m = pseudo_labels(probs.log() + 5.0, tau)
        assert y.item() == 3 and m.item() == kept


def test_unlabeled_loss_is_masked_cross_entropy_of_the_strong_view_against_the_weak_label():
    cfg, student, _, v = _setup()
    student.eval()  # deterministic: the expectation is computed independently below
    with torch.no_grad():
        p_weak = student(v.x[L:]).softmax(-1)  # (U, K)
        log_q = student(v.xs).log_softmax(-1)
    conf, y = p_weak.max(-1)
    tau = float(conf.median())
    cfg = cfg.replace(fm_threshold=tau)
    mask = (conf >= tau).float()  # FixMatch keeps max p >= tau
    assert 0 < mask.sum() < U  # the threshold cuts somewhere: both branches are exercised
    expected = -(mask * log_q.gather(1, y[:, None])[:, 0]).sum() / U  # mean over ALL unlabeled rows
    terms, g0 = loss_terms(cfg, student, None, v, torch.Generator().manual_seed(0))
    assert set(terms) == {"xent", "cons"} and g0 is None
    # the same per-row math on other batches (kernels may sum in another order): a forward pass, a
    # log-softmax over the classes and a mean over the rows, whose terms are at most max |log q|
    n = reduction_length(student) + log_q.shape[1] + U
    assert torch.allclose(terms["cons"], expected, rtol=0, atol=rounding_tol(float(log_q.abs().max()), n))
    with torch.no_grad():
        log_p_l = student(v.x[:L]).log_softmax(-1)  # (L, K)
    xent_tol = rounding_tol(float(log_p_l.abs().max()), reduction_length(student) + log_p_l.shape[1] + L)
    assert torch.allclose(terms["xent"], F.cross_entropy(student(v.x[:L]), v.y_l), rtol=0, atol=xent_tol)


def test_vd_pseudo_labels_come_from_the_mean_network():
    """Huge weight noise: the sampled network's labels are noise, the mean network's are not."""
    cfg, student, _, v = _setup(vd=True)
    vd_layers = [m for m in student.modules() if isinstance(m, (VDConv2d, VDLinear))]
    with torch.no_grad():
        for m in vd_layers:
            m.log_sigma2.fill_(8.0)  # log alpha clipped at 8: alpha ~ 3000
    student.train()
    logits = student(v.x)  # the sampled main pass, as in loss_terms
    got = weak_logits(cfg, student, v, logits)
    for m in vd_layers:  # a second route to the mean network: switch sampling off by hand
        m.sample = False
    with torch.no_grad():
        mean_net = student(v.x)[L:]
    for m in vd_layers:
        m.sample = True
    assert torch.allclose(got, mean_net, atol=1e-5)
    assert all(m.sample for m in vd_layers)  # weak_logits restored the sampling
    assert torch.equal(weak_logits(cfg, student, v, logits), got)  # deterministic despite the noise
    tau = float(mean_net.softmax(-1).max(-1).values.median())
    y_mean, m_mean = pseudo_labels(mean_net, tau)
    y_got, m_got = pseudo_labels(got, tau)
    y_smp, m_smp = pseudo_labels(logits[L:], tau)
    assert torch.equal(y_got, y_mean) and torch.equal(m_got, m_mean)
    assert not (torch.equal(y_smp, y_mean) and torch.equal(m_smp, m_mean))  # the test can tell them apart
    # and without VD the student's own main pass is used
    cfg2 = cfg.replace(vd=False)
    assert torch.equal(weak_logits(cfg2, student, v, logits), logits[L:].detach())


def test_vd_mean_network_pass_leaves_bn_running_stats_alone():
    cfg, student, _, v = _setup(vd=True)
    student.train()
    before = [b.clone() for b in student.buffers()]
    weak_logits(cfg, student, v, student(v.x).detach())
    fresh = _setup(vd=True)[1].train()
    fresh(v.x)  # the main pass alone
    assert all(torch.equal(a, b) for a, b in zip(student.buffers(), fresh.buffers()))
    assert not all(torch.equal(a, b) for a, b in zip(before, student.buffers()))


# ---------------------------------------------------------------- strong augmentation
@pytest.mark.parametrize("shape", [(6, 1, 8, 8), (6, 3, 32, 32)], ids=["digits", "cifar"])
def test_every_op_keeps_shape_and_each_images_range(shape):
    x = torch.randn(shape)
    lo, hi = x.amin((1, 2, 3)), x.amax((1, 2, 3))
    for op in OPS:
        for t in (0.0, 0.5, 0.999):  # both ends of each magnitude range and its middle
            y = apply_op(x, op, magnitude(op, t))
            assert y.shape == x.shape and torch.isfinite(y).all(), op
            if op not in GEOMETRIC:  # photometric: inside the image's own [min, max]
                assert (y.amin((1, 2, 3)) >= lo - 1e-5).all() and (y.amax((1, 2, 3)) <= hi + 1e-5).all(), op
    assert torch.allclose(apply_op(x, "identity", 0.0), x, atol=1e-5)  # the [0, 1] map round-trips
    assert not torch.allclose(apply_op(x, "solarize", 0.5), x)


def test_geometric_ops_fill_with_the_data_mean_zero():
    x = 2.0 + torch.rand(3, 1, 8, 8)  # pixels in [2, 3]: any 0 comes from the fill
    y = apply_op(x, "translate_x", 0.3)  # 2.4 px to the right: the left 2 columns are uncovered
    assert torch.allclose(y[..., :2], torch.zeros_like(y[..., :2]), atol=1e-5)
    assert (y[..., 3:] >= 2.0 - 1e-5).all()  # the rest is the image, moved
    y = apply_op(x, "rotate", 30.0)
    assert torch.allclose(y[:, :, 0, 0], torch.zeros(3, 1), atol=1e-5)  # a corner leaves the frame


def test_cutout_zeroes_one_clipped_square_per_image():
    x = torch.ones(200, 1, 8, 8)
    y = cutout(x, 0.5, torch.Generator().manual_seed(0))
    holes = y == 0  # (200, 1, 8, 8)
    rows, cols = holes.any(3)[:, 0], holes.any(2)[:, 0]  # (200, 8) each
    n_rows, n_cols = rows.sum(1), cols.sum(1)
    assert (holes.flatten(1).sum(1) == n_rows * n_cols).all()  # a rectangle
    assert (n_rows <= 4).all() and (n_cols <= 4).all() and (n_rows >= 2).all() and (n_cols >= 2).all()
    assert ((n_rows == 4) & (n_cols == 4)).any() and (n_rows < 4).any()  # whole and clipped squares
    assert torch.equal(cutout(x, 0.0, torch.Generator()), x)


def test_strong_augment_is_per_group_random_and_reproducible():
    x = torch.randn(64, 3, 32, 32)
    a = strong_augment(x, torch.Generator().manual_seed(0))
    b = strong_augment(x, torch.Generator().manual_seed(0))
    c = strong_augment(x, torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and not torch.equal(a, c) and a.shape == x.shape
    assert ((a - x).flatten(1).abs().amax(1) > 0).all()  # Cutout alone changes every image
    with pytest.raises(ValueError, match="float images"):
        strong_augment(torch.zeros(2, 8, 8), torch.Generator())


def test_strong_view_is_only_on_the_strong_branch(monkeypatch, digits):
    """The weak views (and so the pseudo-labels) are drawn before, and independently of, the strong one."""
    cfg = TrainConfig(**{**QUICK, "method": "fixmatch", "batch_labeled": 10, "batch_unlabeled": 30})
    tr = Trainer(cfg, digits)
    gen_state, batcher_state = tr.gen.get_state(), tr.batcher.state_dict()
    v = tr._views()
    assert v.xs.shape == (30, 1, 8, 8)

    # the weak views are exactly data.augment's, drawn first from the same generator
    idx_l, idx_u = Trainer(cfg, digits).batcher.next()
    raw = digits.x_train[torch.cat([idx_l, idx_u])]
    g = torch.Generator().manual_seed(cfg.seed + 1)
    assert torch.equal(v.x, augment(raw, cfg.translate, cfg.flip, g))
    assert torch.equal(v.x2, augment(raw, cfg.translate, cfg.flip, g))

    # replace the strong augmentation by one that burns random numbers: weak views unchanged
    def other_strong(x, gen, *args, **kw):
        torch.rand(1000, generator=gen)
        return torch.full_like(x, 7.0)
    monkeypatch.setattr(augment_strong, "strong_augment", other_strong)  # the trainer imports it per call
    tr.gen.set_state(gen_state)
    tr.batcher.load_state_dict(batcher_state)
    w = tr._views()
    assert torch.equal(w.x, v.x) and torch.equal(w.x2, v.x2) and torch.equal(w.y_l, v.y_l)
    assert (w.xs == 7.0).all() and not torch.equal(w.xs, v.xs)
    # and the pseudo-labels and mask depend on the weak view only
    student = build_model(cfg).eval()
    with torch.no_grad():
        lv, lw = student(v.x), student(w.x)
    for a, b in zip(pseudo_labels(weak_logits(cfg, student, v, lv), 0.5),
                    pseudo_labels(weak_logits(cfg, student, w, lw), 0.5)):
        assert torch.equal(a, b)


def test_fixmatch_without_strong_view_is_a_clear_error():
    cfg, student, _, v = _setup()
    v.xs = None
    with pytest.raises(ValueError, match="strong view"):
        loss_terms(cfg, student, copy.deepcopy(student), v, torch.Generator())


# ---------------------------------------------------------------- gradients: the student only
CASES = [dict(vd=vd, mur=mur) for vd in (False, True) for mur in ("none", "direct", "pga", "random", "vat")]


@pytest.mark.parametrize("kw", CASES, ids=lambda k: f"fm-vd{int(k['vd'])}-{k['mur']}")
def test_each_term_reaches_student_only(kw):
    cfg, student, teacher, v = _setup(**kw, fm_threshold=0.0, mur_steps=2, entmin_coef=0.1)
    assert teacher is not None  # FixMatch's EMA copy: it must receive nothing
    for p in teacher.parameters():
        p.requires_grad_(True)
    terms, g0 = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    assert set(terms) == {"xent", "cons", "entmin"} | ({"kl"} if kw["vd"] else set())  # FM+MUR: no "mur" term
    assert (g0 is not None) == (kw["mur"] != "none")
    sp = list(student.parameters())
    for name, t in terms.items():
        assert t.dim() == 0 and torch.isfinite(t)
        g = torch.autograd.grad(t, sp, retain_graph=True, allow_unused=True)
        assert sum(float(gi.abs().sum()) for gi in g if gi is not None) > 0, f"{name} does not reach the student"
        gt = torch.autograd.grad(t, list(teacher.parameters()), retain_graph=True, allow_unused=True)
        assert all(gi is None or float(gi.abs().sum()) == 0 for gi in gt), f"{name} leaks into the teacher"


@pytest.mark.parametrize("mur", ["none", "direct", "vat", "random"])
def test_no_gradient_through_pseudo_labels_or_x_star(mur):
    cfg, student, teacher, v = _setup(mur=mur, fm_threshold=0.0)
    student.eval()  # no batch coupling: an input gradient can only come through the loss's own input
    v.x.requires_grad_(True)
    v.xs.requires_grad_(True)
    terms, _ = loss_terms(cfg, student, teacher, v, torch.Generator().manual_seed(0))
    gx, gs = torch.autograd.grad(terms["cons"], [v.x, v.xs], allow_unused=True)
    assert gx is None or gx.abs().sum() == 0  # the weak view only makes targets
    if mur == "none":
        assert gs.abs().sum() > 0  # FM: the strong view is the loss's input
    else:
        assert gs is None or gs.abs().sum() == 0  # FM+MUR: x* is detached


def test_fm_mur_evaluates_the_loss_at_the_virtual_point_of_the_strong_view():
    cfg, student, _, v = _setup(mur="direct", mur_radius=0.8, fm_threshold=0.0)
    student.eval()
    terms, g0 = loss_terms(cfg, student, None, v, torch.Generator().manual_seed(0))
    g = entropy_grad(student, v.xs)
    x_star = virtual_point(student, v.xs, 0.8, "direct")
    assert torch.allclose(g0, g.flatten(1).norm(dim=1))
    with torch.no_grad():
        y = student(v.x[L:]).argmax(-1)
        expected = F.cross_entropy(student(x_star), y)
        at_strong = F.cross_entropy(student(v.xs), y)
    # x* by a backward pass, then a forward pass at it, a log-softmax and a mean over the rows, each
    # rounded in its own order on the two sides (x* of the whole strong batch there, here too)
    with torch.no_grad():
        log_q = student(x_star).log_softmax(-1)  # (U, K)
    n = 2 * reduction_length(student) + log_q.shape[1] + U
    tol = rounding_tol(float(log_q.abs().max()), n)
    assert torch.allclose(terms["cons"], expected, rtol=0, atol=tol) and not torch.allclose(expected, at_strong,
                                                                                          rtol=0, atol=tol)


# ---------------------------------------------------------------- trainer, config, sweep
def test_fixmatch_restore_equals_uninterrupted_and_ema_copies_bn_stats(tmp_path, digits):
    cfg = TrainConfig(**{**QUICK, "method": "fixmatch", "mur": "direct", "steps": 12, "eval_every": 4,
                         "lr_rampup": 2, "lr_rampdown": 4, "rampup": 0, "sensitivity_samples": 8,
                         "batch_labeled": 10, "batch_unlabeled": 20, "fm_threshold": 0.5})
    a = Trainer(cfg, digits)
    outs = [a.run_interval() for _ in range(3)]
    b = Trainer(cfg, digits)
    b.run_interval()
    b.save(tmp_path / "c.pt")
    torch.manual_seed(99)
    c = Trainer(cfg, digits)
    c.load(tmp_path / "c.pt")
    outs_c = [c.run_interval() for _ in range(2)]
    for k in ("test_error", "test_error_student", "loss_cons", "g0_norm"):
        assert outs[-1][k] == outs_c[-1][k], k
    assert not math.isnan(outs[-1]["test_error_teacher"]) and outs[-1]["g0_norm"] > 0
    for bt, bs in zip(a.teacher.buffers(), a.student.buffers()):  # the EMA model evaluates with the
        assert torch.equal(bt, bs)                                   # student's BN statistics


@pytest.mark.parametrize("bad, words", [({"fm_cutout": 1.5}, "fm_cutout must lie in [0, 1]"),
                                        ({"fm_groups": 0}, "fm_groups must be >= 1"),
                                        ({"fm_ops": -1}, "fm_ops must be >= 0"),
                                        ({"fm_threshold": 1.2}, "fm_threshold must lie in [0, 1]")])
def test_config_errors_are_one_line(bad, words):
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict({"method": "fixmatch", **bad})
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("preset", ["quick", "paper"])
def test_fixmatch_sweep(preset):
    s = get_sweep("fixmatch", preset)
    cfgs = [TrainConfig.from_dict(t) for t in s.trials()]
    assert any(c.method == "labelspreading" for c in cfgs) == (preset == "quick")  # the classical row
    cfgs = [c for c in cfgs if c.method != "labelspreading"]
    assert {(c.vd, c.mur) for c in cfgs} == {(False, "none"), (True, "none"), (False, "direct")}
    assert all(c.method == "fixmatch" and c.fm_threshold == 0.95 and c.cons_coef == 1.0 for c in cfgs)
    if preset == "paper":  # FixMatch's recipe: its network, inputs and LR schedule
        assert all(c.dataset == "cifar10" and c.num_labels == 250 and c.lr == 0.03 and c.weight_decay == 5e-4
                   and c.batch_unlabeled == 7 * c.batch_labeled for c in cfgs)
        assert {(c.arch, c.cifar_norm, c.lr_schedule, c.dropout, c.input_noise) for c in cfgs} == \
            {("wrn28_2", "channel", "cosine", 0.0, 0.0)}
    else:  # the quick preset keeps its small network
        assert {c.dataset for c in cfgs} == {"digits"} and {c.arch for c in cfgs} == {"convnet_small"}
    doc = __import__("search_spaces.fixmatch", fromlist=["x"]).__doc__
    assert "python -m sweeper.run fixmatch" in doc


# ---------------------------------------------------------------- FixMatch as published (fm_published)

def _bn_net(channels: int = 1):
    """conv -> BN -> ReLU -> pool -> linear on (n, channels, 8, 8): the BN sees exactly the conv's output."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(channels, 3, 3, padding=1), torch.nn.BatchNorm2d(3, momentum=0.1),
                               torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(3, 10))


@pytest.mark.parametrize("published", [True, False])
def test_published_fixmatch_passes_labeled_weak_and_strong_views_through_one_bn_batch(published):
    """After one loss evaluation the BN running mean and variance are one momentum step towards the
    batch statistics of conv(labeled + weak + strong) taken together (computed here by hand); with
    fm_published off they are two steps, first towards the labeled + weak rows, then the strong ones."""
    cfg, _, _, v = _setup(**(PUBLISHED if published else {}))
    net = _bn_net(v.x.shape[1]).train()
    loss_terms(cfg, net, None, v, torch.Generator().manual_seed(0))
    conv, bn = net[0], net[1]
    m = bn.momentum

    def step(mean, var, x):
        h = conv(x).detach()                                     # (n, 3, 8, 8)
        n = h.numel() // h.shape[1]
        return ((1 - m) * mean + m * h.mean((0, 2, 3)),
                (1 - m) * var + m * h.var((0, 2, 3), correction=0) * n / (n - 1))

    mean, var = torch.zeros(3), torch.ones(3)
    if published:
        mean, var = step(mean, var, torch.cat([v.x, v.xs]))
    else:
        mean, var = step(*step(mean, var, v.x), v.xs)
    assert bn.num_batches_tracked.item() == (1 if published else 2)
    torch.testing.assert_close(bn.running_mean, mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bn.running_var, var, rtol=1e-5, atol=1e-6)


def test_published_fixmatch_loss_is_the_masked_cross_entropy_of_the_joint_pass():
    """The unlabeled term uses the strong rows' logits of the joint forward: with BN in eval mode (no batch
    coupling) it equals the separate-pass value, so only the BN batch differs between the two forms."""
    cfg, student, _, v = _setup(**PUBLISHED, fm_threshold=0.0)
    student.eval()
    terms, _ = loss_terms(cfg, student, None, v, torch.Generator().manual_seed(0))
    with torch.no_grad():
        y_hat = student(v.x)[L:].softmax(-1).argmax(-1)
        want = F.cross_entropy(student(v.xs), y_hat)
    torch.testing.assert_close(terms["cons"].detach(), want, rtol=1e-5, atol=1e-6)


def test_published_fixmatch_unlabeled_set_holds_the_labeled_images():
    from trainables.trainer import splits

    y = torch.arange(6000) % 10
    for published in (True, False):
        cfg = TrainConfig(method="fixmatch", num_labels=100, **(PUBLISHED if published else {}))
        idx_l, idx_u, idx_val = splits(cfg, y)
        rest = sorted(set(range(len(y))) - set(idx_val.tolist()))
        assert sorted(idx_u.tolist()) == (rest if published else sorted(set(rest) - set(idx_l.tolist())))


def test_ra_parameters_follow_fixmatchs_level_table():
    """Hand-computed from their augmentations.py at levels 1..9 (level / 10 of each op's maximum)."""
    import trainables.augment_pil as P
    lv = range(1, 10)
    assert [P.posterize_bits(k) for k in lv] == [4, 4, 3, 3, 2, 2, 2, 1, 1]             # 4 - int(0.4 k)
    assert [P.solarize_threshold(k) for k in (1, 5, 9)] == [231, 128, 26]              # 256 - int(25.6 k)
    assert [round(P.enhance_factor(k), 6) for k in (1, 5, 9)] == [0.28, 1.0, 1.72]
    assert P.pil_matrix("shear_y", 9, -1, 32, 32) == [1, 0, 0, -(9 * 0.3 / 10), 1, 0]
    assert [P.pil_matrix("translate_x", k, 1, 32, 32)[2] for k in lv] == list(range(1, 10))   # pixels
    # rotate by 3 k degrees about the centre (16, 16): the map from output to input turns by -3 k degrees and
    # keeps the centre
    for k in lv:
        a = P.pil_matrix("rotate", k, 1, 32, 32)
        assert math.isclose(math.degrees(math.atan2(a[1], a[0])), -3 * k, abs_tol=1e-9)
        assert math.isclose(a[0] * 16 + a[1] * 16 + a[2], 16, abs_tol=1e-9)


def _pixel_images(n: int, value, mean: float, std: float = 1.0):
    """(n, C, 32, 32) standardised copies of one 8-bit image (C, 32, 32), and its (mean, std)."""
    value = torch.as_tensor(value, dtype=torch.float32)
    p = value.expand(n, *value.shape).clone()
    stats = (torch.full((1, 1, 1), mean), torch.full((1, 1, 1), std))
    return (p - stats[0]) / stats[1], stats


def test_ra_applies_each_op_with_probability_half_at_integer_levels(monkeypatch):
    """A fixed image, a single bright pixel on a background at the mean, through FixMatch's RA with the op
    pool cut to translate_x: about half the copies are untouched (the op's probability 0.5), the others are
    shifted by a whole number of pixels, every level 1..9 in both directions, nothing else."""
    import trainables.augment_strong as A
    monkeypatch.setattr(A, "OPS", ("translate_x",))
    n = 4000
    img = torch.full((1, 32, 32), 128.0)
    img[0, 16, 16] = 255.0
    x, pixels = _pixel_images(n, img, mean=128.0)
    out = A.fixmatch_ra(x, torch.Generator().manual_seed(0), n_ops=1, pixels=pixels)
    assert torch.all(out.flatten(1).max(1).values == 127)         # the pixel survives (|shift| <= 9)
    row = out[:, 0, 16]                                            # (n, 32)
    shift = 16 - row.argmax(1)                                     # (n,) pixels moved left
    assert torch.all(out[:, 0].flatten(1).gt(0.5).sum(1) == 1)     # moved whole, not interpolated
    assert set(out.unique().tolist()) <= {0.0, 127.0, -0.5}        # background, pixel, pil_unwrap's grey fill
    untouched = (shift == 0).float().mean().item()
    assert abs(untouched - 0.5) < 4 * math.sqrt(0.25 / n)
    assert set(shift[shift != 0].abs().tolist()) == set(range(1, 10))
    assert (shift > 0).any() and (shift < 0).any()
    # with the full op pool every op draw is applied with probability 0.5 too: the untouched copies are
    # the half not applied plus identity and the enhancers at level 5 (factor 1.0), 0.5 + 0.5 (1 + 4/9) / 14
    monkeypatch.setattr(A, "OPS", OPS)
    texture = torch.randint(20, 231, (3, 32, 32), generator=torch.Generator().manual_seed(2))  # sharpness, color act
    x, pixels = _pixel_images(n, texture, mean=texture.float().mean().item(), std=40.0)
    out = A.fixmatch_ra(x, torch.Generator().manual_seed(1), n_ops=1, pixels=pixels)
    same = (out - x).flatten(1).abs().amax(1).lt(1e-5).float().mean().item()
    p = 0.5 + 0.5 * (1 + 4 / 9) / 14
    assert abs(same - p) < 4 * math.sqrt(p * (1 - p) / n)


def test_published_strong_view_is_made_on_the_pixels_and_trains(tmp_path):
    """On tiny CIFAR-10 files standardised per channel: every value of the strong view is an 8-bit pixel
    standardised again, pil_unwrap's grey, or Cutout's mean (x = 0); and three training steps run."""
    from tinydata import write_cifar10
    from trainables.trainer import train
    write_cifar10(tmp_path)
    cfg = TrainConfig(method="fixmatch", dataset="cifar10", cifar_norm="channel", fm_published=True,
                      arch="convnet_small", data_dir=str(tmp_path), num_labels=10, val_size=0, batch_labeled=4,
                      batch_unlabeled=12, steps=3, eval_every=3, input_noise=0.0, dropout=0.0, device="cpu",
                      sensitivity_samples=0, lr_rampup=0, lr_rampdown=0, rampup=0)
    ds = load_dataset("cifar10", tmp_path, cifar_norm="channel")
    v = Trainer(cfg, ds)._views()
    mean, std = ds.pixels
    p = v.xs * std + mean                                          # (12, 3, 32, 32) in pixel units
    on_pixel = (p - p.round()).abs() < 1e-3
    grey = (p - 127.5).abs() < 1e-3
    cut = v.xs == 0
    assert (on_pixel | grey | cut).all()
    assert not torch.equal(v.xs, v.x[4:])
    assert math.isfinite(train(cfg, ds, log=lambda *_: None)["test_error"])


def test_ra_needs_the_pixels_standardisation():
    with pytest.raises(ValueError, match="8-bit pixels"):
        strong_augment(torch.randn(4, 3, 32, 32), torch.Generator(), per_image=True)
    with pytest.raises(ConfigError, match="cifar_norm='channel'"):
        TrainConfig(method="fixmatch", fm_published=True)            # digits: not 8-bit pixels


def test_paper_preset_runs_fixmatch_as_published_and_quick_keeps_its_form():
    for preset, published in (("paper", True), ("quick", False)):
        cfgs = [TrainConfig.from_dict(t) for t in get_sweep("fixmatch", preset).trials()]
        assert {c.fm_published for c in cfgs if c.method == "fixmatch"} == {published}
    paper = TrainConfig.from_dict(get_sweep("fixmatch", "paper").trials()[0])
    assert paper.eval_every == 1024 and paper.steps // paper.eval_every >= 20
