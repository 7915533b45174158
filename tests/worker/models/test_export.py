"""Writing model files: package_model's round trip and checks, module_from_factory, TorchScript export."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/worker: model_helpers

from model_helpers import CPU, LAB_NORM, LabNet, meta_of, random_rgb  # noqa: E402

from worker.models.export import EXPORT_MAX_BATCH, export_torchscript, module_from_factory, package_model  # noqa: E402
from worker.models.loaded_model import ModelError  # noqa: E402
from worker.models.loading import load_model, model_format  # noqa: E402
from worker.models.normalisation import Normalisation  # noqa: E402
from worker.models.tinyseg import TINYSEG_ARCHITECTURE, TinySegNet  # noqa: E402

# torch 2.13 marks TorchScript deprecated; --model still takes TorchScript files, so these tests build them.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


# --- a lab's own model: package_model ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab_pt2(tmp_path_factory):
    torch.manual_seed(1)
    net = LabNet()
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
    assert m.format == "torch.export" and not isinstance(m.module, LabNet)  # runs as exported
    net.eval()
    with torch.inference_mode():
        for n in (1, 5):
            rgb = random_rgb(n, seed=n)
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
    out = pred.predict(random_rgb(5).numpy())
    assert out.shape == (5, 64, 64) and out.dtype == np.uint8
    with torch.inference_mode():
        want = m.module(m.prepare(random_rgb(5))).argmax(1).numpy()
    assert (out == want).all()


def test_a_packaged_tinysegnet_runs_eagerly_with_its_own_weights(tmp_path):
    torch.manual_seed(2)
    net = TinySegNet(n_classes=4, width=16, deep_width=24).eval()
    path = package_model(net, tmp_path / "t.pt2", classes=["bg", "a", "b", "c"], input_mpp_um=0.25, version="1")
    meta = meta_of(path)
    assert meta["architecture"] == TINYSEG_ARCHITECTURE
    assert meta["arch"] == {"n_classes": 4, "width": 16, "deep_width": 24}
    m = load_model(path, CPU)
    assert type(m.module) is TinySegNet and m.format == "torch.export (eager TinySegNet)"
    rgb = random_rgb(2)
    with torch.inference_mode():
        assert torch.allclose(m.module(m.prepare(rgb)), net(m.prepare(rgb)), atol=1e-4)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"input_mpp_um": 0.01},
     "input_mpp_um=0.01: must be the µm per pixel the model analyses at, a number from 0.05 to 20"),
    ({"input_mpp_um": 50}, "input_mpp_um=50: must be"),
    ({"input_mpp_um": None}, "input_mpp_um is missing"),
    ({"normalisation": {"mean": [0.5, 0.5], "std": [1, 1, 1]}},
     "normalisation={'mean': [0.5, 0.5], 'std': [1, 1, 1]}: mean must be a list of 3 numbers"),
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
        package_model(LabNet(), path, **args)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and fragment in msg and "\n" not in msg
    assert not path.exists() and not list(tmp_path.iterdir())


def test_package_model_probes_the_output_shape(tmp_path):
    path = tmp_path / "two.pt2"
    with pytest.raises(ModelError) as info:
        package_model(LabNet(n=2), path, classes=["background", "a", "b"], input_mpp_um=0.5)
    assert "output shape (1, 2, 64, 64) for a batch of 1 256px tiles, expected (1, 3, 64, 64)" in str(info.value)
    assert not path.exists()


def test_package_model_leaves_the_callers_module_as_it_was(tmp_path):
    net = LabNet().train().to(memory_format=torch.channels_last)
    package_model(net, tmp_path / "m.pt2", classes=["background", "a", "b"], input_mpp_um=1.0)
    assert net.training and net.conv.weight.is_contiguous(memory_format=torch.channels_last)


# --- TorchScript: still written on request (deprecated) -----------------------------------------------------------


def test_torchscript_roundtrip_keeps_metadata_and_outputs(builtin, tmp_path):
    path = export_torchscript(builtin, tmp_path / "m.pt")
    ts = load_model(str(path), CPU)
    assert ts.classes == builtin.classes and ts.name == builtin.name and ts.version == builtin.version
    assert (ts.tile_size, ts.output_stride, ts.input_mpp_um) == (256, 4, 0.5)
    assert ts.normalisation == builtin.normalisation and ts.format == "torchscript"
    x = torch.rand(2, 3, 256, 256).contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        assert torch.allclose(builtin.module(x), ts.module(x), atol=1e-4)


# --- module_from_factory ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, fragment", [
    ("worker.models.tinyseg", "expected package.module:factory"),
    ("worker.nosuch:make", "cannot import it"),
    ("worker.models.tinyseg:nosuch", "cannot import it"),
    ("worker.models.metadata:META_FILE", "str is not callable"),
    ("worker.models.tinyseg:build_builtin.__name__", "str is not callable"),
    ("worker.models.normalisation:Normalisation", "returned Normalisation, not a torch.nn.Module"),
])
def test_module_from_factory_errors(spec, fragment):
    with pytest.raises(ModelError, match=fragment):
        module_from_factory(spec)


def test_module_from_factory_refuses_weights_that_do_not_fit(tmp_path):
    sd = tmp_path / "w.pt"
    torch.save(LabNet().state_dict(), sd)
    with pytest.raises(ModelError) as info:
        module_from_factory("worker.models.tinyseg:TinySegNet", sd)
    assert str(info.value).startswith(f"{sd}: cannot load these weights into TinySegNet")
