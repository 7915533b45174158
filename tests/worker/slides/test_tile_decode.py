"""Tiles decoded into exactly their declared bytes: every codec's output bounded as the module says, compression
bombs in honest dimensions (deflate, LZW) and short tiles refused in one line naming the tile, never analysed and
never handed to OpenSlide; honest tiles and strips of every codec read exactly as tifffile reads them."""
from __future__ import annotations

import sys
from pathlib import Path

import imagecodecs
import numpy as np
import pytest
import tifffile

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crafted import deflate_bomb, honest_tile, lzw_bomb, tiled_rgb  # noqa: E402

from worker.slides import SlideError, SlideLimitError, detect, open_slide  # noqa: E402
from worker.slides.tile_decode import BOUNDED_CODECS, decode_bounded  # noqa: E402

ENCODERS = {"lzw": imagecodecs.lzw_encode, "deflate": imagecodecs.zlib_encode,
            "packbits": imagecodecs.packbits_encode, "zstd": imagecodecs.zstd_encode}


@pytest.mark.parametrize("codec", sorted(set(BOUNDED_CODECS.values())))
def test_each_codec_writes_at_most_its_output_buffer(codec):
    # The module relies on this: given out=n, a decoder returns at most n bytes or raises, whatever the stream holds.
    stream = ENCODERS[codec](bytes(range(256)) * 400)  # 102,400 bytes
    for n in (1000, 102_400, 200_000):
        try:
            got = getattr(imagecodecs, f"{codec}_decode")(stream, out=n)
        except Exception as exc:  # noqa: BLE001
            assert n < 102_400, exc
            continue
        assert len(got) == min(n, 102_400)


@pytest.mark.parametrize("compression, stream", [(8, deflate_bomb(64 << 20)), (5, lzw_bomb(64 << 20)),
                                                 (50000, imagecodecs.zstd_encode(bytes(8 << 20))),
                                                 (32773, imagecodecs.packbits_encode(bytes(1 << 20)))],
                         ids=["deflate", "lzw", "zstd", "packbits"])
def test_a_stream_holding_more_than_its_tile_is_refused_as_a_bomb(compression, stream):
    with pytest.raises(SlideLimitError) as info:
        decode_bounded("x.tif", "level 0 tile (1, 2)", compression, stream, 786_432, shape="512 × 512 px × 3 samples")
    assert str(info.value) == ("x.tif: level 0 tile (1, 2) decodes to more than the 786,432 bytes its 512 × 512 px × "
                               "3 samples declare (a decompression bomb or a damaged file)")


def test_a_stream_holding_fewer_bytes_is_refused_not_padded():
    with pytest.raises(SlideLimitError, match=r"tile \(0, 0\) decodes to 1,000 bytes, fewer than the 786,432 bytes"):
        decode_bounded("x.tif", "level 0 tile (0, 0)", 8, imagecodecs.zlib_encode(bytes(1000)), 786_432)
    with pytest.raises(SlideError, match=r"tile \(0, 0\) does not decode"):
        decode_bounded("x.tif", "level 0 tile (0, 0)", 8, b"not deflate at all", 786_432)
    assert decode_bounded("x.tif", "strip 9", 8, imagecodecs.zlib_encode(bytes(600)), 1000, min_bytes=500) == bytes(600)


@pytest.mark.parametrize("compression, stream", [(8, deflate_bomb(1 << 30)), (5, lzw_bomb(256 << 20))],
                         ids=["deflate-1GiB-tiles", "lzw-256MiB-tiles"])
def test_a_compression_bomb_in_honest_dimensions_is_refused_and_not_handed_on(tmp_path, monkeypatch, compression,
                                                                                stream):
    p = tiled_rgb(tmp_path / "bomb.tif", 2048, 2048, 512, compression=compression, stream=stream)
    assert p.stat().st_size < 1_100_000
    handed = []
    monkeypatch.setattr(detect, "OpenSlideSlide", lambda *a, **k: handed.append(a))
    monkeypatch.setattr(detect, "detect_format", lambda *a, **k: handed.append(a))
    with pytest.raises(SlideLimitError) as info:
        open_slide(p)
    assert str(info.value) == (f"{p}: level 0 tile (0, 0) decodes to more than the 786,432 bytes its 512 × 512 px × "
                               f"3 samples declare (a decompression bomb or a damaged file)")
    assert handed == []


def test_a_jpeg_tile_declaring_fewer_pixels_than_its_tile_is_refused(tmp_path):
    small = imagecodecs.jpeg8_encode(np.full((256, 256, 3), 200, np.uint8))
    p = tiled_rgb(tmp_path / "small.tif", 1024, 1024, 512, compression=7, stream=small)
    with pytest.raises(SlideLimitError) as info:
        open_slide(p)
    assert str(info.value) == (f"{p}: level 0 tile (0, 0): its JPEG data declares 256 × 256 px, fewer than the 512 "
                               f"× 512 px the file declares for it (a decompression bomb or a damaged file)")


def _image() -> np.ndarray:
    img = np.random.default_rng(5).integers(0, 255, (700, 900, 3), dtype=np.uint8)
    img[100:300] = 230
    return img


CODECS = [("none", {}), ("lzw", {}), ("zlib", {}), ("zlib", {"predictor": True}), ("lzw", {"predictor": True}),
          ("packbits", {}), ("zstd", {}), ("jpeg", {})]


@pytest.mark.parametrize("layout", ["tile", "strips"])
@pytest.mark.parametrize("compression, extra", CODECS, ids=[f"{c}{'-predictor' if e else ''}" for c, e in CODECS])
def test_honest_tiles_and_strips_read_exactly_as_tifffile_reads_them(tmp_path, compression, extra, layout):
    p = tmp_path / "ok.tif"
    shape = {"tile": (256, 256)} if layout == "tile" else {"rowsperstrip": 64}  # 700 rows: a short last strip
    tifffile.imwrite(p, _image(), photometric="rgb", compression=None if compression == "none" else compression,
                     metadata=None, resolution=(20000, 20000), resolutionunit="CENTIMETER", **shape, **extra)
    with open_slide(p) as s, tifffile.TiffFile(p) as tif:
        np.testing.assert_array_equal(s.read_region(s.levels[0], 0, 0, 900, 700), tif.pages[0].asarray())


def test_a_codec_without_a_bounded_decoder_is_refused_at_open(tmp_path):
    p = tmp_path / "webp.tif"
    tifffile.imwrite(p, _image()[:256, :256], photometric="rgb", compression="webp", tile=(256, 256), metadata=None,
                     resolution=(20000, 20000), resolutionunit="CENTIMETER")
    with pytest.raises(SlideError) as info:
        open_slide(p)
    assert str(info.value) == (f"{p}: level 0: compression 50001 (WebP) is not one this worker decodes with a bound "
                               f"on its output (none, LZW, deflate, PackBits, ZSTD, JPEG, JPEG 2000)")


def test_the_crafted_honest_tiles_are_real_codec_output():
    # The crafted writer's honest tiles are real codec output (the bombs' controls).
    for codec in ("deflate", "lzw"):
        stream = honest_tile(512, codec)
        assert len(decode_bounded("x.tif", "t", 8 if codec == "deflate" else 5, stream, 512 * 512 * 3)) == 786_432
