"""Which KMS key a resource's key field names: a customer key the plan creates (by its alias, or the dependency the
engine records for the key's ARN or id), an AWS-managed key (`alias/aws/...`), none, one from another stack, or
one unknown during preview that no dependency traces."""
from __future__ import annotations

from typing import Any, NamedTuple

from .plan import Res
from .resources import fmt
from .unknowns import UNKNOWN

KMS_KEY = "aws:kms/key:Key"
KMS_ALIAS = "aws:kms/alias:Alias"

PLAN, AWS_MANAGED, ABSENT, OUTSIDE, UNTRACED = "plan", "aws-managed", "absent", "outside", "untraced"
"""The kinds of `KeyRef`: a key of this plan, an AWS-managed key, no key, a key another stack made, unknown."""


class KeyRef(NamedTuple):
    """What a key field names."""

    kind: str
    key: Res | None
    """The plan's aws:kms/key:Key when `kind` is PLAN (None when an alias of the plan names a key it does not hold)."""
    value: Any


def is_aws_managed(value: str) -> bool:
    """`alias/aws/s3`, `arn:aws:kms:...:alias/aws/sqs`: a key AWS owns the policy of (no rotation or grant to judge,
    and any principal of the account with S3 or SQS access can use it)."""
    alias = value.split(":alias/", 1)[1] if ":alias/" in value else value.removeprefix("alias/") \
        if value.startswith("alias/") else None
    return alias is not None and alias.startswith("aws/")


def _alias_name(value: str) -> str | None:
    if ":alias/" in value:
        return "alias/" + value.split(":alias/", 1)[1]
    return value if value.startswith("alias/") else None


def _keys_behind(res: Res, by_urn: dict[str, Res], depth: int = 0) -> list[Res]:
    """The plan's keys `res` depends on, directly or through an alias."""
    out = []
    for urn in res.dependencies:
        dep = by_urn.get(urn)
        if dep is None:
            continue
        if dep.type == KMS_KEY:
            out.append(dep)
        elif dep.type == KMS_ALIAS and depth < 2:
            out += _keys_behind(dep, by_urn, depth + 1)
    return out


def key_ref(resources: list[Res], res: Res, value: Any) -> KeyRef:
    """What `value` (the key field of `res`) names; see the module docstring."""
    if value is None or value == "":
        return KeyRef(ABSENT, None, value)
    if isinstance(value, str) and is_aws_managed(value):
        return KeyRef(AWS_MANAGED, None, value)
    by_urn = {r.urn: r for r in resources}
    alias = _alias_name(value) if isinstance(value, str) else None
    if alias is not None:
        for a in resources:
            if a.type == KMS_ALIAS and a.props.get("name") == alias:
                keys = _keys_behind(a, by_urn)
                return KeyRef(PLAN, keys[0] if keys else None, value)
    keys = _keys_behind(res, by_urn)
    if keys:
        return KeyRef(PLAN, keys[0], value)
    return KeyRef(UNTRACED if value is UNKNOWN else OUTSIDE, None, value)


def key_problem(ref: KeyRef, field: str) -> str | None:
    """Why the key field does not name a customer key of this plan (None when it does, or when it names another
    stack's: the caller decides what that means in its scope)."""
    if ref.kind == ABSENT:
        return f"{field} is not set (an AWS-owned or AWS-managed key: no key policy of yours, no rotation to check)"
    if ref.kind == AWS_MANAGED:
        return (f"{field} = {fmt(ref.value)} is an AWS-managed key (its key policy lets every principal of the "
                "account that may use the service decrypt with it)")
    return None
