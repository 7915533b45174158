"""Loading a model file: the format told from its content, the torch.export and TorchScript loaders, one probe run."""
from __future__ import annotations

import json
import os
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import nn

from worker.logfmt import one_line
from worker.models.loaded_model import LoadedModel, ModelError, check_output_shape, class_colors
from worker.models.metadata import META_FILE, ModelMetadata, validate_metadata
from worker.models.model_store import BUILTIN_WEIGHTS, ModelFile, open_local
from worker.models.pt2_archive import read_meta_text, read_pt2, run_program
from worker.models.tinyseg import TINYSEG_ARCHITECTURE, TinySegNet

WEIGHTS_DIR = BUILTIN_WEIGHTS.parent
__all__ = ["BUILTIN_WEIGHTS", "WEIGHTS_DIR", "load_model", "model_format"]


def load_model(source: str | os.PathLike | ModelFile | None, device: torch.device | str, *,
               sha256: str | None = None) -> LoadedModel:
    """Load the built-in model (`source=None`), a model file (torch.export .pt2 or TorchScript) or a fetched
    `ModelFile` (model_store.fetch_model: a local file, or one from S3 or the node's cache), probe it once, and
    return it ready to run, with its SHA-256. `sha256` pins a path's digest (a ModelFile was checked when fetched).
    Raises ModelError (one line naming the file) when it cannot be used, ModelDigestMismatch when it is not the
    pinned file."""
    device = torch.device(device)
    mf = source if isinstance(source, ModelFile) else open_local(source, sha256)
    with mf:
        kind = model_format(mf.file, mf.label)
        loaded = _load_exported(mf, device) if kind == "torch.export" else _load_torchscript(mf, device)
    loaded.sha256, loaded.origin, loaded.fetch_s = mf.sha256, mf.origin, mf.fetch_s
    _probe(loaded)
    return loaded


def _describe_bytes(head: bytes) -> str:
    signatures = [
        (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"II*\x00", "a TIFF file"),
        (b"MM\x00*", "a TIFF file"), (b"II+\x00", "a BigTIFF file"), (b"\x1f\x8b", "a gzip file"),
        (b"%PDF", "a PDF file"), (b"\x80", "a pickle (a legacy torch.save file?)"),
    ]
    if not head:
        return "an empty file"
    for magic, what in signatures:
        if head.startswith(magic):
            return what
    if head.startswith(b"PK"):
        return "a damaged or truncated zip archive"
    try:
        head.decode("utf-8")
        return "a text file"
    except UnicodeDecodeError:
        return "not a zip archive"


def model_format(path: str | os.PathLike | BinaryIO, label: str | None = None) -> str:
    """"torch.export" or "torchscript", told from the file's content (not its suffix); ModelError otherwise.
    `path` is a file name or an open file (read from its start, left at its start); `label` names it in errors."""
    if isinstance(path, (str, os.PathLike)):
        try:
            with open(path, "rb") as fh:
                return model_format(fh, str(path))
        except OSError as exc:
            raise ModelError(f"{path}: cannot read the model file ({one_line(exc, 120)})") from None
    f, path = path, label or getattr(path, "name", "model")
    hint = "not a torch.export program (.pt2) and not a TorchScript archive; package a model with " \
           "`python -m worker package-model` (worker.models.export.package_model)"
    f.seek(0)
    head = f.read(512)
    f.seek(0)
    try:
        with zipfile.ZipFile(f) as z:
            names = z.namelist()
            fmt_names = [n for n in names
                         if n == "archive_format" or (n.endswith("/archive_format") and n.count("/") == 1)]
            fmt = z.read(fmt_names[0]).decode("utf-8", "replace").strip() if fmt_names else None
    except (zipfile.BadZipFile, EOFError, ValueError, OSError, KeyError, NotImplementedError):
        raise ModelError(f"{path}: {_describe_bytes(head)}, {hint}") from None
    finally:
        f.seek(0)
    if fmt is not None:
        if fmt != "pt2":
            raise ModelError(f"{path}: archive_format={fmt!r}: expected 'pt2' (a torch.export.save file)")
        return "torch.export"
    if any("/code/" in n for n in names) or any(n.endswith("/constants.pkl") for n in names):
        return "torchscript"
    if any(n.endswith("data.pkl") for n in names):
        raise ModelError(f"{path}: a torch.save checkpoint (weights or a pickled object), {hint} with --state-dict")
    raise ModelError(f"{path}: a zip archive of something else, {hint}")


def _read_meta(path: str, raw: Any) -> dict | None:
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not raw:
        return None
    try:
        meta = json.loads(raw)
    except ValueError as exc:
        raise ModelError(f"{path}: {META_FILE} inside the archive is not JSON ({one_line(exc, 120)})") from None
    if not isinstance(meta, dict):
        raise ModelError(f"{path}: {META_FILE} inside the archive must be a JSON object, not {type(meta).__name__}")
    return meta


def _validated(path: str, meta: Any, *, require_mpp: bool) -> ModelMetadata:
    """validate_metadata of a model file's gpuburst.json, its ValueError made a one-line ModelError naming the file."""
    try:
        return validate_metadata(meta, require_mpp=require_mpp)
    except ValueError as exc:
        raise ModelError(f"{path}: {META_FILE}: {exc}") from None


def _program_input(path: str, ep: torch.export.ExportedProgram, tile: int) -> int | None:
    """Check the program takes one N x 3 x T x T tensor with a dynamic batch; return its largest batch (or None)."""
    user_inputs = list(ep.graph_signature.user_inputs)
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    vals = [nodes[name].meta.get("val") if name in nodes else None for name in user_inputs]
    if len(vals) != 1 or not isinstance(vals[0], torch.Tensor):
        raise ModelError(f"{path}: the program takes {len(vals)} inputs; expected one N x 3 x {tile} x {tile} tensor")
    shape = list(vals[0].shape)
    shown = "x".join(str(s) for s in shape)
    if len(shape) != 4 or not (isinstance(shape[1], int) and shape[1] == 3):
        raise ModelError(f"{path}: the program's input is {shown}; expected N x 3 x {tile} x {tile} (RGB)")
    for side in shape[2:]:
        if isinstance(side, int) and side != tile:
            raise ModelError(f"{path}: the program was exported for {shown} inputs but tile_size={tile}")
    batch = shape[0]
    if not isinstance(batch, torch.SymInt):
        raise ModelError(
            f"{path}: the program was exported with a fixed batch size of {batch}; export it with "
            f"dynamic_shapes=({{0: torch.export.Dim('batch')}},) (package_model does)"
        )
    vr = ep.range_constraints.get(batch.node.expr)
    lo, hi = (1, None) if vr is None else (vr.lower, vr.upper)
    try:
        lo = int(lo)
    except (TypeError, ValueError, OverflowError):
        lo = 1
    if lo > 1:
        raise ModelError(f"{path}: the program accepts batches of {lo} or more tiles only; export it with "
                         "Dim('batch', min=1)")
    try:
        return int(hi) if hi is not None and hi.is_finite else None
    except (AttributeError, TypeError, ValueError, OverflowError):
        return None


def _same_logits(program: Callable[[torch.Tensor], torch.Tensor], net: nn.Module, meta: ModelMetadata) -> bool:
    """Whether `net` computes `program`'s logits (within 1e-4 of their scale) on a probe batch of 2 random tiles."""
    T = meta.tile_size
    gen = torch.Generator().manual_seed(0)
    rgb = torch.randint(0, 256, (2, T, T, 3), generator=gen, dtype=torch.uint8)
    x = meta.normalisation.apply(rgb)
    with torch.inference_mode():
        want = program(x)
        got = net(x)
    tolerance = 1e-4 * max(1.0, float(want.abs().max()))
    return got.shape == want.shape and torch.allclose(got, want, rtol=0, atol=tolerance)


def _rebuild_tinyseg(ep: torch.export.ExportedProgram, meta: ModelMetadata) -> tuple[TinySegNet | None, str]:
    """The eager TinySegNet holding the program's own weights, if it computes the program's logits; else None."""
    try:
        net = TinySegNet(**(meta.arch or {}))
        net.load_state_dict(ep.state_dict, strict=True)
        net.eval()
        if not _same_logits(ep.module(), net, meta):
            return None, "the eager TinySegNet computes other logits than the program"
    except Exception as exc:  # noqa: BLE001 - any mismatch means: run the program itself
        return None, f"cannot rebuild the eager TinySegNet ({one_line(exc, 120)})"
    return net, ""


def _eager_tinyseg_from_archive(mf: ModelFile) -> tuple[TinySegNet, ModelMetadata, int | None] | None:
    """The program's own weights in the eager TinySegNet its metadata names, checked against the program's own graph
    run op by op (pt2_archive), without torch.export.load: the built-in model loads in ~0.1 s instead of ~2 s, most
    of which is torch.export.load importing torch._dynamo. None for anything else (another architecture, or an
    archive, graph or weight this reader does not know, or other logits): torch.export.load then reads the file,
    checks it the same way and explains any refusal."""
    try:
        text = read_meta_text(mf.file)
        raw = json.loads(text) if text else None
        if not isinstance(raw, dict) or raw.get("architecture") != TINYSEG_ARCHITECTURE:
            return None
        meta = validate_metadata(raw, require_mpp=True)
        program = read_pt2(mf.file)
        _, sizes = program.input_shape()
        lo, hi = program.batch_range()
        if sizes != [3, meta.tile_size, meta.tile_size] or lo > 1:
            return None
        net = TinySegNet(**(meta.arch or {}))
        net.load_state_dict(program.state_dict, strict=True)
        net.eval()
        if not _same_logits(lambda x: run_program(program, x), net, meta):
            return None
    except Exception:  # noqa: BLE001 - whatever this reader cannot do, torch.export.load does
        return None
    finally:
        mf.file.seek(0)
    return net, meta, hi


def _stem(label: str) -> str:
    return label.rstrip("/").rsplit("/", 1)[-1].split(".")[0]


def _eager_module(net: TinySegNet, device: torch.device) -> nn.Module:
    return net.fold_batchnorm().to(device).to(memory_format=torch.channels_last)


def _load_exported(mf: ModelFile, device: torch.device) -> LoadedModel:
    path = mf.label
    direct = _eager_tinyseg_from_archive(mf)
    if direct is not None:
        net, meta, max_batch = direct
        return _exported_model(path, meta, max_batch, _eager_module(net, device), "torch.export (eager TinySegNet)",
                               dict(meta.extra), device)
    extra = {META_FILE: ""}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mf.file.seek(0)  # a file object: torch only warns about names not ending in .pt2
            ep = torch.export.load(mf.file, extra_files=extra)
    except Exception as exc:  # noqa: BLE001 - any failure means the file is unusable
        raise ModelError(f"{path}: cannot read the torch.export program ({one_line(exc)})") from None
    raw = _read_meta(path, extra.get(META_FILE))
    if raw is None:
        raise ModelError(
            f"{path}: no {META_FILE} inside the archive; package the model with `python -m worker package-model` "
            f"or torch.export.save(ep, path, extra_files={{'{META_FILE}': json.dumps({{'classes': [...], "
            f"'input_mpp_um': ..., ...}})}})"
        )
    meta = _validated(path, raw, require_mpp=True)
    max_batch = _program_input(path, ep, meta.tile_size)
    info = dict(meta.extra)
    net, why = (None, "")
    if meta.architecture == TINYSEG_ARCHITECTURE:
        net, why = _rebuild_tinyseg(ep, meta)
        if why:
            info["eager_rebuild"] = why
    elif meta.architecture is not None:
        info["eager_rebuild"] = f"unknown architecture {meta.architecture!r}: the program runs as exported"
    if net is not None:
        module: nn.Module = _eager_module(net, device)
        fmt = "torch.export (eager TinySegNet)"
    else:
        try:
            if device.type != "cpu":
                ep = torch.export.passes.move_to_device_pass(ep, device)
            module = ep.module()
            module = module.to(memory_format=torch.channels_last)
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"{path}: cannot place the torch.export program on {device} ({one_line(exc)})") from None
        fmt = "torch.export"
    return _exported_model(path, meta, max_batch, module, fmt, info, device)


def _exported_model(path: str, meta: ModelMetadata, max_batch: int | None, module: nn.Module, fmt: str, info: dict,
                    device: torch.device) -> LoadedModel:
    return LoadedModel(
        module=module,
        name=str(meta.name or _stem(path)),
        version=str(meta.version or "unknown"),
        classes=list(meta.classes),
        tile_size=meta.tile_size,
        output_stride=meta.output_stride,
        input_mpp_um=meta.input_mpp_um,
        device=device,
        source=path,
        colors=class_colors(len(meta.classes), meta.colors),
        normalisation=meta.normalisation,
        max_batch=max_batch,
        format=fmt,
        info=info,
    )


def _load_torchscript(mf: ModelFile, device: torch.device) -> LoadedModel:
    path = mf.label
    extra = {META_FILE: ""}
    try:
        with warnings.catch_warnings():  # torch 2.13 flags TorchScript as deprecated; still accepted
            warnings.simplefilter("ignore", DeprecationWarning)
            mf.file.seek(0)
            module = torch.jit.load(mf.file, map_location=device, _extra_files=extra)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(
            f"{path}: not a TorchScript archive that torch can read (torch.jit.load failed: {one_line(exc, 160)})"
        ) from None
    meta = dict(_read_meta(path, extra[META_FILE]) or {})
    if meta.get("classes") is None and hasattr(module, "classes"):
        meta["classes"] = list(module.classes)
    if not meta.get("classes"):
        raise ModelError(
            f"{path}: the TorchScript model declares no classes; save it with "
            f"_extra_files={{'{META_FILE}': json.dumps({{'classes': [...], ...}})}} or give it a "
            "`classes: List[str]` attribute"
        )
    for key in ("name", "version"):
        if meta.get(key) is None and isinstance(getattr(module, key, None), str):
            meta[key] = getattr(module, key)
    md = _validated(path, meta, require_mpp=False)
    module.eval()
    module = module.to(memory_format=torch.channels_last) if hasattr(module, "to") else module
    return LoadedModel(
        module=module, name=str(md.name or Path(path).stem), version=str(md.version or "unknown"),
        classes=list(md.classes), tile_size=md.tile_size, output_stride=md.output_stride, input_mpp_um=md.input_mpp_um,
        device=device, source=path, colors=class_colors(len(md.classes), md.colors), normalisation=md.normalisation,
        format="torchscript", info=dict(md.extra),
    )


def _probe(m: LoadedModel) -> None:
    """Run one blank tile through the model so a wrong output shape fails at load time, not mid-slide."""
    x = m.prepare(torch.zeros(1, m.tile_size, m.tile_size, 3, dtype=torch.uint8, device=m.device))
    try:
        with torch.inference_mode():
            y = m.module(x)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(
            f"{m.source}: model fails on a 1x3x{m.tile_size}x{m.tile_size} input ({one_line(exc)})") from None
    side = m.tile_size // m.output_stride
    check_output_shape(m.source, y, (1, len(m.classes), side, side), f"a {m.tile_size}px tile", m.output_stride)
