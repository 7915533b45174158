"""The wsidicom reader: DICOM WSI (VL Whole Slide Microscopy) as a folder of instances, or one instance file."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

from worker.logfmt import one_line
from worker.slides.colour import classify
from worker.slides.dicom_header import read_dicom_header
from worker.slides.limits import SlideLimits
from worker.slides.slide import Level, Slide, SlideError, fail

DICM_OFFSET = 128  # a DICOM Part 10 file: 128-byte preamble, then b"DICM"
#: Transfer syntaxes whose frames carry their own pixel size, as the TIFF compression whose header reader applies:
#: JPEG baseline, extended and lossless (PS3.5 A.4.1-A.4.2) and JPEG 2000 / HTJ2K (A.4.4, A.4.11).
FRAME_CODECS = {"1.2.840.10008.1.2.4.50": 7, "1.2.840.10008.1.2.4.51": 7, "1.2.840.10008.1.2.4.57": 7,
                "1.2.840.10008.1.2.4.70": 7, "1.2.840.10008.1.2.4.90": 34712, "1.2.840.10008.1.2.4.91": 34712,
                "1.2.840.10008.1.2.4.201": 34712, "1.2.840.10008.1.2.4.202": 34712,
                "1.2.840.10008.1.2.4.203": 34712}


def is_dicom_file(path: Path) -> bool:
    """Whether `path` is a DICOM Part 10 file (by its content, whatever its name)."""
    try:
        with open(path, "rb") as f:
            f.seek(DICM_OFFSET)
            return f.read(4) == b"DICM"
    except OSError:
        return False


def dicom_files(folder: Path) -> list[Path]:
    """The DICOM files directly in `folder`, by content (DICOM series often have no suffix at all)."""
    return sorted(p for p in folder.iterdir() if p.is_file() and is_dicom_file(p))


class DicomSlide(Slide):
    """A DICOM WSI read with wsidicom; the volume (not label or overview) instances, largest present level first."""

    reader = "wsidicom"
    format = "DICOM WSI"

    def __init__(self, path: str | Path, *, mpp_um: float | None = None, limits: SlideLimits | None = None):
        super().__init__(Path(path), limits)
        files = dicom_files(self.path) if self.path.is_dir() else [self.path]
        if not files:
            raise fail(self.path, "no DICOM files in the folder")
        # What every instance declares, held to the limits by a bounded reader before pydicom or wsidicom parse it.
        already, syntaxes = 0, set()
        for f in files:
            header = read_dicom_header(f, self.limits, already=already, slide=self.path if self.path.is_dir() else None)
            already += header.header_bytes
            syntaxes.add(header.transfer_syntax)
        self._frame_codec = FRAME_CODECS.get(syntaxes.pop()) if len(syntaxes) == 1 else None
        self._checked: set[tuple[int, int, int]] = set()
        from wsidicom import WsiDicom  # (pydicom with it) only for headers that passed

        try:
            self._wsi = WsiDicom.open(files)
        except Exception as exc:  # noqa: BLE001 - pydicom and wsidicom raise many kinds on damaged input
            raise fail(self.path, f"wsidicom cannot open the DICOM WSI ({one_line(exc)}; damaged, truncated or "
                                  f"not a VL Whole Slide Microscopy series?)") from None
        self._lock = threading.Lock()  # wsidicom shares file handles between reads
        try:
            self.associated_skipped = ((["label"] if self._wsi.labels else [])
                                       + (["overview"] if self._wsi.overviews else []))
            levels = list(self._wsi.levels)
            if not levels:
                raise fail(self.path, "the DICOM series has no volume (pyramid) instances")
            base = levels[0]
            w0, h0 = base.size.width, base.size.height
            ds = base.datasets[0]
            self._samples = int(ds.samples_per_pixel)
            photometric = str(ds.photometric_interpretation)
            bits = int(getattr(ds, "bits", 8) or 8)
            # What the DICOM headers declare, before a frame is decoded: levels, each level's pixels and frames.
            self.limits.check_levels(self.path, len(levels))
            for i, lv in enumerate(levels):
                w, h = lv.size.width, lv.size.height
                tw, th = lv.tile_size.width, lv.tile_size.height
                self.limits.check_level(self.path, i, w, h)
                self.limits.check_unit(self.path, i, tw, th, self._samples, -(-bits // 8))
                self.levels.append(Level(i, w, h, (w0 / w + h0 / h) / 2, tw, th, native=lv.level))
            if bits != 8 or self._samples not in (1, 3):
                raise fail(self.path, f"{bits}-bit {photometric} with {self._samples} samples per pixel: not 8-bit "
                                      f"RGB or single-channel")
            found = None
            spacing = base.pixel_spacing  # mm per pixel (DICOM PixelSpacing: row spacing, column spacing)
            if spacing is not None and float(spacing.width) > 0 and float(spacing.height) > 0:
                found = (float(spacing.width) * 1000.0, float(spacing.height) * 1000.0, "DICOM PixelSpacing")
            self._set_calibration(found, mpp_um)
            self.colour = classify(self._sample_raw())
            if self.colour.lut is None and self._samples == 1:
                raise fail(self.path, f"{self.colour.kind}: the model needs stained RGB; found 1 sample per pixel "
                                      f"({photometric}) on a bright background")
        except SlideError:
            self.close()
            raise
        except Exception as exc:  # noqa: BLE001
            self.close()
            raise fail(self.path,
                       f"wsidicom cannot read the DICOM WSI ({one_line(exc)}; damaged or truncated?)") from None

    def _calibration_sources(self) -> str:
        return "no DICOM PixelSpacing"

    def _raw_channels(self) -> int:
        return 1 if self._samples == 1 else 3

    def _read_raw(self, level: Level, x: int, y: int, w: int, h: int, out: np.ndarray) -> np.ndarray:
        out[:] = 255
        x0, y0 = max(x, 0), max(y, 0)
        x1, y1 = min(x + w, level.width), min(y + h, level.height)
        if x1 <= x0 or y1 <= y0:
            return out
        try:
            with self._lock:
                self._check_frames(level, x0, y0, x1, y1)
                region = self._wsi.read_region((x0, y0), level.native, (x1 - x0, y1 - y0), as_array=True)
        except SlideError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise fail(self.path, f"level {level.index} region ({x}, {y}, {w}x{h}) does not decode "
                                  f"({one_line(exc)}; damaged or truncated?)") from None
        region = np.asarray(region)
        if region.ndim == 2:
            region = region[..., None]
        out[y0 - y : y1 - y, x0 - x : x1 - x] = region[..., : out.shape[-1]]
        return out

    def _check_frames(self, level: Level, x0: int, y0: int, x1: int, y1: int) -> None:
        """Refuse a frame under the region whose JPEG or JPEG 2000 header declares another size than the instance's
        frames (a decompression bomb or damage), before wsidicom decodes it; each frame is checked once."""
        if self._frame_codec is None or not level.tile_width:
            return
        tw, th = level.tile_width, level.tile_height
        for ty in range(y0 // th, (y1 - 1) // th + 1):
            for tx in range(x0 // tw, (x1 - 1) // tw + 1):
                key = (level.index, tx, ty)
                if key in self._checked:
                    continue
                data = self._wsi.read_encoded_tile(level.native, (tx, ty), crop_to_image_boundary=False)
                self.limits.check_stream(self.path, f"level {level.index} frame ({tx}, {ty})", self._frame_codec,
                                         data, tw, th)
                self._checked.add(key)

    def close(self) -> None:
        if getattr(self, "_wsi", None) is not None:
            self._wsi.close()
            self._wsi = None
