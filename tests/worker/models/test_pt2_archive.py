"""Reading a .pt2 without torch.export: weights and graph as torch.export.load reads them; the rest is Unsupported."""
from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/worker: model_helpers

from model_helpers import GOOD, random_rgb, save_program  # noqa: E402

from worker.models.export import EXPORT_MAX_BATCH  # noqa: E402
from worker.models.model_store import BUILTIN_WEIGHTS  # noqa: E402
from worker.models.pt2_archive import Unsupported, read_meta_text, read_pt2, run_program  # noqa: E402
from worker.models.tinyseg import TINYSEG_NORMALISATION  # noqa: E402


def _read(path: Path):
    with open(path, "rb") as f:
        return read_pt2(f)


def _exported(path: Path):
    with open(path, "rb") as f:
        return torch.export.load(f)


def test_the_builtin_archive_reads_as_torch_export_reads_it():
    program, ep = _read(BUILTIN_WEIGHTS), _exported(BUILTIN_WEIGHTS)
    assert program.state_dict.keys() == ep.state_dict.keys()
    for name, tensor in ep.state_dict.items():
        ours = program.state_dict[name]
        assert ours.dtype == tensor.dtype and ours.shape == tensor.shape and torch.equal(ours, tensor), name
    assert program.input_shape()[1] == [3, 256, 256]
    assert program.batch_range() == (1, EXPORT_MAX_BATCH)
    with open(BUILTIN_WEIGHTS, "rb") as f:
        assert json.loads(read_meta_text(f))["name"] == "gpuburst-tinyseg"
    x = TINYSEG_NORMALISATION.apply(random_rgb(3, seed=11))
    with torch.inference_mode():
        assert torch.equal(run_program(program, x), ep.module()(x))  # the same ops on the same weights


def test_another_graph_runs_as_torch_export_runs_it(program, tmp_path):
    path = save_program(program, tmp_path / "lab.pt2", GOOD)
    ours = _read(path)
    x = torch.rand(3, 3, 256, 256)
    with torch.inference_mode():
        assert torch.equal(run_program(ours, x), program.module()(x))
    assert ours.batch_range() == (1, 64)


def _rewrite(src: Path, dst: Path, edit) -> Path:
    """A copy of the archive `src` with each record passed through edit(name, bytes) -> bytes."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, edit(info.filename, zin.read(info.filename)))
    return dst


def _json_edit(suffix: str, change):
    def edit(name: str, data: bytes) -> bytes:
        if not name.endswith(suffix):
            return data
        doc = json.loads(data)
        change(doc)
        return json.dumps(doc).encode()
    return edit


def _pickled(doc):
    next(iter(doc["config"].values()))["use_pickle"] = True


def _constant(doc):
    doc["config"]["c"] = {"path_name": "tensor_0", "is_param": False, "use_pickle": False, "tensor_meta": {}}


@pytest.mark.parametrize("edit,reason", [
    (lambda n, d: b"1" if n.endswith("/archive_version") else d, "another archive format, version or byte order"),
    (_json_edit("model_weights_config.json", _pickled), "is pickled or of an unknown dtype or layout"),
    (_json_edit("model_constants_config.json", _constant), "the program has constants"),
    (_json_edit("models/model.json", lambda doc: doc["schema_version"].update(major=99)), "another graph schema"),
])
def test_what_the_reader_does_not_know_is_unsupported(tmp_path, edit, reason):
    with pytest.raises(Unsupported, match=reason):
        _read(_rewrite(BUILTIN_WEIGHTS, tmp_path / "x.pt2", edit))


@pytest.mark.parametrize("target", [
    "torch.ops.higher_order.cond",  # an op outside aten
    "torch.ops.aten.from_file.default",  # an aten op that reaches outside the tensors
])
def test_an_op_the_reader_does_not_run_is_unsupported_when_run(tmp_path, target):
    def retarget(doc):
        doc["graph_module"]["graph"]["nodes"][2]["target"] = target

    program = _read(_rewrite(BUILTIN_WEIGHTS, tmp_path / "x.pt2", _json_edit("models/model.json", retarget)))
    with pytest.raises(Unsupported, match=f"op {target}"):
        run_program(program, torch.zeros(1, 3, 256, 256))


def test_not_a_zip_is_unsupported(tmp_path):
    (tmp_path / "x.pt2").write_bytes(b"not a zip")
    with pytest.raises(Unsupported, match="not a zip archive"):
        _read(tmp_path / "x.pt2")

