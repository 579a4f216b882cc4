"""Pillow's RandAugment operations as FixMatch's RA runs them, batched on the device, on 8-bit pixel values.

FixMatch's strong view (google-research/fixmatch, third_party/auto_augment/augmentations.py) turns each
image into an 8-bit RGBA PIL image (`pil_wrap`), applies its ops with Pillow, and maps it back, pixels
left transparent by a geometric op set to the middle grey (`pil_unwrap`: alpha 0 -> 0 in their [-1, 1]
units). Here a batch p (n, C, H, W) float32 holds integer pixel values 0..255 and `opaque` (n, 1, H, W)
bool stands for the alpha channel; every op takes its parameter per image and returns Pillow's 8-bit
result (Pillow 13, src/libImaging/*.c):
- look-up ops, as ImageOps builds their tables: autocontrast (per channel, lo..hi stretched to 0..255 in
  float64, truncated), equalize (per channel, integer cumulative histogram), posterize (low bits cleared),
  solarize (values >= threshold inverted). FixMatch calls them on `img.convert('RGB')`, so the alpha is
  dropped: earlier fill pixels become opaque black and count in the histograms.
- enhancers, as ImageEnhance: Image.blend(degenerate, image, f) in float32, truncated (Blend.c), the
  degenerate black (brightness), the luma L = (19595 R + 38470 G + 7471 B + 2^15) >> 16 (color), the
  rounded mean luma (contrast), or the SMOOTH 3x3 filter (1 1 1 / 1 5 1 / 1 1 1, / 13, borders kept,
  summed in Filter.c's order, + 0.5 truncated) (sharpness); the alpha is kept.
- geometric ops, as Image.transform's nearest-neighbour affine map in 16.16 fixed point (Geometry.c
  affine_fixed; a translation takes ImagingScaleAffine, the same pixels): output pixel (x, y) reads input
  ((a2 + x a0 + y a1) >> 16, (a5 + x a3 + y a4) >> 16) with a2, a5 taken at the pixel centres;
  uncovered pixels become transparent black. Rotation builds its matrix as Image.rotate does.
A grey image (C = 1) is taken as R = G = B.

    pytest tests/test_augment_pil.py -q   # every op and level against Pillow
"""
from __future__ import annotations

import functools
import math

import torch

ENHANCERS = ("brightness", "color", "contrast", "sharpness")
LOOKUPS = ("autocontrast", "equalize", "posterize", "solarize")
GEOMETRIC = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")
GREY = 127.5          # pil_unwrap's value of a transparent pixel (0 in FixMatch's [-1, 1] units)
LEVELS = range(10)    # FixMatch draws levels 1..9 (PARAMETER_MAX 10); tables cover 0..9
SIDE = 32             # translate's levels are pixels of a 32-pixel image


def to_pixels(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Standardised x = (pixel - mean) / std (n, C, H, W) back to its integer pixels 0..255, float32."""
    return (x * std + mean).round_().clamp_(0, 255)


def from_pixels(p: torch.Tensor, opaque: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Pixels back to standardised floats; transparent pixels take GREY, as pil_unwrap's fill."""
    return (torch.where(opaque, p, GREY) - mean) / std


# ---------------------------------------------------------------- per-level parameters, FixMatch's table

def enhance_factor(level: int) -> float:
    return float(level) * 1.8 / 10 + .1          # float_parameter(level, 1.8) + .1


def posterize_bits(level: int) -> int:
    return 4 - int(level * 4 / 10)               # 4 - int_parameter(level, 4)


def solarize_threshold(level: int) -> int:
    return 256 - int(level * 256 / 10)           # 256 - int_parameter(level, 256)


def _fix(v: float) -> int:
    return math.floor(v * 65536.0 + 0.5)         # Geometry.c FIX: 16.16 fixed point


def pil_matrix(op: str, level: int, sign: int, H: int, W: int) -> list[float]:
    """The affine data (a0..a5, output -> input) FixMatch's op hands to Image.transform, as Pillow builds it."""
    if op == "rotate":                            # Image.rotate(degrees), center (W / 2, H / 2)
        angle = -math.radians((sign * int(level * 30 / 10)) % 360.0)
        m = [round(math.cos(angle), 15), round(math.sin(angle), 15), 0.0,
             round(-math.sin(angle), 15), round(math.cos(angle), 15), 0.0]
        cx, cy = W / 2, H / 2
        m[2], m[5] = m[0] * -cx + m[1] * -cy + m[2], m[3] * -cx + m[4] * -cy + m[5]
        m[2] += cx
        m[5] += cy
        return m
    if op in ("shear_x", "shear_y"):
        s = sign * (float(level) * 0.3 / 10)
        return [1, s, 0, 0, 1, 0] if op == "shear_x" else [1, 0, 0, s, 1, 0]
    if op in ("translate_x", "translate_y"):
        t = sign * round(int(level * 10 / 10) * W / SIDE)
        return [1, 0, t, 0, 1, 0] if op == "translate_x" else [1, 0, 0, 0, 1, t]
    raise ValueError(f"unknown geometric op {op!r}; choose one of {list(GEOMETRIC)}")


def fixed_matrix(a: list[float]) -> list[int]:
    """affine_fixed's integers a0, a1, a2, a3, a4, a5 (a2, a5 at the first pixel's centre)."""
    return [_fix(a[0]), _fix(a[1]), _fix(a[2] + a[0] * 0.5 + a[1] * 0.5),
            _fix(a[3]), _fix(a[4]), _fix(a[5] + a[3] * 0.5 + a[4] * 0.5)]


@functools.cache
def param_table(op: str, H: int = SIDE, W: int = SIDE) -> torch.Tensor:
    """op's parameter at every level (read only, cached): (10,) float32 factors, (10,) int64 bits or thresholds, or (2, 10, 6)
    int64 fixed-point matrices indexed [sign > 0, level]."""
    if op in ENHANCERS:
        return torch.tensor([enhance_factor(k) for k in LEVELS], dtype=torch.float32)  # C's (float) cast
    if op == "posterize":
        return torch.tensor([posterize_bits(k) for k in LEVELS])
    if op == "solarize":
        return torch.tensor([solarize_threshold(k) for k in LEVELS])
    if op in GEOMETRIC:
        return torch.tensor([[fixed_matrix(pil_matrix(op, k, s, H, W)) for k in LEVELS] for s in (-1, 1)])
    return torch.zeros(len(LEVELS))


# ---------------------------------------------------------------- the ops, (n, C, H, W) -> same

def luma(p: torch.Tensor) -> torch.Tensor:
    """Pillow's L of RGB pixels (n, 3, H, W) -> (n, 1, H, W), integer arithmetic; a grey image is its own L."""
    if p.shape[1] == 1:
        return p
    q = p.to(torch.int32)
    return ((q[:, 0:1] * 19595 + q[:, 1:2] * 38470 + q[:, 2:3] * 7471 + 0x8000) >> 16).to(p.dtype)


def blend(d: torch.Tensor, p: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """Image.blend(d, p, f) for 8-bit images: trunc(clip(d + f (p - d))) in float32, f (n,) per image."""
    return (d + f.view(-1, 1, 1, 1) * (p - d)).clamp_(0, 255).floor_()


def smooth(p: torch.Tensor) -> torch.Tensor:
    """ImageFilter.SMOOTH on (n, C, H, W): inner pixels filtered in Filter.c's float32 order, borders copied."""
    k1 = torch.tensor(1.0) / torch.tensor(13.0)   # the kernel divided by its scale in float32, as _imaging.c
    k5 = torch.tensor(5.0) / torch.tensor(13.0)

    def row(r, mid):  # KERNEL1x3 over each inner x: r[x-1] k + r[x] mid + r[x+1] k, left to right
        return (r[..., :-2] * k1 + r[..., 1:-1] * mid) + r[..., 2:] * k1

    ss = 0.5 + row(p[:, :, 2:], k1)               # the row below first (in1), then the row, then above
    ss = ss + row(p[:, :, 1:-1], k5)
    ss = ss + row(p[:, :, :-2], k1)
    out = p.clone()
    out[:, :, 1:-1, 1:-1] = ss.clamp_(0, 255).floor_()
    return out


def enhance(p: torch.Tensor, op: str, f: torch.Tensor) -> torch.Tensor:
    """ImageEnhance.<op>(image).enhance(f): the blend of p with its degenerate image, f (n,) float32."""
    if op == "brightness":
        d = torch.zeros_like(p)
    elif op == "color":
        d = luma(p).expand_as(p)
    elif op == "contrast":  # int(ImageStat mean of L + 0.5), the mean in float64
        L = luma(p).flatten(1).double()
        d = (L.sum(1) / L.shape[1] + 0.5).floor().to(p.dtype).view(-1, 1, 1, 1).expand_as(p)
    elif op == "sharpness":
        d = smooth(p)
    else:
        raise ValueError(f"unknown enhancer {op!r}; choose one of {list(ENHANCERS)}")
    return blend(d, p, f)


def autocontrast(p: torch.Tensor) -> torch.Tensor:
    """ImageOps.autocontrast: per channel, int(v * 255 / (hi - lo) - lo * scale) clipped; unchanged where hi <= lo."""
    lo = p.amin((2, 3), keepdim=True).double()    # (n, C, 1, 1)
    hi = p.amax((2, 3), keepdim=True).double()
    scale = torch.full_like(lo, 255.0) / (hi - lo).clamp(min=1)  # not 255.0 / t: torch takes that as 255 * (1 / t)
    out = (p.double() * scale + -lo * scale).trunc().clamp(0, 255)
    return torch.where(hi > lo, out, p.double()).to(p.dtype)


def equalize(p: torch.Tensor) -> torch.Tensor:
    """ImageOps.equalize: per channel, lut[i] = (step // 2 + #values below i) // step, step = (N - count of
    the top value) // 255; unchanged where one value or step 0."""
    n, C, H, W = p.shape
    v = p.long().flatten(2)                                                     # (n, C, HW)
    h = torch.zeros(n, C, 256, dtype=torch.long, device=p.device).scatter_add_(2, v, torch.ones_like(v))
    top = h.gather(2, v.amax(2, keepdim=True))                                  # (n, C, 1)
    step = (H * W - top) // 255
    below = h.cumsum(2) - h                                                     # (n, C, 256)
    lut = (step // 2 + below) // step.clamp(min=1)
    same = ((h > 0).sum(2, keepdim=True) <= 1) | (step == 0)
    lut = torch.where(same, torch.arange(256, device=p.device), lut).clamp(max=255)  # image.point clips
    return lut.gather(2, v).view(n, C, H, W).to(p.dtype)


def posterize(p: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """ImageOps.posterize: v & ~(2^(8 - bits) - 1), bits (n,) per image."""
    q = torch.exp2((8 - bits).to(p.dtype)).view(-1, 1, 1, 1)
    return (p / q).floor_() * q


def solarize(p: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """ImageOps.solarize: v if v < threshold else 255 - v, threshold (n,) per image."""
    return torch.where(p < threshold.to(p.dtype).view(-1, 1, 1, 1), p, 255 - p)


def affine(p: torch.Tensor, opaque: torch.Tensor, A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Image.transform(AFFINE, NEAREST) of RGBA images with A (n, 6) int64 fixed-point matrices (fixed_matrix):
    out (n, C, H, W) and its opacity (n, 1, H, W); pixels mapped from outside the image are transparent black."""
    n, C, H, W = p.shape
    y = torch.arange(H, device=p.device).view(1, H, 1)
    x = torch.arange(W, device=p.device).view(1, 1, W)
    a = [A[:, i].to(p.device).view(n, 1, 1) for i in range(6)]
    xin = (a[2] + x * a[0] + y * a[1]) >> 16                                    # (n, H, W), floor
    yin = (a[5] + x * a[3] + y * a[4]) >> 16
    inside = ((xin >= 0) & (xin < W) & (yin >= 0) & (yin < H)).view(n, 1, H * W)
    src = (yin.clamp(0, H - 1) * W + xin.clamp(0, W - 1)).view(n, 1, H * W)
    out = p.flatten(2).gather(2, src.expand(n, C, H * W))
    alpha = opaque.flatten(2).gather(2, src) & inside
    return torch.where(inside, out, 0.0).view(n, C, H, W), alpha.view(n, 1, H, W)


def apply(p: torch.Tensor, opaque: torch.Tensor, op: str, level: torch.Tensor,
          sign: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FixMatch's op at integer levels (n,) (and signs (n,) +-1 for the geometric ops) on pixels p (n, C, H, W)
    with opacity (n, 1, H, W); level and sign on the host."""
    dev = p.device
    if op == "identity":
        return p, opaque
    if op in GEOMETRIC:
        A = param_table(op, *p.shape[-2:])[(sign > 0).long(), level]            # (n, 6)
        return affine(p, opaque, A.to(dev))
    if op in ENHANCERS:
        return enhance(p, op, param_table(op)[level].to(dev)), opaque
    opaque = torch.ones_like(opaque)  # through RGB: the alpha is gone
    if op == "autocontrast":
        return autocontrast(p), opaque
    if op == "equalize":
        return equalize(p), opaque
    if op == "posterize":
        return posterize(p, param_table(op)[level].to(dev)), opaque
    if op == "solarize":
        return solarize(p, param_table(op)[level].to(dev)), opaque
    raise ValueError(f"unknown op {op!r}; choose identity or one of {list(LOOKUPS + ENHANCERS + GEOMETRIC)}")
