"""Test-only decompression bombs: small TIFFs whose headers declare huge images, written without their pixels."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import tifffile

IMAGE_WIDTH, IMAGE_LENGTH, TILE_OFFSETS, TILE_BYTE_COUNTS = 256, 257, 324, 325
LONG = 4


def _entries(data: bytes) -> tuple[int, dict[int, int]]:
    """(offset of the first IFD, {tag: offset of its 12-byte entry}) of a little-endian classic TIFF."""
    assert data[:4] == b"II*\x00", "a little-endian classic TIFF"
    (ifd,) = struct.unpack_from("<I", data, 4)
    (n,) = struct.unpack_from("<H", data, ifd)
    return ifd, {struct.unpack_from("<H", data, ifd + 2 + 12 * i)[0]: ifd + 2 + 12 * i for i in range(n)}


def _set_long(data: bytearray, entry: int, tag: int, value: int, count: int = 1) -> None:
    struct.pack_into("<HHII", data, entry, tag, LONG, count, value)


def _small_tiled(path: Path, side: int, tile: int, compression: str, *, texture: bool = True) -> None:
    """A calibrated (0.5 µm/px) RGB TIFF of side x side px in tile x tile tiles, mid-grey (with a little texture)."""
    img = np.full((side, side, 3), 200, np.uint8)
    if texture:
        img[::7] = 120
    tifffile.imwrite(path, img, tile=(tile, tile), compression=compression, photometric="rgb", metadata=None,
                     resolution=(20000, 20000), resolutionunit="CENTIMETER")


def declared_dims_bomb(path: Path, width: int = 1_000_000, height: int = 1_000_000, *, tile: int = 512,
                       compression: str = "jpeg") -> Path:
    """A 1024 x 1024 px tiled TIFF (a few hundred KB) whose ImageWidth/ImageLength are patched to width x height;
    its tile table keeps the four real tiles, so the header lies about what the file holds, as a crafted one would."""
    _small_tiled(path, 1024, tile, compression)
    data = bytearray(path.read_bytes())
    _, entries = _entries(data)
    _set_long(data, entries[IMAGE_WIDTH], IMAGE_WIDTH, width)
    _set_long(data, entries[IMAGE_LENGTH], IMAGE_LENGTH, height)
    path.write_bytes(bytes(data))
    return path


def replicated_tile_bomb(path: Path, width: int = 1_000_000, height: int = 1_000_000, *, tile: int = 4096,
                         compression: str = "jpeg") -> Path:
    """A consistent, valid tiled TIFF of width x height px: every entry of its tile table points at one real
    `tile` x `tile` tile, so each of the width x height / tile^2 tiles decodes (libtiff and OpenSlide accept it),
    in a file of one tile plus 8 bytes per tile."""
    _small_tiled(path, tile, tile, compression, texture=False)
    data = bytearray(path.read_bytes())
    _, entries = _entries(data)
    (offset,) = struct.unpack_from("<I", data, entries[TILE_OFFSETS] + 8)  # one tile: the value is inline
    (count,) = struct.unpack_from("<I", data, entries[TILE_BYTE_COUNTS] + 8)
    n = -(-width // tile) * -(-height // tile)
    offsets_at = len(data)
    data += struct.pack(f"<{n}I", *([offset] * n))
    counts_at = len(data)
    data += struct.pack(f"<{n}I", *([count] * n))
    _set_long(data, entries[TILE_OFFSETS], TILE_OFFSETS, offsets_at, n)
    _set_long(data, entries[TILE_BYTE_COUNTS], TILE_BYTE_COUNTS, counts_at, n)
    _set_long(data, entries[IMAGE_WIDTH], IMAGE_WIDTH, width)
    _set_long(data, entries[IMAGE_LENGTH], IMAGE_LENGTH, height)
    path.write_bytes(bytes(data))
    return path


def oversized_stream_tile(path: Path, stream_side: int = 4096, *, tile: int = 512) -> Path:
    """A 1024 x 1024 px JPEG-tiled TIFF whose first tile holds a valid JPEG of stream_side x stream_side px: the
    TIFF's header is honest, the tile's own header is the bomb."""
    import imagecodecs

    _small_tiled(path, 1024, tile, "jpeg")
    big = imagecodecs.jpeg8_encode(np.full((stream_side, stream_side, 3), 200, np.uint8), level=50)
    data = bytearray(path.read_bytes())
    _, entries = _entries(data)
    (offsets_at,) = struct.unpack_from("<I", data, entries[TILE_OFFSETS] + 8)  # four tiles: an array elsewhere
    (counts_at,) = struct.unpack_from("<I", data, entries[TILE_BYTE_COUNTS] + 8)
    struct.pack_into("<I", data, offsets_at, len(data))
    struct.pack_into("<I", data, counts_at, len(big))
    data += big
    path.write_bytes(bytes(data))
    return path


def forbid_decoding(monkeypatch) -> list[str]:
    """Make every way the readers turn stored bytes into pixels fail loudly (AssertionError) and record its name:
    the tifffile reader's tile, strip and region reads and tifffile's and imagecodecs' decoders (those the
    bounded decode calls included), OpenSlide's and wsidicom's region reads, and the readers' colour sampling.
    Returns the record (empty: nothing was decoded)."""
    import imagecodecs
    import openslide
    import wsidicom

    from worker.slides.dicom_slide import DicomSlide
    from worker.slides.openslide_slide import OpenSlideSlide
    from worker.slides.slide import Slide
    from worker.slides.tiff_slide import TiffSlide

    calls: list[str] = []

    def forbidden(name: str):
        def call(*_args, **_kwargs):
            calls.append(name)
            raise AssertionError(f"{name} was called: pixels were decoded")
        return call

    for owner, name in [(TiffSlide, "read_tile"), (TiffSlide, "_strip"), (TiffSlide, "_read_raw"),
                        (OpenSlideSlide, "_read_raw"), (DicomSlide, "_read_raw"), (Slide, "_sample_raw"),
                        (openslide.OpenSlide, "read_region"), (wsidicom.WsiDicom, "read_region"),
                        (imagecodecs, "jpeg8_decode"), (imagecodecs, "jpeg2k_decode"), (imagecodecs, "zlib_decode"),
                        (imagecodecs, "deflate_decode"), (imagecodecs, "lzw_decode"), (imagecodecs, "packbits_decode"),
                        (imagecodecs, "zstd_decode")]:
        monkeypatch.setattr(owner, name, forbidden(f"{getattr(owner, '__name__', owner)}.{name}"))
    monkeypatch.setattr(tifffile.TiffPage, "decode", property(lambda page: forbidden("TiffPage.decode")()))
    return calls
