"""The tifffile reader: pyramidal TIFF, OME-TIFF and Aperio SVS, tiled or stripped, read by pread from many threads."""
from __future__ import annotations

import os
import re
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import imagecodecs
import numpy as np
import tifffile

from worker.logfmt import one_line
from worker.slides.colour import classify
from worker.slides.limits import SlideLimits
from worker.slides.slide import Level, Slide, SlideError, fail
from worker.slides.tiff_pages import (
    SIZED_STREAMS,
    codec_refusal,
    describe_page,
    is_usable,
    jpeg_colorspaces,
    planes,
)
from worker.slides.tiff_structure import TiffStructure, read_tiff_structure
from worker.slides.tile_decode import decode_bounded, to_pixels

# µm per unit, for OME's UnitsLength values we may meet on PhysicalSizeX/Y (both spellings of micro).
_UNIT_UM = {
    "µm": 1.0, "μm": 1.0, "um": 1.0, "micron": 1.0, "micrometer": 1.0, "micrometre": 1.0,
    "nm": 1e-3, "pm": 1e-6, "Å": 1e-4, "mm": 1e3, "cm": 1e4, "m": 1e6,
}


class TiffSlide(Slide):
    """A TIFF-family slide read with tifffile: tiles (or strips) by os.pread, JPEG tiles straight into buffers."""

    reader = "tifffile"

    def __init__(self, path: str | Path, *, mpp_um: float | None = None, limits: SlideLimits | None = None,
                 structure: TiffStructure | None = None):
        super().__init__(Path(path), limits)
        # What the directories declare, held to the limits before tifffile reads them (it loads every tile table).
        self.structure = structure if structure is not None else read_tiff_structure(self.path, self.limits)
        try:
            # tifffile switches to NDPI's 64-bit offsets by the ".ndpi" suffix alone; NDPI goes to OpenSlide, so
            # any file that reaches this reader is parsed as the plain TIFF its content says it is.
            self._tif = tifffile.TiffFile(self.path, is_ndpi=False)
        except (tifffile.TiffFileError, ValueError, OSError, struct.error, IndexError) as exc:
            raise fail(self.path, f"damaged TIFF structure ({one_line(exc)})") from None
        try:
            self.format = _tiff_format(self._tif)
            self.levels = self._find_levels()
            self._check_complete()
            self._set_calibration(self._ome_mpp() or self._aperio_mpp() or self._resolution_mpp(), mpp_um)
            self._fd = os.open(self.path, os.O_RDONLY)
            self._channels = 1 if self.levels[0].page.samplesperpixel == 1 else 3
            self.colour = classify(self._sample_raw())
            # The common case, decided once: 8-bit RGB used as stored, so aligned tiles decode straight to buffers.
            self._as_stored = self.colour.lut is None and self._channels == 3
            if self._channels == 1 and self.colour.lut is None:
                raise fail(self.path, f"{self.colour.kind}: the model needs stained RGB; found 1 sample per pixel "
                                      f"on a bright background")
        except Exception:
            self.close()
            raise

    # -- structure ---------------------------------------------------------------------------------------------
    def _find_levels(self) -> list[Level]:
        tif = self._tif
        candidates, found = [], []
        try:
            series = list(tif.series)
        except Exception as exc:  # noqa: BLE001 - tifffile raises many kinds on corrupt files
            raise fail(self.path, f"damaged TIFF structure ({one_line(exc)})") from None
        for s in series:
            try:
                pages = [lvl.keyframe for lvl in s.levels]
            except Exception:  # noqa: BLE001
                continue
            if not pages:
                continue
            found.append(describe_page(pages[0], s))
            if is_usable(pages[0]) and planes(s, pages[0]) == 1:
                candidates.append((s, pages))
        if not candidates:
            what = "; ".join(found[:3]) or "no image"
            raise fail(self.path, f"not a brightfield RGB or 8-bit single-channel slide (found {what})")
        # The slide is the largest usable series (label, macro and thumbnail images are small, separate series).
        best, pages = max(candidates, key=lambda c: c[1][0].imagewidth * c[1][0].imagelength)
        self.associated_skipped = [s.name or s.kind or "image" for s in series if s is not best and s.levels]
        base = pages[0]
        w0, h0 = base.imagewidth, base.imagelength
        # What the header declares, before anything is decoded (levels, pixels, then each level's tiles or strips).
        limits = self.limits
        limits.check_levels(self.path, len(pages))
        limits.check_level(self.path, 0, w0, h0)
        if base.imagedepth != 1 or (base.planarconfig != 1 and base.samplesperpixel > 1):
            raise fail(self.path, "level 0 is volumetric or planar-separate; expected interleaved RGB")
        levels: list[Level] = []
        for page in sorted(pages, key=lambda p: -p.imagewidth * p.imagelength):
            w, h = page.imagewidth, page.imagelength
            # Keep only true reductions of level 0: same aspect ratio, up to the rounding of small levels.
            dsx, dsy = w0 / w, h0 / h
            if not is_usable(page) or page.samplesperpixel != base.samplesperpixel:
                continue
            if abs(dsx - dsy) / dsx > 0.02 + 2.0 / w + 2.0 / h:
                continue
            if levels and (w >= levels[-1].width or h >= levels[-1].height):
                continue
            limits.check_level(self.path, len(levels), w, h)
            refusal = codec_refusal(page)
            if refusal is not None:
                if not levels:
                    raise fail(self.path, f"level 0: {refusal}")
                continue  # a reduced level this reader cannot decode is left out; a finer one serves instead
            spp, nbytes = page.samplesperpixel, -(-page.bitspersample // 8)
            if page.is_tiled:
                tw, th = page.tilewidth, page.tilelength
                limits.check_unit(self.path, len(levels), tw, th, spp, nbytes)
            else:
                tw, th = 0, min(page.rowsperstrip or h, h)
                # Uncompressed 8-bit strips are read row by row (never a whole strip); others decode a strip at once.
                decoded = not (page.compression == 1 and page.bitspersample == 8 and page.fillorder == 1)
                if decoded and not limits.unit_fits(w, th, spp, nbytes):
                    if not levels:
                        limits.check_unit(self.path, 0, w, th, spp, nbytes, kind="strips", check_side=False)
                    continue  # a reduced level too costly to decode is left out; a finer one serves instead
            levels.append(Level(len(levels), w, h, (w0 / w + h0 / h) / 2, tw, th, page, jpeg_colorspaces(page)))
        return levels

    def _check_complete(self) -> None:
        """Refuse a level one of whose stored tiles or strips is larger than the limits admit (the structure reader
        has already refused data running past the file's end)."""
        for lv in self.levels:
            counts = np.asarray(lv.page.databytecounts, np.int64)
            # Each stored tile or strip is read whole into memory before it is decoded (uncompressed strips aside,
            # read by row): its stored size is bounded like its decoded size.
            if counts.size and (lv.tile_width or lv.page.compression != 1):
                self.limits.check_stored(self.path, lv.index, int(counts.max()))

    def _calibration_sources(self) -> str:
        return "no OME PhysicalSizeX/Y, no Aperio MPP, no X/YResolution in CENTIMETER or INCH"

    def _ome_mpp(self) -> tuple[float, float, str] | None:
        xml = self._tif.ome_metadata if self._tif.is_ome else None
        if not xml:
            return None
        try:
            root = ET.fromstring(xml)
        except ET.ParseError as exc:
            raise fail(self.path, f"OME-XML is not well-formed ({one_line(exc)})") from None
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
                    raise fail(self.path, f"OME PhysicalSize{axis}Unit={unit!r} is not a length unit this worker knows")
                try:
                    values.append(float(raw) * _UNIT_UM[unit])
                except ValueError:
                    raise fail(self.path, f"OME PhysicalSize{axis}={raw!r} is not a number") from None
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

    # -- pixels ------------------------------------------------------------------------------------------------
    _channels = 3
    _as_stored = False

    def _raw_channels(self) -> int:
        return self._channels

    def probe(self) -> None:
        """Decode one stored tile of level 0 with data, so a codec tifffile cannot handle fails at open."""
        lv = self.levels[0]
        counts = lv.page.databytecounts
        index = next((i for i, c in enumerate(counts) if c), None)
        if index is None:
            return
        if lv.tile_width:
            self.read_tile(lv, index % lv.tiles_across, index // lv.tiles_across)
        else:
            self._strip(lv, index)

    def read_tile(self, level: Level, tx: int, ty: int, out: np.ndarray | None = None) -> np.ndarray:
        """Decode stored tile (tx, ty) of tiled `level` as uint8 (tile_height, tile_width, C); empty tiles read
        white. With `out` (C-contiguous, that shape) the pixels land in it; 3-sample JPEG tiles are then decoded
        straight into it, with no copy. No colour conversion (read_region converts)."""
        page = level.page
        index = ty * level.tiles_across + tx
        c = self._channels
        offset, count = page.dataoffsets[index], page.databytecounts[index]
        if count == 0:
            if out is None:
                return np.full((level.tile_height, level.tile_width, c), 255, np.uint8)
            out[:] = 255
            return out
        what = f"level {level.index} tile ({tx}, {ty})"
        data = self._pread(count, offset, what)
        if page.compression not in SIZED_STREAMS:
            tile = self._decode_bounded(level, data, what, level.tile_height, level.tile_height)
            if out is not None:
                out[:] = tile
                return out
            return tile
        # The decoder allocates what the stream declares: it must declare this tile's size, no more, no less.
        self.limits.check_stream(self.path, what, page.compression, data, level.tile_width, level.tile_height)
        direct = out is not None and level.jpeg is not None and out.flags.c_contiguous and c == 3
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
            raise fail(self.path, f"{what} does not decode ({one_line(exc)})") from None
        tile = segment.reshape(level.tile_height, level.tile_width, -1)[..., :c]
        if out is not None:
            out[:] = tile
            return out
        return tile

    def _decode_bounded(self, level: Level, data: bytes, what: str, rows: int, min_rows: int) -> np.ndarray:
        """A tile (or strip: `level.width` wide) of a codec without its own size header, decoded into exactly the
        bytes its declared shape takes (a last strip may hold from `min_rows` rows) as (rows, width, C)."""
        page = level.page
        width = level.tile_width or level.width
        spp = page.samplesperpixel
        shape = f"{width} × {rows} px × {spp} sample{'s' if spp != 1 else ''}"
        raw = decode_bounded(self.path, what, page.compression, data, rows * width * spp,
                             min_bytes=min_rows * width * spp, shape=shape)
        got = len(raw) // (width * spp)
        pixels = to_pixels(raw, got, width, spp, predictor=int(page.predictor), fill_order=int(page.fillorder))
        return pixels[..., : self._channels]

    def _pread(self, count: int, offset: int, what: str) -> bytes:
        data = os.pread(self._fd, count, offset)
        if len(data) != count:
            raise fail(self.path, f"{what} is truncated ({len(data)} of {count} bytes; a partial upload or copy?)")
        return data

    def _cached_tile(self, level: Level, tx: int, ty: int) -> np.ndarray:
        key = (level.index, tx, ty)
        tile = self.cache.get(key)
        if tile is None:
            tile = self.read_tile(level, tx, ty)
            self.cache.put(key, tile)
        return tile

    def read_region(self, level: Level, x: int, y: int, w: int, h: int, out: np.ndarray | None = None) -> np.ndarray:
        tw, th = level.tile_width, level.tile_height
        if (self._as_stored and w == tw and h == th and x >= 0 and y >= 0 and x % tw == 0 and y % th == 0
                and level.source is None):
            # The common, aligned case: one decode, straight into the caller's buffer.
            if out is None:
                out = np.empty((h, w, 3), np.uint8)
            self.read_tile(level, x // tw, y // th, out=out)
            _whiten(out, level, x, y)
            return out
        return super().read_region(level, x, y, w, h, out)

    def _read_raw(self, level: Level, x: int, y: int, w: int, h: int, out: np.ndarray) -> np.ndarray:
        out[:] = 255
        if not level.tile_width:
            return self._read_strips(level, x, y, w, h, out)
        tw, th = level.tile_width, level.tile_height
        for ty in range(max(y, 0) // th, min(y + h, level.height) // th + 1):
            for tx in range(max(x, 0) // tw, min(x + w, level.width) // tw + 1):
                if tx >= level.tiles_across or ty >= level.tiles_down:
                    continue
                x0, y0 = max(tx * tw, x), max(ty * th, y)
                x1, y1 = min((tx + 1) * tw, x + w, level.width), min((ty + 1) * th, y + h, level.height)
                if x1 <= x0 or y1 <= y0:
                    continue
                whole = x0 == tx * tw and y0 == ty * th and x1 - x0 == tw and y1 - y0 == th
                # A tile this region covers entirely is read once; one it shares with a neighbour goes through
                # the cache, so the neighbour does not decode it again (Aperio's 240 px tiles under 256 px reads).
                tile = self.read_tile(level, tx, ty) if whole else self._cached_tile(level, tx, ty)
                out[y0 - y : y1 - y, x0 - x : x1 - x] = tile[y0 - ty * th : y1 - ty * th, x0 - tx * tw : x1 - tx * tw]
        return out

    def _strip(self, level: Level, index: int) -> np.ndarray:
        """Decoded strip `index` of a stripped level (cached), as (rows, width, C)."""
        key = (level.index, "strip", index)
        strip = self.cache.get(key)
        if strip is not None:
            return strip
        page = level.page
        c = self._raw_channels()
        count, offset = page.databytecounts[index], page.dataoffsets[index]
        rows = min(level.tile_height, level.height - index * level.tile_height)
        if count == 0:
            strip = np.full((rows, level.width, c), 255, np.uint8)
        else:
            what = f"level {level.index} strip {index}"
            data = self._pread(count, offset, what)
            if page.compression not in SIZED_STREAMS:
                strip = self._decode_bounded(level, data, what, level.tile_height, rows)[:rows, :, :c]
            else:
                self.limits.check_stream(self.path, what, page.compression, data, level.width, level.tile_height,
                                         min_height=rows)
                try:
                    segment, _, _ = page.decode(data, index, jpegtables=page.jpegtables)
                except Exception as exc:  # noqa: BLE001
                    raise fail(self.path, f"{what} does not decode ({one_line(exc)})") from None
                strip = segment.reshape(-1, level.width, segment.shape[-1])[:rows, :, :c]
        self.cache.put(key, strip)
        return strip

    def _read_strips(self, level: Level, x: int, y: int, w: int, h: int, out: np.ndarray) -> np.ndarray:
        page, rps = level.page, level.tile_height
        x0, x1 = max(x, 0), min(x + w, level.width)
        y0, y1 = max(y, 0), min(y + h, level.height)
        if x1 <= x0 or y1 <= y0:
            return out
        c = self._raw_channels()
        spp = page.samplesperpixel
        if page.compression == 1 and page.bitspersample == 8 and page.fillorder == 1:
            # Uncompressed: read just the bytes of each row segment, however large the strip.
            for row in range(y0, y1):
                s, r = divmod(row, rps)
                offset = page.dataoffsets[s] + (r * level.width + x0) * spp
                data = self._pread((x1 - x0) * spp, offset, f"level {level.index} row {row}")
                out[row - y, x0 - x : x1 - x] = np.frombuffer(data, np.uint8).reshape(x1 - x0, spp)[:, :c]
            return out
        for s in range(y0 // rps, (y1 - 1) // rps + 1):
            strip = self._strip(level, s)
            r0, r1 = max(y0, s * rps), min(y1, s * rps + strip.shape[0])
            out[r0 - y : r1 - y, x0 - x : x1 - x] = strip[r0 - s * rps : r1 - s * rps, x0:x1]
        return out

    def read_decimated(self, level: Level, step: int) -> np.ndarray:
        """Every `step`-th pixel of `level` (centre-sampled), read tile by tile without assembling regions."""
        if not level.tile_width:
            # Stripped: only the sampled rows are read (one pread per row when uncompressed), never the level.
            step = max(int(step), 1)
            w, h = -(-level.width // step), -(-level.height // step)
            cols = np.minimum(np.arange(w) * step + step // 2, level.width - 1)
            out = np.empty((h, w, 3), np.uint8)
            for i, row in enumerate(np.minimum(np.arange(h) * step + step // 2, level.height - 1)):
                out[i] = self.read_region(level, 0, int(row), level.width, 1)[0, cols]
            return out
        if self.colour.lut is not None or self._raw_channels() != 3:
            return super().read_decimated(level, step)
        step = max(int(step), 1)
        w, h = -(-level.width // step), -(-level.height // step)
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

    # -- lifetime ----------------------------------------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)
            self._fd = None
        if getattr(self, "_tif", None) is not None:
            self._tif.close()


def _whiten(out: np.ndarray, level: Level, x: int, y: int) -> None:
    # Edge tiles are padded by the scanner with arbitrary pixels: treat them as glass.
    if x + out.shape[1] > level.width:
        out[:, level.width - x :] = 255
    if y + out.shape[0] > level.height:
        out[level.height - y :, :] = 255


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


def _tiff_format(tif: tifffile.TiffFile) -> str:
    if getattr(tif, "is_svs", False):
        return "Aperio SVS"
    if getattr(tif, "is_ome", False):
        return "OME-TIFF"
    return "pyramidal TIFF" if len(tif.series) and len(tif.series[0].levels) > 1 else "TIFF"


def open_tiff(path: Path, mpp_um: float | None, limits: SlideLimits | None = None,
              structure: TiffStructure | None = None) -> TiffSlide:
    """Open with tifffile and decode one tile, so a slide whose tiles do not decode fails here (SlideError)."""
    slide = TiffSlide(path, mpp_um=mpp_um, limits=limits, structure=structure)
    try:
        slide.probe()
    except SlideError:
        slide.close()
        raise
    return slide
