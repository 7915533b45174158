"""Check KEDA manifests (TriggerAuthentication, ClusterTriggerAuthentication, ScaledJob) against the pinned KEDA.

Every KEDA object the stack declares goes through `check_keda_manifest` at construction, so a value the pinned KEDA
version's CRD (or its operator) would refuse fails `pulumi preview` with one line instead of failing in the cluster
hours later. The rules are a table; the version facts in them (provider enum, deprecated providers, identity owners,
rollout and scaling strategies) come from `catalogue`, never from here. Values that are Outputs (a queue URL, a role
ARN from a resource) are not judged here; everything a rule looks at is a plain value by convention.

Error format: `<Kind> <namespace>/<name> <field path>: <value> is not valid: <what is allowed>`.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pulumi

from ..catalogue import (
    KEDA_DEPRECATED_PROVIDERS,
    KEDA_IDENTITY_OWNERS,
    KEDA_ROLLOUT_STRATEGIES,
    KEDA_VERSION,
    join,
    keda_providers,
    keda_scaling_strategy_problem,
)
from .validation import ConfigError

API_VERSION = "keda.sh/v1alpha1"
"""The API version of every KEDA custom resource the stack declares."""

AUTH_KINDS = ("TriggerAuthentication", "ClusterTriggerAuthentication")
"""Kinds an `authenticationRef.kind` may name."""

SQS_TRIGGER = "aws-sqs-queue"
"""KEDA's trigger type for an SQS queue."""

SQS_METADATA_KEYS = ("queueURL", "queueURLFromEnv", "queueLength", "activationQueueLength", "awsRegion",
                     "awsEndpoint", "scaleOnInFlight", "scaleOnDelayed")
"""Metadata keys of the aws-sqs-queue scaler the stack accepts. KEDA ignores unknown keys silently, so a typo
(`queueUrl`) would scale nothing: unknown keys are refused here instead."""

CREDENTIAL_METADATA_KEYS = ("awsAccessKeyID", "awsSecretAccessKey", "awsSessionToken", "awsAccessKeyIDFromEnv",
                            "awsSecretAccessKeyFromEnv", "awsSessionTokenFromEnv")
"""Trigger metadata keys that carry (or point at) static AWS keys: refused; identity comes from a
TriggerAuthentication with podIdentity."""

DEPRECATED_METADATA_KEYS = {
    "identityOwner": "trigger metadata identityOwner is deprecated since KEDA 2.13 (removed in v3); set "
                     "podIdentity.identityOwner or roleArn in the TriggerAuthentication",
    "awsRoleArn": "trigger metadata awsRoleArn is deprecated; set podIdentity.roleArn in the TriggerAuthentication",
}
"""Trigger metadata keys KEDA still reads but the stack refuses, with what to use instead."""

CREDENTIAL_AUTH_PARAMETERS = ("awsAccessKeyID", "awsSecretAccessKey", "awsSessionToken")
"""TriggerAuthentication `secretTargetRef`/`env` parameters that carry static AWS keys: refused."""

_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_INT_STRING = re.compile(r"^\d+$")
REDACTED = "<redacted>"
"""What an error message shows instead of a value that may be a secret."""

_ABSENT = object()


def _is_plain(value: Any) -> bool:
    """A value the rules can judge now (not an Output, not an unknown)."""
    return not isinstance(value, pulumi.Output) and type(value).__name__ != "Unknown"


def _walk(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Yield (concrete path, value) for a dotted path with `[*]` (list items) and `{*}` (map entries)."""
    parts = path.split(".")

    def rec(node: Any, i: int, done: str) -> Iterator[tuple[str, Any]]:
        if i == len(parts):
            yield done, node
            return
        part = parts[i]
        if part == "{*}":
            if isinstance(node, dict):
                for k, v in node.items():
                    yield from rec(v, i + 1, f"{done}.{k}")
            return
        star = part.endswith("[*]")
        key = part[:-3] if star else part
        if not isinstance(node, dict):
            return
        child = node.get(key, _ABSENT)
        here = f"{done}.{key}" if done else key
        if star:
            if isinstance(child, list):
                for j, item in enumerate(child):
                    yield from rec(item, i + 1, f"{here}[{j}]")
            elif child is not _ABSENT:
                yield here, child
            return
        if child is _ABSENT:
            if i == len(parts) - 1:
                yield here, _ABSENT
            return
        yield from rec(child, i + 1, here)

    yield from rec(obj, 0, "")


def _parent(manifest: dict, concrete: str) -> Any:
    """The object holding the field at `concrete` (e.g. the trigger for `spec.triggers[0].metadata`)."""
    node: Any = manifest
    for part in concrete.split(".")[:-1]:
        m = re.match(r"^(\w+)(?:\[(\d+)\])?$", part)
        if not m or not isinstance(node, dict):
            return None
        node = node.get(m.group(1))
        if m.group(2) is not None:
            node = node[int(m.group(2))] if isinstance(node, list) else None
    return node


Check = Callable[[Any, dict[str, Any], str, str], "str | tuple[Any, str] | None"]
"""`check(value, manifest, concrete_path, keda_version)` -> None when fine; else what is allowed (str), or
(value to show, what is allowed) to redact or reshape the value in the message."""


@dataclass(frozen=True)
class SchemaRule:
    """One field of one or more KEDA kinds, and what values the pinned KEDA accepts there."""

    kinds: tuple[str, ...]
    """Kinds the rule applies to."""
    path: str
    """Dotted field path; `[*]` walks list items, `{*}` map entries."""
    check: Check
    """Judges a present value (never called for an absent one unless `required`)."""
    required: bool = False
    """Whether the field must be present (then `check` is not called when it is absent)."""
    required_why: str = ""
    """What to say when a required field is absent."""


def _int_at_least(lo: int) -> Check:
    def check(v, _m, _p, _ver):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            return f"an integer >= {lo}"
        return None
    return check


def _one_of(values_for: Callable[[str], tuple[str, ...]], note: str = "") -> Check:
    def check(v, _m, _p, ver):
        allowed = values_for(ver)
        if v not in allowed:
            return f"KEDA {ver} accepts {join(allowed)}{note}"
        return None
    return check


def _provider(v, _m, _p, ver):
    allowed = keda_providers(ver)
    notes = "; ".join(f"{p}: {why}" for p, why in KEDA_DEPRECATED_PROVIDERS.items() if p in allowed)
    if v not in allowed:
        return f"KEDA {ver} accepts {join(allowed)}" + (f" (refused here: {notes})" if notes else "")
    if v in KEDA_DEPRECATED_PROVIDERS:
        ok = [p for p in allowed if p not in KEDA_DEPRECATED_PROVIDERS]
        return f"{KEDA_DEPRECATED_PROVIDERS[v]}; allowed: {join(ok)}"
    return None


def _role_arn(v, manifest, path, _ver):
    pod_identity = _parent(manifest, path) or {}
    if pod_identity.get("identityOwner") is not None:
        return (f"roleArn and identityOwner are mutually exclusive (identityOwner is "
                f"{pod_identity.get('identityOwner')!r}); set one of them")
    if pod_identity.get("provider") != "aws":
        return "roleArn only with provider 'aws'"
    if _is_plain(v) and not (isinstance(v, str) and _ROLE_ARN.match(v)):
        return "an IAM role ARN, arn:aws:iam::<12-digit account>:role/<name>"
    return None


def _identity_owner(v, manifest, path, ver):
    pod_identity = _parent(manifest, path) or {}
    if v not in KEDA_IDENTITY_OWNERS:
        return f"one of {join(KEDA_IDENTITY_OWNERS)} (mutually exclusive with roleArn)"
    if pod_identity.get("provider") != "aws":
        return "identityOwner only with provider 'aws'"
    return None


def _auth_parameter(v, _m, _p, _ver):
    if v in CREDENTIAL_AUTH_PARAMETERS:
        return ("no static AWS keys in a TriggerAuthentication (clinical data: no long-lived credentials); use "
                "podIdentity provider 'aws' with roleArn")
    return None


def _rollout_strategy(v, _m, _p, _ver):
    if v not in KEDA_ROLLOUT_STRATEGIES:
        return f"one of {join(KEDA_ROLLOUT_STRATEGIES)} (gradual: an update never kills running jobs)"
    return None


def _scaling_strategy(v, _m, _p, ver):
    problem = keda_scaling_strategy_problem(v, ver) if isinstance(v, str) else "a string"
    return problem


def _deprecated_field(why: str) -> Check:
    return lambda v, _m, _p, _ver: why


def _auth_ref(v, _m, _p, _ver):
    if not isinstance(v, dict):
        return ("an authenticationRef {name: <TriggerAuthentication>} (the scaler's identity; never the "
                "operator's ambient credentials)")
    name = v.get("name")
    if not name or (_is_plain(name) and not isinstance(name, str)):
        return "an authenticationRef with a non-empty name"
    kind = v.get("kind", "TriggerAuthentication")
    if kind not in AUTH_KINDS:
        return f"authenticationRef.kind one of {join(AUTH_KINDS)}"
    return None


def _trigger_type(v, _m, _p, _ver):
    if not isinstance(v, str) or not v:
        return "a non-empty trigger type, e.g. 'aws-sqs-queue'"
    return None


def _metadata(v, manifest, path, _ver):
    if not isinstance(v, dict):
        return "a map of string values"
    trigger = _parent(manifest, path) or {}
    for key, value in v.items():
        if key in CREDENTIAL_METADATA_KEYS:
            return (f"{path}.{key}", REDACTED), ("no inline AWS credentials in trigger metadata (clinical data: no "
                                                 "long-lived keys); reference a TriggerAuthentication with podIdentity "
                                                 "provider 'aws' through authenticationRef")
        if key in DEPRECATED_METADATA_KEYS:
            return (f"{path}.{key}", value), DEPRECATED_METADATA_KEYS[key]
        if _is_plain(value) and not isinstance(value, str):
            return (f"{path}.{key}", value), "a string (KEDA trigger metadata values are strings, e.g. \"1\")"
    if trigger.get("type") != SQS_TRIGGER:
        return None
    for key, value in v.items():
        if key not in SQS_METADATA_KEYS:
            return (f"{path}.{key}", value), f"a known {SQS_TRIGGER} metadata key: {join(SQS_METADATA_KEYS)}"
    if "queueURL" not in v and "queueURLFromEnv" not in v:
        return (f"{path}.queueURL", None), f"{SQS_TRIGGER} needs queueURL (or queueURLFromEnv)"
    if "awsRegion" not in v:
        return (f"{path}.awsRegion", None), f"{SQS_TRIGGER} needs awsRegion, e.g. 'eu-west-1'"
    checks = {
        "queueLength": (lambda s: _INT_STRING.match(s) and int(s) >= 1, "a whole number >= 1 as a string, e.g. \"1\""),
        "activationQueueLength": (lambda s: _INT_STRING.match(s), "a whole number >= 0 as a string, e.g. \"0\""),
        "awsRegion": (lambda s: _REGION.match(s), "an AWS region name, e.g. 'eu-west-1'"),
        "scaleOnInFlight": (lambda s: s in ("true", "false"), "\"true\" or \"false\""),
        "scaleOnDelayed": (lambda s: s in ("true", "false"), "\"true\" or \"false\""),
    }
    for key, (ok, expected) in checks.items():
        value = v.get(key)
        if value is not None and _is_plain(value) and not ok(value):
            return (f"{path}.{key}", value), expected
    return None


_TA = AUTH_KINDS
_SJ = ("ScaledJob",)

RULES: list[SchemaRule] = [
    # TriggerAuthentication / ClusterTriggerAuthentication
    SchemaRule(_TA, "spec.podIdentity", lambda v, *_: None if isinstance(v, dict) else "a podIdentity map",
               required=True, required_why="a podIdentity block (provider 'aws' with roleArn or identityOwner): the "
                                           "stack authenticates scalers by workload identity only"),
    SchemaRule(_TA, "spec.podIdentity.provider", _provider, required=True,
               required_why="a provider (KEDA's CRD requires it)"),
    SchemaRule(_TA, "spec.podIdentity.identityOwner", _identity_owner),
    SchemaRule(_TA, "spec.podIdentity.roleArn", _role_arn),
    SchemaRule(_TA, "spec.secretTargetRef[*].parameter", _auth_parameter),
    SchemaRule(_TA, "spec.env[*].parameter", _auth_parameter),
    # ScaledJob
    SchemaRule(_SJ, "spec.jobTargetRef", lambda v, *_: None if isinstance(v, dict) else "a batch/v1 JobSpec map",
               required=True, required_why="a jobTargetRef (the Job to run per scale step)"),
    SchemaRule(_SJ, "spec.triggers", lambda v, *_: None if isinstance(v, list) and v else "a non-empty list",
               required=True, required_why="at least one trigger"),
    SchemaRule(_SJ, "spec.pollingInterval", _int_at_least(1)),
    SchemaRule(_SJ, "spec.maxReplicaCount", _int_at_least(1)),
    SchemaRule(_SJ, "spec.minReplicaCount", _int_at_least(0)),
    SchemaRule(_SJ, "spec.successfulJobsHistoryLimit", _int_at_least(0)),
    SchemaRule(_SJ, "spec.failedJobsHistoryLimit", _int_at_least(0)),
    SchemaRule(_SJ, "spec.rolloutStrategy", _deprecated_field(
        "spec.rolloutStrategy is deprecated; use spec.rollout.strategy (" + join(KEDA_ROLLOUT_STRATEGIES) + ")")),
    SchemaRule(_SJ, "spec.rollout.strategy", _rollout_strategy),
    SchemaRule(_SJ, "spec.scalingStrategy.strategy", _scaling_strategy),
    SchemaRule(_SJ, "spec.triggers[*].type", _trigger_type, required=True, required_why="a trigger type"),
    SchemaRule(_SJ, "spec.triggers[*].authenticationRef", _auth_ref, required=True,
               required_why="an authenticationRef {name: <TriggerAuthentication>} (the scaler's identity)"),
    SchemaRule(_SJ, "spec.triggers[*].metadata", _metadata, required=True,
               required_why="trigger metadata (KEDA's CRD requires it)"),
]
"""The rules, in the order they are checked (the first failure is reported)."""


def _where(manifest: dict) -> str:
    kind = manifest.get("kind", "?")
    meta = manifest.get("metadata") or {}
    name = meta.get("name", "?")
    if kind == "ClusterTriggerAuthentication" or not meta.get("namespace"):
        return f"{kind} {name}"
    return f"{kind} {meta.get('namespace')}/{name}"


def keda_manifest_problems(manifest: dict[str, Any], keda_version: str = KEDA_VERSION) -> list[ConfigError]:
    """Every rule `manifest` breaks for `keda_version`, as ConfigErrors (empty when it is fine)."""
    kind = manifest.get("kind")
    where = _where(manifest)
    problems: list[ConfigError] = []
    if manifest.get("apiVersion") != API_VERSION:
        problems.append(ConfigError(f"{where} apiVersion", manifest.get("apiVersion"), API_VERSION))
    if kind not in AUTH_KINDS + _SJ:
        problems.append(ConfigError(f"{where} kind", kind, f"one of {join(AUTH_KINDS + _SJ)}"))
        return problems
    for rule in RULES:
        if kind not in rule.kinds:
            continue
        for concrete, value in _walk(manifest, rule.path):
            if value is _ABSENT:
                if rule.required:
                    problems.append(ConfigError(f"{where} {concrete}", None, f"required: {rule.required_why}"))
                continue
            if not _is_plain(value):
                continue
            result = rule.check(value, manifest, concrete, keda_version)
            if result is None:
                continue
            if isinstance(result, tuple):
                (field_path, shown), expected = result
                problems.append(ConfigError(f"{where} {field_path}", shown, expected))
            else:
                problems.append(ConfigError(f"{where} {concrete}", value, result))
    return problems


def check_keda_manifest(manifest: dict[str, Any], keda_version: str = KEDA_VERSION) -> dict[str, Any]:
    """Raise the first problem of `manifest` (a one-line ConfigError) for `keda_version`; return the manifest."""
    problems = keda_manifest_problems(manifest, keda_version)
    if problems:
        raise problems[0]
    return manifest
