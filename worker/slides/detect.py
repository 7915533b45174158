"""Choose the reader for a slide from its content (a file or a folder), not from its suffix alone."""
from __future__ import annotations

import struct
from pathlib import Path

import tifffile

from worker.logfmt import one_line
from worker.slides.dicom_slide import DicomSlide, dicom_files, is_dicom_file
from worker.slides.errors import SlideLimitError
from worker.slides.limits import SlideLimits, current_limits
from worker.slides.openslide_slide import OpenSlideSlide, detect_format
from worker.slides.slide import Slide, SlideError, fail
from worker.slides.tiff_slide import open_tiff, tiff_flavour

_TIFF_MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")  # classic TIFF and BigTIFF, both byte orders
# Multi-file formats whose index file names the slide inside a folder.
_INDEX_SUFFIXES = (".mrxs", ".vms")


def _magic(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(16)


def _in_folder(folder: Path) -> Path:
    """The slide a folder holds: DICOM instances (the folder itself), one .mrxs/.vms index, or one slide file."""
    if dicom_files(folder):
        return folder
    entries = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    index = [p for p in entries if p.is_file() and p.suffix.lower() in _INDEX_SUFFIXES]
    if len(index) == 1:
        return index[0]
    files = [p for p in entries if p.is_file() and p.stat().st_size > 0]
    slides = [p for p in files if _magic(p)[:4] in _TIFF_MAGIC]
    if len(index) > 1 or len(slides) > 1:
        names = ", ".join(p.name for p in (index or slides)[:4])
        raise fail(folder, f"the folder holds several slides ({names}); send one slide per message")
    if len(slides) == 1:
        return slides[0]
    raise fail(folder, f"no slide in the folder ({len(entries)} entries; expected DICOM WSI instances, an .mrxs or "
                       f".vms with its data files, or one slide file)")


def open_slide(path: str | Path, *, mpp_um: float | None = None, limits: SlideLimits | None = None) -> Slide:
    """Open a slide (a file, or a folder for DICOM WSI and MRXS/VMS), choosing the reader from its content.

    Readers: tifffile for generic/OME-TIFF and Aperio SVS (JPEG, JPEG 2000; tiled or stripped), OpenSlide for
    NDPI, MRXS, SCN, BIF, VMS, Philips TIFF and TIFFs tifffile cannot decode, wsidicom for DICOM WSI. Raises
    SlideError (one line naming the file and the cause) when it cannot be used, SlideLimitError when it declares
    more than `limits` admit (default: `current_limits()`), before any pixel is decoded.
    """
    path = Path(path)
    limits = limits if limits is not None else current_limits()
    if path.exists():
        limits.check_file(path)  # the whole folder for a folder, before any of it is parsed
    if path.is_dir():
        target = _in_folder(path)
        if target == path:
            return DicomSlide(path, mpp_um=mpp_um, limits=limits)
        path = target
    if not path.is_file():
        raise fail(path, "no such file")
    size = path.stat().st_size
    if size == 0:
        raise fail(path, "empty file (0 bytes; a failed upload or copy?)")
    magic = _magic(path)
    if magic[:4] in _TIFF_MAGIC:
        return _open_tiff_family(path, mpp_um, size, limits)
    if is_dicom_file(path):
        return DicomSlide(path, mpp_um=mpp_um, limits=limits)
    vendor = detect_format(path)
    if vendor is not None:
        return OpenSlideSlide(path, mpp_um=mpp_um, vendor=vendor, limits=limits)
    if path.suffix.lower() in _INDEX_SUFFIXES:
        raise fail(path, f"OpenSlide cannot read this {path.suffix} index; its data files must lie beside it "
                         f"(send the folder or S3 prefix holding both)")
    raise fail(path, f"not a slide format this worker reads (starts with {magic[:8]!r}; expected TIFF/SVS/NDPI/SCN/"
                     f"BIF, DICOM, or an MRXS/VMS index)")


def _open_tiff_family(path: Path, mpp_um: float | None, size: int, limits: SlideLimits) -> Slide:
    """TIFF-structured files: tifffile where it reads them correctly, OpenSlide for vendor layouts and the rest."""
    flavour = None
    plain = False  # OME-TIFF or Aperio SVS by tifffile's reading: tifffile's own, whatever OpenSlide would say
    _check_tiff_header(path, size)
    try:
        with tifffile.TiffFile(path, is_ndpi=False) as tif:  # content, not the ".ndpi" suffix, decides
            limits.check_directories(path, tif.pages)
            flavour = tiff_flavour(tif)
            plain = flavour is None and (tif.is_ome or tif.is_svs)
            if flavour is not None:
                _check_vendor_pages(path, tif, limits)
    except (tifffile.TiffFileError, ValueError, OSError, struct.error, IndexError) as exc:
        if size < 4096:
            raise fail(path, f"truncated or damaged TIFF ({size} bytes; {one_line(exc)})") from None
        tiff_error = fail(path, f"damaged TIFF structure ({one_line(exc)}; a partial upload or copy?)")
    else:
        tiff_error = None
    # OpenSlide's opinion (importing it and its C library) only where it can change the reader: not for an intact
    # OME-TIFF or SVS, unless tifffile then fails to decode it (below).
    vendor = None if plain and tiff_error is None else detect_format(path)
    if flavour is not None or (vendor not in (None, "aperio", "generic-tiff") and tiff_error is None):
        # NDPI, SCN, Philips, BIF ...: tifffile exposes their IFDs but not a plain tile grid to decode.
        if tiff_error is None:
            _check_tiff_complete(path, size, flavour)
        return OpenSlideSlide(path, mpp_um=mpp_um, vendor=vendor, limits=limits)
    if tiff_error is not None:
        raise tiff_error
    try:
        return open_tiff(path, mpp_um, limits)
    except SlideLimitError:
        raise  # what the file declares is refused whichever library would read it
    except SlideError as exc:
        text = str(exc)
        # A codec or layout tifffile cannot decode, in a file OpenSlide can read: let OpenSlide read it.
        if ("does not decode" in text or "volumetric or planar" in text) and plain:
            vendor = detect_format(path)
        if vendor is not None and ("does not decode" in text or "volumetric or planar" in text):
            return OpenSlideSlide(path, mpp_um=mpp_um, vendor=vendor, limits=limits)
        raise


def _check_vendor_pages(path: Path, tif: tifffile.TiffFile, limits: SlideLimits) -> None:
    """Refuse a vendor TIFF (NDPI, SCN, ...) whose image directories declare more pixels than the limits admit,
    from the directories alone, before OpenSlide parses the file (its own view is checked once it is open)."""
    try:
        for index, page in enumerate(tif.pages):
            limits.check_level(path, index, int(page.imagewidth), int(page.imagelength))
    except SlideLimitError:
        raise
    except Exception:  # noqa: BLE001 - a damaged directory is for _check_tiff_complete and OpenSlide to report
        return


def _check_tiff_header(path: Path, size: int) -> None:
    """Refuse a TIFF whose first image directory lies past its end: scanners (Aperio, Hamamatsu) write the
    directory after the pixels, so a partial upload loses it first."""
    head = _magic(path)
    order = "<" if head[:2] == b"II" else ">"
    if head[2:4] in (b"*\x00", b"\x00*"):
        (first,) = struct.unpack(order + "I", head[4:8])
    else:  # BigTIFF
        (first,) = struct.unpack(order + "Q", head[8:16]) if len(head) >= 16 else (size + 1,)
    if first >= size:
        raise fail(path, f"truncated: the file is {size:,} bytes but its first image directory starts at byte "
                         f"{first:,} (a partial upload or copy?)")


def _check_tiff_complete(path: Path, size: int, flavour: str | None) -> None:
    """Refuse a vendor TIFF shorter than its own directory says (a partial upload), before OpenSlide meets it."""
    end = 0
    try:
        with tifffile.TiffFile(path, is_ndpi=flavour == "ndpi") as tif:
            for page in tif.pages:
                offs, counts = page.dataoffsets, page.databytecounts
                if len(offs):
                    end = max(end, max(int(o) + int(c) for o, c in zip(offs, counts)))
    except Exception:  # noqa: BLE001 - unreadable directories are OpenSlide's to report
        return
    if end > size:
        raise fail(path, f"truncated: the file is {size:,} bytes but its image data runs to {end:,} bytes "
                         f"(a partial upload or copy?)")
