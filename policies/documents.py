"""Readers of IAM policy documents (an IAM role's trust policy, an S3 bucket policy: a JSON string or an object) with
IAM's own case rules: statements, actions, principals, and conditions split into qualifier, operator and key."""
from __future__ import annotations

import fnmatch
import json
from typing import Any, NamedTuple

from .resources import join_path
from .unknowns import UNKNOWN


class Statements(NamedTuple):
    """The statements of a document: (path, statement) pairs; `unknown` the path of a part unknown during preview
    (None when all is known), `error` why it is not a policy document (None when it is)."""

    items: list[tuple[str, dict[str, Any]]]
    unknown: str | None = None
    error: str | None = None


def statements(value: Any, field: str) -> Statements:
    """The statements of the document at `field` (a JSON string or an object; absent: no statement)."""
    if value is UNKNOWN:
        return Statements([], field)
    if value is None:
        return Statements([])
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as e:
            return Statements([], None, f"{field} is not JSON ({e})")
    if not isinstance(value, dict):
        return Statements([], None, f"{field} is not a policy document (got {type(value).__name__})")
    found = value.get("Statement")
    path = join_path(field, "Statement")
    if found is UNKNOWN:
        return Statements([], path)
    found = [found] if isinstance(found, dict) else found if isinstance(found, list) else []
    items, unknown = [], None
    for i, st in enumerate(found):
        if st is UNKNOWN:
            unknown = unknown or join_path(path, i)
        elif isinstance(st, dict):
            items.append((join_path(path, i), st))
    return Statements(items, unknown)


def listed(value: Any) -> list[Any]:
    """A policy element that may be one value or a list, as a list (UNKNOWN stays an item; absent is [])."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def effect(st: dict[str, Any]) -> Any:
    """The statement's Effect (`Allow` / `Deny`; IAM spells them with a capital)."""
    return st.get("Effect")


def action_matches(st: dict[str, Any], action: str) -> bool | None:
    """Whether the statement's Action covers `action` (IAM wildcards, any case); None when unknown. A statement with
    NotAction is never taken to cover it (what it excludes is not read)."""
    if "NotAction" in st:
        return False
    found = listed(st.get("Action"))
    if UNKNOWN in found:
        return None
    return any(isinstance(a, str) and fnmatch.fnmatchcase(action.lower(), a.lower()) for a in found)


def principals(st: dict[str, Any], kind: str) -> list[Any] | None:
    """The statement's Principal entries of `kind` (`Service`, `AWS`), `["*"]` for `Principal: "*"`; None when
    unknown. A statement with NotPrincipal has none."""
    if "NotPrincipal" in st:
        return []
    principal = st.get("Principal")
    if principal is UNKNOWN:
        return None
    if principal == "*":
        return ["*"]
    if not isinstance(principal, dict):
        return []
    found = principal.get(kind)
    if found is UNKNOWN:
        return None
    items = listed(found)
    return None if UNKNOWN in items else items


class Condition(NamedTuple):
    """One key of one condition operator: `"ForAnyValue:StringEqualsIfExists": {"aws:SourceArn": [...]}`."""

    operator: str
    """As written (for messages)."""
    qualifier: str
    """`foranyvalue`, `forallvalues` or '' (lower case)."""
    base: str
    """The operator without qualifier and IfExists, lower case (`stringequals`)."""
    if_exists: bool
    key: str
    """As written; compare with `key.lower()` (condition keys are case-insensitive)."""
    values: list[Any]
    """The values (UNKNOWN items where unknown during preview)."""


def conditions(st: dict[str, Any]) -> tuple[list[Condition], str | None]:
    """(the statement's conditions, the path part that is unknown during preview or None)."""
    block = st.get("Condition")
    if block is UNKNOWN:
        return [], "Condition"
    if not isinstance(block, dict):
        return [], None
    out, unknown = [], None
    for operator, keys in block.items():
        qualifier, _, base = operator.rpartition(":")
        lowered = base.lower()
        if_exists = lowered.endswith("ifexists")
        lowered = lowered[: -len("ifexists")] if if_exists else lowered
        if keys is UNKNOWN:
            unknown = unknown or join_path("Condition", operator)
            continue
        if not isinstance(keys, dict):
            continue
        for key, values in keys.items():
            out.append(Condition(operator, qualifier.lower(), lowered, if_exists, key, listed(values)))
    return out, unknown


def describe_statement(path: str, st: dict[str, Any]) -> str:
    """`Statement[0]` or `Statement[0] (Sid 'DenyOutsideVpce')`."""
    sid = st.get("Sid")
    return f"{path} (Sid {sid!r})" if isinstance(sid, str) and sid else path
