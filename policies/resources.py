"""Shared readers for the rules: type tokens, Kubernetes kinds, paths into plain props, and value formatting."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from .unknowns import UNKNOWN

# Kubernetes custom resources and workloads (group, kind); any API version matches.
NODEPOOL = ("karpenter.sh", "NodePool")
EC2NODECLASS = ("karpenter.k8s.aws", "EC2NodeClass")
TRIGGER_AUTHENTICATION = ("keda.sh", "TriggerAuthentication")
CLUSTER_TRIGGER_AUTHENTICATION = ("keda.sh", "ClusterTriggerAuthentication")
SCALED_JOB = ("keda.sh", "ScaledJob")
SCALED_OBJECT = ("keda.sh", "ScaledObject")

# Paths into a NodePool.
NODEPOOL_LABELS = ("spec", "template", "metadata", "labels")
"""The labels of the nodes it launches (Karpenter treats them as `In [value]` requirements too)."""
NODEPOOL_REQUIREMENTS = ("spec", "template", "spec", "requirements")
NODEPOOL_TAINTS = ("spec", "template", "spec", "taints")
NODEPOOL_NODECLASS = ("spec", "template", "spec", "nodeClassRef", "name")
"""The name of the EC2NodeClass its nodes boot from."""
NODEPOOL_LIMITS = ("spec", "limits")

POD_TEMPLATE_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    # Where each kind keeps the pod spec that will actually run.
    ("core", "Pod"): ("spec",),
    ("apps", "Deployment"): ("spec", "template", "spec"),
    ("apps", "StatefulSet"): ("spec", "template", "spec"),
    ("apps", "DaemonSet"): ("spec", "template", "spec"),
    ("apps", "ReplicaSet"): ("spec", "template", "spec"),
    ("batch", "Job"): ("spec", "template", "spec"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template", "spec"),
    SCALED_JOB: ("spec", "jobTargetRef", "template", "spec"),
}
"""Pod-bearing kinds and the path of their pod spec."""

HELM_CHART_TYPES = ("kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v4:Chart", "kubernetes:helm.sh/v3:Chart")
"""Type tokens under which a Helm chart appears in a plan (v4 Chart is what the stack uses)."""

CLUSTER_TYPES = ("eks:index:Cluster", "aws:eks/cluster:Cluster")
"""Type tokens of an EKS control plane; both carry the Kubernetes version in `version`."""

SQS_QUEUE = "aws:sqs/queue:Queue"
NODEGROUP = "aws:eks/nodeGroup:NodeGroup"
"""An EKS managed node group (the system nodes the controllers run on)."""


def k8s_kind(resource_type: str) -> tuple[str, str] | None:
    """`kubernetes:karpenter.sh/v1:NodePool` -> ("karpenter.sh", "NodePool"); `kubernetes:core/v1:Pod` -> ("core",
    "Pod"); None for anything that is not a Kubernetes resource with a group/version."""
    parts = resource_type.split(":")
    if len(parts) != 3 or parts[0] != "kubernetes" or "/" not in parts[1]:
        return None
    group = parts[1].rsplit("/", 1)[0]
    return group, parts[2]


def is_kind(resource_type: str, kind: tuple[str, str]) -> bool:
    """Whether the type token is the given (group, kind), whatever its API version."""
    return k8s_kind(resource_type) == kind


class Found(NamedTuple):
    """The value at a path: `value` is None when absent and `UNKNOWN` when unknown during preview."""

    value: Any
    path: str

    @property
    def missing(self) -> bool:
        return self.value is None

    @property
    def unknown(self) -> bool:
        return self.value is UNKNOWN


def join_path(base: str, key: Any) -> str:
    """`spec` + `limits` -> `spec.limits`; an int key becomes `[i]`; keys with dots or slashes are quoted."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    text = str(key)
    if any(c in text for c in "./ "):
        text = f'"{text}"'
    return f"{base}.{text}" if base else text


def dig(obj: Any, *keys: Any, base: str = "") -> Found:
    """Follow `keys` through plain props: the value, UNKNOWN at the first unknown step (path up to it), or None when
    absent or ill-typed (path = the full path looked for)."""
    path = base
    cur = obj
    for i, key in enumerate(keys):
        if cur is UNKNOWN:
            return Found(UNKNOWN, path)
        path = join_path(path, key)
        absent = (not isinstance(cur, list) or key >= len(cur)) if isinstance(key, int) else \
            (not isinstance(cur, dict) or key not in cur)
        if absent:
            # Name the whole path that was looked for, so a message says which field to set.
            for rest in keys[i + 1:]:
                path = join_path(path, rest)
            return Found(None, path)
        cur = cur[key]
    return Found(cur, path)


def as_list(found: Found) -> list[Any]:
    """The value as a list of items, [] when absent; raise TypeError (caught by the guard) when ill-typed."""
    if found.value is None:
        return []
    if not isinstance(found.value, list):
        raise TypeError(f"{found.path} must be a list, got {type(found.value).__name__} {fmt(found.value)}")
    return found.value


def as_dict(found: Found) -> dict[str, Any]:
    """The value as a dict, {} when absent; raise TypeError when ill-typed."""
    if found.value is None:
        return {}
    if not isinstance(found.value, dict):
        raise TypeError(f"{found.path} must be a mapping, got {type(found.value).__name__} {fmt(found.value)}")
    return found.value


def enumerate_at(found: Found) -> Iterator[tuple[str, Any]]:
    """(path of item i, item) for each item of a list value."""
    for i, item in enumerate(as_list(found)):
        yield join_path(found.path, i), item


def fmt(value: Any) -> str:
    """A value as it should appear in a message: strings quoted, lists in brackets, unknowns spelled out."""
    if value is UNKNOWN:
        return "<unknown during preview>"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, list):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {fmt(v)}" for k, v in value.items()) + "}"
    return repr(value)


def as_int(value: Any) -> int | None:
    """An integral number (the Struct sends numbers as floats: 10.0) or a digit string as int; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        return int(value.strip())
    return None


def as_number(value: Any) -> float | None:
    """A number or numeric string as float; None otherwise (bools are not numbers)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def is_true_string(value: Any) -> bool:
    """A Kubernetes-style boolean annotation/label: the string "true" (any case)."""
    return isinstance(value, str) and value.strip().lower() == "true"


SQS_TRIGGER_TYPE = "aws-sqs-queue"
"""KEDA's scaler type for SQS queues."""


def triggers(props: Any) -> tuple[list[tuple[str, Any]], list[str]]:
    """((path, trigger) for each KEDA trigger in a ScaledJob/ScaledObject, paths of unknown triggers or lists)."""
    found = dig(props, "spec", "triggers")
    if found.unknown:
        return [], [found.path]
    out, unknown = [], []
    for path, trig in enumerate_at(found):
        if trig is UNKNOWN or (isinstance(trig, dict) and trig.get("type") is UNKNOWN):
            unknown.append(path)
        elif isinstance(trig, dict):
            out.append((path, trig))
    return out, unknown
