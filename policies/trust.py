"""Stack rules `pod-identity-trust-conditioned` (mandatory) and `pod-identity-trust-session-tags` (advisory): an IAM
role that EKS Pod Identity may assume is bound to this account, this cluster, and the pods meant to use it.

The threat: the worker roles read clinical slides. A trust policy that admits `pods.eks.amazonaws.com` with no
condition lets any EKS cluster whose Pod Identity association names the role (another cluster of the account, a
test cluster, a cluster of another account acting as a confused deputy) hand its pods the role's credentials, and
with them the slides. `pod-identity-trust-conditioned` requires every statement trusting that service with
sts:AssumeRole to condition it on `aws:SourceAccount` (StringEquals) and `aws:SourceArn` (ArnEquals, ArnLike or
StringEquals: the cluster's ARN), operators in any case IAM accepts, not `IfExists` nor `ForAllValues` (both hold
when the key is absent), no value that is only a wildcard; and, inside the plan, that these conditions admit the
Pod Identity associations that name the role (a condition refusing its own association is an outage).
`pod-identity-trust-session-tags` advises conditioning on the session tags Pod Identity sets
(`aws:RequestTag/kubernetes-namespace`, `aws:RequestTag/kubernetes-service-account`), so that within the cluster
only the intended ServiceAccount can get the role, whatever association someone adds.

A trust policy unknown during preview is judged only for roles a Pod Identity association of the plan grants (it
is then a violation naming the field); the rest cannot be told to trust Pod Identity at all.
"""
from __future__ import annotations

import fnmatch
from typing import Any

from pulumi_policy import EnforcementLevel

from .declare import plan_policy, scoped_policy
from .documents import Condition, action_matches, conditions, describe_statement, effect, principals, statements
from .facts import WHOLE, Scope
from .identity import IAM_ROLE, associations, operator_role
from .outside import Finding, Outside
from .plan import Res
from .resources import fmt
from .unknowns import unknown_message

CONDITIONED_NAME = "pod-identity-trust-conditioned"
SESSION_TAGS_NAME = "pod-identity-trust-session-tags"
POD_IDENTITY_SERVICE = "pods.eks.amazonaws.com"
SOURCE_ACCOUNT = "aws:SourceAccount"
SOURCE_ARN = "aws:SourceArn"
NAMESPACE_TAG = "aws:RequestTag/kubernetes-namespace"
SERVICE_ACCOUNT_TAG = "aws:RequestTag/kubernetes-service-account"
OPERATORS: dict[str, tuple[str, ...]] = {
    SOURCE_ACCOUNT: ("stringequals",), SOURCE_ARN: ("arnequals", "arnlike", "stringequals", "stringlike"),
    NAMESPACE_TAG: ("stringequals", "stringlike"), SERVICE_ACCOUNT_TAG: ("stringequals", "stringlike")}
"""The condition operators (lower case, no qualifier) that bind each key to the values given."""
FIX = {SOURCE_ACCOUNT: 'add "StringEquals": {"aws:SourceAccount": "<the cluster\'s account>"}',
       SOURCE_ARN: 'add "ArnEquals": {"aws:SourceArn": "arn:aws:eks:<region>:<account>:cluster/<name>"}'}


def _binding(conds: list[Condition], key: str) -> tuple[Condition | None, str | None]:
    """(the condition that binds `key`, else why the nearest one does not) in one statement."""
    near = None
    for c in conds:
        if c.key.lower() != key.lower():
            continue
        if c.base not in OPERATORS[key]:
            near = near or f"{c.operator} does not bind it"
        elif c.if_exists or c.qualifier == "forallvalues":
            near = near or f"{c.operator} holds when the key is absent"
        elif not c.values or any(isinstance(v, str) and _only_wildcard(key, v) for v in c.values):
            near = near or f"{c.operator} {fmt(c.values)} admits any value"
        else:
            return c, None
    return None, near


def _only_wildcard(key: str, value: str) -> bool:
    if key == SOURCE_ARN:
        parts = value.split(":")
        return value.strip() in ("*", "") or (len(parts) > 4 and parts[4] in ("*", ""))
    return "*" in value or "?" in value or not value.strip()


def pod_identity_statements(role: Res) -> tuple[list[tuple[str, dict[str, Any]]], str | None, str | None]:
    """(statements that let pods.eks.amazonaws.com sts:AssumeRole, the path of an unknown that may hide one, a
    parse error) of a role's trust policy."""
    found = statements(role.props.get("assumeRolePolicy"), "assumeRolePolicy")
    out, unknown = [], found.unknown
    for path, st in found.items:
        if effect(st) != "Allow":
            continue
        services = principals(st, "Service")
        assumes = action_matches(st, "sts:AssumeRole")
        if services is None or assumes is None:
            unknown = unknown or f"{path}.{'Principal' if services is None else 'Action'}"
            continue
        if assumes and any(isinstance(s, str) and s.lower() == POD_IDENTITY_SERVICE for s in services):
            out.append((path, st))
    return out, unknown, found.error


def _granted(resources: list[Res], role: Res) -> list[Res]:
    """The Pod Identity associations of the plan that grant this role (by ARN, or by dependency when unknown)."""
    return [a for a, _ns, _sa in associations(resources) if operator_role(resources, a)[0] is role]


def _admits(cond: Condition, value: Any, cluster_arn: bool = False) -> bool | None:
    """Whether a known condition admits an association's value (None when either is unknown, or when a value is not
    an EKS cluster or Pod Identity association ARN where the cluster is looked for)."""
    if not isinstance(value, str) or any(not isinstance(v, str) for v in cond.values):
        return None
    like = cond.base.endswith("like")
    wanted = cond.values
    if cluster_arn:
        wanted = [_arn_cluster(v) for v in cond.values]
        if None in wanted:
            return None
    return any(fnmatch.fnmatchcase(value, v) if like else v == value for v in wanted)


def _arn_cluster(arn: str) -> str | None:
    """The cluster an EKS ARN names: `...:cluster/NAME` or `...:podidentityassociation/NAME/ID`."""
    for marker in (":cluster/", ":podidentityassociation/"):
        if marker in arn:
            return arn.split(marker, 1)[1].split("/", 1)[0]
    return None


def _refusals(resources: list[Res], role: Res, path: str, conds: list[Condition]) -> list[Finding]:
    out: list[Finding] = []
    for assoc in _granted(resources, role):
        for key, prop in ((SOURCE_ARN, "clusterName"), (NAMESPACE_TAG, "namespace"),
                          (SERVICE_ACCOUNT_TAG, "serviceAccount")):
            cond, _why = _binding(conds, key)
            value = assoc.props.get(prop)
            if cond is None or _admits(cond, value, key == SOURCE_ARN) is not False:
                continue
            out.append((role.urn, f"Role {role.name} {path} Condition {cond.operator} {cond.key} = "
                                  f"{fmt(cond.values)} refuses PodIdentityAssociation {assoc.name} ({prop} = "
                                  f"{fmt(value)}): its pods get no credentials; make the condition name it"))
    return out


def conditioned_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) per statement trusting pods.eks.amazonaws.com without a binding condition on aws:SourceAccount
    or aws:SourceArn (one per missing key), and per association of the plan its conditions refuse."""
    out: list[Finding | Outside] = []
    for role in (r for r in resources if r.type == IAM_ROLE):
        found, unknown, error = pod_identity_statements(role)
        granted = _granted(resources, role)
        if error and granted:
            out.append((role.urn, f"Role {role.name} {error}: IAM refuses it and no pod gets the role"))
        if unknown and granted and not found:
            names = ", ".join(a.name for a in granted)
            out.append((role.urn, unknown_message(f"Role {role.name} {unknown}",
                                                  f"whether its Pod Identity trust (PodIdentityAssociation {names}) "
                                                  "is conditioned on aws:SourceAccount and aws:SourceArn")))
        for path, st in found:
            conds, cond_unknown = conditions(st)
            where = f"Role {role.name} {describe_statement(path, st)}"
            for key in (SOURCE_ACCOUNT, SOURCE_ARN):
                cond, why = _binding(conds, key)
                if cond is not None:
                    continue
                if cond_unknown:
                    out.append((role.urn, unknown_message(f"Role {role.name} {path}.{cond_unknown}",
                                                          f"whether the Pod Identity trust is conditioned on {key}")))
                    continue
                out.append((role.urn, f"{where} trusts Service {POD_IDENTITY_SERVICE!r} with no condition on {key}"
                                      f"{' (' + why + ')' if why else ''}: any EKS cluster whose Pod Identity "
                                      "association names the role (another cluster, another account: a confused "
                                      f"deputy) gets its credentials and the slides they read; {FIX[key]}"))
            out += _refusals(resources, role, path, conds)
    return out


def session_tag_findings(resources: list[Res]) -> list[tuple[str | None, str]]:
    """(urn, message) per statement trusting pods.eks.amazonaws.com without the session-tag conditions."""
    out: list[tuple[str | None, str]] = []
    for role in (r for r in resources if r.type == IAM_ROLE):
        found, _unknown, _error = pod_identity_statements(role)
        for path, st in found:
            conds, cond_unknown = conditions(st)
            if cond_unknown:
                continue
            missing = [k for k in (NAMESPACE_TAG, SERVICE_ACCOUNT_TAG) if _binding(conds, k)[0] is None]
            if missing:
                out.append((role.urn, f"Role {role.name} {describe_statement(path, st)} trusts "
                                      f"Service {POD_IDENTITY_SERVICE!r} with no condition on {', '.join(missing)}: "
                                      "any pod of the cluster that an association names gets the role; add "
                                      f"StringEquals on {' and '.join(missing)} (the namespace and ServiceAccount "
                                      "the role is for)"))
    return out


CONDITIONED_POLICY = scoped_policy(
    CONDITIONED_NAME, "Every IAM role trusting pods.eks.amazonaws.com conditions it on aws:SourceAccount and "
                      "aws:SourceArn (StringEquals / ArnEquals / ArnLike), and the conditions admit the Pod Identity "
                      "associations of the plan that name the role.",
    conditioned_findings)
SESSION_TAGS_POLICY = plan_policy(
    SESSION_TAGS_NAME, "Every IAM role trusting pods.eks.amazonaws.com conditions it on the session tags "
                       "aws:RequestTag/kubernetes-namespace and aws:RequestTag/kubernetes-service-account.",
    session_tag_findings, level=EnforcementLevel.ADVISORY)

POLICIES = [CONDITIONED_POLICY, SESSION_TAGS_POLICY]
