"""FixMatch's strong augmentation, batched on the device: RandAugment + Cutout, in two forms.

    strong_augment(x, generator, n_ops=2, cutout=0.5, groups=16, per_image=False, pixels=None) -> x
                                                                     (B, C, H, W) -> same

FixMatch's code (google-research/fixmatch) defaults to CTAugment; its RandAugment variant ("RA",
Sohn et al. 2020, whose CIFAR-10 250-label error equals CTAugment's there) is the one here, as it
needs no learned state:
- per_image=True, FixMatch's RA (`fixmatch_ra`, the paper preset's; their libml/augment.py
  AugmentPoolRAMC with third_party/auto_augment/augmentations.py): each image draws its own `n_ops`
  ops uniformly from OPS, each applied with probability 0.5 (RA_PROB) at an integer level uniform in
  1..9 (RA_LEVELS), geometric ops with a random sign; then Cutout. The standardised images are taken
  back to their 8-bit pixels (`pixels` = the data set's mean and std), every op computes Pillow's
  8-bit result at FixMatch's magnitude for its level (trainables/augment_pil.py: look-up tables,
  float32 blends, fixed-point affine maps, the pixels a geometric op uncovers transparent, then the
  grey of FixMatch's pil_unwrap), and the result is standardised again. Each op kind runs once per
  op slot on the images that drew it, with per-image levels.
- per_image=False (the quick preset's, cheaper on a CPU): the batch split into `groups` chunks, each
  drawing `n_ops` ops, always applied, with a magnitude uniform over FixMatch's range (RANGES); then
  Cutout. The ops are torchvision.transforms.v2.functional's on each image's own range:
  - photometric ops (brightness ... solarize) run on u = (x - lo) / (hi - lo) in [0, 1], lo, hi
    the min and max of each image over all channels and pixels, and are mapped back with the
    same lo, hi. On a 1-channel image autocontrast is then the identity and color (saturation)
    always is; both stay in the draw, as the identity op does.
  - geometric ops (rotate, shear, translate) fill the uncovered pixels with x = 0, the data
    mean, like `data.augment`'s zero padding: done as op(u - u0) + u0 with fill 0, u0 the
    image's u-value of x = 0 (exact: the ops are linear).
  torchvision's ops take one magnitude per call, so the batch is split into `groups` contiguous
  chunks (the batch order is already random), and each chunk draws its own ops and magnitudes:
  2 * groups op calls per batch, one host sync for the draws.
Cutout (both forms) sets one square of side round(cutout * min(H, W)) to 0 (the mean), centre
uniform over the image, clipped at the border (DeVries & Taylor): 16 px on 32x32, 4 px on 8x8,
per sample. All random numbers come from `generator`.

    pytest tests/test_fixmatch.py tests/test_augment_pil.py -q
"""
from __future__ import annotations

import math

import torch
import torchvision.transforms.v2.functional as TF
from torchvision.transforms.v2 import InterpolationMode

import trainables.augment_pil as pil

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
    B, _, H, W = x.shape
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


# ----------------------------------------------------------------------------- FixMatch's RA, per image

RA_PROB = 0.5          # each drawn op is applied with this probability (their policy's (op, 0.5, level))
RA_LEVELS = (1, 9)     # integer levels, uniform: np.random.randint(1, 10) in AugmentPoolRAMC ('rac', magnitude 10)


def fixmatch_ra(x: torch.Tensor, generator: torch.Generator, n_ops: int = 2,
                pixels: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """FixMatch's RA on (B, C, H, W): per image, n_ops ops drawn uniformly from OPS, each applied with
    probability RA_PROB at an integer level uniform in RA_LEVELS, the geometric ops' sign random; the ops
    applied in draw order on the images' 8-bit pixels as Pillow computes them (trainables/augment_pil.py).
    pixels: (mean, std) with x = (pixel - mean) / std (Dataset.pixels). One host sync per op slot; each op
    kind runs once per slot on the images that drew it."""
    B = x.shape[0]
    if n_ops == 0 or B == 0:
        return x
    if pixels is None:
        raise ValueError("FixMatch's RA works on 8-bit pixels and needs the data set's standardisation (mean, std); "
                         "use a data set standardised from its pixels (Dataset.pixels)")
    mean, std = (t.to(x.device) for t in pixels)
    p = pil.to_pixels(x, mean, std)                                                  # (B, C, H, W) 0..255
    opaque = torch.ones(B, 1, *x.shape[-2:], dtype=torch.bool, device=x.device)     # RGBA's alpha > 0
    dev = generator.device
    for _ in range(n_ops):
        op_idx = torch.randint(len(OPS), (B,), generator=generator, device=dev)          # (B,)
        apply = torch.rand(B, generator=generator, device=dev) < RA_PROB                # (B,)
        level = torch.randint(RA_LEVELS[0], RA_LEVELS[1] + 1, (B,), generator=generator, device=dev)
        sign = torch.randint(2, (B,), generator=generator, device=dev) * 2 - 1           # (B,) +-1
        op_idx, apply, level, sign = (t.cpu() for t in (op_idx, apply, level, sign))   # host sync
        for k, op in enumerate(OPS):
            rows = ((op_idx == k) & apply).nonzero().squeeze(1)                        # (n,)
            if len(rows) == 0 or op == "identity":
                continue
            r = rows.to(x.device)
            p[r], opaque[r] = pil.apply(p[r], opaque[r], op, level[rows], sign[rows])
    return pil.from_pixels(p, opaque, mean, std)


def strong_augment(x: torch.Tensor, generator: torch.Generator, n_ops: int = 2, cutout_frac: float = 0.5,
                   groups: int = 16, per_image: bool = False,
                   pixels: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """FixMatch's strong view A(x): RandAugment then Cutout, (B, C, H, W) -> same. per_image: FixMatch's RA
    (fixmatch_ra, on the pixels that `pixels` = (mean, std) standardised); else one op draw per group of
    rows (rand_augment, random magnitudes, always applied)."""
    if x.dim() != 4 or not x.is_floating_point():
        raise ValueError(f"strong_augment expects float images (B, C, H, W), got {tuple(x.shape)} {x.dtype}; "
                         f"pass the preprocessed float batch")
    if n_ops < 0 or groups < 1 or not 0 <= cutout_frac <= 1:
        raise ValueError(f"need n_ops >= 0, groups >= 1 and cutout_frac in [0, 1], got {n_ops}, {groups}, "
                         f"{cutout_frac}; use FixMatch's 2, 16, 0.5")
    ra = fixmatch_ra(x, generator, n_ops, pixels) if per_image else rand_augment(x, generator, n_ops, groups)
    return cutout(ra, cutout_frac, generator)
