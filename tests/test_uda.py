"""UDA (trainables/registry/uda.py): its loss against a hand-computed case, its gradient, its config keys, and
UDA + VD and UDA + MUR training.

    pytest tests/test_uda.py -q
"""
import math
from types import SimpleNamespace

import pytest
import torch

from trainables.augment_strong import strong_augment
from trainables.config import ConfigError, TrainConfig, applies
from trainables.data import load_dataset
from trainables.methods import Step, Views, loss_terms
from trainables.models import build_model
from trainables.registry.uda import uda_loss
from trainables.trainer import CheckpointMismatch, Trainer, check_resumable

L, U = 4, 8


def _hand_kl(weak, strong, T):
    """KL(softmax(weak / T) || softmax(strong)) of one row, in plain Python."""
    z = sum(math.exp(w / T) for w in weak)
    q = [math.exp(w / T) / z for w in weak]
    zs = sum(math.exp(s) for s in strong)
    p = [math.exp(s) / zs for s in strong]
    return sum(qi * math.log(qi / pi) for qi, pi in zip(q, p))


def test_loss_is_the_masked_kl_of_the_sharpened_target_by_hand():
    """Top probabilities before sharpening: row 0 0.787 (e^2 / (e^2 + 2); 0.987 after), row 1 0.909, row 2
    0.533 (1.6 / 3). The mask reads the unsharpened ones: at 0.8 row 1 alone counts, at 0.6 rows 0 and 1, at
    0.5 all three. The mean is over all three rows, dropped ones included."""
    weak = [[2.0, 0.0, 0.0], [3.0, 0.0, 0.0], [math.log(1.6), 0.0, math.log(0.4)]]
    strong = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.0, -0.5]]
    cfg = SimpleNamespace(uda_temperature=0.4, uda_threshold=0.8)
    s = SimpleNamespace(cfg=cfg, weak_logits=lambda: torch.tensor(weak, dtype=torch.float64),
                        strong_logits=lambda: torch.tensor(strong, dtype=torch.float64))
    kl = [[_hand_kl(weak[i], strong[i], T) for i in range(3)] for T in (0.4, 1.0)]  # [T][row]
    got = float(uda_loss(s))  # float32 arithmetic: 1e-6 relative
    assert got == pytest.approx(kl[0][1] / 3, rel=1e-6)
    cfg.uda_threshold = 0.6
    assert float(uda_loss(s)) == pytest.approx((kl[0][0] + kl[0][1]) / 3, rel=1e-6)
    cfg.uda_threshold = 0.5
    got = float(uda_loss(s))
    assert got == pytest.approx(sum(kl[0]) / 3, rel=1e-6)
    cfg.uda_temperature = 1.0  # no sharpening: the KL of the plain prediction, another number
    assert float(uda_loss(s)) == pytest.approx(sum(kl[1]) / 3, rel=1e-6)
    assert abs(float(uda_loss(s)) - got) > 1e-3


def _setup(**kw):
    cfg = TrainConfig(**{"num_labels": 100, "method": "uda", "input_noise": 0.0, "dropout": 0.0,
                         "uda_threshold": 0.0, **kw})  # threshold 0: every row counts, so every row carries gradient
    torch.manual_seed(0)
    student = build_model(cfg)
    x = torch.randn(L + U, 1, 8, 8)
    xs = strong_augment(x[L:], torch.Generator().manual_seed(1))
    v = Views(x=x.clone(), x2=x + 0.1 * torch.randn_like(x), y_l=torch.randint(0, 10, (L,)), xs=xs)
    return cfg, student, v


@pytest.mark.parametrize("mur", ["none", "direct"])
def test_the_gradient_reaches_the_student_through_the_strong_view_and_not_the_target(mur):
    """d cons / d (main pass logits) is zero (the target is detached), d cons / d theta is not, and a student
    whose strong-view pass alone is cut from the graph gets no gradient from the term."""
    cfg, student, v = _setup(mur=mur)
    step = Step(cfg, student, None, v, torch.Generator().manual_seed(2))
    logits = student(v.x)  # (B, K) the main pass, with gradient
    step.logits = logits
    cons = cfg.spec.loss(step)
    assert float(cons) > 0
    d_logits, *d_params = torch.autograd.grad(cons, [logits, *student.parameters()], allow_unused=True,
                                              retain_graph=True)
    assert d_logits is None or float(d_logits.abs().max()) == 0.0
    assert sum(float(g.abs().sum()) for g in d_params if g is not None) > 0
    # the strong view's logits are what the gradient goes through: detach them and nothing is left
    strong = step.strong_logits().detach()
    step.strong_logits = lambda: strong
    cut = cfg.spec.loss(step)
    assert not cut.requires_grad and float(cut) == pytest.approx(float(cons), rel=1e-5)


def test_the_config_carries_the_keys_and_refuses_bad_ones():
    cfg = TrainConfig(method="uda")
    assert (cfg.uda_temperature, cfg.uda_threshold) == (0.4, 0.8) and cfg.spec.views == ("strong",)
    mt = TrainConfig(method="mt").to_dict()
    assert not applies("uda_temperature", mt) and applies("uda_temperature", cfg.to_dict())
    assert applies("fm_ops", cfg.to_dict()) and not applies("fm_threshold", cfg.to_dict())
    for bad, msg in (({"uda_temperature": 0.0}, "uda_temperature must be > 0"),
                     ({"uda_threshold": 1.5}, r"uda_threshold must lie in \[0, 1\]"),
                     ({"fm_published": True, "dataset": "cifar10", "cifar_norm": "channel", "arch": "convnet_small"},
                      "set fm_published=false")):
        with pytest.raises(ConfigError, match=msg):
            TrainConfig(method="uda", **bad)
    with pytest.raises(ConfigError, match="uda_temperature must be a number"):
        TrainConfig.from_dict({"method": "uda", "uda_temperature": "hot"})


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", "./data", False, device="cpu", n_val=300)


@pytest.mark.parametrize("variant", [dict(vd=True), dict(mur="direct"), dict(vd=True, mur="random")])
def test_uda_with_vd_and_with_mur_trains(variant, digits):
    """A few steps of UDA + VD and UDA + MUR: finite loss terms, the cons term on, no separate mur term (MUR
    acts on the strong view), ||g0|| where the MUR kind starts from it, and the weights move."""
    cfg = TrainConfig(method="uda", steps=4, eval_every=4, rampup=0, lr_rampup=0, lr_rampdown=0, device="cpu",
                      num_labels=50, batch_labeled=16, batch_unlabeled=48, uda_threshold=0.0, **variant)
    tr = Trainer(cfg, digits)
    before = [p.detach().clone() for p in tr.student.parameters()]
    for _ in range(cfg.steps):
        terms = tr.train_step()
    assert "cons" in terms and "mur" not in terms and ("kl" in terms) == cfg.vd
    assert all(math.isfinite(float(t)) for t in terms.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.student.parameters()))
    m = tr.evaluate()
    assert 0 <= m["test_error"] <= 100
    assert math.isfinite(m["g0_norm"]) == (cfg.mur == "direct")


def test_loss_terms_run_uda_with_the_strong_view_at_the_mur_point():
    """UDA + MUR's cons is the KL at A*(x_u): the same number as the term computed by hand from Step's point."""
    cfg, student, v = _setup(mur="direct")
    terms, g0_norm = loss_terms(cfg, student, None, v, torch.Generator().manual_seed(3))
    assert g0_norm is not None and g0_norm.shape == (U,) and "mur" not in terms
    step = Step(cfg, student, None, v, torch.Generator().manual_seed(3))
    step.logits = student(v.x)
    with torch.no_grad():
        x_star = step.strong_input()
        assert float((x_star - v.xs).flatten(1).norm(dim=1).max()) == pytest.approx(cfg.mur_radius, rel=1e-4)
    torch.testing.assert_close(terms["cons"], cfg.spec.loss(step))


def test_a_checkpoint_written_before_the_method_existed_resumes_unless_it_reads_its_keys():
    """An MT checkpoint's stored config lacks UDA's fields (they did not exist): MT does not read them, so it
    resumes; a stored config lacking a field its method reads is refused (its default may not be what ran)."""
    mt = TrainConfig(method="mt")
    stored = {k: v for k, v in mt.to_dict().items() if not k.startswith("uda_")}
    check_resumable(stored, mt, 10)
    uda = TrainConfig(method="uda")
    with pytest.raises(CheckpointMismatch, match="predates the config field 'uda_temperature'"):
        check_resumable({k: v for k, v in uda.to_dict().items() if not k.startswith("uda_")}, uda, 10)
    with pytest.raises(CheckpointMismatch, match="predates the config field 'lr'"):
        check_resumable({k: v for k, v in stored.items() if k != "lr"}, mt, 10)
