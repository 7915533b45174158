"""gpu-allocatable judges status.allocatable and the device-plugin pod, never the NodePool's Ready condition."""
from __future__ import annotations

import copy

from verify_fakes import NOW, FakeKube, items, load

from components.verify import gpu
from components.verify.context import Context
from components.verify.model import VerifySettings


def judge(nodes, pods=None, nodepool="default", grace_s=300.0, final=True):
    np_ = load("nodepool_gpu.json") if nodepool == "default" else nodepool
    pods = items("pods_device_plugin.json") if pods is None else pods
    return gpu.judge_gpu_allocatable("gpu", np_, nodes, pods, NOW, grace_s, final=final)[0]


def test_nodepool_ready_but_no_node_has_allocatable_gpu_fails_naming_node_type_and_age():
    nodepool = load("nodepool_gpu.json")
    assert gpu.condition(nodepool, "Ready")["status"] == "True"  # the green status that hid the trap
    r = judge(items("nodes_gpu_not_allocatable.json"))
    assert r.status == "fail"
    assert "ip-10-0-12-34.ec2.internal" in r.summary
    assert "g5.xlarge" in r.summary
    assert "up 20m00s" in r.summary
    assert "Ready=True" in r.summary
    assert any("allocatable nvidia.com/gpu=0" in e for e in r.evidence)


def test_healthy_nodes_pass_with_evidence_per_node():
    r = judge(items("nodes_gpu_healthy.json"))
    assert r.status == "pass", r
    assert "2 node(s)" in r.summary
    assert sum("allocatable nvidia.com/gpu=1" in e for e in r.evidence) == 2


def test_capacity_without_allocatable_is_not_enough():
    node = copy.deepcopy(items("nodes_gpu_healthy.json")[0])
    node["status"]["allocatable"].pop("nvidia.com/gpu")  # capacity still says 1
    r = judge([node])
    assert r.status == "fail"
    assert "capacity 1" in " ".join(r.evidence)


def test_node_without_running_device_plugin_fails():
    pods = [p for p in items("pods_device_plugin.json") if p["spec"]["nodeName"] != "ip-10-0-40-7.ec2.internal"]
    r = judge(items("nodes_gpu_healthy.json"), pods=pods)
    assert r.status == "fail"
    assert "ip-10-0-40-7.ec2.internal" in r.summary and "g4dn.xlarge" in r.summary
    assert any("no device-plugin pod" in e for e in r.evidence)


def test_crashlooping_device_plugin_is_named():
    pods = items("pods_device_plugin.json")
    pods[0]["status"] = {"phase": "Running", "containerStatuses": [
        {"name": "x", "ready": False, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
    r = judge(items("nodes_gpu_healthy.json"), pods=pods)
    assert r.status == "fail"
    assert any("CrashLoopBackOff" in e for e in r.evidence)


def test_young_node_is_pending_not_pass():
    r = judge(items("nodes_gpu_young.json"), final=False)
    assert r.status == "fail" and "pending" in r.summary
    assert any("younger than the 300 s grace period" in e for e in r.evidence)


def test_empty_pool_is_skipped_with_evidence():
    r = judge([])
    assert r.status == "skipped"
    assert any("karpenter.sh/nodepool=gpu" in e for e in r.evidence)


def test_missing_nodepool_fails():
    r = judge([], nodepool=None)
    assert r.status == "fail" and "does not exist" in r.summary


def _ctx(kube, clock, grace_s=300.0):
    return Context(settings=VerifySettings(nodepool="gpu", grace_s=grace_s, poll_interval_s=5), kube=kube,
                   clock=clock)


def test_run_waits_for_a_young_node_and_passes_once_allocatable(clock):
    kube = FakeKube(nodes=items("nodes_gpu_young.json"), pods=items("pods_device_plugin.json"),
                    nodepools=[load("nodepool_gpu.json")])
    calls = {"n": 0}
    original = kube.list_nodes

    def list_nodes(label_selector=None):
        calls["n"] += 1
        if calls["n"] == 4:  # the device plugin registers the GPU after ~15 s
            kube.nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] = "1"
        return original(label_selector)

    kube.list_nodes = list_nodes
    r = gpu.run(_ctx(kube, clock))
    assert r.status == "pass", r
    assert 10 <= clock.t <= 30


def test_run_fails_a_node_that_never_gets_its_gpu_after_the_grace_period(clock):
    kube = FakeKube(nodes=items("nodes_gpu_young.json"), pods=items("pods_device_plugin.json"),
                    nodepools=[load("nodepool_gpu.json")])
    r = gpu.run(_ctx(kube, clock, grace_s=120))
    assert r.status == "fail"
    assert "ip-10-0-77-9.ec2.internal" in r.summary and "g5.2xlarge" in r.summary
    assert clock.t <= 125  # gave up at the grace period, not later


def test_run_does_not_wait_when_a_node_is_already_bad(clock):
    kube = FakeKube(nodes=items("nodes_gpu_not_allocatable.json") + items("nodes_gpu_young.json"),
                    pods=items("pods_device_plugin.json"), nodepools=[load("nodepool_gpu.json")])
    r = gpu.run(_ctx(kube, clock))
    assert r.status == "fail" and clock.t == 0


def _g5_12xlarge(allocatable: str) -> dict:
    node = copy.deepcopy(items("nodes_gpu_healthy.json")[0])
    labels = node["metadata"]["labels"]
    labels["node.kubernetes.io/instance-type"] = labels["beta.kubernetes.io/instance-type"] = "g5.12xlarge"
    labels["karpenter.k8s.aws/instance-gpu-count"] = "4"
    node["status"]["allocatable"]["nvidia.com/gpu"] = allocatable
    node["status"]["capacity"]["nvidia.com/gpu"] = allocatable
    return node


def test_one_of_four_gpus_on_a_g5_12xlarge_fails_naming_node_type_and_both_counts():
    r = judge([_g5_12xlarge("1")])
    assert r.status == "fail"
    assert "ip-10-0-12-34.ec2.internal (g5.12xlarge, up 20m00s): 1 of 4 GPUs allocatable" in r.summary
    assert "not all allocatable" in r.summary
    assert any("catalogue 4" in e and "1 of the 4 GPUs a g5.12xlarge has" in e for e in r.evidence)


def test_four_of_four_gpus_on_a_g5_12xlarge_pass():
    r = judge([_g5_12xlarge("4")])
    assert r.status == "pass", r.summary


def test_more_gpus_than_the_instance_has_fail_with_a_hint():
    r = judge([_g5_12xlarge("8")])
    assert r.status == "fail" and "8 of 4 GPUs allocatable" in r.summary
    assert any("time-slicing or MIG" in e for e in r.evidence)


def test_a_type_the_catalogue_does_not_know_is_not_counted():
    node = _g5_12xlarge("2")
    node["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "x9.mystery"
    r = judge([node])
    assert r.status == "pass"
    assert any("not in the catalogue: count not compared" in e for e in r.evidence)
