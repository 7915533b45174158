"""A team's workload namespace: Pod Security `restricted`, a default-deny NetworkPolicy and a ResourceQuota, the
three things a namespace needs before worker pods run in it beside other teams'.

Who creates it: the team's own workload stack, with this component (a platform stack creates its own workloads'
namespace the same way, `GpuBurstPlatform`). What it holds:

- the Namespace, labelled for Pod Security admission at `restricted` (enforce, audit and warn; Kubernetes Pod Security
  Standards): a pod that runs as root, mounts a node folder or escalates privileges is refused at admission;
- the default-deny NetworkPolicy (`pod.default_deny_network_policy`): a pod there talks only as far as another policy
  allows (the worker's: DNS, the Pod Identity agent, HTTPS into the VPC);
- a ResourceQuota capping what the namespace may request at once: GPUs (`requests.nvidia.com/gpu`: an extended
  resource is quota'd by its requests only, Kubernetes docs "Resource Quotas", "Resource quota for extended
  resources"), CPU and memory (requests and limits). With a CPU or memory quota, every pod of the namespace must state
  its requests and limits or admission refuses it; the worker pods do (Guaranteed QoS).

The team's NodePool (`GpuNodePool`, its `gpu_limit`) caps the nodes; the quota caps the namespace, so a second
workload of the team, or a pod that names another pool, cannot take more GPUs than the team was given.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .pod import DEFAULT_DENY_NAME, default_deny_network_policy
from .spec.names import GPU_RESOURCE
from .spec.quantity import fmt_cpu
from .spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate

RESTRICTED_LABELS = {"pod-security.kubernetes.io/enforce": "restricted",
                     "pod-security.kubernetes.io/enforce-version": "latest",
                     "pod-security.kubernetes.io/audit": "restricted",
                     "pod-security.kubernetes.io/warn": "restricted"}
"""Pod Security admission labels of a workload namespace (the `restricted` standard, enforced, audited, warned)."""

QUOTA_NAME = "gpuburst-quota"
"""Name of the namespace's ResourceQuota."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_RESERVED = ("kube-system", "kube-public", "kube-node-lease", "default")


@dataclass
class WorkloadNamespaceArgs:
    """Inputs of a WorkloadNamespace: its name and the quota of what its pods may request at once."""

    name: str
    """The namespace's name (a DNS label; not kube-system, kube-public, kube-node-lease or default). Required."""
    gpus: int = 4
    """Most `nvidia.com/gpu` the namespace's pods may request at once (`requests.nvidia.com/gpu`): the team's share
    of GPUs, at most its NodePool's `gpu_limit`. Default 4."""
    cpu_cores: float = 32
    """Most CPU cores its pods may request, and have as limits, at once (`requests.cpu`, `limits.cpu`). Default 32:
    four default worker pods (4 cores each) and room for the rest."""
    memory_gib: int = 192
    """Most memory, GiB, its pods may request, and have as limits, at once (`requests.memory`, `limits.memory`).
    Default 192: four default worker pods (24 GiB each) and room for the rest."""
    pods: int = 50
    """Most pods in the namespace at once (`pods`; finished Job pods kept for inspection count until deleted).
    Default 50."""
    labels: dict[str, str] = field(default_factory=dict)
    """More namespace labels (e.g. the team's). Default none; may not change the Pod Security labels."""


_RULES = [
    Rule("name", lambda v: isinstance(v, str) and bool(_DNS_LABEL.match(v)) and v not in _RESERVED,
         f"a DNS label (lower-case letters, digits, '-', at most 63) other than {', '.join(_RESERVED)}"),
    Rule("gpus", is_int_between(0, 1000), "an int of whole GPUs, 0-1000"),
    Rule("cpu_cores", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 10000,
         "cores, > 0 and <= 10000"),
    Rule("memory_gib", is_int_between(1, 100000), "an int of GiB, 1-100000"),
    Rule("pods", is_int_between(1, 10000), "an int, 1-10000"),
]


def check_namespace_args(args: WorkloadNamespaceArgs) -> None:
    """Raise ConfigError (one line naming the field and the value) when the namespace cannot be made as asked."""
    validate({r.field: getattr(args, r.field) for r in _RULES}, _RULES, prefix="WorkloadNamespaceArgs.")
    clash = sorted(k for k in args.labels if k in RESTRICTED_LABELS or k.startswith("pod-security.kubernetes.io/"))
    if clash:
        raise ConfigError("WorkloadNamespaceArgs.labels", {k: args.labels[k] for k in clash},
                          "labels other than pod-security.kubernetes.io/* (the namespace is `restricted`)")


def namespace_manifest(args: WorkloadNamespaceArgs) -> dict[str, Any]:
    """The Namespace (plain dict): its name, the team's labels and the `restricted` Pod Security labels."""
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": args.name, "labels": {**args.labels, **RESTRICTED_LABELS}}}


def quota_manifest(args: WorkloadNamespaceArgs) -> dict[str, Any]:
    """The ResourceQuota (plain dict) capping GPUs, CPU, memory and pods in the namespace."""
    return {"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": QUOTA_NAME, "namespace": args.name},
            "spec": {"hard": {f"requests.{GPU_RESOURCE}": str(args.gpus),
                              "requests.cpu": fmt_cpu(args.cpu_cores), "limits.cpu": fmt_cpu(args.cpu_cores),
                              "requests.memory": f"{args.memory_gib}Gi", "limits.memory": f"{args.memory_gib}Gi",
                              "pods": str(args.pods)}}}


@names_its_errors
class WorkloadNamespace(pulumi.ComponentResource):
    """Namespace (Pod Security `restricted`) + default-deny NetworkPolicy + ResourceQuota for a team's workloads."""

    name: str
    """The namespace's name (pass it as the workloads' `namespace`)."""
    namespace: k8s.core.v1.Namespace
    default_deny: k8s.networking.v1.NetworkPolicy
    quota: k8s.core.v1.ResourceQuota

    def __init__(self, name: str, args: WorkloadNamespaceArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        check_namespace_args(args)
        super().__init__("gpuburst:index:WorkloadNamespace", name, None, opts)
        self.name = args.name
        ns = namespace_manifest(args)
        self.namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=ns["metadata"],
                                               opts=pulumi.ResourceOptions(parent=self))
        in_namespace = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        deny = default_deny_network_policy(args.name, DEFAULT_DENY_NAME)
        self.default_deny = k8s.networking.v1.NetworkPolicy(f"{name}-default-deny", metadata=deny["metadata"],
                                                             spec=deny["spec"], opts=in_namespace)
        quota = quota_manifest(args)
        self.quota = k8s.core.v1.ResourceQuota(f"{name}-quota", metadata=quota["metadata"], spec=quota["spec"],
                                               opts=in_namespace)
        self.register_outputs({"name": self.name})
