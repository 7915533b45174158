"""The segmentation model: the built-in net, or a lab's own torch.export program (or TorchScript file), loaded with its metadata.

Model contract (built-in and `--model PATH` alike): the worker turns each RGB tile (T x T pixels at `input_mpp_um`,
T = `tile_size`) into a float32 batch N x 3 x T x T, x = (rgb / 255 - mean) / std with the model's `normalisation`
(`LoadedModel.prepare`), and the model returns class logits N x C x T/s x T/s (s = `output_stride`,
C = len(classes), class 0 = background).

A model file is a **torch.export program** (`.pt2`, written by `torch.export.save`; see `package_model` and
`python -m worker package-model`) carrying its metadata inside the archive as ``gpuburst.json``
(``torch.export.save(ep, path, extra_files={"gpuburst.json": json.dumps(meta)})``). The keys (`validate_metadata`):

``classes``        required: list of class names, index 0 = background (2-256 names)
``input_mpp_um``   required for .pt2: µm per pixel the model analyses at (0.05-20)
``tile_size``      input side in pixels (default 256)
``output_stride``  input pixels per output pixel (default 4; must divide tile_size)
``normalisation``  {"mean": [3 floats], "std": [3 floats]} applied to RGB in [0, 1] (default mean 0, std 1)
``colors``         optional [r, g, b] (0-255) per class for overlays and previews
``name``, ``version``  reported in every result (default the file stem, "unknown")
``architecture``, ``arch``  optional: "gpuburst.TinySegNet" and its keyword arguments, so the loader can run the
                   program's own weights in the eager net (and the CPU fast path) after checking it computes the same
                   logits; any other key is kept in `LoadedModel.info`.

The program must take one N x 3 x T x T tensor with a dynamic batch dimension (`torch.export.Dim`). The format is
told from the file's content, not its suffix. TorchScript files (``torch.jit.save`` with the same ``gpuburst.json``
in ``_extra_files``, or a scripted module with a ``classes: List[str]`` attribute) are still accepted, though
deprecated in torch 2.13; there ``input_mpp_um`` may be left out (run at the slide's own resolution).

A model file is code: load only files you trust. Every failure to load one is a `ModelError`, one line naming the
file and what is wrong.
"""
from __future__ import annotations

import copy
import functools
import importlib
import json
import math
import os
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
BUILTIN_WEIGHTS = WEIGHTS_DIR / "tinyseg-v2.pt2"
META_FILE = "gpuburst.json"
TINYSEG_ARCHITECTURE = "gpuburst.TinySegNet"
MPP_RANGE_UM = (0.05, 20.0)  # plausible pixel sizes a model can declare, µm per pixel
MAX_CLASSES = 256  # class maps are uint8
EXPORT_MAX_BATCH = 4096  # upper bound of the dynamic batch dimension package_model exports

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
    """The model file (or the metadata given to package it) cannot be used; the message is one line naming the
    file and the problem."""


def _one_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(value: Any, limit: int = 60) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Normalisation:
    """Per-channel input normalisation the worker applies before the model: x = (rgb / 255 - mean) / std."""

    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Mean of R, G, B on the [0, 1] scale (default 0, 0, 0)."""
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    """Standard deviation of R, G, B on the [0, 1] scale, each > 0 (default 1, 1, 1)."""

    def apply(self, rgb: torch.Tensor) -> torch.Tensor:
        """float32 N x 3 x H x W (channels_last strides) from an N x H x W x 3 RGB batch of 0-255 values (uint8 or
        float), on the batch's device; the input is not modified."""
        # NHWC -> NCHW is a view with channels_last strides; the (always copying) conversion keeps that layout.
        x = rgb.permute(0, 3, 1, 2).to(torch.float32, copy=True)
        scale, shift = _affine(self.mean, self.std, x.device)
        if shift is None:  # no mean, one std: a plain division, exactly x / 255 by default
            return x.div_(scale)
        return x.mul_(scale).add_(shift)

    def as_json(self) -> dict:
        return {"mean": list(self.mean), "std": list(self.std)}


@functools.lru_cache(maxsize=32)
def _affine(mean: tuple, std: tuple, device: torch.device) -> tuple:
    """(scale, shift) with (rgb / 255 - mean) / std = rgb * scale + shift, as tensors on `device` (cached);
    (divisor, None) where that is rgb / divisor."""
    with torch.inference_mode(False):  # usable in training too, not only under inference_mode
        if all(m == 0 for m in mean) and len(set(std)) == 1:
            return 255.0 * std[0], None
        scale = torch.tensor([1.0 / (255.0 * s) for s in std], dtype=torch.float32, device=device).view(1, 3, 1, 1)
        shift = torch.tensor([-m / s for m, s in zip(mean, std)], dtype=torch.float32, device=device).view(1, 3, 1, 1)
    return scale, shift


TINYSEG_NORMALISATION = Normalisation(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
"""The built-in net's input normalisation: (rgb / 255 - 0.5) * 4."""


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
    """Small stride-4 segmentation net in plain torch: a 1/4 branch and a dilated 1/8 context branch, fused.

    Its input is already normalised (`TINYSEG_NORMALISATION`, applied by the worker from the model's metadata).
    """

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
        fine = self.stem(x)
        ctx = F.interpolate(self.context(fine), size=fine.shape[-2:], mode="nearest")
        return self.head(torch.cat([fine, ctx], 1))

    def arch_kwargs(self) -> dict:
        """The keyword arguments that rebuild this architecture (`TinySegNet(**net.arch_kwargs())`)."""
        return {
            "n_classes": int(self.head[1].out_channels),
            "width": int(self.stem[0][0].out_channels),
            "deep_width": int(self.context[0][0].out_channels),
        }

    def fold_batchnorm(self) -> "TinySegNet":
        for m in self.modules():
            if isinstance(m, ConvBNReLU):
                m.fold()
        return self


@dataclass(frozen=True)
class ModelMetadata:
    """The validated contents of a model's gpuburst.json."""

    classes: list[str]
    """Class names by output channel; index 0 is background (2-256 names)."""
    input_mpp_um: float | None = None
    """Pixel size the model analyses at, in µm per pixel (0.05-20); None runs it at the slide's full resolution
    (TorchScript only; default None)."""
    tile_size: int = 256
    """Side of the square input tile, in pixels (default 256)."""
    output_stride: int = 4
    """Input pixels per output pixel along each axis (default 4)."""
    normalisation: Normalisation = Normalisation()
    """What the worker applies to RGB in [0, 1] before the model (default mean 0, std 1)."""
    colors: list[tuple[int, int, int]] | None = None
    """Display colour (RGB 0-255) per class (default None: the worker's table)."""
    name: str | None = None
    """Model name (default None: the file stem)."""
    version: str | None = None
    """Model version (default None: "unknown")."""
    architecture: str | None = None
    """Eager architecture the weights fit, e.g. "gpuburst.TinySegNet" (default None: run the program itself)."""
    arch: dict | None = None
    """Keyword arguments of `architecture` (default None: its defaults)."""
    extra: dict = field(default_factory=dict)
    """Every other key of the JSON (e.g. the built-in model's training report)."""

    def as_json(self) -> dict:
        """The metadata as gpuburst.json holds it."""
        out: dict = {"name": self.name, "version": self.version, "classes": list(self.classes),
                     "input_mpp_um": self.input_mpp_um, "tile_size": self.tile_size,
                     "output_stride": self.output_stride, "normalisation": self.normalisation.as_json()}
        if self.colors is not None:
            out["colors"] = [list(c) for c in self.colors]
        if self.architecture is not None:
            out["architecture"] = self.architecture
            out["arch"] = dict(self.arch or {})
        out.update(self.extra)
        return {k: v for k, v in out.items() if v is not None}


_KNOWN_KEYS = ("classes", "input_mpp_um", "tile_size", "output_stride", "normalisation", "colors", "name",
               "version", "architecture", "arch")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_classes(v: Any) -> str | None:
    if not isinstance(v, list) or not all(isinstance(c, str) and c.strip() for c in v):
        return "must be a list of non-empty class names (index 0 = background)"
    if not 2 <= len(v) <= MAX_CLASSES:
        return f"must list 2-{MAX_CLASSES} classes (index 0 = background), not {len(v)}"
    if len(set(v)) != len(v):
        return "must not repeat a class name"
    return None


def _check_mpp(v: Any) -> str | None:
    lo, hi = MPP_RANGE_UM
    if not _is_number(v) or not lo <= v <= hi:
        return f"must be the µm per pixel the model analyses at, a number from {lo:g} to {hi:g} (0.25 is 40x, 0.5 is 20x)"
    return None


def _check_positive_int(v: Any) -> str | None:
    return None if _is_int(v) and 0 < v <= 16384 else "must be a whole number of pixels from 1 to 16384"


def _check_normalisation(v: Any) -> str | None:
    if not isinstance(v, dict) or set(v) - {"mean", "std"}:
        return 'must be {"mean": [r, g, b], "std": [r, g, b]} (RGB on the [0, 1] scale)'
    for key in ("mean", "std"):
        if key in v:
            xs = v[key]
            if not isinstance(xs, list) or len(xs) != 3 or not all(_is_number(x) for x in xs):
                return f"{key} must be a list of 3 numbers (R, G, B on the [0, 1] scale)"
            if key == "std" and not all(x > 0 for x in xs):
                return "std must be 3 numbers > 0"
    return None


def _check_string(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "must be a non-empty string"


def _check_arch(v: Any) -> str | None:
    ok = isinstance(v, dict) and all(isinstance(k, str) and (_is_number(x) or isinstance(x, (str, bool))) for k, x in v.items())
    return None if ok else "must be an object of keyword arguments (numbers, strings, booleans)"


# key -> the rule a present, non-null value must pass (validation as a table of rules)
_RULES = {
    "classes": _check_classes,
    "input_mpp_um": _check_mpp,
    "tile_size": _check_positive_int,
    "output_stride": _check_positive_int,
    "normalisation": _check_normalisation,
    "name": _check_string,
    "version": _check_string,
    "architecture": _check_string,
    "arch": _check_arch,
}


def validate_metadata(meta: Any, *, require_mpp: bool = True) -> ModelMetadata:
    """Check a gpuburst.json object and return it as ModelMetadata with the defaults filled in.

    Raises ValueError, one line naming the key and the value and what is allowed.
    """
    if not isinstance(meta, dict):
        raise ValueError(f"must be a JSON object, not {type(meta).__name__}")
    if "classes" not in meta or meta["classes"] is None:
        raise ValueError("classes is missing: list the class names, index 0 = background")
    if require_mpp and meta.get("input_mpp_um") is None:
        raise ValueError("input_mpp_um is missing: give the µm per pixel the model analyses at (0.25 is 40x, 0.5 is 20x)")
    for key, rule in _RULES.items():
        value = meta.get(key)
        if value is None:
            continue
        problem = rule(value)
        if problem:
            raise ValueError(f"{key}={_show(value)}: {problem}")
    classes = list(meta["classes"])
    tile, stride = meta.get("tile_size", 256), meta.get("output_stride", 4)
    tile = 256 if tile is None else tile
    stride = 4 if stride is None else stride
    if tile % stride:
        raise ValueError(f"tile_size={tile}: must be a multiple of output_stride={stride}")
    colors = meta.get("colors")
    if colors is not None:
        ok = isinstance(colors, list) and all(
            isinstance(c, list) and len(c) == 3 and all(_is_int(x) and 0 <= x <= 255 for x in c) for c in colors
        )
        if not ok:
            raise ValueError(f"colors={_show(colors)}: must be a list of [r, g, b] with whole numbers 0-255")
        if len(colors) != len(classes):
            raise ValueError(f"colors={_show(colors)}: has {len(colors)} entries for {len(classes)} classes")
    norm = meta.get("normalisation") or {}
    arch = meta.get("arch")
    if arch is not None and meta.get("architecture") is None:
        raise ValueError(f"arch={_show(arch)}: given without architecture (e.g. {TINYSEG_ARCHITECTURE!r})")
    mpp = meta.get("input_mpp_um")
    return ModelMetadata(
        classes=classes,
        input_mpp_um=None if mpp is None else float(mpp),
        tile_size=int(tile),
        output_stride=int(stride),
        normalisation=Normalisation(
            mean=tuple(float(x) for x in norm.get("mean", (0.0, 0.0, 0.0))),
            std=tuple(float(x) for x in norm.get("std", (1.0, 1.0, 1.0))),
        ),
        colors=None if colors is None else [tuple(int(x) for x in c) for c in colors],
        name=meta.get("name"),
        version=meta.get("version"),
        architecture=meta.get("architecture"),
        arch=None if arch is None else dict(arch),
        extra={k: v for k, v in meta.items() if k not in _KNOWN_KEYS},
    )


@dataclass
class LoadedModel:
    """A model ready for inference, with what the pipeline must know to feed it and to label its output."""

    module: nn.Module
    """The network, in eval mode, on `device`, channels_last; takes `prepare`d input."""
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
    input_mpp_um: float | None = None
    """Pixel size the model analyses at, in µm per pixel; None runs it at the slide's full resolution (default
    None; the built-in model: 0.5)."""
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    """Where `module` lives."""
    source: str = ""
    """The file the model came from."""
    colors: list[tuple[int, int, int]] = field(default_factory=list)
    """Display colour (RGB 0-255) per class."""
    normalisation: Normalisation = Normalisation()
    """Input normalisation `prepare` applies (default mean 0, std 1: RGB scaled to [0, 1])."""
    max_batch: int | None = None
    """Largest batch the model accepts, in tiles (default None: no known limit)."""
    format: str = ""
    """How the file was read: "torch.export", "torch.export (eager TinySegNet)" or "torchscript"."""
    info: dict = field(default_factory=dict)
    """Free-form facts from the model file (for the built-in model: its training report)."""

    def prepare(self, batch: torch.Tensor) -> torch.Tensor:
        """The model's input for a uint8 N x T x T x 3 RGB batch: float32 N x 3 x T x T (channels_last strides),
        normalised as the model's metadata says, on the batch's device."""
        return self.normalisation.apply(batch)


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


def load_model(path: str | os.PathLike | None, device: torch.device | str) -> LoadedModel:
    """Load the built-in model (`path=None`) or a model file (torch.export .pt2 or TorchScript), probe it once,
    and return it ready to run. Raises ModelError (one line naming the file) when it cannot be used."""
    device = torch.device(device)
    if path is None:
        p = BUILTIN_WEIGHTS
        if not p.is_file():
            raise ModelError(f"{p}: built-in weights are missing; run `python -m worker.train --out {p}`")
    else:
        p = Path(path)
        if not p.is_file():
            raise ModelError(f"{p}: no such model file")
    kind = model_format(p)
    loaded = _load_exported(p, device) if kind == "torch.export" else _load_torchscript(p, device)
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


def model_format(path: Path) -> str:
    """"torch.export" or "torchscript", told from the file's content (not its suffix); ModelError otherwise."""
    hint = "not a torch.export program (.pt2) and not a TorchScript archive; package a model with " \
           "`python -m worker package-model` (worker.model.package_model)"
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as exc:
        raise ModelError(f"{path}: cannot read the model file ({_one_line(exc, 120)})") from None
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            fmt_names = [n for n in names if n == "archive_format" or (n.endswith("/archive_format") and n.count("/") == 1)]
            fmt = z.read(fmt_names[0]).decode("utf-8", "replace").strip() if fmt_names else None
    except (zipfile.BadZipFile, EOFError, ValueError, OSError, KeyError, NotImplementedError):
        raise ModelError(f"{path}: {_describe_bytes(head)}, {hint}") from None
    if fmt is not None:
        if fmt != "pt2":
            raise ModelError(f"{path}: archive_format={fmt!r}: expected 'pt2' (a torch.export.save file)")
        return "torch.export"
    if any("/code/" in n for n in names) or any(n.endswith("/constants.pkl") for n in names):
        return "torchscript"
    if any(n.endswith("data.pkl") for n in names):
        raise ModelError(f"{path}: a torch.save checkpoint (weights or a pickled object), {hint} with --state-dict")
    raise ModelError(f"{path}: a zip archive of something else, {hint}")


def _read_meta(path: Path, raw: Any) -> dict | None:
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not raw:
        return None
    try:
        meta = json.loads(raw)
    except ValueError as exc:
        raise ModelError(f"{path}: {META_FILE} inside the archive is not JSON ({_one_line(exc, 120)})") from None
    if not isinstance(meta, dict):
        raise ModelError(f"{path}: {META_FILE} inside the archive must be a JSON object, not {type(meta).__name__}")
    return meta


def _program_input(path: Path, ep: "torch.export.ExportedProgram", tile: int) -> int | None:
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
        raise ModelError(f"{path}: the program accepts batches of {lo} or more tiles only; export it with Dim('batch', min=1)")
    try:
        return int(hi) if hi is not None and hi.is_finite else None
    except (AttributeError, TypeError, ValueError, OverflowError):
        return None


def _rebuild_tinyseg(ep: "torch.export.ExportedProgram", meta: ModelMetadata) -> tuple[TinySegNet | None, str]:
    """The eager TinySegNet holding the program's own weights, if it computes the program's logits; else None."""
    try:
        net = TinySegNet(**(meta.arch or {}))
        net.load_state_dict(ep.state_dict, strict=True)
        net.eval()
        T = meta.tile_size
        gen = torch.Generator().manual_seed(0)
        rgb = torch.randint(0, 256, (2, T, T, 3), generator=gen, dtype=torch.uint8)
        x = meta.normalisation.apply(rgb)
        with torch.inference_mode():
            want = ep.module()(x)
            got = net(x)
        tolerance = 1e-4 * max(1.0, float(want.abs().max()))
        if got.shape != want.shape or not torch.allclose(got, want, rtol=0, atol=tolerance):
            return None, "the eager TinySegNet computes other logits than the program"
    except Exception as exc:  # noqa: BLE001 - any mismatch means: run the program itself
        return None, f"cannot rebuild the eager TinySegNet ({_one_line(exc, 120)})"
    return net, ""


def _load_exported(path: Path, device: torch.device) -> LoadedModel:
    extra = {META_FILE: ""}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with open(path, "rb") as f:  # a file object: torch only warns about names not ending in .pt2
                ep = torch.export.load(f, extra_files=extra)
    except Exception as exc:  # noqa: BLE001 - any failure means the file is unusable
        raise ModelError(f"{path}: cannot read the torch.export program ({_one_line(exc)})") from None
    raw = _read_meta(path, extra.get(META_FILE))
    if raw is None:
        raise ModelError(
            f"{path}: no {META_FILE} inside the archive; package the model with `python -m worker package-model` "
            f"or torch.export.save(ep, path, extra_files={{'{META_FILE}': json.dumps({{'classes': [...], "
            f"'input_mpp_um': ..., ...}})}})"
        )
    try:
        meta = validate_metadata(raw, require_mpp=True)
    except ValueError as exc:
        raise ModelError(f"{path}: {META_FILE}: {exc}") from None
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
        module: nn.Module = net.fold_batchnorm().to(device).to(memory_format=torch.channels_last)
        fmt = "torch.export (eager TinySegNet)"
    else:
        try:
            if device.type != "cpu":
                ep = torch.export.passes.move_to_device_pass(ep, device)
            module = ep.module()
            module = module.to(memory_format=torch.channels_last)
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"{path}: cannot place the torch.export program on {device} ({_one_line(exc)})") from None
        fmt = "torch.export"
    return LoadedModel(
        module=module,
        name=str(meta.name or path.name.split(".")[0]),
        version=str(meta.version or "unknown"),
        classes=list(meta.classes),
        tile_size=meta.tile_size,
        output_stride=meta.output_stride,
        input_mpp_um=meta.input_mpp_um,
        device=device,
        source=str(path),
        colors=_colors(len(meta.classes), meta.colors),
        normalisation=meta.normalisation,
        max_batch=max_batch,
        format=fmt,
        info=info,
    )


def _load_torchscript(path: Path, device: torch.device) -> LoadedModel:
    extra = {META_FILE: ""}
    try:
        with warnings.catch_warnings():  # torch 2.13 flags TorchScript as deprecated; still accepted
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(str(path), map_location=device, _extra_files=extra)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(
            f"{path}: not a TorchScript archive that torch can read (torch.jit.load failed: {_one_line(exc, 160)})"
        ) from None
    meta = dict(_read_meta(path, extra[META_FILE]) or {})
    if meta.get("classes") is None and hasattr(module, "classes"):
        meta["classes"] = list(module.classes)
    if not meta.get("classes"):
        raise ModelError(
            f"{path}: the TorchScript model declares no classes; save it with "
            f"_extra_files={{'{META_FILE}': json.dumps({{'classes': [...], ...}})}} or give it a `classes: List[str]` attribute"
        )
    for key in ("name", "version"):
        if meta.get(key) is None and isinstance(getattr(module, key, None), str):
            meta[key] = getattr(module, key)
    try:
        md = validate_metadata(meta, require_mpp=False)
    except ValueError as exc:
        raise ModelError(f"{path}: {META_FILE}: {exc}") from None
    module.eval()
    module = module.to(memory_format=torch.channels_last) if hasattr(module, "to") else module
    return LoadedModel(
        module=module, name=str(md.name or path.stem), version=str(md.version or "unknown"), classes=list(md.classes),
        tile_size=md.tile_size, output_stride=md.output_stride, input_mpp_um=md.input_mpp_um, device=device,
        source=str(path), colors=_colors(len(md.classes), md.colors), normalisation=md.normalisation,
        format="torchscript", info=dict(md.extra),
    )


def _probe(m: LoadedModel) -> None:
    """Run one blank tile through the model so a wrong output shape fails at load time, not mid-slide."""
    x = m.prepare(torch.zeros(1, m.tile_size, m.tile_size, 3, dtype=torch.uint8, device=m.device))
    try:
        with torch.inference_mode():
            y = m.module(x)
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"{m.source}: model fails on a 1x3x{m.tile_size}x{m.tile_size} input ({_one_line(exc)})") from None
    side = m.tile_size // m.output_stride
    want = (1, len(m.classes), side, side)
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != want:
        got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ModelError(
            f"{m.source}: output shape {got} for a {m.tile_size}px tile, expected {want} "
            f"({len(m.classes)} classes at output stride {m.output_stride})"
        )


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
            "normalisation": {k: list(v) for k, v in dict(normalisation or {"mean": [0.0] * 3, "std": [1.0] * 3}).items()},
        }
        if colors is not None:
            meta["colors"] = [list(c) for c in colors]
        if architecture is not None:
            meta["architecture"] = architecture
            meta["arch"] = dict(arch or {})
        for k, v in (extra or {}).items():
            if k in meta or k in _KNOWN_KEYS:
                raise ValueError(f"extra key {k!r} is a metadata key: pass it as its own argument")
            meta[k] = v
        md = validate_metadata(meta, require_mpp=True)
        text = json.dumps(md.as_json())
    except (ValueError, TypeError) as exc:
        raise ModelError(f"{path}: {_one_line(exc)}") from None
    if not isinstance(module, nn.Module):
        raise ModelError(f"{path}: module={type(module).__name__}: must be a torch.nn.Module")
    if not _is_int(max_batch) or max_batch < 3:
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
        raise ModelError(f"{path}: torch.export.export of {type(module).__name__} failed ({_one_line(exc)})") from None
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
            raise ModelError(f"{path}: the exported program fails on a batch of {n} tiles ({_one_line(exc)})") from None
        want = (n, n_classes, side, side)
        if not isinstance(y, torch.Tensor) or tuple(y.shape) != want:
            got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
            raise ModelError(
                f"{path}: output shape {got} for a batch of {n} {T}px tiles, expected {want} "
                f"({n_classes} classes at output stride {md.output_stride})"
            )
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
        raise ModelError(f"--module {spec!r}: cannot import it ({_one_line(exc, 160)})") from None
    if not callable(obj):
        raise ModelError(f"--module {spec!r}: {type(obj).__name__} is not callable")
    try:
        module = obj()
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"--module {spec!r}: the factory failed ({_one_line(exc, 160)})") from None
    if not isinstance(module, nn.Module):
        raise ModelError(f"--module {spec!r}: returned {type(module).__name__}, not a torch.nn.Module")
    if state_dict is not None:
        try:
            blob = torch.load(state_dict, map_location="cpu", weights_only=True)
            if isinstance(blob, dict) and isinstance(blob.get("state_dict"), dict):
                blob = blob["state_dict"]
            module.load_state_dict(blob, strict=True)
        except Exception as exc:  # noqa: BLE001
            raise ModelError(f"{state_dict}: cannot load these weights into {type(module).__name__} ({_one_line(exc, 160)})") from None
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
