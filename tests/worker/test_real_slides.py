"""Slides from real scanners (../shared/real-slides): the expected reader, the stated calibration, reads that agree
with OpenSlide's and wsidicom's own, and `python -m worker infer` writing a valid overlay of the slide's extent."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import ome_types
import pytest
import tifffile

from worker import commands
from worker.slides import SlideError, open_slide

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "real-slides"
pytestmark = pytest.mark.skipif(
    not (REAL / "README.md").is_file(),
    reason=f"{REAL} is absent: the real scanner slides are shared data, not part of the repository",
)

# file, reader, format, µm/px the README states (to its precision), --mpp-um needed
SLIDES = [
    ("CMU-1-Small-Region.svs", "tifffile", "Aperio SVS", 0.4990, None),
    ("tcga-cr-7395-01a-01-ts1.svs", "tifffile", "Aperio SVS", 0.5, 0.5),
    ("OS-1-detail.ome.tif", "tifffile", "OME-TIFF", 0.2271, None),
    ("OS-2-ndpi.ome.tif", "tifffile", "OME-TIFF", 0.2271, None),
    ("test3-TRITC-2-560.ndpi", "openslide", "Hamamatsu NDPI", 0.2282, None),
    ("dicom-bpaec", "wsidicom", "DICOM WSI", 1.29, None),
]
BRIGHTFIELD_OR_CONVERTED = [s for s in SLIDES if s[0] != "dicom-bpaec"]  # the DICOM series is 1.29 µm/px: too coarse


@pytest.mark.parametrize("name, reader, fmt, mpp, override", SLIDES, ids=[s[0] for s in SLIDES])
def test_opens_through_the_expected_reader_with_the_stated_calibration(name, reader, fmt, mpp, override):
    with open_slide(REAL / name, mpp_um=override) as s:
        assert (s.reader, s.format) == (reader, fmt)
        assert s.mpp_x == pytest.approx(mpp, abs=5e-4) and s.mpp_y == pytest.approx(mpp, abs=5e-4)
        assert s.levels[0].width > 1000 and s.levels[0].height > 1000


def test_associated_images_are_skipped_not_read_as_the_slide():
    with open_slide(REAL / "CMU-1-Small-Region.svs") as s:
        assert (s.width, s.height) == (2220, 2967) and len(s.levels) == 1
        assert s.associated_skipped == ["Thumbnail", "Label", "Macro"]
    with open_slide(REAL / "dicom-bpaec") as s:
        assert s.associated_skipped == ["label"] and (s.width, s.height) == (3072, 2304)


def test_tcga_svs_without_calibration_is_refused_naming_the_flag():
    with pytest.raises(SlideError) as info:
        open_slide(REAL / "tcga-cr-7395-01a-01-ts1.svs")
    text = str(info.value)
    assert "no pixel calibration" in text and "pass --mpp-um" in text and "objective power" in text
    assert "\n" not in text


@pytest.mark.parametrize("name, override", [("CMU-1-Small-Region.svs", None), ("tcga-cr-7395-01a-01-ts1.svs", 0.5)])
def test_tifffile_reads_agree_with_openslide(name, override):
    import openslide

    ref = openslide.OpenSlide(str(REAL / name))
    try:
        with open_slide(REAL / name, mpp_um=override) as s:
            lv = s.levels[0]
            for x, y, w, h in [(0, 0, 256, 256), (300, 500, 700, 333), (lv.width - 200, lv.height - 150, 256, 256)]:
                ours = s.read_region(lv, x, y, w, h).astype(int)
                theirs = np.asarray(ref.read_region((x, y), 0, (w, h))).astype(int)
                inside = theirs[..., 3] == 255  # OpenSlide is transparent past the edge; we read glass there
                diff = np.abs(ours - theirs[..., :3])[inside]
                assert diff.mean() <= 1.0 and diff.max() <= 16, (name, x, y, diff.mean(), diff.max())
                assert (ours[~inside] == 255).all()
            if len(s.levels) > 1:  # a reduced level, where both readers agree on the origin
                ours = s.read_region(s.levels[1], 0, 0, 512, 512).astype(int)
                theirs = np.asarray(ref.read_region((0, 0), 1, (512, 512)))[..., :3].astype(int)
                assert np.abs(ours - theirs).mean() <= 1.0
    finally:
        ref.close()


def test_ndpi_reads_are_openslides_at_every_level():
    import openslide

    ref = openslide.OpenSlide(str(REAL / "test3-TRITC-2-560.ndpi"))
    try:
        with open_slide(REAL / "test3-TRITC-2-560.ndpi") as s:
            assert len(s.levels) == ref.level_count and s.associated_skipped == ["macro"]
            for lv in s.levels[:3]:
                ds = ref.level_downsamples[lv.index]
                x, y = lv.width // 3, lv.height // 3
                raw = s._read_raw(lv, x, y, 300, 200, np.empty((200, 300, 3), np.uint8))
                theirs = np.asarray(ref.read_region((int(x * ds), int(y * ds)), lv.index, (300, 200)))[..., :3]
                assert np.array_equal(raw, theirs)
    finally:
        ref.close()


def test_dicom_folder_reads_are_wsidicoms_and_carry_its_pixel_spacing():
    from wsidicom import WsiDicom

    ref = WsiDicom.open(REAL / "dicom-bpaec")
    try:
        with open_slide(REAL / "dicom-bpaec") as s:
            assert s.mpp_source == "DICOM PixelSpacing" and s.mpp_x == pytest.approx(1.29)
            assert s.colour.kind == "fluorescence, single channel" and s.colour.conversion
            for lv in s.levels[:2]:
                raw = s._read_raw(lv, 700, 400, 300, 200, np.empty((200, 300, 1), np.uint8))
                theirs = np.asarray(ref.read_region((700, 400), lv.native, (300, 200), as_array=True))
                assert np.array_equal(raw[..., 0], theirs.reshape(200, 300))
                assert s.level_mpp(lv)[0] == pytest.approx(float(ref.levels[lv.index].pixel_spacing.width) * 1000)
    finally:
        ref.close()


def test_a_single_dicom_instance_file_opens_too():
    from worker.slides.dicom_slide import dicom_files

    biggest = max(dicom_files(REAL / "dicom-bpaec"), key=lambda p: p.stat().st_size)
    with open_slide(biggest) as s:
        assert s.reader == "wsidicom" and s.mpp_x == pytest.approx(1.29)


def test_the_coarse_dicom_series_is_refused_for_a_half_micron_model():
    with open_slide(REAL / "dicom-bpaec") as s, pytest.raises(SlideError) as info:
        s.analysis_level(0.5, 0.25)
    text = str(info.value)
    assert "no pyramid level near the model's 0.5 µm/px" in text and "never upsampled" in text and "1.29" in text


def test_fluorescence_ndpi_is_converted_and_the_conversion_stated():
    with open_slide(REAL / "test3-TRITC-2-560.ndpi") as s:
        assert s.colour.kind == "fluorescence RGB" and "virtual brightfield" in s.colour.conversion
        lv = s.levels[-1]
        img = s.read_region(lv, 0, 0, lv.width, lv.height)
        assert np.median(img) > 200  # the dark background became glass


def test_ome_tiff_at_40x_is_area_averaged_to_the_models_scale():
    with open_slide(REAL / "OS-1-detail.ome.tif") as s:
        lv = s.analysis_level(0.5, 0.25)
        assert lv.computed and lv.factor == pytest.approx(0.5 / s.mpp_x, rel=1e-3)
        assert s.level_mpp(lv)[0] == pytest.approx(0.5, rel=1e-3)
        got = s.read_region(lv, 0, 0, 128, 128).astype(float)
        # The exact area average of the source, computed independently with fractional pixel weights.
        src = s.read_region(s.levels[0], 0, 0, 300, 300).astype(float)
        f = lv.factor
        edges = np.arange(129) * f

        def weights(n_src):
            w = np.zeros((128, n_src))
            for i in range(128):
                for j in range(int(edges[i]), int(np.ceil(edges[i + 1]))):
                    w[i, j] = max(0.0, min(edges[i + 1], j + 1) - max(edges[i], j))
            return w / w.sum(1, keepdims=True)

        wy, wx = weights(300), weights(300)
        want = np.einsum("iy,yxc,jx->ijc", wy, src, wx)
        assert np.abs(got - want).mean() < 0.6 and np.abs(got - want).max() <= 3


@pytest.fixture(scope="module")
def inferred(tmp_path_factory):
    """`python -m worker infer` once on every slide the built-in model can analyse; {name: (exit, out dir)}."""
    results = {}
    for name, _, _, _, override in BRIGHTFIELD_OR_CONVERTED:
        out = tmp_path_factory.mktemp(name.replace(".", "_"))
        argv = ["infer", str(REAL / name), "--out", str(out), "--device", "cpu"]
        if override is not None:
            argv += ["--mpp-um", str(override)]
        results[name] = (commands.main(argv), out)
    return results


@pytest.mark.parametrize("name", [s[0] for s in BRIGHTFIELD_OR_CONVERTED])
def test_infer_writes_a_valid_pyramidal_overlay_of_the_slides_extent(inferred, name):
    code, out = inferred[name]
    assert code == 0
    stem = name.split(".")[0]
    summary = json.loads((out / f"{stem}.json").read_text())
    slide_w_um = summary["width"] * summary["mpp_um"]
    slide_h_um = summary["height"] * summary["mpp_um_y"]
    with tifffile.TiffFile(out / f"{stem}.overlay.ome.tif") as tif:
        raw = tif.pages.first.description
        assert isinstance(raw, str) and "µm" in raw
        ome = ome_types.from_xml(raw, validate=True)
        px = ome.images[0].pixels
        assert px.physical_size_x_unit.value == "µm" and px.physical_size_y_unit.value == "µm"
        # Covers the slide: at least its extent, at most one overlay pixel more (the OME-XML keeps 10 digits).
        eps = 1e-7 * slide_w_um
        assert slide_w_um - eps <= px.size_x * px.physical_size_x < slide_w_um + px.physical_size_x + eps
        assert slide_h_um - eps <= px.size_y * px.physical_size_y < slide_h_um + px.physical_size_y + eps
        assert len(tif.series[0].levels) >= 2  # pyramidal
        assert tif.series[0].levels[0].shape == (px.size_y, px.size_x)
    # Analysed at the model's scale: a stored level within tolerance, or area-averaged to it exactly.
    analysis = summary["analysis"]
    assert analysis["model_mpp_um"] == 0.5
    assert abs(analysis["mpp_um"] / 0.5 - 1) <= 0.25
    if summary["mpp_um"] < 0.5 * 0.75:
        assert analysis["resampled"] or analysis["level"] > 0
    assert summary["tiles_seen"] > 0


def test_infer_records_the_reader_and_the_fluorescence_conversion(inferred):
    code, out = inferred["test3-TRITC-2-560.ndpi"]
    summary = json.loads((out / "test3-TRITC-2-560.json").read_text())
    assert summary["input"]["reader"] == "openslide" and summary["input"]["format"] == "Hamamatsu NDPI"
    assert "virtual brightfield" in summary["analysis"]["colour_conversion"]
    # 40x NDPI with a x2 pyramid: level 1 (0.456 µm/px) is within tolerance of 0.5, analysed as stored.
    assert summary["analysis"]["level"] == 1 and summary["analysis"]["resampled"] is None
    code, out = inferred["OS-1-detail.ome.tif"]
    summary = json.loads((out / "OS-1-detail.json").read_text())
    assert summary["analysis"]["mpp_um"] == pytest.approx(0.5, rel=1e-3)
    assert "area-averaged" in summary["analysis"]["resampled"]


def test_infer_refuses_the_uncalibrated_tcga_slide_naming_the_flag(tmp_path, capsys):
    code = commands.main(["infer", str(REAL / "tcga-cr-7395-01a-01-ts1.svs"), "--out", str(tmp_path),
                          "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert "no pixel calibration" in err[-1] and "--mpp-um" in err[-1]
    assert not list(tmp_path.glob("*.json"))


def test_infer_refuses_the_coarse_dicom_folder_in_one_line(tmp_path, capsys):
    code = commands.main(["infer", str(REAL / "dicom-bpaec"), "--out", str(tmp_path), "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and "coarser than the model needs" in err[-1] and str(REAL / "dicom-bpaec") in err[-1]


@pytest.mark.parametrize("name", ["CMU-1-Small-Region.svs", "test3-TRITC-2-560.ndpi", "OS-2-ndpi.ome.tif"])
def test_a_partial_upload_of_a_real_slide_is_refused_as_truncated(tmp_path, name):
    data = (REAL / name).read_bytes()
    cut = tmp_path / name
    cut.write_bytes(data[: len(data) * 3 // 5])
    with pytest.raises(SlideError) as info:
        open_slide(cut)
    text = str(info.value)
    assert text.startswith(str(cut)) and "truncated" in text and "brightfield" not in text and "\n" not in text


def test_an_ndpi_under_another_name_still_goes_to_openslide(tmp_path):
    renamed = tmp_path / "scan.tif"
    renamed.write_bytes((REAL / "test3-TRITC-2-560.ndpi").read_bytes())
    with open_slide(renamed) as s:
        assert s.reader == "openslide" and s.mpp_x == pytest.approx(0.2282, abs=5e-4)
