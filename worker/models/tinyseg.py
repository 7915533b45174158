"""The built-in architecture: TinySegNet, a small stride-4 segmentation net in plain torch, and its normalisation."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from worker.models.normalisation import Normalisation

TINYSEG_ARCHITECTURE = "gpuburst.TinySegNet"
"""The `architecture` a model's metadata names so that the loader runs its weights in the eager TinySegNet."""

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

    def fold_batchnorm(self) -> TinySegNet:
        for m in self.modules():
            if isinstance(m, ConvBNReLU):
                m.fold()
        return self


def build_builtin(arch: dict | None = None) -> TinySegNet:
    """A fresh (untrained) built-in net with the given architecture keywords."""
    return TinySegNet(**(arch or {}))
