"""The size a JPEG or JPEG 2000 stream declares, read from its header: real encoders' streams, real slides' tiles,
and nothing (not an exception) for streams it cannot read."""
from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import imagecodecs
import numpy as np
import pytest
import tifffile

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared_slides import REAL, needs_real_slides  # noqa: E402

from worker.slides.codec_headers import Declared, declared_size  # noqa: E402

JPEG, J2K = 7, 33005


def _img(h: int, w: int, c: int = 3) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 255, (h, w, c) if c > 1 else (h, w), dtype=np.uint8)


@pytest.mark.parametrize("h, w, c", [(240, 240, 3), (512, 300, 3), (17, 1000, 1), (8, 3968, 3)])
def test_jpeg_frame_header_gives_width_height_and_components(h, w, c):
    data = imagecodecs.jpeg8_encode(_img(h, w, c), level=80)
    assert declared_size(JPEG, data) == Declared("JPEG", w, h, c)
    assert declared_size(34892, data) == Declared("JPEG", w, h, c)


def test_a_progressive_jpeg_with_app_segments_before_the_frame_is_read_too():
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(_img(300, 200)).save(buf, "JPEG", progressive=True, icc_profile=b"\0" * 3000, dpi=(300, 300))
    assert declared_size(JPEG, buf.getvalue()) == Declared("JPEG", 200, 300, 3)


@pytest.mark.parametrize("codeformat", ["jp2", "j2k"])  # a JP2 file and a bare codestream
def test_jpeg2000_siz_gives_the_image_size(codeformat):
    data = imagecodecs.jpeg2k_encode(_img(96, 160), level=30, codecformat=codeformat)
    assert declared_size(J2K, data) == Declared("JPEG 2000", 160, 96, 3)
    assert declared_size(34712, data) == Declared("JPEG 2000", 160, 96, 3)


@pytest.mark.parametrize("compression, data", [
    (JPEG, b""), (JPEG, b"\xff\xd8"), (JPEG, b"\xff\xd8\xff\xc0\x00"), (JPEG, b"not a jpeg at all"),
    (JPEG, b"\xff\xd8\xff\xda\x00\x08" + bytes(8)),  # scan data before any frame header
    (J2K, b"\xff\x4f\xff\x51\x00"), (J2K, b"\x00\x00\x00\x0cjP  \r\n\x87\n" + struct.pack(">I4s", 0, b"ftyp")),
    (5, b"LZW data"), (8, b"deflate data"),  # codecs whose streams declare no size: nothing to check
])
def test_unreadable_or_sizeless_streams_give_none(compression, data):
    assert declared_size(compression, data) is None


def test_a_bomb_stream_declares_what_it_would_allocate():
    # A SOF saying 65535 x 65535 px, nothing after it: the header alone says what a decoder would allocate.
    sof = b"\xff\xd8\xff\xc0" + struct.pack(">HBHHB", 17, 8, 65535, 65535, 3) + bytes(9)
    assert declared_size(JPEG, sof) == Declared("JPEG", 65535, 65535, 3)


@needs_real_slides
@pytest.mark.parametrize("name, compression, tile", [
    ("CMU-1-Small-Region.svs", JPEG, (240, 240)),
    ("tcga-cr-7395-01a-01-ts1.svs", 33005, (256, 256)),
    ("OS-2-ndpi.ome.tif", JPEG, (512, 512)),
])
def test_real_slides_tiles_declare_their_tiles_size(name, compression, tile):
    with tifffile.TiffFile(REAL / name) as tif:
        page = tif.pages[0]
        assert page.compression == compression
        fd = os.open(REAL / name, os.O_RDONLY)
        try:
            data = os.pread(fd, page.databytecounts[0], page.dataoffsets[0])
        finally:
            os.close(fd)
    d = declared_size(compression, data)
    assert d is not None and (d.width, d.height) == (page.tilewidth, page.tilelength) == tile
