"""Tests for `namespace-pod-security` (every Namespace the plan creates states its enforce level) and
`pod-security-level` (every pod in such a namespace passes that level), on fragments, over gRPC and on the dev plan."""
from __future__ import annotations

import copy

import pytest

from policies import namespaces as rule
from policies.harness import UNKNOWN_STRING as U
from tests.policies import fragments as F

T_NS = "kubernetes:core/v1:Namespace"
T_DEPLOYMENT = "kubernetes:apps/v1:Deployment"
T_DAEMONSET = "kubernetes:apps/v1:DaemonSet"
T_RELEASE = "kubernetes:helm.sh/v3:Release"
ENFORCE = "pod-security.kubernetes.io/enforce"


def namespace(name: str, labels: object = None) -> dict:
    metadata: dict = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    return F.entry(T_NS, f"{name}-ns", {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})


def level(name: str, enforce: str) -> dict:
    return namespace(name, {ENFORCE: enforce})


RESTRICTED_POD = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                  "containers": [{"name": "c", "image": "r/c@sha256:" + "0" * 64, "securityContext": {
                      "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
                  "volumes": [{"name": "certs", "secret": {"secretName": "x"}}]}


def deployment(ns: str, pod: dict, name: str = "app", kind: str = T_DEPLOYMENT) -> dict:
    return F.entry(kind, f"{ns}-{name}", {"apiVersion": "apps/v1", "kind": kind.rsplit(":", 1)[1],
                                          "metadata": {"name": name, "namespace": ns},
                                          "spec": {"template": {"spec": copy.deepcopy(pod)}}})


def labels_of(*entries: dict) -> list[str]:
    return [m for _u, m in rule.namespace_findings(F.as_res(F.doc(*entries)))]


def levels_of(*entries: dict) -> list[str]:
    return [m for _u, m in rule.level_findings(F.as_res(F.doc(*entries)))]


# -- namespace-pod-security --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", rule.LEVELS)
def test_an_explicit_enforce_level_passes(value):
    assert labels_of(level("a", value)) == []


def test_a_namespace_without_the_enforce_label_is_refused_naming_it():
    (message,) = labels_of(namespace("nvidia-device-plugin"))
    assert message.startswith("Namespace 'nvidia-device-plugin' has no metadata.labels"
                              "['pod-security.kubernetes.io/enforce']: its pods are admitted at the API server's "
                              "default level (privileged")
    (message,) = labels_of(namespace("x", {"pod-security.kubernetes.io/warn": "restricted"}))  # warn alone
    assert "has no metadata.labels['pod-security.kubernetes.io/enforce']" in message


@pytest.mark.parametrize("labels,needle", [
    ({ENFORCE: "Restricted"}, "['pod-security.kubernetes.io/enforce'] = 'Restricted': not a Pod Security level"),
    ({ENFORCE: "restricted", "pod-security.kubernetes.io/audit": "strict"},
     "['pod-security.kubernetes.io/audit'] = 'strict'"),
])
def test_an_invalid_level_is_refused(labels, needle):
    (message,) = labels_of(namespace("a", labels))
    assert needle in message and "privileged, baseline, restricted" in message


def test_unknown_labels_are_a_violation_naming_the_field():
    (message,) = labels_of(namespace("a", U))
    assert message.startswith("Namespace 'a' metadata.labels is unknown during preview")
    (message,) = labels_of(namespace("a", {ENFORCE: U}))
    assert "metadata.labels['pod-security.kubernetes.io/enforce'] is unknown during preview" in message


def test_a_helm_v3_release_that_creates_its_namespace_is_refused():
    release = F.entry(T_RELEASE, "dcgm", {"chart": "dcgm-exporter", "namespace": "gpu-metrics",
                                          "createNamespace": True})
    (message,) = labels_of(release)
    assert message.startswith("Release dcgm createNamespace = True: Helm creates namespace 'gpu-metrics' with no "
                              "labels")
    assert labels_of(F.entry(T_RELEASE, "dcgm", {"chart": "x", "namespace": "n", "createNamespace": False})) == []
    assert labels_of(F.entry(T_RELEASE, "dcgm", {"chart": "x", "namespace": "n"})) == []


# -- pod-security-level ------------------------------------------------------------------------------------------------

def test_a_pod_that_meets_restricted_passes_every_level():
    for value in rule.LEVELS:
        assert levels_of(level("a", value), deployment("a", RESTRICTED_POD)) == [], value
    assert rule.pod_security_problems(RESTRICTED_POD, "restricted") == []


@pytest.mark.parametrize("change,needle", [
    (lambda p: p.update(hostNetwork=True), "hostNetwork = True: host namespaces"),
    (lambda p: p.update(hostPID=True), "hostPID = True"),
    (lambda p: p["volumes"].append({"name": "h", "hostPath": {"path": "/var/run"}}), "volumes[1].hostPath"),
    (lambda p: p["containers"][0]["securityContext"].update(privileged=True), "privileged = True"),
    (lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
     "adds ['SYS_ADMIN'] beyond the baseline set"),
    (lambda p: p["containers"][0].update(ports=[{"containerPort": 80, "hostPort": 80}]), "hostPort = 80"),
    (lambda p: p["securityContext"].update(seccompProfile={"type": "Unconfined"}), "'Unconfined'"),
    (lambda p: p["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
     "'kernel.msgmax': not a safe sysctl"),
], ids=["hostNetwork", "hostPID", "hostPath", "privileged", "capability", "hostPort", "seccomp", "sysctl"])
def test_baseline_violations_fail_baseline_and_restricted_but_not_privileged(change, needle):
    pod = copy.deepcopy(RESTRICTED_POD)
    change(pod)
    assert levels_of(level("a", "privileged"), deployment("a", pod)) == []
    for value in ("baseline", "restricted"):
        (message,) = levels_of(level("a", value), deployment("a", pod))
        assert message.startswith(f"Deployment a/app in namespace 'a' (enforce: {value}) would be rejected at "
                                  "admission: ") and needle in message, message
        assert "spec.template.spec." in message


@pytest.mark.parametrize("change,needle", [
    (lambda p: p["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
     "allowPrivilegeEscalation = None: must be False"),
    (lambda p: p["securityContext"].pop("runAsNonRoot"), "runAsNonRoot = None (pod: None): must be True"),
    (lambda p: p["containers"][0]["securityContext"].update(runAsNonRoot=False), "runAsNonRoot = False"),
    (lambda p: p["containers"][0]["securityContext"].update(runAsUser=0), "runAsUser = 0: runs as root"),
    (lambda p: p["securityContext"].pop("seccompProfile"), "seccompProfile.type = None (pod: None)"),
    (lambda p: p["containers"][0]["securityContext"].update(capabilities={"drop": ["NET_RAW"]}),
     "capabilities.drop = ['NET_RAW']: must drop ALL"),
    (lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["CHOWN"]),
     "capabilities.add = ['CHOWN']: only NET_BIND_SERVICE"),
    (lambda p: p["volumes"].append({"name": "n", "nfs": {"server": "s", "path": "/"}}), "volumes[1].nfs"),
    (lambda p: p.update(initContainers=[{"name": "init", "image": "i@sha256:" + "1" * 64}]),
     "initContainers[0].securityContext.allowPrivilegeEscalation"),
], ids=["escalation", "non-root", "container-root-flag", "uid-0", "seccomp", "drop", "add", "volume", "init"])
def test_restricted_only_violations_fail_restricted_but_pass_baseline(change, needle):
    pod = copy.deepcopy(RESTRICTED_POD)
    change(pod)
    assert levels_of(level("a", "baseline"), deployment("a", pod)) == []
    (message,) = levels_of(level("a", "restricted"), deployment("a", pod))
    assert needle in message, message


def test_container_level_settings_stand_in_for_the_pods():
    pod = copy.deepcopy(RESTRICTED_POD)
    del pod["securityContext"]
    pod["containers"][0]["securityContext"].update(runAsNonRoot=True, seccompProfile={"type": "Localhost"})
    assert rule.pod_security_problems(pod, "restricted") == []


def test_pods_in_namespaces_the_plan_does_not_create_or_label_are_not_judged():
    pod = copy.deepcopy(RESTRICTED_POD)
    pod["hostNetwork"] = True
    assert levels_of(deployment("elsewhere", pod)) == []
    assert levels_of(namespace("a"), deployment("a", pod)) == []  # no level: namespace-pod-security's business


def test_an_unknown_security_field_is_a_violation_but_an_unknown_image_is_not():
    pod = copy.deepcopy(RESTRICTED_POD)
    pod["containers"][0]["image"] = U
    assert levels_of(level("a", "restricted"), deployment("a", pod)) == []
    pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = U
    (message,) = levels_of(level("a", "restricted"), deployment("a", pod))
    assert "spec.template.spec (its security fields) is unknown during preview" in message


def test_the_device_plugin_namespace_admits_its_privileged_pods_only_because_it_says_privileged():
    plugin = {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
              "containers": [{"name": "plugin", "image": "p@sha256:" + "2" * 64, "securityContext": {
                  "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
              "volumes": [{"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}]}
    assert levels_of(level("nvidia-device-plugin", "privileged"),
                     deployment("nvidia-device-plugin", plugin, kind=T_DAEMONSET)) == []
    (message,) = levels_of(level("nvidia-device-plugin", "baseline"),
                           deployment("nvidia-device-plugin", plugin, kind=T_DAEMONSET))
    assert message.startswith("DaemonSet nvidia-device-plugin/app") and "hostPath volumes" in message


# -- the pack and the real plan ----------------------------------------------------------------------------------------

def test_over_grpc_both_rules_are_mandatory(analyze):
    pod = copy.deepcopy(RESTRICTED_POD)
    pod["containers"][0]["securityContext"]["privileged"] = True
    report = analyze(F.doc(namespace("bare"), level("keda", "restricted"), deployment("keda", pod)))
    (bare,) = report.by_policy(rule.NAME)
    (priv,) = report.by_policy(rule.LEVEL_NAME)
    assert bare.level == priv.level == "MANDATORY"
    assert "Namespace 'bare' has no" in bare.message and "privileged container" in priv.message


def test_every_namespace_of_the_dev_plan_states_its_level_and_its_pods_pass_it(dev_plan):
    res = F.as_res(dev_plan)
    levels = {r.props["metadata"]["name"]: r.props["metadata"]["labels"][ENFORCE] for r in res
              if r.type == T_NS}
    assert levels == {"gpuburst": "restricted", "keda": "restricted", "nvidia-device-plugin": "privileged"}
    assert rule.namespace_findings(res) == [] and rule.level_findings(res) == []
    # The rule does judge the dev plan's pods: KEDA's operator made privileged fails it.
    plan = copy.deepcopy(dev_plan)
    (operator,) = [r for r in plan["resources"] if r["type"] == T_DEPLOYMENT
                   and r["properties"]["metadata"]["name"] == "keda-operator"]
    operator["properties"]["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] = True
    (message,) = levels_of(*plan["resources"])
    assert message.startswith("Deployment keda/keda-operator in namespace 'keda' (enforce: restricted)"), message
