"""The pixel size a JPEG or JPEG 2000 stream inside a tile declares, read from its header without decoding it."""
from __future__ import annotations

import struct
from typing import NamedTuple

#: TIFF Compression values whose tile data is a JPEG stream (7: JPEG, 34892: lossy JPEG as DNG writes it).
JPEG_COMPRESSIONS = frozenset({7, 34892})
#: TIFF Compression values whose tile data is a JPEG 2000 codestream or JP2 file (34712; Aperio's 33003-33005).
JPEG2000_COMPRESSIONS = frozenset({34712, 33003, 33004, 33005})

# JPEG start-of-frame markers (baseline, extended, progressive, lossless, ...): C0-CF but DHT, JPG and DAC.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers that stand alone (no length field): TEM, RST0-7, SOI.
_STANDALONE = frozenset({0x01, 0xD8, *range(0xD0, 0xD8)})
# A header this far into a stream without a frame header is not one a decoder would accept either.
_MAX_SEGMENTS = 512


class Declared(NamedTuple):
    """What a compressed stream says it decodes to."""

    codec: str
    """'JPEG' or 'JPEG 2000'."""
    width: int
    """Pixels across."""
    height: int
    """Pixels down (0 when a JPEG leaves it to a DNL marker)."""
    components: int
    """Samples per pixel."""


def declared_size(compression: int, data: bytes) -> Declared | None:
    """The size the stream `data` (one tile or strip, TIFF compression `compression`) declares; None when the codec
    is not one this reads or the header cannot be found (the decoder then reports the damage itself)."""
    try:
        if compression in JPEG_COMPRESSIONS:
            return _jpeg(data)
        if compression in JPEG2000_COMPRESSIONS:
            return _jpeg2000(data)
    except struct.error:  # a header cut short: the decoder will say so
        return None
    return None


def _jpeg(data: bytes) -> Declared | None:
    """The frame header (SOFn) of a JPEG stream: precision, height, width, components."""
    if data[:2] != b"\xff\xd8":
        return None
    pos = 2
    for _ in range(_MAX_SEGMENTS):
        while pos < len(data) and data[pos] == 0xFF:  # fill bytes before a marker
            pos += 1
        if pos >= len(data) or data[pos - 1] != 0xFF:
            return None
        marker = data[pos]
        pos += 1
        if marker in _STANDALONE:
            continue
        if marker in (0xD9, 0xDA):  # end of image, or scan data before any frame header
            return None
        (length,) = struct.unpack_from(">H", data, pos)
        if marker in _SOF:
            height, width, components = struct.unpack_from(">HHB", data, pos + 3)
            return Declared("JPEG", width, height, components)
        pos += length
    return None


def _jpeg2000(data: bytes) -> Declared | None:
    """The SIZ segment of a JPEG 2000 codestream, bare (Aperio) or inside a JP2 file's contiguous-codestream box."""
    if data[:4] == b"\x00\x00\x00\x0c" and data[4:8] == b"jP  ":
        pos = 0
        for _ in range(_MAX_SEGMENTS):
            size, kind = struct.unpack_from(">I4s", data, pos)
            head = 8
            if size == 1:
                (size,) = struct.unpack_from(">Q", data, pos + 8)
                head = 16
            if kind == b"jp2c":
                return _siz(data, pos + head)
            if size < head:  # 0: the box runs to the end of the file, and it is not the codestream
                return None
            pos += size
        return None
    return _siz(data, 0)


def _siz(data: bytes, pos: int) -> Declared | None:
    if data[pos : pos + 4] != b"\xff\x4f\xff\x51":  # SOC, then SIZ (the codestream's first segment)
        return None
    xsiz, ysiz, xosiz, yosiz = struct.unpack_from(">IIII", data, pos + 8)
    (components,) = struct.unpack_from(">H", data, pos + 40)
    return Declared("JPEG 2000", max(0, xsiz - xosiz), max(0, ysiz - yosiz), components)
