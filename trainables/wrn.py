"""WRN-28-2: the Wide ResNet that FixMatch (Sohn et al. 2020) trains on CIFAR-10, for the fixmatch sweep.

Depth 28 = 6n + 4 with n = 4 pre-activation basic blocks (two 3x3 convs each) in each of 3
groups; widen factor 2: channels 16 (stem conv), then 32, 64, 128 at 32x32, 16x16, 8x8. As google-research/fixmatch's `libml/models.py` (`ResNet`):
a block is BN -> LeakyReLU(0.1) -> conv3x3 (stride) -> BN -> LeakyReLU -> conv3x3, added to the
block's input; where the channel count changes the shortcut is a strided 1x1 conv of the block's
raw input, except in the first group, whose first block feeds it the activated input
(`activate_before_residual`). BN -> LeakyReLU -> global average pool -> linear ends the network.
BatchNorm momentum 0.001 (PyTorch convention; TF 0.999), FixMatch's conv init N(0, 2 / (k^2 c_out))
(He normal, fan_out) and Glorot-normal classifier. Convs carry no bias: every conv's output reaches
a BatchNorm (through the residual sums, whose shortcut convs are linear), which subtracts any
per-channel constant, so a bias would be a redundant parameter (FixMatch's TF convs have one).
With variational=True every conv/linear is a VD layer (trainables.variational), as ConvNet-13's.

    python -c "import torch; from trainables.wrn import WideResNet; print(WideResNet()(torch.randn(2, 3, 32, 32)).shape)"
    pytest tests/test_wrn.py -q
"""
from __future__ import annotations

import torch
import torch.nn as nn

from trainables.variational import VDConv2d, VDLinear

LEAK = 0.1  # LeakyReLU negative slope (FixMatch's code)


def _conv(cin: int, cout: int, k: int, stride: int, variational: bool) -> nn.Module:
    """k x k conv, "same" padding, no bias (BatchNorm follows downstream)."""
    if variational:
        return VDConv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False)


class BasicBlock(nn.Module):
    """Pre-activation basic block: x + conv(act(bn(conv(act(bn(x)))))) with a 1x1 shortcut where the
    channel count changes (of the activated input if activate_before_residual, else of x)."""

    def __init__(self, cin: int, cout: int, stride: int, variational: bool, bn_momentum: float, bn_eps: float,
                 activate_before_residual: bool = False):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin, eps=bn_eps, momentum=bn_momentum)
        self.conv1 = _conv(cin, cout, 3, stride, variational)
        self.bn2 = nn.BatchNorm2d(cout, eps=bn_eps, momentum=bn_momentum)
        self.conv2 = _conv(cout, cout, 3, 1, variational)
        self.act = nn.LeakyReLU(LEAK)
        self.shortcut = _conv(cin, cout, 1, stride, variational) if cin != cout or stride != 1 else None
        self.activate_before_residual = activate_before_residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, cin, H, W) -> (B, cout, H / stride, W / stride)
        a = self.act(self.bn1(x))
        out = self.conv2(self.act(self.bn2(self.conv1(a))))
        if self.shortcut is None:
            return x + out
        return self.shortcut(a if self.activate_before_residual else x) + out


class WideResNet(nn.Module):
    """WRN-depth-widen_factor for 32x32 inputs -> logits; channels 16, 16k, 32k, 64k times `width`.

    dropout and input_noise exist for build_model's common signature only: FixMatch trains this
    network without either, so anything but 0 is refused rather than silently ignored.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, variational: bool = False,
                 width: float = 1.0, dropout: float = 0.0, input_noise: float = 0.0,
                 bn_momentum: float = 0.001, bn_eps: float = 1e-3, depth: int = 28, widen_factor: int = 2):
        super().__init__()
        if num_classes < 1 or in_channels < 1:
            raise ValueError(f"num_classes and in_channels must be >= 1, got {num_classes}, {in_channels}")
        if width <= 0:
            raise ValueError(f"width must be > 0, got {width}")
        if (depth - 4) % 6 or depth < 10 or widen_factor < 1:
            raise ValueError(f"a Wide ResNet needs depth = 6n + 4 (n >= 1) and widen_factor >= 1, got depth "
                             f"{depth}, widen_factor {widen_factor}; FixMatch's is depth 28, widen_factor 2")
        if dropout != 0 or input_noise != 0:
            raise ValueError(f"WideResNet has no dropout or input noise layer (FixMatch trains it without), got "
                             f"dropout={dropout}, input_noise={input_noise}; set both to 0")
        self.in_channels = in_channels
        n = (depth - 4) // 6  # blocks per group
        c0, c1, c2, c3 = (max(1, round(c * width)) for c in (16, 16 * widen_factor, 32 * widen_factor,
                                                             64 * widen_factor))
        bn = lambda c: nn.BatchNorm2d(c, eps=bn_eps, momentum=bn_momentum)

        def group(cin: int, cout: int, stride: int, first_activated: bool) -> nn.Sequential:
            return nn.Sequential(*(BasicBlock(cin if i == 0 else cout, cout, stride if i == 0 else 1, variational,
                                              bn_momentum, bn_eps, activate_before_residual=first_activated and i == 0)
                                   for i in range(n)))

        self.stem = _conv(in_channels, c0, 3, 1, variational)         # (B, c0, 32, 32)
        self.groups = nn.Sequential(group(c0, c1, 1, True),           # (B, c1, 32, 32)
                                    group(c1, c2, 2, False),          # (B, c2, 16, 16)
                                    group(c2, c3, 2, False))          # (B, c3, 8, 8)
        self.head = nn.Sequential(bn(c3), nn.LeakyReLU(LEAK),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten())  # (B, c3)
        self.fc = VDLinear(c3, num_classes) if variational else nn.Linear(c3, num_classes)  # (B, K)
        self._init()

    def _init(self) -> None:
        """FixMatch's: conv N(0, 2 / (k^2 c_out)), Glorot-normal classifier, zero bias, BN scale 1 shift 0."""
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, VDConv2d)):
                nn.init.kaiming_normal_(m.theta if isinstance(m, VDConv2d) else m.weight, mode="fan_out",
                                        nonlinearity="relu")
            elif isinstance(m, (nn.Linear, VDLinear)):
                nn.init.xavier_normal_(m.theta if isinstance(m, VDLinear) else m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, K) logits
        if x.dim() != 4 or x.shape[1] != self.in_channels:
            raise ValueError(f"WideResNet expects input (B, {self.in_channels}, H, W), got {tuple(x.shape)}; "
                             f"check in_channels / the data set's layout")
        return self.fc(self.head(self.groups(self.stem(x))))
