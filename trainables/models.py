"""Networks: ConvNet-13 of the paper's appendix table, and a small member of the same family for 8x8 digits.

Gaussian input noise and dropout live inside the network (active in train mode only).
Every conv is followed by BatchNorm (PyTorch momentum 0.001 = TF 0.999, eps 1e-8) and
LeakyReLU(0.1). With variational=True every conv/linear is a VD layer (trainables.variational)
and the dropout layers are removed. He-normal init, zero biases.

    python -c "import torch; from trainables.models import ConvNet13; print(ConvNet13(width=0.125)(torch.randn(2, 3, 32, 32)).shape)"
    pytest tests/test_models.py -q
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from trainables.variational import VDConv2d, VDLinear, vd_layers
from trainables.wrn import WideResNet

LEAK = 0.1  # LeakyReLU negative slope


class GaussianNoise(nn.Module):
    """x + N(0, sigma^2) noise in train mode; identity in eval mode."""

    def __init__(self, sigma: float):
        super().__init__()
        if sigma < 0:
            raise ValueError(f"GaussianNoise sigma must be >= 0, got {sigma}")
        self.sigma = sigma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.sigma == 0:
            return x
        return x + self.sigma * torch.randn(x.shape, dtype=x.dtype, device=x.device)  # logical order, any layout

    def extra_repr(self) -> str:
        return f"sigma={self.sigma}"


class Dropout(nn.Module):
    """Dropout with rate p in train mode; identity in eval mode.

    mode="channel": one keep/drop decision per (image, channel), the whole H x W map kept (scaled by
    1 / (1 - p)) or zeroed, as the authors' dropout_2D (noise shape [B, 1, 1, C] in TF's NHWC) and
    PyTorch's Dropout2d. mode="element": one decision per activation. The CPU mask is `uniform >= p`
    drawn in logical (NCHW) order: ATen's CPU bernoulli_ is slower than a uniform_ for the same law.
    On CUDA element mode is nn.functional.dropout's fused kernel.
    """

    def __init__(self, p: float, mode: str = "channel"):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout must lie in [0, 1), got {p}")
        if mode not in ("channel", "element"):
            raise ValueError(f"unknown dropout mode {mode!r}; choose 'channel' or 'element'")
        self.p, self.mode = p, mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, C, H, W)
        if not self.training or self.p == 0:
            return x
        if self.mode == "element" and x.is_cuda:
            return nn.functional.dropout(x, self.p, training=True)
        shape = (*x.shape[:2], 1, 1) if self.mode == "channel" else x.shape  # (B, C, 1, 1) | (B, C, H, W)
        keep = torch.rand(shape, dtype=x.dtype, device=x.device) >= self.p
        return x * keep / (1 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}, mode={self.mode}"


def _channels(c: int, width: float) -> int:
    return max(1, round(c * width))


def _conv_bn(cin: int, cout: int, k: int, padding: int, variational: bool,
             bn_momentum: float, bn_eps: float) -> list[nn.Module]:
    """conv (no bias: BN follows) -> BatchNorm -> LeakyReLU(0.1)."""
    conv = VDConv2d(cin, cout, k, padding=padding, bias=False) if variational else \
        nn.Conv2d(cin, cout, k, padding=padding, bias=False)
    return [conv, nn.BatchNorm2d(cout, eps=bn_eps, momentum=bn_momentum), nn.LeakyReLU(LEAK)]


# TensorFlow's variance_scaling_initializer(2.0, "fan_in", "normal") from r1.12 on (the authors' he_normal,
# my_utils/tensorflow_utils/initializers.py, which cites r1.12's init_ops.py): a normal truncated at two
# standard deviations, its std divided by the truncated unit normal's std so that the draws' std is
# sqrt(2 / fan_in); before r1.12 "normal" was untruncated.
TRUNC_STD = 0.87962566103423978  # std of N(0, 1) truncated to [-2, 2] (TF's constant)


def _he_init(model: nn.Module, weight_init: str = "kaiming") -> None:
    """Every conv/linear weight (theta for VD) He-initialised over its fan_in, zero biases: kaiming =
    N(0, 2 / ((1 + LEAK^2) fan_in)), PyTorch's for LeakyReLU; tf_he_normal = the authors' TensorFlow draw."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear, VDConv2d, VDLinear)):
            w = m.theta if isinstance(m, (VDConv2d, VDLinear)) else m.weight
            if weight_init == "tf_he_normal":
                std = math.sqrt(2.0 / w[0].numel()) / TRUNC_STD            # fan_in = in (x k x k)
                nn.init.trunc_normal_(w, 0.0, std, -2 * std, 2 * std)
            else:
                nn.init.kaiming_normal_(w, a=LEAK, mode="fan_in", nonlinearity="leaky_relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def _check_args(num_classes, in_channels, width, dropout, input_noise):
    if num_classes < 1 or in_channels < 1:
        raise ValueError(f"num_classes and in_channels must be >= 1, got {num_classes}, {in_channels}")
    if width <= 0:
        raise ValueError(f"width must be > 0, got {width}")
    if not 0 <= dropout < 1:
        raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
    if input_noise < 0:
        raise ValueError(f"input_noise must be >= 0, got {input_noise}")


def _check_input(net: nn.Module, x: torch.Tensor) -> None:
    if x.dim() != 4 or x.shape[1] != net.in_channels:
        raise ValueError(f"{type(net).__name__} expects input (B, {net.in_channels}, H, W), got "
                         f"{tuple(x.shape)}; check in_channels / the data set's layout")


class _ConvNet(nn.Module):
    """What ConvNet-13 and its small sibling share: input noise, a body of conv-BN-LeakyReLU blocks with
    max-pooling and dropout (`body`), global average pooling and the classifier (VD layers under VBI,
    where dropout is removed). CHANNELS: the body's channel counts at width 1; the first is the
    classifier's input."""

    CHANNELS: tuple[int, ...] = ()
    DEFAULT_IN_CHANNELS = 3

    def __init__(self, num_classes: int = 10, in_channels: int | None = None, variational: bool = False,
                 width: float = 1.0, dropout: float = 0.5, input_noise: float = 0.15,
                 bn_momentum: float = 0.001, bn_eps: float = 1e-8, dropout_mode: str = "channel",
                 weight_init: str = "kaiming"):
        super().__init__()
        in_channels = self.DEFAULT_IN_CHANNELS if in_channels is None else in_channels
        _check_args(num_classes, in_channels, width, dropout, input_noise)
        self.in_channels = in_channels
        cs = [_channels(c, width) for c in self.CHANNELS]
        block = lambda cin, cout, k, pad: _conv_bn(cin, cout, k, pad, variational, bn_momentum, bn_eps)
        drop = lambda: [] if variational else [Dropout(dropout, dropout_mode)]  # removed under VD
        fc = VDLinear(cs[0], num_classes) if variational else nn.Linear(cs[0], num_classes)
        self.layers = nn.Sequential(
            GaussianNoise(input_noise),
            *self.body(in_channels, *cs, block=block, drop=drop),                       # (B, c1, h, w)
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),                                       # (B, c1)
            fc,                                                                          # (B, K)
        )
        _he_init(self, weight_init)

    @staticmethod
    def body(cin: int, *channels: int, block, drop) -> list[nn.Module]:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, K) logits
        _check_input(self, x)
        return self.layers(x)


class ConvNet13(_ConvNet):
    """ConvNet-13 (appendix table): 32x32 input -> logits. Channels 128/256/512 times `width`."""

    CHANNELS = (128, 256, 512)

    @staticmethod
    def body(cin, c1, c2, c3, *, block, drop):
        return [*block(cin, c1, 3, 1), *block(c1, c1, 3, 1), *block(c1, c1, 3, 1),  # (B, c1, 32, 32)
                nn.MaxPool2d(2), *drop(),                                             # (B, c1, 16, 16)
                *block(c1, c2, 3, 1), *block(c2, c2, 3, 1), *block(c2, c2, 3, 1),   # (B, c2, 16, 16)
                nn.MaxPool2d(2), *drop(),                                             # (B, c2, 8, 8)
                *block(c2, c3, 3, 0),                                               # (B, c3, 6, 6) valid
                *block(c3, c2, 1, 0), *block(c2, c1, 1, 0)]                         # (B, c1, 6, 6)


class ConvNetSmall(_ConvNet):
    """ConvNet-13's family scaled to 8x8 inputs (digits): channels 32/64 times `width`.

    noise -> conv3x3(32) -> pool -> dropout -> conv3x3(64) -> pool -> dropout -> conv3x3(64)
    -> conv1x1(32) -> global average pool -> FC. One conv per stage keeps a quick trial's steps
    cheap on a CPU (benchmarks/results/trainer_throughput_cpu.json).
    """

    CHANNELS = (32, 64)
    DEFAULT_IN_CHANNELS = 1

    @staticmethod
    def body(cin, c1, c2, *, block, drop):
        return [*block(cin, c1, 3, 1),            # (B, c1, 8, 8)
                nn.MaxPool2d(2), *drop(),           # (B, c1, 4, 4)
                *block(c1, c2, 3, 1),             # (B, c2, 4, 4)
                nn.MaxPool2d(2), *drop(),           # (B, c2, 2, 2)
                *block(c2, c2, 3, 1),             # (B, c2, 2, 2)
                *block(c2, c1, 1, 0)]             # (B, c1, 2, 2)


# Image channels of each data set (grey digits and MNIST: 1; CIFAR, SVHN: RGB).
IN_CHANNELS = {"digits": 1, "mnist": 1, "cifar10": 3, "cifar100": 3, "svhn": 3}


def build_model(cfg, in_channels: int | None = None) -> nn.Module:
    """The network a TrainConfig describes (arch, vd, width, dropout, input_noise, BN settings).

    in_channels: the loaded data's channel count (x.shape[1]); None takes IN_CHANNELS[cfg.dataset].
    """
    archs = {"convnet13": ConvNet13, "convnet_small": ConvNetSmall, "wrn28_2": WideResNet}
    if cfg.arch not in archs:
        raise ValueError(f"unknown arch {cfg.arch!r}; choose one of {sorted(archs)}")
    if in_channels is None:
        if cfg.dataset not in IN_CHANNELS:
            raise ValueError(f"no channel count known for dataset {cfg.dataset!r}; pass in_channels= "
                             f"(the data's x.shape[1]) or add it to models.IN_CHANNELS")
        in_channels = IN_CHANNELS[cfg.dataset]
    # WRN-28-2 has no dropout layer and FixMatch's own init
    extra = {} if cfg.arch == "wrn28_2" else {"dropout_mode": cfg.dropout_mode, "weight_init": cfg.weight_init}
    net = archs[cfg.arch](
        num_classes=cfg.num_classes, in_channels=in_channels,
        variational=cfg.vd, width=cfg.width, dropout=cfg.dropout, input_noise=cfg.input_noise,
        bn_momentum=cfg.bn_momentum, bn_eps=cfg.bn_eps, **extra)
    for m in vd_layers(net):
        m.masked = cfg.vd_masked
    return net
