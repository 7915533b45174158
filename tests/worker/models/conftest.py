"""Shared fixtures of the model tests: the built-in model and a small exported program to save with any metadata."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/worker: model_helpers

from model_helpers import CPU, LabNet  # noqa: E402

from worker.models.loading import load_model  # noqa: E402


@pytest.fixture(scope="module")
def builtin():
    return load_model(None, CPU)


@pytest.fixture(scope="module")
def program():
    """A small exported program (dynamic batch, 3 classes at stride 4) to save with various metadata."""
    net = LabNet().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(net, (torch.rand(2, 3, 256, 256),), dynamic_shapes=({0: batch},))
    ep.example_inputs = None
    return ep
