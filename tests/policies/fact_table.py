"""A small instance-fact table shaped like the catalogue's, for the schedulability and shape tests."""
from __future__ import annotations

from components.catalogue import InstanceType


def it(name: str, vcpu: int, mem_mib: int, gpu: str, cc: tuple[int, int], cpu_m: int, alloc_mib: int) -> InstanceType:
    return InstanceType(name=name, family=name.split(".")[0], vcpu=vcpu, memory_mib=mem_mib, gpus=1, gpu_name=gpu,
                        gpu_memory_mib=16384, compute_capability=cc, local_nvme_gb=125, allocatable_cpu_m=cpu_m,
                        allocatable_memory_mib=alloc_mib, allocatable_ephemeral_gib=17.0, allocatable_pods=29,
                        on_demand_usd_per_hour=1.0)


FACTS = {t.name: t for t in (
    it("g4dn.xlarge", 4, 16384, "t4", (7, 5), 3920, 14481),
    it("g4dn.2xlarge", 8, 32768, "t4", (7, 5), 7910, 29636),
    it("g5.xlarge", 4, 16384, "a10g", (8, 6), 3920, 14162),
    it("g5.2xlarge", 8, 32768, "a10g", (8, 6), 7910, 29317),
)}
"""A small fact table shaped like the catalogue's (figures from Karpenter v1.14.1's reference)."""
