"""Read pyramidal whole-slide TIFF/OME-TIFF tile by tile, with its µm calibration, and find the tissue on it."""
from __future__ import annotations

import os
import re
import struct
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import imagecodecs
import numpy as np
import tifffile

# µm per unit, for OME's UnitsLength values we may meet on PhysicalSizeX/Y (both spellings of micro).
_UNIT_UM = {
    "µm": 1.0, "μm": 1.0, "um": 1.0, "micron": 1.0, "micrometer": 1.0, "micrometre": 1.0,
    "nm": 1e-3, "pm": 1e-6, "Å": 1e-4, "mm": 1e3, "cm": 1e4, "m": 1e6,
}
# A calibration outside this range is not a microscope scan (72 dpi, for example, is 352.8 µm/px).
MPP_PLAUSIBLE_UM = (0.02, 50.0)


class SlideError(Exception):
    """The input is not a slide this worker can read; the message is one line naming the file and the problem."""


@dataclass
class Level:
    """One pyramid level: its size, tiling and the TIFF page that holds it."""

    index: int
    width: int
    height: int
    downsample: float  # level-0 pixels per pixel of this level (mean of x and y)
    tile_width: int  # 0 for a stripped (untiled) page
    tile_height: int
    page: tifffile.TiffPage = field(repr=False)
    jpeg: tuple | None = field(default=None, repr=False)
    """(colorspace, outcolorspace) for imagecodecs when the tiles are 8-bit 3-sample JPEG, decoded directly into
    the caller's buffer; None: decoded through tifffile."""

    @property
    def tiles_across(self) -> int:
        return -(-self.width // self.tile_width) if self.tile_width else 0

    @property
    def tiles_down(self) -> int:
        return -(-self.height // self.tile_height) if self.tile_height else 0


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


def _fail(path: Path | str, what: str) -> SlideError:
    return SlideError(f"{path}: {what}")


class Slide:
    """An open pyramidal slide; tiles are read with os.pread, so `read_tile` may be called from many threads."""

    def __init__(self, path: str | Path, *, mpp_um: float | None = None):
        self.path = Path(path)
        self.name = self.path.name
        if not self.path.is_file():
            raise _fail(self.path, "no such file")
        try:
            self._tif = tifffile.TiffFile(self.path)
        except (tifffile.TiffFileError, ValueError, OSError, struct.error) as exc:
            raise _fail(self.path, f"not a TIFF slide ({_one_line(exc)})") from None
        try:
            self.levels = self._find_levels()
            self.mpp_x, self.mpp_y, self.mpp_source = self._calibration(mpp_um)
        except Exception:
            self._tif.close()
            raise
        self._fd = os.open(self.path, os.O_RDONLY)

    # -- structure ---------------------------------------------------------------------------------------------
    def _find_levels(self) -> list[Level]:
        tif = self._tif
        candidates = []
        try:
            series = list(tif.series)
        except Exception as exc:  # noqa: BLE001 - tifffile raises many kinds on corrupt files
            raise _fail(self.path, f"unreadable TIFF structure ({_one_line(exc)})") from None
        for s in series:
            try:
                pages = [lvl.keyframe for lvl in s.levels]
            except Exception:  # noqa: BLE001
                continue
            if pages and _is_rgb8(pages[0]):
                candidates.append(pages)
        if not candidates:
            raise _fail(self.path, "no 8-bit RGB image in the file (not a brightfield slide)")
        # The slide is the largest RGB series (label and macro images are small, separate series).
        pages = max(candidates, key=lambda p: p[0].imagewidth * p[0].imagelength)
        base = pages[0]
        w0, h0 = base.imagewidth, base.imagelength
        levels: list[Level] = []
        for page in sorted(pages, key=lambda p: -p.imagewidth * p.imagelength):
            w, h = page.imagewidth, page.imagelength
            # Keep only true reductions of level 0: same aspect ratio, up to the rounding of small levels.
            dsx, dsy = w0 / w, h0 / h
            if not _is_rgb8(page) or abs(dsx - dsy) / dsx > 0.02 + 2.0 / w + 2.0 / h:
                continue
            if levels and (w >= levels[-1].width or h >= levels[-1].height):
                continue
            tw, th = (page.tilewidth, page.tilelength) if page.is_tiled else (0, 0)
            levels.append(Level(len(levels), w, h, (w0 / w + h0 / h) / 2, tw, th, page, _jpeg_colorspaces(page)))
        if base.imagedepth != 1 or (base.planarconfig != 1 and base.samplesperpixel > 1):
            raise _fail(self.path, "level 0 is volumetric or planar-separate; expected interleaved RGB tiles")
        if not levels[0].tile_width:
            raise _fail(self.path, f"level 0 ({w0}x{h0}) is stored in strips, not tiles; whole-slide images must be tiled")
        return levels

    def _calibration(self, override: float | None) -> tuple[float, float, str]:
        lo, hi = MPP_PLAUSIBLE_UM
        if override is not None:
            if not (isinstance(override, (int, float)) and lo <= override <= hi):
                raise _fail(self.path, f"mpp_um override {override!r} is not a plausible pixel size ({lo}-{hi} µm/px)")
            return float(override), float(override), "override"
        found = self._ome_mpp() or self._aperio_mpp() or self._resolution_mpp()
        if found is None:
            raise _fail(
                self.path,
                "no pixel calibration (no OME PhysicalSizeX/Y, no Aperio MPP, no X/YResolution in CENTIMETER or INCH); "
                "pass mpp_um (--mpp) if you know the scan's µm per pixel",
            )
        mx, my, source = found
        for axis, value in (("x", mx), ("y", my)):
            if not lo <= value <= hi:
                raise _fail(
                    self.path,
                    f"{source} gives {value:g} µm/px along {axis}, not a plausible scan ({lo}-{hi} µm/px); "
                    "pass mpp_um (--mpp) to override",
                )
        return mx, my, source

    def _ome_mpp(self) -> tuple[float, float, str] | None:
        xml = self._tif.ome_metadata if self._tif.is_ome else None
        if not xml:
            return None
        try:
            root = ET.fromstring(xml)
        except ET.ParseError as exc:
            raise _fail(self.path, f"OME-XML is not well-formed ({_one_line(exc)})") from None
        base = self.levels[0]
        pixels = [el for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "Pixels"]
        # The Pixels element describing level 0 (there may be label/macro images as well).
        pixels.sort(key=lambda el: (el.get("SizeX") != str(base.width) or el.get("SizeY") != str(base.height)))
        for el in pixels[:1]:
            sx, sy = el.get("PhysicalSizeX"), el.get("PhysicalSizeY")
            if sx is None and sy is None:
                return None
            values = []
            for axis, raw in (("X", sx or sy), ("Y", sy or sx)):
                unit = el.get(f"PhysicalSize{axis}Unit", "µm")  # the OME schema's default unit is µm
                if unit not in _UNIT_UM:
                    raise _fail(self.path, f"OME PhysicalSize{axis}Unit={unit!r} is not a length unit this worker knows")
                try:
                    values.append(float(raw) * _UNIT_UM[unit])
                except ValueError:
                    raise _fail(self.path, f"OME PhysicalSize{axis}={raw!r} is not a number") from None
            return values[0], values[1], "OME PhysicalSizeX/Y"
        return None

    def _aperio_mpp(self) -> tuple[float, float, str] | None:
        desc = self.levels[0].page.description or ""
        m = re.search(r"\|\s*MPP\s*=\s*([0-9.eE+-]+)", desc) if desc.startswith("Aperio") else None
        if not m:
            return None
        value = float(m.group(1))
        return value, value, "Aperio MPP"

    def _resolution_mpp(self) -> tuple[float, float, str] | None:
        tags = self.levels[0].page.tags
        unit = tags.get("ResolutionUnit")
        xres, yres = tags.get("XResolution"), tags.get("YResolution")
        if unit is None or xres is None:
            return None
        um_per_unit = {2: 25400.0, 3: 10000.0}.get(int(unit.value))  # INCH, CENTIMETER; NONE (1) is uncalibrated
        if um_per_unit is None:
            return None

        def per_unit(tag) -> float:
            num, den = tag.value if isinstance(tag.value, tuple) else (tag.value, 1)
            return num / den if den else 0.0

        px, py = per_unit(xres), per_unit(yres or xres)
        if px <= 0 or py <= 0:
            return None
        name = "CENTIMETER" if int(unit.value) == 3 else "INCH"
        return um_per_unit / px, um_per_unit / py, f"TIFF X/YResolution ({name})"

    # -- properties --------------------------------------------------------------------------------------------
    @property
    def width(self) -> int:
        return self.levels[0].width

    @property
    def height(self) -> int:
        return self.levels[0].height

    def level_mpp(self, level: Level) -> tuple[float, float]:
        """µm per pixel of `level` along x and y."""
        return self.mpp_x * self.width / level.width, self.mpp_y * self.height / level.height

    # -- pixels ------------------------------------------------------------------------------------------------
    def read_tile(self, level: Level, tx: int, ty: int, out: np.ndarray | None = None) -> np.ndarray:
        """Decode TIFF tile (tx, ty) of `level` as uint8 (tile_height, tile_width, 3); empty tiles read as white.

        With `out` (a C-contiguous uint8 array of that shape) the pixels land in it, and it is returned; 3-sample
        JPEG tiles, the usual whole-slide case, are then decoded straight into it, with no copy.
        """
        page = level.page
        index = ty * level.tiles_across + tx
        offset, count = page.dataoffsets[index], page.databytecounts[index]
        if count == 0:
            if out is None:
                return np.full((level.tile_height, level.tile_width, 3), 255, np.uint8)
            out[:] = 255
            return out
        data = os.pread(self._fd, count, offset)
        if len(data) != count:
            raise _fail(self.path, f"level {level.index} tile ({tx}, {ty}) is truncated ({len(data)} of {count} bytes)")
        direct = out is not None and level.jpeg is not None and out.flags.c_contiguous
        try:
            if direct:
                colorspace, outcolorspace = level.jpeg
                imagecodecs.jpeg8_decode(
                    data, tables=page.jpegtables, colorspace=colorspace, outcolorspace=outcolorspace,
                    shape=(level.tile_height, level.tile_width), out=out,
                )
                return out
            segment, _, _ = page.decode(data, index, jpegtables=page.jpegtables)
        except Exception as exc:  # noqa: BLE001 - codec errors come in many types
            raise _fail(self.path, f"level {level.index} tile ({tx}, {ty}) does not decode ({_one_line(exc)})") from None
        tile = segment.reshape(level.tile_height, level.tile_width, -1)[..., :3]
        if out is not None:
            out[:] = tile
            return out
        return tile

    def read_region(self, level: Level, x: int, y: int, w: int, h: int, out: np.ndarray | None = None) -> np.ndarray:
        """Assemble the w x h region at (x, y) of `level` from its tiles; outside the image reads as white."""
        if out is None:
            out = np.empty((h, w, 3), np.uint8)
        tw, th = level.tile_width, level.tile_height
        if x >= 0 and y >= 0 and x % tw == 0 and y % th == 0 and w == tw and h == th:
            self.read_tile(level, x // tw, y // th, out=out)  # the common, aligned case: one decode
            self._whiten(out, level, x, y)
            return out
        out[:] = 255
        for ty in range(max(y, 0) // th, min(y + h, level.height) // th + 1):
            for tx in range(max(x, 0) // tw, min(x + w, level.width) // tw + 1):
                if tx >= level.tiles_across or ty >= level.tiles_down:
                    continue
                tile = self.read_tile(level, tx, ty)
                x0, y0 = max(tx * tw, x), max(ty * th, y)
                x1, y1 = min((tx + 1) * tw, x + w, level.width), min((ty + 1) * th, y + h, level.height)
                if x1 > x0 and y1 > y0:
                    out[y0 - y : y1 - y, x0 - x : x1 - x] = tile[y0 - ty * th : y1 - ty * th, x0 - tx * tw : x1 - tx * tw]
        return out

    @staticmethod
    def _whiten(out: np.ndarray, level: Level, x: int, y: int) -> None:
        # Edge tiles are padded by the scanner with arbitrary pixels: treat them as glass.
        if x + out.shape[1] > level.width:
            out[:, level.width - x :] = 255
        if y + out.shape[0] > level.height:
            out[level.height - y :, :] = 255

    def read_decimated(self, level: Level, step: int) -> np.ndarray:
        """Every `step`-th pixel of `level` (centre-sampled), read tile by tile; small levels only need step 1."""
        step = max(int(step), 1)
        w, h = -(-level.width // step), -(-level.height // step)
        if not level.tile_width:
            if level.width * level.height > 64 * 2**20:
                raise _fail(self.path, f"level {level.index} ({level.width}x{level.height}) is stripped and too large to read whole")
            return np.ascontiguousarray(level.page.asarray()[step // 2 :: step, step // 2 :: step, :3])[:h, :w]
        out = np.empty((h, w, 3), np.uint8)
        cols = np.minimum(np.arange(w) * step + step // 2, level.width - 1)
        rows = np.minimum(np.arange(h) * step + step // 2, level.height - 1)
        tw, th = level.tile_width, level.tile_height
        # Per tile row / column: the output range it fills and the pixels it gives (a strided slice when regular).
        row_parts = _parts(rows, th, level.tiles_down)
        col_parts = _parts(cols, tw, level.tiles_across)
        for ty, (r0, r1, rsrc) in row_parts:
            for tx, (c0, c1, csrc) in col_parts:
                tile = self.read_tile(level, tx, ty)
                if isinstance(rsrc, slice) and isinstance(csrc, slice):
                    out[r0:r1, c0:c1] = tile[rsrc, csrc]
                else:
                    out[r0:r1, c0:c1] = tile[rsrc][:, csrc]
        return out

    def thumbnail(self, relative_to: Level, target_downsample: float) -> tuple[np.ndarray, float, float]:
        """A small RGB image of the slide with downsample <= target relative to `relative_to`; (image, dsx, dsy)."""
        wanted = relative_to.downsample * target_downsample
        # The coarsest level that is still at least as fine as wanted, then decimated down to it.
        usable = [lv for lv in self.levels if lv.downsample <= wanted * 1.01] or [self.levels[0]]
        level = usable[-1]
        step = max(int(wanted / level.downsample), 1)
        img = self.read_decimated(level, step)
        dsx = relative_to.width / img.shape[1]
        dsy = relative_to.height / img.shape[0]
        return img, dsx, dsy

    # -- lifetime ----------------------------------------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)
            self._fd = None
        self._tif.close()

    def __enter__(self) -> "Slide":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        sizes = ", ".join(f"{lv.width}x{lv.height}" for lv in self.levels)
        return f"Slide({self.name!r}, levels=[{sizes}], mpp={self.mpp_x:g}x{self.mpp_y:g} µm from {self.mpp_source})"


def _parts(idx: np.ndarray, size: int, n: int) -> list:
    """For sorted sample positions `idx` along an axis of `n` tiles of `size`: (tile, (start, stop, src)) per tile
    holding samples, where out[start:stop] takes tile[src] (a slice when the samples are evenly spaced)."""
    parts = []
    for t in range(n):
        start, stop = np.searchsorted(idx, [t * size, (t + 1) * size])
        if stop <= start:
            continue
        local = idx[start:stop] - t * size
        steps = np.diff(local)
        if len(local) == 1 or (steps == steps[0]).all() and steps[0] > 0:
            step = int(steps[0]) if len(local) > 1 else 1
            src = slice(int(local[0]), int(local[-1]) + 1, step)
        else:
            src = local
        parts.append((t, (int(start), int(stop), src)))
    return parts


def _jpeg_colorspaces(page) -> tuple | None:
    try:
        if (
            page.compression == 7 and page.is_tiled and page.samplesperpixel == 3 and page.bitspersample == 8
            and page.planarconfig == 1 and not page.extrasamples and page.fillorder == 1
        ):
            return tifffile.tifffile.jpeg_decode_colorspace(
                page.photometric, page.planarconfig, page.extrasamples, page.is_jfif
            )
    except Exception:  # noqa: BLE001 - anything odd: let tifffile decode it
        pass
    return None


def open_slide(path: str | Path, *, mpp_um: float | None = None) -> Slide:
    """Open a pyramidal slide; raise SlideError (one line naming the file) if it cannot be used."""
    return Slide(path, mpp_um=mpp_um)


def _is_rgb8(page) -> bool:
    try:
        return (
            page.dtype == np.uint8
            and page.samplesperpixel in (3, 4)
            and int(page.photometric) in (2, 6)  # RGB, YCbCr (JPEG)
        )
    except Exception:  # noqa: BLE001
        return False


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]


# -- tissue ----------------------------------------------------------------------------------------------------
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
