"""The OpenSlide reader: NDPI, MRXS, SCN, BIF, VMS, Philips and Trestle TIFF."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from worker.logfmt import one_line
from worker.slides.colour import classify
from worker.slides.limits import SlideLimits
from worker.slides.slide import Level, Slide, SlideError, fail
from worker.slides.tiff_structure import MAGIC as TIFF_MAGIC
from worker.slides.tiff_structure import TiffStructure, read_tiff_structure

#: Bytes per pixel OpenSlide decodes into (premultiplied ARGB, one uint32 per pixel), whatever the file stores.
OPENSLIDE_PIXEL_BYTES = 4

#: OpenSlide's vendor names, as its detect_format reports them, and how a person would name the format.
VENDOR_FORMATS = {
    "aperio": "Aperio SVS", "hamamatsu": "Hamamatsu NDPI/VMS", "leica": "Leica SCN", "mirax": "3DHISTECH MRXS",
    "philips": "Philips TIFF", "sakura": "Sakura SVSlide", "trestle": "Trestle TIFF", "ventana": "Ventana BIF",
    "generic-tiff": "generic TIFF", "dicom": "DICOM WSI", "synthetic": "OpenSlide synthetic",
}


def detect_format(path: Path) -> str | None:
    """OpenSlide's vendor name for the file ("hamamatsu", "mirax", ...), or None when OpenSlide cannot read it."""
    import openslide

    try:
        return openslide.OpenSlide.detect_format(str(path))
    except Exception:  # noqa: BLE001 - an unreadable file is simply not OpenSlide's
        return None


class OpenSlideSlide(Slide):
    """A slide read with OpenSlide (its C library is thread-safe and caches decoded tiles itself)."""

    reader = "openslide"

    def __init__(self, path: str | Path, *, mpp_um: float | None = None, vendor: str | None = None,
                 limits: SlideLimits | None = None, structure: TiffStructure | None = None):
        super().__init__(Path(path), limits)
        if structure is None and self.path.is_file():
            with open(self.path, "rb") as f:
                if f.read(4) in TIFF_MAGIC:  # a vendor TIFF: its directories are held to the limits before libtiff
                    read_tiff_structure(self.path, self.limits)
        import openslide

        try:
            self._os = openslide.OpenSlide(str(self.path))
        except Exception as exc:  # noqa: BLE001 - OpenSlideError, OpenSlideUnsupportedFormatError, OSError
            raise fail(self.path, f"OpenSlide cannot read it ({one_line(exc)}; damaged or truncated?)") from None
        try:
            props = self._os.properties
            vendor = vendor or props.get("openslide.vendor") or ""
            self.format = VENDOR_FORMATS.get(vendor, vendor or "OpenSlide")
            if vendor == "hamamatsu" and self.path.suffix.lower() == ".ndpi":
                self.format = "Hamamatsu NDPI"
            elif vendor == "hamamatsu":
                self.format = "Hamamatsu VMS"
            self.associated_skipped = sorted(self._os.associated_images)
            self.levels = []
            w0, h0 = self._os.dimensions
            self.limits.check_levels(self.path, self._os.level_count)
            for i, (w, h) in enumerate(self._os.level_dimensions):
                tw = int(props.get(f"openslide.level[{i}].tile-width", 0) or 0)
                th = int(props.get(f"openslide.level[{i}].tile-height", 0) or 0)
                self.limits.check_level(self.path, i, w, h)
                if tw and th:
                    # Hamamatsu's "tiles" are JPEG restart intervals, rows that may span the whole level: bounded
                    # by their decoded bytes, not by their side.
                    self.limits.check_unit(self.path, i, tw, th, OPENSLIDE_PIXEL_BYTES, 1,
                                           check_side=vendor != "hamamatsu")
                self.levels.append(Level(i, w, h, (w0 / w + h0 / h) / 2, tw, th, native=i))
            self._downsamples = list(self._os.level_downsamples)
            found = None
            mx, my = props.get("openslide.mpp-x"), props.get("openslide.mpp-y")
            if mx and my:
                found = (float(mx), float(my), f"OpenSlide mpp-x/y ({vendor})")
            self._set_calibration(found, mpp_um)
            bg = props.get("openslide.background-color")
            self._background = tuple(int(bg[i : i + 2], 16) for i in (0, 2, 4)) if bg else (255, 255, 255)
            # No vendor property reliably says "fluorescence" (Hamamatsu's AHEX entries are shading data): the
            # pixels decide (a dark background).
            self.colour = classify(self._sample_raw())
        except SlideError:
            self.close()
            raise
        except Exception as exc:  # noqa: BLE001 - a damaged file fails deep inside the C library
            self.close()
            raise fail(self.path, f"OpenSlide cannot read it ({one_line(exc)}; damaged or truncated?)") from None

    def _calibration_sources(self) -> str:
        return "OpenSlide finds no openslide.mpp-x/y in it"

    def _read_raw(self, level: Level, x: int, y: int, w: int, h: int, out: np.ndarray) -> np.ndarray:
        # OpenSlide takes the region's top-left in level-0 coordinates and returns un-premultiplied RGBA.
        ds = self._downsamples[level.native]
        try:
            rgba = np.asarray(self._os.read_region((int(round(x * ds)), int(round(y * ds))), level.native, (w, h)))
        except Exception as exc:  # noqa: BLE001
            raise fail(self.path, f"level {level.index} region ({x}, {y}, {w}x{h}) does not decode "
                                  f"({one_line(exc)}; damaged or truncated?)") from None
        alpha = rgba[..., 3:4]
        if alpha.min() == 255:
            out[:] = rgba[..., :3]
            return out
        # Outside the scanned area OpenSlide returns transparent pixels: composite over the slide's background.
        a = alpha.astype(np.uint16)
        bg = np.array(self._background, np.uint16)
        out[:] = ((rgba[..., :3].astype(np.uint16) * a + bg * (255 - a) + 127) // 255).astype(np.uint8)
        return out

    def close(self) -> None:
        if getattr(self, "_os", None) is not None:
            self._os.close()
            self._os = None

