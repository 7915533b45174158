"""Tests for `gpu-nodepool-isolation` (label, taint, GPU limit on GPU pools) and `scaledjob-max-replicas`."""
from __future__ import annotations

import pytest

from policies import gpu_nodepool as rule

IT = "node.kubernetes.io/instance-type"


def check(run_rule, samples, props) -> list[str]:
    return run_rule(rule.POLICY, samples.T_NODEPOOL, props)


def non_gpu_pool(samples, requirements: list[dict]) -> dict:
    props = samples.cpu_nodepool()
    props["spec"]["template"]["spec"]["requirements"] = requirements
    return props


def test_compliant_gpu_pool_and_cpu_pool_pass(run_rule, samples):
    assert check(run_rule, samples, samples.gpu_nodepool()) == []
    assert check(run_rule, samples, samples.cpu_nodepool()) == []


@pytest.mark.parametrize("requirement", [
    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["g"]},
    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "p"]},
    {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g6e"]},
    {"key": IT, "operator": "In", "values": ["p4d.24xlarge"]},
    {"key": "karpenter.k8s.aws/instance-gpu-manufacturer", "operator": "In", "values": ["nvidia"]},
    {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["0"]},
    {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "Exists"},
], ids=["category-g", "category-mixed", "family", "type", "manufacturer", "gpu-count", "gpu-name"])
def test_gpu_pools_are_recognised_and_need_all_three(run_rule, samples, requirement):
    messages = check(run_rule, samples, non_gpu_pool(samples, [requirement]))
    assert len(messages) == 3, messages
    text = "\n".join(messages)
    assert 'spec.template.metadata.labels."nvidia.com/gpu.present" is missing' in text
    assert "spec.template.spec.taints is missing" in text
    assert 'spec.limits."nvidia.com/gpu" is missing' in text
    assert "GPU pool because of spec.template.spec.requirements[0]" in messages[0]


@pytest.mark.parametrize("requirement", [
    {"key": "karpenter.k8s.aws/instance-category", "operator": "NotIn", "values": ["g", "p"]},
    {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["0"]},
    {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["c7i", "m7i"]},
], ids=["notin-gpu", "zero-gpus", "cpu-families"])
def test_non_gpu_pools_are_not_judged(run_rule, samples, requirement):
    assert check(run_rule, samples, non_gpu_pool(samples, [requirement])) == []


@pytest.mark.parametrize("mutate,expected", [
    (lambda p: p["spec"]["template"]["metadata"]["labels"].update({"nvidia.com/gpu.present": "false"}),
     "is 'false'"),
    (lambda p: p["spec"]["template"]["metadata"]["labels"].update({"nvidia.com/gpu.present": True}), "is True"),
    (lambda p: p["spec"]["template"]["spec"]["taints"][0].update({"effect": "PreferNoSchedule"}),
     "spec.template.spec.taints is"),
    (lambda p: p["spec"]["template"]["spec"].update({"taints": []}), "spec.template.spec.taints is []"),
    (lambda p: p["spec"]["limits"].update({"nvidia.com/gpu": 0}), 'spec.limits."nvidia.com/gpu" is 0'),
    (lambda p: p["spec"].pop("limits"), 'spec.limits."nvidia.com/gpu" is missing'),
], ids=["label-false", "label-bool", "taint-effect", "no-taints", "zero-limit", "no-limits"])
def test_each_missing_piece_is_named(run_rule, samples, mutate, expected):
    props = samples.gpu_nodepool()
    mutate(props)
    messages = check(run_rule, samples, props)
    assert len(messages) == 1 and expected in messages[0], messages


def test_gpu_label_or_taint_alone_makes_a_gpu_pool(run_rule, samples):
    props = samples.cpu_nodepool()
    props["spec"]["template"]["metadata"] = {"labels": {"nvidia.com/gpu.present": "true"}}
    assert len(check(run_rule, samples, props)) == 2  # taint and limit missing


def test_missing_properties(run_rule, samples):
    assert check(run_rule, samples, {}) == []  # nothing says it is a GPU pool


def test_unknown_values(run_rule, samples):
    U = samples.U
    unknown_label = samples.gpu_nodepool()
    unknown_label["spec"]["template"]["metadata"]["labels"]["nvidia.com/gpu.present"] = U
    messages = check(run_rule, samples, unknown_label)
    assert len(messages) == 1 and "gpu.present\" is unknown during preview" in messages[0]
    unknown_limit = samples.gpu_nodepool()
    unknown_limit["spec"]["limits"] = U
    assert "spec.limits is unknown" in check(run_rule, samples, unknown_limit)[0]
    # Whether it is a GPU pool at all is unknown: that must not pass silently either.
    undecided = non_gpu_pool(samples, [{"key": "karpenter.k8s.aws/instance-category", "operator": "In",
                                        "values": [U]}])
    messages = check(run_rule, samples, undecided)
    assert len(messages) == 1 and "whether this is a GPU NodePool" in messages[0]


def test_max_replica_count(run_rule, samples):
    sj = samples.scaled_job()
    assert run_rule(rule.MAX_REPLICAS_POLICY, samples.T_SCALEDJOB, sj) == []
    sj["spec"]["maxReplicaCount"] = 4.0  # what a Struct delivers
    assert run_rule(rule.MAX_REPLICAS_POLICY, samples.T_SCALEDJOB, sj) == []
    for bad, expected in ((None, "is missing (KEDA then allows 100"), (0, "is 0"), ("many", "is 'many'"),
                          (samples.U, "unknown during preview")):
        sj = samples.scaled_job()
        if bad is None:
            del sj["spec"]["maxReplicaCount"]
        else:
            sj["spec"]["maxReplicaCount"] = bad
        messages = run_rule(rule.MAX_REPLICAS_POLICY, samples.T_SCALEDJOB, sj)
        assert len(messages) == 1 and "spec.maxReplicaCount" in messages[0] and expected in messages[0], messages
    assert run_rule(rule.MAX_REPLICAS_POLICY, samples.T_DEPLOYMENT, {"spec": {}}) == []


def test_over_grpc_with_config_overrides(analyze, samples):
    props = samples.gpu_nodepool()
    del props["spec"]["limits"]
    sj = samples.scaled_job()
    del sj["spec"]["maxReplicaCount"]
    doc = samples.plan((samples.T_NODEPOOL, props), (samples.T_SCALEDJOB, sj))
    report = analyze(doc)
    assert [d.level for d in report.by_policy(rule.NAME)] == ["MANDATORY"]
    assert [d.level for d in report.by_policy(rule.MAX_REPLICAS_NAME)] == ["MANDATORY"]
    report = analyze(doc, {rule.NAME: "advisory", rule.MAX_REPLICAS_NAME: {"enforcementLevel": "disabled"}})
    assert [d.level for d in report.by_policy(rule.NAME)] == ["ADVISORY"]
    assert report.by_policy(rule.MAX_REPLICAS_NAME) == []
    unknown = samples.scaled_job()
    unknown["spec"]["maxReplicaCount"] = samples.U
    found = analyze(samples.plan((samples.T_SCALEDJOB, unknown))).by_policy(rule.MAX_REPLICAS_NAME)
    assert [d.level for d in found] == ["MANDATORY"]


def test_constants_match_what_the_components_render():
    from components import pod

    assert rule.GPU_RESOURCE == pod.GPU_RESOURCE
    assert pod.GPU_NODE_SELECTOR == {rule.GPU_PRESENT_LABEL: "true"}
    assert pod.GPU_TOLERATION["effect"] == rule.GPU_TAINT_EFFECT
