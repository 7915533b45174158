"""open_slide under the limits: a folder measured whole before it is looked into, a limit refusal never handed on to
OpenSlide, vendor TIFFs' directories checked before OpenSlide parses them, and which limits apply."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tifffile

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared_slides import REAL, needs_real_slides  # noqa: E402
from slide_bombs import forbid_decoding, replicated_tile_bomb  # noqa: E402
from test_limits import LIFTED  # noqa: E402

from worker.slides import SlideError, SlideLimitError, SlideLimits, detect, open_slide, use_limits  # noqa: E402


def _pyramid(path: Path) -> Path:
    data = np.random.default_rng(0).integers(0, 255, (512, 512, 3), dtype=np.uint8)
    opts = dict(photometric="rgb", tile=(256, 256), compression="zlib", metadata=None,
                resolution=(20000, 20000), resolutionunit="CENTIMETER")
    with tifffile.TiffWriter(path) as tif:
        tif.write(data, subifds=1, **opts)
        tif.write(np.ascontiguousarray(data[::2, ::2]), subfiletype=1, **opts)
    return path


def test_a_folder_over_the_size_limit_is_refused_before_it_is_looked_into(tmp_path, monkeypatch):
    case = tmp_path / "case"
    case.mkdir()
    _pyramid(case / "a.tif")
    (case / "extra.dat").write_bytes(b"x" * 5000)
    looked = []
    monkeypatch.setattr(detect, "_in_folder", lambda folder: looked.append(folder))
    total = sum(p.stat().st_size for p in case.iterdir())
    with pytest.raises(SlideLimitError) as info:
        open_slide(case, limits=replace(LIFTED, max_file_bytes=total - 1))
    assert str(info.value).startswith(f"{case}: the slide is {total:,} bytes") and looked == []


def test_a_limit_refusal_is_not_handed_on_to_openslide(tmp_path, monkeypatch):
    bomb = replicated_tile_bomb(tmp_path / "bomb.tif")  # OpenSlide could open this one
    handed = []
    monkeypatch.setattr(detect, "OpenSlideSlide", lambda *a, **k: handed.append(a))
    calls = forbid_decoding(monkeypatch)
    with pytest.raises(SlideLimitError, match="SLIDE_MAX_PIXELS"):
        open_slide(bomb)
    assert handed == [] and calls == []


@needs_real_slides
def test_a_vendor_tiffs_directories_are_checked_before_openslide_parses_it(monkeypatch):
    import openslide

    opened = []
    real_init = openslide.OpenSlide.__init__
    monkeypatch.setattr(openslide.OpenSlide, "__init__", lambda self, f: opened.append(f) or real_init(self, f))
    ndpi = REAL / "test3-TRITC-2-560.ndpi"
    with pytest.raises(SlideLimitError) as info:
        open_slide(ndpi, limits=replace(LIFTED, max_pixels=3968 * 4864 - 1))
    assert str(info.value) == (f"{ndpi}: directory 0 declares 3968 × 4864 px (1.9e7 px) over the limit of 1.9e7 "
                               f"px (SLIDE_MAX_PIXELS)")
    assert opened == []
    with open_slide(ndpi, limits=replace(LIFTED, max_pixels=3968 * 4864)) as s:
        assert s.reader == "openslide" and opened


def test_the_environment_sets_the_default_and_a_block_or_an_argument_overrides_it(tmp_path, monkeypatch):
    p = _pyramid(tmp_path / "s.tif")
    monkeypatch.setenv("SLIDE_MAX_LEVELS", "1")
    with pytest.raises(SlideLimitError, match=r"declares 2 pyramid levels over the limit of 1 \(SLIDE_MAX_LEVELS\)"):
        open_slide(p)
    with use_limits(SlideLimits()):
        with open_slide(p) as s:
            assert len(s.levels) == 2 and s.limits == SlideLimits()
        with pytest.raises(SlideLimitError, match="limit of 1 "):
            open_slide(p, limits=SlideLimits(max_levels=1))
    monkeypatch.setenv("SLIDE_MAX_LEVELS", "2")
    with open_slide(p) as s:
        assert s.limits.max_levels == 2


def test_a_tiff_whose_tiles_do_not_decode_is_refused_by_its_reader_never_handed_to_openslide(tmp_path, monkeypatch):
    # One parser per file: tifffile's reader was chosen from the content; its verdict is final.
    from crafted import tiled_rgb

    p = tiled_rgb(tmp_path / "damaged.tif", 1024, 1024, 512, compression=8, stream=b"this is not deflate" * 40)
    handed = []
    monkeypatch.setattr(detect, "OpenSlideSlide", lambda *a, **k: handed.append(a))
    monkeypatch.setattr(detect, "detect_format", lambda *a, **k: handed.append(a))
    with pytest.raises(SlideError) as info:
        open_slide(p)
    assert str(info.value).startswith(f"{p}: level 0 tile (0, 0) does not decode (")
    assert handed == []


@needs_real_slides
def test_an_svs_or_ome_tiff_never_loads_openslide(monkeypatch):
    import sys as _sys

    monkeypatch.delitem(_sys.modules, "openslide", raising=False)
    monkeypatch.setattr(detect, "detect_format", lambda *a, **k: pytest.fail("OpenSlide was asked"))
    for name in ("CMU-1-Small-Region.svs", "OS-1-detail.ome.tif"):
        with open_slide(REAL / name) as s:
            assert s.reader == "tifffile"
