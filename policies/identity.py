"""What the identity rules read from a plan: the ServiceAccounts it creates, the pods and who they run as, the Pod
Identity associations, the IAM roles a role ARN names and whom they trust, the KEDA operator and the
TriggerAuthentications."""
from __future__ import annotations

import json
from typing import Any

from ._components import catalogue
from .facts import WHOLE, Scope
from .plan import Res, chart_of, charts, meta_name, meta_namespace, rendered
from .resources import (
    CLUSTER_TRIGGER_AUTHENTICATION,
    POD_TEMPLATE_PATHS,
    SCALED_JOB,
    TRIGGER_AUTHENTICATION,
    dig,
    is_kind,
    join_path,
    k8s_kind,
)
from .schedulability import gpu_pods
from .unknowns import UNKNOWN

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


def is_pause_image(image: Any) -> bool:
    """The catalogue's pause image, or a mirror of it (any `.../pause` repository at the very same pinned digest:
    the platform's GPU nodes pull it from the stack's ECR copy)."""
    if not isinstance(image, str):
        return False
    if image == catalogue.PAUSE_IMAGE:
        return True
    name, _, digest = image.partition("@")
    _, _, pinned = catalogue.PAUSE_IMAGE.partition("@")
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    return bool(pinned) and digest == pinned and repository.rsplit("/", 1)[-1] == "pause"


def is_placeholder(pod: Any) -> bool:
    """Whether a pod spec only runs the pause image (the warm GPU floor's capacity placeholder)."""
    containers = pod.get("containers") if isinstance(pod, dict) else None
    return bool(containers) and all(isinstance(c, dict) and is_pause_image(c.get("image")) for c in containers)


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




# --------------------------------------------------------------------------------------------------------------------
# IAM roles, trust, the KEDA operator and TriggerAuthentications.
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


def roles_named(resources: list[Res], arn: str) -> list[Res]:
    """The IAM roles in the plan with the role name this ARN names, whatever their path (a near miss: the ARN's path
    or account says another role)."""
    parsed = parse_role_arn(arn)
    if parsed is None:
        return []
    name = parsed[2]
    out = []
    for r in resources:
        if r.type == IAM_ROLE:
            given = r.props.get("name")
            same = given == name if isinstance(given, str) else \
                (name == r.name or (name.startswith(r.name + "-") and len(name) == len(r.name) + 8))
            if same:
                out.append(r)
    return out


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


def keda_operator_identity(resources: list[Res], scope: Scope = WHOLE
                           ) -> tuple[tuple[Any, Any] | None, Res | None]:
    """((namespace, ServiceAccount) the KEDA operator runs as, its Pod Identity association) — None when the plan
    has no KEDA operator (and, in a partial plan, no fact names its ServiceAccount) or no association for it."""
    by_urn = {r.urn: r for r in resources}
    keda_charts = {c.urn for c in charts(resources, "keda")}
    sa_key = None
    for p, ns, sa, _path in intended_users(resources):
        if p.urn in keda_charts or chart_of(p, by_urn) == "keda":
            sa_key = (ns, sa)
    if sa_key is None and not scope.whole:
        ns, sa = scope.value("kedaNamespace"), scope.value("kedaOperatorServiceAccount")
        sa_key = (ns, sa) if isinstance(ns, str) and isinstance(sa, str) else None
    if sa_key is None:
        return None, None
    for r, ns, sa in associations(resources):
        if (ns, sa) == sa_key:
            return sa_key, r
    return sa_key, None


def keda_in_plan(resources: list[Res]) -> bool:
    """Whether the plan installs KEDA (a keda chart)."""
    return bool(charts(resources, "keda"))


def auths(resources: list[Res]) -> dict[tuple[str, str | None, str], Res]:
    out = {}
    for r in resources:
        for kind in (TRIGGER_AUTHENTICATION, CLUSTER_TRIGGER_AUTHENTICATION):
            if is_kind(r.type, kind) and isinstance(meta_name(r.props), str):
                ns = meta_namespace(r.props) if kind == TRIGGER_AUTHENTICATION else None
                out[(kind[1], ns if isinstance(ns, str) else None, meta_name(r.props))] = r
    return out




# --------------------------------------------------------------------------------------------------------------------
# What the plan owns: a reference into a namespace the plan manages is judged here even in a partial plan.
# --------------------------------------------------------------------------------------------------------------------

NAMESPACE = ("core", "Namespace")


def namespaces_created(resources: list[Res]) -> set[str]:
    """Namespaces the plan creates (a Namespace resource)."""
    return {meta_name(r.props) for r in resources
            if k8s_kind(r.type) == NAMESPACE and isinstance(meta_name(r.props), str)}


def service_account_namespaces(resources: list[Res]) -> set[str | None]:
    """Namespaces in which the plan creates a ServiceAccount, or which it creates: the plan owns their
    ServiceAccounts, so a name there that it does not create is a mismatch, not another stack's."""
    return {ns for ns, _name in service_accounts(resources)} | namespaces_created(resources)


def association_namespaces(resources: list[Res]) -> set[Any]:
    """Namespaces for which the plan creates a Pod Identity association: the plan gives their pods roles, so a pod
    there without one is a mismatch, not another stack's business."""
    return {ns for _r, ns, _sa in associations(resources)}
