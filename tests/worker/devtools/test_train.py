"""The built-in net's training run, in miniature: a few steps on tiny 20x and 40x slides, packaged, loaded back."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from worker.devtools.synthetic import SyntheticSpec
from worker.devtools.train import MPP, TrainSettings, _read, downsample_area, train
from worker.models.loading import load_model
from worker.models.tinyseg import TINYSEG_NORMALISATION, TinySegNet

TINY = TrainSettings(steps=3, batch=4, crop=64, slides_20x=1, slides_40x=1, slide_px=512, regions=8, heldout_px=1024)


def test_a_few_steps_write_a_model_that_loads_back(tmp_path):
    threads = torch.get_num_threads()
    out = tmp_path / "tiny.pt2"
    lines: list[str] = []
    report = train(out, TINY, log=lines.append)
    assert torch.get_num_threads() == threads  # restored for the caller
    m = load_model(out, "cpu")
    assert (m.name, m.version, m.input_mpp_um, m.tile_size, m.output_stride) == (
        "gpuburst-tinyseg", "2.0.0", 0.5, 256, 4)
    assert m.classes == ["background", "nuclei", "vessel"] and m.normalisation == TINYSEG_NORMALISATION
    assert type(m.module) is TinySegNet  # the eager rebuild of the exported program
    training = m.info["training"]
    assert training == report and training["settings"]["steps"] == 3
    for key, mpp in (("heldout", 0.5), ("heldout_40x", 0.25)):
        held = training[key]
        assert held["slide_mpp_um"] == mpp and held["analysed_mpp_um"] == 0.5 and held["tiles"] > 0
        assert set(held["iou"]) == {"background", "nuclei", "vessel"}
    assert any(line.startswith("step     2/3") for line in lines) and any("held-out" in line for line in lines)


def test_area_downsampling_is_the_rounded_block_mean():
    rgb = np.array([[[0, 0, 1], [1, 1, 1]], [[1, 1, 1], [1, 10, 255]]], np.uint8)  # one 2x2 block
    out = downsample_area(rgb, 2)
    assert out.shape == (1, 1, 3) and out.dtype == np.uint8
    assert out[0, 0].tolist() == [1, 3, 65]  # 3/4 = 0.75 -> 1, 12/4 = 3, 258/4 = 64.5 -> 65 (halves round up)
    big = np.random.default_rng(0).integers(0, 256, (8, 6, 3), dtype=np.uint8)
    want = np.floor(big.reshape(4, 2, 3, 2, 3).astype(float).mean(axis=(1, 3)) + 0.5)
    assert (downsample_area(big, 2) == want).all()
    assert downsample_area(big, 1) is big


class _FakeSlide:
    """Records what the training reader asks for (and returns black pixels)."""

    def __init__(self):
        self.calls = []

    def read_region(self, level, x, y, w, h, out=None):
        self.calls.append((x, y, w, h))
        img = np.zeros((h, w, 3), np.uint8)
        if out is not None:
            out[:] = img
            return out
        return img


@pytest.mark.parametrize("mpp, factor", [(0.5, 1), (0.25, 2)])
def test_regions_and_labels_share_the_half_micron_grid(mpp, factor):
    """A 0.5-µm region at (x, y) reads (x, y) from a 20x slide and (2x, 2y) at twice the size from a 40x one;
    its labels are the spec rendered at the same physical points."""
    spec = SyntheticSpec(1024 * factor, 1024 * factor, mpp, 0.5, 5)
    slide = _FakeSlide()
    out = np.empty((256, 256, 3), np.uint8)
    labels = _read(slide, None, spec, 128, 64, out)
    assert slide.calls == [(128 * factor, 64 * factor, 256 * factor, 256 * factor)]
    assert labels.shape == (64, 64)
    # Output pixel (i, j) is the 4 x 4 block of 0.5-µm pixels at (128 + 4i, 64 + 4j): its centre in µm.
    step_um = 4 * MPP
    want = spec.render(0, 0, 1024 // 4, 1024 // 4, 4 * factor, rgb=False).labels[16 : 16 + 64, 32 : 32 + 64]
    assert step_um == 2.0 and (labels == want).all()
    assert (want > 0).mean() > 0.01  # the region holds structures, so the agreement means something
