"""Synthetic slides look like a scanner's output: tiled JPEG pyramid, µm calibration, tissue and known structures."""
from __future__ import annotations

import numpy as np
import pytest
import tifffile

from worker.devtools.synthetic import CLASSES, NUCLEI, VESSEL, SyntheticSpec, pyramid_downsamples, write_synthetic_slide


@pytest.fixture(scope="module")
def ome_slide(tmp_path_factory):
    return write_synthetic_slide(tmp_path_factory.mktemp("syn") / "a.ome.tif", 2048, 1536, seed=3)


def test_ome_pyramid_structure(ome_slide):
    with tifffile.TiffFile(ome_slide) as tif:
        assert tif.is_ome
        s = tif.series[0]
        shapes = [lv.shape for lv in s.levels]
        assert shapes == [(1536, 2048, 3), (384, 512, 3), (96, 128, 3)]
        base = tif.pages.first
        assert base.is_tiled and (base.tilewidth, base.tilelength) == (256, 256)
        assert base.compression == tifffile.COMPRESSION.JPEG
        assert len(base.subifds) == 2  # the reduced levels are SubIFDs of level 0
        assert len(tif.pages) == 1
        # Calibration: OME in µm, and the resolution tags in pixels per centimetre, as scanners write them.
        assert 'PhysicalSizeX="0.25"' in tif.ome_metadata and 'PhysicalSizeXUnit="µm"' in tif.ome_metadata
        assert base.tags["ResolutionUnit"].value == tifffile.RESUNIT.CENTIMETER
        num, den = base.tags["XResolution"].value
        assert num / den == pytest.approx(40000)
        lv1 = s.levels[1].keyframe
        num, den = lv1.tags["XResolution"].value
        assert num / den == pytest.approx(10000)


def test_deterministic_for_a_seed(tmp_path):
    a = write_synthetic_slide(tmp_path / "a.ome.tif", 768, 512, seed=5)
    b = write_synthetic_slide(tmp_path / "b.ome.tif", 768, 512, seed=5)
    c = write_synthetic_slide(tmp_path / "c.ome.tif", 768, 512, seed=6)
    pa, pb, pc = (tifffile.imread(p) for p in (a, b, c))
    assert np.array_equal(pa, pb)
    assert not np.array_equal(pa, pc)


def test_tissue_fraction_and_structures_inside_tissue():
    spec = SyntheticSpec(8192, 8192, 0.25, 0.3, seed=11)
    tissue = spec.tissue(16)
    assert tissue.mean() == pytest.approx(0.3, abs=0.03)
    labels = spec.labels(16)
    assert not (labels[~tissue] > 0).any()  # structures only inside tissue
    counts = np.bincount(labels.ravel(), minlength=len(CLASSES))
    assert counts[NUCLEI] > 0 and counts[VESSEL] > 0


def test_colours_look_like_h_and_e():
    spec = SyntheticSpec(4096, 4096, 0.25, 0.4, seed=2)
    region = spec.render(1024, 1024, 2048, 2048)
    rgb = region.rgb.astype(int)
    glass = rgb[~region.tissue].mean(axis=0)
    nuclei = rgb[region.labels == NUCLEI].mean(axis=0)
    stroma = rgb[region.tissue & (region.labels == 0)].mean(axis=0)
    vessel = rgb[region.labels == VESSEL].mean(axis=0)
    assert glass.min() > 235  # white glass
    assert stroma[0] > stroma[1] and stroma[2] > stroma[1]  # pink: red and blue above green
    assert nuclei.sum() < stroma.sum() - 200 and nuclei[2] > nuclei[1]  # dark purple
    assert vessel.sum() > stroma.sum()  # lighter


def test_render_at_a_downsample_samples_the_same_geometry():
    spec = SyntheticSpec(2048, 2048, 0.25, 0.4, seed=4)
    fine = spec.render(0, 0, 2048, 2048, 1, rgb=False).labels
    coarse = spec.render(0, 0, 512, 512, 4, rgb=False).labels
    # Step 4 samples point (4i + 2, 4j + 2), which step 1 renders at pixel (4i + 1.5 ~ 4i + 2) as well.
    agree = (fine[2::4, 2::4] == coarse).mean()
    assert agree > 0.99


def test_plain_tiff_with_subifds_and_with_pages(tmp_path):
    sub = write_synthetic_slide(tmp_path / "sub.tif", 1024, 1024, ome=False)
    pages = write_synthetic_slide(tmp_path / "pages.tif", 1024, 1024, ome=False, pyramid="pages", compression="zlib")
    with tifffile.TiffFile(sub) as tif:
        assert not tif.is_ome and len(tif.pages.first.subifds) == 1  # 1024 -> 256: fits one tile
    with tifffile.TiffFile(pages) as tif:
        assert len(tif.pages) == 2 and tif.pages.first.subifds is None
        assert tif.pages.first.compression == tifffile.COMPRESSION.ADOBE_DEFLATE


def test_level_factor_two_and_pyramid_rule():
    assert pyramid_downsamples(1024, 1024, 256, 2) == [1, 2, 4]
    assert pyramid_downsamples(100, 100, 256) == [1, 4]  # always at least two levels
    assert pyramid_downsamples(16384, 8192, 256) == [1, 4, 16, 64]


def test_uncalibrated_slide_has_no_calibration(tmp_path):
    p = write_synthetic_slide(tmp_path / "u.ome.tif", 512, 512, calibrated=False)
    with tifffile.TiffFile(p) as tif:
        assert "PhysicalSizeX" not in tif.ome_metadata
        assert tif.pages.first.tags["ResolutionUnit"].value == tifffile.RESUNIT.NONE


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tissue_fraction": 1.5}, "tissue_fraction=1.5"),
        ({"level_factor": 3}, "level_factor=3"),
        ({"tile": 100}, "tile=100"),
        ({"compression": "webp"}, "compression='webp'"),
        ({"pyramid": "pages"}, "pyramid='pages'"),
    ],
)
def test_bad_arguments_say_which(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        write_synthetic_slide(tmp_path / "x.ome.tif", 512, 512, **kwargs)
