"""The Slide interface over its readers: content-based choice, folders, analysis at the model's scale by exact area
averaging, non-brightfield images, the shared-tile cache and concurrent reads (synthetic inputs; the real scanner
files are in test_real_slides.py)."""
from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tifffile

from worker.devtools.synthetic import write_synthetic_slide
from worker.slides import SlideError, area_downsample, classify, open_slide


def _exact_area(src: np.ndarray, f: float, n: int) -> np.ndarray:
    """The n x n area means of src at factor f, from explicit overlap weights (independent of the worker's code)."""
    edges = np.arange(n + 1) * f

    def weights(m):
        w = np.zeros((n, m))
        for i in range(n):
            for j in range(int(edges[i]), min(m, int(np.ceil(edges[i + 1])))):
                w[i, j] = max(0.0, min(edges[i + 1], j + 1) - max(edges[i], j))
        return w / f

    return np.einsum("iy,yxc,jx->ijc", weights(src.shape[0]), src.astype(float), weights(src.shape[1]))


@pytest.mark.parametrize("f", [2.0, 4.0, 2.2017, 1.37, 3.5])
def test_area_downsample_is_the_exact_area_mean(f):
    n = 40
    m = int(np.ceil(n * f))
    src = np.random.default_rng(1).integers(0, 256, (m, m, 3), dtype=np.uint8)
    out = np.empty((n, n, 3), np.uint8)
    area_downsample(src, out, (0.0, 0.0, n * f, n * f))
    assert np.abs(out - _exact_area(src, f, n)).max() <= 0.5 + 1e-6  # rounding only


def test_a_pyramid_without_the_models_scale_is_analysed_from_the_finer_level(tmp_path):
    # 0.25 µm/px with a x4 pyramid: levels at 0.25, 1 and 4 µm/px, none near a 0.5 µm/px model.
    p = write_synthetic_slide(tmp_path / "s.ome.tif", 2048, 2048, mpp_um=0.25, level_factor=4, seed=2)
    with open_slide(p) as s:
        assert [round(s.level_mpp(lv)[0], 3) for lv in s.levels] == [0.25, 1.0, 4.0]
        lv = s.analysis_level(0.5, 0.25)
        assert lv.computed and lv.source is s.levels[0] and lv.factor == 2.0
        assert (lv.width, lv.height) == (1024, 1024) and s.level_mpp(lv) == (0.5, 0.5)
        got = s.read_region(lv, 256, 512, 256, 256)
        full = s.read_region(s.levels[0], 512, 1024, 512, 512).astype(float)
        want = full.reshape(256, 2, 256, 2, 3).mean(axis=(1, 3))
        assert np.abs(got - want).max() <= 0.5 + 1e-6
        # Past the edge the computed level reads as glass, like a stored one.
        edge = s.read_region(lv, 1000, 1000, 64, 64)
        assert (edge[24:, :] == 255).all() and (edge[:, 24:] == 255).all()
        # A model at a stored level's scale (within tolerance) reads that level as it is.
        assert s.analysis_level(1.1, 0.25) is s.levels[1]
        assert s.analysis_level(None, 0.25) is s.levels[0]


def test_a_slide_coarser_than_the_model_is_refused_never_upsampled(tmp_path):
    p = write_synthetic_slide(tmp_path / "c.ome.tif", 1024, 1024, mpp_um=1.0, seed=3)
    with open_slide(p) as s, pytest.raises(SlideError) as info:
        s.analysis_level(0.5, 0.25)
    text = str(info.value)
    assert text.startswith(f"{p}: no pyramid level near the model's 0.5 µm/px (levels have 1, 4 µm/px")
    assert "never upsampled" in text and "\n" not in text


def test_the_thumbnail_of_a_computed_level_covers_the_slide(tmp_path):
    p = write_synthetic_slide(tmp_path / "t.ome.tif", 4096, 2048, mpp_um=0.25, level_factor=4, seed=4)
    with open_slide(p) as s:
        lv = s.analysis_level(0.5, 0.25)
        img, dsx, dsy = s.thumbnail(lv, 64)
        assert img.shape[1] * dsx == pytest.approx(lv.width) and img.shape[0] * dsy == pytest.approx(lv.height)
        assert dsx <= 64 and dsy <= 64


def test_reader_is_chosen_from_the_content_not_the_suffix(tmp_path):
    p = write_synthetic_slide(tmp_path / "s.ome.tif", 1024, 1024, seed=5)
    for name in ("renamed.svs", "no-suffix", "looks-like.ndpi"):
        q = tmp_path / name
        shutil.copy(p, q)
        with open_slide(q) as s:
            assert s.reader == "tifffile" and s.format == "OME-TIFF" and s.mpp_x == 0.25


def test_a_folder_holding_one_slide_opens_it_and_other_folders_are_refused(tmp_path):
    one = tmp_path / "one"
    one.mkdir()
    write_synthetic_slide(one / "slide.ome.tif", 512, 512, seed=6)
    (one / "notes.txt").write_text("scanner log\n")
    with open_slide(one) as s:
        assert s.name == "slide.ome.tif"
    shutil.copy(one / "slide.ome.tif", one / "second.tif")
    with pytest.raises(SlideError, match="holds several slides"):
        open_slide(one)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SlideError, match=r"no slide in the folder \(0 entries; expected DICOM WSI instances"):
        open_slide(empty)


def test_an_mrxs_index_without_its_data_is_refused_with_the_reason(tmp_path):
    index = tmp_path / "case.mrxs"
    index.write_text("[GENERAL]\nSLIDE_VERSION = 01.02\n")
    with pytest.raises(SlideError) as info:
        open_slide(index)
    assert "its data files must lie beside it" in str(info.value) and "\n" not in str(info.value)


def test_dark_background_is_fluorescence_and_converted_bright_is_left_alone():
    rng = np.random.default_rng(0)
    dark = rng.integers(5, 25, (64, 64, 3), dtype=np.uint8)
    dark[20:30, 20:30, 0] = 180  # a bright red signal
    c = classify(dark)
    assert c.kind == "fluorescence RGB" and "virtual brightfield" in c.conversion
    rgb = c.convert(dark, np.empty((64, 64, 3), np.uint8))
    assert (rgb[:10, :10] > 240).all()  # background -> glass
    r, g, b = (int(v) for v in rgb[25, 25])
    assert max(r, g, b) < 160 and b > g  # signal -> dark haematoxylin-like purple (blue over green)
    bright = np.full((64, 64, 3), 235, np.uint8)
    bright[10:20, 10:20] = (200, 120, 180)
    c = classify(bright)
    assert c.kind == "brightfield RGB" and c.conversion is None and c.lut is None


def test_single_channel_fluorescence_tiff_is_read_as_converted_rgb(tmp_path):
    data = np.full((512, 512), 12, np.uint8)
    data[100:200, 300:400] = 200
    p = tmp_path / "dapi.tif"
    tifffile.imwrite(p, data, photometric="minisblack", tile=(256, 256), resolution=(40000, 40000),
                     resolutionunit="CENTIMETER")
    with open_slide(p) as s:
        assert s.colour.kind == "fluorescence, single channel" and s.colour.samples == 1
        img = s.read_region(s.levels[0], 256, 0, 256, 256)
        assert img.shape == (256, 256, 3)
        assert (img[:50, :] > 240).all() and img[150, 100].max() < 160  # (100..200, 300..400) is signal


def test_tiles_shared_by_misaligned_reads_decode_once(tmp_path):
    p = write_synthetic_slide(tmp_path / "s.ome.tif", 2048, 2048, seed=7)  # 256 px stored tiles
    with open_slide(p) as s:
        lv = s.levels[0]
        before = s.cache.misses
        for ty in range(7):
            for tx in range(7):  # 240 px reads, like 256 px analysis tiles over Aperio's 240 px tiles
                s.read_region(lv, tx * 240 + 8, ty * 240 + 8, 240, 240)
        decoded = s.cache.misses - before
        assert decoded <= 8 * 8 and s.cache.hits > 0  # each stored tile at most once, not once per read


def test_concurrent_reads_equal_sequential_reads(tmp_path):
    p = write_synthetic_slide(tmp_path / "s.ome.tif", 2048, 2048, mpp_um=0.25, level_factor=4, seed=8)
    with open_slide(p) as s:
        lv = s.analysis_level(0.5, 0.25)
        spots = [(x, y) for y in range(0, 1024, 200) for x in range(0, 1024, 200)]
        seq = [s.read_region(lv, x, y, 256, 256) for x, y in spots]
        with ThreadPoolExecutor(4) as pool:
            par = list(pool.map(lambda xy: s.read_region(lv, xy[0], xy[1], 256, 256), spots))
        assert all(np.array_equal(a, b) for a, b in zip(seq, par))


def test_describe_names_format_reader_levels_and_colour(tmp_path):
    p = write_synthetic_slide(tmp_path / "s.ome.tif", 1024, 1024, seed=9)
    with open_slide(p) as s:
        d = s.describe()
        assert d["format"] == "OME-TIFF" and d["reader"] == "tifffile"
        assert d["levels"][0] == {"width": 1024, "height": 1024, "downsample": 1.0, "mpp_um": 0.25}
        assert d["colour"]["found"] == "brightfield RGB" and d["colour"]["converted"] is None
