"""Writing model files: package_model (a torch.export program with its metadata), module_from_factory, TorchScript."""
from __future__ import annotations

import copy
import importlib
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from worker.logfmt import one_line
from worker.models.loaded_model import LoadedModel, ModelError, check_output_shape
from worker.models.loading import load_model
from worker.models.metadata import KNOWN_KEYS, META_FILE, is_int, validate_metadata
from worker.models.normalisation import Normalisation
from worker.models.tinyseg import TINYSEG_ARCHITECTURE, TinySegNet

EXPORT_MAX_BATCH = 4096  # upper bound of the dynamic batch dimension package_model exports


def package_model(
    module: nn.Module,
    path: str | os.PathLike,
    *,
    classes: Sequence[str],
    input_mpp_um: float,
    tile_size: int = 256,
    output_stride: int = 4,
    normalisation: Mapping[str, Sequence[float]] | Normalisation | None = None,
    colors: Sequence[Sequence[int]] | None = None,
    name: str | None = None,
    version: str = "unknown",
    architecture: str | None = None,
    arch: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    max_batch: int = EXPORT_MAX_BATCH,
) -> Path:
    """Export `module` (weights loaded) with its metadata into one torch.export file that `--model PATH` loads.

    The module must map a float32 N x 3 x tile_size x tile_size batch, normalised as `normalisation` says
    ({"mean": [r, g, b], "std": [r, g, b]} on the [0, 1] RGB scale; default mean 0, std 1), to class logits
    N x len(classes) x tile_size/output_stride x tile_size/output_stride. `input_mpp_um` is the pixel size it
    analyses at, in µm per pixel (0.25 for 40x, 0.5 for 20x). It is exported in eval mode, on the CPU, with a
    dynamic batch dimension (1 to `max_batch` tiles); `extra` adds keys to gpuburst.json (free-form facts, kept in
    `LoadedModel.info`). A `TinySegNet` records its architecture so the worker runs it eagerly (and on its CPU fast
    path). The metadata is validated first, the exported program's output shape is probed at batch sizes 1 and 3,
    and the written file is loaded back once. Writes `path` atomically and returns it; raises ModelError (one line)
    on any problem.
    """
    path = Path(path)
    if isinstance(normalisation, Normalisation):
        normalisation = normalisation.as_json()
    if architecture is None and type(module) is TinySegNet:
        architecture, arch = TINYSEG_ARCHITECTURE, module.arch_kwargs()
    try:
        meta: dict = {
            "name": name or path.name.split(".")[0], "version": version, "classes": list(classes),
            "input_mpp_um": input_mpp_um, "tile_size": tile_size, "output_stride": output_stride,
            "normalisation": {k: list(v) for k, v in
                              dict(normalisation or {"mean": [0.0] * 3, "std": [1.0] * 3}).items()},
        }
        if colors is not None:
            meta["colors"] = [list(c) for c in colors]
        if architecture is not None:
            meta["architecture"] = architecture
            meta["arch"] = dict(arch or {})
        for k, v in (extra or {}).items():
            if k in meta or k in KNOWN_KEYS:
                raise ValueError(f"extra key {k!r} is a metadata key: pass it as its own argument")
            meta[k] = v
        md = validate_metadata(meta, require_mpp=True)
        text = json.dumps(md.as_json())
    except (ValueError, TypeError) as exc:
        raise ModelError(f"{path}: {one_line(exc)}") from None
    if not isinstance(module, nn.Module):
        raise ModelError(f"{path}: module={type(module).__name__}: must be a torch.nn.Module")
    if not is_int(max_batch) or max_batch < 3:
        raise ModelError(f"{path}: max_batch={max_batch!r}: must be a whole number >= 3")

    tensors = [*module.parameters(), *module.buffers()]
    if any(t.device.type != "cpu" or not t.is_contiguous() for t in tensors):
        # A CPU copy in the plain layout: the file must load on any machine, and torch.export.save stores
        # channels_last weights badly. The caller's module is left as it is.
        module = copy.deepcopy(module).to("cpu").to(memory_format=torch.contiguous_format)
    was_training = module.training
    module.eval()
    T, side, n_classes = md.tile_size, md.tile_size // md.output_stride, len(md.classes)
    gen = torch.Generator().manual_seed(0)
    example = md.normalisation.apply(torch.randint(0, 256, (2, T, T, 3), generator=gen, dtype=torch.uint8))
    example = example.contiguous()  # traced with a plain layout; any layout runs
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            batch = torch.export.Dim("batch", min=1, max=max_batch)
            ep = torch.export.export(module, (example,), dynamic_shapes=({0: batch},))
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"{path}: torch.export.export of {type(module).__name__} failed ({one_line(exc)})") from None
    finally:
        module.train(was_training)
    ep.example_inputs = None  # not stored in the file: it would be the largest thing in it
    program = ep.module()
    for n in (1, 3):
        x = md.normalisation.apply(torch.randint(0, 256, (n, T, T, 3), generator=gen, dtype=torch.uint8))
        try:
            with torch.inference_mode():
                y = program(x)
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"{path}: the exported program fails on a batch of {n} tiles ({one_line(exc)})") from None
        check_output_shape(path, y, (n, n_classes, side, side), f"a batch of {n} {T}px tiles", md.output_stride)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.partial.pt2")
    try:
        torch.export.save(ep, str(tmp), extra_files={META_FILE: text})
        try:
            load_model(tmp, "cpu")  # what --model will do, once, before the file takes its name
        except ModelError as exc:
            raise ModelError(str(exc).replace(str(tmp), str(path), 1)) from None
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def module_from_factory(spec: str, state_dict: str | os.PathLike | None = None) -> nn.Module:
    """The nn.Module that `spec` ("package.module:factory", factory = a callable or class returning it) builds,
    with the weights of `state_dict` (a torch.save file of a state dict, or of {"state_dict": ...}) loaded
    strictly when given. Raises ModelError (one line)."""
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise ModelError(f"--module {spec!r}: expected package.module:factory")
    try:
        obj: Any = importlib.import_module(mod_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"--module {spec!r}: cannot import it ({one_line(exc, 160)})") from None
    if not callable(obj):
        raise ModelError(f"--module {spec!r}: {type(obj).__name__} is not callable")
    try:
        module = obj()
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"--module {spec!r}: the factory failed ({one_line(exc, 160)})") from None
    if not isinstance(module, nn.Module):
        raise ModelError(f"--module {spec!r}: returned {type(module).__name__}, not a torch.nn.Module")
    if state_dict is not None:
        try:
            blob = torch.load(state_dict, map_location="cpu", weights_only=True)
            if isinstance(blob, dict) and isinstance(blob.get("state_dict"), dict):
                blob = blob["state_dict"]
            module.load_state_dict(blob, strict=True)
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"{state_dict}: cannot load these weights into {type(module).__name__} "
                             f"({one_line(exc, 160)})") from None
    return module


def export_torchscript(model: LoadedModel, path: str | Path) -> Path:
    """Save `model` as a TorchScript archive carrying its metadata in gpuburst.json (deprecated: prefer
    `package_model`, which writes a torch.export program)."""
    path = Path(path)
    module = model.module
    if not isinstance(module, torch.jit.ScriptModule):
        # Script a CPU copy: the loaded model keeps running where it is.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.script(copy.deepcopy(module).to("cpu").to(memory_format=torch.contiguous_format))
    meta = {
        "name": model.name,
        "version": model.version,
        "classes": list(model.classes),
        "tile_size": model.tile_size,
        "output_stride": model.output_stride,
        "input_mpp_um": model.input_mpp_um,
        "normalisation": model.normalisation.as_json(),
        "colors": [list(c) for c in model.colors],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(module, str(path), _extra_files={META_FILE: json.dumps(meta)})
    return path
