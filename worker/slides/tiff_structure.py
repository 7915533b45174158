"""A bounded reader of a TIFF's (or BigTIFF's, or NDPI's) structure, run before any library parses the file.

It walks the directory chain and SubIFDs and reads each entry's tag, type and count, never a value it was not
asked for: what the directories declare (pixels, tile sides, tile or strip counts, the bytes of every value, the
number of directories, loops in the chain, data past the end of the file) is held to `SlideLimits` from the counts
alone, so a header declaring 10^9 tiles is refused after reading a few KiB. Only then are the offset and byte-count
arrays read, in fixed-size chunks, to find where the image data ends. Layouts: TIFF 6.0 (8-byte header, 12-byte
entries), BigTIFF (16-byte header, 20-byte entries, as in libtiff's and tifffile's readers), and Hamamatsu NDPI
(classic entries, an 8-byte next-directory offset and the high 32 bits of each entry's value after the entries, as
tifffile's TiffPage reads it).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from worker.slides.errors import SlideLimitError, fail
from worker.slides.limits import ENV, SlideLimits

MAGIC = (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+")
"""Classic TIFF and BigTIFF, both byte orders."""

#: Bytes per value of each TIFF field type (TIFF 6.0 section 2; BigTIFF adds 16-18). Others are unknown: readers
#: skip such an entry (tifffile logs it, libtiff warns), so it costs nothing.
TYPE_BYTES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8, 13: 4, 16: 8, 17: 8, 18: 8}
_INT_FORMATS = {1: "B", 3: "H", 4: "I", 6: "b", 8: "h", 9: "i", 13: "I", 16: "Q", 17: "q", 18: "Q"}

#: Entries one directory may hold: tifffile refuses more ("suspicious number of tags"); real ones hold 10-40.
MAX_ENTRIES = 4096
#: Nesting of SubIFDs followed (a SubIFD pyramid is one level deep; tifffile reads no deeper for series).
MAX_SUBIFD_DEPTH = 2
#: Bytes read per chunk of an offset or byte-count array, and of a text value's head or tail.
CHUNK = 1 << 20
TEXT_PEEK = 4096

WIDTH, LENGTH, BITS, COMPRESSION, PHOTOMETRIC, DESCRIPTION, MAKE = 256, 257, 258, 259, 262, 270, 271
STRIP_OFFSETS, SAMPLES, ROWS_PER_STRIP, STRIP_COUNTS, PLANAR, SOFTWARE = 273, 277, 278, 279, 284, 305
TILE_WIDTH, TILE_LENGTH, TILE_OFFSETS, TILE_COUNTS, SUBIFDS, XMP = 322, 323, 324, 325, 330, 700
IMAGE_DEPTH, TILE_DEPTH, NDPI_FLAG = 32997, 32998, 65420
TAG_NAMES = {STRIP_OFFSETS: "StripOffsets", STRIP_COUNTS: "StripByteCounts", TILE_OFFSETS: "TileOffsets",
             TILE_COUNTS: "TileByteCounts", DESCRIPTION: "ImageDescription", SUBIFDS: "SubIFDs", XMP: "XMP"}


@dataclass
class Entry:
    """One directory entry as declared: tag, type, count, and where its value is (inline or an offset)."""

    tag: int
    """The tag number."""
    type: int
    """The field type (1-18)."""
    count: int
    """Number of values."""
    value_at: int
    """File offset of the value: inside the entry when it fits there, else the offset the entry holds."""

    @property
    def nbytes(self) -> int:
        return self.count * TYPE_BYTES.get(self.type, 0)


@dataclass
class Directory:
    """One image directory (IFD or SubIFD): what it declares, and what its data occupies."""

    where: str
    """How refusals name it: "directory 0", "directory 0 SubIFD 1"."""
    offset: int
    """Where it starts in the file."""
    entries: dict[int, Entry] = field(default_factory=dict, repr=False)
    """Its entries by tag."""
    width: int = 0
    """ImageWidth (0: not an image)."""
    height: int = 0
    """ImageLength."""
    tile: tuple[int, int] | None = None
    """(TileWidth, TileLength) for a tiled image, else None (strips)."""
    units: int = 0
    """Tiles or strips its dimensions make (planes included)."""
    data_end: int = 0
    """One past the last byte of its image data (0 until the arrays are read)."""


@dataclass
class TiffStructure:
    """What a TIFF-structured file declares, read within the limits."""

    path: Path
    """The file."""
    size: int
    """Its size in bytes."""
    bigtiff: bool
    """BigTIFF (64-bit offsets)."""
    ndpi: bool
    """Hamamatsu NDPI (tag 65420 with Make in the first directory)."""
    directories: list[Directory]
    """Every image directory: the main chain in order, each followed by its SubIFDs."""
    header_bytes: int
    """Bytes of entries and values declared in all (what max_header_bytes bounds)."""
    software: str = ""
    """The first directory's Software, first bytes (flavour detection)."""
    description_head: str = ""
    """The first directory's ImageDescription, first 4 KiB."""
    description_tail: str = ""
    """... and its last 4 KiB."""
    xmp_head: bytes = b""
    """The first directory's XMP packet, first 4 KiB."""

    @property
    def main_chain(self) -> list[Directory]:
        return [d for d in self.directories if "SubIFD" not in d.where]


class _Reader:
    """pread within the file; a read past its end is a truncated file, said in one line."""

    def __init__(self, path: Path, fd: int, size: int):
        self.path, self.fd, self.size = path, fd, size

    def read(self, offset: int, n: int, what: str) -> bytes:
        if offset < 0 or offset + n > self.size:
            raise fail(self.path, f"truncated: the file is {self.size:,} bytes but {what} would end at byte "
                                  f"{offset + n:,} (a partial upload or copy?)")
        data = os.pread(self.fd, n, offset)
        if len(data) != n:
            raise fail(self.path, f"truncated: {what} could not be read whole (a partial upload or copy?)")
        return data


def read_tiff_structure(path: Path | str, limits: SlideLimits) -> TiffStructure:
    """Walk `path`'s directories within `limits`; SlideLimitError for a declared figure over a limit, SlideError
    (one line naming the file) for a damaged or truncated structure. Reads the header, the entry tables, a few short
    values (4 KiB of the description and XMP, the Software tag, SubIFD offsets) and, once every count has passed,
    the offset and byte-count arrays in 1 MiB chunks: memory stays at a few MiB whatever the file declares."""
    path = Path(path)
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        return _Walk(path, _Reader(path, fd, size), limits).run()
    finally:
        os.close(fd)


class _Walk:
    def __init__(self, path: Path, reader: _Reader, limits: SlideLimits):
        self.path, self.r, self.limits = path, reader, limits
        self.seen: set[int] = set()
        self.header_bytes = 0
        self.dirs: list[Directory] = []
        self.ndpi = False

    def run(self) -> TiffStructure:
        size = self.r.size
        head = os.pread(self.r.fd, 16, 0)
        if head[:4] not in MAGIC:
            raise fail(self.path, f"not a TIFF (starts with {head[:8]!r})")
        self.order = "<" if head[:2] == b"II" else ">"
        self.bigtiff = head[2:4] in (b"+\x00", b"\x00+")
        if self.bigtiff:
            if len(head) < 16:
                raise fail(self.path, f"truncated or damaged TIFF ({size} bytes; no BigTIFF header)")
            offsize, zero, first = struct.unpack(self.order + "HHQ", head[4:16])
            if offsize != 8 or zero != 0:
                raise fail(self.path, f"damaged BigTIFF header (offset size {offsize}, expected 8)")
        else:
            (first,) = struct.unpack(self.order + "I", head[4:8]) if len(head) >= 8 else (size + 1,)
        if first >= size or first < 8:
            raise fail(self.path, f"truncated: the file is {size:,} bytes but its first image directory starts at "
                                  f"byte {first:,} (a partial upload or copy?)")
        self._chain(first)
        for d in self.dirs:
            self._data_end(d)
        return self._result()

    # -- the chain ----------------------------------------------------------------------------------------------
    def _chain(self, first: int) -> None:
        offset, index = first, 0
        limit = self.limits.max_tiff_directories
        while offset:
            if index >= limit:
                raise SlideLimitError(f"{self.path}: chains more image directories than the limit of {limit} "
                                      f"({ENV['max_tiff_directories']})")
            d, offset = self._directory(offset, f"directory {index}")
            self._subifds(d, 1)
            index += 1

    def _subifds(self, parent: Directory, depth: int) -> None:
        e = parent.entries.get(SUBIFDS)
        if e is None or depth > MAX_SUBIFD_DEPTH:
            return
        if e.count > self.limits.max_levels:  # a SubIFD pyramid holds one level per SubIFD
            raise SlideLimitError(f"{self.path}: {parent.where} declares {e.count:,} SubIFDs (reduced levels) over "
                                  f"the limit of {self.limits.max_levels} ({ENV['max_levels']})")
        for k, offset in enumerate(self._ints(e, f"{parent.where} SubIFDs")):
            if offset:
                d, _next = self._directory(offset, f"{parent.where} SubIFD {k}")
                self._subifds(d, depth + 1)

    def _directory(self, offset: int, where: str) -> tuple[Directory, int]:
        if offset in self.seen:
            raise fail(self.path, f"{where} loops back to the directory at byte {offset:,} (a damaged or crafted "
                                  f"file)")
        self.seen.add(offset)
        if offset >= self.r.size:
            raise fail(self.path, f"truncated: the file is {self.r.size:,} bytes but {where} starts at byte "
                                  f"{offset:,} (a partial upload or copy?)")
        nsize, esize = (8, 20) if self.bigtiff else (2, 12)
        (n,) = struct.unpack(self.order + ("Q" if self.bigtiff else "H"), self.r.read(offset, nsize, where))
        if n > MAX_ENTRIES:
            raise fail(self.path, f"{where} declares {n:,} entries (at most {MAX_ENTRIES} are read; a damaged or "
                                  f"crafted file)")
        self._count(n * esize, f"{where}: {n} entries")
        table = self.r.read(offset + nsize, n * esize, f"{where}'s entries")
        fmt = self.order + ("HHQ8s" if self.bigtiff else "HHI4s")
        parsed = [struct.unpack_from(fmt, table, i * esize) for i in range(n)]
        if not self.dirs and not self.bigtiff and self.order == "<":
            # NDPI is told by its first directory (tifffile's TiffPage.is_ndpi: tag 65420 and Make).
            self.ndpi = {NDPI_FLAG, MAKE} <= {p[0] for p in parsed}
        high = b""
        if self.ndpi:  # after the entries: the 8-byte next offset, then the high 32 bits of each entry's value
            high = self.r.read(offset + nsize + n * esize + 8, 4 * n, f"{where}'s NDPI offset extension")
        d = Directory(where, offset)
        inline = 8 if self.bigtiff else 4
        for i, (tag, typ, count, raw) in enumerate(parsed):
            e = Entry(tag, typ, count, 0)
            if e.nbytes <= inline:
                e.value_at = offset + nsize + i * esize + (12 if self.bigtiff else 8)
            else:
                (e.value_at,) = struct.unpack(self.order + ("Q" if self.bigtiff else "I"), raw)
                if high:
                    e.value_at |= struct.unpack_from(self.order + "I", high, 4 * i)[0] << 32
            d.entries.setdefault(tag, e)
        next_size = 8 if self.bigtiff or self.ndpi else 4
        (next_offset,) = struct.unpack(self.order + ("Q" if next_size == 8 else "I"),
                                       self.r.read(offset + nsize + n * esize, next_size, f"{where}'s next offset"))
        self._declared(d)
        self.dirs.append(d)
        return d, next_offset

    # -- what one directory declares ------------------------------------------------------------------------------
    def _declared(self, d: Directory) -> None:
        """Hold the directory's declared figures to the limits, from the counts alone (no array is read)."""
        lim, e = self.limits, d.entries
        d.width, d.height = self._int(e.get(WIDTH)), self._int(e.get(LENGTH))
        if d.width and d.height:
            lim.check_level(self.path, d.where, d.width, d.height)
            samples = max(1, self._int(e.get(SAMPLES), 1))
            planes = samples if self._int(e.get(PLANAR), 1) == 2 else 1
            depth = max(1, self._int(e.get(IMAGE_DEPTH), 1))
            if TILE_WIDTH in e or TILE_LENGTH in e:
                tw, th = self._int(e.get(TILE_WIDTH)), self._int(e.get(TILE_LENGTH))
                lim.check_tile_sides(self.path, d.where, tw, th)
                d.tile = (tw, th)
                td = max(1, self._int(e.get(TILE_DEPTH), 1))
                d.units = -(-d.width // tw) * -(-d.height // th) * -(-depth // td) * planes
                how = f"{d.width} × {d.height} px in {tw} × {th} px tiles"
                lim.check_tile_count(self.path, d.where, d.units, "tiles", how)
                arrays = (TILE_OFFSETS, TILE_COUNTS)
            else:
                rows = self._int(e.get(ROWS_PER_STRIP), 2**32 - 1) or d.height
                d.units = -(-d.height // min(rows, d.height)) * depth * planes
                lim.check_tile_count(self.path, d.where, d.units, "strips",
                                     f"{d.height} rows in strips of {min(rows, d.height)}")
                arrays = (STRIP_OFFSETS, STRIP_COUNTS)
            for tag in arrays:
                a = e.get(tag)
                if a is not None and a.count > d.units:
                    raise fail(self.path, f"{d.where} declares {a.count:,} {TAG_NAMES[tag]} for the {d.units:,} "
                                          f"{'tiles' if d.tile else 'strips'} of its {d.width} × {d.height} px "
                                          f"(a damaged or crafted file)")
        for tag, entry in sorted(e.items()):
            if entry.nbytes > (8 if self.bigtiff else 4):
                name = TAG_NAMES.get(tag, f"tag {tag}")
                size = TYPE_BYTES[entry.type]
                self._count(entry.nbytes, f"{d.where} {name}: {entry.count:,} values × {size} byte"
                                          f"{'s' if size > 1 else ''}")
                if tag in TAG_NAMES and entry.value_at + entry.nbytes > self.r.size:
                    raise fail(self.path, f"truncated: the file is {self.r.size:,} bytes but {d.where}'s {name} "
                                          f"would end at byte {entry.value_at + entry.nbytes:,} (a partial upload or "
                                          f"copy?)")

    def _count(self, nbytes: int, what: str) -> None:
        self.header_bytes += nbytes
        self.limits.check_header_bytes(self.path, what, self.header_bytes)

    def _int(self, e: Entry | None, default: int = 0) -> int:
        """The first value of an integer entry (inline or not), or `default`."""
        if e is None or e.count == 0 or e.type not in _INT_FORMATS:
            return default
        size = TYPE_BYTES[e.type]
        (value,) = struct.unpack(self.order + _INT_FORMATS[e.type], self.r.read(e.value_at, size, f"tag {e.tag}"))
        return int(value)

    def _ints(self, e: Entry, what: str) -> list[int]:
        """All values of a short integer entry (SubIFD offsets: at most max_levels of them)."""
        if e.type not in _INT_FORMATS or e.count == 0:
            return []
        fmt = f"{self.order}{e.count}{_INT_FORMATS[e.type]}"
        return list(struct.unpack(fmt, self.r.read(e.value_at, e.nbytes, what)))

    # -- where the data ends --------------------------------------------------------------------------------------
    def _data_end(self, d: Directory) -> None:
        """Read the directory's offset and byte-count arrays in chunks; refuse data that runs past the file's end."""
        import numpy as np

        offs = d.entries.get(TILE_OFFSETS if d.tile else STRIP_OFFSETS)
        counts = d.entries.get(TILE_COUNTS if d.tile else STRIP_COUNTS)
        if offs is None or counts is None or offs.type not in _INT_FORMATS or counts.type not in _INT_FORMATS:
            return
        n = min(offs.count, counts.count)
        dtype_o = np.dtype(self.order + _INT_FORMATS[offs.type])
        dtype_c = np.dtype(self.order + _INT_FORMATS[counts.type])
        step = max(1, CHUNK // 8)
        end = 0
        for start in range(0, n, step):
            k = min(step, n - start)
            o = np.frombuffer(self.r.read(offs.value_at + start * dtype_o.itemsize, k * dtype_o.itemsize,
                                          f"{d.where}'s offsets"), dtype_o).astype(np.uint64)
            c = np.frombuffer(self.r.read(counts.value_at + start * dtype_c.itemsize, k * dtype_c.itemsize,
                                          f"{d.where}'s byte counts"), dtype_c).astype(np.uint64)
            used = c > 0
            if used.any():
                end = max(end, int((o[used] + c[used]).max()))
        d.data_end = end
        if end > self.r.size:
            raise fail(self.path, f"truncated: the file is {self.r.size:,} bytes but its image data runs to {end:,} "
                                  f"bytes (a partial upload or copy?)")

    def _result(self) -> TiffStructure:
        st = TiffStructure(self.path, self.r.size, self.bigtiff, self.ndpi, self.dirs, self.header_bytes)
        first = self.dirs[0].entries if self.dirs else {}
        st.software = self._text(first.get(SOFTWARE), tail=False)[:256]
        st.description_head = self._text(first.get(DESCRIPTION), tail=False)
        st.description_tail = self._text(first.get(DESCRIPTION), tail=True)
        xmp = first.get(XMP)
        if xmp is not None and xmp.nbytes:
            st.xmp_head = self.r.read(xmp.value_at, min(xmp.nbytes, TEXT_PEEK), "XMP")
        return st

    def _text(self, e: Entry | None, *, tail: bool) -> str:
        if e is None or e.type not in (1, 2, 7) or e.count == 0:
            return ""
        n = min(e.count, TEXT_PEEK)
        at = e.value_at + (e.count - n if tail else 0)
        return self.r.read(at, n, f"tag {e.tag}").rstrip(b"\x00").decode("latin-1")


def flavour(st: TiffStructure) -> str | None:
    """The vendor layout OpenSlide must read ("ndpi", "scn", "philips", "bif", "qpi", "trestle"), "svs" or "ome"
    for what tifffile reads as such, or None for a plain TIFF; from the first directory's tags as tifffile's page
    flags (is_ndpi, is_scn, is_philips, is_bif, is_qpi, is_svs, is_ome) and OpenSlide's format detection
    (openslide.org/formats: Trestle's Software starting "MedScan", Ventana's XMP naming iScan) read them."""
    software, head, tail = st.software, st.description_head, st.description_tail.strip()
    first = st.directories[0].entries if st.directories else {}
    if st.ndpi:
        return "ndpi"
    if tail.endswith("</scn>"):
        return "scn"
    if software[:10] == "Philips DP" and tail.endswith("</DataObject>") or (
            software.startswith("Philips") and "DPUfsImport" in head):
        return "philips"
    if XMP in first and ("Ventana" in software or software.startswith("ScanOutputManager")
                         or head in ("Label Image", "Label_Image", "Probability_Image") or b"<iScan" in st.xmp_head):
        return "bif"
    if software.startswith("PerkinElmer-QPI"):
        return "qpi"
    if software.startswith("MedScan") and DESCRIPTION in first:
        return "trestle"
    if head.startswith("Aperio "):
        return "svs"
    if tail.endswith("OME>"):
        return "ome"
    return None
