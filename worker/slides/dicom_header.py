"""A bounded reader of DICOM headers (Part 10 files), run before pydicom and wsidicom parse a slide's instances.

It walks the data elements (tag, VR, length; sequences and items of defined or undefined length) up to the pixel
data without keeping them, reads only the handful of values the limits need (frames, frame size, samples, bits, the
total pixel matrix, focal planes, optical paths), and holds them to `SlideLimits`: a header declaring 10^7 frames is
refused after reading a few hundred bytes. Encoding per DICOM PS3.5 section 7 (explicit VR little endian for the
file meta group and every encapsulated transfer syntax; implicit VR little endian where the meta group says so).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from worker.slides.errors import SlideError, fail
from worker.slides.limits import SlideLimits

PREAMBLE = 128
IMPLICIT_LE = "1.2.840.10008.1.2"
#: Transfer syntaxes whose data set is not plain little-endian elements: deflated (the header itself would be
#: inflated, unbounded, by pydicom) and the retired big-endian one.
UNREAD_SYNTAXES = {"1.2.840.10008.1.2.1.99": "deflated explicit VR little endian",
                   "1.2.840.10008.1.2.2": "explicit VR big endian (retired)"}
#: VRs whose explicit length field is 4 bytes after 2 reserved ones (PS3.5 table 7.1-1).
LONG_VRS = {b"OB", b"OD", b"OF", b"OL", b"OV", b"OW", b"SQ", b"SV", b"UC", b"UN", b"UR", b"UT", b"UV"}
UNDEFINED = 0xFFFFFFFF
ITEM, ITEM_END, SEQUENCE_END = (0xFFFE, 0xE000), (0xFFFE, 0xE00D), (0xFFFE, 0xE0DD)
PIXEL_DATA_TAGS = {(0x7FE0, 0x0010), (0x7FE0, 0x0008), (0x7FE0, 0x0009)}
#: Nesting of sequences followed (real WSI headers nest 3-4 deep).
MAX_DEPTH = 16

#: The top-level elements read, by tag, with the value representation they have in implicit VR.
WANTED = {(0x0008, 0x0008): ("image_type", "CS"), (0x0028, 0x0008): ("frames", "IS"),
          (0x0028, 0x0010): ("rows", "US"), (0x0028, 0x0011): ("columns", "US"),
          (0x0028, 0x0002): ("samples", "US"), (0x0028, 0x0100): ("bits", "US"),
          (0x0048, 0x0006): ("total_columns", "UL"), (0x0048, 0x0007): ("total_rows", "UL"),
          (0x0048, 0x0303): ("focal_planes", "UL"), (0x0048, 0x0302): ("optical_paths", "UL")}


@dataclass
class DicomHeader:
    """What one DICOM instance declares, read within the limits."""

    path: Path
    """The file."""
    transfer_syntax: str = ""
    """(0002,0010) TransferSyntaxUID."""
    header_bytes: int = 0
    """Bytes before the pixel data (what max_header_bytes bounds)."""
    values: dict[str, object] = field(default_factory=dict)
    """The WANTED values found (ints, or text for ImageType)."""

    def get(self, name: str, default: int = 0) -> int:
        value = self.values.get(name, default)
        return value if isinstance(value, int) else default


def read_dicom_header(path: Path | str, limits: SlideLimits, *, already: int = 0,
                      slide: Path | str | None = None) -> DicomHeader:
    """Walk one Part 10 file's elements up to its pixel data within `limits` and check what it declares.
    `already`: header bytes of the series' files read before it (max_header_bytes is for the whole slide);
    `slide`: the folder refusals name first, with "instance NAME" after it (default: the file itself, with "the
    instance"). SlideLimitError or SlideError, one line; memory: one element's header at a time, whatever the
    file declares."""
    path = Path(path)
    h = DicomHeader(path)
    where = f"instance {path.name}" if slide is not None else "the instance"
    shown = slide if slide is not None else path
    with open(path, "rb") as f:
        _Walker(f, path, shown, limits, already, where).run(h)
    image_type = str(h.values.get("image_type", "")).split("\\")
    if len(image_type) >= 3 and image_type[2]:
        where = f"{where} ({image_type[2]})"
    check_declared(h, limits, shown, where)
    return h


class _Walker:
    def __init__(self, f, path: Path, shown: Path | str, limits: SlideLimits, already: int, where: str):
        self.f, self.path, self.shown, self.limits, self.already, self.where = f, path, shown, limits, already, where
        self.size = path.stat().st_size

    def _read(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise fail(self.path, f"truncated DICOM header at byte {self.f.tell():,} (a partial upload or copy?)")
        return data

    def _account(self) -> None:
        self.limits.check_header_bytes(self.shown, f"{self.where}: the DICOM header before its pixel data",
                                       self.already + self.f.tell())

    def run(self, h: DicomHeader) -> None:
        self.f.seek(PREAMBLE)
        if self.f.read(4) != b"DICM":
            raise fail(self.path, "not a DICOM Part 10 file (no DICM at byte 128)")
        meta_end = None
        while True:  # the file meta group: explicit VR little endian, group 0002
            pos = self.f.tell()
            peek = self.f.read(2)
            if len(peek) < 2 or struct.unpack("<H", peek)[0] != 0x0002:
                self.f.seek(pos)
                break
            self.f.seek(pos)
            tag, vr, length = self._element_header(explicit=True)
            value = self._read(length) if length != UNDEFINED and length <= 1024 else None
            if length == UNDEFINED or value is None:
                raise fail(self.path, f"damaged DICOM file meta element {tag[0]:04X},{tag[1]:04X}")
            if tag == (0x0002, 0x0000):
                meta_end = self.f.tell() + struct.unpack("<I", value[:4])[0]
            if tag == (0x0002, 0x0010):
                h.transfer_syntax = value.rstrip(b"\x00 ").decode("ascii", "replace")
            if meta_end is not None and self.f.tell() >= meta_end:
                break
        if h.transfer_syntax in UNREAD_SYNTAXES:
            raise fail(self.path, f"{self.where}: transfer syntax {h.transfer_syntax} "
                                  f"({UNREAD_SYNTAXES[h.transfer_syntax]}) is not read")
        self._elements(h, depth=0, end=None, explicit=h.transfer_syntax != IMPLICIT_LE)
        h.header_bytes = self.f.tell()
        self._account()

    def _element_header(self, *, explicit: bool) -> tuple[tuple[int, int], bytes, int]:
        group, elem = struct.unpack("<HH", self._read(4))
        tag = (group, elem)
        if group == 0xFFFE:  # item and delimiters: no VR, 4-byte length
            return tag, b"", struct.unpack("<I", self._read(4))[0]
        if not explicit:
            return tag, b"", struct.unpack("<I", self._read(4))[0]
        vr = self._read(2)
        if vr in LONG_VRS:
            self._read(2)
            return tag, vr, struct.unpack("<I", self._read(4))[0]
        return tag, vr, struct.unpack("<H", self._read(2))[0]

    def _elements(self, h: DicomHeader | None, *, depth: int, end: int | None, explicit: bool) -> None:
        """Elements until `end` (a defined length), an item delimiter, or (top level) the pixel data."""
        if depth > MAX_DEPTH:
            raise fail(self.path, f"{self.where}: DICOM sequences nested deeper than {MAX_DEPTH} (damaged or crafted)")
        while end is None or self.f.tell() < end:
            pos = self.f.tell()
            if pos >= self.size:
                if depth == 0:
                    return  # no pixel data: the reader will say so
                raise fail(self.path, f"truncated DICOM header at byte {pos:,} (a partial upload or copy?)")
            tag, vr, length = self._element_header(explicit=explicit)
            if tag == ITEM_END:
                return
            if depth == 0 and tag in PIXEL_DATA_TAGS:
                self.f.seek(pos)
                return
            self._account()
            if length == UNDEFINED:
                if vr not in (b"SQ", b"UN", b""):
                    shown = vr.decode("ascii", "replace")
                    raise fail(self.path, f"{self.where}: element {tag[0]:04X},{tag[1]:04X} ({shown}) has an "
                                          f"undefined length (damaged or crafted)")
                # An undefined-length UN holds implicit VR little endian items (PS3.5 section 6.2.2).
                self._sequence(depth + 1, explicit=explicit and vr != b"UN")
                continue
            if self.f.tell() + length > self.size:
                raise fail(self.path, f"truncated: element {tag[0]:04X},{tag[1]:04X} of {self.where} runs past "
                                      f"the end of the file (a partial upload or copy?)")
            if vr == b"SQ":
                self._sequence(depth + 1, end=self.f.tell() + length, explicit=explicit)
                continue
            if h is not None and depth == 0 and tag in WANTED and length <= 256:
                key, ivr = WANTED[tag]
                h.values[key] = _value(vr or ivr.encode(), self._read(length))
            else:
                self.f.seek(length, 1)

    def _sequence(self, depth: int, end: int | None = None, *, explicit: bool) -> None:
        """Items until the sequence delimiter (undefined length) or `end`."""
        while end is None or self.f.tell() < end:
            tag, _vr, length = self._element_header(explicit=False)
            if tag == SEQUENCE_END:
                return
            if tag != ITEM:
                raise fail(self.path, f"{self.where}: expected a sequence item, found {tag[0]:04X},{tag[1]:04X} "
                                      f"(damaged DICOM)")
            self._account()
            if length == UNDEFINED:
                self._elements(None, depth=depth, end=None, explicit=explicit)
            else:
                self._elements(None, depth=depth, end=self.f.tell() + length, explicit=explicit)


def _value(vr: bytes, raw: bytes) -> object:
    if vr == b"US" and len(raw) >= 2:
        return struct.unpack_from("<H", raw)[0]
    if vr == b"UL" and len(raw) >= 4:
        return struct.unpack_from("<I", raw)[0]
    text = raw.rstrip(b"\x00 ").decode("ascii", "replace").strip()
    if vr == b"IS":
        try:
            return int(text.split("\\")[0])
        except ValueError:
            return text
    return text


def check_declared(h: DicomHeader, limits: SlideLimits, path: Path | str, where: str) -> None:
    """Hold one instance's declared frames, frame size and pixel matrix to the limits (SlideLimitError naming
    `path` and `where`, e.g. "instance 5_0 (VOLUME)"), and refuse a frame count its dimensions cannot hold
    (SlideError): every frame is a table entry for pydicom and wsidicom, and each is decoded whole."""
    frames = h.get("frames", 1)
    rows, cols = h.get("rows"), h.get("columns")
    samples, bits = max(1, h.get("samples", 1)), h.get("bits", 8)
    kind = "frames" if frames > 1 else "an image"
    if rows and cols:
        if frames > 1:
            limits.check_tile_sides(path, where, cols, rows, kind="frames")
        limits.check_unit(path, where, cols, rows, samples, -(-bits // 8), kind=kind, check_side=frames <= 1)
    tc, tr = h.get("total_columns"), h.get("total_rows")
    if tc and tr:
        limits.check_level(path, where, tc, tr)
    limits.check_tile_count(path, where, frames, "frames")
    if tc and tr and rows and cols and frames > 1:
        need = -(-tc // cols) * -(-tr // rows) * max(1, h.get("focal_planes", 1)) * max(1, h.get("optical_paths", 1))
        if frames > need:
            raise SlideError(f"{path}: {where} declares {frames:,} frames, more than the {need:,} its {tc} × {tr} "
                             f"px matrix in {cols} × {rows} px frames holds (a damaged or crafted file)")
