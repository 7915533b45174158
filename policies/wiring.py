"""Stack rules on references: Pod Identity associations name ServiceAccounts the plan creates and the intended pods run
as, and KEDA authenticationRefs and scaler roles resolve to what the plan creates."""
from __future__ import annotations

import json
from typing import Any

from ._components import catalogue
from .declare import plan_policy
from .plan import Res, chart_of, charts, describe_res, meta_name, meta_namespace, rendered
from .resources import (
    CLUSTER_TRIGGER_AUTHENTICATION,
    POD_TEMPLATE_PATHS,
    SCALED_JOB,
    SCALED_OBJECT,
    TRIGGER_AUTHENTICATION,
    dig,
    fmt,
    is_kind,
    join_path,
    k8s_kind,
    triggers,
)
from .schedulability import gpu_pods
from .unknowns import UNKNOWN, unknown_message

POD_IDENTITY_NAME = "pod-identity-wiring"
KEDA_AUTH_NAME = "keda-auth-wiring"

POD_IDENTITY_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
IAM_ROLE = "aws:iam/role:Role"
SERVICE_ACCOUNT = ("core", "ServiceAccount")

CHART_SERVICE_ACCOUNTS: dict[str, tuple[tuple[str, ...], str]] = {
    # chart -> (values path of the service account the chart's controller runs as, the chart's default name); used
    # only for a chart whose rendered objects are not in the plan.
    "karpenter": (("serviceAccount",), "karpenter"),
    "keda": (("serviceAccount", "operator"), "keda-operator"),
}
"""Where an unrendered chart's values name the ServiceAccount it creates and runs its controller as."""
KEDA_OPERATOR = "keda-operator"
"""The KEDA operator Deployment's name in the chart."""


# --------------------------------------------------------------------------------------------------------------------
# Service accounts and the pods that run as them.
# --------------------------------------------------------------------------------------------------------------------

def _chart_service_account(chart: Res, chart_name: str) -> tuple[str | None, Any, bool]:
    """(namespace, name, created) of the ServiceAccount an unrendered chart's values declare."""
    path, default = CHART_SERVICE_ACCOUNTS[chart_name]
    values = dig(chart.props, "values").value
    sa = dig(values, *path).value if isinstance(values, dict) else None
    sa = sa if isinstance(sa, dict) else {}
    name = sa.get("name") or default
    created = sa.get("create", True) is not False
    ns = dig(chart.props, "namespace").value
    return (ns if isinstance(ns, str) else None), name, created


def service_accounts(resources: list[Res]) -> dict[tuple[str | None, str], Res]:
    """(namespace, name) -> the resource that creates that ServiceAccount: a ServiceAccount (stack-made or rendered
    from a chart), or a chart whose rendered objects are missing from the plan and whose values create it."""
    out: dict[tuple[str | None, str], Res] = {}
    for r in resources:
        if k8s_kind(r.type) == SERVICE_ACCOUNT and isinstance(meta_name(r.props), str):
            ns = meta_namespace(r.props)
            out[(ns if isinstance(ns, str) else None, meta_name(r.props))] = r
    for chart_name in CHART_SERVICE_ACCOUNTS:
        for chart in charts(resources, chart_name):
            if rendered(resources, chart):
                continue
            ns, name, created = _chart_service_account(chart, chart_name)
            if created and isinstance(name, str):
                out.setdefault((ns, name), chart)
    return out


def pod_service_account(pod: Any) -> Any:
    """The ServiceAccount a plain pod spec runs as (`default` when unset; UNKNOWN when unknown)."""
    sa = pod.get("serviceAccountName") if isinstance(pod, dict) else None
    if sa is UNKNOWN:
        return UNKNOWN
    if not sa:
        sa = pod.get("serviceAccount") if isinstance(pod, dict) else None
    return sa or "default"


def workload_pods(resources: list[Res]) -> list[tuple[Res, str | None, Any, str]]:
    """(resource, namespace, ServiceAccount, path of the field) for every pod-bearing resource, and for each
    unrendered karpenter/keda chart its controller."""
    out = []
    for r in resources:
        kind = k8s_kind(r.type)
        if kind in POD_TEMPLATE_PATHS:
            pod = dig(r.props, *POD_TEMPLATE_PATHS[kind])
            if isinstance(pod.value, dict):
                ns = meta_namespace(r.props)
                if ns is None:
                    ns = _chart_namespace(r, resources)
                out.append((r, ns if isinstance(ns, str) else None, pod_service_account(pod.value),
                            join_path(pod.path, "serviceAccountName")))
    for chart_name in CHART_SERVICE_ACCOUNTS:
        for chart in charts(resources, chart_name):
            if not rendered(resources, chart):
                ns, name, _created = _chart_service_account(chart, chart_name)
                out.append((chart, ns, name, "values." + ".".join(CHART_SERVICE_ACCOUNTS[chart_name][0]) + ".name"))
    return out


def _chart_namespace(r: Res, resources: list[Res]) -> str | None:
    """A rendered object without metadata.namespace lands in its chart's namespace."""
    by_urn = {x.urn: x for x in resources}
    parent = by_urn.get(r.parent) if r.parent else None
    while parent is not None:
        ns = dig(parent.props, "namespace").value
        if parent.type.startswith("kubernetes:helm.sh/") and isinstance(ns, str):
            return ns
        parent = by_urn.get(parent.parent) if parent.parent else None
    return None


def is_placeholder(pod: Any) -> bool:
    """Whether a pod spec only runs the catalogue's pause image (the warm GPU floor's capacity placeholder)."""
    containers = pod.get("containers") if isinstance(pod, dict) else None
    return bool(containers) and all(isinstance(c, dict) and c.get("image") == catalogue.PAUSE_IMAGE
                                    for c in containers)


def intended_users(resources: list[Res]) -> list[tuple[Res, str | None, Any, str]]:
    """The pods that must run with a Pod Identity role: the KEDA operator, the Karpenter controller, every
    ScaledJob and every GPU-requesting Deployment (the workers)."""
    by_urn = {r.urn: r for r in resources}
    # A warm-floor placeholder (every container the pinned pause image) only holds a GPU node: it calls no AWS API.
    gpu = {r.urn for r, pod, _path in gpu_pods(resources) if not is_placeholder(pod)}
    out = []
    for r, ns, sa, path in workload_pods(resources):
        kind = k8s_kind(r.type)
        chart = chart_of(r, by_urn) if kind else None
        if r.type.startswith("kubernetes:helm.sh/"):
            out.append((r, ns, sa, path))
        elif chart == "karpenter" and kind == ("apps", "Deployment"):
            out.append((r, ns, sa, path))
        elif chart == "keda" and kind == ("apps", "Deployment") and meta_name(r.props) == KEDA_OPERATOR:
            out.append((r, ns, sa, path))
        elif kind == SCALED_JOB or (kind == ("apps", "Deployment") and r.urn in gpu):
            out.append((r, ns, sa, path))
    return out


def associations(resources: list[Res]) -> list[tuple[Res, Any, Any]]:
    """(association, namespace, serviceAccount) of every EKS Pod Identity association."""
    return [(r, r.props.get("namespace"), r.props.get("serviceAccount"))
            for r in resources if r.type == POD_IDENTITY_ASSOCIATION]


def pod_identity_findings(resources: list[Res]) -> list[tuple[str, str]]:
    """(urn, message) for every association whose ServiceAccount the plan does not create or no pod runs as, every
    pod running as a ServiceAccount the plan does not create, and every intended pod without an association."""
    sas = service_accounts(resources)
    pods = workload_pods(resources)
    out: list[tuple[str, str]] = []
    assoc = associations(resources)
    for r, ns, sa in assoc:
        for field, value in (("namespace", ns), ("serviceAccount", sa)):
            if value is UNKNOWN:
                out.append((r.urn, unknown_message(field, "which ServiceAccount gets the role")))
        if UNKNOWN in (ns, sa):
            continue
        where = f"{ns}/{sa}"
        if (ns, sa) not in sas:
            same_ns = sorted(n for (n_ns, n) in sas if n_ns == ns)
            have = f"the plan creates {', '.join(same_ns)} there" if same_ns else "the plan creates none there"
            out.append((r.urn, f"PodIdentityAssociation {r.name} names ServiceAccount {where}, which no resource "
                               f"creates ({have}): no pod gets the role; name the ServiceAccount the workload runs as"))
            continue
        users = [p for p, p_ns, p_sa, _path in pods if p_ns == ns and p_sa == sa]
        if not users:
            out.append((r.urn, f"PodIdentityAssociation {r.name} gives ServiceAccount {where} "
                               f"({describe_res(sas[(ns, sa)])}) a role, but no pod in the plan runs as it"))
    associated = {(ns, sa) for _r, ns, sa in assoc}
    for p, ns, sa, path in pods:
        if sa is UNKNOWN:
            out.append((p.urn, unknown_message(path, "which ServiceAccount the pod runs as")))
            continue
        if p.type.startswith("kubernetes:helm.sh/") or (ns, sa) in sas or sa == "default":
            continue
        out.append((p.urn, f"{describe_res(p)} runs as ServiceAccount {ns}/{sa} ({path}), which no resource "
                           "creates: the pod is refused at admission; create it or use the ServiceAccount the "
                           "plan creates"))
    for p, ns, sa, path in intended_users(resources):
        if sa is UNKNOWN or (ns, sa) in associated:
            continue
        out.append((p.urn, f"{describe_res(p)} runs as ServiceAccount {ns}/{sa} ({path}) but no "
                           "PodIdentityAssociation names it: the pod gets no AWS credentials; associate its role "
                           "with that ServiceAccount (or run the pod as the associated one)"))
    return out


# --------------------------------------------------------------------------------------------------------------------
# keda-auth-wiring
# --------------------------------------------------------------------------------------------------------------------

def parse_role_arn(arn: str) -> tuple[str, str, str] | None:
    """`arn:aws:iam::123:role/path/name` -> (account, path `/path/`, name); None when it is not a role ARN."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[2] != "iam" or not parts[5].startswith("role/"):
        return None
    rest = parts[5][len("role/"):]
    path, _, name = rest.rpartition("/")
    return parts[4], "/" + (path + "/" if path else ""), name


def find_role(resources: list[Res], arn: str) -> Res | None:
    """The aws:iam/role:Role in the plan this ARN names: by its `name` input, else by its resource name (Pulumi
    auto-names a role `<resource name>-<7 hex>`); the ARN's path must be the role's `path` unless the ARN carries
    none (an offline plan's mocked ARN)."""
    parsed = parse_role_arn(arn)
    if parsed is None:
        return None
    _account, path, name = parsed
    for r in resources:
        if r.type != IAM_ROLE:
            continue
        given = r.props.get("name")
        if isinstance(given, str):
            same = given == name
        else:
            same = name == r.name or (name.startswith(r.name + "-") and len(name) == len(r.name) + 8)
        role_path = r.props.get("path") if isinstance(r.props.get("path"), str) else "/"
        if same and (path == "/" or path == role_path):
            return r
    return None


def role_dependency(resources: list[Res], res: Res) -> Res | None:
    """The one IAM role `res` depends on, or None when it depends on none or several: during a preview a role ARN is
    unknown (the role does not exist yet), and the dependency is where the engine says the value comes from."""
    by_urn = {r.urn: r for r in resources}
    roles = [by_urn[u] for u in res.dependencies if u in by_urn and by_urn[u].type == IAM_ROLE]
    return roles[0] if len(roles) == 1 else None


def operator_role(resources: list[Res], association: Res) -> tuple[Res | None, Any]:
    """(the IAM role a Pod Identity association grants — by its known ARN, else by its dependency —, the ARN)."""
    arn = association.props.get("roleArn")
    if isinstance(arn, str):
        return find_role(resources, arn), arn
    return role_dependency(resources, association), arn


def trusted_principals(role: Res) -> tuple[list[str] | None, str | None]:
    """(AWS principals the role's trust policy lets assume it with sts:AssumeRole, or None when unknown; the
    unknown field's path)."""
    doc = role.props.get("assumeRolePolicy")
    if doc is UNKNOWN:
        return None, "assumeRolePolicy"
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except ValueError:
            return [], None
    statements = doc.get("Statement") if isinstance(doc, dict) else None
    statements = [statements] if isinstance(statements, dict) else (statements or [])
    out = []
    for st in statements:
        if not isinstance(st, dict) or st.get("Effect") != "Allow":
            continue
        actions = st.get("Action")
        actions = [actions] if isinstance(actions, str) else (actions or [])
        if not any(a in ("sts:AssumeRole", "sts:*", "*") for a in actions):
            continue
        principal = st.get("Principal")
        aws = principal.get("AWS") if isinstance(principal, dict) else None
        if aws is UNKNOWN:
            return None, "assumeRolePolicy Statement Principal.AWS"
        out += [aws] if isinstance(aws, str) else [a for a in (aws or []) if isinstance(a, str)]
    return out, None


def keda_operator_identity(resources: list[Res]) -> tuple[tuple[Any, Any] | None, Res | None]:
    """((namespace, ServiceAccount) the KEDA operator runs as, its Pod Identity association) — None when the plan
    has no KEDA operator or no association for it."""
    by_urn = {r.urn: r for r in resources}
    keda_charts = {c.urn for c in charts(resources, "keda")}
    sa_key = None
    for p, ns, sa, _path in intended_users(resources):
        if p.urn in keda_charts or chart_of(p, by_urn) == "keda":
            sa_key = (ns, sa)
    if sa_key is None:
        return None, None
    for r, ns, sa in associations(resources):
        if (ns, sa) == sa_key:
            return sa_key, r
    return sa_key, None


def _auths(resources: list[Res]) -> dict[tuple[str, str | None, str], Res]:
    out = {}
    for r in resources:
        for kind in (TRIGGER_AUTHENTICATION, CLUSTER_TRIGGER_AUTHENTICATION):
            if is_kind(r.type, kind) and isinstance(meta_name(r.props), str):
                ns = meta_namespace(r.props) if kind == TRIGGER_AUTHENTICATION else None
                out[(kind[1], ns if isinstance(ns, str) else None, meta_name(r.props))] = r
    return out


def keda_auth_findings(resources: list[Res]) -> list[tuple[str, str]]:
    """(urn, message) for every authenticationRef that resolves to no (Cluster)TriggerAuthentication in its
    namespace, and every podIdentity.roleArn naming no role in the plan or a role that does not trust the KEDA
    operator's role."""
    auths = _auths(resources)
    out: list[tuple[str, str]] = []
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
            key = (kind, None if kind == CLUSTER_TRIGGER_AUTHENTICATION[1] else ns, name)
            if key in auths:
                continue
            elsewhere = sorted(f"{k[0]} {k[1] + '/' if k[1] else ''}{k[2]}" for k in auths if k[2] == name)
            hint = f" (the plan has {', '.join(elsewhere)}: wrong namespace or kind)" if elsewhere else ""
            out.append((r.urn, f"{describe_res(r)} {join_path(path, 'authenticationRef')} names {kind} "
                               f"{(ns + '/') if key[1] else ''}{name}, which the plan does not create{hint}: KEDA "
                               "cannot read the queue and never scales; point it at the TriggerAuthentication in "
                               "the ScaledJob's namespace"))
    operator_sa, operator_assoc = keda_operator_identity(resources)
    for (_kind, _ns, _name), ta in auths.items():
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
            out.append((ta.urn, f"{who} {role_arn.path} = {fmt(role_arn.value)} names no IAM role the plan creates: "
                                "KEDA's AssumeRole fails and the ScaledJob never scales; use the scaler role's ARN"))
            continue
        if operator_assoc is None:
            what = (f"the KEDA operator's ServiceAccount {operator_sa[0]}/{operator_sa[1]} has no "
                    "PodIdentityAssociation" if operator_sa else "the plan has no KEDA operator")
            out.append((ta.urn, f"{who} makes KEDA assume role {role.name}, but {what}, so nothing can assume it"))
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


POD_IDENTITY_POLICY = plan_policy(
    POD_IDENTITY_NAME, "Every EKS Pod Identity association names a ServiceAccount the plan creates and a pod runs as; "
                       "the KEDA operator, Karpenter controller and GPU workers run as an associated ServiceAccount.",
    pod_identity_findings)
KEDA_AUTH_POLICY = plan_policy(
    KEDA_AUTH_NAME, "Every KEDA authenticationRef resolves to a (Cluster)TriggerAuthentication in the plan, and every "
                    "podIdentity.roleArn names a role in the plan that trusts the KEDA operator's role.",
    keda_auth_findings)

POLICIES = [POD_IDENTITY_POLICY, KEDA_AUTH_POLICY]
