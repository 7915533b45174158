"""GPU NodePool: the builder (types, taint, label, limits, disruption), config errors, upstream CRD, the resource."""
from __future__ import annotations

import asyncio
import copy

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.device_plugin import device_plugin_values
from components.nodepool import DEFAULT_GPU_INSTANCE_TYPES, GpuNodePool, GpuNodePoolArgs, gpu_nodepool_manifest
from components.spec.names import GPU_TOLERATION
from components.spec.validation import ConfigError
from components.synth.mocks import UNKNOWN, run_under_mocks
from tests.components import crd_oracle

CRD = "karpenter-v1.14.1-nodepools.yaml"
OLDEST_CRD = "karpenter-v1.0.3-nodepools.yaml"  # catalogue.KARPENTER_MINIMUM


def manifest(**kw):
    args = {"nodeclass_name": "gpu", "gpu_limit": 8}
    args.update(kw)
    return gpu_nodepool_manifest("gpu", **args)


def requirement(m, key):
    [req] = [r for r in m["spec"]["template"]["spec"]["requirements"] if r["key"] == key]
    return req


def test_defaults():
    m = manifest(cpu_limit=64)
    spec, tmpl = m["spec"], m["spec"]["template"]
    assert m["apiVersion"] == "karpenter.sh/v1" and m["kind"] == "NodePool"
    assert requirement(m, "node.kubernetes.io/instance-type") == {
        "key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(DEFAULT_GPU_INSTANCE_TYPES)}
    assert len(DEFAULT_GPU_INSTANCE_TYPES) >= 2
    assert requirement(m, "kubernetes.io/arch")["values"] == ["amd64"]
    assert requirement(m, "karpenter.sh/capacity-type")["values"] == ["spot", "on-demand"]
    assert requirement(m, "kubernetes.io/os")["values"] == ["linux"]
    assert tmpl["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
    assert tmpl["metadata"]["labels"]["gpuburst.io/pool"] == "gpu"
    assert tmpl["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert tmpl["spec"]["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"}
    assert tmpl["spec"]["expireAfter"] == "720h"
    assert spec["limits"] == {"nvidia.com/gpu": 8, "cpu": 64}
    assert spec["disruption"]["consolidationPolicy"] == "WhenEmpty"
    assert spec["disruption"]["consolidateAfter"] == "5m"
    # Empty nodes may all go; a node still running work is never replaced voluntarily.
    budgets = spec["disruption"]["budgets"]
    assert {"nodes": "100%", "reasons": ["Empty"]} in budgets
    assert any(b["nodes"] == "0" and "Drifted" in b["reasons"] for b in budgets)
    assert "cpu" not in manifest()["spec"]["limits"]


def test_the_device_plugin_schedules_where_the_pool_puts_gpus():
    labels = manifest()["spec"]["template"]["metadata"]["labels"]
    values = device_plugin_values()
    assert all(labels.get(k) == v for k, v in values["nodeSelector"].items())
    taint = manifest()["spec"]["template"]["spec"]["taints"][0]
    assert GPU_TOLERATION in values["tolerations"]
    assert GPU_TOLERATION["key"] == taint["key"] and GPU_TOLERATION["effect"] == taint["effect"]


@pytest.mark.parametrize("types", [("g5.xlarge",), ["g5.xlarge", "g5.xlarge"], "g5.xlarge"])
def test_a_single_instance_type_is_refused(types):
    with pytest.raises(ConfigError) as e:
        manifest(instance_types=types)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("instance_types: ") and "g5.xlarge" in msg


def test_instance_types_as_an_output_are_refused():
    # An Output needs an open event loop: a run_under_mocks that failed earlier in this process closed its loops.
    asyncio.set_event_loop(asyncio.new_event_loop())
    with pytest.raises(ConfigError) as e:
        manifest(instance_types=pulumi.Output.from_input(["g5.xlarge", "g5.2xlarge"]))
    assert e.value.field == "instance_types" and "never an Output" in str(e.value)


@pytest.mark.parametrize("kw,field", [
    ({"instance_types": ["g5.xlarge", "m5.large"]}, "instance_types"),
    ({"instance_types": ["g4ad.xlarge", "g4ad.2xlarge"]}, "instance_types"),  # AMD GPUs
    ({"instance_types": ["g5g.xlarge", "g5g.2xlarge"]}, "instance_types"),  # Graviton: arm64
    ({"capacity_types": []}, "capacity_types"),
    ({"capacity_types": ["preemptible"]}, "capacity_types"),
    ({"gpu_limit": 0}, "gpu_limit"),
    ({"gpu_limit": True}, "gpu_limit"),
    ({"cpu_limit": "lots"}, "cpu_limit"),
    ({"consolidate_after": "Never"}, "consolidate_after"),
    ({"consolidate_after": "5 minutes"}, "consolidate_after"),
    ({"expire_after": "30d"}, "expire_after"),
    ({"nodeclass_name": ""}, "nodeclass_name"),
    ({"labels": {"karpenter.sh/foo": "x"}}, "labels"),
])
def test_other_config_errors(kw, field):
    with pytest.raises(ConfigError) as e:
        manifest(**kw)
    assert e.value.field == field and "\n" not in str(e.value)


def test_accepted_variants():
    m = manifest(instance_types=["g6e.xlarge", "g6e.2xlarge", "p5.48xlarge"], capacity_types=["on-demand"],
                 termination_grace_period="2h", weight=10, labels={"team": "pathology"}, expire_after="Never")
    assert requirement(m, "node.kubernetes.io/instance-type")["values"] == ["g6e.xlarge", "g6e.2xlarge", "p5.48xlarge"]
    assert m["spec"]["template"]["spec"]["terminationGracePeriod"] == "2h"
    assert m["spec"]["weight"] == 10


@pytest.mark.parametrize("crd", [CRD, OLDEST_CRD])
@pytest.mark.parametrize("kw", [{}, {"termination_grace_period": "2h", "weight": 10,
                                    "labels": {"team": "pathology"}, "cpu_limit": "64000m"}])
def test_builder_output_passes_the_upstream_crd(upstream_crds, crd, kw):
    report = crd_oracle.check_against_crd(manifest(**kw), upstream_crds / crd)
    assert report.errors == []
    assert report.cel_evaluated > 0
    evaluable, skipped = crd_oracle.cel_inventory(upstream_crds / crd)
    print(f"{crd}: {report.cel_evaluated} CEL evaluations ({len(report.evaluated_rules)} distinct rules), "
          f"{report.cel_skipped} skipped ({len(report.skipped_rules)} distinct); "
          f"CRD has {len(evaluable)} evaluable and {len(skipped)} skipped rules")


def _reqs(s):
    return s["template"]["spec"]["requirements"]


@pytest.mark.parametrize("break_it,expected", [
    (lambda s: _reqs(s)[0].update(values=[]), "operator 'In' must have a value defined"),
    (lambda s: _reqs(s).append({"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt",
                                "values": ["1", "2"]}), "single positive integer"),
    (lambda s: _reqs(s)[0].update(operator="Among"), "operator"),
    (lambda s: s["disruption"].update(budgets=[{"nodes": "10%", "schedule": "@daily"}]), "'schedule' must be set"),
    (lambda s: s["disruption"].update(consolidationPolicy="WhenIdle"), "consolidationPolicy"),
    (lambda s: s["template"]["spec"]["taints"][0].pop("effect"), "effect"),
    (lambda s: s.update(replicas=2), "only 'limits.nodes' is supported"),
    (lambda s: s["template"]["spec"]["nodeClassRef"].update(name=""), "name may not be empty"),
    (lambda s: s["template"]["spec"].update(requirement=[]), "unknown field"),
])
def test_the_oracle_catches_a_broken_nodepool(upstream_crds, break_it, expected):
    m = copy.deepcopy(manifest())
    break_it(m["spec"])
    errors = crd_oracle.validate_against_crd(m, upstream_crds / CRD)
    assert any(expected in e for e in errors), errors


def test_resource_under_mocks_is_plain_and_depends_on_the_crd_chart():
    def program():
        crd_chart = k8s.helm.v4.Chart("karpenter-crd", chart="oci://example/karpenter-crd", version="1.14.1")
        GpuNodePool("gpu-pool", GpuNodePoolArgs(nodeclass_name="gpu", crd_chart=crd_chart, gpu_limit=4))

    res = run_under_mocks(program, preview=True)
    [component] = res.monitor.by_type("gpuburst:index:GpuNodePool")
    [chart] = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    [cr] = res.monitor.by_type("kubernetes:karpenter.sh/v1:NodePool")
    assert cr.parent == component.urn and chart.urn in cr.dependencies
    assert cr.properties["spec"] == manifest(gpu_limit=4)["spec"]
    assert UNKNOWN not in repr(cr.properties)


@pytest.mark.parametrize("bad,needle", [
    ("m5.large", "an NVIDIA x86-64 GPU instance type in the catalogue"),
    ("g5.3xlarge", "in the catalogue"),  # a size that does not exist
    ("g4ad.xlarge", "AMD"),
    ("g5g.xlarge", "arm64"),
    ("g6f.large", "fractional"),
    ("g7e.2xlarge", "595"),
])
def test_an_instance_type_outside_the_catalogue_is_named_in_one_line(bad, needle):
    with pytest.raises(ConfigError) as e:
        manifest(instance_types=["g5.xlarge", bad])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"instance_types: {bad!r} is not valid: ") and needle in msg
    assert e.value.value == bad


def test_every_catalogued_type_is_accepted():
    from components.catalogue import INSTANCE_TYPES
    m = manifest(instance_types=list(INSTANCE_TYPES))
    assert requirement(m, "node.kubernetes.io/instance-type")["values"] == list(INSTANCE_TYPES)


def test_capacity_types_are_written_as_given_and_on_demand_selector_matches_the_requirement():
    from components.spec.gpu_pool import ON_DEMAND_NODE_SELECTOR
    from components.spec.names import CAPACITY_TYPE_LABEL
    m = manifest(capacity_types=["spot", "on-demand"])
    req = requirement(m, CAPACITY_TYPE_LABEL)
    assert req["values"] == ["spot", "on-demand"]
    # A pod selecting on-demand only must still fit the pool (else it is Pending for ever).
    assert ON_DEMAND_NODE_SELECTOR == {CAPACITY_TYPE_LABEL: "on-demand"}
    assert ON_DEMAND_NODE_SELECTOR[CAPACITY_TYPE_LABEL] in req["values"]


def test_a_pool_attached_to_karpenter_installed_elsewhere_needs_no_crd_chart():
    from components.nodeclass import Ec2NodeClass, Ec2NodeClassArgs

    def program():
        Ec2NodeClass("gpu-class", Ec2NodeClassArgs(node_role="platform-karpenter-node", cluster_name="platform"))
        GpuNodePool("gpu", GpuNodePoolArgs(nodeclass_name="gpu", gpu_limit=4))

    res = run_under_mocks(program)
    pools = res.monitor.by_type("kubernetes:karpenter.sh/v1:NodePool")
    classes = res.monitor.by_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    assert len(pools) == len(classes) == 1
    assert pools[0].dependencies == [] and classes[0].dependencies == []
    assert res.monitor.by_type("kubernetes:helm.sh/v4:Chart") == []  # nothing of Karpenter installed here
