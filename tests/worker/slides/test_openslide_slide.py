"""The OpenSlide reader under its limits: a valid 10^12 px TIFF that OpenSlide opens is refused from OpenSlide's
level dimensions before a region is read; tiles bounded by side, Hamamatsu's restart-interval rows by bytes."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import openslide
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared_slides import REAL, needs_real_slides  # noqa: E402
from slide_bombs import forbid_decoding, replicated_tile_bomb  # noqa: E402
from test_limits import LIFTED  # noqa: E402

from worker.slides import OpenSlideSlide, SlideLimitError  # noqa: E402

NDPI = "test3-TRITC-2-560.ndpi"


def test_openslide_opens_the_bomb_and_the_reader_refuses_it_before_reading_a_pixel(tmp_path, monkeypatch):
    bomb = replicated_tile_bomb(tmp_path / "bomb.tif")
    osr = openslide.OpenSlide(str(bomb))  # OpenSlide itself takes it: a valid 10^6 x 10^6 px generic TIFF
    try:
        assert osr.dimensions == (1_000_000, 1_000_000)
    finally:
        osr.close()
    calls = forbid_decoding(monkeypatch)
    with pytest.raises(SlideLimitError) as info:
        OpenSlideSlide(bomb)
    assert str(info.value) == (f"{bomb}: directory 0 declares 1000000 × 1000000 px (1.0e12 px) over the limit of "
                               f"4.0e10 px (SLIDE_MAX_PIXELS)")
    assert calls == []


def test_without_the_limit_openslide_would_decode_it(tmp_path, monkeypatch):
    bomb = replicated_tile_bomb(tmp_path / "bomb.tif")
    calls = forbid_decoding(monkeypatch)
    with pytest.raises(Exception, match="pixels were decoded"):  # (the reader wraps it as OpenSlide's failure)
        OpenSlideSlide(bomb, mpp_um=0.5, limits=LIFTED)
    assert calls == ["Slide._sample_raw"]


def test_openslide_tiles_are_bounded_by_side_and_by_their_argb_bytes(tmp_path, monkeypatch):
    bomb = replicated_tile_bomb(tmp_path / "bomb.tif", 8192, 8192)  # 4096 px tiles, as OpenSlide reports them
    with pytest.raises(SlideLimitError) as info:
        OpenSlideSlide(bomb, limits=replace(LIFTED, max_tile_side_px=4095))
    assert str(info.value) == (f"{bomb}: directory 0 declares tiles of 4096 × 4096 px over the limit of 4095 px per "
                               f"side (SLIDE_MAX_TILE_PX)")
    with pytest.raises(SlideLimitError) as info:
        OpenSlideSlide(bomb, limits=replace(LIFTED, max_decoded_bytes=4096 * 4096 * 4 - 1))
    assert "tiles of 4096 × 4096 px × 4 samples × 1 byte (64 MiB decoded each)" in str(info.value)
    with OpenSlideSlide(bomb, mpp_um=0.5, limits=replace(LIFTED, max_tile_side_px=4096,
                                                         max_decoded_bytes=4096 * 4096 * 4)) as s:
        assert (s.width, s.height) == (8192, 8192)


@needs_real_slides
def test_ndpi_restart_interval_rows_are_bounded_by_bytes_not_by_their_width(monkeypatch):
    # The sample's level 0 is decoded in rows of 3968 x 8 px: a row as wide as the level.
    with OpenSlideSlide(REAL / NDPI, limits=replace(LIFTED, max_tile_side_px=64)) as s:
        assert (s.levels[0].tile_width, s.levels[0].tile_height) == (3968, 8)
    calls = forbid_decoding(monkeypatch)
    with pytest.raises(SlideLimitError) as info:
        OpenSlideSlide(REAL / NDPI, limits=replace(LIFTED, max_decoded_bytes=3968 * 8 * 4 - 1))
    assert "level 0 declares tiles of 3968 × 8 px × 4 samples × 1 byte (124 KiB decoded each)" in str(info.value)
    with pytest.raises(SlideLimitError, match=r"declares 7 pyramid levels over the limit of 6 \(SLIDE_MAX_LEVELS\)"):
        OpenSlideSlide(REAL / NDPI, limits=replace(LIFTED, max_levels=6))
    with pytest.raises(SlideLimitError, match=r"directory 0 declares 3968 × 4864 px \(1.9e7 px\)"):
        OpenSlideSlide(REAL / NDPI, limits=replace(LIFTED, max_pixels=3968 * 4864 - 1))
    assert calls == []


@needs_real_slides
def test_other_vendors_tiles_keep_the_side_limit():
    with pytest.raises(SlideLimitError, match=r"tiles of 240 × 240 px over the limit of 239 px per side"):
        OpenSlideSlide(REAL / "CMU-1-Small-Region.svs", limits=replace(LIFTED, max_tile_side_px=239))
