"""SlideLimits: defaults that admit every real slide, each limit refusing at its exact bound with its variable named in
one line, the environment parsed or refused in one line, folders measured whole, and the limits in force per block."""
from __future__ import annotations

import ast
import inspect
import os
import sys
import threading
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest
import tifffile

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared_slides import REAL, needs_real_slides, real_entries  # noqa: E402

from worker.slides import SlideError, SlideLimitError, open_slide  # noqa: E402
from worker.slides import limits as limits_module  # noqa: E402
from worker.slides.limits import ENV, SlideLimits, current_limits, slide_bytes, use_limits  # noqa: E402

LIFTED = SlideLimits(max_pixels=10**15, max_tile_side_px=10**6, max_decoded_bytes=2**50, max_levels=10**4,
                     max_file_bytes=2**60, max_tiff_directories=10**6, max_tiles=10**12, min_tile_side_px=1,
                     max_header_bytes=2**60)
"""Limits nothing real reaches: a test that lowers one field starts from here, so only that field can refuse."""


def _field_docstrings() -> dict[str, str]:
    tree = ast.parse(inspect.getsource(SlideLimits))
    body = tree.body[0].body
    return {a.target.id: b.value.value for a, b in zip(body, body[1:])
            if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)}


def test_every_field_has_an_env_var_and_a_docstring_with_its_default_and_reason():
    docs = _field_docstrings()
    names = [f.name for f in fields(SlideLimits)]
    assert sorted(ENV) == sorted(names)
    assert len(set(ENV.values())) == len(ENV)
    for name in names:
        doc = " ".join(docs.get(name, "").split())
        assert f"env {ENV[name]}" in doc, name
        assert "Default" in doc and len(doc) > 200, name  # the figure it is based on, not just the number


def test_the_defaults_are_the_documented_figures():
    d = SlideLimits()
    assert (d.max_pixels, d.max_tile_side_px, d.max_decoded_bytes, d.max_levels, d.max_file_bytes,
            d.max_tiff_directories, d.max_tiles, d.min_tile_side_px, d.max_header_bytes) == (
        4 * 10**10, 8192, 256 * 2**20, 32, 64 * 2**30, 1024, 2**21, 16, 64 * 2**20)
    # The defaults hold the largest real slides quoted in the docstrings, with room to spare.
    assert 97_792 * 221_184 * 1.5 < d.max_pixels  # CAMELYON16 at 40x
    assert d.unit_fits(8192, 8192, 4, 1)  # a maximal tile, decoded by OpenSlide into ARGB
    assert d.unit_fits(4096, 16, 4, 1)  # the Hamamatsu TIFF's tiles
    assert d.max_tiles > 3 * -(-d.max_pixels // (240 * 240))  # a level at max_pixels in Aperio's tiles, 3x over
    assert d.max_tiles * 16 <= d.max_header_bytes // 2  # its BigTIFF offset and byte-count arrays fit, twice over


# -- the environment -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("var, raw, field, value", [
    ("SLIDE_MAX_PIXELS", "4e10", "max_pixels", 40_000_000_000),
    ("SLIDE_MAX_PIXELS", "2_000_000_000", "max_pixels", 2_000_000_000),
    ("SLIDE_MAX_PIXELS", " 123 ", "max_pixels", 123),
    ("SLIDE_MAX_TILE_PX", "4096", "max_tile_side_px", 4096),
    ("SLIDE_MAX_DECODED_BYTES", "128MiB", "max_decoded_bytes", 128 * 2**20),
    ("SLIDE_MAX_DECODED_BYTES", "1.5GiB", "max_decoded_bytes", 3 * 2**29),
    ("SLIDE_MAX_DECODED_BYTES", "500MB", "max_decoded_bytes", 500_000_000),
    ("SLIDE_MAX_LEVELS", "12", "max_levels", 12),
    ("SLIDE_MAX_FILE_BYTES", "64Gi", "max_file_bytes", 64 * 2**30),
    ("SLIDE_MAX_FILE_BYTES", "1000000", "max_file_bytes", 1_000_000),
    ("SLIDE_MAX_TIFF_DIRS", "64", "max_tiff_directories", 64),
    ("SLIDE_MAX_TILES", "1e6", "max_tiles", 1_000_000),
    ("SLIDE_MIN_TILE_PX", "32", "min_tile_side_px", 32),
    ("SLIDE_MAX_HEADER_BYTES", "16MiB", "max_header_bytes", 16 * 2**20),
])
def test_each_variable_sets_its_field_and_only_that(var, raw, field, value):
    got = SlideLimits.from_env({var: raw})
    assert getattr(got, field) == value
    assert replace(got, **{field: getattr(SlideLimits(), field)}) == SlideLimits()


def test_unset_or_empty_variables_leave_the_defaults():
    assert SlideLimits.from_env({}) == SlideLimits()
    assert SlideLimits.from_env({v: "" for v in ENV.values()}) == SlideLimits()
    assert SlideLimits.from_env({"SLIDE_MAX_SOMETHING_ELSE": "1"}) == SlideLimits()


@pytest.mark.parametrize("var, raw", [
    ("SLIDE_MAX_PIXELS", "lots"), ("SLIDE_MAX_PIXELS", "0"), ("SLIDE_MAX_PIXELS", "4.5"),
    ("SLIDE_MAX_LEVELS", "-3"), ("SLIDE_MAX_LEVELS", "2.5e0"), ("SLIDE_MAX_TILE_PX", "4KiB"),
    ("SLIDE_MAX_FILE_BYTES", "64XB"), ("SLIDE_MAX_FILE_BYTES", "GiB"), ("SLIDE_MAX_DECODED_BYTES", "inf"),
    ("SLIDE_MAX_DECODED_BYTES", "nan"), ("SLIDE_MAX_DECODED_BYTES", "1e400"), ("SLIDE_MAX_TIFF_DIRS", "0x10"),
])
def test_a_bad_value_is_refused_in_one_line_naming_the_variable_and_value(var, raw):
    with pytest.raises(ValueError) as info:
        SlideLimits.from_env({var: raw})
    text = str(info.value)
    assert text.startswith(f"{var}={raw!r}: must be a whole number >= 1") and "\n" not in text


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "8"])
def test_validate_names_the_field_and_its_variable(value):
    with pytest.raises(ValueError, match=r"^max_levels=.* \(SLIDE_MAX_LEVELS\): must be a whole number >= 1$"):
        SlideLimits(max_levels=value).validate()
    SlideLimits().validate()


# -- every real slide opens within the defaults ---------------------------------------------------------------
@needs_real_slides
@pytest.mark.parametrize("name", real_entries())
def test_every_real_slide_opens_within_the_default_limits(name):
    # --mpp-um 0.5 for the uncalibrated TCGA slide; the limits do not depend on the calibration.
    with open_slide(REAL / name, mpp_um=0.5, limits=SlideLimits()) as s:
        assert s.limits == SlideLimits()
        lv = s.levels[0]
        assert lv.width * lv.height > 10**6
        s.read_region(lv, 0, 0, 256, 256)  # and reads: the tile headers pass too


# -- each limit refuses at its exact bound, with its name ---------------------------------------------------------
def _slide(path: Path) -> Path:
    """A 2048 x 1024 px slide in 256 px zlib tiles with a x4 SubIFD level, plus a small second image (2 IFDs)."""
    data = np.random.default_rng(0).integers(0, 255, (1024, 2048, 3), dtype=np.uint8)
    opts = dict(photometric="rgb", tile=(256, 256), compression="zlib", metadata=None,
                resolution=(20000, 20000), resolutionunit="CENTIMETER")
    with tifffile.TiffWriter(path) as tif:
        tif.write(data, subifds=1, **opts)
        tif.write(np.ascontiguousarray(data[::4, ::4]), subfiletype=1, **opts)
        tif.write(data[:64, :64], photometric="rgb", metadata=None)  # a "label": a second image directory
    return path


BOUNDS = [  # field, the slide's own figure (the largest value that still refuses is one less)
    ("max_pixels", 2048 * 1024),
    ("max_tile_side_px", 256),
    ("max_decoded_bytes", 256 * 256 * 3),
    ("max_levels", 2),
    ("max_tiff_directories", 2),
    ("max_tiles", 8 * 4),
    ("max_header_bytes", None),  # what the structure reader counts: found below
]


@pytest.mark.parametrize("field, figure", BOUNDS, ids=[b[0] for b in BOUNDS])
def test_each_limit_refuses_one_below_the_slides_figure_and_admits_it(tmp_path, field, figure):
    p = _slide(tmp_path / "s.tif")
    if figure is None:
        from worker.slides.tiff_structure import read_tiff_structure

        figure = read_tiff_structure(p, LIFTED).header_bytes
        assert 500 < figure < 5000
    with open_slide(p, limits=replace(LIFTED, **{field: figure})):
        pass
    with pytest.raises(SlideLimitError) as info:
        open_slide(p, limits=replace(LIFTED, **{field: figure - 1}))
    text = str(info.value)
    assert text.startswith(f"{p}: ") and f"({ENV[field]})" in text and "\n" not in text


def test_the_minimum_tile_side_refuses_one_above_the_slides_tiles_and_admits_them(tmp_path):
    p = _slide(tmp_path / "s.tif")
    with open_slide(p, limits=replace(LIFTED, min_tile_side_px=256)):
        pass
    with pytest.raises(SlideLimitError) as info:
        open_slide(p, limits=replace(LIFTED, min_tile_side_px=257))
    assert str(info.value) == (f"{p}: directory 0 declares tiles of 256 × 256 px under the minimum of 257 px per "
                               f"side (SLIDE_MIN_TILE_PX)")


def test_the_file_size_limit_is_exact_too(tmp_path):
    p = _slide(tmp_path / "s.tif")
    size = p.stat().st_size
    with open_slide(p, limits=replace(LIFTED, max_file_bytes=size)):
        pass
    with pytest.raises(SlideLimitError) as info:
        open_slide(p, limits=replace(LIFTED, max_file_bytes=size - 1))
    assert str(info.value) == (f"{p}: the slide is {size:,} bytes ({limits_module._human(size)}) over the limit of "
                               f"{size - 1:,} bytes (SLIDE_MAX_FILE_BYTES)")


def test_refusals_read_as_documented():
    lim = SlideLimits()
    with pytest.raises(SlideLimitError) as info:
        lim.check_level("bomb.tif", 0, 1_000_000, 1_000_000)
    assert str(info.value) == ("bomb.tif: level 0 declares 1000000 × 1000000 px (1.0e12 px) over the limit of "
                               "4.0e10 px (SLIDE_MAX_PIXELS)")
    with pytest.raises(SlideLimitError) as info:
        lim.check_unit("s.tif", 2, 16384, 16384, 3, 1)
    assert str(info.value) == "s.tif: level 2 declares tiles of 16384 × 16384 px over the limit of 8192 px per side " \
                              "(SLIDE_MAX_TILE_PX)"
    with pytest.raises(SlideLimitError) as info:
        lim.check_unit("s.tif", 0, 100_000, 2000, 3, 1, kind="strips", check_side=False)
    assert str(info.value) == ("s.tif: level 0 declares strips of 100000 × 2000 px × 3 samples × 1 byte (572.2 MiB "
                               "decoded each) over the limit of 256 MiB (SLIDE_MAX_DECODED_BYTES); re-save it tiled")
    with pytest.raises(SlideLimitError) as info:
        lim.check_levels("s.tif", 40)
    assert str(info.value) == "s.tif: declares 40 pyramid levels over the limit of 32 (SLIDE_MAX_LEVELS)"
    assert lim.size_refusal(64 * 2**30) is None
    assert lim.size_refusal(70 * 2**30) == ("the slide is 75,161,927,680 bytes (70 GiB) over the limit of 64 GiB "
                                            "(SLIDE_MAX_FILE_BYTES)")
    assert isinstance(SlideLimitError("x"), SlideError)  # so every reader's caller treats it as a bad slide


# -- bytes on disk ---------------------------------------------------------------------------------------------------
def test_a_folder_an_mrxs_and_a_vms_are_measured_with_their_data(tmp_path):
    case = tmp_path / "case"
    (case / "S1").mkdir(parents=True)
    (case / "S1.mrxs").write_bytes(b"x" * 10)
    (case / "S1" / "Data0000.dat").write_bytes(b"x" * 1000)
    (case / "S1" / "Slidedat.ini").write_bytes(b"x" * 100)
    os.symlink("/etc/hostname", case / "S1" / "link")  # a link is not followed out of the folder
    assert slide_bytes(case) == 1110
    assert slide_bytes(case / "S1.mrxs") == 1110
    assert slide_bytes(case / "S1" / "Data0000.dat") == 1000
    vms = tmp_path / "vms"
    vms.mkdir()
    for name, n in (("s.vms", 5), ("s.jpg", 500), ("s_map.jpg", 50)):
        (vms / name).write_bytes(b"x" * n)
    assert slide_bytes(vms / "s.vms") == 555
    with pytest.raises(SlideLimitError, match=r"case: the slide is 1,110 bytes .*SLIDE_MAX_FILE_BYTES"):
        SlideLimits(max_file_bytes=1109).check_file(case)
    SlideLimits(max_file_bytes=1110).check_file(case)
    SlideLimits(max_file_bytes=1).check_file(tmp_path / "missing.tif")  # the reader says "no such file" itself


# -- which limits apply ----------------------------------------------------------------------------------------------
def test_use_limits_applies_in_its_block_and_nests(monkeypatch):
    monkeypatch.delenv("SLIDE_MAX_LEVELS", raising=False)
    assert current_limits() == SlideLimits()
    a, b = SlideLimits(max_levels=5), SlideLimits(max_levels=6)
    with use_limits(a):
        assert current_limits() is a
        with use_limits(b):
            assert current_limits() is b
        assert current_limits() is a
    assert current_limits() == SlideLimits()


def test_outside_a_block_the_environment_decides_and_a_bad_value_is_raised(monkeypatch):
    monkeypatch.setenv("SLIDE_MAX_LEVELS", "7")
    assert current_limits().max_levels == 7
    with use_limits(SlideLimits()):
        assert current_limits().max_levels == 32  # the block's limits win over the environment
    monkeypatch.setenv("SLIDE_MAX_LEVELS", "seven")
    with pytest.raises(ValueError, match="SLIDE_MAX_LEVELS='seven'"):
        current_limits()


def test_a_block_does_not_leak_into_other_threads(monkeypatch):
    monkeypatch.delenv("SLIDE_MAX_LEVELS", raising=False)
    seen = []
    with use_limits(SlideLimits(max_levels=3)):
        t = threading.Thread(target=lambda: seen.append(current_limits().max_levels))
        t.start()
        t.join()
    assert seen == [32]


def test_open_slide_and_the_readers_take_the_blocks_limits(tmp_path):
    p = _slide(tmp_path / "s.tif")
    with use_limits(SlideLimits(max_levels=1)):
        with pytest.raises(SlideLimitError, match="SLIDE_MAX_LEVELS"):
            open_slide(p)
        from worker.slides import TiffSlide

        with pytest.raises(SlideLimitError, match="SLIDE_MAX_LEVELS"):
            TiffSlide(p)
    with open_slide(p) as s:
        assert len(s.levels) == 2
