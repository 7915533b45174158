"""The CPU fast path: CpuNet computes the built-in net's function with less work, its normalisation folded in."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_helpers import CPU, LAB_NORM, random_rgb  # noqa: E402

from worker.cpu_net import CpuNet, cpu_net  # noqa: E402
from worker.devtools.synthetic import write_synthetic_slide  # noqa: E402
from worker.inference import InferenceSettings, Predictor  # noqa: E402
from worker.models.export import export_torchscript, package_model  # noqa: E402
from worker.models.loading import load_model  # noqa: E402
from worker.models.tinyseg import TinySegNet  # noqa: E402
from worker.slides import open_slide  # noqa: E402


@pytest.fixture(scope="module")
def model():
    return load_model(None, CPU)


@pytest.fixture(scope="module")
def tiles(tmp_path_factory) -> np.ndarray:
    """The first 12 tiles (256 px, row by row) of a half-tissue synthetic slide, read as the pipeline reads them."""
    path = write_synthetic_slide(tmp_path_factory.mktemp("inf") / "s.ome.tif", 1280, 1024, tissue_fraction=0.5, seed=8)
    with open_slide(path) as slide:
        lv = slide.levels[0]
        tiles = [slide.read_region(lv, tx * 256, ty * 256, 256, 256) for ty in range(4) for tx in range(5)]
        return np.stack(tiles[:12])


def test_cpu_fast_path_folds_a_per_channel_normalisation(tmp_path):
    """A packaged TinySegNet with its own per-channel mean/std gets the CPU fast path, and computes the program's
    logits on the worker's prepared input (the normalisation folded into the stem, per channel)."""
    torch.manual_seed(5)
    net = TinySegNet().eval()
    for m in net.modules():  # non-trivial statistics, as after training
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    path = package_model(net, tmp_path / "c.pt2", classes=["bg", "a", "b"], input_mpp_um=0.5, normalisation=LAB_NORM)
    m = load_model(path, CPU)
    fast = cpu_net(m, "off")
    assert isinstance(fast, CpuNet) and Predictor(m, InferenceSettings(amp="off"))._cpu_net is fast
    rgb = random_rgb(3, seed=9)
    with torch.inference_mode():
        want = m.module(m.prepare(rgb))
        got = fast.logits(rgb.permute(0, 3, 1, 2).float())
        plain = CpuNet(m.module, torch.float32, 256).logits(rgb.permute(0, 3, 1, 2).float())  # no normalisation
    tolerance = 1e-4 * max(1.0, want.abs().max().item())
    assert (got - want).abs().max().item() < tolerance
    assert (plain - want).abs().max().item() > 100 * tolerance  # the folding is what makes them agree


@pytest.mark.parametrize("fused", [True, False])
def test_cpu_net_computes_the_models_function(model, tiles, fused):
    """The re-expressed net (scaling folded, head split, fused ops, packed weights) in float32 gives the module's
    own logits, for every batch size (the last batch of a slide is partial); without oneDNN's fused ops too."""
    norm = model.normalisation
    net = CpuNet(model.module, torch.float32, model.tile_size, norm.mean, norm.std)
    if not fused:
        net._fused = net._pack = net._pack_transposed = False
    tiles = torch.from_numpy(tiles[:5]).permute(0, 3, 1, 2)
    with torch.inference_mode():
        for n in (1, 2, 5):
            x = tiles[:n].float()
            want = model.module(model.prepare(x.permute(0, 2, 3, 1)))
            got = net.logits(x)
            assert got.shape == want.shape
            assert (got - want).abs().max().item() < 1e-4 * max(1.0, want.abs().max().item())


def test_cpu_net_bf16_agrees_with_the_float32_module_on_tissue(model, tiles):
    """What the pipeline computes on CPU (bf16 where native) vs what the naive loop computes (the fp32 module)."""
    pred = Predictor(model)
    assert pred._cpu_net is cpu_net(model, pred.settings.amp) is not None  # built once per process
    with torch.inference_mode():
        want = model.module(model.prepare(torch.from_numpy(tiles))).argmax(1).numpy()
    got = pred.predict(tiles)
    assert got.dtype == np.uint8 and got.shape == want.shape
    assert (got == want).mean() > 0.999
    assert (want > 0).mean() > 0.01  # the tiles hold structures, so the agreement means something


def test_other_models_run_as_themselves(model, tmp_path):
    """A TorchScript model, or a built-in net whose forward is not the one CpuNet re-expresses, runs unchanged."""
    import copy
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = load_model(str(export_torchscript(model, tmp_path / "m.pt")), CPU)
    assert cpu_net(scripted, "bf16") is None and Predictor(scripted)._cpu_net is None
    changed = copy.copy(model)
    changed.module = copy.deepcopy(model.module)
    changed.module.forward = lambda x: model.module(1.0 - x)  # not the function CpuNet computes
    assert cpu_net(changed, "off") is None  # refused by the float32 self-check
    batch = np.full((1, 256, 256, 3), 246, np.uint8)
    assert Predictor(scripted).predict(batch).shape == (1, 64, 64)
