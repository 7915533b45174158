"""Test oracle: what the API server's ValidatingAdmissionPolicy plugin decides for one request, with cel-python.

It follows the admission steps of admissionregistration.k8s.io/v1 for a policy and one binding: the policy's
matchConstraints (resource rules and operations; selectors are not modelled and must be absent), the binding's
paramRef (params missing: `parameterNotFoundAction`), the matchConditions (any false: the policy does not apply; an
error: `failurePolicy`), the variables in order, then every validation (false: denied with its message; an error:
`failurePolicy`). The activation is the one Kubernetes gives: `object`, `oldObject`, `request`, `params`,
`variables`. What it cannot do: the API server's defaulting of the object before admission and the Kubernetes CEL
libraries (`crd_oracle.skip_reason` names them) — an expression that needs one raises here, so nothing passes by being
skipped. Use `decide(policy, binding, params, obj, user=..., groups=..., namespace=...)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import celpy

from tests.components.crd_oracle import skip_reason


@dataclass
class Decision:
    """The outcome for one request."""

    matched: bool
    """Whether the policy applied (constraints and matchConditions)."""
    denied: list[str] = field(default_factory=list)
    """The messages of the validations that refused it (or why it failed closed); empty: admitted."""

    @property
    def admitted(self) -> bool:
        return not self.denied


_ENV = celpy.Environment()


class Unevaluable(Exception):
    """An expression cel-python cannot evaluate the way the API server would (a Kubernetes CEL extension)."""


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    """One CEL expression over an activation of plain values (cel-python); raises on what it cannot evaluate."""
    reason = skip_reason(expression)
    if reason:
        raise Unevaluable(f"cel-python cannot evaluate this expression faithfully: {reason}")
    program = _ENV.program(_ENV.compile(expression))
    result = program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})
    if isinstance(result, celpy.CELEvalError):
        raise result
    return result


def _true(value: Any) -> bool:
    return value is True or (isinstance(value, celpy.celtypes.BoolType) and bool(value))


def _matches_rule(rules: list[dict], group: str, resource: str, operation: str) -> bool:
    def covers(values: list[str], wanted: str) -> bool:
        return wanted in values or "*" in values
    return any(covers(r.get("apiGroups", []), group) and covers(r.get("resources", []), resource)
               and covers(r.get("operations", []), operation) for r in rules)


def decide(policy: dict, binding: dict, params: dict | None, obj: dict, *, user: str, groups: list[str] | None,
           namespace: str, operation: str = "CREATE", group: str = "batch", resource: str = "jobs") -> Decision:
    """The decision on creating `obj` (a `group`/`resource` in `namespace`) as `user` in `groups` (None: the request
    carries no groups field)."""
    spec, bspec = policy["spec"], binding["spec"]
    assert bspec["policyName"] == policy["metadata"]["name"]
    constraints = spec.get("matchConstraints") or {}
    for key in ("namespaceSelector", "objectSelector", "excludeResourceRules"):
        assert not constraints.get(key) and not (bspec.get("matchResources") or {}).get(key), f"{key}: not modelled"
    if not _matches_rule(constraints.get("resourceRules") or [], group, resource, operation):
        return Decision(False)
    fail_closed = spec.get("failurePolicy", "Fail") == "Fail"
    user_info: dict[str, Any] = {"username": user}
    if groups is not None:
        user_info["groups"] = list(groups)
    activation: dict[str, Any] = {
        "object": obj, "oldObject": None,
        "request": {"operation": operation, "namespace": namespace, "userInfo": user_info,
                    "resource": {"group": group, "version": "v1", "resource": resource}},
    }
    for cond in spec.get("matchConditions") or []:
        try:
            if not _true(evaluate(cond["expression"], activation)):
                return Decision(False)
        except Unevaluable:
            raise
        except Exception as e:  # noqa: BLE001 - an error in a matchCondition is judged by failurePolicy
            return Decision(True, [f"matchCondition {cond['name']} failed: {e}"] if fail_closed else [])
    ref = bspec.get("paramRef")
    if spec.get("paramKind"):
        if params is None:
            action = (ref or {}).get("parameterNotFoundAction", "Deny")
            return Decision(True, ["params not found"] if action == "Deny" else [])
        activation["params"] = params
    variables: dict[str, Any] = {}
    activation["variables"] = variables
    denied: list[str] = []
    try:
        for var in spec.get("variables") or []:
            value = evaluate(var["expression"], activation)
            variables[var["name"]] = _plain(value)
        for v in spec.get("validations") or []:
            if not _true(evaluate(v["expression"], activation)):
                denied.append(v.get("message") or v["expression"])
    except Unevaluable:
        raise
    except Exception as e:  # noqa: BLE001 - an evaluation error is judged by failurePolicy
        if fail_closed:
            denied.append(f"evaluation error: {e}")
    return Decision(True, denied)


def _plain(value: Any) -> Any:
    """A cel-python value back to plain Python (to feed it again through `json_to_cel`)."""
    if isinstance(value, celpy.celtypes.MapType):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, celpy.celtypes.ListType):
        return [_plain(v) for v in value]
    if isinstance(value, celpy.celtypes.BoolType):
        return bool(value)
    if isinstance(value, celpy.celtypes.IntType):
        return int(value)
    if isinstance(value, celpy.celtypes.StringType):
        return str(value)
    return value
