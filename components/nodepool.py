"""The Karpenter NodePool for GPU nodes: several instance types, GPU taint and label, limits, empty-only disruption."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s

from .catalogue import instance_type_expectation
from .nodeclass import NODECLASS_API_VERSION, crd_charts
from .spec.gpu_pool import (
    CAPACITY_TYPES,
    DEFAULT_BUDGETS,
    DEFAULT_CONSOLIDATE_AFTER,
    DEFAULT_GPU_INSTANCE_TYPES,
    NODEPOOL_API_VERSION,
)
from .spec.names import GPU_PRESENT_LABEL, GPU_TAINT, POOL_LABEL
from .spec.quantity import is_quantity
from .spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate

if TYPE_CHECKING:
    from .existing import ExistingKarpenter
    from .karpenter import Karpenter

_DURATION = re.compile(r"^([0-9]+(s|m|h))+$")
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def instance_type_error(field: str, types: Sequence[str]) -> ConfigError | None:
    """The first of `types` not in `catalogue.INSTANCE_TYPES`, as a one-line error naming it, or None."""
    for t in types:
        expectation = instance_type_expectation(t)
        if expectation is not None:
            return ConfigError(field, t, expectation)
    return None


def _plain_list(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)


NODEPOOL_RULES = (
    Rule("name", lambda v: isinstance(v, str) and len(v) <= 63 and bool(_DNS1123.match(v)),
         "a DNS-1123 name of at most 63 characters (it is also the gpuburst.io/pool label value)"),
    Rule("nodeclass_name", lambda v: isinstance(v, str) and bool(_DNS1123.match(v)),
         "the EC2NodeClass's metadata.name as a plain string"),
    Rule("instance_types", _plain_list,
         "a list of instance type names as plain strings (never an Output: a policy judges them during preview)"),
    Rule("instance_types", lambda v: len(set(v)) >= 2,
         "at least two instance types (a family of sizes, e.g. g5.xlarge and g5.2xlarge): the day a single type "
         "runs out of capacity, the scheduler is stuck and slides wait"),
    Rule("capacity_types", lambda v: _plain_list(v) and len(v) > 0 and set(v) <= set(CAPACITY_TYPES),
         "a non-empty list drawn from " + ", ".join(CAPACITY_TYPES)),
    Rule("gpu_limit", is_int_between(1, 10_000), "an int number of GPUs between 1 and 10000 (the pool's spending cap)"),
    Rule("cpu_limit",
         lambda v: v is None or is_int_between(1, 1_000_000)(v) or is_quantity(v),
         "None or a positive CPU quantity (e.g. 64 or '64' or '64000m')"),
    Rule("consolidate_after", lambda v: isinstance(v, str) and bool(_DURATION.match(v)),
         "a duration like '5m' or '1h30m' ('Never' would keep idle GPU nodes running)"),
    Rule("expire_after", lambda v: isinstance(v, str) and (v == "Never" or bool(_DURATION.match(v))),
         "a duration like '720h', or 'Never'"),
    Rule("termination_grace_period", lambda v: v is None or (isinstance(v, str) and bool(_DURATION.match(v))),
         "None or a duration like '2h'"),
    Rule("weight", lambda v: v is None or is_int_between(1, 100)(v), "None or an int between 1 and 100"),
)
"""What `gpu_nodepool_manifest` accepts."""

_RESTRICTED_LABEL_DOMAINS = ("karpenter.sh", "karpenter.k8s.aws")


def _check_labels(labels: Mapping[str, str]) -> None:
    for key, value in labels.items():
        domain = key.split("/", 1)[0] if "/" in key else ""
        if domain.endswith(_RESTRICTED_LABEL_DOMAINS) or key == "kubernetes.io/hostname" or key == POOL_LABEL:
            raise ConfigError("labels", key, f"a label outside karpenter.sh, karpenter.k8s.aws, kubernetes.io/hostname "
                                             f"and {POOL_LABEL} (set by Karpenter or by this component)")
        if not isinstance(value, str):
            raise ConfigError(f"labels[{key!r}]", value, "a plain string")


def gpu_nodepool_manifest(name: str, *, nodeclass_name: str,
                          instance_types: Sequence[str] = DEFAULT_GPU_INSTANCE_TYPES,
                          capacity_types: Sequence[str] = ("spot", "on-demand"),
                          gpu_limit: int, cpu_limit: int | str | None = None,
                          consolidate_after: str = DEFAULT_CONSOLIDATE_AFTER,
                          expire_after: str = "720h", termination_grace_period: str | None = None,
                          budgets: Sequence[Mapping[str, Any]] | None = None, labels: Mapping[str, str] | None = None,
                          weight: int | None = None) -> dict[str, Any]:
    """The NodePool manifest for GPU nodes (a plain dict of plain values; raises ConfigError on a bad value)."""
    labels = dict(labels or {})
    validate({"name": name, "nodeclass_name": nodeclass_name, "instance_types": instance_types,
              "capacity_types": capacity_types, "gpu_limit": gpu_limit, "cpu_limit": cpu_limit,
              "consolidate_after": consolidate_after, "expire_after": expire_after,
              "termination_grace_period": termination_grace_period, "weight": weight}, NODEPOOL_RULES)
    type_error = instance_type_error("instance_types", instance_types)
    if type_error:
        raise type_error
    _check_labels(labels)
    types = list(dict.fromkeys(instance_types))  # keep order, drop duplicates
    limits: dict[str, Any] = {"nvidia.com/gpu": gpu_limit}
    if cpu_limit is not None:
        limits["cpu"] = cpu_limit
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": NODECLASS_API_VERSION.split("/")[0], "kind": "EC2NodeClass", "name": nodeclass_name},
        "requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(dict.fromkeys(capacity_types))},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ],
        "taints": [dict(GPU_TAINT)],
        # Expiry is forceful in Karpenter v1 (no budget stops it); a worker pod annotated karpenter.sh/do-not-disrupt
        # still finishes its slide, bounded only by terminationGracePeriod when one is set.
        "expireAfter": expire_after,
    }
    if termination_grace_period is not None:
        template_spec["terminationGracePeriod"] = termination_grace_period
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"labels": {GPU_PRESENT_LABEL[0]: GPU_PRESENT_LABEL[1], POOL_LABEL: name, **labels}},
            "spec": template_spec,
        },
        "limits": limits,
        "disruption": {
            # Nodes go back as soon as they are empty; a node running a slide is never consolidated away.
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": consolidate_after,
            "budgets": [dict(b) for b in (budgets if budgets is not None else DEFAULT_BUDGETS)],
        },
    }
    if weight is not None:
        spec["weight"] = weight
    return {"apiVersion": NODEPOOL_API_VERSION, "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


@dataclass
class GpuNodePoolArgs:
    """Inputs of a GpuNodePool (see `gpu_nodepool_manifest` for the rules)."""

    nodeclass_name: str
    """metadata.name of the EC2NodeClass the nodes use (Ec2NodeClass.nodeclass_name), plain string."""
    gpu_limit: int
    """Most GPUs the pool may hold at once (the spending cap). No default."""
    crd_chart: pulumi.Resource | None = None
    """The `karpenter-crd` chart (Karpenter.crd_chart) the NodePool waits for. Default None: Karpenter (and its CRDs)
    is installed elsewhere, e.g. by a platform stack this one attaches to."""
    karpenter: Karpenter | ExistingKarpenter | None = None
    """The Karpenter this stack installs, or an ExistingKarpenter another stack runs (its version was checked
    against the catalogue's guards when it was made); the NodePool waits for its CRD chart, if any. Default None."""
    nodepool_name: str = "gpu"
    """metadata.name of the NodePool; also the value of the `gpuburst.io/pool` node label. Default `gpu`."""
    instance_types: Sequence[str] = DEFAULT_GPU_INSTANCE_TYPES
    """At least two instance types of `catalogue.INSTANCE_TYPES`. Default g4dn/g5 xlarge and 2xlarge."""
    capacity_types: Sequence[str] = ("spot", "on-demand")
    """Capacity types Karpenter may buy; their order is ignored (Karpenter prefers spot whenever spot is allowed).
    Default spot and on-demand: spot, falling back to on-demand when spot is short."""
    cpu_limit: int | str | None = None
    """Most vCPUs the pool may hold, or None (default) for no CPU cap."""
    consolidate_after: str = DEFAULT_CONSOLIDATE_AFTER
    """How long a node stays empty before it is removed. Default 5m."""
    expire_after: str = "720h"
    """Node lifetime before forced replacement (picks up new AMIs). Default 720h (Karpenter's default)."""
    termination_grace_period: str | None = None
    """Longest a draining node waits for its pods; None (default) waits for a do-not-disrupt slide to finish."""
    budgets: Sequence[Mapping[str, Any]] | None = None
    """Disruption budgets; None (default) uses DEFAULT_BUDGETS."""
    labels: dict[str, str] = field(default_factory=dict)
    """Extra node labels. Default none."""
    weight: int | None = None
    """NodePool weight (1-100) among pools; None (default) leaves it unset."""


@names_its_errors
class GpuNodePool(pulumi.ComponentResource):
    """The NodePool custom resource (`kubernetes:karpenter.sh/v1:NodePool`)."""

    resource: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        manifest = gpu_nodepool_manifest(
            args.nodepool_name, nodeclass_name=args.nodeclass_name, instance_types=args.instance_types,
            capacity_types=args.capacity_types, gpu_limit=args.gpu_limit, cpu_limit=args.cpu_limit,
            consolidate_after=args.consolidate_after, expire_after=args.expire_after,
            termination_grace_period=args.termination_grace_period, budgets=args.budgets, labels=args.labels,
            weight=args.weight)
        super().__init__("gpuburst:index:GpuNodePool", name, None, opts)
        self.nodepool_name: str = args.nodepool_name
        self.manifest: dict[str, Any] = manifest
        self.resource = k8s.apiextensions.CustomResource(
            f"{name}-nodepool", api_version=manifest["apiVersion"], kind=manifest["kind"],
            metadata=manifest["metadata"], spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=crd_charts(args)))
        self.register_outputs({"nodepoolName": self.nodepool_name})
