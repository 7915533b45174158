"""A stand-in for a lab's own network in the lab-image recipe: two convolutions, two classes, output stride 4."""
from __future__ import annotations

import torch
from torch import nn


class LabNet(nn.Module):
    """RGB tiles N x 3 x T x T in, class logits N x 2 x T/4 x T/4 out (background, tissue)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                                  nn.Conv2d(8, 2, 3, stride=2, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def build() -> LabNet:
    """The factory `python -m worker package-model --module labnet:build` calls (seeded: the same weights each time)."""
    torch.manual_seed(17)
    return LabNet()
