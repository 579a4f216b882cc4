"""FixMatch's strong augmentation, batched on the device: RandAugment (torchvision's ops) + Cutout.

    strong_augment(x, generator, n_ops=2, cutout=0.5, groups=16) -> x   (B, C, H, W) -> same

RandAugment as FixMatch uses it (Sohn et al. 2020, "RA" variant): `n_ops` operations drawn
uniformly from OPS, each with a magnitude drawn uniformly from FixMatch's range (RANGES), no
global magnitude to tune; then Cutout, always. The ops are torchvision.transforms.v2.functional.

Our inputs are standardised / ZCA-whitened floats, not uint8 pictures, so:
- photometric ops (brightness ... solarize) run on u = (x - lo) / (hi - lo) in [0, 1], lo, hi
  the min and max of each image over all channels and pixels, and are mapped back with the
  same lo, hi. On a 1-channel image autocontrast is then the identity and color (saturation)
  always is; both stay in the draw, as the identity op does.
- geometric ops (rotate, shear, translate) fill the uncovered pixels with x = 0, the data
  mean, like `data.augment`'s zero padding (FixMatch fills with gray): done as
  op(u - u0) + u0 with fill 0, u0 the image's u-value of x = 0 (exact: the ops are linear).
- Cutout sets one square of side round(cutout * min(H, W)) to 0 (the mean), centre uniform
  over the image, clipped at the border (DeVries & Taylor): 16 px on 32x32, 4 px on 8x8.
Per-sample random ops: torchvision's ops take one magnitude per call, so the batch is split
into `groups` contiguous chunks (the batch order is already random), and each chunk draws
its own ops and magnitudes: 2 * groups op calls per batch, one host sync for the draws.
Cutout's squares are per sample. All random numbers come from `generator`.

    pytest tests/test_fixmatch.py -q
"""
from __future__ import annotations

import math

import torch
import torchvision.transforms.v2.functional as TF
from torchvision.transforms.v2 import InterpolationMode

OPS = ("identity", "autocontrast", "equalize", "brightness", "color", "contrast", "sharpness",
       "posterize", "solarize", "rotate", "shear_x", "shear_y", "translate_x", "translate_y")
# Magnitude ranges of FixMatch's RandAugment table; a magnitude is uniform in [low, high].
RANGES = {"brightness": (0.05, 0.95), "color": (0.05, 0.95), "contrast": (0.05, 0.95),
          "sharpness": (0.05, 0.95), "posterize": (4, 8), "solarize": (0.0, 1.0),
          "rotate": (-30.0, 30.0), "shear_x": (-0.3, 0.3), "shear_y": (-0.3, 0.3),
          "translate_x": (-0.3, 0.3), "translate_y": (-0.3, 0.3)}
GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")
EPS = 1e-8
NEAREST = InterpolationMode.NEAREST  # PIL's default resampling, as FixMatch's reference code


def _photometric(u: torch.Tensor, op: str, m: float) -> torch.Tensor:
    """One photometric op on u (n, C, H, W) in [0, 1] with magnitude m (already in its range)."""
    if op == "identity":
        return u
    if op == "autocontrast":
        return TF.autocontrast(u)
    if op == "equalize":
        return TF.equalize(u)
    if op == "brightness":
        return TF.adjust_brightness(u, m)
    if op == "color":
        return TF.adjust_saturation(u, m)
    if op == "contrast":
        return TF.adjust_contrast(u, m)
    if op == "sharpness":
        return TF.adjust_sharpness(u, m)
    if op == "posterize":
        return TF.posterize(u, int(m))
    if op == "solarize":
        return TF.solarize(u, m)
    raise ValueError(f"unknown photometric op {op!r}; choose one of {list(OPS)}")


def _geometric(u: torch.Tensor, op: str, m: float, u0: torch.Tensor) -> torch.Tensor:
    """One geometric op on u (n, C, H, W); uncovered pixels become u0 (n, 1, 1, 1)."""
    H, W = u.shape[-2:]
    angle, shear, shift = 0.0, [0.0, 0.0], [0.0, 0.0]
    if op == "rotate":
        angle = m
    elif op == "shear_x":
        shear = [math.degrees(math.atan(m)), 0.0]  # PIL's coefficient m = tan(shear angle)
    elif op == "shear_y":
        shear = [0.0, math.degrees(math.atan(m))]
    elif op == "translate_x":
        shift = [m * W, 0.0]  # fraction of the image size -> pixels
    elif op == "translate_y":
        shift = [0.0, m * H]
    else:
        raise ValueError(f"unknown geometric op {op!r}; choose one of {list(GEOMETRIC)}")
    out = TF.affine(u - u0, angle=angle, translate=shift, scale=1.0, shear=shear,
                    interpolation=NEAREST, fill=0.0)
    return out + u0


def apply_op(x: torch.Tensor, op: str, m: float) -> torch.Tensor:
    """One RandAugment op on standardised images x (n, C, H, W) -> (n, C, H, W), see module docstring."""
    lo = x.amin(dim=(1, 2, 3), keepdim=True)                    # (n, 1, 1, 1)
    scale = (x.amax(dim=(1, 2, 3), keepdim=True) - lo).clamp(min=EPS)
    u = (x - lo) / scale                                        # (n, C, H, W) in [0, 1]
    if op in GEOMETRIC:
        u = _geometric(u, op, m, (0.0 - lo) / scale)
    else:
        u = _photometric(u, op, m)
    return u * scale + lo


def magnitude(op: str, t: float) -> float:
    """Map t ~ U[0, 1) to op's range; posterize gets an integer number of bits in [4, 8]."""
    if op not in RANGES:
        return 0.0
    low, high = RANGES[op]
    if op == "posterize":
        return float(min(int(low + t * (high - low + 1)), high))
    return low + t * (high - low)


def rand_augment(x: torch.Tensor, generator: torch.Generator, n_ops: int = 2, groups: int = 16) -> torch.Tensor:
    """RandAugment with FixMatch's random magnitudes on (B, C, H, W); one op draw per group of rows."""
    if n_ops == 0 or x.shape[0] == 0:
        return x
    G = min(groups, x.shape[0])
    dev = generator.device
    op_idx = torch.randint(len(OPS), (G, n_ops), generator=generator, device=dev).tolist()  # host sync
    t = torch.rand((G, n_ops), generator=generator, device=dev).tolist()
    out = []
    for g, chunk in enumerate(torch.tensor_split(x, G)):  # (n_g, C, H, W) each
        for k in range(n_ops):
            op = OPS[op_idx[g][k]]
            chunk = apply_op(chunk, op, magnitude(op, t[g][k]))
        out.append(chunk)
    return torch.cat(out)


def cutout(x: torch.Tensor, frac: float, generator: torch.Generator) -> torch.Tensor:
    """Zero (= the data mean) one square of side round(frac * min(H, W)) per image, centre uniform."""
    B, C, H, W = x.shape
    side = round(frac * min(H, W))
    if side == 0 or B == 0:
        return x
    dev = x.device
    cy = torch.randint(H, (B,), generator=generator, device=generator.device).to(dev)  # (B,)
    cx = torch.randint(W, (B,), generator=generator, device=generator.device).to(dev)
    y0, x0 = cy - side // 2, cx - side // 2                     # top-left, may lie outside
    rows = torch.arange(H, device=dev)[None, :]                 # (1, H)
    cols = torch.arange(W, device=dev)[None, :]
    in_rows = (rows >= y0[:, None]) & (rows < y0[:, None] + side)   # (B, H)
    in_cols = (cols >= x0[:, None]) & (cols < x0[:, None] + side)   # (B, W)
    hole = in_rows[:, None, :, None] & in_cols[:, None, None, :]    # (B, 1, H, W)
    return x.masked_fill(hole, 0.0)


def strong_augment(x: torch.Tensor, generator: torch.Generator, n_ops: int = 2, cutout_frac: float = 0.5,
                   groups: int = 16) -> torch.Tensor:
    """FixMatch's strong view A(x): RandAugment (n_ops, random magnitudes) then Cutout. (B, C, H, W) -> same."""
    if x.dim() != 4 or not x.is_floating_point():
        raise ValueError(f"strong_augment expects float images (B, C, H, W), got {tuple(x.shape)} {x.dtype}; "
                         f"pass the preprocessed float batch")
    if n_ops < 0 or groups < 1 or not 0 <= cutout_frac <= 1:
        raise ValueError(f"need n_ops >= 0, groups >= 1 and cutout_frac in [0, 1], got {n_ops}, {groups}, "
                         f"{cutout_frac}; use FixMatch's 2, 16, 0.5")
    return cutout(rand_augment(x, generator, n_ops, groups), cutout_frac, generator)
