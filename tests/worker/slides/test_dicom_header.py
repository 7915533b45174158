"""The bounded DICOM header reader: the real series read as pydicom reads it, a header declaring 10^7 frames (or
more frames than its matrix holds, or a deflated data set) refused in one line from a few hundred bytes before
pydicom or wsidicom is called, and each frame's JPEG header checked against the frame before wsidicom decodes it."""
from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crafted import dicom  # noqa: E402
from shared_slides import REAL, needs_real_slides  # noqa: E402

from worker.slides import DicomSlide, SlideError, SlideLimitError, SlideLimits, open_slide  # noqa: E402
from worker.slides.dicom_header import read_dicom_header  # noqa: E402
from worker.slides.dicom_slide import dicom_files  # noqa: E402

SERIES = REAL / "dicom-bpaec"


@needs_real_slides
def test_the_real_series_reads_as_pydicom_reads_it():
    import pydicom

    total = 0
    for f in dicom_files(SERIES):
        h = read_dicom_header(f, SlideLimits(), already=total, slide=SERIES)
        total += h.header_bytes
        with open(f, "rb") as fh:
            ds = pydicom.dcmread(fh, stop_before_pixels=True)
            assert h.header_bytes == fh.tell()  # where pydicom stopped: the pixel data
        assert (h.get("rows"), h.get("columns"), h.get("frames", 1), h.get("samples")) == (
            ds.Rows, ds.Columns, int(ds.get("NumberOfFrames", 1)), ds.SamplesPerPixel)
        assert h.get("total_columns") == int(ds.get("TotalPixelMatrixColumns", 0))
        assert h.transfer_syntax == ds.file_meta.TransferSyntaxUID
    assert total == 1_754_950


def _refused_before_any_library(p: Path, monkeypatch, kind=SlideLimitError) -> str:
    import wsidicom

    opened = []
    monkeypatch.setattr(wsidicom.WsiDicom, "open", lambda *a, **k: opened.append(a))
    with pytest.raises(kind) as info:
        open_slide(p)
    assert opened == [] and type(info.value) is kind
    return str(info.value)


def test_ten_million_frames_are_refused_from_a_few_hundred_bytes(tmp_path, monkeypatch):
    p = dicom(tmp_path / "frames.dcm", frames=10**7, rows=16, columns=16, total=(50_000, 51_200))
    assert p.stat().st_size < 1000
    text = _refused_before_any_library(p, monkeypatch)
    assert text == (f"{p}: the instance (VOLUME) declares 10,000,000 frames over the limit of 2,097,152 "
                    f"(SLIDE_MAX_TILES)")
    tracemalloc.start()
    try:
        with pytest.raises(SlideLimitError):
            read_dicom_header(p, SlideLimits())
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()


def test_in_a_folder_the_instance_is_named(tmp_path, monkeypatch):
    case = tmp_path / "case"
    case.mkdir()
    dicom(case / "0001", frames=4, rows=256, columns=256, total=(512, 512))
    dicom(case / "0002", frames=10**7, rows=16, columns=16, total=(50_000, 51_200))
    text = _refused_before_any_library(case, monkeypatch)
    assert text == (f"{case}: instance 0002 (VOLUME) declares 10,000,000 frames over the limit of 2,097,152 "
                    f"(SLIDE_MAX_TILES)")


@pytest.mark.parametrize("kw, line, kind", [
    ({"frames": 10**6, "rows": 256, "columns": 256, "total": (512, 512)},
     "the instance (VOLUME) declares 1,000,000 frames, more than the 4 its 512 × 512 px matrix in 256 × 256 px "
     "frames holds (a damaged or crafted file)", SlideError),
    ({"frames": 4, "rows": 20000, "columns": 20000, "total": (40000, 40000)},
     "the instance (VOLUME) declares frames of 20000 × 20000 px over the limit of 8192 px per side "
     "(SLIDE_MAX_TILE_PX)", SlideLimitError),
    ({"frames": 4, "rows": 256, "columns": 256, "total": (300_000, 300_000)},
     "the instance (VOLUME) declares 300000 × 300000 px (9.0e10 px) over the limit of 4.0e10 px (SLIDE_MAX_PIXELS)",
     SlideLimitError),
    ({"frames": 4, "rows": 256, "columns": 256, "total": (512, 512), "syntax": "1.2.840.10008.1.2.1.99"},
     "the instance: transfer syntax 1.2.840.10008.1.2.1.99 (deflated explicit VR little endian) is not read",
     SlideError),
], ids=["lying-count", "huge-frames", "huge-matrix", "deflated"])
def test_what_a_header_declares_is_refused_in_one_line(tmp_path, monkeypatch, kw, line, kind):
    p = dicom(tmp_path / "x.dcm", **kw)
    assert _refused_before_any_library(p, monkeypatch, kind) == f"{p}: {line}"


def test_a_header_cut_short_is_a_truncated_file(tmp_path):
    p = dicom(tmp_path / "x.dcm", frames=4, rows=256, columns=256, total=(512, 512))
    p.write_bytes(p.read_bytes()[:300])
    with pytest.raises(SlideError, match=r"x.dcm: truncated: element 0008,0016 of the instance runs past the end"):
        read_dicom_header(p, SlideLimits())


@needs_real_slides
def test_a_frame_whose_jpeg_declares_more_than_the_frame_is_refused_before_wsidicom_decodes_it(monkeypatch):
    import imagecodecs
    import wsidicom

    big = imagecodecs.jpeg8_encode(np.zeros((2048, 2048), np.uint8))
    monkeypatch.setattr(wsidicom.WsiDicom, "read_encoded_tile", lambda *a, **k: big)
    decoded = []
    monkeypatch.setattr(wsidicom.WsiDicom, "read_region", lambda *a, **k: decoded.append(a))
    with pytest.raises(SlideLimitError) as info:
        DicomSlide(SERIES)
    assert str(info.value).endswith(": its JPEG data declares 2048 × 2048 px, more than the 1024 × 1024 px the file "
                                    "declares for it (a decompression bomb or a damaged file)")
    assert decoded == []
