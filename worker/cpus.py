"""The CPUs this process may use (affinity capped by a cgroup quota), native bf16, and torch's thread count."""
from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator

import torch

CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"  # "<quota> <period>" in µs, or "max <period>" when unlimited


def cpu_count() -> int:
    """CPUs this process may use: its CPU affinity, capped by a cgroup v2 CPU quota (a pod's CPU limit).

    A pod limited to 2 CPUs on a 64-core node still sees 64 cores; running 64 torch threads there makes every
    parallel region wait for threads the quota has parked, which is far slower than using 2.
    """
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    try:
        with open(CGROUP_CPU_MAX) as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota visible: the affinity is the limit
    return max(n, 1)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 in hardware (AVX512-BF16 or AMX), where CPU autocast to bf16 pays off."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run the block with `n` torch intra-op threads, then restore the previous number."""
    before = torch.get_num_threads()
    if n and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
