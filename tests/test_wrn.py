"""Tests for trainables/wrn.py: WRN-28-2 against its published size (a closed-form count written here),
a second, functional implementation of the pre-activation block, the VD variant, gradients, and the
network trained by the Trainer on tiny CIFAR files with FixMatch's inputs and LR schedule.

    pytest tests/test_wrn.py -q
"""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tinydata import write_cifar10
from trainables.config import ConfigError, TrainConfig
from trainables.models import build_model
from trainables.variational import VDConv2d, VDLinear
from trainables.wrn import BasicBlock, WideResNet


def wrn_param_count(depth: int, k: int, num_classes: int, in_channels: int = 3) -> int:
    """Parameters of a WRN-depth-k (Zagoruyko & Komodakis 2016, FixMatch's variant: bias-free convs, BN
    scale and shift, a linear classifier with bias), summed layer by layer from the architecture's
    definition: a 3x3 stem conv to 16 channels; 3 groups of n = (depth - 4) / 6 blocks with 16k, 32k,
    64k channels, each block BN(c_in) + 3x3 conv c_in -> c + BN(c) + 3x3 conv c -> c, plus a 1x1
    shortcut conv in a group's first block (its channel count changes); a last BN; the classifier."""
    n = (depth - 4) // 6
    total = 9 * in_channels * 16
    c_in = 16
    for c in (16 * k, 32 * k, 64 * k):
        for i in range(n):
            cin = c_in if i == 0 else c
            total += 2 * cin + 9 * cin * c + 2 * c + 9 * c * c + (cin * c if i == 0 else 0)
        c_in = c
    return total + 2 * c_in + c_in * num_classes + num_classes


def _count(model, pred=lambda name, p: True):
    return sum(p.numel() for name, p in model.named_parameters() if pred(name, p))


def _of(model, *types):
    return [m for m in model.modules() if isinstance(m, types)]


# ---------------------------------------------------------------- size and structure
def test_wrn28_2_has_the_published_parameter_count():
    # 1,467,610 for 10 classes: FixMatch's and USB's PyTorch WRN-28-2 (bias-free convs); the sum below
    # reproduces it from the layer list alone
    assert wrn_param_count(28, 2, 10) == 1_467_610
    assert _count(WideResNet()) == 1_467_610
    assert _count(WideResNet(num_classes=100)) == wrn_param_count(28, 2, 100)
    assert _count(WideResNet(depth=16, widen_factor=4, in_channels=1)) == wrn_param_count(16, 4, 10, 1)


def test_layers_bn_and_activations_are_fixmatchs():
    model = WideResNet()
    convs = _of(model, nn.Conv2d)
    k3 = [c for c in convs if c.kernel_size == (3, 3)]
    k1 = [c for c in convs if c.kernel_size == (1, 1)]
    assert len(k3) == 1 + 3 * 4 * 2 and len(k1) == 3  # stem, 12 blocks of two; one shortcut per group
    assert all(c.bias is None for c in convs)
    assert [c.stride for c in k1] == [(1, 1), (2, 2), (2, 2)] and [c.out_channels for c in k1] == [32, 64, 128]
    assert sorted({c.out_channels for c in k3}) == [16, 32, 64, 128]
    bns = _of(model, nn.BatchNorm2d)
    assert len(bns) == 12 * 2 + 1 and all(b.momentum == 0.001 and b.eps == 1e-3 for b in bns)
    assert all(a.negative_slope == 0.1 for a in _of(model, nn.LeakyReLU))
    assert _of(model, nn.Dropout) == [] and len(_of(model, nn.Linear)) == 1
    blocks = _of(model, BasicBlock)
    assert [b.activate_before_residual for b in blocks] == [True] + [False] * 11


def test_output_shape_and_feature_maps():
    torch.manual_seed(0)
    model = WideResNet(width=0.25).eval()
    x = torch.randn(3, 3, 32, 32)
    assert model(x).shape == (3, 10)
    maps = [model.stem(x)]
    for g in model.groups:
        maps.append(g(maps[-1]))
    assert [tuple(m.shape[1:]) for m in maps] == [(4, 32, 32), (8, 32, 32), (16, 16, 16), (32, 8, 8)]
    assert WideResNet(num_classes=100, width=0.25)(torch.randn(2, 3, 32, 32)).shape == (2, 100)


def _reference_block(block: BasicBlock, x: torch.Tensor) -> torch.Tensor:
    """The pre-activation block in functional form (eval-mode BN, as google-research/fixmatch's `residual`):
    a = lrelu(bn1(x)); out = conv2(lrelu(bn2(conv1(a)))); shortcut = x, or conv1x1 of a (activate before
    residual) or of x."""
    def bn(m, t):
        return F.batch_norm(t, m.running_mean, m.running_var, m.weight, m.bias, False, 0.0, m.eps)
    w = lambda conv: conv.theta if isinstance(conv, VDConv2d) else conv.weight
    a = F.leaky_relu(bn(block.bn1, x), 0.1)
    out = F.conv2d(a, w(block.conv1), stride=block.conv1.stride, padding=1)
    out = F.conv2d(F.leaky_relu(bn(block.bn2, out), 0.1), w(block.conv2), padding=1)
    if block.shortcut is None:
        return x + out
    s = block.shortcut.stride
    return F.conv2d(a if block.activate_before_residual else x, w(block.shortcut), stride=s) + out


@pytest.mark.parametrize("variational", [False, True])
def test_every_block_matches_the_functional_reference(variational):
    torch.manual_seed(0)
    model = WideResNet(width=0.25, variational=variational)
    for bn in _of(model, nn.BatchNorm2d):  # statistics and affine terms far from the identity
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
        nn.init.normal_(bn.weight)
        nn.init.normal_(bn.bias)
    model.eval()
    x = torch.randn(2, 3, 32, 32)
    h = model.stem(x)
    checked = {True: 0, False: 0}
    for block in _of(model, BasicBlock):
        out = block(h)
        assert torch.allclose(out, _reference_block(block, h), atol=1e-5)
        if block.shortcut is not None:  # the shortcut's input matters: the other choice gives other numbers
            block.activate_before_residual = not block.activate_before_residual
            assert not torch.allclose(block(h), out, atol=1e-3)
            block.activate_before_residual = not block.activate_before_residual
            checked[block.activate_before_residual] += 1
        h = out
    assert checked == {True: 1, False: 2}


def test_init_is_fixmatchs():
    torch.manual_seed(0)
    model = WideResNet()
    conv = model.groups[2][1].conv2  # 128 -> 128, 3x3: 147,456 weights
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / (9 * 128)), rel=0.02)
    assert conv.weight.mean().abs().item() < 0.01 * conv.weight.std().item()
    fc = model.fc  # Glorot normal: std sqrt(2 / (fan_in + fan_out)), zero bias
    assert fc.weight.std().item() == pytest.approx(math.sqrt(2 / (128 + 10)), rel=0.1)
    assert torch.equal(fc.bias, torch.zeros(10))


# ---------------------------------------------------------------- VD
def test_vd_variant_has_only_vd_layers_with_the_same_weights():
    torch.manual_seed(0)
    plain, vd = WideResNet(), WideResNet(variational=True)
    assert _of(vd, nn.Conv2d, nn.Linear) == []
    assert len(_of(vd, VDConv2d)) == len(_of(plain, nn.Conv2d)) == 28 and len(_of(vd, VDLinear)) == 1
    weights = [p.shape for n, p in plain.named_parameters() if n.endswith("weight") and p.dim() > 1]
    thetas = [p.shape for n, p in vd.named_parameters() if n.endswith("theta")]
    assert thetas == weights and sum(math.prod(s) for s in thetas) == 1_467_610 - _count(
        plain, lambda n, p: p.dim() == 1)  # every parameter but BN's and the classifier's bias
    sigmas = [p.shape for n, p in vd.named_parameters() if n.endswith("log_sigma2")]
    assert sigmas == thetas
    assert [m.stride for m in _of(vd, VDConv2d) if m.kernel_size == 1] == [1, 2, 2]


def test_vd_mean_network_equals_the_plain_network_with_its_weights():
    """VDConv2d's stride and padding are the plain conv's: with theta = the plain weights and sampling off,
    both networks compute the same logits."""
    torch.manual_seed(0)
    plain, vd = WideResNet(width=0.25).eval(), WideResNet(width=0.25, variational=True).eval()
    src = {n: p for n, p in plain.state_dict().items()}
    with torch.no_grad():
        for n, p in vd.state_dict().items():
            if n.endswith("theta"):
                p.copy_(src[n[: -len("theta")] + "weight"])
            elif not n.endswith("log_sigma2"):
                p.copy_(src[n])
    x = torch.randn(4, 3, 32, 32)
    assert torch.allclose(vd(x), plain(x), atol=1e-5)


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("variational", [False, True])
def test_gradient_reaches_every_parameter(variational):
    torch.manual_seed(0)
    model = WideResNet(width=0.25, variational=variational).train()
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    F.cross_entropy(model(x), y).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    xg = torch.randn(2, 3, 32, 32, requires_grad=True)  # and to the input (MUR's g0)
    (g,) = torch.autograd.grad(model(xg).logsumexp(1).sum(), xg)
    assert g.shape == xg.shape and g.abs().sum() > 0


# ---------------------------------------------------------------- errors and build_model
@pytest.mark.parametrize("kw, words", [({"dropout": 0.5}, "set both to 0"), ({"input_noise": 0.15}, "set both to 0"),
                                       ({"depth": 27}, "depth = 6n + 4"), ({"width": 0.0}, "width must be > 0")])
def test_bad_arguments_are_one_line_errors(kw, words):
    with pytest.raises(ValueError) as e:
        WideResNet(**kw)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_wrong_input_channels_is_a_clear_error():
    with pytest.raises(ValueError, match=r"expects input \(B, 3, H, W\)"):
        WideResNet(width=0.25)(torch.randn(2, 1, 32, 32))


def test_build_model_and_config():
    cfg = TrainConfig(dataset="cifar10", num_labels=250, arch="wrn28_2", dropout=0.0, input_noise=0.0,
                      bn_momentum=0.01, bn_eps=1e-5, vd=True, width=0.5)
    model = build_model(cfg)
    assert isinstance(model, WideResNet) and _of(model, nn.Conv2d) == []
    assert all(b.momentum == 0.01 and b.eps == 1e-5 for b in _of(model, nn.BatchNorm2d))
    assert model.fc.out_features == 10 and model.fc.in_features == 64
    assert build_model(cfg.replace(dataset="digits", num_labels=100, vd=False)).in_channels == 1
    with pytest.raises(ConfigError) as e:  # the config refuses what the network would, before any work
        TrainConfig(dataset="cifar10", num_labels=250, arch="wrn28_2")
    assert "set dropout=0 and input_noise=0" in str(e.value) and "\n" not in str(e.value)


def test_trainer_runs_fixmatch_on_wrn_with_channel_inputs_and_cosine_lr(tmp_path):
    """The paper preset's recipe end to end on tiny CIFAR files: per-channel standardised inputs (mean 0,
    std 1 per channel over the training images), WRN-28-2's VD variant, and the cosine LR each step."""
    from trainables.trainer import Trainer

    write_cifar10(tmp_path)  # 50 training, 10 test images
    cfg = TrainConfig(method="fixmatch", vd=True, dataset="cifar10", data_dir=str(tmp_path), num_labels=10,
                      val_size=0, arch="wrn28_2", width=0.125, dropout=0.0, input_noise=0.0,
                      cifar_norm="channel", lr_schedule="cosine", lr_rampup=0, lr_rampdown=0, lr=0.03,
                      steps=4, eval_every=4, batch_labeled=4, batch_unlabeled=8, translate=4, flip=True,
                      sensitivity_samples=0, device="cpu", fm_threshold=0.0)
    tr = Trainer(cfg)
    x = tr.data.x_train.double()
    assert torch.allclose(x.mean((0, 2, 3)), torch.zeros(3, dtype=torch.float64), atol=1e-6)
    assert torch.allclose(x.std((0, 2, 3), correction=0), torch.ones(3, dtype=torch.float64), atol=1e-6)
    assert isinstance(tr.student, WideResNet) and len(_of(tr.student, VDConv2d)) == 28
    lrs = []
    for _ in range(cfg.steps):
        tr.train_step()
        lrs.append(tr.opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([0.03 * math.cos(7 * math.pi * k / (16 * 4)) for k in range(4)], rel=1e-12)
    out = tr.run_interval() if not tr.done else tr.evaluate()
    assert math.isfinite(out["test_error"]) and math.isfinite(out["loss_cons"])
