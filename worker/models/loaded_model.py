"""A model ready for inference (LoadedModel), its display colours, and ModelError, the one-line failure of a model."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from worker.models.errors import ModelError
from worker.models.normalisation import Normalisation

__all__ = ["DEFAULT_COLORS", "LoadedModel", "ModelError", "check_output_shape", "class_colors"]

DEFAULT_COLORS = [
    (0, 0, 0),
    (40, 90, 230),  # nuclei: blue
    (230, 60, 40),  # vessel: red
    (40, 180, 70),
    (230, 180, 30),
    (170, 60, 200),
    (30, 190, 200),
]
"""Display colours (RGB) per class index for overlays and previews; classes past the table cycle through it."""


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
    """The file the model came from: its local path or its s3:// URI."""
    sha256: str = ""
    """SHA-256 of the model file's bytes (hex), recorded in every summary ("" for a model built in memory)."""
    origin: str = ""
    """How the file reached this process: "built-in", "local", "cache" (the node's model cache) or "s3"."""
    fetch_s: float = 0.0
    """Seconds spent fetching and hashing the file before it was loaded (a download, or re-hashing a cache hit)."""
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


def class_colors(n: int, given=None) -> list[tuple[int, int, int]]:
    """The display colour of each of `n` classes: `given` (one [r, g, b] per class), else DEFAULT_COLORS."""
    if given:
        if len(given) != n:
            raise ValueError(f"colors has {len(given)} entries for {n} classes")
        return [tuple(int(c) for c in rgb) for rgb in given]
    k = len(DEFAULT_COLORS) - 1  # past the table, cycle through the non-background colours
    return [DEFAULT_COLORS[i] if i <= k else DEFAULT_COLORS[1 + (i - 1) % k] for i in range(n)]


def check_output_shape(source: Any, y: Any, want: tuple[int, int, int, int], what: str, output_stride: int) -> None:
    """Raise ModelError (one line naming `source`) unless the model's output `y` for `what` has the shape `want`."""
    if not isinstance(y, torch.Tensor) or tuple(y.shape) != want:
        got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        raise ModelError(
            f"{source}: output shape {got} for {what}, expected {want} "
            f"({want[1]} classes at output stride {output_stride})"
        )
