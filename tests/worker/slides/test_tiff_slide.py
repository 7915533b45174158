"""The tifffile reader under its limits: a header declaring 10^12 px refused before any pixel is decoded, a tile
whose own JPEG header lies refused before its decode, strips and stored sizes bounded."""
from __future__ import annotations

import struct
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tifffile

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slide_bombs import (  # noqa: E402
    declared_dims_bomb,
    forbid_decoding,
    oversized_stream_tile,
    replicated_tile_bomb,
)
from test_limits import LIFTED  # noqa: E402

from worker.slides import SlideError, SlideLimitError, SlideLimits, TiffSlide, open_slide  # noqa: E402

BOMB_LINE = "directory 0 declares 1000000 × 1000000 px (1.0e12 px) over the limit of 4.0e10 px (SLIDE_MAX_PIXELS)"


@pytest.mark.parametrize("compression", ["jpeg", "zlib"])
@pytest.mark.parametrize("craft", [declared_dims_bomb, replicated_tile_bomb], ids=["patched", "replicated"])
def test_a_10e12_px_header_is_refused_in_one_line_before_any_decode(tmp_path, monkeypatch, craft, compression):
    bomb = craft(tmp_path / "bomb.tif", compression=compression)
    assert bomb.stat().st_size < 1_000_000  # a small file ...
    with tifffile.TiffFile(bomb) as tif:  # ... whose header declares 10^6 x 10^6 px in tiles of a real codec
        page = tif.pages[0]
        assert page.shape == (1_000_000, 1_000_000, 3) and page.is_tiled
        assert page.compression == (7 if compression == "jpeg" else 8)
    calls = forbid_decoding(monkeypatch)
    for opener in (open_slide, TiffSlide):
        with pytest.raises(SlideLimitError) as info:
            opener(bomb)
        assert str(info.value) == f"{bomb}: {BOMB_LINE}"
    assert calls == []


@pytest.mark.parametrize("craft", [declared_dims_bomb, replicated_tile_bomb], ids=["patched", "replicated"])
def test_without_the_limit_the_same_file_would_be_decoded(tmp_path, monkeypatch, craft):
    # The control: the spies do see a decode, so the refusal above is what stopped it.
    bomb = craft(tmp_path / "bomb.tif")
    calls = forbid_decoding(monkeypatch)
    with pytest.raises(AssertionError, match="pixels were decoded"):
        TiffSlide(bomb, limits=LIFTED)
    assert calls


def test_a_tile_whose_jpeg_declares_more_than_its_tile_is_refused_before_its_decode(tmp_path, monkeypatch):
    p = oversized_stream_tile(tmp_path / "tile-bomb.tif", 4096)
    decoded: list[tuple] = []
    real_decode = tifffile.TiffPage.decode

    def spy(page):
        fn = real_decode.__get__(page)

        def decode(data, index, **kw):
            decoded.append((index, len(data)))
            return fn(data, index, **kw)
        return decode

    monkeypatch.setattr(tifffile.TiffPage, "decode", property(spy))
    with pytest.raises(SlideLimitError) as info:
        open_slide(p)
    assert str(info.value) == (f"{p}: level 0 tile (0, 0): its JPEG data declares 4096 × 4096 px, more than the "
                               f"512 × 512 px the file declares for it (a decompression bomb or a damaged file)")
    assert all(i != 0 for i, _ in decoded)  # tile 0 never reached tifffile's decoder
    # The control: without the check tifffile decodes all 4096 x 4096 px, and only then finds they do not fit.
    monkeypatch.setattr(SlideLimits, "check_stream", lambda *a, **k: None)
    with pytest.raises(SlideError, match=r"level 0 tile \(0, 0\) does not decode .*4096, 4096"):
        TiffSlide(p)
    assert any(i == 0 for i, _ in decoded)


def test_honest_tiles_pass_the_stream_check_on_every_path(tmp_path):
    p = tmp_path / "ok.tif"
    img = np.random.default_rng(1).integers(0, 255, (1024, 1024, 3), dtype=np.uint8)
    tifffile.imwrite(p, img, tile=(512, 512), compression="jpeg", photometric="rgb", metadata=None,
                     resolution=(20000, 20000), resolutionunit="CENTIMETER")
    with open_slide(p) as s:
        lv = s.levels[0]
        assert s.read_tile(lv, 1, 1).shape == (512, 512, 3)  # tifffile's decode (checked)
        s.read_region(lv, 0, 0, 512, 512)  # the direct decode into the buffer
        s.read_region(lv, 100, 100, 700, 700)  # shared tiles through the cache


def _stripped(path: Path, width: int, height: int, rows: int, compression: str | None) -> Path:
    """A calibrated one-level RGB TIFF in strips of `rows` rows."""
    data = np.random.default_rng(2).integers(0, 255, (height, width, 3), dtype=np.uint8)
    tifffile.imwrite(path, data, photometric="rgb", rowsperstrip=rows, compression=compression, metadata=None,
                     resolution=(20000, 20000), resolutionunit="CENTIMETER")
    return path


def test_level_0_in_strips_too_large_to_decode_is_refused_naming_the_fix(tmp_path):
    p = _stripped(tmp_path / "strips.tif", 1024, 512, 512, "zlib")
    limit = 1024 * 512 * 3 - 1  # one strip of the whole level, one byte over
    with pytest.raises(SlideLimitError) as info:
        open_slide(p, limits=replace(LIFTED, max_decoded_bytes=limit))
    assert str(info.value) == (f"{p}: level 0 declares strips of 1024 × 512 px × 3 samples × 1 byte (1.5 MiB decoded "
                               f"each) over the limit of 1,572,863 bytes (SLIDE_MAX_DECODED_BYTES); re-save it tiled")
    with open_slide(p, limits=replace(LIFTED, max_decoded_bytes=limit + 1)) as s:
        assert s.levels[0].tile_height == 512


def test_uncompressed_strips_are_read_by_row_so_no_strip_limit_applies(tmp_path):
    p = _stripped(tmp_path / "raw.tif", 1024, 512, 512, None)
    with open_slide(p, limits=replace(LIFTED, max_decoded_bytes=10_000)) as s:
        s.read_region(s.levels[0], 10, 10, 64, 64)


def test_a_reduced_level_whose_strips_are_too_large_is_left_out_not_refused(tmp_path):
    p = tmp_path / "tiled-then-strips.tif"
    data = np.random.default_rng(3).integers(0, 255, (1024, 1024, 3), dtype=np.uint8)
    with tifffile.TiffWriter(p) as tif:
        opts = dict(photometric="rgb", compression="zlib", metadata=None, resolution=(20000, 20000),
                    resolutionunit="CENTIMETER")
        tif.write(data, subifds=1, tile=(128, 128), **opts)
        tif.write(np.ascontiguousarray(data[::4, ::4]), subfiletype=1, rowsperstrip=256, **opts)
    with open_slide(p, limits=replace(LIFTED, max_decoded_bytes=256 * 256 * 3 - 1)) as s:
        assert [(lv.width, lv.height) for lv in s.levels] == [(1024, 1024)]
    with open_slide(p, limits=replace(LIFTED, max_decoded_bytes=256 * 256 * 3)) as s:
        assert [(lv.width, lv.height) for lv in s.levels] == [(1024, 1024), (256, 256)]


def test_a_stored_tile_larger_than_twice_the_decoded_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    p = tmp_path / "fat-tile.tif"
    img = np.full((512, 512, 3), 200, np.uint8)
    tifffile.imwrite(p, img, tile=(256, 256), compression="zlib", photometric="rgb", metadata=None,
                     resolution=(20000, 20000), resolutionunit="CENTIMETER")
    with tifffile.TiffFile(p) as tif:
        counts_at = tif.pages[0].tags["TileByteCounts"].valueoffset
    data = bytearray(p.read_bytes())
    struct.pack_into("<I", data, counts_at, 400_000)  # tile 0 now claims 400,000 stored bytes
    p.write_bytes(bytes(data) + bytes(400_000))  # (and the file is long enough to hold them)
    calls = forbid_decoding(monkeypatch)
    with pytest.raises(SlideLimitError) as info:
        TiffSlide(p, limits=replace(LIFTED, max_decoded_bytes=199_999))
    assert str(info.value) == (f"{p}: level 0 declares a stored tile or strip of 400,000 bytes (390.6 KiB) over the "
                               f"limit of 399,998 bytes, twice SLIDE_MAX_DECODED_BYTES")
    assert calls == []


def test_a_tiff_chaining_too_many_directories_is_refused_before_they_are_parsed(tmp_path, monkeypatch):
    p = tmp_path / "many.tif"
    with tifffile.TiffWriter(p) as tif:
        for _ in range(40):
            tif.write(np.full((16, 16, 3), 200, np.uint8), photometric="rgb", metadata=None)
    parsed = []
    real_series = tifffile.TiffFile.series
    monkeypatch.setattr(tifffile.TiffFile, "series",
                        property(lambda tif: parsed.append(1) or real_series.__get__(tif)))
    with pytest.raises(SlideLimitError) as info:
        TiffSlide(p, limits=replace(LIFTED, max_tiff_directories=39))
    assert str(info.value) == f"{p}: chains more image directories than the limit of 39 (SLIDE_MAX_TIFF_DIRS)"
    assert parsed == []
    with pytest.raises(SlideError) as info:  # admitted at 40: refused for what the directories hold instead
        TiffSlide(p, limits=replace(LIFTED, max_tiff_directories=40))
    assert not isinstance(info.value, SlideLimitError) and "not a brightfield RGB" in str(info.value)
