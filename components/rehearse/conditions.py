"""IAM Condition blocks: parsing every operator family and deciding one block against a request context.

What it implements, from the IAM User Guide ("IAM JSON policy elements: Condition operators", "Conditions with
multiple context keys or values", "Policy variables"):
- operators String*, Numeric*, Date*, Bool, BinaryEquals, IpAddress/NotIpAddress (v4 and v6), Arn*, Null; the
  `...IfExists` suffix (an absent key makes the condition true) and the `ForAllValues:`/`ForAnyValue:` prefixes (an
  absent or empty key: ForAllValues true, ForAnyValue false, unless IfExists);
- several operators or keys are AND'ed, several values of one key OR'ed, and a negated operator NOR's them; a negated
  operator on an absent key is true; `Null: true` means the key is absent;
- context keys are case-insensitive; policy variables `${key}`, `${key, 'default'}`, `${*}`, `${?}`, `${$}` are
  substituted in String* and Arn* values (only in Version 2012-10-17 policies). A variable whose key is absent (or
  multivalued) without a default matches nothing, and makes a negated operator false ("any attempt to match it
  fails", Policy variables, "Principal key values"). ArnEquals and ArnLike are the same operator (each of the six
  colon-separated parts matched apart, wildcards allowed in each), as the docs say.
- a multivalued key under an operator without a set prefix never matches (AWS asks for ForAllValues/ForAnyValue on
  multivalued keys); a one-element list counts as the single value.
"""
from __future__ import annotations

import base64
import binascii
import functools
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation

# The base operators: lower-cased name -> (canonical name, family, comparison, negated).
_OPERATORS: dict[str, tuple[str, str, str, bool]] = {
    name.lower(): (name, family, cmp, negated) for name, family, cmp, negated in [
        ("StringEquals", "string", "eq", False), ("StringNotEquals", "string", "eq", True),
        ("StringEqualsIgnoreCase", "string", "eq-ic", False), ("StringNotEqualsIgnoreCase", "string", "eq-ic", True),
        ("StringLike", "string", "like", False), ("StringNotLike", "string", "like", True),
        ("NumericEquals", "numeric", "eq", False), ("NumericNotEquals", "numeric", "eq", True),
        ("NumericLessThan", "numeric", "lt", False), ("NumericLessThanEquals", "numeric", "le", False),
        ("NumericGreaterThan", "numeric", "gt", False), ("NumericGreaterThanEquals", "numeric", "ge", False),
        ("DateEquals", "date", "eq", False), ("DateNotEquals", "date", "eq", True),
        ("DateLessThan", "date", "lt", False), ("DateLessThanEquals", "date", "le", False),
        ("DateGreaterThan", "date", "gt", False), ("DateGreaterThanEquals", "date", "ge", False),
        ("Bool", "bool", "eq", False), ("BinaryEquals", "binary", "eq", False),
        ("IpAddress", "ip", "in", False), ("NotIpAddress", "ip", "in", True),
        ("ArnEquals", "arn", "like", False), ("ArnLike", "arn", "like", False),
        ("ArnNotEquals", "arn", "like", True), ("ArnNotLike", "arn", "like", True),
        ("Null", "null", "null", False),
    ]
}
_SET_PREFIXES = {"forallvalues": "ForAllValues", "foranyvalue": "ForAnyValue"}
_COMPARE = {"eq": lambda a, b: a == b, "lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
            "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_DEFAULT = re.compile(r"^\s*([^,]+?)\s*,\s*'([^']*)'\s*$")
_SPECIAL = {"*": "*", "?": "?", "$": "$"}

Context = Mapping[str, str | list[str]]
"""A request context with lower-cased keys: each value a string or, for a multivalued key, a list of strings."""


@dataclass(frozen=True)
class Condition:
    """One (operator, key, values) triple of a Condition block."""

    operator: str
    """The operator as written in the policy (`ForAnyValue:StringLikeIfExists`)."""
    base: str
    """The canonical base operator (`StringLike`)."""
    key: str
    """The context key, lower-cased (keys are case-insensitive)."""
    values: tuple[str, ...]
    """The policy's values as strings (JSON true/false/numbers turned into their text)."""
    if_exists: bool = False
    """Whether the operator carries the IfExists suffix; default False."""
    set_prefix: str | None = None
    """`ForAllValues`, `ForAnyValue` or None (the default)."""

    @property
    def family(self) -> str:
        return _OPERATORS[self.base.lower()][1]

    @property
    def negated(self) -> bool:
        return _OPERATORS[self.base.lower()][3]


def _text(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    return None


def parse_operator(operator: str) -> tuple[str, str | None, bool]:
    """Split `ForAnyValue:StringLikeIfExists` into ("StringLike", "ForAnyValue", True); ValueError when unknown."""
    prefix, _, rest = operator.rpartition(":")
    set_prefix = None
    if prefix:
        set_prefix = _SET_PREFIXES.get(prefix.lower())
        if set_prefix is None:
            raise ValueError(f"unknown set operator {prefix!r} (ForAllValues or ForAnyValue)")
    if_exists = rest.lower().endswith("ifexists") and rest.lower() != "ifexists"
    base = rest[: -len("IfExists")] if if_exists else rest
    known = _OPERATORS.get(base.lower())
    if known is None:
        raise ValueError(f"unknown condition operator {operator!r}")
    if known[1] == "null" and (if_exists or set_prefix):
        raise ValueError(f"condition operator {operator!r}: Null takes neither IfExists nor a set prefix")
    return known[0], set_prefix, if_exists


def parse_conditions(block: object) -> tuple[Condition, ...]:
    """The Condition element as a tuple of Conditions; ValueError (one line) on anything malformed."""
    if not isinstance(block, Mapping) or not block:
        raise ValueError(f"Condition must be a non-empty object of operators, got {block!r}")
    out: list[Condition] = []
    for operator, keys in block.items():
        base, set_prefix, if_exists = parse_operator(str(operator))
        if not isinstance(keys, Mapping) or not keys:
            raise ValueError(f"condition operator {operator!r} must map context keys to values, got {keys!r}")
        for key, raw in keys.items():
            raw_values = raw if isinstance(raw, list) else [raw]
            values = tuple(_text(v) for v in raw_values)
            if not values or any(v is None for v in values):
                raise ValueError(f"condition {operator!r} key {key!r}: values must be strings, numbers or booleans, "
                                 f"got {raw!r}")
            cond = Condition(str(operator), base, str(key).lower(), values, if_exists, set_prefix)  # type: ignore[arg-type]
            _check_values(cond)
            out.append(cond)
    return tuple(out)


def _check_values(cond: Condition) -> None:
    """Refuse a value its operator cannot read (a number that is not one, a bad CIDR, date, boolean or base-64)."""
    for v in cond.values:
        family = cond.family
        ok = {"numeric": lambda: _number(v) is not None, "date": lambda: _date(v) is not None,
              "bool": lambda: v.lower() in ("true", "false"), "null": lambda: v.lower() in ("true", "false"),
              "ip": lambda: _network(v) is not None, "binary": lambda: _binary(v) is not None,
              "arn": lambda: "${" in v or len(v.split(":", 5)) == 6}.get(family, lambda: True)()
        if not ok:
            raise ValueError(f"condition {cond.operator!r} key {cond.key!r}: {v!r} is not a valid {family} value")


def _number(v: str) -> Decimal | None:
    if not _NUMBER.match(v.strip()):
        return None
    try:
        return Decimal(v.strip())
    except InvalidOperation:
        return None


def _date(v: str) -> float | None:
    """Seconds since the epoch: an integer is epoch seconds (aws:EpochTime), else ISO 8601 / W3C (a date alone is
    midnight UTC; no offset means UTC)."""
    v = v.strip()
    if re.fullmatch(r"-?\d+", v):
        return float(v)
    try:
        when = datetime.fromisoformat(v.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def _network(v: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(v.strip(), strict=False)
    except ValueError:
        return None


def _binary(v: str) -> bytes | None:
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        return None


def _lookup(context: Context, key: str) -> str | list[str] | None:
    value = context.get(key.lower())
    if value is None or (isinstance(value, list) and not value):
        return None
    return value


def resolve(text: str, context: Context, variables: bool) -> list[tuple[str, bool]] | None:
    """`text` as a list of (piece, literal) with variables substituted: literal pieces are matched as they are,
    the others may hold the wildcards * and ?. None when a variable has no value and no default."""
    if not variables or "${" not in text:
        return [(text, False)]
    out: list[tuple[str, bool]] = []
    pos = 0
    for m in _VARIABLE.finditer(text):
        out.append((text[pos:m.start()], False))
        name = m.group(1)
        if name in _SPECIAL:
            out.append((_SPECIAL[name], True))
        else:
            default = _DEFAULT.match(name)
            key = default.group(1) if default else name.strip()
            value = _lookup(context, key)
            if isinstance(value, list):
                value = value[0] if len(value) == 1 else None
            if value is None and default is None:
                return None
            out.append((value if value is not None else default.group(2), True))  # type: ignore[union-attr]
        pos = m.end()
    out.append((text[pos:], False))
    return out


def _tokens(pieces: list[tuple[str, bool]], wildcards: bool) -> tuple[tuple[str, bool], ...]:
    """Characters tagged wildcard or not: * and ? are wildcards only in the policy's own text."""
    return tuple((c, wildcards and not literal and c in "*?") for piece, literal in pieces for c in piece)


@functools.lru_cache(maxsize=4096)
def _regex(tokens: tuple[tuple[str, bool], ...], ignore_case: bool) -> re.Pattern[str]:
    body = "".join((".*" if c == "*" else ".") if wild else re.escape(c) for c, wild in tokens)
    return re.compile(body, re.DOTALL | (re.IGNORECASE if ignore_case else 0))


def glob_match(pattern: str, value: str, context: Context, *, variables: bool, wildcards: bool = True,
               ignore_case: bool = False) -> bool | None:
    """Whether `value` matches `pattern` (variables substituted, * and ? as wildcards); None when unresolvable."""
    pieces = resolve(pattern, context, variables)
    if pieces is None:
        return None
    return _regex(_tokens(pieces, wildcards), ignore_case).fullmatch(value) is not None


def _arn_match(pattern: str, value: str, context: Context, variables: bool) -> bool | None:
    """ArnLike: the six colon-separated parts matched apart (the resource part may hold further colons)."""
    pieces = resolve(pattern, context, variables)
    if pieces is None:
        return None
    tokens = _tokens(pieces, True)
    segments: list[list[tuple[str, bool]]] = [[]]
    for token in tokens:
        if token == (":", False) and len(segments) < 6:
            segments.append([])
        else:
            segments[-1].append(token)
    got = value.split(":", 5)
    if len(segments) != 6 or len(got) != 6:
        return False
    return all(_regex(tuple(seg), False).fullmatch(g) is not None for seg, g in zip(segments, got))


def _one(cond: Condition, value: str, policy_value: str, context: Context, variables: bool) -> bool | None:
    """Whether one request value matches one policy value under the operator's positive form."""
    family, cmp = cond.family, _OPERATORS[cond.base.lower()][2]
    if family == "string":
        return glob_match(policy_value, value, context, variables=variables, wildcards=cmp == "like",
                          ignore_case=cmp == "eq-ic")
    if family == "arn":
        return _arn_match(policy_value, value, context, variables)
    if family == "numeric":
        got, want = _number(value), _number(policy_value)
        return got is not None and want is not None and _COMPARE[cmp](got, want)
    if family == "date":
        got_d, want_d = _date(value), _date(policy_value)
        return got_d is not None and want_d is not None and _COMPARE[cmp](got_d, want_d)
    if family == "bool":
        return value.lower() in ("true", "false") and value.lower() == policy_value.lower()
    if family == "binary":
        got_b = _binary(value)
        return got_b is not None and got_b == _binary(policy_value)
    if family == "ip":
        try:
            address = ipaddress.ip_address(value.strip())
        except ValueError:
            return False
        network = _network(policy_value)
        return network is not None and address in network
    raise AssertionError(family)


def _value_holds(cond: Condition, value: str, context: Context, variables: bool) -> bool:
    """One request value against all the policy values: OR'ed, or NOR'ed for a negated operator."""
    results = [_one(cond, value, pv, context, variables) for pv in cond.values]
    if cond.negated:
        return not any(r is True for r in results) and None not in results
    return any(r is True for r in results)


def condition_holds(cond: Condition, context: Context, *, variables: bool = True) -> bool:
    """Whether one condition holds for the (lower-cased) request context."""
    value = _lookup(context, cond.key)
    if cond.family == "null":
        want = "true" if value is None else "false"
        return any(v.lower() == want for v in cond.values)
    if value is None:
        if cond.if_exists:
            return True
        if cond.set_prefix == "ForAllValues":
            return True
        if cond.set_prefix == "ForAnyValue":
            return False
        return cond.negated
    values = value if isinstance(value, list) else [value]
    if cond.set_prefix == "ForAllValues":
        return all(_value_holds(cond, v, context, variables) for v in values)
    if cond.set_prefix == "ForAnyValue":
        return any(_value_holds(cond, v, context, variables) for v in values)
    if len(values) != 1:
        return False
    return _value_holds(cond, values[0], context, variables)


def conditions_hold(conditions: tuple[Condition, ...], context: Context, *, variables: bool = True) -> bool:
    """All the conditions of a statement hold (AND)."""
    return all(condition_holds(c, context, variables=variables) for c in conditions)
