"""Model loading: the committed built-in weights, TorchScript files with declared classes, clear errors otherwise."""
# No `from __future__ import annotations` here: TorchScript must see the real `List[str]` class annotation.

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
import torch
from torch import nn

from worker.model import BUILTIN_WEIGHTS, META_FILE, ModelError, TinySegNet, export_torchscript, load_model

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
# torch 2.13 marks TorchScript deprecated; --model still takes TorchScript files, so these tests build them.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


@pytest.fixture(scope="module")
def builtin():
    return load_model(None, CPU)


def test_builtin_weights_are_committed_small_and_safe_to_load():
    assert BUILTIN_WEIGHTS.is_file(), "run python -m worker.train to create the built-in weights"
    assert BUILTIN_WEIGHTS.stat().st_size < 2 * 2**20
    blob = torch.load(BUILTIN_WEIGHTS, map_location="cpu", weights_only=True)  # plain tensors and metadata only
    assert set(blob) == {"state_dict", "meta"}
    held = blob["meta"]["training"]["heldout"]["iou"]
    # The training run's own held-out report (python -m worker.train): the committed net must be a good one.
    assert held["nuclei"] > 0.8 and held["vessel"] > 0.7 and held["background"] > 0.95


def test_builtin_model_is_ready_for_inference(builtin):
    assert builtin.classes == ["background", "nuclei", "vessel"]
    assert builtin.name == "gpuburst-tinyseg" and builtin.version
    assert (builtin.tile_size, builtin.output_stride, builtin.input_mpp_um) == (256, 4, 0.25)
    assert not builtin.module.training
    assert all(not isinstance(m, nn.BatchNorm2d) for m in builtin.module.modules())  # folded for inference
    conv = next(p for p in builtin.module.parameters() if p.dim() == 4)
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert len(builtin.colors) == 3


def test_folding_batchnorm_keeps_the_outputs():
    torch.manual_seed(0)
    net = TinySegNet().eval()
    for m in net.modules():  # non-trivial statistics so that folding has something to do
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    x = torch.rand(2, 3, 128, 128)
    with torch.no_grad():
        before = net(x)
        after = net.fold_batchnorm()(x)
    assert torch.allclose(before, after, atol=1e-4)


def test_torchscript_roundtrip_keeps_metadata_and_outputs(builtin, tmp_path):
    path = export_torchscript(builtin, tmp_path / "m.pt")
    ts = load_model(str(path), CPU)
    assert ts.classes == builtin.classes and ts.name == builtin.name and ts.version == builtin.version
    assert (ts.tile_size, ts.output_stride, ts.input_mpp_um) == (256, 4, 0.25)
    x = torch.rand(2, 3, 256, 256).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        assert torch.allclose(builtin.module(x), ts.module(x), atol=1e-4)


class _WithClasses(nn.Module):
    classes: List[str]

    def __init__(self, n: int = 2, stride: int = 4):
        super().__init__()
        self.classes = [f"c{i}" for i in range(n)]
        self.conv = nn.Conv2d(3, n, stride, stride=stride)

    def forward(self, x):
        return self.conv(x)


def test_torchscript_with_classes_attribute(tmp_path):
    path = tmp_path / "attr.pt"
    torch.jit.save(torch.jit.script(_WithClasses(2)), str(path))
    m = load_model(str(path), CPU)
    assert m.classes == ["c0", "c1"] and m.name == "attr" and m.version == "unknown"
    assert m.input_mpp_um is None  # undeclared: run at the slide's own resolution


def test_torchscript_without_classes_is_refused(tmp_path):
    path = tmp_path / "anon.pt"
    torch.jit.save(torch.jit.script(nn.Conv2d(3, 2, 4, stride=4)), str(path))
    with pytest.raises(ModelError) as info:
        load_model(str(path), CPU)
    msg = str(info.value)
    assert msg.startswith(f"{path}: the TorchScript model declares no classes") and META_FILE in msg and "\n" not in msg


def test_torchscript_whose_output_does_not_match_its_classes(tmp_path):
    path = tmp_path / "wrong.pt"
    meta = {"classes": ["background", "a", "b"], "tile_size": 256, "output_stride": 4}
    torch.jit.save(torch.jit.script(nn.Conv2d(3, 2, 4, stride=4)), str(path), _extra_files={META_FILE: json.dumps(meta)})
    with pytest.raises(ModelError, match=r"output shape \(1, 2, 64, 64\) for a 256px tile, expected \(1, 3, 64, 64\)"):
        load_model(str(path), CPU)


@pytest.mark.parametrize(
    "write, message",
    [
        (lambda p: torch.save({"w": torch.zeros(2)}, p), "not a TorchScript archive"),
        (lambda p: p.write_text("hello"), "not a TorchScript archive"),
    ],
)
def test_non_torchscript_files_are_refused(tmp_path, write, message):
    path = tmp_path / "x.pt"
    write(path)
    with pytest.raises(ModelError, match=message):
        load_model(str(path), CPU)


def test_missing_model_file(tmp_path):
    with pytest.raises(ModelError, match="no such model file"):
        load_model(str(tmp_path / "none.pt"), CPU)


def test_bad_metadata_json(tmp_path):
    path = tmp_path / "j.pt"
    torch.jit.save(torch.jit.script(nn.Conv2d(3, 2, 4, stride=4)), str(path), _extra_files={META_FILE: "{oops"})
    with pytest.raises(ModelError, match=f"{META_FILE} inside the archive is not JSON"):
        load_model(str(path), CPU)


def test_no_torchvision_needed():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = "import sys, worker.model, worker.pipeline; sys.exit('torchvision' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0
