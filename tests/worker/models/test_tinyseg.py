"""The built-in architecture: folding its BatchNorms into the convolutions keeps its outputs."""
from __future__ import annotations

import torch
from torch import nn

from worker.models.tinyseg import TinySegNet


def test_folding_batchnorm_keeps_the_outputs():
    torch.manual_seed(0)
    net = TinySegNet().eval()
    for m in net.modules():  # non-trivial statistics so that folding has something to do
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    x = torch.rand(2, 3, 128, 128)
    with torch.no_grad():
        before = net(x)
        after = net.fold_batchnorm()(x)
    assert torch.allclose(before, after, atol=1e-4)
