"""The input normalisation: what `prepare` feeds the model, per channel, leaving the caller's batch untouched."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/worker: model_helpers

from model_helpers import random_rgb  # noqa: E402

from worker.models.normalisation import Normalisation  # noqa: E402


def test_prepare_normalises_as_the_metadata_says(builtin):
    rgb = random_rgb(2)
    x = builtin.prepare(rgb)
    want = (rgb.permute(0, 3, 1, 2).double() / 255 - 0.5) / 0.25
    assert x.dtype == torch.float32 and x.shape == (2, 3, 256, 256)
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert torch.allclose(x.double(), want, atol=1e-5)
    per_channel = Normalisation(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)).apply(rgb)
    want = (rgb.permute(0, 3, 1, 2).double() / 255 - torch.tensor([0.485, 0.456, 0.406]).double().view(1, 3, 1, 1)) \
        / torch.tensor([0.229, 0.224, 0.225]).double().view(1, 3, 1, 1)
    assert torch.allclose(per_channel.double(), want, atol=1e-5)
    assert torch.equal(Normalisation().apply(rgb), rgb.permute(0, 3, 1, 2).float() / 255)  # the default: [0, 1]
    assert rgb.dtype == torch.uint8  # the caller's batch is untouched
