"""An AWS IAM policy evaluator for same-account requests: may principal P do action A on resource R with context C?

It follows the IAM User Guide: "Policy evaluation logic" and "Policy evaluation for requests within a single
account", "IAM JSON policy elements: Principal / NotPrincipal / Action / NotAction / Resource / NotResource /
Condition", "Permissions boundaries for IAM entities", and the AWS KMS Developer Guide ("Key policies").

- An explicit Deny in any policy wins (verdict "explicit-deny").
- Otherwise, same account: allowed when an identity policy allows, or the resource policy allows the principal
  (the caller's session, its role, its user, or "*"; an account principal only hands the decision to IAM).
- KMS keys (a `kms:` action on a `...:key/...` ARN): the key policy must allow, either the principal itself, or
  the account (`arn:aws:iam::ACCOUNT:root` / "ACCOUNT"), and then an identity policy must allow too.
- A permissions boundary (`permissions_boundary=`) must allow the identity path; a resource policy that names the
  role ARN is limited by the boundary's implicit deny too, one that names the session ARN (or "*", or the user) is
  not. A Deny with NotPrincipal in a resource policy always applies to a principal with a boundary.
- A VPC endpoint policy (`endpoint_policy=`), when the request goes through an endpoint, must also allow. Its
  Principal is matched as in a resource policy, except that an account principal means every principal of the
  account for an interface endpoint, and only the root user for a gateway endpoint (`endpoint_gateway=True`), where
  only "*" admits a role or user (PrivateLink guide, "Control access to VPC endpoints using endpoint policies":
  gateway endpoints must use the aws:PrincipalArn condition key to name principals).
- NotPrincipal exempts a role session only when it names every level AWS may check: the session ARN, the role ARN
  and the account (the NotPrincipal page: "AWS might validate the account first, then the role, and then the
  assumed-role user"); for a user, the user and the account.
Not modelled: cross-account requests (refused with a ValueError), SCPs, RCPs, session policies, anonymous callers,
the account root user. The request's context gets aws:PrincipalArn (the role ARN for a role's session),
aws:PrincipalAccount, aws:PrincipalType, aws:PrincipalIsAWSService (and aws:username for a user,
aws:PrincipalServiceName for a service) unless the caller sets them.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .conditions import Condition, conditions_hold, glob_match, parse_conditions

VERDICTS = ("allow", "explicit-deny", "implicit-deny")
"""The three outcomes of an evaluation."""
LAYERS = ("identity", "resource", "key-policy", "boundary", "endpoint")
"""The policy layers an implicit deny can name as lacking an allow."""

_ROLE = re.compile(r"^arn:(aws[a-z-]*):iam::(\d{12}):role/(?:[^/]+/)*([^/]+)$")
_USER = re.compile(r"^arn:(aws[a-z-]*):iam::(\d{12}):user/(?:[^/]+/)*([^/]+)$")
_SERVICE = re.compile(r"^[a-z0-9][a-z0-9.-]*\.amazonaws\.com(\.cn)?$")
_ACCOUNT = re.compile(r"^(\d{12})$|^arn:aws[a-z-]*:iam::(\d{12}):root$")
_ACTION = re.compile(r"^[a-zA-Z0-9-]+:[a-zA-Z0-9*?]+$")
_ELEMENTS = {"Sid", "Effect", "Principal", "NotPrincipal", "Action", "NotAction", "Resource", "NotResource",
             "Condition"}
_PRINCIPAL_TYPES = ("AWS", "Service", "Federated", "CanonicalUser")


@dataclass(frozen=True)
class Policy:
    """A policy document with the label a Decision names it by."""

    label: str
    """How decisions name this policy (`identity:worker`, `resource`, ...); no default."""
    document: Mapping[str, Any]
    """The JSON policy document as a dict; no default."""


@dataclass(frozen=True)
class Request:
    """One request: a role's session, an IAM user or a service principal doing one action on one resource."""

    principal: str
    """A role ARN (the caller is a session of it), a user ARN, or a service principal (`sqs.amazonaws.com`)."""
    action: str
    """`service:Action`, e.g. `s3:GetObject`; no default."""
    resource: str
    """The resource ARN, e.g. `arn:aws:s3:::bucket/key`; no default."""
    context: Mapping[str, Any] = field(default_factory=dict)
    """Context keys (case-insensitive) to values: str, bool, int or a list of str; default empty."""
    resource_account: str | None = None
    """The account that owns the resource; default: the principal's account (S3 ARNs carry none)."""
    session_name: str = "rehearse"
    """The role session's name (the caller is arn:aws:sts::ACCOUNT:assumed-role/ROLE/NAME); default `rehearse`."""


@dataclass(frozen=True)
class StatementRef:
    """One statement a decision rests on."""

    policy: str
    """The label of its policy."""
    index: int
    """Its position in the policy's Statement list (0-based)."""
    sid: str | None
    """Its Sid, or None."""


@dataclass(frozen=True)
class Decision:
    """The outcome of one evaluation and the statements it rests on."""

    allowed: bool
    """Whether AWS would allow the request."""
    verdict: str
    """`allow`, `explicit-deny` or `implicit-deny`."""
    statements: tuple[StatementRef, ...] = ()
    """For an allow, the allowing statements; for an explicit deny, every denying statement; else empty."""
    missing: tuple[str, ...] = ()
    """For an implicit deny, the layers (LAYERS) that lacked an allow; else empty."""
    reason: str = ""
    """One line that says why."""


@dataclass(frozen=True)
class _Statement:
    ref: StatementRef
    effect: str
    actions: tuple[str, ...]
    not_action: bool
    resources: tuple[str, ...] | None
    not_resource: bool
    principals: tuple[tuple[str, str], ...] | None
    not_principal: bool
    conditions: tuple[Condition, ...]


@dataclass(frozen=True)
class _Caller:
    kind: str  # "role", "user" or "service"
    account: str | None
    names: frozenset[str]  # what a Principal element may name to mean this caller directly
    role_arn: str | None = None


def _as_list(value: object, what: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(i, str) and i for i in items):
        raise ValueError(f"{what} must be a non-empty string or list of strings, got {value!r}")
    return tuple(items)


def _principals(value: object) -> tuple[tuple[str, str], ...]:
    if value == "*":
        return (("AWS", "*"),)
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f'Principal must be "*" or an object of {"/".join(_PRINCIPAL_TYPES)}, got {value!r}')
    out = []
    for kind, names in value.items():
        if kind not in _PRINCIPAL_TYPES:
            raise ValueError(f"unknown principal type {kind!r} (one of {', '.join(_PRINCIPAL_TYPES)})")
        for name in _as_list(names, f"Principal {kind}"):
            if kind == "AWS" and name != "*" and "*" in name:
                raise ValueError(f"Principal AWS {name!r}: a principal ARN cannot hold a wildcard")
            out.append((kind, name))
    return tuple(out)


def _parse_statement(raw: object, ref: StatementRef, kind: str) -> _Statement:
    if not isinstance(raw, Mapping):
        raise ValueError(f"a statement must be an object, got {raw!r}")
    unknown = sorted(set(raw) - _ELEMENTS)
    if unknown:
        raise ValueError(f"unknown element(s) {', '.join(map(repr, unknown))}")
    if raw.get("Effect") not in ("Allow", "Deny"):
        raise ValueError(f"Effect must be Allow or Deny, got {raw.get('Effect')!r}")
    if ("Action" in raw) == ("NotAction" in raw):
        raise ValueError("needs exactly one of Action and NotAction")
    if "Resource" in raw and "NotResource" in raw:
        raise ValueError("has both Resource and NotResource")
    has_principal = "Principal" in raw or "NotPrincipal" in raw
    if "Principal" in raw and "NotPrincipal" in raw:
        raise ValueError("has both Principal and NotPrincipal")
    if kind in ("identity", "boundary"):
        if has_principal:
            raise ValueError(f"a {kind} policy cannot name a Principal or NotPrincipal")
        if "Resource" not in raw and "NotResource" not in raw:
            raise ValueError(f"a {kind} policy statement needs Resource or NotResource")
    elif not has_principal:
        raise ValueError(f"a {kind} policy statement needs Principal or NotPrincipal")
    actions = _as_list(raw.get("Action", raw.get("NotAction")), "Action")
    for action in actions:
        if action != "*" and not _ACTION.match(action):
            raise ValueError(f"Action {action!r} is not `service:action` or *")
    resources = None
    if "Resource" in raw or "NotResource" in raw:
        resources = _as_list(raw.get("Resource", raw.get("NotResource")), "Resource")
        for resource in resources:
            if resource != "*" and not resource.startswith("arn:"):
                raise ValueError(f"Resource {resource!r} is not an ARN or *")
    principals = _principals(raw["Principal"] if "Principal" in raw else raw["NotPrincipal"]) if has_principal else None
    conditions = parse_conditions(raw["Condition"]) if "Condition" in raw else ()
    return _Statement(ref, raw["Effect"], tuple(a.lower() for a in actions), "NotAction" in raw, resources,
                      "NotResource" in raw, principals, "NotPrincipal" in raw, conditions)


def parse_policy(policy: Policy | Mapping[str, Any], kind: str, label: str | None = None
                 ) -> tuple[tuple[_Statement, ...], bool]:
    """The policy's statements and whether policy variables apply (Version 2012-10-17); ValueError naming the policy
    and the statement when malformed. `kind` is identity, resource, boundary or endpoint."""
    if isinstance(policy, Policy):
        label, document = policy.label, policy.document
    else:
        document = policy
    label = label or kind
    if not isinstance(document, Mapping):
        raise ValueError(f"policy {label!r}: a policy must be a JSON object, got {type(document).__name__}")
    version = document.get("Version", "2008-10-17")
    if version not in ("2012-10-17", "2008-10-17"):
        raise ValueError(f"policy {label!r}: Version {version!r} is not 2012-10-17 or 2008-10-17")
    if "Statement" not in document:
        raise ValueError(f"policy {label!r}: no Statement")
    raw = document["Statement"]
    statements = raw if isinstance(raw, list) else [raw]
    out = []
    for index, statement in enumerate(statements):
        sid = statement.get("Sid") if isinstance(statement, Mapping) else None
        ref = StatementRef(label, index, sid if isinstance(sid, str) else None)
        try:
            out.append(_parse_statement(statement, ref, kind))
        except ValueError as err:
            where = f"statement {index}" + (f" (Sid {ref.sid!r})" if ref.sid else "")
            raise ValueError(f"policy {label!r} {where}: {err}") from None
    return tuple(out), version == "2012-10-17"


def check_policy(policy: Policy | Mapping[str, Any], kind: str = "resource") -> None:
    """Raise ValueError (one line naming the statement) when the policy is malformed for its kind."""
    parse_policy(policy, kind)


def _caller(request: Request) -> _Caller:
    p = request.principal
    if m := _ROLE.match(p):
        partition, account, name = m.groups()
        session = f"arn:{partition}:sts::{account}:assumed-role/{name}/{request.session_name}"
        return _Caller("role", account, frozenset({session}), role_arn=p)
    if m := _USER.match(p):
        return _Caller("user", m.group(2), frozenset({p}))
    if _SERVICE.match(p):
        return _Caller("service", None, frozenset({p}))
    raise ValueError(f"principal: {p!r} is not a role ARN, a user ARN or a service principal (x.amazonaws.com)")


def request_context(request: Request) -> dict[str, str | list[str]]:
    """The request's context as evaluated: the caller's keys with values as strings, plus the principal keys AWS
    sets (aws:PrincipalArn, aws:PrincipalAccount, ...) unless the caller set them."""
    caller = _caller(request)
    context: dict[str, str | list[str]] = {}
    if caller.kind == "service":
        context.update({"aws:PrincipalServiceName": request.principal, "aws:PrincipalIsAWSService": "true"})
    else:
        context.update({"aws:PrincipalArn": request.principal, "aws:PrincipalAccount": caller.account or "",
                        "aws:PrincipalIsAWSService": "false",
                        "aws:PrincipalType": "AssumedRole" if caller.kind == "role" else "User"})
        if caller.kind == "user":
            context["aws:username"] = request.principal.rsplit("/", 1)[1]
    given = {k.lower() for k in request.context}
    context = {k: v for k, v in context.items() if k.lower() not in given}
    for key, value in request.context.items():
        if isinstance(value, (list, tuple)):
            context[key] = [_scalar(v, key) for v in value]
        else:
            context[key] = _scalar(value, key)
    return context


def _scalar(value: object, key: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise ValueError(f"context {key!r}: {value!r} is not a string, number or boolean")


def _principal_match(statement: _Statement, caller: _Caller, has_boundary: bool) -> str | None:
    """How the statement's Principal/NotPrincipal names the caller: direct (the session, user, service or "*"),
    role (the session's role ARN), account (the caller's account), or None."""
    assert statement.principals is not None
    if statement.not_principal:
        if statement.effect == "Deny" and has_boundary:
            return "direct"  # "The NotPrincipal element with a Deny effect will always deny" (boundaries page)
        named = {name for _, name in statement.principals}
        exempt = "*" in named or (caller.names <= named and (caller.role_arn is None or caller.role_arn in named)
                                  and (caller.account is None or _account_named(named, caller.account)))
        return None if exempt else "direct"
    best = None
    for kind, name in statement.principals:
        if name == "*" and kind == "AWS":
            return "direct"
        if kind == "Service" and caller.kind == "service" and name in caller.names:
            return "direct"
        if kind != "AWS" or caller.kind == "service":
            continue
        if name in caller.names:
            return "direct"
        if caller.role_arn and name == caller.role_arn:
            best = "role"
        elif (m := _ACCOUNT.match(name)) and (m.group(1) or m.group(2)) == caller.account and best is None:
            best = "account"
    return best


def _account_named(named: set[str], account: str) -> bool:
    return account in named or f"arn:aws:iam::{account}:root" in named


def _applies(statement: _Statement, request: Request, context: Mapping[str, Any], variables: bool) -> bool:
    """Action, Resource and Condition match (the Principal is judged apart)."""
    action = request.action.lower()
    hit = any(a == "*" or glob_match(a, action, {}, variables=False) for a in statement.actions)
    if hit == statement.not_action:
        return False
    if statement.resources is not None:
        hit = any(r == "*" or glob_match(r, request.resource, context, variables=variables) is True
                  for r in statement.resources)
        if hit == statement.not_resource:
            return False
    return conditions_hold(statement.conditions, context, variables=variables)


@dataclass
class _Layer:
    allows: list[tuple[StatementRef, str]] = field(default_factory=list)
    denies: list[StatementRef] = field(default_factory=list)

    def allowed(self, *kinds: str) -> list[StatementRef]:
        return [ref for ref, kind in self.allows if kind in kinds]


def _endpoint_match(statement: _Statement, caller: _Caller, gateway: bool) -> str | None:
    """An endpoint policy's Principal: as in a resource policy, but an account principal admits the whole account
    (interface endpoint) or only its root user (gateway endpoint, where only "*" admits a role or user)."""
    assert statement.principals is not None
    if gateway:
        named = any(kind == "AWS" and name == "*" for kind, name in statement.principals)
        return None if named == statement.not_principal else "direct"
    match = _principal_match(statement, caller, has_boundary=False)
    return "direct" if match else None


def _analyse(policy: Policy | Mapping[str, Any] | None, kind: str, label: str, request: Request, caller: _Caller,
             context: Mapping[str, Any], has_boundary: bool, gateway: bool = False) -> _Layer | None:
    if policy is None:
        return None
    statements, variables = parse_policy(policy, kind, label)
    layer = _Layer()
    for s in statements:
        if s.principals is None:
            match: str | None = "direct"
        elif kind == "endpoint":
            match = _endpoint_match(s, caller, gateway)
        else:
            match = _principal_match(s, caller, has_boundary)
        if match is None or not _applies(s, request, context, variables):
            continue
        if s.effect == "Deny":
            layer.denies.append(s.ref)
        else:
            layer.allows.append((s.ref, match))
    return layer


def _describe(refs: Sequence[StatementRef]) -> str:
    return ", ".join(f"{r.policy} statement {r.index}" + (f" ({r.sid})" if r.sid else "") for r in refs)


def evaluate(request: Request, *, identity_policies: Sequence[Policy | Mapping[str, Any]] = (),
             resource_policy: Policy | Mapping[str, Any] | None = None,
             permissions_boundary: Policy | Mapping[str, Any] | None = None,
             endpoint_policy: Policy | Mapping[str, Any] | None = None, endpoint_gateway: bool = False
             ) -> Decision:
    """Decide one same-account request. Bare documents get the labels `identity[i]`, `resource` (`key-policy` for
    a KMS key), `boundary` and `endpoint`; pass Policy(label, document) to name them. `endpoint_gateway`: the
    endpoint is a gateway endpoint (S3, DynamoDB) rather than an interface endpoint; default False. Every policy is
    checked first: a malformed one raises ValueError naming the statement, as does a cross-account request."""
    caller = _caller(request)
    if not _ACTION.match(request.action) or "*" in request.action or "?" in request.action:
        raise ValueError(f"action: {request.action!r} is not `service:Action`")
    if not request.resource.startswith("arn:") and request.resource != "*":
        raise ValueError(f"resource: {request.resource!r} is not an ARN or *")
    key_policy = request.action.lower().startswith("kms:") and ":key/" in request.resource
    if caller.kind == "service" and (identity_policies or permissions_boundary is not None):
        raise ValueError(f"principal: {request.principal!r} is a service principal: it has no identity policies "
                         "or permissions boundary")
    account = request.resource_account or caller.account
    if caller.account and account != caller.account:
        raise ValueError(f"resource_account: {account!r} is not the principal's account {caller.account!r}: "
                         "cross-account requests are not modelled")
    context = {k.lower(): v for k, v in request_context(request).items()}
    boundary = permissions_boundary is not None
    identity = [_analyse(p, "identity", f"identity[{i}]", request, caller, context, boundary)
                for i, p in enumerate(identity_policies)]
    resource = _analyse(resource_policy, "resource", "key-policy" if key_policy else "resource", request, caller,
                        context, boundary)
    bound = _analyse(permissions_boundary, "boundary", "boundary", request, caller, context, boundary)
    endpoint = _analyse(endpoint_policy, "endpoint", "endpoint", request, caller, context, boundary,
                        endpoint_gateway)
    layers = [x for x in (*identity, resource, bound, endpoint) if x is not None]
    denies = tuple(ref for layer in layers for ref in layer.denies)
    if denies:
        return Decision(False, "explicit-deny", denies, (), f"explicitly denied by {_describe(denies)}")

    res = resource or _Layer()
    id_allows = [ref for layer in identity if layer for ref, _ in layer.allows]
    bound_ok = bound is None or bool(bound.allows)
    bound_refs = [ref for ref, _ in bound.allows] if bound else []
    direct, role, acct = res.allowed("direct"), res.allowed("role"), res.allowed("account")
    resource_path = direct + (role if bound_ok else [])
    if caller.kind == "service":
        identity_path: list[StatementRef] = []
    elif key_policy:
        identity_path = acct + id_allows + bound_refs if acct and id_allows and bound_ok else []
    else:
        identity_path = id_allows + bound_refs if id_allows and bound_ok else []
    missing: list[str] = []
    if not (resource_path or identity_path):
        if caller.kind == "service":
            missing.append("resource")
        elif key_policy and not (direct or role or acct):
            missing.append("key-policy")
        else:
            if not id_allows:
                missing.append("identity")
                if resource_policy is not None and not key_policy and not (direct or role):
                    missing.append("resource")
            if not bound_ok:
                missing.append("boundary")
    if endpoint is not None and not endpoint.allows:
        missing.append("endpoint")
    if missing:
        return Decision(False, "implicit-deny", (), tuple(missing),
                        f"implicitly denied: no applicable allow in {', '.join(missing)}")
    granting = tuple(dict.fromkeys(resource_path + identity_path + [r for r, _ in (endpoint.allows if endpoint
                                                                                    else [])]))
    return Decision(True, "allow", granting, (), f"allowed by {_describe(granting)}")
