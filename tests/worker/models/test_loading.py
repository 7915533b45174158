"""Loading models: the built-in .pt2, a lab's torch.export program or TorchScript file, and one-line refusals."""
# No `from __future__ import annotations` here: TorchScript must see the real `list[str]` class annotation.

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/worker: model_helpers

from model_helpers import (  # noqa: E402
    CPU,
    GOOD,
    LabNet,
    assert_one_line_error,
    meta_of,
    random_rgb,
    save_program,
)

from worker.models.export import EXPORT_MAX_BATCH, export_torchscript, package_model  # noqa: E402
from worker.models.loaded_model import ModelError  # noqa: E402
from worker.models.loading import BUILTIN_WEIGHTS, load_model, model_format  # noqa: E402
from worker.models.metadata import META_FILE  # noqa: E402
from worker.models.normalisation import Normalisation  # noqa: E402
from worker.models.tinyseg import TINYSEG_ARCHITECTURE, TINYSEG_NORMALISATION, TinySegNet  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
# torch 2.13 marks TorchScript deprecated; --model still takes TorchScript files, so these tests build them.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


# --- the built-in model ------------------------------------------------------------------------------------------

def test_builtin_weights_are_a_small_committed_torch_export_program():
    assert BUILTIN_WEIGHTS.name == "tinyseg-v2.pt2"
    assert BUILTIN_WEIGHTS.is_file(), "run python -m worker.devtools.train to create the built-in weights"
    assert BUILTIN_WEIGHTS.stat().st_size < 2 * 2**20
    assert model_format(BUILTIN_WEIGHTS) == "torch.export"
    meta = meta_of(BUILTIN_WEIGHTS)
    assert meta["version"] == "2.0.0" and meta["input_mpp_um"] == 0.5
    assert meta["architecture"] == TINYSEG_ARCHITECTURE
    assert meta["normalisation"] == {"mean": [0.5] * 3, "std": [0.25] * 3}
    held = meta["training"]["heldout"]
    assert held["slide_mpp_um"] == 0.5 and held["tiles"] > 20
    # The training run's own held-out report (python -m worker.devtools.train): the committed net must be a good one.
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
            x = builtin.prepare(random_rgb(n, seed=n))
            want = program(x)
            got = builtin.module(x)
            assert got.shape == want.shape == (n, 3, 64, 64)
            assert (got - want).abs().max().item() < 1e-4 * max(1.0, want.abs().max().item())


_FRESH_LOAD = """
import json, sys, time
import torch
from worker.models.loading import load_model
t0 = time.monotonic()
m = load_model(None, "cpu")
print(json.dumps({"seconds": time.monotonic() - t0, "format": m.format, "sha256": m.sha256, "origin": m.origin,
                  "dynamo": "torch._dynamo" in sys.modules,
                  "export_load": "torch._export.serde.serialize" in sys.modules}))
"""


def test_builtin_loads_in_a_fresh_process_without_importing_torch_dynamo():
    # torch.export.load imports torch._dynamo (~1.5 s of every fresh pod): the built-in program is read directly.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _FRESH_LOAD], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["format"] == "torch.export (eager TinySegNet)" and got["origin"] == "built-in"
    assert got["sha256"] == hashlib.sha256(BUILTIN_WEIGHTS.read_bytes()).hexdigest()
    assert got["dynamo"] is False and got["export_load"] is False


def test_a_program_the_direct_reader_cannot_read_loads_through_torch_export(monkeypatch, builtin):
    from worker.models import loading
    from worker.models.pt2_archive import Unsupported

    def refuse(f):
        raise Unsupported("say, a newer archive version")

    monkeypatch.setattr(loading, "read_pt2", refuse)
    slow = load_model(None, CPU)
    assert slow.format == "torch.export (eager TinySegNet)" and "eager_rebuild" not in slow.info
    x = builtin.prepare(random_rgb(2, seed=5))
    with torch.inference_mode():
        assert torch.equal(slow.module(x), builtin.module(x))


def test_the_digest_is_recorded_and_a_pinned_mismatch_is_refused(builtin, tmp_path):
    from worker.models.model_store import ModelDigestMismatch

    digest = hashlib.sha256(BUILTIN_WEIGHTS.read_bytes()).hexdigest()
    assert (builtin.sha256, builtin.origin, builtin.source) == (digest, "built-in", str(BUILTIN_WEIGHTS))
    assert load_model(str(BUILTIN_WEIGHTS), CPU, sha256=digest).origin == "local"
    with pytest.raises(ModelDigestMismatch, match=f"expected {'a' * 64} .*, the file has {digest}; refused"):
        load_model(str(BUILTIN_WEIGHTS), CPU, sha256="a" * 64)


# --- a lab's own model: the .pt2 loader ----------------------------------------------------------------------------


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
    x = m.prepare(random_rgb(1))
    with torch.inference_mode():
        assert torch.allclose(m.module(x), net(x), atol=1e-4)


# --- bad model files: one line naming the file and the problem -----------------------------------------------------


def test_program_output_that_does_not_match_its_classes(program, tmp_path):
    path = save_program(program, tmp_path / "m.pt2", {**GOOD, "classes": ["background", "a", "b", "c"]})
    assert_one_line_error(
        path, "output shape (1, 3, 64, 64) for a 256px tile, expected (1, 4, 64, 64) (4 classes at output stride 4)")


def test_program_with_other_output_stride(program, tmp_path):
    path = save_program(program, tmp_path / "m.pt2", {**GOOD, "output_stride": 8})
    assert_one_line_error(path, "expected (1, 3, 32, 32)")


def test_program_with_a_fixed_batch_or_another_tile_size(tmp_path):
    net = LabNet().eval()
    fixed = torch.export.export(net, (torch.rand(1, 3, 256, 256),))
    assert_one_line_error(save_program(fixed, tmp_path / "f.pt2", GOOD),
                          "exported with a fixed batch size of 1; export it with dynamic_shapes")
    small = torch.export.export(net, (torch.rand(2, 3, 128, 128),), dynamic_shapes=({0: torch.export.Dim("b")},))
    assert_one_line_error(save_program(small, tmp_path / "s.pt2", GOOD), "x3x128x128 inputs but tile_size=256")


def test_program_with_a_batch_limit_caps_the_predictor(tmp_path):
    from worker.inference import InferenceSettings, Predictor

    net = LabNet().eval()
    ep = torch.export.export(net, (torch.rand(2, 3, 256, 256),), dynamic_shapes=({0: torch.export.Dim("b", max=3)},))
    m = load_model(save_program(ep, tmp_path / "m.pt2", GOOD), CPU)
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
    (lambda p: torch.save({"w": torch.zeros(2)}, p),
     ["a torch.save checkpoint", "not a TorchScript archive", "--state-dict"]),
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
    msg = assert_one_line_error(path, fragments[0])
    assert all(f in msg for f in fragments), msg


def test_the_format_is_told_from_the_content_not_the_suffix(program, tmp_path, builtin):
    pt2_named_pt = save_program(program, tmp_path / "program.pt", GOOD)
    ts_named_pt2 = export_torchscript(builtin, tmp_path / "script.pt2")
    assert (model_format(pt2_named_pt), model_format(ts_named_pt2)) == ("torch.export", "torchscript")
    assert load_model(pt2_named_pt, CPU).format == "torch.export"
    assert load_model(ts_named_pt2, CPU).format == "torchscript"


def test_missing_model_file(tmp_path):
    with pytest.raises(ModelError, match="no such model file"):
        load_model(str(tmp_path / "none.pt"), CPU)


# --- TorchScript: still accepted (deprecated) ----------------------------------------------------------------------


class _WithClasses(nn.Module):
    classes: list[str]

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
    torch.jit.save(torch.jit.script(nn.Conv2d(3, 2, 4, stride=4)), str(path),
                   _extra_files={META_FILE: json.dumps(meta)})
    with pytest.raises(ModelError, match=r"output shape \(1, 2, 64, 64\) for a 256px tile, expected \(1, 3, 64, 64\)"):
        load_model(str(path), CPU)


def test_torchscript_metadata_is_validated_like_a_pt2s(tmp_path):
    path = tmp_path / "mpp.pt"
    meta = {"classes": ["background", "a"], "input_mpp_um": 100}
    torch.jit.save(torch.jit.script(nn.Conv2d(3, 2, 4, stride=4)), str(path),
                   _extra_files={META_FILE: json.dumps(meta)})
    assert_one_line_error(path, f"{META_FILE}: input_mpp_um=100: must be")


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


def test_no_torchvision_needed():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = "import sys, worker.models.export, worker.pipeline; sys.exit('torchvision' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0
