"""The one rule on an EC2NodeClass's selector terms that config, the pack and `verify` share: no term may select by an
empty tags map, an empty name or an empty ssmParameter, which Karpenter 1.14.4 (and 1.9.4, 1.15.3) ignores.

Why a rule of its own: the EC2NodeClass CRD accepts such a term (its CEL asks only that a term has a `tags`, `id`,
`name`, `alias` or `ssmParameter` field, and that no tag key or value is empty, which an empty map satisfies), and
earlier Karpenter releases read it as "no filter", so a stack that works today breaks on the upgrade: with every term
of a list empty the EC2NodeClass goes NotReady, with some empty its nodes drift and are replaced
(`catalogue.KARPENTER_EMPTY_SELECTOR_TERMS`, the release notes' "Action Required").
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SELECTOR_TERM_LISTS = ("amiSelectorTerms", "subnetSelectorTerms", "securityGroupSelectorTerms",
                       "capacityReservationSelectorTerms")
"""The EC2NodeClass `spec` fields that hold selector terms (Karpenter 1.14.1's CRD)."""

EMPTY_IGNORED_FIELDS = ("tags", "name", "ssmParameter")
"""The term fields Karpenter 1.14.4 ignores when empty (an empty map, an empty string)."""

WHY_EMPTY = ("Karpenter 1.14.4 ignores such a term (all terms of a list empty: the EC2NodeClass goes NotReady; some "
             "empty: its nodes drift); remove it or give it a value")
"""The short reason every message ends with (the long one is `catalogue.KARPENTER_EMPTY_SELECTOR_TERMS`)."""

__all__ = ["SELECTOR_TERM_LISTS", "EMPTY_IGNORED_FIELDS", "WHY_EMPTY",
           "empty_fields", "show_term", "find_empty_terms", "why_empty", "empty_selector_terms"]


def empty_fields(term: Any) -> list[str]:
    """The fields of one selector term (a mapping) that Karpenter 1.14.4 ignores because they are empty: a `tags`
    that is a mapping with no entries, a `name` or `ssmParameter` that is an empty (or blank) string."""
    if not isinstance(term, Mapping):
        return []
    out = []
    for key in EMPTY_IGNORED_FIELDS:
        if key not in term:
            continue
        value = term[key]
        if (key == "tags" and isinstance(value, Mapping) and len(value) == 0) or \
                (key != "tags" and isinstance(value, str) and not value.strip()):
            out.append(key)
    return out


def show_term(term: Mapping[str, Any]) -> str:
    """`{tags: {}}`, `{name: "", owner: amazon}`: a term as a person wrote it in YAML, on one line."""
    def value(v: Any) -> str:
        if isinstance(v, Mapping):
            return "{" + ", ".join(f"{k}: {value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, str):
            return '""' if not v.strip() else v
        return repr(v)
    return value(term)


def find_empty_terms(spec: Any, base: str = "spec") -> list[tuple[str, Mapping[str, Any], list[str]]]:
    """(path, term, its empty fields) for every selector term of an EC2NodeClass `spec` with an empty tags map, name
    or ssmParameter (`spec.subnetSelectorTerms[0]`, `{"tags": {}}`, `["tags"]`). Values that are not plain lists and
    mappings (unknown during a preview) are left to the caller."""
    out: list[tuple[str, Mapping[str, Any], list[str]]] = []
    if not isinstance(spec, Mapping):
        return out
    for field in SELECTOR_TERM_LISTS:
        terms = spec.get(field)
        if not isinstance(terms, list):
            continue
        for i, term in enumerate(terms):
            empty = empty_fields(term)
            if empty:
                out.append((f"{base}.{field}[{i}]", term, empty))
    return out


def why_empty(fields: list[str]) -> str:
    """`an empty tags map; Karpenter 1.14.4 ignores such a term (...)` for a term's empty fields."""
    what = ", ".join("an empty tags map" if k == "tags" else f"an empty {k}" for k in fields)
    return f"{what}; {WHY_EMPTY}"


def empty_selector_terms(spec: Any, base: str = "spec") -> list[str]:
    """One line per selector term of an EC2NodeClass `spec` with an empty tags map, name or ssmParameter, naming the
    term by its path and as written: `spec.subnetSelectorTerms[0] = {tags: {}}: an empty tags map; Karpenter 1.14.4
    ignores such a term (...)`. What the pack reports and `verify` can say of a live EC2NodeClass."""
    return [f"{path} = {show_term(term)}: {why_empty(fields)}" for path, term, fields in find_empty_terms(spec, base)]
