"""Stack rules on references: Pod Identity associations name ServiceAccounts the plan creates and the intended pods run
as, and KEDA authenticationRefs and scaler roles resolve to what the plan creates.

In a partial plan (no GpuBurstPlatform) an end that is not in the plan is another stack's: the rule yields an
`Outside` for it (reported once by `outside-this-stack`) instead of a violation, unless the plan owns the place the
end should be (a namespace whose ServiceAccounts, associations or TriggerAuthentications it creates), where a missing
name is a mismatch between two things of this plan and stays a violation.
"""
from __future__ import annotations

from typing import Any

from .declare import scoped_policy
from .facts import WHOLE, Scope
from .identity import (
    IAM_ROLE,
    POD_IDENTITY_ASSOCIATION,
    SERVICE_ACCOUNT,
    association_namespaces,
    associations,
    auths,
    find_role,
    intended_users,
    keda_in_plan,
    keda_operator_identity,
    operator_role,
    parse_role_arn,
    role_dependency,
    roles_named,
    service_account_namespaces,
    service_accounts,
    trusted_principals,
    workload_pods,
)
from .outside import Finding, Outside
from .plan import Res, describe_res, meta_namespace
from .resources import (
    CLUSTER_TRIGGER_AUTHENTICATION,
    SCALED_JOB,
    SCALED_OBJECT,
    TRIGGER_AUTHENTICATION,
    dig,
    fmt,
    is_kind,
    join_path,
    triggers,
)
from .unknowns import UNKNOWN, unknown_message

POD_IDENTITY_NAME = "pod-identity-wiring"
KEDA_AUTH_NAME = "keda-auth-wiring"

__all__ = ["IAM_ROLE", "KEDA_AUTH_NAME", "KEDA_AUTH_POLICY", "POD_IDENTITY_ASSOCIATION", "POD_IDENTITY_NAME",
           "POD_IDENTITY_POLICY", "POLICIES", "SERVICE_ACCOUNT", "keda_auth_findings", "pod_identity_findings"]


def _existing_keda_account(scope: Scope) -> tuple[Any, Any] | None:
    """(namespace, ServiceAccount) of a KEDA operator another stack runs, when the facts name it."""
    ns, sa = scope.value("kedaNamespace"), scope.value("kedaOperatorServiceAccount")
    return (ns, sa) if isinstance(ns, str) and isinstance(sa, str) else None


def _cluster_name_finding(r: Res, scope: Scope) -> Finding | None:
    cluster, given = scope.value("clusterName"), r.props.get("clusterName")
    if not (isinstance(cluster, str) and isinstance(given, str)) or given == cluster:
        return None
    return (r.urn, f"PodIdentityAssociation {r.name} clusterName = {fmt(given)} but the cluster this stack attaches to "
                   f"is {fmt(cluster)} ({scope.source('clusterName')}): the association is made on another cluster and "
                   "no pod here gets the role; name the cluster")


def pod_identity_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every association whose ServiceAccount the plan does not create or no pod runs as, every
    pod running as a ServiceAccount the plan does not create, and every intended pod without an association; in a
    partial plan an `Outside` instead where that end belongs to a namespace the plan does not manage."""
    sas = service_accounts(resources)
    pods = workload_pods(resources)
    out: list[Finding | Outside] = []
    assoc = associations(resources)
    owned_sa_ns = service_account_namespaces(resources)
    pod_ns = {ns for p, ns, _sa, _path in pods if not p.type.startswith("kubernetes:helm.sh/")}
    assoc_ns = association_namespaces(resources)
    existing_keda = None if scope.whole or keda_in_plan(resources) else _existing_keda_account(scope)
    for r, ns, sa in assoc:
        for field, value in (("namespace", ns), ("serviceAccount", sa)):
            if value is UNKNOWN:
                out.append((r.urn, unknown_message(field, "which ServiceAccount gets the role")))
        if UNKNOWN in (ns, sa):
            continue
        where = f"{ns}/{sa}"
        wrong_cluster = None if scope.whole else _cluster_name_finding(r, scope)
        if wrong_cluster:
            out.append(wrong_cluster)
        if (ns, sa) not in sas:
            if (ns, sa) == existing_keda:
                continue  # the operator of the KEDA another stack runs (the facts say it runs as this one)
            if scope.whole or ns in owned_sa_ns:
                same_ns = sorted(n for (n_ns, n) in sas if n_ns == ns)
                have = f"the plan creates {', '.join(same_ns)} there" if same_ns else "the plan creates none there"
                out.append((r.urn, f"PodIdentityAssociation {r.name} names ServiceAccount {where}, which no resource "
                                   f"creates ({have}): no pod gets the role; name the ServiceAccount the workload "
                                   "runs as"))
            else:
                out.append(Outside(r.urn, f"PodIdentityAssociation {r.name} names ServiceAccount {where}, which is not "
                                          "in this plan: could not check that it exists and that a pod runs as it "
                                          f"(this plan creates no ServiceAccount in namespace {ns})"))
            continue
        users = [p for p, p_ns, p_sa, _path in pods if p_ns == ns and p_sa == sa]
        if users:
            continue
        if scope.whole or ns in pod_ns:
            out.append((r.urn, f"PodIdentityAssociation {r.name} gives ServiceAccount {where} "
                               f"({describe_res(sas[(ns, sa)])}) a role, but no pod in the plan runs as it"))
        else:
            out.append(Outside(r.urn, f"PodIdentityAssociation {r.name} gives ServiceAccount {where} a role, but no "
                                      "pod in this plan runs as it: could not check that another stack's pods do"))
    associated = {(ns, sa) for _r, ns, sa in assoc}
    for p, ns, sa, path in pods:
        if sa is UNKNOWN:
            out.append((p.urn, unknown_message(path, "which ServiceAccount the pod runs as")))
            continue
        if p.type.startswith("kubernetes:helm.sh/") or (ns, sa) in sas or sa == "default":
            continue
        if scope.whole or ns in owned_sa_ns:
            out.append((p.urn, f"{describe_res(p)} runs as ServiceAccount {ns}/{sa} ({path}), which no resource "
                               "creates: the pod is refused at admission; create it or use the ServiceAccount the "
                               "plan creates"))
        else:
            out.append(Outside(p.urn, f"{describe_res(p)} runs as ServiceAccount {ns}/{sa} ({path}), which is not "
                                      "in this plan: could not check that another stack creates it"))
    for p, ns, sa, path in intended_users(resources):
        if sa is UNKNOWN or (ns, sa) in associated:
            continue
        if scope.whole or ns in assoc_ns:
            out.append((p.urn, f"{describe_res(p)} runs as ServiceAccount {ns}/{sa} ({path}) but no "
                               "PodIdentityAssociation names it: the pod gets no AWS credentials; associate its role "
                               "with that ServiceAccount (or run the pod as the associated one)"))
        else:
            out.append(Outside(p.urn, f"{describe_res(p)} runs as ServiceAccount {ns}/{sa} ({path}), which no "
                                      "PodIdentityAssociation in this plan names: could not check that another stack "
                                      "gives it AWS credentials"))
    return out


# --------------------------------------------------------------------------------------------------------------------
# keda-auth-wiring
# --------------------------------------------------------------------------------------------------------------------

def _auth_ref_findings(resources: list[Res], index: dict, scope: Scope) -> list[Finding | Outside]:
    """authenticationRefs that resolve to no (Cluster)TriggerAuthentication of the plan."""
    out: list[Finding | Outside] = []
    for r in resources:
        if not (is_kind(r.type, SCALED_JOB) or is_kind(r.type, SCALED_OBJECT)):
            continue
        ns = meta_namespace(r.props)
        found, unknown = triggers(r.props)
        out += [(r.urn, unknown_message(p, "which TriggerAuthentication the trigger uses")) for p in unknown]
        for path, trig in found:
            ref = trig.get("authenticationRef")
            if not isinstance(ref, dict):
                continue
            name, kind = ref.get("name"), ref.get("kind") or TRIGGER_AUTHENTICATION[1]
            if UNKNOWN in (name, kind):
                out.append((r.urn, unknown_message(join_path(path, "authenticationRef"),
                                                   "which TriggerAuthentication the trigger uses")))
                continue
            cluster_scoped = kind == CLUSTER_TRIGGER_AUTHENTICATION[1]
            key = (kind, None if cluster_scoped else ns, name)
            if key in index:
                continue
            elsewhere = sorted(f"{k[0]} {k[1] + '/' if k[1] else ''}{k[2]}" for k in index if k[2] == name)
            # The plan declares TriggerAuthentications there: a name it does not declare is a mismatch.
            owned = any(k[0] == kind and (cluster_scoped or k[1] == ns) for k in index)
            what = f"{describe_res(r)} {join_path(path, 'authenticationRef')} names {kind} " \
                   f"{(ns + '/') if key[1] else ''}{name}"
            if scope.whole or elsewhere or owned:
                hint = f" (the plan has {', '.join(elsewhere)}: wrong namespace or kind)" if elsewhere else ""
                out.append((r.urn, f"{what}, which the plan does not create{hint}: KEDA cannot read the queue and "
                                   "never scales; point it at the TriggerAuthentication in the ScaledJob's "
                                   "namespace"))
            else:
                out.append(Outside(r.urn, f"{what}, which is not in this plan: could not check that it exists or "
                                          "which role it makes KEDA assume"))
    return out


def _scaler_path_finding(ta: Res, who: str, role_path: str, what: str, scope: Scope) -> Finding | None:
    """With the existing KEDA's scaler role path known, a scaler role elsewhere is one its operator may not assume."""
    path = scope.value("kedaScalerRolePath")
    if not isinstance(path, str) or role_path == path:
        return None
    source = scope.source("kedaScalerRolePath")
    return (ta.urn, f"{who} {what} is not under the scaler role path {fmt(path)} ({source}): "
                    "the KEDA operator may assume roles only there, so AssumeRole is denied and the ScaledJob never "
                    "scales; create the scaler role under that path")


def _trust_against_fact(ta: Res, who: str, role: Res, scope: Scope, operator_sa: Any) -> Finding | Outside | None:
    """The scaler role's trust against the operator role of a KEDA another stack runs (an `Outside` without it)."""
    arn = scope.value("kedaOperatorRoleArn")
    if not isinstance(arn, str):
        what = (f"the KEDA operator's ServiceAccount {operator_sa[0]}/{operator_sa[1]} has no PodIdentityAssociation "
                "in this plan" if operator_sa else "the KEDA operator is not in this plan")
        return Outside(ta.urn, f"{who} makes KEDA assume role {role.name}, but {what}: could not check that the role "
                               "trusts the operator's role", ("kedaOperatorRoleArn",))
    principals, unknown_at = trusted_principals(role)
    if principals is None:
        return (ta.urn, unknown_message(f"{role.name}.{unknown_at}",
                                        f"whether role {role.name} trusts the KEDA operator"))
    if arn in principals or "*" in principals:
        return None
    return (ta.urn, f"{who} makes KEDA assume role {role.name}, whose trust policy does not trust the KEDA operator's "
                    f"role {fmt(arn)} ({scope.source('kedaOperatorRoleArn')}; it trusts "
                    f"{fmt(principals) if principals else 'no AWS principal'}): AssumeRole is denied; add the operator "
                    "role as Principal.AWS")


def keda_auth_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every authenticationRef that resolves to no (Cluster)TriggerAuthentication in its
    namespace, and every podIdentity.roleArn naming no role in the plan or a role that does not trust the KEDA
    operator's role; in a partial plan an `Outside` for a TriggerAuthentication, a role or an operator that is
    another stack's (the facts of an ExistingKeda, or policy config, let it check the trust)."""
    index = auths(resources)
    out = _auth_ref_findings(resources, index, scope)
    operator_sa, operator_assoc = keda_operator_identity(resources, scope)
    outside_keda = not scope.whole and not keda_in_plan(resources)
    for (_kind, _ns, _name), ta in index.items():
        role_arn = dig(ta.props, "spec", "podIdentity", "roleArn")
        if role_arn.missing:
            continue
        who = describe_res(ta)
        role = None
        if role_arn.unknown:
            role = role_dependency(resources, ta)
            if role is None:
                out.append((ta.urn, unknown_message(role_arn.path, f"which role {who} makes KEDA assume (and it "
                                                                   "depends on no single IAM role)")))
                continue
        else:
            role = find_role(resources, str(role_arn.value))
        if role is None:
            parsed = parse_role_arn(str(role_arn.value))
            near = roles_named(resources, str(role_arn.value)) or role_dependency(resources, ta)
            if scope.whole or parsed is None or near:
                out.append((ta.urn, f"{who} {role_arn.path} = {fmt(role_arn.value)} names no IAM role the plan "
                                    "creates: KEDA's AssumeRole fails and the ScaledJob never scales; use the scaler "
                                    "role's ARN"))
                continue
            wrong_path = _scaler_path_finding(ta, who, parsed[1], f"{role_arn.path} = {fmt(role_arn.value)}", scope) \
                if outside_keda else None
            out.append(wrong_path or Outside(ta.urn, f"{who} {role_arn.path} = {fmt(role_arn.value)} is a role from "
                                                     "another stack: could not check that it trusts the KEDA operator "
                                                     "or may read the queue"))
            continue
        if outside_keda:
            role_path = role.props.get("path") if isinstance(role.props.get("path"), str) else "/"
            wrong_path = _scaler_path_finding(ta, who, role_path, f"role {role.name} (path {fmt(role_path)})", scope)
            if wrong_path:
                out.append(wrong_path)
                continue
        if operator_assoc is None:
            if scope.whole or (operator_sa is not None and operator_sa[0] in association_namespaces(resources)):
                what = (f"the KEDA operator's ServiceAccount {operator_sa[0]}/{operator_sa[1]} has no "
                        "PodIdentityAssociation" if operator_sa else "the plan has no KEDA operator")
                out.append((ta.urn, f"{who} makes KEDA assume role {role.name}, but {what}, so nothing can assume "
                                    "it"))
            else:
                found = _trust_against_fact(ta, who, role, scope, operator_sa)
                if found is not None:
                    out.append(found)
            continue
        op_role, operator_arn = operator_role(resources, operator_assoc)
        principals, unknown_at = trusted_principals(role)
        if principals is not None and isinstance(operator_arn, str):
            if operator_arn not in principals and "*" not in principals:
                out.append((ta.urn, f"{who} makes KEDA assume role {role.name}, whose trust policy does not trust "
                                    f"the KEDA operator's role {fmt(operator_arn)} (PodIdentityAssociation "
                                    f"{operator_assoc.name}; it trusts "
                                    f"{fmt(principals) if principals else 'no AWS principal'}): AssumeRole is denied; "
                                    "add the operator role as Principal.AWS"))
            continue
        # A value is unknown during preview: judge by where it comes from (the trust policy is computed from the
        # operator role's ARN exactly when the scaler role depends on the operator role).
        if op_role is not None and op_role.urn in role.dependencies:
            continue
        if principals is None and op_role is not None:
            out.append((ta.urn, f"{who} makes KEDA assume role {role.name}, whose trust policy ({unknown_at}, unknown "
                                f"during preview) is not computed from the KEDA operator's role {op_role.name} "
                                f"(PodIdentityAssociation {operator_assoc.name}): role {role.name} does not depend on "
                                "it, so the operator is not its trusted principal; trust the operator role's ARN"))
        elif principals is None:
            out.append((ta.urn, unknown_message(f"{role.name}.{unknown_at}",
                                                f"whether role {role.name} trusts the KEDA operator")))
        else:
            out.append((ta.urn, unknown_message(f"{operator_assoc.name}.roleArn",
                                                f"whether role {role.name} trusts the KEDA operator (the association "
                                                "depends on no single IAM role)")))
    return out


POD_IDENTITY_POLICY = scoped_policy(
    POD_IDENTITY_NAME, "Every EKS Pod Identity association names a ServiceAccount the plan creates and a pod runs as; "
                       "the KEDA operator, Karpenter controller and GPU workers run as an associated ServiceAccount.",
    pod_identity_findings, ("kedaNamespace", "kedaOperatorServiceAccount"))
KEDA_AUTH_POLICY = scoped_policy(
    KEDA_AUTH_NAME, "Every KEDA authenticationRef resolves to a (Cluster)TriggerAuthentication in the plan, and every "
                    "podIdentity.roleArn names a role in the plan that trusts the KEDA operator's role.",
    keda_auth_findings, ("kedaNamespace", "kedaOperatorServiceAccount", "kedaOperatorRoleArn"))

POLICIES = [POD_IDENTITY_POLICY, KEDA_AUTH_POLICY]
