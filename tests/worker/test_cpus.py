"""The CPUs a process may use: its affinity capped by a cgroup v2 quota; torch's thread count restored after a block."""
from __future__ import annotations

import pytest
import torch

from worker.cpus import torch_threads


@pytest.mark.parametrize("content, cap", [("150000 100000\n", 2), ("50000 100000\n", 1), ("max 100000\n", None)])
def test_cpu_count_respects_a_cgroup_quota(tmp_path, monkeypatch, content, cap):
    import os

    import worker.cpus as inf

    (tmp_path / "cpu.max").write_text(content)
    monkeypatch.setattr(inf, "CGROUP_CPU_MAX", str(tmp_path / "cpu.max"))
    cores = len(os.sched_getaffinity(0))
    assert inf.cpu_count() == (cores if cap is None else min(cores, cap))
    monkeypatch.setattr(inf, "CGROUP_CPU_MAX", str(tmp_path / "absent"))
    assert inf.cpu_count() == cores


def test_torch_threads_are_restored():
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
