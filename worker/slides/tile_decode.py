"""Decode one stored tile or strip into exactly the bytes its declared size says, never more (bombs refused).

tifffile's own decode hands imagecodecs an output of the declared size: deflate, packbits and zstd then raise on a
stream that holds more, but LZW stops at the buffer's end and returns the truncated tile as if whole, and a stream
holding fewer bytes is padded. Here each codec gets an output buffer of the declared size plus one byte: a result
that fills the extra byte is a bomb (or damage), one short of the declared size is damage, and either is refused in
one line naming the tile. imagecodecs 2026.3.6, measured: `lzw_decode(data, out=n)` returns at most n bytes;
`deflate_decode` (libdeflate, as tifffile uses it), `zlib_decode`, `packbits_decode` and `zstd_decode` with
`out=n` raise when the stream holds more (tests/worker/slides/test_tile_decode.py checks each codec).
"""
from __future__ import annotations

from pathlib import Path

import imagecodecs
import numpy as np

from worker.logfmt import one_line
from worker.slides.errors import SlideLimitError, fail

#: TIFF Compression values decoded here with a bound, and the imagecodecs function for each (1: none).
BOUNDED_CODECS = {5: "lzw", 8: "deflate", 32946: "deflate", 32773: "packbits", 50000: "zstd"}
#: Compression names for refusals (TIFF tag 259 values; tifffile's COMPRESSION enum).
NAMES = {1: "none", 5: "LZW", 7: "JPEG", 8: "Adobe deflate", 32946: "deflate", 32773: "PackBits", 50000: "ZSTD",
         33003: "Aperio JPEG 2000 YCbCr", 33004: "Aperio JPEG 2000", 33005: "Aperio JPEG 2000 RGB",
         34712: "JPEG 2000", 34892: "lossy JPEG", 50001: "WebP", 50002: "JPEG XL"}
# What an imagecodecs decoder says when the stream holds more than the output buffer takes.
_TOO_MUCH = ("INSUFFICIENT_SPACE", "BUF_ERROR", "OUTPUT_TOO_SMALL", "too small")


def decode_bounded(path: Path | str, what: str, compression: int, data: bytes, nbytes: int, *,
                   min_bytes: int | None = None, shape: str = "") -> bytes:
    """The decoded bytes of one tile or strip (`what`: "level 0 tile (3, 4)"), which must be `nbytes` long (a last
    strip may hold from `min_bytes`); SlideLimitError when it decodes to more or fewer ("a decompression bomb or a
    damaged file"), SlideError when it does not decode at all. `shape` ("512 × 512 px × 3 samples") is said in the
    refusal. Memory: one buffer of nbytes + 1."""
    low = nbytes if min_bytes is None else min_bytes
    declared = f"the {nbytes:,} bytes its {shape} declare" if shape else f"the {nbytes:,} bytes it declares"
    if compression == 1:
        out = data[:nbytes]  # stored as is: more stored bytes than declared are not decoded, just not used
    else:
        codec = BOUNDED_CODECS.get(compression)
        if codec is None:
            raise fail(path, f"{what}: compression {compression} ({NAMES.get(compression, 'unknown')}) is not one "
                             f"this worker decodes with a bound on its output")
        try:
            out = getattr(imagecodecs, f"{codec}_decode")(data, out=nbytes + 1)
        except Exception as exc:  # noqa: BLE001 - codec errors come in many types
            text = one_line(exc)
            if any(marker in text for marker in _TOO_MUCH):
                raise SlideLimitError(f"{path}: {what} decodes to more than {declared} (a decompression bomb or a "
                                      f"damaged file)") from None
            raise fail(path, f"{what} does not decode ({text})") from None
    n = len(out)
    if n > nbytes:
        raise SlideLimitError(f"{path}: {what} decodes to more than {declared} (a decompression bomb or a damaged "
                              f"file)")
    if n < low:
        raise SlideLimitError(f"{path}: {what} decodes to {n:,} bytes, fewer than {declared} (a decompression bomb "
                              f"or a damaged file)")
    return bytes(out) if not isinstance(out, bytes) else out


def to_pixels(raw: bytes, rows: int, width: int, samples: int, *, predictor: int = 1,
              fill_order: int = 1) -> np.ndarray:
    """8-bit samples as (rows, width, samples), undoing the horizontal predictor (2) and bit order (FillOrder 2)
    as tifffile does (imagecodecs delta_decode along the row, bitorder_decode)."""
    if fill_order == 2:
        raw = imagecodecs.bitorder_decode(raw)
    need = rows * width * samples
    arr = np.frombuffer(raw, np.uint8, count=need).reshape(rows, width, samples)
    if predictor == 2:
        arr = imagecodecs.delta_decode(arr.copy(), axis=-2)
    return arr
