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

from .declare import plan_policy
from .identity import associations
from .outside import Finding
from .plan import Res
from .resources import fmt
from .unknowns import UNKNOWN, unknown_message

NAME = "pod-identity-unique"


def unique_findings(resources: list[Res]) -> list[Finding]:
    """(urn, message) for every Pod Identity association after the first for the same cluster, namespace and
    ServiceAccount (an unknown cluster name with the same namespace and ServiceAccount is said to be unknown)."""
    seen: dict[tuple[object, object], list[tuple[Res, object]]] = {}
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
                                   "(ResourceInUseException: Association already exists); keep one (merge the "
                                   "policies into its role) or give the second workload its own ServiceAccount"))
                break
        seen.setdefault((ns, sa), []).append((r, cluster))
    return out


POLICY = plan_policy(
    NAME, "At most one EKS Pod Identity association per cluster, namespace and ServiceAccount (EKS refuses a second "
          "at apply time).", unique_findings)

POLICIES = [POLICY]
