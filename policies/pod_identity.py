"""Stack rule `pod-identity-unique`: at most one EKS Pod Identity association per cluster, namespace and
ServiceAccount.

EKS keeps one association per (cluster, namespace, service account): `CreatePodIdentityAssociation` for a second one
fails at apply time with HTTP 409 `ResourceInUseException: Association already exists` (seen in eksctl-io/eksctl
#7753 and aws/eks-hybrid#679), after the preview passed and part of the stack was created. Two in one plan usually
mean a workload's own role and a hand-made one for the same ServiceAccount, or two workloads sharing a name; the pod
would get only the first role anyway. The rule judges the plan's associations among themselves (another stack's
association for the same ServiceAccount is not in the plan).
"""
from __future__ import annotations

from typing import NamedTuple

from .declare import plan_policy
from .fixes import fix_for, parent_types
from .identity import associations
from .outside import Finding
from .plan import Res
from .resources import fmt
from .unknowns import UNKNOWN, unknown_message

NAME = "pod-identity-unique"
WORKLOAD_TYPES = ("gpuburst:index:GpuScaledJob", "gpuburst:index:GpuConsumer")
"""The components whose worker role is `.identity.role` (a WorkloadIdentity's `aws.iam.Role`)."""
WORKLOAD_IDENTITY = "gpuburst:index:WorkloadIdentity"
WORKER_ASSOCIATION_SUFFIX = "-worker-association"
"""A workload `<name>`'s worker association: its WorkloadIdentity `<name>-worker` names it `<name>-worker-association`
(`pod.declare_worker_identity`, `identity.WorkloadIdentity`)."""


class Workload(NamedTuple):
    """The GpuScaledJob or GpuConsumer whose worker role an association gives."""

    type: str
    name: str
    urn: str
    """Its URN where the plan holds it (its chain of types says the stack kind), else the association's."""


def worker_workload(res: Res, by_urn: dict[str, Res]) -> Workload | None:
    """The workload whose worker association `res` is: its parent a WorkloadIdentity whose parent is a GpuScaledJob or
    GpuConsumer (through the plan's parent links, else the URN's chain of types). None for any other association
    (a hand-made WorkloadIdentity, a KEDA scaler's, a bare one)."""
    identity = by_urn.get(res.parent) if res.parent else None
    if identity is not None:
        owner = by_urn.get(identity.parent) if identity.type == WORKLOAD_IDENTITY and identity.parent else None
        return Workload(owner.type, owner.name, owner.urn) if owner and owner.type in WORKLOAD_TYPES else None
    chain = parent_types(res.urn)
    if len(chain) >= 3 and chain[-2] == WORKLOAD_IDENTITY and chain[-3] in WORKLOAD_TYPES \
            and res.name.endswith(WORKER_ASSOCIATION_SUFFIX):
        return Workload(chain[-3], res.name.removesuffix(WORKER_ASSOCIATION_SUFFIX), res.urn)
    return None


def merge_fix(first: Res, second: Res, by_urn: dict[str, Res]) -> str:
    """How to keep one association, for the stack kind: attach the other role's permissions to the kept role, named by
    the attribute that holds it (a workload's worker role is `<workload>.identity.role`)."""
    for keep, drop in ((first, second), (second, first)):
        wl = worker_workload(keep, by_urn)
        if wl is None:
            continue
        kind, attach = wl.type.rsplit(":", 1)[-1], f"attach the permissions of {drop.name}'s role to the worker's role"
        return fix_for(
            wl.urn,
            platform=f"keep the association of the platform's workload {wl.name!r} ({keep.name}) and {attach} in "
                     f"the program: aws.iam.RolePolicy(role=<GpuBurstPlatform>.workloads[{wl.name!r}].identity.role"
                     f".name, policy=...), then remove {drop.name}; or give the second workload its own "
                     "ServiceAccount",
            component=f"keep the association of {kind} {wl.name!r} ({keep.name}) and {attach}: "
                      f"aws.iam.RolePolicy(role=<{kind} {wl.name!r}>.identity.role.name, policy=...), then remove "
                      f"{drop.name} (and the WorkloadIdentity or role that declares it); or give the second "
                      "workload its own ServiceAccount")
    return fix_for(
        second.urn,
        platform=f"keep {first.name} and attach the permissions of {second.name}'s role to {first.name}'s role "
                 f"(aws.iam.RolePolicy(role=<that role>.name, policy=...)), then remove {second.name}; or give the "
                 "second workload its own ServiceAccount",
        component=f"keep {first.name} and attach the permissions of {second.name}'s role to {first.name}'s role "
                  "(aws.iam.RolePolicy(role=<that role>.name, policy=...); a WorkloadIdentity's role is its .role), "
                  f"then remove {second.name}; or give the second workload its own ServiceAccount",
        manifest=f"keep one and attach the other's permissions to its role (roleArn {fmt(first.props.get('roleArn'))}) "
                 "as an inline or managed policy, then remove the other; or give the second workload its own "
                 "ServiceAccount")


def unique_findings(resources: list[Res]) -> list[Finding]:
    """(urn, message) for every Pod Identity association after the first for the same cluster, namespace and
    ServiceAccount (an unknown cluster name with the same namespace and ServiceAccount is said to be unknown)."""
    seen: dict[tuple[object, object], list[tuple[Res, object]]] = {}
    by_urn = {r.urn: r for r in resources}
    out: list[Finding] = []
    for r, ns, sa in associations(resources):
        if UNKNOWN in (ns, sa) or not (isinstance(ns, str) and isinstance(sa, str)):
            continue  # pod-identity-wiring says an unknown namespace or ServiceAccount
        cluster = r.props.get("clusterName")
        for first, first_cluster in seen.get((ns, sa), []):
            if UNKNOWN in (cluster, first_cluster):
                out.append((r.urn, unknown_message(f"PodIdentityAssociation {r.name} clusterName",
                                                   f"whether it is a second association for {ns}/{sa} besides "
                                                   f"{first.name}")))
            elif cluster == first_cluster:
                out.append((r.urn, f"PodIdentityAssociation {r.name} gives ServiceAccount {ns}/{sa} of cluster "
                                   f"{fmt(cluster)} a role (roleArn {fmt(r.props.get('roleArn'))}), and "
                                   f"PodIdentityAssociation {first.name} already does (roleArn "
                                   f"{fmt(first.props.get('roleArn'))}): EKS keeps one association per cluster, "
                                   "namespace and ServiceAccount and refuses the second at apply time "
                                   "(ResourceInUseException: Association already exists); "
                                   f"{merge_fix(first, r, by_urn)}"))
                break
        seen.setdefault((ns, sa), []).append((r, cluster))
    return out


POLICY = plan_policy(
    NAME, "At most one EKS Pod Identity association per cluster, namespace and ServiceAccount (EKS refuses a second "
          "at apply time).", unique_findings)

POLICIES = [POLICY]
