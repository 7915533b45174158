"""Test-only: crafted slides written by hand, byte by byte (no library's writer): a TIFF/BigTIFF writer whose
directories may declare anything (counts pointing past the end of a small file), deflate and LZW streams that
inflate far beyond their tile, and a DICOM Part 10 writer."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

BYTE, ASCII, SHORT, LONG, UNDEFINED, LONG8 = 1, 2, 3, 4, 7, 16
SIZES = {BYTE: 1, ASCII: 1, SHORT: 2, LONG: 4, UNDEFINED: 1, LONG8: 8}
WIDTH, LENGTH, BITS, COMPRESSION, PHOTOMETRIC, DESCRIPTION = 256, 257, 258, 259, 262, 270
STRIP_OFFSETS, SAMPLES, ROWS, STRIP_COUNTS, X_RES, Y_RES, PLANAR, RES_UNIT = 273, 277, 278, 279, 282, 283, 284, 296
TILE_WIDTH, TILE_LENGTH, TILE_OFFSETS, TILE_COUNTS = 322, 323, 324, 325
RATIONAL = 5


class RawTiff:
    """A little-endian TIFF (or BigTIFF) assembled from blobs and directories; a value is bytes (stored inline or
    appended) or, for a value that does not fit inline, an int: the offset the entry claims, true or not."""

    def __init__(self, *, bigtiff: bool = False) -> None:
        self.big = bigtiff
        self.buf = bytearray(b"II+\x00" + struct.pack("<HHQ", 8, 0, 0) if bigtiff else b"II*\x00\x00\x00\x00\x00")

    def blob(self, data: bytes) -> int:
        if len(self.buf) % 2:
            self.buf += b"\x00"
        at = len(self.buf)
        self.buf += data
        return at

    def directory(self, entries: list[tuple[int, int, int, bytes | int]], *, first: bool = True) -> int:
        inline = 8 if self.big else 4
        rows = []
        for tag, typ, count, value in sorted(entries):
            if isinstance(value, int) and count * SIZES.get(typ, 1) > inline:
                field = struct.pack("<Q" if self.big else "<I", value)
            else:
                data = value if isinstance(value, bytes) else struct.pack("<Q" if self.big else "<I", value)
                field = data.ljust(inline, b"\x00") if len(data) <= inline else struct.pack(
                    "<Q" if self.big else "<I", self.blob(data))
            rows.append(struct.pack("<HHQ" if self.big else "<HHI", tag, typ, count) + field)
        table = struct.pack("<Q" if self.big else "<H", len(rows)) + b"".join(rows) + bytes(inline)
        at = self.blob(table)
        if first:
            struct.pack_into("<Q" if self.big else "<I", self.buf, 8 if self.big else 4, at)
        return at

    def save(self, path: Path) -> Path:
        path.write_bytes(bytes(self.buf))
        return path


def short(v: int) -> bytes:
    return struct.pack("<H", v)


def long(v: int) -> bytes:
    return struct.pack("<I", v)


def tiled_rgb(path: Path, width: int, height: int, tile: int, *, compression: int = 8, stream: bytes = b"",
              count: int | None = None, bigtiff: bool = False, table_at: int | None = None) -> Path:
    """An RGB tiled TIFF of width x height px in tile x tile px tiles, calibrated at 0.5 µm/px. Every tile entry
    points at `stream` (stored once); or, with `table_at`, the offset and byte-count tables are claimed at that
    offset with `count` entries (default: the tiles the dimensions make) and never written: the file stays small."""
    t = RawTiff(bigtiff=bigtiff)
    n = -(-width // tile) * -(-height // tile)
    count = n if count is None else count
    off_type = LONG8 if bigtiff else LONG
    fmt = "<Q" if bigtiff else "<I"
    if table_at is None:
        data_at = t.blob(stream)
        offsets = struct.pack(f"<{count}{fmt[1]}", *([data_at] * count))
        counts = struct.pack(f"<{count}{fmt[1]}", *([len(stream)] * count))
    else:
        offsets = counts = table_at
    t.directory([
        (WIDTH, LONG, 1, long(width)), (LENGTH, LONG, 1, long(height)), (BITS, SHORT, 3, short(8) * 3),
        (COMPRESSION, SHORT, 1, short(compression)), (PHOTOMETRIC, SHORT, 1, short(2)),
        (SAMPLES, SHORT, 1, short(3)), (PLANAR, SHORT, 1, short(1)),
        (X_RES, RATIONAL, 1, struct.pack("<II", 20000, 1)), (Y_RES, RATIONAL, 1, struct.pack("<II", 20000, 1)),
        (RES_UNIT, SHORT, 1, short(3)), (TILE_WIDTH, SHORT, 1, short(tile)), (TILE_LENGTH, SHORT, 1, short(tile)),
        (TILE_OFFSETS, off_type, count, offsets), (TILE_COUNTS, off_type, count, counts),
    ])
    return t.save(path)


def deflate_bomb(inflated: int) -> bytes:
    """A valid zlib stream of `inflated` zero bytes (a whole number of MiB) in about inflated / 1000 bytes: one
    MiB of zeros deflated and fully flushed (self-contained, byte-aligned) is repeated, then an empty final block and
    the Adler-32 of that many zeros (a = 1, b = n mod 65521)."""
    mib = 1 << 20
    assert inflated % mib == 0
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = c.compress(bytes(mib)) + c.flush(zlib.Z_FULL_FLUSH)
    adler = ((inflated % 65521) << 16) | 1
    return b"\x78\xda" + chunk * (inflated // mib) + b"\x03\x00" + struct.pack(">I", adler)


def lzw_bomb(inflated: int) -> bytes:
    """A TIFF LZW stream (MSB-first codes, 9-12 bits, early change) of at least `inflated` zero bytes: a run of
    zeros codes as 0, 258, 259, ... (code c stands for c - 256 zeros), a Clear code before the table fills."""
    clear, eoi = 256, 257
    bits, nbits, out = 0, 0, bytearray()

    def emit(code: int, width: int) -> None:
        nonlocal bits, nbits
        bits = (bits << width) | code
        nbits += width
        while nbits >= 8:
            nbits -= 8
            out.append((bits >> nbits) & 0xFF)
        bits &= (1 << nbits) - 1

    done = 0
    while done < inflated:
        emit(clear, 9 if not out else 12)
        width, next_code = 9, 258
        emit(0, width)
        done += 1
        while next_code < 4093 and done < inflated:
            emit(next_code, width)  # the entry added after the previous code: one zero longer
            done += next_code - 256
            next_code += 1
            if next_code + 1 >= (1 << width) and width < 12:  # early change: widen one code early
                width += 1
        if done >= inflated:
            emit(eoi, width)
    if nbits:
        out.append((bits << (8 - nbits)) & 0xFF)
    return bytes(out)


def dicom(path: Path, *, frames: int, rows: int, columns: int, total: tuple[int, int], samples: int = 3,
          syntax: str = "1.2.840.10008.1.2.4.50", pixel_items: int = 1) -> Path:
    """A DICOM VL Whole Slide Microscopy instance (explicit VR little endian elements) declaring `frames` frames of
    columns x rows px in a total pixel matrix `total` (columns, rows); its encapsulated pixel data holds an empty
    basic offset table and `pixel_items` tiny items, whatever `frames` says: a few hundred bytes on disk."""
    def el(group: int, elem: int, vr: bytes, value: bytes) -> bytes:
        if len(value) % 2:
            value += b"\x00" if vr in (b"UI", b"OB") else b" "
        if vr in (b"OB", b"OW", b"SQ", b"UN", b"UT"):
            return struct.pack("<HH", group, elem) + vr + b"\x00\x00" + struct.pack("<I", len(value)) + value
        return struct.pack("<HH", group, elem) + vr + struct.pack("<H", len(value)) + value

    wsi = b"1.2.840.10008.5.1.4.1.1.77.1.6"
    meta_body = (el(0x0002, 0x0001, b"OB", b"\x00\x01") + el(0x0002, 0x0002, b"UI", wsi)
                 + el(0x0002, 0x0003, b"UI", b"1.2.3.4") + el(0x0002, 0x0010, b"UI", syntax.encode()))
    meta = el(0x0002, 0x0000, b"UL", struct.pack("<I", len(meta_body))) + meta_body
    body = (el(0x0008, 0x0008, b"CS", b"ORIGINAL\\PRIMARY\\VOLUME\\NONE") + el(0x0008, 0x0016, b"UI", wsi)
            + el(0x0028, 0x0002, b"US", struct.pack("<H", samples))
            + el(0x0028, 0x0004, b"CS", b"YBR_FULL_422" if samples == 3 else b"MONOCHROME2")
            + el(0x0028, 0x0008, b"IS", str(frames).encode()) + el(0x0028, 0x0010, b"US", struct.pack("<H", rows))
            + el(0x0028, 0x0011, b"US", struct.pack("<H", columns))
            + el(0x0028, 0x0100, b"US", struct.pack("<H", 8))
            + el(0x0048, 0x0006, b"UL", struct.pack("<I", total[0]))
            + el(0x0048, 0x0007, b"UL", struct.pack("<I", total[1])))
    pixels = (struct.pack("<HH", 0x7FE0, 0x0010) + b"OB\x00\x00" + struct.pack("<I", 0xFFFFFFFF)
              + struct.pack("<HHI", 0xFFFE, 0xE000, 0)
              + b"".join(struct.pack("<HHI", 0xFFFE, 0xE000, 4) + b"\xff\xd8\xff\xd9" for _ in range(pixel_items))
              + struct.pack("<HHI", 0xFFFE, 0xE0DD, 0))
    path.write_bytes(bytes(128) + b"DICM" + meta + body + pixels)
    return path


def honest_tile(tile: int, compression: str) -> bytes:
    """One tile x tile RGB tile, mid-grey with stripes, compressed as a TIFF tile of that codec would be."""
    import imagecodecs

    img = np.full((tile, tile, 3), 200, np.uint8)
    img[::7] = 120
    if compression == "deflate":
        return zlib.compress(img.tobytes())
    if compression == "lzw":
        return imagecodecs.lzw_encode(img.tobytes())
    raise ValueError(compression)
