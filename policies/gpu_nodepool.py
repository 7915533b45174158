"""Rules `gpu-nodepool-isolation` and `scaledjob-max-replicas`: GPU capacity is fenced off and bounded.

A NodePool is a GPU pool when anything in it can launch or marks a GPU node:
- a requirement or template label naming a GPU instance type, family or category: EC2's GPU families all start with
  `g` (g4dn, g5, g5g, g6, g6e, gr6) or `p` (p3, p4d, p5), so category `g`/`p`, a family, or a type `FAMILY.SIZE`
  whose family starts with `g` or `p`, admitted through `In` (a `NotIn` excludes, it does not admit);
- a requirement on a GPU label (`karpenter.k8s.aws/instance-gpu-count|-manufacturer|-name|-memory`) with `In`
  (other than `In ['0']`), `Exists`, `Gt` or `Gte`;
- any `nvidia.com/gpu*` template label, an `nvidia.com/gpu` taint, or an `nvidia.com/gpu` limit.
A GPU pool must then (1) label its nodes `nvidia.com/gpu.present: "true"` in `spec.template.metadata.labels`, so
Karpenter knows before launch that a node fits pods selecting on it; (2) taint them `nvidia.com/gpu` with effect
`NoSchedule`, so only pods that asked for a GPU land on a GPU node; (3) cap `spec.limits["nvidia.com/gpu"]`, so a
burst cannot buy unbounded GPUs. A KEDA ScaledJob must set `spec.maxReplicaCount` (KEDA's default is 100 Jobs).
"""
from __future__ import annotations

from typing import Any

from ._components import GPU_RESOURCE, GPU_TAINT, names
from .declare import resource_policy
from .resources import (
    NODEPOOL,
    NODEPOOL_LABELS,
    NODEPOOL_LIMITS,
    NODEPOOL_REQUIREMENTS,
    NODEPOOL_TAINTS,
    SCALED_JOB,
    as_int,
    as_number,
    dig,
    fmt,
    join_path,
)
from .selection import (
    CATEGORY_KEY,
    FAMILY_KEY,
    GPU_COUNT_KEY,
    GPU_MANUFACTURER_KEY,
    GPU_MEMORY_KEY,
    GPU_NAME_KEY,
    INSTANCE_TYPE_KEYS,
    normalise,
    split_type,
)
from .unknowns import UNKNOWN, unknown_message

NAME = "gpu-nodepool-isolation"
MAX_REPLICAS_NAME = "scaledjob-max-replicas"

GPU_PRESENT_LABEL: str
GPU_PRESENT_VALUE: str
GPU_PRESENT_LABEL, GPU_PRESENT_VALUE = names.GPU_PRESENT_LABEL
"""Node label a GPU pool must set, and its value (the string "true"; what GPU pods select on)."""
GPU_TAINT_KEY: str = GPU_TAINT["key"]
GPU_TAINT_EFFECT: str = GPU_TAINT["effect"]
"""The taint every GPU node carries (its key is GPU_RESOURCE)."""
GPU_FAMILY_INITIALS = ("g", "p")
"""First letter of every EC2 NVIDIA GPU family (and the GPU instance categories)."""
GPU_LABEL_KEYS = (GPU_COUNT_KEY, GPU_MANUFACTURER_KEY, GPU_NAME_KEY, GPU_MEMORY_KEY)


def _is_gpu_family(family: str) -> bool:
    return bool(family) and family[0] in GPU_FAMILY_INITIALS


def _value_is_gpu(key: str, value: str) -> bool:
    if key in INSTANCE_TYPE_KEYS:
        parts = split_type(value)
        return parts is not None and _is_gpu_family(parts[0])
    if key == FAMILY_KEY:
        return _is_gpu_family(value)
    if key == CATEGORY_KEY:
        return value in GPU_FAMILY_INITIALS
    return False


def gpu_evidence(props: Any) -> tuple[list[str], list[str]]:
    """(reasons this NodePool is a GPU pool, paths of unknown values that could make it one)."""
    reasons: list[str] = []
    unknown: list[str] = []
    reqs = dig(props, *NODEPOOL_REQUIREMENTS)
    if reqs.unknown:
        unknown.append(reqs.path)
    elif isinstance(reqs.value, list):
        for i, item in enumerate(reqs.value):
            ipath = join_path(reqs.path, i)
            if item is UNKNOWN:
                unknown.append(ipath)
                continue
            if not isinstance(item, dict):
                continue
            key, op, values = item.get("key"), item.get("operator"), item.get("values")
            if UNKNOWN in (key, op) or values is UNKNOWN or (isinstance(values, list) and UNKNOWN in values):
                unknown.append(ipath)
                continue
            if not isinstance(key, str):
                continue
            vals = [normalise(v) for v in values] if isinstance(values, list) else []
            if key in GPU_LABEL_KEYS and (op in ("Exists", "Gt", "Gte") or (op == "In" and vals != ["0"])):
                reasons.append(f"{ipath} ({key} {op})")
            elif op == "In" and any(_value_is_gpu(key, v) for v in vals):
                reasons.append(f"{ipath} ({key} In {fmt(vals)})")
    labels = dig(props, *NODEPOOL_LABELS)
    if labels.unknown:
        unknown.append(labels.path)
    elif isinstance(labels.value, dict):
        for key, value in labels.value.items():
            if key.startswith(GPU_RESOURCE):
                reasons.append(f"{join_path(labels.path, key)} label")
            elif value is not UNKNOWN and isinstance(value, str) and _value_is_gpu(key, normalise(value)):
                reasons.append(f"{join_path(labels.path, key)} = {fmt(value)}")
    taints = dig(props, *NODEPOOL_TAINTS)
    if isinstance(taints.value, list) and any(isinstance(t, dict) and t.get("key") == GPU_TAINT_KEY
                                              for t in taints.value):
        reasons.append(f"{taints.path} has an {GPU_TAINT_KEY} taint")
    limits = dig(props, *NODEPOOL_LIMITS)
    if isinstance(limits.value, dict) and GPU_RESOURCE in limits.value:
        reasons.append(f"{limits.path} limits {GPU_RESOURCE}")
    return reasons, unknown


def _label_problem(props: Any) -> str | None:
    found = dig(props, *NODEPOOL_LABELS, GPU_PRESENT_LABEL)
    if found.unknown:
        return unknown_message(found.path, f"the {GPU_PRESENT_LABEL} label")
    if found.value == GPU_PRESENT_VALUE:
        return None
    got = "is missing" if found.missing else f"is {fmt(found.value)}"
    return (f"{found.path} {got}: a GPU NodePool must label its nodes {GPU_PRESENT_LABEL}: \"{GPU_PRESENT_VALUE}\" "
            "(the string) in spec.template.metadata.labels, so pods selecting on it can be scheduled before the node "
            "exists")


def _taint_problem(props: Any) -> str | None:
    taints = dig(props, *NODEPOOL_TAINTS)
    if taints.unknown:
        return unknown_message(taints.path, f"the {GPU_TAINT_KEY} taint")
    items = taints.value if isinstance(taints.value, list) else []
    if any(isinstance(t, dict) and t.get("key") == GPU_TAINT_KEY and t.get("effect") == GPU_TAINT_EFFECT
           for t in items):
        return None
    unknown_items = [join_path(taints.path, i) for i, t in enumerate(items)
                     if t is UNKNOWN or (isinstance(t, dict) and UNKNOWN in (t.get("key"), t.get("effect")))]
    if unknown_items:
        return unknown_message(unknown_items[0], f"the {GPU_TAINT_KEY} taint")
    got = "is missing" if taints.missing else f"is {fmt(taints.value)}"
    return (f"{taints.path} {got}: a GPU NodePool must taint its nodes {{key: {GPU_TAINT_KEY}, effect: "
            f"{GPU_TAINT_EFFECT}}} so only pods that tolerate it (GPU pods) land on GPU nodes")


def _limit_problem(props: Any) -> str | None:
    found = dig(props, *NODEPOOL_LIMITS, GPU_RESOURCE)
    if found.unknown:
        return unknown_message(found.path, f"the {GPU_RESOURCE} limit")
    n = as_number(found.value)
    if n is not None and n > 0:
        return None
    got = "is missing" if found.missing else f"is {fmt(found.value)}"
    return (f"{found.path} {got}: a GPU NodePool must cap spec.limits[\"{GPU_RESOURCE}\"] at a positive number of "
            "GPUs so a burst cannot launch unbounded GPU capacity")


def problems(props: Any) -> list[str]:
    """Why this NodePool (plain props) breaks the GPU pool rules; empty when it is fine or not a GPU pool."""
    reasons, unknown = gpu_evidence(props)
    if not reasons:
        return [unknown_message(p, "whether this is a GPU NodePool") for p in unknown]
    why = f" (GPU pool because of {reasons[0]})"
    return [p + why for p in (_label_problem(props), _taint_problem(props), _limit_problem(props)) if p]


def max_replicas_problems(props: Any) -> list[str]:
    """Why this ScaledJob (plain props) does not bound its Job count; empty when it does."""
    found = dig(props, "spec", "maxReplicaCount")
    if found.unknown:
        return [unknown_message(found.path, "the ScaledJob's bound on parallel Jobs")]
    n = as_int(found.value)
    if n is not None and n >= 1:
        return []
    got = "is missing (KEDA then allows 100 parallel Jobs)" if found.missing else f"is {fmt(found.value)}"
    return [f"{found.path} {got}: set maxReplicaCount to a whole number >= 1, the most GPU Jobs this workload may "
            "run at once"]


POLICY = resource_policy(
    NAME, f"A GPU NodePool must label its nodes {GPU_PRESENT_LABEL}: \"{GPU_PRESENT_VALUE}\", taint them "
          f"{GPU_TAINT_KEY}:{GPU_TAINT_EFFECT} and cap spec.limits[\"{GPU_RESOURCE}\"].",
    (NODEPOOL,), lambda r: problems(r.props))

MAX_REPLICAS_POLICY = resource_policy(
    MAX_REPLICAS_NAME, "A KEDA ScaledJob must set spec.maxReplicaCount (KEDA's default allows 100 parallel GPU Jobs).",
    (SCALED_JOB,), lambda r: max_replicas_problems(r.props))

POLICIES = [POLICY, MAX_REPLICAS_POLICY]
