"""Validation as a table of rules whose one-line messages quote the field, the value and what is allowed."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

_Class = TypeVar("_Class", bound=type)
"""A class a decorator hands back as it was given, so that type checkers keep its name and signature."""


class ConfigError(ValueError):
    """A bad input, reported in one line that names the field and the value (and, raised inside a component, which
    component and resource: `GpuNodePool 'gpu': instance_types: [...] is not valid: ...`)."""

    def __init__(self, field: str, value: Any, expected: str, where: str | None = None) -> None:
        self.field: str = field
        self.value: Any = value
        self.expected: str = expected
        self.where: str | None = where
        text = f"{field}: {value!r} is not valid: {expected}"
        super().__init__(f"{where}: {text}" if where else text)

    @property
    def detail(self) -> str:
        """The message without the place: `field: value is not valid: expected`."""
        return f"{self.field}: {self.value!r} is not valid: {self.expected}"

    def located(self, where: str) -> ConfigError:
        """The same error, said as raised in `where` (kept when it already names a place: the innermost wins)."""
        return self if self.where else ConfigError(self.field, self.value, self.expected, where)


_CDI_FEATURE_FLAG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def is_cdi_feature_flag(v: Any) -> bool:
    """A CDI feature flag as the NVIDIA device plugin takes them: lower-case words joined by '-'."""
    return isinstance(v, str) and bool(_CDI_FEATURE_FLAG.match(v))


def names_its_errors(cls: _Class) -> _Class:
    """Class decorator for a ComponentResource: a ConfigError its constructor raises names the component type and
    the resource name (`Kind 'name': ...`), so an error in a program of many components says which one."""
    init = cls.__init__

    def __init__(self: Any, name: str, *args: Any, **kwargs: Any) -> None:
        try:
            init(self, name, *args, **kwargs)
        except ConfigError as e:
            raise e.located(f"{cls.__name__} {name!r}") from None

    __init__.__doc__, __init__.__wrapped__ = init.__doc__, init  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[method-assign]
    return cls


@dataclass(frozen=True)
class Rule:
    """One check on one field: `check(value)` is True when the value is acceptable."""

    field: str
    """Field name as the user wrote it (config key, manifest path)."""
    check: Callable[[Any], bool]
    """Predicate over the field's value."""
    expected: str
    """What an acceptable value looks like, for the error message."""


def first_violation(values: Mapping[str, Any], rules: Iterable[Rule], prefix: str = "") -> ConfigError | None:
    """The first rule `values` breaks, as a ConfigError, or None. Fields absent from `values` are not checked."""
    for rule in rules:
        if rule.field not in values:
            continue
        value = values[rule.field]
        try:
            ok = rule.check(value)
        except (TypeError, ValueError, AttributeError):
            ok = False
        if not ok:
            return ConfigError(prefix + rule.field, value, rule.expected)
    return None


def validate(values: Mapping[str, Any], rules: Iterable[Rule], prefix: str = "") -> None:
    """Raise the first violation of `rules` by `values` (see `first_violation`)."""
    err = first_violation(values, rules, prefix)
    if err is not None:
        raise err


def is_int_between(lo: int, hi: int) -> Callable[[Any], bool]:
    """Predicate: an int (not a bool) within [lo, hi]."""
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def is_one_of(*allowed: str) -> Callable[[Any], bool]:
    """Predicate: one of the allowed strings."""
    return lambda v: v in allowed
