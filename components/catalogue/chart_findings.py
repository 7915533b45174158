"""Why each checkov finding left on the pinned charts' objects is left: the one table the synth and the tests read.

The stack hardens the charts through their values (requests and limits, RuntimeDefault seccomp, read-only roots,
images by digest where one is published); what a chart does not let its values change, or what the component needs,
stays, and each such finding is listed here with its reason. `tests/components/test_chart_findings.py` runs checkov
on the dev plan's rendered chart objects and fails on a finding this table does not explain, and on an entry no
finding needs any more. Checks CKV_K8S_10, 11, 12, 13 (CPU/memory requests and limits) and 31 (seccomp) must never
appear here: every chart container has them.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "ChartFinding",
    "NEVER_EXCUSED",
    "CHART_FINDINGS",
    "object_of",
    "unexplained",
    "stale",
    "reason_for",
]

@dataclass(frozen=True)
class ChartFinding:
    """A checkov check that fails on named objects of one chart, and why that is accepted."""

    chart: str
    """Chart name (catalogue.CHARTS key), e.g. `keda`."""
    check: str
    """checkov check id, e.g. `CKV_K8S_43`."""
    objects: tuple[str, ...]
    """The objects it fails on, `Kind/name` as rendered (the pod template's owner, or `Pod/<name>` for the
    NetworkPolicy graph check CKV2_K8S_6)."""
    reason: str
    """Why it stays (what the chart allows, what the component needs, what else covers it)."""


NEVER_EXCUSED = ("CKV_K8S_10", "CKV_K8S_11", "CKV_K8S_12", "CKV_K8S_13", "CKV_K8S_31")
"""Checks every chart container must pass (requests and limits for CPU and memory, a seccomp profile)."""

_DP = "nvidia-device-plugin"
_PLUGIN = "DaemonSet/nvidia-device-plugin"
_MPS = "DaemonSet/nvidia-device-plugin-mps-control-daemon"
_KEDA_DEPLOYMENTS = ("Deployment/keda-admission-webhooks", "Deployment/keda-operator",
                     "Deployment/keda-operator-metrics-apiserver")
_MPS_ONLY = ("the MPS control daemon's DaemonSet selects only nodes labelled nvidia.com/mps.capable=true, which only "
             "GPU feature discovery sets for an MPS sharing config; this stack installs neither (gfd.enabled false, no "
             "sharing config), so no pod of it ever runs; the chart renders it unconditionally with a privileged, "
             "host-PID init container that its values cannot change")

CHART_FINDINGS: tuple[ChartFinding, ...] = (
    # -- every chart -------------------------------------------------------------------------------------------
    ChartFinding("karpenter", "CKV_K8S_38", ("Deployment/karpenter",),
                 "the controller is a Kubernetes client (NodeClaims, nodes, pods): it needs its service account token"),
    ChartFinding("keda", "CKV_K8S_38", _KEDA_DEPLOYMENTS,
                 "all three are Kubernetes clients (the operator reconciles ScaledJobs, the metrics server and the "
                 "webhooks read them): they need their service account tokens"),
    ChartFinding(_DP, "CKV_K8S_38", (_PLUGIN, _MPS),
                 "0.20's plugin reads its own Node object (ClusterRole nvidia-device-plugin-role: nodes get/list/"
                 "watch), so it needs its token; the chart has no value to turn automounting off"),
    # -- KEDA ----------------------------------------------------------------------------------------------------
    ChartFinding("keda", "CKV_K8S_40", _KEDA_DEPLOYMENTS,
                 "KEDA runs as its image's non-root UID 1000 (runAsNonRoot true, every capability dropped, read-only "
                 "root); upstream tests no other UID, and a UID above 10000 buys nothing on the system nodes, which "
                 "run no other workloads"),
    ChartFinding("keda", "CKV_K8S_155", ("ClusterRole/keda-operator-minimal-cluster-role",),
                 "the operator's certificate rotation patches the CA bundle into its ValidatingWebhookConfiguration "
                 "(keda-admission); the chart grants get/list/watch/patch/update on every "
                 "validatingwebhookconfiguration and has no value to scope the rule to that one name"),
    # -- NVIDIA device plugin ------------------------------------------------------------------------------------
    ChartFinding(_DP, "CKV_K8S_8", (_PLUGIN, _MPS),
                 "the chart has no liveness probe value; a plugin that dies exits and the kubelet restarts it, and "
                 "`verify gpu-allocatable` checks that every GPU node really advertises nvidia.com/gpu"),
    ChartFinding(_DP, "CKV_K8S_9", (_PLUGIN, _MPS),
                 "the chart has no readiness probe value; a DaemonSet pod serves no traffic, so readiness gates "
                 "nothing (`verify gpu-allocatable` judges the node's allocatable GPUs instead)"),
    ChartFinding(_DP, "CKV_K8S_22", (_PLUGIN, _MPS),
                 "not read-only: the plugin writes its socket into the kubelet's device-plugins directory and CDI "
                 "specs into /var/run/cdi (both hostPath), and upstream neither documents nor tests a read-only "
                 "root; a plugin that crash-loops takes every GPU away, so this stays as upstream ships it"),
    ChartFinding(_DP, "CKV_K8S_23", (_PLUGIN, _MPS),
                 "runs as root: the kubelet's device-plugins directory is root-owned and the plugin must create its "
                 "socket there (every capability is dropped and privilege escalation is off)"),
    ChartFinding(_DP, "CKV_K8S_40", (_PLUGIN, _MPS), "runs as root (UID 0), for the reason of CKV_K8S_23"),
    ChartFinding(_DP, "CKV_K8S_16", (_MPS,), _MPS_ONLY),
    ChartFinding(_DP, "CKV_K8S_17", (_MPS,), _MPS_ONLY),
    ChartFinding(_DP, "CKV_K8S_20", (_MPS,), _MPS_ONLY),
    ChartFinding(_DP, "CKV_K8S_28", (_MPS,), _MPS_ONLY),
    ChartFinding(_DP, "CKV_K8S_37", (_MPS,), _MPS_ONLY),
)
"""Every accepted checkov finding on the pinned charts' rendered objects, with its reason."""


def object_of(resource: str) -> str:
    """checkov's resource id `Kind.namespace.name[.labels...]` -> `Kind/name`."""
    parts = resource.split(".")
    return f"{parts[0]}/{parts[2]}" if len(parts) >= 3 else resource


def unexplained(found: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """The (chart, check, `Kind/name`) findings `CHART_FINDINGS` does not explain (a NEVER_EXCUSED check never is)."""
    known = {(f.chart, f.check, o) for f in CHART_FINDINGS if f.check not in NEVER_EXCUSED for o in f.objects}
    return sorted({t for t in found if t not in known})


def stale(found: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Entries of `CHART_FINDINGS` that no finding needs any more (remove them: an old excuse hides nothing)."""
    seen = set(found)
    return sorted({(f.chart, f.check, o) for f in CHART_FINDINGS for o in f.objects} - seen)


def reason_for(chart: str, check: str) -> str | None:
    """The reason a finding is accepted, for messages (None when it is not)."""
    return next((f.reason for f in CHART_FINDINGS if f.chart == chart and f.check == check), None)
