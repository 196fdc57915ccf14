"""Image operations for data augmentation, in numpy, on one image at a time.

Every function takes and returns ``img``: float (H, W, C) intensities in [0, 255] (C = 1 grey,
3 RGB), and never modifies its argument. The photometric ops follow the definitions of
torchvision's functional transforms (which follow PIL's ImageOps / ImageEnhance), the ops that
AutoAugment (Cubuk et al. 2019) composes; the geometric ops sample with nearest neighbour, as
torchvision's AutoAugment and RandomAffine do by default, filling uncovered pixels with `fill`.

Departure from torchvision: values stay real-valued between ops (torchvision works on uint8 and
truncates after each op); the caller rounds once at the end where its pixels are quantised.
Posterize and Equalize are defined on integers, so they read floor(img).
"""
from __future__ import annotations

import numpy as np

MAX = 255.0
# ITU-R 601-2 luma (PIL's "L" conversion, torchvision's rgb_to_grayscale)
LUMA = np.array([0.299, 0.587, 0.114])
# PIL's SMOOTH filter: the "degenerate" image that Sharpness blends away from
SMOOTH = np.array([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]]) / 13.0


def grey(img: np.ndarray) -> np.ndarray:
    """(H, W, C) -> (H, W) luminance: the channel itself for C = 1, luma weights for C = 3."""
    if img.shape[-1] == 1:
        return img[..., 0]
    if img.shape[-1] == 3:
        return img @ LUMA
    raise ValueError(f"grey: images need 1 or 3 channels, got {img.shape[-1]}")


def _blend(img: np.ndarray, other, factor: float) -> np.ndarray:
    """factor * img + (1 - factor) * other, clipped to [0, 255] (PIL ImageEnhance)."""
    return np.clip(factor * img + (1.0 - factor) * other, 0.0, MAX)


def invert(img: np.ndarray) -> np.ndarray:
    """255 - img."""
    return MAX - img


def solarize(img: np.ndarray, threshold: float) -> np.ndarray:
    """Invert the pixels >= threshold, keep the others."""
    return np.where(img >= threshold, MAX - img, img)


def posterize(img: np.ndarray, bits: int) -> np.ndarray:
    """Keep the `bits` high bits of each 8-bit intensity (bits in 1..8)."""
    if not 1 <= bits <= 8:
        raise ValueError(f"posterize: bits must be in 1..8, got {bits}")
    keep = 0xFF & ~(2 ** (8 - bits) - 1)
    return (np.floor(img).astype(np.int64) & keep).astype(img.dtype)


def autocontrast(img: np.ndarray) -> np.ndarray:
    """Stretch each channel linearly so its min -> 0 and max -> 255 (a flat channel is kept)."""
    lo = img.min(axis=(0, 1), keepdims=True)
    hi = img.max(axis=(0, 1), keepdims=True)
    flat = hi <= lo
    span = np.where(flat, 1.0, hi - lo)
    return np.where(flat, img, np.clip((img - lo) * MAX / span, 0.0, MAX))


def _equalize_channel(v: np.ndarray) -> np.ndarray:
    """(H, W) int in 0..255 -> (H, W) float: PIL's histogram equalisation of one channel."""
    hist = np.bincount(v.ravel(), minlength=256)
    nonzero = hist[hist > 0]
    step = (nonzero.sum() - nonzero[-1]) // 255  # the top used bin does not count (PIL)
    if step == 0:
        return v.astype(np.float64)
    lut = (np.cumsum(hist) + step // 2) // step
    lut = np.clip(np.concatenate([[0], lut[:-1]]), 0, 255)
    return lut[v].astype(np.float64)


def equalize(img: np.ndarray) -> np.ndarray:
    """Histogram equalisation of each channel over the 256 integer intensities."""
    v = np.clip(np.floor(img), 0, 255).astype(np.int64)
    return np.stack([_equalize_channel(v[..., c]) for c in range(img.shape[-1])], axis=-1)


def brightness(img: np.ndarray, factor: float) -> np.ndarray:
    """Blend with black: factor * img, clipped."""
    return _blend(img, 0.0, factor)


def contrast(img: np.ndarray, factor: float) -> np.ndarray:
    """Blend with the image's mean luminance (one number)."""
    return _blend(img, grey(img).mean(), factor)


def color(img: np.ndarray, factor: float) -> np.ndarray:
    """Blend with the image's own luminance (saturation). Identity on a grey image (C = 1)."""
    return _blend(img, grey(img)[..., None], factor)


def sharpness(img: np.ndarray, factor: float) -> np.ndarray:
    """Blend with the image smoothed by SMOOTH (3x3); the border pixels are not smoothed (PIL).

    factor > 1 sharpens, < 1 blurs."""
    h, w = img.shape[:2]
    smooth = img.copy()
    if h >= 3 and w >= 3:
        inner = sum(SMOOTH[dy, dx] * img[dy:h - 2 + dy, dx:w - 2 + dx]
                    for dy in range(3) for dx in range(3))
        smooth[1:-1, 1:-1] = inner
    return _blend(img, smooth, factor)


def hflip(img: np.ndarray) -> np.ndarray:
    """Mirror left-right: column c -> W - 1 - c."""
    return img[:, ::-1].copy()


def vflip(img: np.ndarray) -> np.ndarray:
    """Mirror top-bottom: row r -> H - 1 - r."""
    return img[::-1].copy()


def affine(img: np.ndarray, angle: float = 0.0, translate=(0.0, 0.0), scale: float = 1.0,
           shear=(0.0, 0.0), fill: float = 0.0) -> np.ndarray:
    """Affine warp about the image centre, nearest neighbour; uncovered pixels get `fill`.

    In coordinates x (right) and y (down) from the centre ((W-1)/2, (H-1)/2), an input point p
    lands at  A p + t,  A = scale * R(angle) @ [[1, shear_x], [shear_y, 1]],
    R(angle) = [[cos, sin], [-sin, cos]]: a positive angle (degrees) turns the picture
    counter-clockwise as displayed (row 0 on top), as np.rot90 does.
    translate : (tx, ty) in pixels, right and down.
    shear     : (shear_x, shear_y) factors: x += shear_x * y, y += shear_y * x.
    Each output pixel reads the input pixel nearest to A^-1 (q - t).
    """
    h, w = img.shape[:2]
    a = np.deg2rad(angle)
    rot = np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])
    mat = scale * rot @ np.array([[1.0, shear[0]], [shear[1], 1.0]])
    inv = np.linalg.inv(mat)
    cx, cy = (w - 1) / 2, (h - 1) / 2
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    qx, qy = xs - cx - translate[0], ys - cy - translate[1]
    px = inv[0, 0] * qx + inv[0, 1] * qy + cx
    py = inv[1, 0] * qx + inv[1, 1] * qy + cy
    # round half up, with a little slack so that exact grid points (90-degree turns) are stable
    col = np.floor(px + 0.5 + 1e-9).astype(np.int64)
    row = np.floor(py + 0.5 + 1e-9).astype(np.int64)
    inside = (col >= 0) & (col < w) & (row >= 0) & (row < h)
    out = np.full_like(img, fill)
    out[inside] = img[row[inside], col[inside]]
    return out
