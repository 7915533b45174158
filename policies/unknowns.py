"""The preview backstop: turn the engine's unknown values into explicit markers so no mandatory rule passes silently.

During `pulumi preview` a property computed from another resource's output reaches the pack as the engine's unknown
sentinel (e.g. `04da6b54-80e4-46f7-96ec-b56ff0331ba9`). pulumi-policy wraps props in proxies that raise
`UnknownValueError` when such a value is read; the servicer catches it and reports only an ADVISORY "can't run policy
during preview", so a mandatory rule whose input is an Output would pass without ever judging it.

This pack closes that gap in two layers:

1. Every rule reads its resource through `plain()`, which copies the proxied props into ordinary dicts and lists and
   replaces each unknown value by the `UNKNOWN` marker instead of raising. A rule that needs a value to reach its
   verdict and finds `UNKNOWN` reports a violation at its own enforcement level (`unknown_message()`), naming the
   field and saying it must be a plain value at preview. Unknowns in fields a verdict does not depend on (an image
   reference, a queue URL) are ignored.
2. `guard()` / `guard_stack()` wrap every rule: an `UnknownValueError` that still escapes (a rule that read a proxy
   directly) becomes a violation at the rule's level, not an advisory; any other exception becomes a violation too
   (fail closed) instead of an RPC error that hides which resource broke the rule.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pulumi_policy import ReportViolation, ResourceValidationArgs, StackValidationArgs
from pulumi_policy import proxy as _proxy
from pulumi_policy.proxy import UnknownValueError
from pulumi_policy.secret import Secret

SENTINELS: frozenset[str] = frozenset({
    _proxy.UNKNOWN_BOOLEAN_VALUE, _proxy.UNKNOWN_NUMBER_VALUE, _proxy.UNKNOWN_STRING_VALUE,
    _proxy.UNKNOWN_ARRAY_VALUE, _proxy.UNKNOWN_ASSET_VALUE, _proxy.UNKNOWN_ARCHIVE_VALUE,
    _proxy.UNKNOWN_OBJECT_VALUE,
})
"""The engine's unknown-value sentinels as they arrive in a Struct (the engine itself always sends the string one)."""

UNKNOWN_STRING = _proxy.UNKNOWN_STRING_VALUE
"""The sentinel the engine sends for any computed value during preview."""


class _Unknown:
    """The marker `plain()` puts where the engine sent an unknown value."""

    _instance: _Unknown | None = None

    def __new__(cls) -> _Unknown:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<unknown during preview>"

    def __bool__(self) -> bool:
        # An unknown is never "present and truthy" by accident: rules test `is UNKNOWN` first.
        return False


UNKNOWN = _Unknown()
"""A value that is unknown during preview (an Output the engine cannot resolve yet)."""


def is_unknown(value: Any) -> bool:
    """True for the `UNKNOWN` marker or a raw engine sentinel string."""
    return value is UNKNOWN or (isinstance(value, str) and value in SENTINELS)


def plain(value: Any) -> Any:
    """A deep copy of proxied (or raw) props as dicts, lists and scalars, with every unknown replaced by `UNKNOWN`.

    Uses only the proxies' public Mapping/Sequence interface: iterating keys and taking a length never raises; reading
    an item raises `UnknownValueError` exactly when the item is unknown, and that item becomes `UNKNOWN`.
    """
    if isinstance(value, Secret):
        return plain(value.value)
    if isinstance(value, str):
        return UNKNOWN if value in SENTINELS else value
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key in list(value):
            try:
                item = value[key]
            except UnknownValueError:
                out[key] = UNKNOWN
                continue
            out[key] = plain(item)
        return out
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        items: list[Any] = []
        for i in range(len(value)):
            try:
                item = value[i]
            except UnknownValueError:
                items.append(UNKNOWN)
                continue
            items.append(plain(item))
        return items
    return value


def unknown_message(path: str, rule_needs: str) -> str:
    """The one-line violation for a value a mandatory verdict depends on but that is unknown during preview."""
    return (f"{path} is unknown during preview (computed from another resource's output), so this rule cannot "
            f"check {rule_needs}; pass it as a plain value, not an Output, so the rule can judge it at preview")


Check = Callable[[ResourceValidationArgs], Iterable[str]]
"""A resource rule's body: yields one message per violation."""

StackCheck = Callable[[StackValidationArgs], Iterable[tuple[str | None, str]]]
"""A stack rule's body: yields (urn or None, message) per violation."""


def _escaped(e: UnknownValueError) -> str:
    return (f"{e.message}; this rule needs that value to decide, and a mandatory rule must not pass silently: "
            "pass it as a plain value, not an Output")


def _crashed(e: Exception) -> str:
    return (f"the rule could not read this resource ({type(e).__name__}: {e}); the properties do not have the shape "
            "the rule expects — fix the resource (or report a bug in the policy pack)")


def _is_not_applicable(e: BaseException) -> bool:
    # pulumi-policy's `args.not_applicable()` signals with a private exception class; let it through untouched.
    return type(e).__name__ == "_NotApplicableError"


def guard(check: Check) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    """Wrap a resource rule body as a pulumi-policy `validate` callback that never lets an unknown pass silently."""

    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        try:
            for message in check(args):
                report_violation(message, None)
        except UnknownValueError as e:
            report_violation(_escaped(e), None)
        except Exception as e:  # noqa: BLE001 (fail closed: a crash must not look like a pass)
            if _is_not_applicable(e):
                raise
            report_violation(_crashed(e), None)

    validate.__name__ = getattr(check, "__name__", "validate")
    validate.__doc__ = getattr(check, "__doc__", None)
    return validate


def guard_stack(check: StackCheck) -> Callable[[StackValidationArgs, ReportViolation], None]:
    """Wrap a stack rule body the same way as `guard`."""

    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        try:
            for urn, message in check(args):
                report_violation(message, urn)
        except UnknownValueError as e:
            report_violation(_escaped(e), None)
        except Exception as e:  # noqa: BLE001
            if _is_not_applicable(e):
                raise
            report_violation(_crashed(e), None)

    validate.__name__ = getattr(check, "__name__", "validate")
    validate.__doc__ = getattr(check, "__doc__", None)
    return validate
