"""Overlays: lossless tiled pyramidal OME-TIFF whose UTF-8 OME-XML validates and keeps µm; the PNG preview."""
from __future__ import annotations

import imagecodecs
import numpy as np
import ome_types
import pytest
import tifffile

from worker.overlay import (
    OverlaySettings,
    build_ome_xml,
    colorize,
    level_sizes,
    png_bytes,
    render_preview,
    write_overlay,
    write_png,
)

CLASSES = ["background", "nuclei", "vessel"]
COLORS = [(0, 0, 0), (40, 90, 230), (230, 60, 40)]


def _labels(h, w, seed=0):
    rng = np.random.default_rng(seed)
    lab = np.zeros((h, w), np.uint8)
    for _ in range(40):  # blobs, so the map compresses like a real one
        y, x = rng.integers(0, h), rng.integers(0, w)
        lab[y : y + 30, x : x + 50] = rng.integers(1, 3)
    return lab


def _bands(lab, rows=256):
    for y in range(0, lab.shape[0], rows):
        yield lab[y : y + rows]


def _write(path, lab, mpp=1.0, **kw):
    h, w = lab.shape
    return write_overlay(path, _bands(lab), width=w, height=h, mpp_x=mpp, mpp_y=mpp, classes=CLASSES, colors=COLORS,
                         name="t", description="test overlay, 1 µm pixels", provenance={"slide": "s.tif"}, **kw)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    lab = _labels(1100, 1500)
    path = tmp_path_factory.mktemp("ov") / "o.overlay.ome.tif"
    return lab, _write(path, lab, mpp=1.0)


def test_pyramid_of_lossless_tiles_with_exact_levels(written):
    lab, res = written
    assert res.levels == [(1500, 1100), (375, 275), (94, 69)]
    with tifffile.TiffFile(res.path) as tif:
        base = tif.pages.first
        assert base.is_tiled and (base.tilewidth, base.tilelength) == (256, 256)
        assert base.compression == tifffile.COMPRESSION.ADOBE_DEFLATE
        assert len(base.subifds) == 2 and len(tif.pages) == 1  # reduced levels are SubIFDs
        levels = tif.series[0].levels
        assert len(levels) >= 2
        assert np.array_equal(levels[0].asarray(), lab)
        assert np.array_equal(levels[1].asarray(), lab[::4, ::4])  # nearest: labels are never blended
        assert np.array_equal(levels[2].asarray(), lab[::16, ::16])
        num, den = base.tags["XResolution"].value
        assert num / den == pytest.approx(1e4) and base.tags["ResolutionUnit"].value == tifffile.RESUNIT.CENTIMETER
    assert res.class_pixels == np.bincount(lab.ravel(), minlength=3).tolist()
    assert not res.bigtiff


def test_ome_xml_is_utf8_bytes_valid_and_says_micrometre(written):
    _, res = written
    with tifffile.TiffFile(res.path) as tif:
        raw = tif.pages.first.tags["ImageDescription"].value
    data = res.path.read_bytes()
    assert 'PhysicalSizeXUnit="µm"'.encode("utf-8") in data  # stored as UTF-8, U+00B5
    assert b'PhysicalSizeXUnit="um"' not in data
    ome = ome_types.from_xml(raw, validate=True)  # schema validation needs lxml, installed with the dev deps
    px = ome.images[0].pixels
    assert (px.size_x, px.size_y, px.physical_size_x, px.physical_size_y) == (1500, 1100, 1.0, 1.0)
    assert px.physical_size_x_unit.value == "µm" and px.physical_size_y_unit.value == "µm"
    classes = {m.k: m.value for m in ome.structured_annotations.map_annotations[0].value.ms}
    assert classes == {"0": "background", "1": "nuclei", "2": "vessel"}


def test_the_schema_rejects_um_so_validation_means_something():
    xml = build_ome_xml(name="x", width=10, height=10, mpp_x=1, mpp_y=1, classes=CLASSES)
    ome_types.from_xml(xml, validate=True)
    with pytest.raises(Exception):
        ome_types.from_xml(xml.replace('Unit="µm"', 'Unit="um"'), validate=True)


def test_a_str_description_with_micro_sign_is_what_tifffile_refuses(tmp_path):
    """Why the overlay hands tifffile bytes: the same XML as a str fails with tifffile's 7-bit ASCII rule."""
    xml = build_ome_xml(name="x", width=64, height=64, mpp_x=1, mpp_y=1, classes=CLASSES)
    data = np.zeros((64, 64), np.uint8)
    with pytest.raises(ValueError, match="TIFF strings must be 7-bit ASCII"):
        tifffile.imwrite(tmp_path / "str.tif", data, description=xml, metadata=None)
    tifffile.imwrite(tmp_path / "bytes.tif", data, description=xml.encode("utf-8"), metadata=None)
    with tifffile.TiffFile(tmp_path / "bytes.tif") as tif:
        assert "µm" in tif.pages.first.description
    # And ASCII-only XML would pass as a str: the micro sign is the whole problem.
    tifffile.imwrite(tmp_path / "ascii.tif", data, description=xml.replace("µ", "u"), metadata=None)


def test_bigtiff_when_forced_and_when_large(tmp_path):
    lab = _labels(300, 300)
    res = _write(tmp_path / "big.ome.tif", lab, settings=OverlaySettings(bigtiff=True))
    with tifffile.TiffFile(res.path) as tif:
        assert tif.is_bigtiff and np.array_equal(tif.series[0].levels[0].asarray(), lab)
        ome_types.from_xml(tif.pages.first.description, validate=True)


def test_small_overlays_still_have_two_levels_and_lzw_works(tmp_path):
    lab = _labels(40, 60)
    res = _write(tmp_path / "s.ome.tif", lab, settings=OverlaySettings(compression="lzw"))
    assert res.levels == [(60, 40), (15, 10)]
    with tifffile.TiffFile(res.path) as tif:
        assert tif.pages.first.compression == tifffile.COMPRESSION.LZW
        assert np.array_equal(tif.series[0].levels[1].asarray(), lab[::4, ::4])


def test_level_factor_two():
    assert level_sizes(1000, 600, 256, 2) == [(1000, 600), (500, 300), (250, 150)]


def test_lossy_codecs_are_refused():
    with pytest.raises(ValueError, match="compression='jpeg'.*lossless"):
        OverlaySettings(compression="jpeg")


def test_band_of_the_wrong_shape_is_an_error(tmp_path):
    def bad():
        yield np.zeros((256, 99), np.uint8)

    with pytest.raises(ValueError, match=r"overlay band at row 0: got shape \(256, 99\), expected \(256, 100\)"):
        write_overlay(tmp_path / "x.tif", bad(), width=100, height=300, mpp_x=1, mpp_y=1, classes=CLASSES)


def test_spool_files_are_cleaned_up(tmp_path):
    _write(tmp_path / "c.ome.tif", _labels(600, 600))
    assert [p.name for p in tmp_path.iterdir()] == ["c.ome.tif"]


def test_preview_colours_classes_over_the_thumbnail(tmp_path):
    thumb = np.full((100, 200, 3), 240, np.uint8)
    lab = np.zeros((50, 100), np.uint8)
    lab[10:20, 10:30] = 1
    img = render_preview(thumb, lab, COLORS, alpha=0.5, max_side=100)
    assert img.shape == (50, 100, 3)
    same = render_preview(thumb[::2, ::2].copy(), lab, COLORS, alpha=0.5)  # no resampling needed
    assert np.array_equal(same, img)
    assert tuple(img[0, 0]) == (240, 240, 240)  # background left clear
    assert tuple(img[15, 20]) == (140, 165, 235)  # half nuclei blue over glass
    path = write_png(tmp_path / "p.png", img)
    assert np.array_equal(imagecodecs.png_decode(path.read_bytes()), img)
    assert colorize(np.array([[2, 7]], np.uint8), COLORS).tolist() == [[[230, 60, 40], [255, 255, 255]]]
    small = np.full((50, 100, 3), 240, np.uint8)
    render_preview(small, lab, COLORS)
    assert (small == 240).all()  # the caller's thumbnail is left alone


@pytest.mark.parametrize("ncls", [3, 12])
def test_class_counts_with_unknown_labels_and_many_classes(tmp_path, ncls):
    """Counting per tile (compares for a few classes, bincount for many) gives the whole map's histogram."""
    lab = _labels(700, 900, seed=5)
    lab[600:650, 100:300] = 200  # a label past the classes
    lab[0:20, 0:40] = ncls - 1
    classes = [f"c{i}" for i in range(ncls)]
    res = write_overlay(tmp_path / "n.ome.tif", _bands(lab), width=900, height=700, mpp_x=1, mpp_y=1, classes=classes)
    hist = np.bincount(lab.ravel(), minlength=256)
    assert res.class_pixels == hist[:ncls].tolist()
    assert res.extra["unknown_class_pixels"] == int(hist[ncls:].sum()) == 50 * 200


def test_background_tiles_share_one_encoding_and_read_back(tmp_path):
    lab = np.zeros((1024, 1024), np.uint8)
    lab[300:400, 300:700] = 2  # meets tiles (1, 1) and (2, 1) only
    res = _write(tmp_path / "z.ome.tif", lab)
    with tifffile.TiffFile(res.path) as tif:
        page = tif.pages.first
        counts = list(page.databytecounts)
        assert np.array_equal(page.asarray(), lab)
        assert np.array_equal(tif.series[0].levels[1].asarray(), lab[::4, ::4])
    empty = [c for i, c in enumerate(counts) if i not in (5, 6)]
    assert len(set(empty)) == 1 and counts[5] > empty[0]  # one encoding of an empty tile, reused


def test_preview_labels_of_a_large_overlay_are_its_finest_small_level(tmp_path):
    lab = _labels(300, 2100, seed=6)  # wider than 2048: level 0 is not kept whole
    res = _write(tmp_path / "w.ome.tif", lab)
    assert np.array_equal(res.preview_labels, lab[::4, ::4])
    small = _labels(300, 600, seed=6)
    assert np.array_equal(_write(tmp_path / "s.ome.tif", small).preview_labels, small)


@pytest.mark.parametrize("h, w", [(1, 1), (3, 5), (64, 33), (257, 100)])
def test_png_bytes_round_trip(h, w):
    img = np.random.default_rng(h * w).integers(0, 256, (h, w, 3), dtype=np.uint8)
    img[: h // 2] = 240  # some flat glass as well as noise
    data = png_bytes(img)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert np.array_equal(imagecodecs.png_decode(data), img)
    with pytest.raises(ValueError, match="H x W x 3"):
        png_bytes(img[..., 0])
