"""Stack rule `verify-probe-admission`: a plan that lets the `verify` identity create Jobs also pins what those Jobs
may be, with verify's admission rule (a ValidatingAdmissionPolicy and its binding; components/spec/verify_admission.py).

Why: the identity probe runs Jobs as the workloads' ServiceAccounts, whose roles read the slides, and verify reads
`pods/log`; a Role that lets the `gpuburst:verify` group (or the runner's ServiceAccount) create Jobs, with nothing on
what they contain, lets anyone in that group run a Job that copies a slide and read it back through the Kubernetes
API, around the S3 endpoint deny. So, for every RoleBinding or ClusterRoleBinding of the plan whose subjects are the
verify identity and whose role grants `create` on `jobs` (a `*` counts; `admin`, `edit` and `cluster-admin` do), the
plan must hold a ValidatingAdmissionPolicy that matches Jobs on CREATE for that identity (its `matchConditions` name
the group and the ServiceAccount), fails closed (`failurePolicy: Fail`), applies every rule of
`verify_admission.PROBE_VALIDATIONS` (image, command, ServiceAccount, env, volumes, host access, privilege, token), and
a ValidatingAdmissionPolicyBinding of it that denies (`validationActions: [Deny]`), narrows nothing (no namespace or
object selector, no excluded rule) and refuses when its params are missing. The rule pins Jobs only: a role that lets
the verify identity create pods, CronJobs or another workload kind fails outright.
"""
from __future__ import annotations

from typing import Any

from ._components import verify_admission as va
from .declare import plan_policy
from .plan import Res, describe_res, meta_name, meta_namespace
from .resources import dig, fmt, is_kind
from .unknowns import UNKNOWN, unknown_message

NAME = "verify-probe-admission"
RBAC = "rbac.authorization.k8s.io"
ROLE, CLUSTER_ROLE = (RBAC, "Role"), (RBAC, "ClusterRole")
ROLE_BINDING, CLUSTER_ROLE_BINDING = (RBAC, "RoleBinding"), (RBAC, "ClusterRoleBinding")
ADMISSION = "admissionregistration.k8s.io"
VAP, VAP_BINDING = (ADMISSION, "ValidatingAdmissionPolicy"), (ADMISSION, "ValidatingAdmissionPolicyBinding")

WORKLOAD_RESOURCES = {"pods": "", "replicationcontrollers": "", "jobs": "batch", "cronjobs": "batch",
                      "deployments": "apps", "replicasets": "apps", "statefulsets": "apps", "daemonsets": "apps"}
"""Resources whose creation starts a pod (resource -> API group)."""
BUILTIN_CREATORS = ("cluster-admin", "admin", "edit")
"""Kubernetes' default user-facing ClusterRoles that may create every workload kind (RBAC docs, "User-facing
roles")."""
DO = "declare verify's RBAC with VerifyRunner, which adds the admission rule (components/spec/verify_admission.py)"


def verify_identities(binding: Any) -> tuple[list[str], list[str]]:
    """(what the message calls them, the literals a matchCondition must name) for the subjects of a (Cluster)
    RoleBinding that are the verify identity: Group `gpuburst:verify`, ServiceAccount `*/gpuburst-verify`."""
    names, literals = [], []
    for s in dig(binding, "subjects").value or []:
        if not isinstance(s, dict):
            continue
        if s.get("kind") == "Group" and s.get("name") == va.VERIFY_GROUP:
            names.append(f"Group {va.VERIFY_GROUP}")
            literals.append(va.VERIFY_GROUP)
        elif s.get("kind") == "ServiceAccount" and s.get("name") == va.VERIFY_SERVICE_ACCOUNT:
            ns = s.get("namespace") or meta_namespace(binding)
            names.append(f"ServiceAccount {ns}/{va.VERIFY_SERVICE_ACCOUNT}")
            literals.append(va.probe_username(str(ns)))
    return names, literals


def _covers(values: Any, wanted: str) -> bool:
    return isinstance(values, list) and (wanted in values or "*" in values)


def created_by(rules: Any) -> set[str]:
    """The workload resources (WORKLOAD_RESOURCES) that RBAC `rules` let a subject create."""
    out: set[str] = set()
    for r in rules if isinstance(rules, list) else []:
        if not isinstance(r, dict) or not _covers(r.get("verbs"), "create"):
            continue
        out.update(res for res, group in WORKLOAD_RESOURCES.items()
                   if _covers(r.get("apiGroups"), group) and _covers(r.get("resources"), res))
    return out


def _role_of(binding: Res, resources: list[Res]) -> tuple[Res | None, str]:
    ref = dig(binding.props, "roleRef").value or {}
    kind, name = ref.get("kind"), ref.get("name")
    want = CLUSTER_ROLE if kind == "ClusterRole" else ROLE
    ns = meta_namespace(binding.props)
    for r in resources:
        if is_kind(r.type, want) and meta_name(r.props) == name and (
                want == CLUSTER_ROLE or meta_namespace(r.props) == ns):
            return r, f"{kind} {name if want == CLUSTER_ROLE else f'{ns}/{name}'}"
    return None, f"{kind} {name}"


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == []


def policy_problems(policy: Res, literals: list[str]) -> list[str]:
    """Why this ValidatingAdmissionPolicy does not pin the verify identity's Jobs (empty when it does)."""
    p, out = policy.props, []
    for path in (("spec", "failurePolicy"), ("spec", "matchConstraints"), ("spec", "matchConditions"),
                 ("spec", "validations"), ("spec", "variables"), ("spec", "paramKind")):
        found = dig(p, *path)
        if found.unknown:
            return [unknown_message(found.path, "whether it pins the verify identity's Jobs")]
    if dig(p, "spec", "failurePolicy").value not in (None, "Fail"):
        out.append(f"failurePolicy {fmt(dig(p, 'spec', 'failurePolicy').value)} admits a Job whose rule fails to "
                   "evaluate; use Fail")
    constraints = dig(p, "spec", "matchConstraints").value or {}
    rules = constraints.get("resourceRules") if isinstance(constraints, dict) else None
    if not any(isinstance(r, dict) and _covers(r.get("apiGroups"), "batch") and _covers(r.get("resources"), "jobs")
               and _covers(r.get("operations"), "CREATE") for r in rules or []):
        out.append("its matchConstraints do not match CREATE of batch jobs")
    for key in ("namespaceSelector", "objectSelector", "excludeResourceRules"):
        if isinstance(constraints, dict) and not _empty(constraints.get(key)):
            out.append(f"its matchConstraints.{key} narrows what it applies to")
    conditions = dig(p, "spec", "matchConditions").value or []
    expressions = [c.get("expression") for c in conditions if isinstance(c, dict)]
    if not expressions or not all(isinstance(e, str) and all(lit in e for lit in literals) for e in expressions):
        out.append(f"its matchConditions do not select exactly the verify identity ({', '.join(literals)})")
    have = {v.get("expression") for v in dig(p, "spec", "validations").value or [] if isinstance(v, dict)}
    missing = [m for e, m in va.PROBE_VALIDATIONS if e not in have]
    if missing:
        out.append(f"it lacks {len(missing)} of verify's probe rules ({'; '.join(missing)})")
    variables = {(v.get("name"), v.get("expression")) for v in dig(p, "spec", "variables").value or []
                 if isinstance(v, dict)}
    if not set(va.PROBE_VARIABLES) <= variables:
        out.append(f"its variables lack {', '.join(f'{n} = {e}' for n, e in va.PROBE_VARIABLES)}")
    if dig(p, "spec", "paramKind").value != {"apiVersion": "v1", "kind": "ConfigMap"}:
        out.append("its paramKind is not a v1 ConfigMap (the rules read the stack's values from one)")
    return out


def binding_problems(binding: Res) -> list[str]:
    """Why this ValidatingAdmissionPolicyBinding does not enforce its policy everywhere (empty when it does)."""
    b, out = binding.props, []
    for path in (("spec", "validationActions"), ("spec", "matchResources"), ("spec", "paramRef")):
        found = dig(b, *path)
        if found.unknown:
            return [unknown_message(found.path, "whether it enforces verify's admission rule")]
    actions = dig(b, "spec", "validationActions").value
    if not (isinstance(actions, list) and "Deny" in actions):
        out.append(f"validationActions {fmt(actions)} does not deny (only Deny refuses the request)")
    match = dig(b, "spec", "matchResources").value or {}
    for key in ("namespaceSelector", "objectSelector", "excludeResourceRules"):
        if isinstance(match, dict) and not _empty(match.get(key)):
            out.append(f"its matchResources.{key} narrows where the rule applies")
    ref = dig(b, "spec", "paramRef").value
    if not isinstance(ref, dict) or ref.get("parameterNotFoundAction") != "Deny":
        out.append("its paramRef must name the params ConfigMap with parameterNotFoundAction Deny")
    return out


def admission_findings(resources: list[Res]) -> list[tuple[str | None, str]]:
    """(urn, message) for every binding that lets the verify identity create a workload the admission rule does not
    pin, or Jobs without a policy and binding that pin them."""
    out: list[tuple[str | None, str]] = []
    policies = [r for r in resources if is_kind(r.type, VAP)]
    bindings = [r for r in resources if is_kind(r.type, VAP_BINDING)]
    for rb in (r for r in resources if is_kind(r.type, ROLE_BINDING) or is_kind(r.type, CLUSTER_ROLE_BINDING)):
        subjects, role_ref = dig(rb.props, "subjects"), dig(rb.props, "roleRef")
        if subjects.unknown or role_ref.unknown:
            found = subjects if subjects.unknown else role_ref
            out.append((rb.urn, unknown_message(found.path, "whether it lets the verify identity create Jobs")))
            continue
        names, literals = verify_identities(rb.props)
        if not names:
            continue
        role, role_name = _role_of(rb, resources)
        if role is None:
            ref_name = (role_ref.value or {}).get("name")
            if ref_name not in BUILTIN_CREATORS:
                out.append((rb.urn, f"{describe_res(rb)} binds the verify identity ({', '.join(names)}) to "
                                    f"{role_name}, which is not in this plan: cannot tell what it lets verify create; "
                                    f"{DO}"))
                continue
            creates = set(WORKLOAD_RESOURCES)
        else:
            rules = dig(role.props, "rules")
            if rules.unknown:
                out.append((rb.urn, unknown_message(rules.path, "what the verify identity may create")))
                continue
            creates = created_by(rules.value)
        who = f"{describe_res(rb)} lets the verify identity ({', '.join(names)}) create"
        others = sorted(creates - {"jobs"})
        if others:
            out.append((rb.urn, f"{who} {', '.join(others)} ({role_name}): its admission rule pins Jobs only; grant "
                                "create on jobs alone"))
        if "jobs" not in creates:
            continue
        out += [(rb.urn, f"{who} jobs ({role_name}) but {m}; {DO}") for m in _admission_gaps(policies, bindings,
                                                                                           literals)]
    return out


def _admission_gaps(policies: list[Res], bindings: list[Res], literals: list[str]) -> list[str]:
    """Why no policy + binding of the plan pins the verify identity's Jobs (empty when one does): the problems of
    the closest candidate, verify's own policy by name first."""
    if not policies:
        return ["the plan holds no ValidatingAdmissionPolicy pinning what those Jobs may be (image, command, "
                "ServiceAccount, env, volumes)"]
    best: list[str] | None = None
    for policy in sorted(policies, key=lambda r: meta_name(r.props) != va.ADMISSION_NAME):
        name = meta_name(policy.props)
        problems = [f"ValidatingAdmissionPolicy {fmt(name)}: {m}" for m in policy_problems(policy, literals)]
        mine = [b for b in bindings if dig(b.props, "spec", "policyName").value in (name, UNKNOWN)]
        if not mine:
            problems.append(f"no ValidatingAdmissionPolicyBinding binds ValidatingAdmissionPolicy {fmt(name)}")
        else:
            gaps = [[f"{describe_res(b)}: {m}" for m in binding_problems(b)] for b in mine]
            problems += min(gaps, key=len)
        if not problems:
            return []
        if best is None:
            best = problems
    return best or []


POLICY = plan_policy(
    NAME, "A plan that lets the verify identity create Jobs must pin them with verify's admission rule (a "
          "ValidatingAdmissionPolicy on image, command, ServiceAccount, env, volumes and privilege, bound with Deny); "
          "it may create no other workload kind.", admission_findings)

POLICIES = [POLICY]
