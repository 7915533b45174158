"""Model loading: the built-in .pt2, a lab's torch.export program or TorchScript file, package_model, one-line errors."""
# No `from __future__ import annotations` here: TorchScript must see the real `List[str]` class annotation.

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import List

import numpy as np
import pytest
import torch
from torch import nn

from worker import cli
from worker.model import (
    BUILTIN_WEIGHTS, EXPORT_MAX_BATCH, META_FILE, TINYSEG_ARCHITECTURE, TINYSEG_NORMALISATION, ModelError,
    Normalisation, TinySegNet, export_torchscript, load_model, model_format, module_from_factory, package_model,
)

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
# torch 2.13 marks TorchScript deprecated; --model still takes TorchScript files, so these tests build them.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


@pytest.fixture(scope="module")
def builtin():
    return load_model(None, CPU)


def _meta_of(path) -> dict:
    extra = {META_FILE: ""}
    with open(path, "rb") as f:
        torch.export.load(f, extra_files=extra)
    return json.loads(extra[META_FILE])


def _rgb(n: int, seed: int = 0, side: int = 256) -> torch.Tensor:
    return torch.randint(0, 256, (n, side, side, 3), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


# --- the built-in model ------------------------------------------------------------------------------------------

def test_builtin_weights_are_a_small_committed_torch_export_program():
    assert BUILTIN_WEIGHTS.name == "tinyseg-v2.pt2"
    assert BUILTIN_WEIGHTS.is_file(), "run python -m worker.train to create the built-in weights"
    assert BUILTIN_WEIGHTS.stat().st_size < 2 * 2**20
    assert model_format(BUILTIN_WEIGHTS) == "torch.export"
    meta = _meta_of(BUILTIN_WEIGHTS)
    assert meta["version"] == "2.0.0" and meta["input_mpp_um"] == 0.5
    assert meta["architecture"] == TINYSEG_ARCHITECTURE and meta["normalisation"] == {"mean": [0.5] * 3, "std": [0.25] * 3}
    held = meta["training"]["heldout"]
    assert held["slide_mpp_um"] == 0.5 and held["tiles"] > 20
    # The training run's own held-out report (python -m worker.train): the committed net must be a good one.
    iou = held["iou"]
    assert iou["nuclei"] > 0.8 and iou["vessel"] > 0.7 and iou["background"] > 0.95


def test_builtin_model_is_ready_for_inference(builtin):
    assert builtin.classes == ["background", "nuclei", "vessel"]
    assert builtin.name == "gpuburst-tinyseg" and builtin.version == "2.0.0"
    assert (builtin.tile_size, builtin.output_stride, builtin.input_mpp_um) == (256, 4, 0.5)
    assert builtin.normalisation == TINYSEG_NORMALISATION
    # Loaded through the same .pt2 loader as a lab's file, then rebuilt as the eager net (the CPU fast path's input).
    assert builtin.format == "torch.export (eager TinySegNet)" and type(builtin.module) is TinySegNet
    assert builtin.max_batch == EXPORT_MAX_BATCH and "eager_rebuild" not in builtin.info
    assert not builtin.module.training
    assert all(not isinstance(m, nn.BatchNorm2d) for m in builtin.module.modules())  # folded for inference
    conv = next(p for p in builtin.module.parameters() if p.dim() == 4)
    assert conv.is_contiguous(memory_format=torch.channels_last)
    assert len(builtin.colors) == 3
    assert builtin.info["training"]["heldout"]["iou"]["nuclei"] > 0.8


def test_builtin_eager_net_computes_the_exported_programs_logits(builtin):
    with open(BUILTIN_WEIGHTS, "rb") as f:
        program = torch.export.load(f).module()
    with torch.inference_mode():
        for n in (1, 5):  # the exported batch dimension is dynamic
            x = builtin.prepare(_rgb(n, seed=n))
            want = program(x)
            got = builtin.module(x)
            assert got.shape == want.shape == (n, 3, 64, 64)
            assert (got - want).abs().max().item() < 1e-4 * max(1.0, want.abs().max().item())


def test_prepare_normalises_as_the_metadata_says(builtin):
    rgb = _rgb(2)
    x = builtin.prepare(rgb)
    want = (rgb.permute(0, 3, 1, 2).double() / 255 - 0.5) / 0.25
    assert x.dtype == torch.float32 and x.shape == (2, 3, 256, 256)
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(x.double(), want, atol=1e-5)
    per_channel = Normalisation(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)).apply(rgb)
    want = (rgb.permute(0, 3, 1, 2).double() / 255 - torch.tensor([0.485, 0.456, 0.406]).double().view(1, 3, 1, 1)) \
        / torch.tensor([0.229, 0.224, 0.225]).double().view(1, 3, 1, 1)
    assert torch.allclose(per_channel.double(), want, atol=1e-5)
    assert torch.equal(Normalisation().apply(rgb), rgb.permute(0, 3, 1, 2).float() / 255)  # the default: [0, 1]
    assert rgb.dtype == torch.uint8  # the caller's batch is untouched


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


# --- a lab's own model: package_model and the .pt2 loader ---------------------------------------------------------

class _LabNet(nn.Module):
    """A stand-in for a lab's model: stride 4, a per-channel response so that the normalisation matters."""

    def __init__(self, n: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 4, stride=4)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Conv2d(8, n, 1)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))))


LAB_NORM = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


@pytest.fixture(scope="module")
def lab_pt2(tmp_path_factory):
    torch.manual_seed(1)
    net = _LabNet()
    path = package_model(net, tmp_path_factory.mktemp("lab") / "lab.pt2", classes=["background", "gland", "stroma"],
                         input_mpp_um=0.5, normalisation=LAB_NORM, colors=[[0, 0, 0], [1, 2, 3], [4, 5, 6]],
                         name="lab-net", version="3.1", extra={"licence": "internal"})
    return net, path


def test_package_model_roundtrip_keeps_metadata_outputs_and_dynamic_batch(lab_pt2):
    net, path = lab_pt2
    assert model_format(path) == "torch.export"
    m = load_model(str(path), CPU)
    assert (m.name, m.version, m.classes) == ("lab-net", "3.1", ["background", "gland", "stroma"])
    assert (m.tile_size, m.output_stride, m.input_mpp_um, m.max_batch) == (256, 4, 0.5, EXPORT_MAX_BATCH)
    assert m.colors == [(0, 0, 0), (1, 2, 3), (4, 5, 6)] and m.info == {"licence": "internal"}
    assert m.normalisation == Normalisation(tuple(LAB_NORM["mean"]), tuple(LAB_NORM["std"]))
    assert m.format == "torch.export" and not isinstance(m.module, _LabNet)  # runs as exported
    net.eval()
    with torch.inference_mode():
        for n in (1, 5):
            rgb = _rgb(n, seed=n)
            got = m.module(m.prepare(rgb))
            want = net(Normalisation(tuple(LAB_NORM["mean"]), tuple(LAB_NORM["std"])).apply(rgb))
            assert got.shape == (n, 3, 64, 64) and torch.allclose(got, want, atol=1e-5)
            # The worker's normalisation is what the program sees: the unnormalised input gives other logits.
            assert not torch.allclose(got, net(rgb.permute(0, 3, 1, 2).float() / 255), atol=1e-3)


def test_a_lab_pt2_runs_in_the_predictor(lab_pt2):
    from worker.inference import InferenceSettings, Predictor

    m = load_model(str(lab_pt2[1]), CPU)
    pred = Predictor(m, InferenceSettings(batch_size=5, amp="off"))
    assert pred._cpu_net is None  # not a TinySegNet: the program itself runs
    out = pred.predict(_rgb(5).numpy())
    assert out.shape == (5, 64, 64) and out.dtype == np.uint8
    with torch.inference_mode():
        want = m.module(m.prepare(_rgb(5))).argmax(1).numpy()
    assert (out == want).all()


def test_a_packaged_tinysegnet_runs_eagerly_with_its_own_weights(tmp_path):
    torch.manual_seed(2)
    net = TinySegNet(n_classes=4, width=16, deep_width=24).eval()
    path = package_model(net, tmp_path / "t.pt2", classes=["bg", "a", "b", "c"], input_mpp_um=0.25, version="1")
    meta = _meta_of(path)
    assert meta["architecture"] == TINYSEG_ARCHITECTURE and meta["arch"] == {"n_classes": 4, "width": 16, "deep_width": 24}
    m = load_model(path, CPU)
    assert type(m.module) is TinySegNet and m.format == "torch.export (eager TinySegNet)"
    rgb = _rgb(2)
    with torch.inference_mode():
        assert torch.allclose(m.module(m.prepare(rgb)), net(m.prepare(rgb)), atol=1e-4)


class _NotQuiteTinySeg(TinySegNet):
    """TinySegNet's parameters, another function: the loader must notice and run the program instead."""

    def forward(self, x):
        return -super().forward(x)


def test_claimed_tinysegnet_that_computes_something_else_runs_as_exported(tmp_path):
    torch.manual_seed(3)
    net = _NotQuiteTinySeg().eval()
    path = package_model(net, tmp_path / "n.pt2", classes=["bg", "a", "b"], input_mpp_um=0.5,
                         architecture=TINYSEG_ARCHITECTURE, arch=net.arch_kwargs())
    m = load_model(path, CPU)
    assert type(m.module) is not TinySegNet and m.format == "torch.export"
    assert "other logits" in m.info["eager_rebuild"]
    x = m.prepare(_rgb(1))
    with torch.inference_mode():
        assert torch.allclose(m.module(x), net(x), atol=1e-4)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"input_mpp_um": 0.01}, "input_mpp_um=0.01: must be the µm per pixel the model analyses at, a number from 0.05 to 20"),
    ({"input_mpp_um": 50}, "input_mpp_um=50: must be"),
    ({"input_mpp_um": None}, "input_mpp_um is missing"),
    ({"normalisation": {"mean": [0.5, 0.5], "std": [1, 1, 1]}}, "normalisation={'mean': [0.5, 0.5], 'std': [1, 1, 1]}: mean must be a list of 3 numbers"),
    ({"normalisation": {"mean": [0, 0, 0], "std": [1, 0, 1]}}, "std must be 3 numbers > 0"),
    ({"classes": ["background"]}, "classes=['background']: must list 2-256 classes"),
    ({"classes": ["background", "a", "a"]}, "must not repeat a class name"),
    ({"tile_size": 250}, "tile_size=250: must be a multiple of output_stride=4"),
    ({"colors": [[0, 0, 0]]}, "colors=[[0, 0, 0]]: has 1 entries for 3 classes"),
    ({"extra": {"classes": 1}}, "extra key 'classes' is a metadata key"),
])
def test_package_model_validates_the_metadata_first(tmp_path, kwargs, fragment):
    path = tmp_path / "bad.pt2"
    args = dict(classes=["background", "a", "b"], input_mpp_um=0.5)
    args.update(kwargs)
    with pytest.raises(ModelError) as info:
        package_model(_LabNet(), path, **args)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and fragment in msg and "\n" not in msg
    assert not path.exists() and not list(tmp_path.iterdir())


def test_package_model_probes_the_output_shape(tmp_path):
    path = tmp_path / "two.pt2"
    with pytest.raises(ModelError) as info:
        package_model(_LabNet(n=2), path, classes=["background", "a", "b"], input_mpp_um=0.5)
    assert "output shape (1, 2, 64, 64) for a batch of 1 256px tiles, expected (1, 3, 64, 64)" in str(info.value)
    assert not path.exists()


def test_package_model_leaves_the_callers_module_as_it_was(tmp_path):
    net = _LabNet().train().to(memory_format=torch.channels_last)
    package_model(net, tmp_path / "m.pt2", classes=["background", "a", "b"], input_mpp_um=1.0)
    assert net.training and net.conv.weight.is_contiguous(memory_format=torch.channels_last)


# --- bad model files: one line naming the file and the problem -----------------------------------------------------

@pytest.fixture(scope="module")
def program():
    """A small exported program (dynamic batch, 3 classes at stride 4) to save with various metadata."""
    net = _LabNet().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(net, (torch.rand(2, 3, 256, 256),), dynamic_shapes=({0: batch},))
    ep.example_inputs = None
    return ep


def _save(ep, path, meta) -> Path:
    extra = {} if meta is None else {META_FILE: meta if isinstance(meta, str) else json.dumps(meta)}
    torch.export.save(ep, str(path), extra_files=extra)
    return path


def _one_line_error(path, fragment):
    with pytest.raises(ModelError) as info:
        load_model(str(path), CPU)
    msg = str(info.value)
    assert msg.startswith(f"{path}: "), msg
    assert fragment in msg, msg
    assert "\n" not in msg
    return msg


GOOD = {"classes": ["background", "a", "b"], "input_mpp_um": 0.5}


@pytest.mark.parametrize("meta, fragment", [
    (None, f"no {META_FILE} inside the archive"),
    ("{oops", f"{META_FILE} inside the archive is not JSON"),
    ("[1, 2]", f"{META_FILE} inside the archive must be a JSON object, not list"),
    ({"input_mpp_um": 0.5}, "classes is missing"),
    ({**GOOD, "classes": "background,a,b"}, "classes='background,a,b': must be a list of non-empty class names"),
    ({**GOOD, "classes": ["background", ""]}, "classes=['background', '']: must be a list of non-empty class names"),
    ({"classes": GOOD["classes"]}, "input_mpp_um is missing: give the µm per pixel the model analyses at"),
    ({**GOOD, "input_mpp_um": 0.0}, "input_mpp_um=0.0: must be the µm per pixel"),
    ({**GOOD, "input_mpp_um": 25}, "input_mpp_um=25: must be"),
    ({**GOOD, "input_mpp_um": "0.5"}, "input_mpp_um='0.5': must be"),
    ({**GOOD, "input_mpp_um": True}, "input_mpp_um=True: must be"),
    ({**GOOD, "tile_size": 0}, "tile_size=0: must be a whole number of pixels"),
    ({**GOOD, "tile_size": 256.0}, "tile_size=256.0: must be a whole number of pixels"),
    ({**GOOD, "output_stride": 3}, "tile_size=256: must be a multiple of output_stride=3"),
    ({**GOOD, "normalisation": {"mean": [0.5] * 4}}, "normalisation={'mean': [0.5, 0.5, 0.5, 0.5]}: mean must be a list of 3 numbers"),
    ({**GOOD, "normalisation": {"std": [0.2, 0.2, -1]}}, "normalisation={'std': [0.2, 0.2, -1]}: std must be 3 numbers > 0"),
    ({**GOOD, "normalisation": {"mu": [0, 0, 0]}}, "normalisation={'mu': [0, 0, 0]}: must be {\"mean\": [r, g, b], \"std\": [r, g, b]}"),
    ({**GOOD, "normalisation": [0.5, 0.25]}, "normalisation=[0.5, 0.25]: must be"),
    ({**GOOD, "colors": [[0, 0, 0], [1, 2, 3]]}, "colors=[[0, 0, 0], [1, 2, 3]]: has 2 entries for 3 classes"),
    ({**GOOD, "colors": [[0, 0, 0], [1, 2, 300], [0, 0, 0]]}, "colors=[[0, 0, 0], [1, 2, 300], [0, 0, 0]]: must be a list of [r, g, b] with whole numbers 0-255"),
    ({**GOOD, "name": 7}, "name=7: must be a non-empty string"),
    ({**GOOD, "arch": {"width": 8}}, "arch={'width': 8}: given without architecture"),
])
def test_bad_metadata_is_one_line_naming_the_key_and_value(program, tmp_path, meta, fragment):
    _one_line_error(_save(program, tmp_path / "m.pt2", meta), f"{META_FILE}: {fragment}" if isinstance(meta, dict) else fragment)


def test_program_output_that_does_not_match_its_classes(program, tmp_path):
    path = _save(program, tmp_path / "m.pt2", {**GOOD, "classes": ["background", "a", "b", "c"]})
    _one_line_error(path, "output shape (1, 3, 64, 64) for a 256px tile, expected (1, 4, 64, 64) (4 classes at output stride 4)")


def test_program_with_other_output_stride(program, tmp_path):
    _one_line_error(_save(program, tmp_path / "m.pt2", {**GOOD, "output_stride": 8}), "expected (1, 3, 32, 32)")


def test_program_with_a_fixed_batch_or_another_tile_size(tmp_path):
    net = _LabNet().eval()
    fixed = torch.export.export(net, (torch.rand(1, 3, 256, 256),))
    _one_line_error(_save(fixed, tmp_path / "f.pt2", GOOD), "exported with a fixed batch size of 1; export it with dynamic_shapes")
    small = torch.export.export(net, (torch.rand(2, 3, 128, 128),), dynamic_shapes=({0: torch.export.Dim("b")},))
    _one_line_error(_save(small, tmp_path / "s.pt2", GOOD), "x3x128x128 inputs but tile_size=256")


def test_program_with_a_batch_limit_caps_the_predictor(tmp_path):
    from worker.inference import InferenceSettings, Predictor

    net = _LabNet().eval()
    ep = torch.export.export(net, (torch.rand(2, 3, 256, 256),), dynamic_shapes=({0: torch.export.Dim("b", max=3)},))
    m = load_model(_save(ep, tmp_path / "m.pt2", GOOD), CPU)
    assert m.max_batch == 3
    assert Predictor(m, InferenceSettings(batch_size=8)).settings.batch_size == 3


def _truncated_zip(p: Path) -> None:
    good = p.with_name("good.pt2")
    torch.export.save(torch.export.export(nn.Conv2d(3, 3, 4, stride=4), (torch.rand(2, 3, 64, 64),)), str(good))
    p.write_bytes(good.read_bytes()[: good.stat().st_size // 2])


def _png(p: Path) -> None:
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64))  # what a PNG starts with


def _other_zip(p: Path) -> None:
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("readme.txt", "hello")


def _pt2_missing_its_graph(p: Path) -> None:
    good = p.with_name("good.pt2")
    torch.export.save(torch.export.export(nn.Conv2d(3, 3, 4, stride=4), (torch.rand(2, 3, 64, 64),)), str(good),
                      extra_files={META_FILE: json.dumps(GOOD)})
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(p, "w") as dst:
        for item in src.infolist():
            if not item.filename.endswith("models/model.json"):
                dst.writestr(item, src.read(item.filename))


@pytest.mark.parametrize("write, fragments", [
    (lambda p: torch.save({"w": torch.zeros(2)}, p), ["a torch.save checkpoint", "not a TorchScript archive", "--state-dict"]),
    (lambda p: p.write_text("hello"), ["a text file, not a torch.export program (.pt2) and not a TorchScript archive"]),
    (lambda p: p.write_bytes(b""), ["an empty file"]),
    (_png, ["a PNG image, not a torch.export program"]),
    (_truncated_zip, ["a damaged or truncated zip archive"]),
    (_other_zip, ["a zip archive of something else"]),
    (_pt2_missing_its_graph, ["cannot read the torch.export program"]),
])
def test_files_that_are_not_model_archives_are_refused_in_one_line(tmp_path, write, fragments):
    path = tmp_path / "x.pt"
    write(path)
    msg = _one_line_error(path, fragments[0])
    assert all(f in msg for f in fragments), msg


def test_the_format_is_told_from_the_content_not_the_suffix(program, tmp_path, builtin):
    pt2_named_pt = _save(program, tmp_path / "program.pt", GOOD)
    ts_named_pt2 = export_torchscript(builtin, tmp_path / "script.pt2")
    assert (model_format(pt2_named_pt), model_format(ts_named_pt2)) == ("torch.export", "torchscript")
    assert load_model(pt2_named_pt, CPU).format == "torch.export"
    assert load_model(ts_named_pt2, CPU).format == "torchscript"


def test_missing_model_file(tmp_path):
    with pytest.raises(ModelError, match="no such model file"):
        load_model(str(tmp_path / "none.pt"), CPU)


# --- TorchScript: still accepted (deprecated) ----------------------------------------------------------------------

def test_torchscript_roundtrip_keeps_metadata_and_outputs(builtin, tmp_path):
    path = export_torchscript(builtin, tmp_path / "m.pt")
    ts = load_model(str(path), CPU)
    assert ts.classes == builtin.classes and ts.name == builtin.name and ts.version == builtin.version
    assert (ts.tile_size, ts.output_stride, ts.input_mpp_um) == (256, 4, 0.5)
    assert ts.normalisation == builtin.normalisation and ts.format == "torchscript"
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
    assert m.normalisation == Normalisation()  # undeclared: RGB in [0, 1], as TorchScript models always had


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


def test_torchscript_metadata_is_validated_like_a_pt2s(tmp_path):
    path = tmp_path / "mpp.pt"
    meta = {"classes": ["background", "a"], "input_mpp_um": 100}
    torch.jit.save(torch.jit.script(nn.Conv2d(3, 2, 4, stride=4)), str(path), _extra_files={META_FILE: json.dumps(meta)})
    _one_line_error(path, f"{META_FILE}: input_mpp_um=100: must be")


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


def test_bad_metadata_json(tmp_path):
    path = tmp_path / "j.pt"
    torch.jit.save(torch.jit.script(nn.Conv2d(3, 2, 4, stride=4)), str(path), _extra_files={META_FILE: "{oops"})
    with pytest.raises(ModelError, match=f"{META_FILE} inside the archive is not JSON"):
        load_model(str(path), CPU)


# --- python -m worker package-model --------------------------------------------------------------------------------

def test_package_model_command_writes_a_loadable_pt2(tmp_path, capsys):
    torch.manual_seed(4)
    net = TinySegNet().eval()
    sd = tmp_path / "weights.pt"
    torch.save({"state_dict": net.state_dict()}, sd)
    out = tmp_path / "lab.pt2"
    rc = cli.main(["package-model", "--module", "worker.model:TinySegNet", "--state-dict", str(sd), "--out", str(out),
                   "--classes", "background,nuclei,vessel", "--input-mpp-um", "0.5", "--mean", "0.5,0.5,0.5",
                   "--std", "0.25,0.25,0.25", "--colors", "0,0,0;1,2,3;4,5,6", "--name", "lab", "--version", "3"])
    assert rc == cli.EXIT_OK
    printed = capsys.readouterr().out
    assert f"{out}: lab 3, classes background, nuclei, vessel; 256 px tiles at 0.5 µm/px" in printed
    m = load_model(out, CPU)
    assert (m.name, m.version, m.input_mpp_um, m.colors[2]) == ("lab", "3", 0.5, (4, 5, 6))
    assert type(m.module) is TinySegNet  # the factory's class, so the eager rebuild applies
    rgb = _rgb(1)
    with torch.inference_mode():
        assert torch.allclose(m.module(m.prepare(rgb)), net(m.prepare(rgb)), atol=1e-4)  # the --state-dict weights


@pytest.mark.parametrize("args, fragment", [
    (["--input-mpp-um", "100"], "input_mpp_um=100.0: must be"),
    (["--input-mpp-um", "0.5", "--mean", "0.5,0.5"], "--mean='0.5,0.5': expected 3 comma-separated numbers, got 2"),
    (["--input-mpp-um", "0.5", "--classes", "background"], "classes=['background']: must list 2-256 classes"),
])
def test_package_model_command_errors_are_one_line_exit_2(tmp_path, capsys, args, fragment):
    out = tmp_path / "m.pt2"
    base = ["package-model", "--module", "worker.model:TinySegNet", "--out", str(out), "--classes", "background,a,b"]
    assert cli.main(base + args) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("python -m worker package-model: error: ") and fragment in err and "\n" not in err
    assert not out.exists()


@pytest.mark.parametrize("spec, fragment", [
    ("worker.model", "expected package.module:factory"),
    ("worker.nosuch:make", "cannot import it"),
    ("worker.model:nosuch", "cannot import it"),
    ("worker.model:META_FILE", "str is not callable"),
    ("worker.model:build_builtin.__name__", "str is not callable"),
    ("worker.model:Normalisation", "returned Normalisation, not a torch.nn.Module"),
])
def test_module_from_factory_errors(spec, fragment):
    with pytest.raises(ModelError, match=fragment):
        module_from_factory(spec)


def test_module_from_factory_refuses_weights_that_do_not_fit(tmp_path):
    sd = tmp_path / "w.pt"
    torch.save(_LabNet().state_dict(), sd)
    with pytest.raises(ModelError) as info:
        module_from_factory("worker.model:TinySegNet", sd)
    assert str(info.value).startswith(f"{sd}: cannot load these weights into TinySegNet")


def test_no_torchvision_needed():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = "import sys, worker.model, worker.pipeline; sys.exit('torchvision' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0


def test_cpu_fast_path_folds_a_per_channel_normalisation(tmp_path):
    """A packaged TinySegNet with its own per-channel mean/std gets the CPU fast path, and computes the program's
    logits on the worker's prepared input (the normalisation folded into the stem, per channel)."""
    from worker.inference import CpuNet, InferenceSettings, Predictor, cpu_net

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
    rgb = _rgb(3, seed=9)
    with torch.inference_mode():
        want = m.module(m.prepare(rgb))
        got = fast.logits(rgb.permute(0, 3, 1, 2).float())
        plain = CpuNet(m.module, torch.float32, 256).logits(rgb.permute(0, 3, 1, 2).float())  # no normalisation
    tolerance = 1e-4 * max(1.0, want.abs().max().item())
    assert (got - want).abs().max().item() < tolerance
    assert (plain - want).abs().max().item() > 100 * tolerance  # the folding is what makes them agree
