"""Tell tissue from glass on a low-resolution RGB image, and map the tissue onto a grid of analysis tiles."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TissueSettings:
    """How tissue is told from glass on a low-resolution image."""

    min_saturation: float = 0.07
    """HSV saturation (0-1) above which a pixel is stained tissue; glass is ~0.01, eosin ~0.3 (default 0.07)."""
    min_value: int = 30
    """Brightness (0-255, max of R,G,B) below which a pixel is a dark artefact, not tissue (default 30)."""
    max_value: int = 250
    """Mean of R, G, B (0-255) above which a pixel is empty glass whatever its hue (default 250)."""
    thumbnail_downsample: float = 64.0
    """Target downsample, relative to the analysed level, of the image tissue is found on (default 64)."""
    dilate: int = 1
    """Thumbnail pixels to grow the mask by, so tissue edges lost to downsampling are kept (default 1)."""


def tissue_mask(rgb: np.ndarray, settings: TissueSettings | None = None) -> np.ndarray:
    """Boolean tissue mask of a low-resolution RGB image: stained (saturated), not glass-bright, not black."""
    s = settings or TissueSettings()
    img = rgb[..., :3].astype(np.int16)
    mx = img.max(axis=-1)
    mn = img.min(axis=-1)
    sat = (mx - mn) / np.maximum(mx, 1)
    mask = (sat >= s.min_saturation) & (mx >= s.min_value) & (img.mean(axis=-1) <= s.max_value)
    # Drop isolated specks: keep pixels with at least 3 tissue pixels in their 3x3 neighbourhood (itself included).
    mask &= _box_sum(mask, 1) >= 3
    return mask


def dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    """Grow a boolean mask by `radius` pixels (square structuring element)."""
    if radius <= 0:
        return mask
    return _box_sum(mask, radius) > 0


def _box_sum(mask: np.ndarray, r: int) -> np.ndarray:
    ii = np.pad(mask.astype(np.int32), ((r + 1, r), (r + 1, r))).cumsum(0).cumsum(1)
    k = 2 * r + 1
    return ii[k:, k:] - ii[:-k, k:] - ii[k:, :-k] + ii[:-k, :-k]


def tissue_tiles(mask: np.ndarray, dsx: float, dsy: float, width: int, height: int, tile: int) -> np.ndarray:
    """Boolean (tiles_down, tiles_across) grid: True where a tile x tile cell of a width x height image meets `mask`.

    `mask` pixels are dsx x dsy image pixels. Computed with an integral image, so it is O(tiles).
    """
    nx, ny = -(-width // tile), -(-height // tile)
    ii = np.pad(mask.astype(np.int64), ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    x0 = np.minimum((np.arange(nx) * tile / dsx).astype(np.int64), mask.shape[1] - 1)
    x1 = np.clip(np.ceil(np.minimum((np.arange(nx) + 1) * tile, width) / dsx).astype(np.int64), x0 + 1, mask.shape[1])
    y0 = np.minimum((np.arange(ny) * tile / dsy).astype(np.int64), mask.shape[0] - 1)
    y1 = np.clip(np.ceil(np.minimum((np.arange(ny) + 1) * tile, height) / dsy).astype(np.int64), y0 + 1, mask.shape[0])
    counts = ii[y1][:, x1] - ii[y0][:, x1] - ii[y1][:, x0] + ii[y0][:, x0]
    return counts > 0
