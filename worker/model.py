"""The segmentation model: the built-in plain-torch net with its committed weights, or a user's TorchScript file.

Model contract (built-in and `--model PATH` alike): input is a float32 RGB batch N x 3 x T x T with values in
[0, 1] (T = `tile_size`, pixels at `input_mpp_um`), output is class logits N x C x T/s x T/s (s = `output_stride`,
C = len(classes), class 0 = background).

A TorchScript file declares its metadata in a JSON file stored inside the archive under the name
``gpuburst.json`` (``torch.jit.save(m, path, _extra_files={"gpuburst.json": json.dumps(meta)})``, see
`export_torchscript`), with keys ``classes`` (required, list of names, index 0 = background), ``name``,
``version``, ``tile_size`` (default 256), ``output_stride`` (default 4), ``input_mpp_um`` (default null: run at
the slide's own resolution) and ``colors`` (optional list of [r, g, b] per class). A scripted module with a
``classes: List[str]`` attribute (and optionally ``name``/``version`` string attributes) is accepted too.
"""
from __future__ import annotations

import copy
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
BUILTIN_WEIGHTS = WEIGHTS_DIR / "tinyseg-v1.pt"
META_FILE = "gpuburst.json"

# Display colours (RGB) per class index for overlays and previews; classes past the table cycle through it.
DEFAULT_COLORS = [
    (0, 0, 0),
    (40, 90, 230),  # nuclei: blue
    (230, 60, 40),  # vessel: red
    (40, 180, 70),
    (230, 180, 30),
    (170, 60, 200),
    (30, 190, 200),
]


class ModelError(Exception):
    """The model file cannot be used; the message is one line naming the file and the problem."""


class ConvBNReLU(nn.Sequential):
    """Conv (no bias) + BatchNorm + ReLU; `fold()` merges the BatchNorm into the conv for inference."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, dilation: int = 1):
        pad = 0 if stride > 1 else dilation * (k - 1) // 2
        super().__init__(
            nn.Conv2d(cin, cout, k, stride=stride, padding=pad, dilation=dilation, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )

    @torch.no_grad()
    def fold(self) -> None:
        conv, bn = self[0], self[1]
        if not isinstance(bn, nn.BatchNorm2d):
            return
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        fused = nn.Conv2d(
            conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
            padding=conv.padding, dilation=conv.dilation, bias=True,
        )
        fused.weight.copy_(conv.weight * scale[:, None, None, None])
        fused.bias.copy_(bn.bias - bn.running_mean * scale)
        self[0], self[1] = fused, nn.Identity()


class TinySegNet(nn.Module):
    """Small stride-4 segmentation net in plain torch: a 1/4 branch and a dilated 1/8 context branch, fused."""

    def __init__(self, n_classes: int = 3, width: int = 32, deep_width: int = 64):
        super().__init__()
        self.stem = nn.Sequential(ConvBNReLU(3, width, 4, stride=4), ConvBNReLU(width, width, 3))
        self.context = nn.Sequential(
            ConvBNReLU(width, deep_width, 2, stride=2),
            ConvBNReLU(deep_width, deep_width, 3),
            ConvBNReLU(deep_width, deep_width, 3, dilation=2),
            ConvBNReLU(deep_width, deep_width, 3, dilation=4),
        )
        self.head = nn.Sequential(ConvBNReLU(width + deep_width, width, 3), nn.Conv2d(width, n_classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - 0.5) * 4.0  # fixed normalisation of [0, 1] RGB
        fine = self.stem(x)
        ctx = F.interpolate(self.context(fine), size=fine.shape[-2:], mode="nearest")
        return self.head(torch.cat([fine, ctx], 1))

    def fold_batchnorm(self) -> "TinySegNet":
        for m in self.modules():
            if isinstance(m, ConvBNReLU):
                m.fold()
        return self


@dataclass
class LoadedModel:
    """A model ready for inference, with what the pipeline must know to feed it and to label its output."""

    module: nn.Module
    """The network, in eval mode, on `device`, channels_last."""
    name: str
    """Model name, reported in every result."""
    version: str
    """Model version, reported in every result."""
    classes: list[str]
    """Class names by output channel; index 0 is background."""
    tile_size: int = 256
    """Side of the square input tile, in pixels (default 256)."""
    output_stride: int = 4
    """Input pixels per output pixel along each axis (default 4)."""
    input_mpp_um: float | None = 0.25
    """Pixel size the model expects, in µm per pixel; None runs it at the slide's full resolution (default 0.25)."""
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    """Where `module` lives."""
    source: str = ""
    """The file the weights came from."""
    colors: list[tuple[int, int, int]] = field(default_factory=list)
    """Display colour (RGB 0-255) per class."""
    info: dict = field(default_factory=dict)
    """Free-form facts from the weights file (for the built-in model: its training report)."""


def _colors(n: int, given=None) -> list[tuple[int, int, int]]:
    if given:
        if len(given) != n:
            raise ValueError(f"colors has {len(given)} entries for {n} classes")
        return [tuple(int(c) for c in rgb) for rgb in given]
    k = len(DEFAULT_COLORS) - 1  # past the table, cycle through the non-background colours
    return [DEFAULT_COLORS[i] if i <= k else DEFAULT_COLORS[1 + (i - 1) % k] for i in range(n)]


def build_builtin(arch: dict | None = None) -> TinySegNet:
    """A fresh (untrained) built-in net with the given architecture keywords."""
    return TinySegNet(**(arch or {}))


def load_model(path: str | None, device: torch.device) -> LoadedModel:
    """Load the built-in model (`path=None`) or a TorchScript file, probe it once, and return it ready to run."""
    device = torch.device(device)
    loaded = _load_builtin(BUILTIN_WEIGHTS, device) if path is None else _load_torchscript(Path(path), device)
    _probe(loaded)
    return loaded


def _load_builtin(path: Path, device: torch.device) -> LoadedModel:
    if not path.is_file():
        raise ModelError(f"{path}: built-in weights are missing; run `python -m worker.train --out {path}`")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        meta = blob["meta"]
        net = build_builtin(meta.get("arch"))
        net.load_state_dict(blob["state_dict"], strict=True)
    except Exception as exc:  # noqa: BLE001 - any failure means the weights file is unusable
        raise ModelError(f"{path}: cannot load built-in weights ({' '.join(str(exc).split())[:200]})") from None
    net.eval().fold_batchnorm()
    module = net.to(device).to(memory_format=torch.channels_last)
    classes = list(meta["classes"])
    return LoadedModel(
        module=module,
        name=str(meta["name"]),
        version=str(meta["version"]),
        classes=classes,
        tile_size=int(meta.get("tile_size", 256)),
        output_stride=int(meta.get("output_stride", 4)),
        input_mpp_um=meta.get("input_mpp_um", 0.25),
        device=device,
        source=str(path),
        colors=_colors(len(classes), meta.get("colors")),
        info={k: v for k, v in meta.items() if k not in ("arch",)},
    )


def _load_torchscript(path: Path, device: torch.device) -> LoadedModel:
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    extra = {META_FILE: ""}
    try:
        with warnings.catch_warnings():  # torch 2.13 flags TorchScript as deprecated; it is still the format we take
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(path), map_location=device, _extra_files=extra)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(
            f"{path}: not a TorchScript archive; --model takes a torch.jit.save file "
            f"(torch.jit.load failed: {' '.join(str(exc).split())[:160]})"
        ) from None
    meta: dict = {}
    if extra[META_FILE]:
        try:
            meta = json.loads(extra[META_FILE])
        except ValueError as exc:
            raise ModelError(f"{path}: {META_FILE} inside the archive is not JSON ({exc})") from None
        if not isinstance(meta, dict):
            raise ModelError(f"{path}: {META_FILE} inside the archive must be a JSON object")
    classes = meta.get("classes")
    if classes is None and hasattr(module, "classes"):
        classes = list(module.classes)
    if not classes or not all(isinstance(c, str) and c for c in classes):
        raise ModelError(
            f"{path}: the TorchScript model declares no classes; save it with "
            f"_extra_files={{'{META_FILE}': json.dumps({{'classes': [...], ...}})}} or give it a `classes: List[str]` attribute"
        )
    name = meta.get("name") or getattr(module, "name", None) or path.stem
    version = meta.get("version") or getattr(module, "version", None) or "unknown"
    try:
        tile_size = int(meta.get("tile_size", 256))
        stride = int(meta.get("output_stride", 4))
        mpp = meta.get("input_mpp_um")
        mpp = None if mpp is None else float(mpp)
        colors = _colors(len(classes), meta.get("colors"))
    except (TypeError, ValueError) as exc:
        raise ModelError(f"{path}: bad value in {META_FILE} ({exc})") from None
    if tile_size <= 0 or stride <= 0 or tile_size % stride:
        raise ModelError(f"{path}: tile_size={tile_size} must be a positive multiple of output_stride={stride}")
    module.eval()
    module = module.to(memory_format=torch.channels_last) if hasattr(module, "to") else module
    return LoadedModel(
        module=module, name=str(name), version=str(version), classes=[str(c) for c in classes], tile_size=tile_size,
        output_stride=stride, input_mpp_um=mpp, device=device, source=str(path), colors=colors,
        info={k: v for k, v in meta.items() if k not in ("classes", "colors")},
    )


def _probe(m: LoadedModel) -> None:
    """Run one blank tile through the model so a wrong output shape fails at load time, not mid-slide."""
    x = torch.zeros(1, 3, m.tile_size, m.tile_size, device=m.device).contiguous(memory_format=torch.channels_last)
    try:
        with torch.inference_mode():
            y = m.module(x)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"{m.source}: model fails on a 1x3x{m.tile_size}x{m.tile_size} input ({' '.join(str(exc).split())[:200]})") from None
    side = m.tile_size // m.output_stride
    want = (1, len(m.classes), side, side)
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != want:
        got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ModelError(
            f"{m.source}: output shape {got} for a {m.tile_size}px tile, expected {want} "
            f"({len(m.classes)} classes at output stride {m.output_stride})"
        )


def export_torchscript(model: LoadedModel, path: str | Path) -> Path:
    """Save `model` as a TorchScript archive carrying its metadata in gpuburst.json (what `--model PATH` loads)."""
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
        "colors": [list(c) for c in model.colors],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(module, str(path), _extra_files={META_FILE: json.dumps(meta)})
    return path
