"""The reader-independent half of a slide: levels, µm calibration, region reads, area downsampling and colour."""
from __future__ import annotations

import abc
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from worker.slides.colour import Colour
from worker.slides.errors import SlideError, fail
from worker.slides.limits import SlideLimits, current_limits

# A calibration outside this range is not a microscope scan (72 dpi, for example, is 352.8 µm/px).
MPP_PLAUSIBLE_UM = (0.02, 50.0)

#: How the refusal of an uncalibrated slide names the override, exactly as `python -m worker infer` spells it.
MPP_FLAG = "--mpp-um"


@dataclass
class Level:
    """One level of the slide as analysed: a stored pyramid level, or one computed from a finer one on the fly."""

    index: int
    """Position in `Slide.levels` (0 = the largest level present); for a computed level, its source's index."""
    width: int
    """Width in pixels."""
    height: int
    """Height in pixels."""
    downsample: float
    """Level-0 pixels per pixel of this level (mean of x and y)."""
    tile_width: int
    """Width of the reader's native tile (0 for a level stored in strips)."""
    tile_height: int
    """Height of the reader's native tile (the strip height for a stripped level; 0 if unknown)."""
    page: Any = field(default=None, repr=False)
    """The tifffile page holding the level (tifffile reader only)."""
    jpeg: tuple | None = field(default=None, repr=False)
    """(colorspace, outcolorspace) when 8-bit 3-sample JPEG tiles decode straight into a buffer (tifffile only)."""
    native: Any = field(default=None, repr=False)
    """The reader's own handle of the level (OpenSlide level number, wsidicom level), or None."""
    source: Level | None = field(default=None, repr=False)
    """For a computed level: the stored level it is area-averaged from (None for a stored level)."""
    factor: float = 1.0
    """Source pixels per pixel of this level along each axis (1.0 for a stored level)."""

    @property
    def tiles_across(self) -> int:
        return -(-self.width // self.tile_width) if self.tile_width else 0

    @property
    def tiles_down(self) -> int:
        return -(-self.height // self.tile_height) if self.tile_height else 0

    @property
    def computed(self) -> bool:
        """Whether this level is area-averaged on the fly from a finer stored level."""
        return self.source is not None


class TileCache:
    """A thread-safe LRU of decoded tiles bounded in bytes: a tile shared by neighbouring regions decodes once."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple) -> np.ndarray | None:
        with self._lock:
            tile = self._items.get(key)
            if tile is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return tile

    def put(self, key: tuple, tile: np.ndarray) -> None:
        if tile.nbytes > self.max_bytes:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = tile
            self._bytes += tile.nbytes
            while self._bytes > self.max_bytes:
                _, old = self._items.popitem(last=False)
                self._bytes -= old.nbytes


_scratch = threading.local()


def _source_buffer(h: int, w: int) -> np.ndarray:
    """A per-thread uint8 (h, w, 3) buffer for the source pixels of a computed region (reused, never shared)."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.shape[0] < h or buf.shape[1] < w:
        buf = np.empty((max(h, 1), max(w, 1), 3), np.uint8)
        _scratch.buf = buf
    return buf[:h, :w]


def area_downsample(src: np.ndarray, out: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
    """Area-average the `box` (x0, y0, x1, y1, in `src` pixels, fractional allowed) of RGB `src` into `out`.

    Each output pixel is the mean of the source area it covers, partly covered source pixels weighed by the
    covered fraction: a factor of 2 is the exact 2x2 mean, 2.2 the exact mean over 2.2 x 2.2 source pixels.
    """
    h, w = out.shape[:2]
    x0, y0, x1, y1 = box
    fx, fy = (x1 - x0) / w, (y1 - y0) / h
    k = int(round(fx))
    if abs(fx - k) < 1e-9 and abs(fy - k) < 1e-9 and k >= 1 and float(x0).is_integer() and float(y0).is_integer():
        # An integer factor: the k x k block mean, in C (Pillow's reduce), rounded to the nearest integer.
        part = np.ascontiguousarray(src[int(y0) : int(y0) + h * k, int(x0) : int(x0) + w * k])
        out[:] = np.asarray(Image.fromarray(part, "RGB").reduce(k)) if k > 1 else part
        return out
    a = _area_axis0(src.astype(np.float32), y0, fy, h)  # rows, then (transposed) columns
    a = _area_axis0(np.ascontiguousarray(a.transpose(1, 0, 2)), x0, fx, w)
    np.rint(a, out=a)
    out[:] = a.transpose(1, 0, 2).astype(np.uint8)
    return out


def _area_axis0(a: np.ndarray, start: float, f: float, n: int) -> np.ndarray:
    """Means of `a` along axis 0 over the n intervals [start + i f, start + (i + 1) f), exactly: each output row
    is the sum of the <= ceil(f) + 1 source rows it meets, weighed by the length of their overlap."""
    m = a.shape[0]
    edges = start + np.arange(n + 1) * f
    first = np.floor(edges[:-1]).astype(np.int64)
    out = np.zeros((n,) + a.shape[1:], np.float32)
    for t in range(int(math.ceil(f)) + 1):
        j = first + t
        overlap = np.clip(np.minimum(edges[1:], j + 1) - np.maximum(edges[:-1], j), 0.0, None)
        overlap[(j >= m) | (j < 0)] = 0.0
        weight = (overlap / f).astype(np.float32).reshape((-1,) + (1,) * (a.ndim - 1))
        out += weight * a[np.clip(j, 0, m - 1)]
    return out


class Slide(abc.ABC):
    """An open slide, whatever its format; region reads may be called from many threads at once.

    Subclasses (one per reader) set `levels`, `reader`, `format` and the calibration, and implement `_read_raw`;
    each hands what its headers declare to `self.limits` (SlideLimits) before it reads the first pixel.
    """

    reader: str = ""
    """The library that decodes the pixels: "tifffile", "openslide" or "wsidicom"."""
    format: str = ""
    """The file format as found from its content, e.g. "Aperio SVS", "OME-TIFF", "Hamamatsu NDPI", "DICOM WSI"."""

    def __init__(self, path: Path, limits: SlideLimits | None = None) -> None:
        self.path = Path(path)
        self.name = self.path.name
        self.limits = limits if limits is not None else current_limits()
        """What this slide may declare; checked by the reader from its headers before any pixel is decoded."""
        self.limits.check_file(self.path)
        self.levels: list[Level] = []
        self.mpp_x = self.mpp_y = 0.0
        self.mpp_source = ""
        self.colour = Colour()
        """What the pixels are (brightfield RGB, fluorescence, single channel) and how they are converted."""
        self.associated_skipped: list[str] = []
        """Images in the file that are not the slide (label, macro, thumbnail, overview), left unread."""
        self.cache = TileCache(64 * 2**20)

    # -- to be provided by each reader -------------------------------------------------------------------------
    @abc.abstractmethod
    def _read_raw(self, level: Level, x: int, y: int, w: int, h: int, out: np.ndarray) -> np.ndarray:
        """Fill `out` (h, w, C) with the stored samples of region (x, y, w, h) of stored `level`; white outside."""

    def _raw_channels(self) -> int:
        """Samples per pixel of what _read_raw returns (3 for RGB, 1 for a single channel)."""
        return 3

    # -- calibration -------------------------------------------------------------------------------------------
    def _set_calibration(self, found: tuple[float, float, str] | None, override: float | None) -> None:
        """Take the override, else what the file says; refuse an uncalibrated or implausible slide in one line."""
        lo, hi = MPP_PLAUSIBLE_UM
        if override is not None:
            if not (isinstance(override, (int, float)) and lo <= override <= hi):
                raise fail(self.path, f"mpp_um override {override!r} ({MPP_FLAG}) is not a plausible pixel size "
                                      f"({lo}-{hi} µm/px)")
            self.mpp_x = self.mpp_y = float(override)
            self.mpp_source = "override"
            return
        if found is None:
            raise fail(
                self.path,
                f"no pixel calibration ({self._calibration_sources()}; objective power alone is not a calibration); "
                f"pass {MPP_FLAG} X if you know the scan's µm per pixel",
            )
        mx, my, source = found
        for axis, value in (("x", mx), ("y", my)):
            if not lo <= value <= hi:
                raise fail(
                    self.path,
                    f"{source} gives {value:g} µm/px along {axis}, not a plausible scan ({lo}-{hi} µm/px); "
                    f"pass {MPP_FLAG} X to override",
                )
        self.mpp_x, self.mpp_y, self.mpp_source = mx, my, source

    def _calibration_sources(self) -> str:
        return "the file states no µm per pixel"

    # -- geometry ----------------------------------------------------------------------------------------------
    @property
    def width(self) -> int:
        return self.levels[0].width

    @property
    def height(self) -> int:
        return self.levels[0].height

    def level_mpp(self, level: Level) -> tuple[float, float]:
        """µm per pixel of `level` along x and y."""
        if level.source is not None:
            sx, sy = self.level_mpp(level.source)
            return sx * level.factor, sy * level.factor
        return self.mpp_x * self.width / level.width, self.mpp_y * self.height / level.height

    def computed_level(self, source: Level, factor: float) -> Level:
        """A level `factor` times coarser than stored level `source`, area-averaged from it when read."""
        if factor < 1.0:
            raise ValueError(f"factor={factor!r}: a computed level is never finer than its source (no upsampling)")
        if factor == 1.0:
            return source
        return replace(
            source, width=math.ceil(source.width / factor), height=math.ceil(source.height / factor),
            downsample=source.downsample * factor, page=None, jpeg=None, source=source, factor=float(factor),
            tile_width=0, tile_height=0,
        )

    def analysis_level(self, target_mpp: float | None, tolerance: float) -> Level:
        """The level to analyse at `target_mpp` µm/px: a stored level within `tolerance` of it, else one computed
        from the nearest stored level at least as fine (never upsampled); SlideError when the slide is too coarse.

        A stored level within tolerance wins (no resampling); among several, the nearest to the target.
        """
        if target_mpp is None:
            return self.levels[0]
        target = float(target_mpp)

        def mpp(lv: Level) -> float:
            mx, my = self.level_mpp(lv)
            return (mx + my) / 2

        near = [lv for lv in self.levels if abs(mpp(lv) / target - 1) <= tolerance]
        if near:
            return min(near, key=lambda lv: abs(math.log(mpp(lv) / target)))
        finer = [lv for lv in self.levels if mpp(lv) < target]
        if not finer:
            have = ", ".join(f"{mpp(lv):.3g}" for lv in self.levels)
            raise SlideError(
                f"{self.path}: no pyramid level near the model's {target:g} µm/px (levels have {have} µm/px, "
                f"{self.mpp_source}; tolerance ±{tolerance:.0%}); the slide is coarser than the model needs and is "
                f"never upsampled"
            )
        source = max(finer, key=mpp)  # the coarsest level still finer than the target: the least to read
        return self.computed_level(source, target / mpp(source))

    # -- pixels ------------------------------------------------------------------------------------------------
    def read_region(self, level: Level, x: int, y: int, w: int, h: int, out: np.ndarray | None = None) -> np.ndarray:
        """The w x h RGB region at (x, y) of `level` as uint8 (h, w, 3), converted to brightfield RGB where the
        slide is not; outside the image reads as white (glass). Safe to call from several threads."""
        if out is None:
            out = np.empty((h, w, 3), np.uint8)
        if level.source is not None:
            f, src = level.factor, level.source
            x0, y0, x1, y1 = x * f, y * f, (x + w) * f, (y + h) * f
            X0, Y0 = int(math.floor(x0)), int(math.floor(y0))
            X1, Y1 = int(math.ceil(x1 - 1e-9)), int(math.ceil(y1 - 1e-9))
            buf = _source_buffer(Y1 - Y0, X1 - X0)
            self.read_region(src, X0, Y0, X1 - X0, Y1 - Y0, out=buf)
            return area_downsample(buf, out, (x0 - X0, y0 - Y0, x1 - X0, y1 - Y0))
        lut = self.colour.lut
        if lut is None and self._raw_channels() == 3:
            return self._read_raw(level, x, y, w, h, out)
        raw = self._read_raw(level, x, y, w, h, np.empty((h, w, self._raw_channels()), np.uint8))
        return self.colour.convert(raw, out)

    def read_decimated(self, level: Level, step: int) -> np.ndarray:
        """Every `step`-th pixel of `level` (centre-sampled), read in bands; small levels only need step 1."""
        step = max(int(step), 1)
        w, h = -(-level.width // step), -(-level.height // step)
        out = np.empty((h, w, 3), np.uint8)
        band = max(1, (8 * 2**20) // max(1, level.width * 3 * step))  # output rows per read: ~8 MB of source
        cols = np.minimum(np.arange(w) * step + step // 2, level.width - 1)
        for r0 in range(0, h, band):
            r1 = min(h, r0 + band)
            y0 = r0 * step
            y1 = min(level.height, (r1 - 1) * step + step // 2 + 1)
            rows = np.minimum(np.arange(r0, r1) * step + step // 2, level.height - 1) - y0
            region = self.read_region(level, 0, y0, level.width, y1 - y0)
            out[r0:r1] = region[rows][:, cols]
        return out

    def thumbnail(self, relative_to: Level, target_downsample: float) -> tuple[np.ndarray, float, float]:
        """A small RGB image of the slide with downsample <= target relative to `relative_to`; (image, dsx, dsy)
        where dsx, dsy are `relative_to` pixels per thumbnail pixel."""
        wanted = relative_to.downsample * target_downsample
        # The coarsest stored level that is still at least as fine as wanted, then decimated down to it.
        usable = [lv for lv in self.levels if lv.downsample <= wanted * 1.01] or [self.levels[0]]
        level = usable[-1]
        step = max(int(wanted / level.downsample), 1)
        img = self.read_decimated(level, step)
        dsx = relative_to.width / img.shape[1]
        dsy = relative_to.height / img.shape[0]
        return img, dsx, dsy

    def _sample_raw(self, max_side: int = 1024) -> np.ndarray:
        """Raw samples of the whole slide at about `max_side` px, for telling what kind of image it is: the
        smallest stored level when it is small enough, else evenly spread regions of a level (never all of it)."""
        level = self.levels[-1]
        c = self._raw_channels()
        if level.width * level.height <= 4 * max_side * max_side:
            return self._read_raw(level, 0, 0, level.width, level.height,
                                  np.empty((level.height, level.width, c), np.uint8))
        # A grid of 8 x 8 regions of 128 px over the level: enough pixels for background and signal statistics.
        n, side = 8, 128
        parts = []
        for j in range(n):
            for i in range(n):
                x = int((i + 0.5) * level.width / n) - side // 2
                y = int((j + 0.5) * level.height / n) - side // 2
                x, y = max(0, min(x, level.width - side)), max(0, min(y, level.height - side))
                parts.append(self._read_raw(level, x, y, side, side, np.empty((side, side, c), np.uint8)))
        return np.concatenate(parts, axis=0)

    # -- lifetime ----------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the reader's file handles."""

    def __enter__(self) -> Slide:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        sizes = ", ".join(f"{lv.width}x{lv.height}" for lv in self.levels)
        return (f"{type(self).__name__}({self.name!r}, {self.format}, levels=[{sizes}], "
                f"mpp={self.mpp_x:g}x{self.mpp_y:g} µm from {self.mpp_source})")

    def describe(self) -> dict:
        """What the summary JSON records about the input: format, reader, levels, calibration, colour."""
        return {
            "format": self.format,
            "reader": self.reader,
            "levels": [
                {"width": lv.width, "height": lv.height, "downsample": round(lv.downsample, 4),
                 "mpp_um": round(self.level_mpp(lv)[0], 6)}
                for lv in self.levels
            ],
            "mpp_source": self.mpp_source,
            "colour": self.colour.describe(),
            "associated_images_skipped": list(self.associated_skipped),
        }
