"""Tests for trainables/models.py: ConvNet-13 against the paper's appendix table, ConvNetSmall,
Gaussian input noise, He init, build_model.

    pytest tests/test_models.py -q
"""
import math

import pytest
import torch
import torch.nn as nn

from trainables.config import TrainConfig
from trainables.models import ConvNet13, ConvNetSmall, Dropout, GaussianNoise, build_model
from trainables.variational import VDConv2d, VDLinear

# The appendix table: (filters, kernel, padding) of the 9 convolutions; "same" 3x3 = padding 1.
TABLE = [(128, 3, 1)] * 3 + [(256, 3, 1)] * 3 + [(512, 3, 0), (256, 1, 0), (128, 1, 0)]


def _convs(model):
    return [m for m in model.modules() if isinstance(m, (nn.Conv2d, VDConv2d))]


def _of(model, *types):
    return [m for m in model.modules() if isinstance(m, types)]


# ---------------------------------------------------------------- ConvNet-13
@pytest.mark.parametrize("variational", [False, True])
def test_convnet13_matches_the_table(variational):
    torch.manual_seed(0)
    w = 0.125
    model = ConvNet13(num_classes=10, variational=variational, width=w)
    convs = _convs(model)
    assert len(convs) == 9
    assert [(c.out_channels, c.kernel_size if isinstance(c, VDConv2d) else c.kernel_size[0],
             c.padding if isinstance(c, VDConv2d) else c.padding[0]) for c in convs] == \
        [(round(f * w), k, p) for f, k, p in TABLE]
    assert convs[0].in_channels == 3
    pools = _of(model, nn.MaxPool2d)
    assert len(pools) == 2 and all(p.kernel_size == 2 for p in pools)
    drops = _of(model, Dropout)
    if variational:
        assert drops == []                              # removed, not p = 0
        assert _of(model, nn.Conv2d, nn.Linear) == []   # every conv/linear is a VD layer
        assert len(_of(model, VDConv2d)) == 9 and len(_of(model, VDLinear)) == 1
    else:
        assert len(drops) == 2 and all(d.p == 0.5 for d in drops)
        assert _of(model, VDConv2d, VDLinear) == []
    fc = _of(model, nn.Linear, VDLinear)
    assert len(fc) == 1 and (fc[0].in_features, fc[0].out_features) == (round(128 * w), 10)
    noise = _of(model, GaussianNoise)
    assert len(noise) == 1 and noise[0].sigma == 0.15
    # BatchNorm (momentum 0.001 = TF 0.999, eps 1e-8) then LeakyReLU(0.1) right after every conv
    seq = list(model.modules())
    for c in convs:
        i = seq.index(c)
        bn, act = seq[i + 1], seq[i + 2]
        assert isinstance(bn, nn.BatchNorm2d) and bn.num_features == c.out_channels
        assert bn.momentum == 0.001 and bn.eps == 1e-8
        assert isinstance(act, nn.LeakyReLU) and act.negative_slope == 0.1
    assert len(_of(model, nn.BatchNorm2d)) == 9 and len(_of(model, nn.LeakyReLU)) == 9


def test_convnet13_shapes_and_6x6_map_before_pooling():
    torch.manual_seed(0)
    model = ConvNet13(num_classes=100, width=0.125)
    x = torch.randn(2, 3, 32, 32)
    assert model(x).shape == (2, 100)
    gap = [i for i, m in enumerate(model.layers) if isinstance(m, nn.AdaptiveAvgPool2d)]
    assert len(gap) == 1
    assert model.layers[:gap[0]](x).shape == (2, 16, 6, 6)   # 32 -> 16 -> 8 -> valid 3x3 -> 6


def test_width_multiplier_scales_channels():
    full = ConvNet13(width=1.0)
    assert [c.out_channels for c in _convs(full)] == [f for f, _, _ in TABLE]
    half = ConvNet13(width=0.5)
    assert [c.out_channels for c in _convs(half)] == [f // 2 for f, _, _ in TABLE]
    tiny = ConvNet13(width=1e-3)                        # round to 0 -> at least one channel
    assert all(c.out_channels == 1 for c in _convs(tiny))
    assert tiny(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    odd = ConvNet13(width=0.3)                          # rounded, not truncated: 38.4 -> 38, 76.8 -> 77
    assert [c.out_channels for c in _convs(odd)] == [round(f * 0.3) for f, _, _ in TABLE]
    assert _convs(odd)[3].out_channels == 77
    small = ConvNetSmall(width=2.0)
    assert [c.out_channels for c in _convs(small)] == [2 * c.out_channels for c in _convs(ConvNetSmall())]


def test_bn_settings_and_dropout_rate_pass_through():
    model = ConvNet13(width=0.125, bn_momentum=0.01, bn_eps=1e-5, dropout=0.3, input_noise=0.0)
    assert all(b.momentum == 0.01 and b.eps == 1e-5 for b in _of(model, nn.BatchNorm2d))
    assert all(d.p == 0.3 for d in _of(model, Dropout))
    assert _of(model, GaussianNoise)[0].sigma == 0.0


# ---------------------------------------------------------------- init
@pytest.mark.parametrize("variational", [False, True])
def test_he_normal_init(variational):
    torch.manual_seed(0)
    model = ConvNet13(width=0.5, variational=variational)
    gain = math.sqrt(2.0 / (1 + 0.1 ** 2))              # leaky_relu(0.1)
    for m in _of(model, nn.Conv2d, nn.Linear, VDConv2d, VDLinear):
        w = m.theta if variational else m.weight
        fan_in = w[0].numel()
        std = gain / math.sqrt(fan_in)
        n = w.numel()
        assert w.mean().abs().item() < 5 * std / math.sqrt(n)
        assert abs(w.std().item() / std - 1) < 5 * math.sqrt(1 / (2 * n)) + 1e-3
        if m.bias is not None:
            assert (m.bias == 0).all()
        if variational:
            assert (m.log_sigma2 == -10).all()



def test_tf_he_normal_is_truncated_at_two_std_with_std_sqrt_2_over_fan_in():
    """The authors' TensorFlow he_normal (weight_init=tf_he_normal): every weight within the cut at 2 standard
    deviations of the untruncated normal, draws reaching near it, the draws' std sqrt(2 / fan_in) and mean 0;
    the truncated unit normal's std, TF's constant, from the closed form."""
    from trainables.models import TRUNC_STD
    phi2 = math.exp(-2.0) / math.sqrt(2 * math.pi)                 # density of N(0, 1) at 2
    mass = math.erf(2 / math.sqrt(2))                              # P(|z| < 2)
    assert TRUNC_STD == pytest.approx(math.sqrt(1 - 2 * 2 * phi2 / mass), rel=1e-12)
    for variational in (False, True):
        torch.manual_seed(0)
        model = build_model(TrainConfig(dataset="cifar10", arch="convnet13", width=0.5, vd=variational,
                                        weight_init="tf_he_normal"))
        layers = list(_of(model, nn.Conv2d, nn.Linear, VDConv2d, VDLinear))
        assert len(layers) == 10
        for m in layers:
            w = (m.theta if variational else m.weight).detach().double()
            fan_in, n = w[0].numel(), w.numel()
            std = math.sqrt(2.0 / fan_in)
            cut = 2 * std / TRUNC_STD
            assert w.abs().max() <= cut * (1 + 1e-6)
            if n > 10_000:
                assert w.abs().max() > 0.98 * cut                  # truncated, not narrower
            assert w.mean().abs().item() < 5 * std / math.sqrt(n)
            # the std of a truncated normal's sample std: kurtosis 2.36 -> sd(s)/s ~ sqrt((2.36 - 1) / (4 n))
            assert abs(w.std().item() / std - 1) < 5 * math.sqrt(1.36 / (4 * n)) + 1e-3


def test_weight_init_is_refused_for_the_wide_resnet():
    from trainables.config import ConfigError
    with pytest.raises(ConfigError, match="wrn28_2 initialises as FixMatch"):
        TrainConfig(dataset="cifar10", arch="wrn28_2", dropout=0.0, input_noise=0.0, weight_init="tf_he_normal")
    with pytest.raises(ConfigError, match="weight_init"):
        TrainConfig(weight_init="glorot")


def test_paper_presets_initialise_as_the_authors_and_the_others_keep_theirs():
    from search_spaces import get_sweep
    for name, preset, want in (("table_cifar", "paper", "tf_he_normal"), ("table_svhn", "paper", "tf_he_normal"),
                               ("table_cifar", "quick", "kaiming"), ("table_cifar", "mnist", "kaiming"),
                               ("fixmatch", "paper", "kaiming")):
        inits = {TrainConfig.from_dict(t).weight_init for t in get_sweep(name, preset).trials(seeds=1)}
        assert inits == {want}, (name, preset)


# ---------------------------------------------------------------- noise, train/eval
def test_gaussian_noise_train_only():
    torch.manual_seed(0)
    layer = GaussianNoise(0.15)
    x = torch.randn(200, 50)
    d = layer(x) - x
    n = d.numel()
    assert abs(d.mean().item()) < 5 * 0.15 / math.sqrt(n)
    assert abs(d.std().item() / 0.15 - 1) < 5 * math.sqrt(1 / (2 * n))
    layer.eval()
    assert torch.equal(layer(x), x)
    assert torch.equal(GaussianNoise(0.0)(x), x)
    with pytest.raises(ValueError, match="sigma"):
        GaussianNoise(-1.0)


@pytest.mark.parametrize("variational", [False, True])
def test_input_noise_only_in_train_mode(variational):
    torch.manual_seed(0)
    x = torch.randn(4, 1, 8, 8)
    noisy = ConvNetSmall(variational=variational, dropout=0.0, input_noise=0.15)
    quiet = ConvNetSmall(variational=variational, dropout=0.0, input_noise=0.0)
    quiet.load_state_dict(noisy.state_dict())
    for m in (noisy, quiet):
        for v in _of(m, VDConv2d, VDLinear):
            v.sample = False                           # isolate the input noise from weight noise
    noisy.eval(), quiet.eval()                          # eval: no noise, same as the quiet net
    torch.testing.assert_close(noisy(x), noisy(x))
    torch.testing.assert_close(noisy(x), quiet(x))
    noisy.train(), quiet.train()
    assert not torch.allclose(noisy(x), noisy(x))       # train mode: fresh noise per pass
    torch.testing.assert_close(quiet(x), quiet(x))      # same net without input noise: deterministic


def test_eval_mode_is_deterministic_with_all_noise_sources():
    torch.manual_seed(0)
    for model in (ConvNet13(width=0.125), ConvNet13(width=0.125, variational=True)):
        x = torch.randn(2, 3, 32, 32)
        assert not torch.allclose(model(x), model(x))
        model.eval()
        torch.testing.assert_close(model(x), model(x))


# ---------------------------------------------------------------- ConvNetSmall
@pytest.mark.parametrize("variational", [False, True])
def test_convnet_small_shapes_and_family(variational):
    torch.manual_seed(0)
    model = ConvNetSmall(variational=variational)
    assert model(torch.randn(5, 1, 8, 8)).shape == (5, 10)
    assert ConvNetSmall(num_classes=3, in_channels=3)(torch.randn(2, 3, 8, 8)).shape == (2, 3)
    assert len(_of(model, nn.MaxPool2d)) == 2
    assert len(_of(model, Dropout)) == (0 if variational else 2)
    assert len(_of(model, nn.BatchNorm2d)) == len(_convs(model)) == len(_of(model, nn.LeakyReLU))
    assert any(c.kernel_size in (1, (1, 1)) for c in _convs(model))
    assert len(_of(model, nn.AdaptiveAvgPool2d)) == 1 and len(_of(model, GaussianNoise)) == 1
    if variational:
        assert _of(model, nn.Conv2d, nn.Linear) == []


def _conv_macs(model, x):
    """Multiply-accumulates of every conv/linear in one forward pass, counted with hooks."""
    macs = []
    def hook(m, inp, out):
        k = m.weight[0].numel() if isinstance(m, (nn.Conv2d, nn.Linear)) else m.theta[0].numel()
        macs.append(out.numel() * k)                    # each output element: one dot of length k
    hs = [m.register_forward_hook(hook) for m in _of(model, nn.Conv2d, nn.Linear, VDConv2d, VDLinear)]
    with torch.no_grad():
        model(x)
    for h in hs:
        h.remove()
    return sum(macs)


def test_convnet_small_is_cheap():
    # a wall-clock bound flakes on a shared 2-core machine; count the work instead
    # (~47M MACs per batch of 100 digits: about 10 ms forward+backward on 2 idle cores)
    x = torch.randn(100, 1, 8, 8)
    small = _conv_macs(ConvNetSmall(), x)
    assert small < 60e6
    # the same count for ConvNet-13 on 32x32: 9 convs of the table + FC, by hand
    c = [3, 128, 128, 128, 256, 256, 256, 512, 256, 128]
    hw = [32] * 3 + [16] * 3 + [6] * 3
    k = [9] * 7 + [1, 1]
    by_hand = sum(hw[i] ** 2 * c[i + 1] * c[i] * k[i] for i in range(9)) + 128 * 10
    assert _conv_macs(ConvNet13(), torch.randn(1, 3, 32, 32)) == by_hand


@pytest.mark.parametrize("variational", [False, True])
def test_every_parameter_gets_a_gradient(variational):
    torch.manual_seed(0)
    model = ConvNetSmall(variational=variational)
    model(torch.randn(8, 1, 8, 8)).logsumexp(1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_bf16_autocast_and_channels_last():
    torch.manual_seed(0)
    model = ConvNetSmall(variational=True).to(memory_format=torch.channels_last)
    x = torch.randn(4, 1, 8, 8).to(memory_format=torch.channels_last)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = model(x)
    assert y.shape == (4, 10) and torch.isfinite(y.float()).all()


def test_bad_input_and_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="in_channels"):
        ConvNetSmall()(torch.randn(2, 3, 8, 8))
    with pytest.raises(ValueError, match="expects input"):
        ConvNet13(width=0.125)(torch.randn(3, 32, 32))
    with pytest.raises(ValueError, match="width"):
        ConvNet13(width=0)
    with pytest.raises(ValueError, match="dropout"):
        ConvNetSmall(dropout=1.0)


# ---------------------------------------------------------------- build_model
def test_build_model_follows_the_config():
    m = build_model(TrainConfig(arch="convnet_small", dataset="digits", vd=False, dropout=0.2))
    assert type(m) is ConvNetSmall and _convs(m)[0].in_channels == 1
    assert all(d.p == 0.2 for d in _of(m, Dropout)) and len(_of(m, Dropout)) == 2
    cfg = TrainConfig(arch="convnet13", dataset="cifar100", vd=True, width=0.125, bn_momentum=0.01,
                      bn_eps=1e-5, input_noise=0.1)
    m = build_model(cfg)
    assert type(m) is ConvNet13 and _convs(m)[0].in_channels == 3
    assert _convs(m)[0].out_channels == 16 and _of(m, Dropout) == []
    assert _of(m, VDLinear)[0].out_features == 100
    assert all(b.momentum == 0.01 and b.eps == 1e-5 for b in _of(m, nn.BatchNorm2d))
    assert _of(m, GaussianNoise)[0].sigma == 0.1
    assert m(torch.randn(2, 3, 32, 32)).shape == (2, 100)
    m = build_model(TrainConfig(arch="convnet_small", dataset="svhn", num_labels=1000))
    assert _convs(m)[0].in_channels == 3


def test_build_model_takes_the_channels_of_the_data():
    cfg = TrainConfig(arch="convnet13", dataset="mnist", width=0.125)
    m = build_model(cfg)  # MNIST is grey: one input channel, 32x32 after padding
    assert _convs(m)[0].in_channels == 1 and m(torch.randn(2, 1, 32, 32)).shape == (2, 10)
    with pytest.raises(ValueError, match="in_channels"):
        m(torch.randn(2, 3, 32, 32))
    m = build_model(cfg, in_channels=3)  # what the loaded data says wins over the data set's default
    assert _convs(m)[0].in_channels == 3 and m(torch.randn(2, 3, 32, 32)).shape == (2, 10)


# ---------------------------------------------------------------- Dropout (CPU mask)
def test_dropout_cpu_mask_law_scale_gradient_and_eval():
    """Train mode: each entry is 0 or x / (1 - p), kept with probability 1 - p, the gradient is the same
    mask / (1 - p); the mask is drawn in logical order (the same for a channels_last input); eval: identity."""
    p, d = 0.3, Dropout(0.3, "element")
    x = (torch.rand(400, 8, 6, 6) + 0.5).requires_grad_(True)  # no zeros: a dropped entry is exactly 0
    torch.manual_seed(0)
    y = d(x)
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p), rtol=1e-6, atol=0)
    n = kept.numel()
    assert abs(kept.float().mean().item() - (1 - p)) < 4 * math.sqrt(p * (1 - p) / n)  # 4 sigma
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() / (1 - p))
    torch.manual_seed(0)
    y_cl = d(x.detach().contiguous(memory_format=torch.channels_last))
    assert torch.equal(y_cl != 0, kept)
    d.eval()
    assert torch.equal(d(x), x)


def _maps_whole(y: torch.Tensor, scale: float) -> bool:
    """Fed ones: every (image, channel) map of y is all 0 or all `scale`."""
    flat = y.flatten(2)  # (B, C, H*W)
    first = flat[:, :, :1]
    return bool(((flat == first).all() and ((first == 0) | torch.isclose(first, torch.tensor(scale))).all()))


def test_channel_dropout_keeps_or_drops_whole_maps_at_rate_p():
    """mode="channel" (the authors' dropout_2D): fed ones in train mode, each (image, channel) map is all 0
    or all 1 / (1 - p); maps are kept with probability 1 - p (4 sigma over B*C decisions), independently
    across channels and images; element mode on the same input breaks maps apart."""
    p, b, c = 0.5, 300, 16
    x = torch.ones(b, c, 5, 5)
    torch.manual_seed(1)
    y = Dropout(p, "channel")(x)
    assert _maps_whole(y, 1 / (1 - p))
    kept = y[:, :, 0, 0] != 0  # (B, C) decisions
    assert abs(kept.float().mean().item() - (1 - p)) < 4 * math.sqrt(p * (1 - p) / kept.numel())
    assert 0 < kept.float().mean(1).min() and kept.float().mean(1).max() < 1  # channels of one image differ
    assert not _maps_whole(Dropout(p, "element")(x), 1 / (1 - p))


@pytest.mark.parametrize("sweep_name", ["table_cifar", "table_svhn", "ablation_radius"])
@pytest.mark.parametrize("preset", ["paper", "mnist"])
def test_convnet13_of_the_paper_and_mnist_presets_drops_whole_channels(sweep_name, preset):
    """Every dropout layer of the ConvNet-13 that a paper or mnist preset builds keeps or drops whole maps."""
    from search_spaces import get_sweep, presets

    if preset not in presets(sweep_name):
        pytest.skip(f"{sweep_name} has no {preset} preset")
    first = get_sweep(sweep_name, preset).trials()[0]
    cfg = TrainConfig.from_dict({**first, "vd": False, "width": 0.125, "device": "cpu"})
    assert cfg.arch == "convnet13"
    model = build_model(cfg).train()
    drops = _of(model, Dropout)
    assert len(drops) == 2
    for d in drops:
        torch.manual_seed(0)
        assert _maps_whole(d(torch.ones(64, 16, 4, 4)), 1 / (1 - cfg.dropout))
