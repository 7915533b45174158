"""Tests for policies/shapes.py: which instance types (from the facts) a NodePool's nodes may have."""
from __future__ import annotations

from components.catalogue import InstanceType
from policies import shapes as rule
from policies.plan import Res


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
"""The fact table of test_schedulability.py (figures from Karpenter v1.14.1's reference)."""


def nodepool(requirements: list[dict]) -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"}, "spec": {
        "template": {"metadata": {"labels": {"nvidia.com/gpu.present": "true"}},
                     "spec": {"requirements": requirements, "taints": [{"key": "nvidia.com/gpu",
                                                                        "effect": "NoSchedule"}]}}}}


def test_family_and_gpu_requirements_select_from_the_facts():
    pool = nodepool(requirements=[{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g5"]},
                                  {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["a10g"]}])
    shape = rule.nodepool_shape(Res("kubernetes:karpenter.sh/v1:NodePool", "urn:p", "p", None, pool), {}, FACTS)
    assert [t.name for t in shape.types] == ["g5.2xlarge", "g5.xlarge"]
