"""Tests for policies/shapes.py: which instance types (from the facts) a NodePool's nodes may have."""
from __future__ import annotations

from policies import shapes as rule
from policies.plan import Res
from tests.policies.fact_table import FACTS


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
