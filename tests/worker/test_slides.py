"""Slide reading: pyramids in all their TIFF forms, µm calibration from every source, tile reads, tissue detection."""
from __future__ import annotations

import numpy as np
import pytest
import tifffile

from worker.devtools.synthetic import SyntheticSpec, write_synthetic_slide
from worker.slides import SlideError, TissueSettings, dilate, open_slide, tissue_mask, tissue_tiles


def _rgb(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 255, (h, w, 3), dtype=np.uint8)


def _write_plain(path, data, **kw):
    """A tiled RGB TIFF with a 4x reduced SubIFD level; kw go to both writes (resolution, description ...)."""
    opts = dict(photometric="rgb", tile=(256, 256), compression="zlib", metadata=None)
    opts.update(kw)
    with tifffile.TiffWriter(path) as tif:
        tif.write(data, subifds=1, **opts)
        opts.pop("description", None)
        tif.write(np.ascontiguousarray(data[::4, ::4]), subfiletype=1, **opts)
    return path


def test_ome_slide_levels_and_calibration(tmp_path):
    p = write_synthetic_slide(tmp_path / "s.ome.tif", 2048, 1024, mpp_um=0.5)
    with open_slide(p) as s:
        assert [(lv.width, lv.height) for lv in s.levels] == [(2048, 1024), (512, 256), (128, 64)]
        assert [lv.downsample for lv in s.levels] == [1.0, 4.0, 16.0]
        assert (s.mpp_x, s.mpp_y, s.mpp_source) == (0.5, 0.5, "OME PhysicalSizeX/Y")
        assert s.level_mpp(s.levels[1]) == (2.0, 2.0)
        assert "µm" in repr(s)


@pytest.mark.parametrize("value, unit, expected", [(250.0, "nm", 0.25), (0.00025, "mm", 0.25), (0.5, "µm", 0.5)])
def test_ome_units_are_converted(tmp_path, value, unit, expected):
    p = tmp_path / "u.ome.tif"
    tifffile.imwrite(
        p, _rgb(512, 512), photometric="rgb", tile=(256, 256),
        metadata={"axes": "YXS", "PhysicalSizeX": value, "PhysicalSizeXUnit": unit,
                  "PhysicalSizeY": value, "PhysicalSizeYUnit": unit},
    )
    with open_slide(p) as s:
        assert s.mpp_x == pytest.approx(expected) and s.mpp_y == pytest.approx(expected)


def test_resolution_tags_centimeter_and_inch(tmp_path):
    data = _rgb(1024, 1024)
    cm = _write_plain(tmp_path / "cm.tif", data, resolution=(40000, 40000), resolutionunit="CENTIMETER")
    inch = _write_plain(tmp_path / "inch.tif", data, resolution=(101600, 50800), resolutionunit="INCH")
    with open_slide(cm) as s:
        assert (s.mpp_x, s.mpp_source) == (pytest.approx(0.25), "TIFF X/YResolution (CENTIMETER)")
        assert len(s.levels) == 2
    with open_slide(inch) as s:
        assert (s.mpp_x, s.mpp_y) == (pytest.approx(0.25), pytest.approx(0.5))


def test_aperio_description_mpp(tmp_path):
    p = _write_plain(tmp_path / "a.svs.tif", _rgb(1024, 1024),
                     description="Aperio Image Library v12 |AppMag = 40|MPP = 0.2520|")
    with open_slide(p) as s:
        assert (s.mpp_x, s.mpp_source) == (pytest.approx(0.252), "Aperio MPP")


def test_missing_calibration_is_refused_in_one_line_unless_overridden(tmp_path):
    p = write_synthetic_slide(tmp_path / "nocal.ome.tif", 512, 512, calibrated=False)
    with pytest.raises(SlideError) as info:
        open_slide(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: no pixel calibration") and "\n" not in msg and "pass --mpp-um" in msg
    with open_slide(p, mpp_um=0.5) as s:
        assert (s.mpp_x, s.mpp_source) == (0.5, "override")


def test_screen_resolution_is_not_a_calibration(tmp_path):
    p = _write_plain(tmp_path / "dpi.tif", _rgb(512, 512), resolution=(72, 72), resolutionunit="INCH")
    with pytest.raises(SlideError, match=r"352\.778 µm/px along x, not a plausible scan"):
        open_slide(p)


def test_implausible_override_is_refused(tmp_path):
    p = write_synthetic_slide(tmp_path / "s.ome.tif", 512, 512)
    with pytest.raises(SlideError, match="mpp_um override -1"):
        open_slide(p, mpp_um=-1)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_text("not a slide\n"), "not a slide format this worker reads (starts with b'not a sl'"),
        (lambda p: p.write_bytes(write_synthetic_slide(p, 512, 512).read_bytes()[:100]),
         "truncated: the file is 100 bytes but directory 0's entries would end at byte"),
        (lambda p: p.write_bytes(b""), "empty file (0 bytes"),
        (lambda p: tifffile.imwrite(p, np.zeros((64, 64), np.uint16)),
         "not a brightfield RGB or 8-bit single-channel slide (found uint16 MINISBLACK 64x64"),
        (lambda p: tifffile.imwrite(p, np.zeros((5, 64, 64), np.uint8), photometric="minisblack",
                                    metadata={"axes": "CYX"}),
         "not a brightfield RGB or 8-bit single-channel slide (found uint8 MINISBLACK 5x64x64 CYX"),
        (lambda p: tifffile.imwrite(p, np.full((300, 300), 200, np.uint8), photometric="minisblack", tile=(128, 128),
                                    resolution=(40000, 40000), resolutionunit="CENTIMETER"),
         "brightfield, single channel (grayscale): the model needs stained RGB"),
    ],
)
def test_not_a_slide_gives_one_line_naming_the_file(tmp_path, make, message):
    p = tmp_path / "bad.tif"
    make(p)
    with pytest.raises(SlideError) as info:
        open_slide(p)
    text = str(info.value)
    assert text.startswith(str(p)) and message in text and "\n" not in text


def test_truncated_file_is_refused_at_open_naming_the_cause(tmp_path):
    p = write_synthetic_slide(tmp_path / "t.ome.tif", 1024, 1024)
    full = p.stat().st_size
    p.write_bytes(p.read_bytes()[: full // 2])
    with pytest.raises(SlideError) as info:
        open_slide(p)
    text = str(info.value)
    assert f"truncated: the file is {full // 2:,} bytes" in text and "partial upload" in text and "\n" not in text


def test_a_tile_cut_short_after_open_is_a_slide_error(tmp_path):
    p = write_synthetic_slide(tmp_path / "t.ome.tif", 1024, 1024)
    with open_slide(p) as s:
        lv = s.levels[0]
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])  # the upload is overwritten while we read
        with pytest.raises(SlideError, match=r"level 0 tile \(\d+, \d+\) is truncated"):
            for ty in range(lv.tiles_down):
                for tx in range(lv.tiles_across):
                    s.read_tile(lv, tx, ty)


def test_stripped_levels_are_read_by_region(tmp_path):
    data = _rgb(700, 900, seed=5)
    for compression in (None, "zlib"):
        p = tmp_path / f"strips-{compression}.tif"
        tifffile.imwrite(p, data, photometric="rgb", rowsperstrip=37, compression=compression,
                         resolution=(40000, 40000), resolutionunit="CENTIMETER")
        with open_slide(p) as s:
            lv = s.levels[0]
            assert (lv.tile_width, lv.tile_height) == (0, 37) and s.reader == "tifffile"
            got = s.read_region(lv, 250, 100, 300, 256)
            assert np.array_equal(got, data[100:356, 250:550])
            edge = s.read_region(lv, 800, 600, 256, 256)  # past the edge reads as glass
            assert np.array_equal(edge[:100, :100], data[600:, 800:]) and (edge[100:] == 255).all()
            assert np.array_equal(s.read_decimated(lv, 4), data[2::4, 2::4])


def test_missing_file(tmp_path):
    with pytest.raises(SlideError, match="no such file"):
        open_slide(tmp_path / "nope.tif")


@pytest.mark.parametrize("ome, pyramid", [(True, "subifds"), (False, "subifds"), (False, "pages")])
def test_tiles_and_regions_match_the_whole_image(tmp_path, ome, pyramid):
    # Lossless tiles so the reader can be compared pixel for pixel with tifffile's own full read.
    p = write_synthetic_slide(tmp_path / "l.tif", 1000, 700, compression="zlib", ome=ome, pyramid=pyramid)
    full = tifffile.imread(p)
    with open_slide(p) as s:
        assert len(s.levels) == 2 and s.mpp_x == pytest.approx(0.25)
        lv = s.levels[0]
        assert np.array_equal(s.read_tile(lv, 1, 1), full[256:512, 256:512])
        region = s.read_region(lv, 900, 600, 256, 256)  # crosses tiles and the image edge
        assert np.array_equal(region[:100, :100], full[600:700, 900:1000])
        assert (region[100:] == 255).all() and (region[:, 100:] == 255).all()
        edge = s.read_region(lv, 768, 512, 256, 256)  # aligned edge tile: scanner padding reads as glass
        assert np.array_equal(edge[:188, :232], full[512:700, 768:1000]) and (edge[188:] == 255).all()
        small = s.read_decimated(s.levels[1], 1)
        assert small.shape == (175, 250, 3)


def test_jpeg_tiles_decoded_into_the_callers_buffer_equal_tifffiles_decode(tmp_path):
    """The direct JPEG path (no copy) gives tifffile's pixels exactly, for every tile, edge tiles included."""
    p = write_synthetic_slide(tmp_path / "d.ome.tif", 1000, 700, tissue_fraction=0.5, seed=10)
    with open_slide(p) as s:
        lv = s.levels[0]
        assert lv.jpeg is not None  # 3-sample JPEG tiles: the direct path is taken
        for ty in range(lv.tiles_down):
            for tx in range(lv.tiles_across):
                out = np.zeros((256, 256, 3), np.uint8)
                assert s.read_tile(lv, tx, ty, out=out) is out
                page = lv.page
                index = ty * lv.tiles_across + tx
                data = page.parent.filehandle
                data.seek(page.dataoffsets[index])
                raw = data.read(page.databytecounts[index])
                want = page.decode(raw, index, jpegtables=page.jpegtables)[0].reshape(256, 256, -1)[..., :3]
                assert np.array_equal(out, want)
                assert np.array_equal(s.read_tile(lv, tx, ty), want)  # and without a buffer (tifffile's path)
        region = s.read_region(lv, 768, 512, 256, 256)  # aligned edge tile through the direct path
        assert (region[188:] == 255).all() and (region[:, 232:] == 255).all()


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64])
def test_decimated_read_samples_pixel_centres(tmp_path, step):
    """read_decimated equals picking every step-th pixel (centre-sampled, clamped at the edge) of the whole level."""
    p = write_synthetic_slide(tmp_path / "m.tif", 1000, 700, compression="zlib", ome=False, seed=11)
    full = tifffile.imread(p)
    with open_slide(p) as s:
        got = s.read_decimated(s.levels[0], step)
    h, w = -(-700 // step), -(-1000 // step)
    rows = np.minimum(np.arange(h) * step + step // 2, 699)
    cols = np.minimum(np.arange(w) * step + step // 2, 999)
    assert np.array_equal(got, full[rows[:, None], cols[None, :], :3])


def test_jpeg_tiles_decode_close_to_the_rendered_pixels(tmp_path):
    spec = SyntheticSpec(1024, 1024, 0.25, 0.5, seed=9)
    p = write_synthetic_slide(tmp_path / "j.ome.tif", 1024, 1024, tissue_fraction=0.5, seed=9)
    with open_slide(p) as s:
        got = s.read_region(s.levels[0], 256, 256, 512, 512).astype(int)
    want = spec.render(256, 256, 512, 512).rgb.astype(int)
    assert np.abs(got - want).mean() < 6  # JPEG quality 90


def test_tissue_detection_matches_truth(tmp_path):
    spec = SyntheticSpec(8192, 8192, 0.25, 0.3, seed=21)
    p = write_synthetic_slide(tmp_path / "t.ome.tif", 8192, 8192, seed=21)
    with open_slide(p) as s:
        lv = s.levels[0]
        thumb, dsx, dsy = s.thumbnail(lv, 64)
        assert (dsx, dsy) == (64.0, 64.0) and thumb.shape == (128, 128, 3)
        mask = tissue_mask(thumb)
        grid = tissue_tiles(dilate(mask, 1), dsx, dsy, lv.width, lv.height, 256)
    truth = spec.tissue(64)
    iou = (mask & truth).sum() / (mask | truth).sum()
    assert iou > 0.93
    assert mask.mean() == pytest.approx(0.3, abs=0.03)
    # Every tile holding a structure is analysed; few tiles without tissue are.
    labels = spec.labels(4)
    has_structure = labels.reshape(32, 64, 32, 64).max(axis=(1, 3)) > 0
    assert not (has_structure & ~grid).any()
    true_tiles = spec.tissue(4).reshape(32, 64, 32, 64).any(axis=(1, 3))
    assert not (true_tiles & ~grid).any()
    assert grid.sum() <= true_tiles.sum() * 1.15


def test_tissue_mask_rules():
    img = np.full((20, 20, 3), 246, np.uint8)  # glass
    img[2:8, 2:8] = (222, 150, 192)  # tissue
    img[12:18, 12:18] = (10, 10, 10)  # black artefact
    img[0, 19] = (222, 150, 192)  # an isolated speck
    mask = tissue_mask(img)
    assert mask[2:8, 2:8].all() and not mask[12:18, 12:18].any() and not mask[0, 19]
    assert mask.sum() == 36
    assert tissue_mask(img, TissueSettings(min_saturation=0.9)).sum() == 0
    assert dilate(mask, 1).sum() == 64


def test_tissue_tiles_with_coarse_thumbnail():
    mask = np.zeros((4, 4), bool)
    mask[1, 2] = True
    # thumbnail pixels of 512 image pixels, tiles of 256: one thumbnail pixel covers 2x2 tiles
    grid = tissue_tiles(mask, 512, 512, 2048, 2048, 256)
    assert grid.shape == (8, 8) and grid.sum() == 4 and grid[2:4, 4:6].all()
