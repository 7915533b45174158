"""The wsidicom reader under its limits: what the DICOM headers declare (levels, image and tile sizes, samples and
bits) is refused before a frame is decoded, and the real series passes the defaults."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared_slides import REAL, needs_real_slides  # noqa: E402
from slide_bombs import forbid_decoding  # noqa: E402
from test_limits import LIFTED  # noqa: E402

from worker.slides import DicomSlide, SlideLimitError, SlideLimits  # noqa: E402

pytestmark = needs_real_slides
SERIES = REAL / "dicom-bpaec"


@pytest.mark.parametrize("field, value, fragment", [
    ("max_pixels", 3072 * 2304 - 1, "instance 5_0 (VOLUME) declares 3072 × 2304 px (7.1e6 px) over the limit of "
                                    "7.1e6 px (SLIDE_MAX_PIXELS)"),
    ("max_tile_side_px", 1023, "instance 10_0 (VOLUME) declares frames of 1024 × 1024 px over the limit of 1023 px "
                               "per side (SLIDE_MAX_TILE_PX)"),
    ("min_tile_side_px", 1025, "instance 10_0 (VOLUME) declares frames of 1024 × 1024 px under the minimum of 1025 "
                               "px per side (SLIDE_MIN_TILE_PX)"),
    ("max_decoded_bytes", 1024 * 1024 - 1, "instance 10_0 (VOLUME) declares frames of 1024 × 1024 px × 1 sample × "
                                           "1 byte (1 MiB decoded each) over the limit of 1,048,575 bytes "
                                           "(SLIDE_MAX_DECODED_BYTES)"),
    ("max_tiles", 26, "instance 5_0 (VOLUME) declares 27 frames over the limit of 26 (SLIDE_MAX_TILES)"),
    ("max_header_bytes", 1_000_000, "of structure in all, over the limit of 1,000,000 bytes (SLIDE_MAX_HEADER_BYTES)"),
    ("max_levels", 7, "declares 8 pyramid levels over the limit of 7 (SLIDE_MAX_LEVELS)"),
    ("max_file_bytes", 1000, "over the limit of 1,000 bytes (SLIDE_MAX_FILE_BYTES)"),
])
def test_each_limit_is_checked_from_the_headers_before_a_frame_is_decoded(monkeypatch, field, value, fragment):
    calls = forbid_decoding(monkeypatch)
    with pytest.raises(SlideLimitError) as info:
        DicomSlide(SERIES, limits=replace(LIFTED, **{field: value}))
    text = str(info.value)
    assert text.startswith(f"{SERIES}: ") and fragment in text and "\n" not in text
    assert calls == []


def test_the_series_opens_within_the_defaults_and_at_its_own_figures():
    with DicomSlide(SERIES, limits=SlideLimits()) as s:
        assert (s.width, s.height, len(s.levels)) == (3072, 2304, 8)
    exact = replace(LIFTED, max_pixels=3072 * 2304, max_tile_side_px=1024, max_decoded_bytes=1024 * 1024,
                    max_levels=8, max_tiles=27, min_tile_side_px=1024, max_header_bytes=1_754_950)
    with DicomSlide(SERIES, limits=exact):
        pass
