"""The input normalisation a model declares, applied by the worker to each RGB batch before the model."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


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
