"""Tests of WorkloadNamespace: a `restricted` namespace with a default-deny NetworkPolicy and a ResourceQuota, valid
Kubernetes objects, exported from the package, and one-line refusals."""
from __future__ import annotations

import kubernetes_validate
import pytest

import components
from components.catalogue import KUBERNETES_VERSION
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks
from components.workload_namespace import (
    RESTRICTED_LABELS,
    WorkloadNamespace,
    WorkloadNamespaceArgs,
    namespace_manifest,
    quota_manifest,
)


@pytest.fixture(scope="module")
def res():
    return run_under_mocks(lambda: WorkloadNamespace("tils", WorkloadNamespaceArgs(
        name="lab-tils", gpus=4, labels={"team": "tils"})))


def test_the_namespace_is_restricted_and_keeps_the_team_labels(res):
    (ns,) = res.monitor.by_type("kubernetes:core/v1:Namespace")
    labels = ns.properties["metadata"]["labels"]
    assert ns.properties["metadata"]["name"] == "lab-tils"
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted" and labels["team"] == "tils"
    assert {k: labels[k] for k in RESTRICTED_LABELS} == RESTRICTED_LABELS


def test_the_default_deny_policy_and_the_quota_live_in_it_and_wait_for_it(res):
    (ns,) = res.monitor.by_type("kubernetes:core/v1:Namespace")
    (deny,) = res.monitor.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    (quota,) = res.monitor.by_type("kubernetes:core/v1:ResourceQuota")
    assert deny.properties["metadata"]["namespace"] == quota.properties["metadata"]["namespace"] == "lab-tils"
    assert deny.properties["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [],
                                       "egress": []}
    assert quota.properties["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    assert ns.urn in deny.dependencies and ns.urn in quota.dependencies
    (component,) = res.monitor.by_type("gpuburst:index:WorkloadNamespace")
    assert {deny.parent, quota.parent, ns.parent} == {component.urn}


def test_the_objects_are_valid_kubernetes_with_the_documented_defaults():
    args = WorkloadNamespaceArgs(name="lab-tils")
    kubernetes_validate.validate(namespace_manifest(args), KUBERNETES_VERSION, strict=True)
    quota = quota_manifest(args)
    kubernetes_validate.validate(quota, KUBERNETES_VERSION, strict=True)
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "4", "requests.cpu": "32", "limits.cpu": "32",
                                     "requests.memory": "192Gi", "limits.memory": "192Gi", "pods": "50"}


@pytest.mark.parametrize("field, kw", [
    ("name", {"name": "kube-system"}), ("name", {"name": "Lab_Tils"}), ("gpus", {"gpus": -1}),
    ("cpu_cores", {"cpu_cores": 0}), ("memory_gib", {"memory_gib": 1.5}), ("pods", {"pods": 0}),
    ("labels", {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}),
])
def test_a_bad_argument_is_refused_in_one_line_naming_it(field, kw):
    args = {"name": "lab-tils", **kw}
    with pytest.raises(ConfigError) as e:
        run_under_mocks(lambda: WorkloadNamespace("tils", WorkloadNamespaceArgs(**args)))
    assert e.value.field == f"WorkloadNamespaceArgs.{field}" and "\n" not in str(e.value)
    assert str(e.value).startswith("WorkloadNamespace 'tils': ")


def test_it_is_public():
    assert components.WorkloadNamespace is WorkloadNamespace
    assert {"WorkloadNamespace", "WorkloadNamespaceArgs"} <= set(components.__all__)
