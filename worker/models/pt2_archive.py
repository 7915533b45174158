"""A torch.export .pt2 read without torch.export: its metadata, weights and graph, and that graph run op by op.

Why: `torch.export.load` imports `torch._export.serde`, which imports `torch._dynamo` and sympy: about 1.2-1.7 s of a
fresh process on a 2-core machine, paid by every ScaledJob pod, against a few milliseconds for what the archive
holds (a zip of JSON and raw little-endian tensor bytes). The loader uses this reader only for programs whose
metadata names an eager architecture it knows (TinySegNet), and only to check that the eager net computes the
program's own logits: this module runs the serialized graph node by node with the very `torch.ops.aten` overloads it
names, so the check is made against the program, not against the architecture's name. Anything this reader does not
know (another archive or schema version, pickled weights, constants, symbolic arguments, an op outside `aten`)
raises `Unsupported`, and the loader falls back to `torch.export.load`: slower, never less safe.
"""
from __future__ import annotations

import json
import re
import sys
import zipfile
from dataclasses import dataclass
from typing import Any, BinaryIO

import torch

#: The archive layout and graph schema this reader was written against (torch 2.13 writes archive_version 0 and
#: schema 8.x); any other is read by torch.export.load.
ARCHIVE_VERSIONS = {"0"}
SCHEMA_MAJOR = 8

#: torch._export.serde.schema.ScalarType codes of the dtypes a weight may have here.
_DTYPES = {1: torch.uint8, 2: torch.int8, 3: torch.int16, 4: torch.int32, 5: torch.int64, 6: torch.float16,
           7: torch.float32, 8: torch.float64, 12: torch.bool, 13: torch.bfloat16}
_PLAIN_ARGS = {"as_int", "as_ints", "as_bool", "as_bools", "as_string", "as_strings"}
_FLOAT_ARGS = {"as_float", "as_floats"}
_NOT_FINITE = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}  # how serde writes them
_ATEN = re.compile(r"torch\.ops\.aten\.(\w+)\.(\w+)")
_SYMBOL = re.compile(r"Symbol\('(\w+)'(?:, \w+=\w+)*\)")


class Unsupported(Exception):
    """The archive holds something this reader does not read; torch.export.load must read it instead."""


@dataclass(frozen=True)
class Pt2Program:
    """What a .pt2 archive holds, read without torch.export."""

    meta_text: str | None
    """The archive's extra/gpuburst.json, as text (None when absent)."""
    state_dict: dict[str, torch.Tensor]
    """Parameters and buffers by their module names (e.g. "stem.0.0.weight"), on the CPU."""
    graph: dict
    """The serialized graph (nodes of aten ops, its inputs and outputs)."""
    signature: dict
    """Which graph input is which parameter, buffer or user input."""
    range_constraints: dict
    """Each symbolic size's bounds: {"s77": {"min_val": 1, "max_val": 4096}}."""

    def input_shape(self) -> tuple[str, list[int]]:
        """The one user input's batch symbol and its other sizes ([3, T, T]); Unsupported for anything else."""
        users = [s["user_input"]["arg"] for s in self.signature.get("input_specs", []) if "user_input" in s]
        if len(users) != 1 or "as_tensor" not in users[0]:
            raise Unsupported("not exactly one tensor input")
        meta = self.graph.get("tensor_values", {}).get(users[0]["as_tensor"]["name"])
        sizes = (meta or {}).get("sizes") or []
        if len(sizes) != 4 or "as_expr" not in sizes[0] or not all("as_int" in s for s in sizes[1:]):
            raise Unsupported("input is not N x C x H x W with a symbolic batch")
        m = _SYMBOL.fullmatch(str(sizes[0]["as_expr"].get("expr_str", "")))
        if not m:
            raise Unsupported("batch size is an expression, not a symbol")
        return m.group(1), [int(s["as_int"]) for s in sizes[1:]]

    def batch_range(self) -> tuple[int, int | None]:
        """The smallest and largest batch the program accepts (None: no upper bound)."""
        symbol, _ = self.input_shape()
        bounds = self.range_constraints.get(symbol) or {}
        lo, hi = bounds.get("min_val"), bounds.get("max_val")
        return (1 if lo is None else int(lo)), (None if hi is None else int(hi))


def _read_text(z: zipfile.ZipFile, name: str) -> str:
    try:
        return z.read(name).decode("utf-8")
    except KeyError:
        raise Unsupported(f"no {name}") from None


def _weights(z: zipfile.ZipFile, root: str) -> dict[str, torch.Tensor]:
    """The archive's weights as torch.export.save wrote them: raw storage bytes, then sizes/strides/offset."""
    config = json.loads(_read_text(z, root + "data/weights/model_weights_config.json"))["config"]
    storages: dict[str, torch.Tensor] = {}
    out: dict[str, torch.Tensor] = {}
    for fqn, payload in config.items():
        meta = payload.get("tensor_meta") or {}
        dtype = _DTYPES.get(meta.get("dtype"))
        if payload.get("use_pickle") or dtype is None or meta.get("layout") != 7:  # 7: strided
            raise Unsupported(f"weight {fqn} is pickled or of an unknown dtype or layout")
        try:
            sizes = [int(s["as_int"]) for s in meta["sizes"]]
            strides = [int(s["as_int"]) for s in meta["strides"]]
            offset = int(meta["storage_offset"]["as_int"])
        except (KeyError, TypeError) as exc:
            raise Unsupported(f"weight {fqn} has a symbolic shape") from exc
        name = payload["path_name"]
        if name not in storages:
            raw = bytearray(z.read(root + "data/weights/" + name))
            storages[name] = torch.frombuffer(raw, dtype=dtype) if raw else torch.zeros(0, dtype=dtype)
        storage = storages[name]
        if storage.dtype != dtype:
            raise Unsupported(f"weight {fqn} shares a file with a weight of another dtype")
        out[fqn] = torch.as_strided(storage, sizes, strides, offset)
    return out


def _open(f: BinaryIO) -> tuple[zipfile.ZipFile, str]:
    """The archive as a zip and its root folder (torch.export.save puts every record under one)."""
    f.seek(0)
    try:
        z = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise Unsupported(f"not a zip archive ({exc})") from None
    roots = [n[: -len("archive_format")] for n in z.namelist() if n.endswith("archive_format") and n.count("/") == 1]
    if len(roots) != 1:
        z.close()
        raise Unsupported("no single archive root")
    return z, roots[0]


def read_meta_text(f: BinaryIO) -> str | None:
    """The archive's extra/gpuburst.json as text (None when absent), reading nothing else."""
    z, root = _open(f)
    with z:
        name = root + "extra/gpuburst.json"
        return _read_text(z, name) if name in z.namelist() else None


def read_pt2(f: BinaryIO) -> Pt2Program:
    """Read a torch.export archive from an open file; Unsupported for anything this reader does not know."""
    if sys.byteorder != "little":
        raise Unsupported("this machine is big-endian")
    z, root = _open(f)
    with z:
        if (_read_text(z, root + "archive_format").strip() != "pt2"
                or _read_text(z, root + "archive_version").strip() not in ARCHIVE_VERSIONS
                or _read_text(z, root + "byteorder").strip() != "little"):
            raise Unsupported("another archive format, version or byte order")
        models = [n for n in z.namelist() if n.startswith(root + "models/") and n.endswith(".json")]
        if models != [root + "models/model.json"]:
            raise Unsupported("not exactly one program named 'model'")
        constants = json.loads(_read_text(z, root + "data/constants/model_constants_config.json"))
        if constants.get("config"):
            raise Unsupported("the program has constants")
        program = json.loads(_read_text(z, root + "models/model.json"))
        if (program.get("schema_version") or {}).get("major") != SCHEMA_MAJOR:
            raise Unsupported("another graph schema version")
        meta_name = root + "extra/gpuburst.json"
        meta_text = _read_text(z, meta_name) if meta_name in z.namelist() else None
        module = program["graph_module"]
        return Pt2Program(meta_text=meta_text, state_dict=_weights(z, root), graph=module["graph"],
                          signature=module["signature"], range_constraints=program.get("range_constraints") or {})


def _arg(arg: dict, env: dict[str, Any]) -> Any:
    if len(arg) != 1:
        raise Unsupported(f"argument {sorted(arg)}")
    (kind, value), = arg.items()
    if kind == "as_none":
        return None
    if kind == "as_tensor":
        return env[value["name"]]
    if kind == "as_tensors":
        return [env[v["name"]] for v in value]
    if kind == "as_scalar_type" and value in _DTYPES:
        return _DTYPES[value]
    if kind in _PLAIN_ARGS:
        return list(value) if isinstance(value, list) else value
    if kind in _FLOAT_ARGS:
        return [_NOT_FINITE.get(v, v) for v in value] if isinstance(value, list) else _NOT_FINITE.get(value, value)
    raise Unsupported(f"argument kind {kind}")  # symbolic sizes, devices, layouts, ...


_PURE_OPS = frozenset({
    "conv2d", "convolution", "batch_norm", "_native_batch_norm_legit_no_training", "relu", "relu_", "cat",
    "upsample_nearest2d", "upsample_bilinear2d", "max_pool2d", "avg_pool2d", "add", "add_", "mul", "sigmoid",
})
"""The aten ops this reader runs: the pure tensor arithmetic a TinySegNet's graph is made of (and its close
variants). The file is untrusted and aten also holds ops that reach outside the tensors (`from_file`, say); any op
not listed sends the file to `torch.export.load` instead, as any other unknown does."""


def _op(target: str) -> Any:
    m = _ATEN.fullmatch(target)
    if not m or m.group(1) not in _PURE_OPS:
        raise Unsupported(f"op {target}")
    try:
        return getattr(getattr(torch.ops.aten, m.group(1)), m.group(2))
    except (AttributeError, RuntimeError):
        raise Unsupported(f"op {target}") from None


def run_program(program: Pt2Program, x: torch.Tensor) -> torch.Tensor:
    """The program's output for input `x`: every node's aten op called as serialized, with the archive's weights."""
    env: dict[str, Any] = {}
    for spec in program.signature.get("input_specs", []):
        (kind, body), = spec.items()
        if kind == "parameter":
            env[body["arg"]["name"]] = program.state_dict[body["parameter_name"]]
        elif kind == "buffer":
            env[body["arg"]["name"]] = program.state_dict[body["buffer_name"]]
        elif kind == "user_input":
            env[body["arg"]["as_tensor"]["name"]] = x
        else:
            raise Unsupported(f"input kind {kind}")
    for node in program.graph["nodes"]:
        op = _op(node["target"])
        result = op(**{a["name"]: _arg(a["arg"], env) for a in node["inputs"]})
        outputs = node["outputs"]
        if len(outputs) == 1 and "as_tensor" in outputs[0]:
            env[outputs[0]["as_tensor"]["name"]] = result
        elif outputs and all("as_tensor" in o for o in outputs) and isinstance(result, tuple) \
                and len(result) == len(outputs):
            env.update((o["as_tensor"]["name"], r) for o, r in zip(outputs, result))
        else:
            raise Unsupported(f"outputs of {node['target']}")
    specs = program.signature.get("output_specs", [])
    if len(specs) != 1 or "user_output" not in specs[0] or "as_tensor" not in specs[0]["user_output"]["arg"]:
        raise Unsupported("not exactly one tensor output")
    return env[specs[0]["user_output"]["arg"]["as_tensor"]["name"]]
