"""trainables/augment_pil.py against Pillow itself, op by op and level by level, the way FixMatch's RA calls
Pillow (third_party/auto_augment/augmentations.py): each image an RGBA PIL image, the look-up ops through
RGB, the enhancers on RGBA, the geometric ops' uncovered pixels transparent.

    pytest tests/test_augment_pil.py -q
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image, ImageEnhance, ImageOps

import trainables.augment_pil as P

LEVELS = range(1, 10)


def natural_images(n: int = 10, side: int = 32, seed: int = 0) -> np.ndarray:
    """(n, side, side, 3) uint8 pictures with natural statistics: a smooth colour field (a 4x4 grid upsampled
    bicubically), a few soft-edged discs, fine noise, each image with its own brightness and contrast, so
    that histograms are uneven and channels differ; plus a flat one and a two-valued one (the look-up
    tables' special cases) and one clipped at 0 and 255."""
    g = torch.Generator().manual_seed(seed)
    field = F.interpolate(torch.rand(n, 3, 4, 4, generator=g), size=(side, side), mode="bicubic", align_corners=False)
    yy, xx = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    for i in range(n):
        for _ in range(3):
            c = torch.rand(2, generator=g) * side
            r = 3 + torch.rand(1, generator=g) * side / 4
            disc = torch.sigmoid((r - ((yy - c[0]) ** 2 + (xx - c[1]) ** 2).sqrt()) * 1.5)   # (side, side)
            field[i] = field[i] * (1 - disc) + torch.rand(3, 1, 1, generator=g) * disc
    field = field + 0.03 * torch.randn(field.shape, generator=g)
    lo = torch.rand(n, 1, 1, 1, generator=g) * 0.4
    span = 0.2 + torch.rand(n, 1, 1, 1, generator=g) * 0.9
    img = ((lo + span * field) * 255).round().clamp(0, 255)
    img[1] = 90.0                                             # flat
    img[2] = torch.where(field[2] > field[2].mean(), 200.0, 40.0)  # two values per channel
    img[3] = ((field[3] - 0.5) * 600 + 128).round().clamp(0, 255)  # clipped at both ends
    return img.permute(0, 2, 3, 1).numpy().astype(np.uint8)


IMAGES = natural_images()


def pil_op(img: Image.Image, op: str, level: int, sign: int = 1) -> Image.Image:
    """FixMatch's op on an RGBA image (their _<op>_impl), sign in place of their coin flip."""
    f = float(level) * 1.8 / 10 + .1
    if op == "autocontrast":
        return ImageOps.autocontrast(img.convert("RGB")).convert("RGBA")
    if op == "equalize":
        return ImageOps.equalize(img.convert("RGB")).convert("RGBA")
    if op == "posterize":
        return ImageOps.posterize(img.convert("RGB"), 4 - int(level * 4 / 10)).convert("RGBA")
    if op == "solarize":
        return ImageOps.solarize(img.convert("RGB"), 256 - int(level * 256 / 10)).convert("RGBA")
    if op in P.ENHANCERS:
        cls = {"brightness": ImageEnhance.Brightness, "color": ImageEnhance.Color,
               "contrast": ImageEnhance.Contrast, "sharpness": ImageEnhance.Sharpness}[op]
        return cls(img).enhance(f)
    if op == "rotate":
        return img.rotate(sign * int(level * 30 / 10))
    if op == "shear_x":
        return img.transform(img.size, Image.AFFINE, (1, sign * float(level) * 0.3 / 10, 0, 0, 1, 0))
    if op == "shear_y":
        return img.transform(img.size, Image.AFFINE, (1, 0, 0, sign * float(level) * 0.3 / 10, 1, 0))
    if op == "translate_x":
        return img.transform(img.size, Image.AFFINE, (1, 0, sign * int(level * 10 / 10), 0, 1, 0))
    if op == "translate_y":
        return img.transform(img.size, Image.AFFINE, (1, 0, 0, 0, 1, sign * int(level * 10 / 10)))
    raise ValueError(op)


def rgba(a: np.ndarray) -> Image.Image:
    return Image.fromarray(a).convert("RGBA")


def ours(images: np.ndarray, opaque: torch.Tensor, op: str, levels, signs) -> tuple[np.ndarray, np.ndarray]:
    p = torch.from_numpy(images).permute(0, 3, 1, 2).float()            # (n, 3, H, W)
    out, alpha = P.apply(p, opaque, op, torch.as_tensor(levels), torch.as_tensor(signs))
    return out.permute(0, 2, 3, 1).numpy(), alpha[:, 0].numpy()


def theirs(pictures: list[Image.Image], op: str, levels, signs) -> tuple[np.ndarray, np.ndarray]:
    outs = [np.asarray(pil_op(im, op, int(k), int(s))) for im, k, s in zip(pictures, levels, signs)]
    out = np.stack(outs).astype(np.float32)                             # (n, H, W, 4)
    return out[..., :3], out[..., 3] > 0


def _levels(n: int, shift: int) -> tuple[list[int], list[int]]:
    """Every level for every image across the calls, a different one per image within a call, both signs."""
    levels = [(i + shift) % 9 + 1 for i in range(n)]
    return levels, [1 if (i + shift) % 2 else -1 for i in range(n)]


@pytest.mark.parametrize("op", P.LOOKUPS + P.ENHANCERS + P.GEOMETRIC)
def test_every_op_equals_pillow_exactly(op):
    """Every pixel of every image at every level and sign: the look-up tables' values, the enhancers' float32
    blends (Pillow truncates; so does augment_pil), the nearest-neighbour maps' pixels and transparency."""
    n = len(IMAGES)
    for shift in range(9):
        levels, signs = _levels(n, shift)
        got, got_alpha = ours(IMAGES, torch.ones(n, 1, 32, 32, dtype=torch.bool), op, levels, signs)
        want, want_alpha = theirs([rgba(a) for a in IMAGES], op, levels, signs)
        np.testing.assert_array_equal(got_alpha, want_alpha)
        np.testing.assert_array_equal(np.where(want_alpha[..., None], got, 0), np.where(want_alpha[..., None], want, 0))


def test_ops_after_a_geometric_op_see_its_fill_as_pillow_does():
    """A rotation leaves transparent black corners: an enhancer keeps them transparent (and blends their
    black), a look-up op makes them opaque black pixels that count in its histogram, as Pillow's."""
    n = len(IMAGES)
    p = torch.from_numpy(IMAGES).permute(0, 3, 1, 2).float()
    opaque = torch.ones(n, 1, 32, 32, dtype=torch.bool)
    lv, sg = torch.full((n,), 9), torch.ones(n, dtype=torch.long)
    p, opaque = P.apply(p, opaque, "rotate", lv, sg)
    assert (~opaque).any()
    rotated = [pil_op(rgba(a), "rotate", 9) for a in IMAGES]
    for op in ("contrast", "sharpness", "equalize", "autocontrast"):
        got, got_alpha = P.apply(p, opaque, op, torch.full((n,), 3), sg)
        want = np.stack([np.asarray(pil_op(im, op, 3)) for im in rotated]).astype(np.float32)
        np.testing.assert_array_equal(got_alpha[:, 0].numpy(), want[..., 3] > 0)
        np.testing.assert_array_equal(got.permute(0, 2, 3, 1).numpy(), want[..., :3])


def test_standardised_images_come_back_with_transparent_pixels_grey():
    """to_pixels recovers the 8-bit pixels of per-channel standardised images exactly; from_pixels maps them
    back, the transparent ones to pil_unwrap's grey."""
    p = torch.from_numpy(IMAGES).permute(0, 3, 1, 2).float()
    mean = p.mean((0, 2, 3)).view(3, 1, 1)
    std = p.std((0, 2, 3)).view(3, 1, 1)
    x = (p - mean) / std
    assert torch.equal(P.to_pixels(x, mean, std), p)
    opaque = torch.ones(len(p), 1, 32, 32, dtype=torch.bool)
    opaque[:, :, :4] = False
    back = P.from_pixels(p, opaque, mean, std)
    torch.testing.assert_close(back[:, :, 4:], x[:, :, 4:])
    torch.testing.assert_close(back[:, :, :4], ((P.GREY - mean) / std).expand(len(p), 3, 4, 32))
