"""A model's metadata (gpuburst.json): the keys, their rules, and validation into ModelMetadata with one-line errors."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from worker.models.normalisation import Normalisation
from worker.models.tinyseg import TINYSEG_ARCHITECTURE

META_FILE = "gpuburst.json"
MPP_RANGE_UM = (0.05, 20.0)  # plausible pixel sizes a model can declare, µm per pixel
MAX_CLASSES = 256  # class maps are uint8


def _show(value: Any, limit: int = 60) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


KNOWN_KEYS = ("classes", "input_mpp_um", "tile_size", "output_stride", "normalisation", "colors", "name",
               "version", "architecture", "arch")


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_int(v: Any) -> bool:
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
        return (f"must be the µm per pixel the model analyses at, a number from {lo:g} to {hi:g} "
                "(0.25 is 40x, 0.5 is 20x)")
    return None


def _check_positive_int(v: Any) -> str | None:
    return None if is_int(v) and 0 < v <= 16384 else "must be a whole number of pixels from 1 to 16384"


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
    ok = isinstance(v, dict) and all(isinstance(k, str) and (_is_number(x) or isinstance(x, (str, bool)))
                                     for k, x in v.items())
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
        raise ValueError("input_mpp_um is missing: give the µm per pixel the model analyses at "
                         "(0.25 is 40x, 0.5 is 20x)")
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
            isinstance(c, list) and len(c) == 3 and all(is_int(x) and 0 <= x <= 255 for x in c) for c in colors
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
        extra={k: v for k, v in meta.items() if k not in KNOWN_KEYS},
    )
