"""Choose the reader for a slide from its content (a file or a folder), not from its suffix alone."""
from __future__ import annotations

from pathlib import Path

from worker.slides.dicom_slide import DicomSlide, dicom_files, is_dicom_file
from worker.slides.limits import SlideLimits, current_limits
from worker.slides.openslide_slide import OpenSlideSlide, detect_format
from worker.slides.slide import Slide, fail
from worker.slides.tiff_slide import open_tiff
from worker.slides.tiff_structure import MAGIC as _TIFF_MAGIC
from worker.slides.tiff_structure import flavour, read_tiff_structure

#: TIFF flavours (tiff_structure.flavour) OpenSlide reads, with the vendor name OpenSlide gives each (None: its own).
OPENSLIDE_FLAVOURS = {"ndpi": "hamamatsu", "scn": "leica", "philips": "philips", "bif": "ventana",
                      "trestle": "trestle", "qpi": None}
_SQLITE_MAGIC = b"SQLite format 3\x00"  # Sakura SVSlide
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
    """Open a slide (a file, or a folder for DICOM WSI and MRXS/VMS), choosing its one reader from its content.

    Readers: tifffile for generic/OME-TIFF and Aperio SVS (JPEG, JPEG 2000; tiled or stripped), OpenSlide for
    NDPI, SCN, Philips, BIF and Trestle TIFFs and MRXS/VMS, wsidicom for DICOM WSI. The choice is made once, from
    the magic bytes and (for a TIFF) the structure the bounded reader walked; a refusal or decode error from that
    reader is final, never handed to another. Raises SlideError (one line naming the file and the cause) when it
    cannot be used, SlideLimitError when it declares more than `limits` admit (default: `current_limits()`), before
    any pixel is decoded and before any library parses a TIFF or DICOM header.
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
        structure = read_tiff_structure(path, limits)
        vendor = OPENSLIDE_FLAVOURS.get(flavour(structure) or "", False)
        if vendor is not False:  # a vendor layout tifffile exposes but does not decode as a plain tile grid
            return OpenSlideSlide(path, mpp_um=mpp_um, vendor=vendor, limits=limits, structure=structure)
        return open_tiff(path, mpp_um, limits, structure=structure)
    if is_dicom_file(path):
        return DicomSlide(path, mpp_um=mpp_um, limits=limits)
    if path.suffix.lower() in _INDEX_SUFFIXES or magic.startswith(_SQLITE_MAGIC):
        vendor = detect_format(path)  # MRXS, VMS (an index beside its data) or Sakura: OpenSlide's alone
        if vendor is not None:
            return OpenSlideSlide(path, mpp_um=mpp_um, vendor=vendor, limits=limits)
        if path.suffix.lower() in _INDEX_SUFFIXES:
            raise fail(path, f"OpenSlide cannot read this {path.suffix} index; its data files must lie beside it "
                             f"(send the folder or S3 prefix holding both)")
    raise fail(path, f"not a slide format this worker reads (starts with {magic[:8]!r}; expected TIFF/SVS/NDPI/SCN/"
                     f"BIF, DICOM, or an MRXS/VMS index)")
