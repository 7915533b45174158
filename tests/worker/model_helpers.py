"""Test helpers for the model tests: a stand-in for a lab's net, random RGB tiles, and saving and refusing programs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from worker.models.loaded_model import ModelError
from worker.models.loading import load_model
from worker.models.metadata import META_FILE

CPU = torch.device("cpu")


def meta_of(path) -> dict:
    """The gpuburst.json inside a torch.export file."""
    extra = {META_FILE: ""}
    with open(path, "rb") as f:
        torch.export.load(f, extra_files=extra)
    return json.loads(extra[META_FILE])


def random_rgb(n: int, seed: int = 0, side: int = 256) -> torch.Tensor:
    """n random uint8 RGB tiles (N x side x side x 3), the same for the same seed."""
    return torch.randint(0, 256, (n, side, side, 3), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


class LabNet(nn.Module):
    """A stand-in for a lab's model: stride 4, a per-channel response so that the normalisation matters."""

    def __init__(self, n: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 4, stride=4)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Conv2d(8, n, 1)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.conv(x))))


LAB_NORM = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def save_program(ep, path, meta) -> Path:
    """Save program `ep` at `path` with `meta` as its gpuburst.json (a dict, raw text, or None for none)."""
    extra = {} if meta is None else {META_FILE: meta if isinstance(meta, str) else json.dumps(meta)}
    torch.export.save(ep, str(path), extra_files=extra)
    return path


def assert_one_line_error(path, fragment):
    """Loading `path` fails with one line that names the file and holds `fragment`; returns the line."""
    with pytest.raises(ModelError) as info:
        load_model(str(path), CPU)
    msg = str(info.value)
    assert msg.startswith(f"{path}: "), msg
    assert fragment in msg, msg
    assert "\n" not in msg
    return msg


GOOD = {"classes": ["background", "a", "b"], "input_mpp_um": 0.5}
