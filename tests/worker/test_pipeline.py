"""process_slide end to end: outputs, calibration carried to the overlay, accuracy, errors, and flat memory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import imagecodecs
import ome_types
import pytest
import tifffile
import torch

from worker.devtools.synthetic import SyntheticSpec, write_synthetic_slide
from worker.devtools.train import iou_per_class
from worker.models.loading import load_model
from worker.pipeline import PipelineSettings, process_slide
from worker.slides import SlideError

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def model():
    return load_model(None, CPU)


@pytest.fixture(scope="module")
def run(model, tmp_path_factory):
    """One 4096 px slide at the model's 0.5 µm/px (seed 4242, never trained on) through the pipeline."""
    d = tmp_path_factory.mktemp("pipe")
    spec = SyntheticSpec(4096, 4096, 0.5, 0.3, seed=4242)
    slide = write_synthetic_slide(d / "S-1.ome.tif", spec.width, spec.height, spec.mpp_um, spec.tissue_fraction,
                                  spec.seed)
    calls = []
    summary = process_slide(slide, d / "out", model, slide_id="S-1",
                            progress=lambda done, total: calls.append((done, total)))
    return spec, d / "out", summary, calls


def test_outputs_and_summary(run):
    spec, out, summary, _ = run
    assert sorted(p.name for p in out.iterdir()) == ["S-1.json", "S-1.overlay.ome.tif", "S-1.preview.png"]
    on_disk = json.loads((out / "S-1.json").read_text(encoding="utf-8"))
    assert on_disk == summary
    # The JSON is the completion marker: written after the overlay and the preview.
    assert os.stat(out / "S-1.json").st_mtime_ns >= max(
        os.stat(out / n).st_mtime_ns for n in ("S-1.overlay.ome.tif", "S-1.preview.png"))
    assert summary["slide_id"] == "S-1" and summary["slide"] == "S-1.ome.tif"
    assert (summary["width"], summary["height"], summary["mpp_um"]) == (4096, 4096, 0.5)
    assert summary["input"]["reader"] == "tifffile" and summary["input"]["format"] == "OME-TIFF"
    assert summary["analysis"]["resampled"] is None and summary["analysis"]["colour_conversion"] is None
    assert summary["tiles_total"] == 256 and 0 < summary["tiles_seen"] < 256
    assert summary["tissue_fraction"] == pytest.approx(0.3, abs=0.04)
    assert summary["model"]["name"] == "gpuburst-tinyseg" and summary["model"]["version"]
    assert summary["device"].startswith("cpu (")
    assert set(summary["timings_s"]) >= {"read", "infer", "write", "total"}
    assert all(v >= 0 for v in summary["timings_s"].values())
    px = summary["class_pixels"]
    assert sum(px.values()) == 1024 * 1024
    for name, n in px.items():  # an overlay pixel is 2 µm x 2 µm here
        assert summary["class_area_um2"][name] == pytest.approx(n * 4.0)
    assert summary["units"]["class_area_um2"] == "µm²"
    assert summary["tissue_area_um2"] == pytest.approx(summary["tissue_fraction"] * 4096 * 4096 * 0.25, rel=1e-3)


def test_progress_reports_every_tissue_tile(run):
    _, _, summary, calls = run
    n = summary["tiles_seen"]
    assert calls[0] == (0, n) and calls[-1] == (n, n)
    assert all(t == n for _, t in calls) and [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_overlay_covers_the_slide_in_micrometres(run):
    spec, out, summary, _ = run
    with tifffile.TiffFile(out / "S-1.overlay.ome.tif") as tif:
        levels = tif.series[0].levels
        assert len(levels) >= 2
        ome = ome_types.from_xml(tif.pages.first.description, validate=True)
        assert 'PhysicalSizeXUnit="µm"' in tif.pages.first.description
        px = ome.images[0].pixels
        # Same physical extent as the 0.5 µm slide: 4096 px x 0.5 µm = 2048 µm = 1024 px x 2 µm.
        assert px.physical_size_x == pytest.approx(2.0) and px.physical_size_x_unit.value == "µm"
        assert px.size_x * px.physical_size_x == pytest.approx(spec.width * spec.mpp_um)
        assert px.size_y * px.physical_size_y == pytest.approx(spec.height * spec.mpp_um)
        for k, lv in enumerate(levels):  # every level's resolution tags cover the same extent too
            num, den = lv.keyframe.tags["XResolution"].value
            assert lv.shape[1] / (num / den) * 1e4 == pytest.approx(spec.width * spec.mpp_um, rel=0.01)


def test_model_finds_the_structures(run):
    spec, out, summary, _ = run
    pred = tifffile.imread(out / "S-1.overlay.ome.tif")
    truth = spec.labels(4)
    assert pred.shape == truth.shape
    iou = iou_per_class(pred, truth, 3)
    assert iou[1] > 0.8, f"nuclei IoU {iou[1]:.3f}"
    assert iou[2] > 0.7, f"vessel IoU {iou[2]:.3f}"
    # Nothing is found on glass: every foreground pixel lies in tissue.
    tissue = spec.tissue(4)
    assert (pred[~tissue] > 0).mean() < 0.001


def test_preview_is_a_colour_png_of_the_slide_beside_its_classes(run):
    _, out, _, _ = run
    img = imagecodecs.png_decode((out / "S-1.preview.png").read_bytes())
    assert img.ndim == 3 and img.shape[2] == 3 and 512 <= img.shape[0] and img.shape[1] <= 2 * 1024 + 3 * 16
    h, w = img.shape[:2]
    panels = img[: int(h * 0.8)]  # above the legend
    slide, classes = panels[:, : w // 2], panels[:, w // 2:]
    assert (slide[..., 2] > slide[..., 0] + 60).any()  # the slide as scanned: its nuclei's hematoxylin tint
    yellow = (classes[..., 0] > 200) & (classes[..., 1] > 180) & (classes[..., 2] < 80)
    assert yellow.any()  # the nuclei class, in a colour no stain takes (worker/preview.py)


def test_every_tile_without_skipping(model, tmp_path):
    slide = write_synthetic_slide(tmp_path / "a.ome.tif", 1024, 768, mpp_um=0.5, seed=1)
    s = process_slide(slide, tmp_path / "o", model, slide_id="a", settings=PipelineSettings(skip_background=False))
    assert s["tiles_seen"] == s["tiles_total"] == 12


def test_level0_is_never_read_whole(model, tmp_path, monkeypatch):
    slide = write_synthetic_slide(tmp_path / "w.ome.tif", 3072, 3072, seed=2)
    real = tifffile.TiffPage.asarray

    def guarded(page, *a, **k):
        assert page.imagewidth <= 1024, f"asarray() of a {page.imagewidth}px page"
        return real(page, *a, **k)

    monkeypatch.setattr(tifffile.TiffPage, "asarray", guarded)
    monkeypatch.setattr(tifffile.TiffFile, "asarray", lambda *a, **k: pytest.fail("TiffFile.asarray called"))
    s = process_slide(slide, tmp_path / "o", model, slide_id="w")
    assert s["tiles_seen"] > 0


def test_not_a_slide_is_a_slide_error_and_leaves_nothing(model, tmp_path):
    bad = tmp_path / "notes.tif"
    bad.write_text("this is not a slide")
    with pytest.raises(SlideError) as info:
        process_slide(bad, tmp_path / "o", model, slide_id="n")
    assert str(info.value).startswith(f"{bad}: not a slide format this worker reads") and "\n" not in str(info.value)
    assert list((tmp_path / "o").iterdir()) == []


def test_truncated_slide_is_a_slide_error_and_leaves_nothing(model, tmp_path):
    p = write_synthetic_slide(tmp_path / "t.ome.tif", 2048, 2048, tissue_fraction=0.6, seed=3)
    p.write_bytes(p.read_bytes()[: p.stat().st_size * 2 // 3])
    with pytest.raises(SlideError,
                       match=r"truncated: the file is [\d,]+ bytes but .+ \(a partial upload or copy\?\)"):
        process_slide(p, tmp_path / "o", model, slide_id="t", settings=PipelineSettings(skip_background=False))
    assert list((tmp_path / "o").iterdir()) == []


def test_uncalibrated_slide_needs_an_explicit_mpp(model, tmp_path):
    p = write_synthetic_slide(tmp_path / "u.ome.tif", 1024, 1024, calibrated=False, seed=4)
    with pytest.raises(SlideError, match="no pixel calibration"):
        process_slide(p, tmp_path / "o", model, slide_id="u")
    s = process_slide(p, tmp_path / "o", model, slide_id="u", settings=PipelineSettings(mpp_um=0.5))
    assert s["mpp_source"] == "override" and s["overlay"]["mpp_um"] == pytest.approx(2.0)


def test_a_stored_level_at_the_models_resolution_is_analysed_as_it_is(model, tmp_path):
    p = write_synthetic_slide(tmp_path / "f.ome.tif", 2048, 2048, mpp_um=0.25, level_factor=2, seed=5)
    s = process_slide(p, tmp_path / "o", model, slide_id="f")
    assert s["analysis"]["level"] == 1 and s["analysis"]["mpp_um"] == pytest.approx(0.5)
    assert s["analysis"]["resampled"] is None
    assert s["overlay"]["width"] == 256 and s["overlay"]["mpp_um"] == pytest.approx(2.0)  # still 512 µm across


def test_a_40x_scan_with_a_x4_pyramid_is_area_averaged_to_the_models_scale(model, tmp_path):
    """No stored level near 0.5 µm/px (0.25, 1, 4): level 0 is read and area-averaged 2x on the fly, and the
    model still finds the structures, which have physical sizes."""
    spec = SyntheticSpec(4096, 4096, 0.25, 0.35, seed=4343)
    p = write_synthetic_slide(tmp_path / "x4.ome.tif", spec.width, spec.height, spec.mpp_um, spec.tissue_fraction,
                              spec.seed, level_factor=4)
    s = process_slide(p, tmp_path / "o", model, slide_id="x4")
    a = s["analysis"]
    assert a["level"] == 0 and a["mpp_um"] == pytest.approx(0.5) and "area-averaged 2x from level 0" in a["resampled"]
    assert (a["width"], a["height"]) == (2048, 2048)
    assert s["overlay"]["mpp_um"] == pytest.approx(2.0) and s["overlay"]["width"] * 2.0 == pytest.approx(4096 * 0.25)
    pred = tifffile.imread(tmp_path / "o" / "x4.overlay.ome.tif")
    truth = spec.labels(8)  # one overlay pixel = 8 level-0 pixels of this 0.25 µm/px slide
    assert pred.shape == truth.shape
    iou = iou_per_class(pred, truth, 3)
    assert iou[1] > 0.75 and iou[2] > 0.65, iou


def test_scan_without_a_level_near_the_models_resolution_is_refused(model, tmp_path):
    p = write_synthetic_slide(tmp_path / "c.ome.tif", 1024, 1024, mpp_um=1.0, seed=6)
    with pytest.raises(SlideError, match=r"no pyramid level near the model's 0\.5 µm/px .*never upsampled"):
        process_slide(p, tmp_path / "o", model, slide_id="c")


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden"])
def test_slide_id_must_be_a_plain_name(model, tmp_path, bad):
    with pytest.raises(ValueError, match="slide_id"):
        process_slide(tmp_path / "x.tif", tmp_path, model, slide_id=bad)


_MEASURE = r"""
import json, resource, sys, time
from pathlib import Path
what, path = sys.argv[1], Path(sys.argv[2])
if what == "write":
    from worker.devtools.synthetic import write_synthetic_slide
    side = int(sys.argv[3])
    write_synthetic_slide(path, side, side, 0.25, 0.15, 77)
else:
    import torch
    from worker.models.loading import load_model
    from worker.pipeline import process_slide
    m = load_model(None, torch.device("cpu"))
    process_slide(path, path.parent / "out", m, slide_id=path.stem.split(".")[0])
# Peak RSS of this process's own address space (VmHWM). Not ru_maxrss: Linux carries the forking parent's high-water
# mark across exec into it, so a large pytest process would make every child look as large as itself.
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
peak_kb = int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"maxrss_mb": peak_kb / 1024}))
"""


def _measure(*args: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", _MEASURE, *args], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])["maxrss_mb"]


def test_memory_stays_flat_as_the_slide_grows(tmp_path):
    """A 24k x 24k slide (1.7 GB of RGB at level 0) against one 4x smaller in area, each in a fresh process.

    Bounds: writing or processing the large slide may use at most 20 MB more peak RSS than the small one (holding
    its level 0 would cost 1.3 GB more, holding its whole level-0 class map 27 MB more; measured: 8-12 MB, ~6 MB
    of it the larger slide's finer preview thumbnail and preview labels), and processing stays under 1 GB in all
    (torch and the model alone are ~245 MB of it; measured: 290-302 MB).
    """
    small, large = tmp_path / "small.ome.tif", tmp_path / "large.ome.tif"
    w_small = _measure("write", str(small), "12288")
    w_large = _measure("write", str(large), "24576")
    p_small = _measure("process", str(small))
    p_large = _measure("process", str(large))
    report = f"write {w_small:.0f} -> {w_large:.0f} MB, process {p_small:.0f} -> {p_large:.0f} MB"
    assert w_large - w_small < 20, report
    assert p_large - p_small < 20, report
    assert p_large < 1024, report
    summary = json.loads((tmp_path / "out" / "large.json").read_text(encoding="utf-8"))
    # 0.25 µm/px slides for the 0.5 µm/px model: level 0 area-averaged on the fly, ~15 % tissue of 48 x 48 tiles.
    assert summary["width"] == 24576 and summary["tiles_seen"] > 250 and summary["analysis"]["resampled"]
    print(report)
