"""NVIDIA device plugin: chart pinned from the catalogue, only on GPU nodes, tolerating their taint, node-critical."""
from __future__ import annotations

import pytest

from components.catalogue import CHARTS
from components.device_plugin import (
    DEVICE_PLUGIN_POD_SECURITY_LABELS,
    NvidiaDevicePlugin,
    NvidiaDevicePluginArgs,
    device_plugin_image_tag,
    device_plugin_values,
)
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks

PIN = CHARTS["nvidia-device-plugin"]


def test_values_select_gpu_nodes_tolerate_the_taint_and_are_node_critical():
    v = device_plugin_values()
    assert v["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    [term] = v["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in v["tolerations"]
    assert v["priorityClassName"] == "system-node-critical"


def test_chart_under_mocks_is_pinned_from_the_catalogue():
    res = run_under_mocks(lambda: NvidiaDevicePlugin("nvdp"))
    [component] = res.monitor.by_type("gpuburst:index:NvidiaDevicePlugin")
    [chart] = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    [ns] = res.monitor.by_type("kubernetes:core/v1:Namespace")
    assert chart.parent == component.urn and ns.parent == component.urn
    assert chart.properties["chart"] == chart.properties["name"] == PIN.chart
    assert chart.properties["version"] == PIN.version
    assert chart.properties["repositoryOpts"] == {"repo": PIN.repository}
    assert chart.properties["namespace"] == PIN.namespace == ns.properties["metadata"]["name"]
    assert ns.urn in chart.dependencies
    assert chart.properties["values"] == device_plugin_values()


def test_existing_namespace_and_bad_version():
    res = run_under_mocks(lambda: NvidiaDevicePlugin("nvdp", NvidiaDevicePluginArgs(create_namespace=False,
                                                                                   namespace="kube-system")))
    assert res.monitor.by_type("kubernetes:core/v1:Namespace") == []
    assert res.monitor.by_type("kubernetes:helm.sh/v4:Chart")[0].properties["namespace"] == "kube-system"
    with pytest.raises(ConfigError) as e:
        NvidiaDevicePlugin("nvdp", NvidiaDevicePluginArgs(version=""))
    assert e.value.field == "nvidia_device_plugin.version"


def test_values_harden_every_container_and_pass_the_cdi_feature_flags():
    v = device_plugin_values()
    for key in ("requests", "limits"):
        assert set(v["resources"][key]) == {"cpu", "memory"}, v["resources"]
    assert v["podSecurityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    sc = v["securityContext"]
    # Setting securityContext replaces the chart's default: its two settings must be restated.
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert v["cdi"] == {"featureFlags": "disable-nvsandboxutils"}
    assert device_plugin_values(cdi_feature_flags=("a-b", "c"))["cdi"] == {"featureFlags": "a-b,c"}
    assert device_plugin_values(cdi_feature_flags=())["cdi"] == {"featureFlags": None}


@pytest.mark.parametrize("version", ["0.19.0", "0.19.2", "0.18.0"])
def test_refused_device_plugin_releases_name_the_reason(version):
    with pytest.raises(ConfigError) as e:
        NvidiaDevicePlugin("nvdp", NvidiaDevicePluginArgs(version=version))
    assert e.value.field == "nvidia_device_plugin.version"
    assert ("#1550" in str(e.value)) == version.startswith("0.19"), str(e.value)


def test_bad_cdi_feature_flag_is_refused_in_one_line():
    with pytest.raises(ConfigError) as e:
        NvidiaDevicePlugin("nvdp", NvidiaDevicePluginArgs(cdi_feature_flags=("Disable NVSandboxUtils",)))
    assert e.value.field == "nvidia_device_plugin.cdi_feature_flags" and "\n" not in str(e.value)


DIGEST = "sha256:a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312"


def test_the_image_is_pinned_by_digest_from_nvcr_or_the_stacks_mirror():
    mirror = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-dev/mirror/nvidia/k8s-device-plugin"
    assert device_plugin_values(image_repository=mirror)["image"] == {"repository": mirror,
                                                                      "tag": f"v0.20.0@{DIGEST}"}
    # Default: the chart's own repository (nvcr.io), by digest all the same.
    assert device_plugin_values()["image"] == {"tag": f"v0.20.0@{DIGEST}"}
    assert device_plugin_image_tag() == f"v0.20.0@{DIGEST}"
    # A version the catalogue has no digest for stays by tag (the pack's image-pinned-by-digest names it); with a
    # mirror the pinned version is pulled, the only one the mirror holds.
    assert device_plugin_image_tag("0.20.1") == "v0.20.1"
    assert device_plugin_values(version="0.20.1")["image"] == {"tag": "v0.20.1"}
    assert device_plugin_values(version="0.20.1", image_repository=mirror)["image"]["tag"] == f"v0.20.0@{DIGEST}"


def test_the_namespace_states_its_pod_security_level_and_the_pods_are_not_cut_off():
    res = run_under_mocks(lambda: NvidiaDevicePlugin("nvdp"))
    [ns] = res.monitor.by_type("kubernetes:core/v1:Namespace")
    assert ns.properties["metadata"]["labels"] == DEVICE_PLUGIN_POD_SECURITY_LABELS == {
        "pod-security.kubernetes.io/enforce": "privileged", "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/audit": "restricted", "pod-security.kubernetes.io/warn": "restricted"}
    [policy] = res.monitor.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    [chart] = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    assert policy.properties["metadata"] == {"name": "gpuburst-allow-all", "namespace": PIN.namespace}
    assert policy.properties["spec"]["podSelector"] == {} and policy.properties["spec"]["egress"] == [{}]
    assert policy.urn in chart.dependencies and ns.urn in policy.dependencies
