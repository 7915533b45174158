"""Which EC2 instance types a set of node requirements admits: the algebra behind the diversity and pinning rules.

Karpenter ANDs a NodePool's requirements (and treats its template labels as `In [value]` requirements); a pod's
`nodeSelector` is ANDed with each of its required nodeAffinity terms, and the terms are ORed. Only the labels that
name instance types matter here: the instance type itself, and the family, size, category and generation that an
instance type name encodes (`g5.xlarge` = family `g5` = category `g` + generation `5`, size `xlarge`).

The result is either "unbounded" (None: many types, or at least nothing here proves otherwise) or the explicit set
of instance types admitted. Constraints this module cannot evaluate without an instance catalogue (CPU, memory, GPU
count) only ever shrink a set further, so ignoring them never turns a pinned pool into an accepted one by mistake of
this module; it can only miss a pool pinned through them (documented in docs/policies.md).
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ._components import INSTANCE_TYPE_LABEL
from .resources import fmt, join_path
from .unknowns import UNKNOWN

INSTANCE_TYPE_KEYS: tuple[str, ...] = (INSTANCE_TYPE_LABEL, "beta.kubernetes.io/instance-type")
"""Well-known labels holding the instance type (the beta one is deprecated but still set on nodes)."""
FAMILY_KEY = "karpenter.k8s.aws/instance-family"
SIZE_KEY = "karpenter.k8s.aws/instance-size"
CATEGORY_KEY = "karpenter.k8s.aws/instance-category"
GENERATION_KEY = "karpenter.k8s.aws/instance-generation"

DIMENSIONS: dict[str, str] = {
    **{k: "type" for k in INSTANCE_TYPE_KEYS},
    FAMILY_KEY: "family",
    SIZE_KEY: "size",
    CATEGORY_KEY: "category",
    GENERATION_KEY: "generation",
}
"""Label key -> which part of an instance type it constrains."""

GPU_COUNT_KEY = "karpenter.k8s.aws/instance-gpu-count"
GPU_NAME_KEY = "karpenter.k8s.aws/instance-gpu-name"
GPU_MANUFACTURER_KEY = "karpenter.k8s.aws/instance-gpu-manufacturer"
GPU_MEMORY_KEY = "karpenter.k8s.aws/instance-gpu-memory"
CPU_KEY = "karpenter.k8s.aws/instance-cpu"
MEMORY_KEY = "karpenter.k8s.aws/instance-memory"
"""Other labels Karpenter sets from the instance type; this module ignores them (they only shrink a set)."""

_TYPE = re.compile(r"^([a-z0-9-]+)\.([a-z0-9-]+)$")
_FAMILY = re.compile(r"^([a-z]+)(\d+)")


def normalise(value: Any) -> str:
    """Label values compared the way AWS spells instance types: trimmed, lower case."""
    return str(value).strip().lower()


def split_type(instance_type: str) -> tuple[str, str] | None:
    """`g5.xlarge` -> ("g5", "xlarge"); None when the name has no family.size shape."""
    m = _TYPE.match(instance_type)
    return (m.group(1), m.group(2)) if m else None


def family_parts(family: str) -> tuple[str, str] | None:
    """`g5` -> ("g", "5"); `p4d` -> ("p", "4"); `inf2` -> ("inf", "2"); None when it does not parse."""
    m = _FAMILY.match(family)
    return (m.group(1), m.group(2)) if m else None


@dataclass(frozen=True)
class Requirement:
    """One `{key, operator, values}` node requirement (values normalised)."""

    key: str
    operator: str
    values: tuple[str, ...]
    path: str
    """Where it came from, for messages (e.g. `spec.template.spec.requirements[0]`)."""

    def describe(self) -> str:
        vals = f" {fmt(list(self.values))}" if self.operator not in ("Exists", "DoesNotExist") else ""
        return f"{self.key} {self.operator}{vals}"


@dataclass
class Parsed:
    """Requirements relevant to instance types, plus the paths of unknown values that could change the verdict."""

    requirements: list[Requirement] = field(default_factory=list)
    unknown_paths: list[str] = field(default_factory=list)

    def extend(self, other: Parsed) -> Parsed:
        return Parsed(self.requirements + other.requirements, self.unknown_paths + other.unknown_paths)


def parse_requirements(items: Any, path: str) -> Parsed:
    """Parse a requirements / matchExpressions list; raise TypeError (the guard reports it) when it is ill-shaped."""
    out = Parsed()
    if items is None:
        return out
    if items is UNKNOWN:
        out.unknown_paths.append(path)
        return out
    if not isinstance(items, list):
        raise TypeError(f"{path} must be a list of {{key, operator, values}}, got {fmt(items)}")
    for i, item in enumerate(items):
        ipath = join_path(path, i)
        if item is UNKNOWN:
            out.unknown_paths.append(ipath)
            continue
        if not isinstance(item, dict):
            raise TypeError(f"{ipath} must be a mapping {{key, operator, values}}, got {fmt(item)}")
        key = item.get("key")
        if key is UNKNOWN:
            out.unknown_paths.append(join_path(ipath, "key"))
            continue
        if not isinstance(key, str) or key.strip() not in DIMENSIONS:
            continue  # a label that does not constrain the instance type (zone, capacity type, arch, GPU count...)
        operator = item.get("operator")
        values = item.get("values")
        if operator is UNKNOWN:
            out.unknown_paths.append(join_path(ipath, "operator"))
            continue
        if values is UNKNOWN or (isinstance(values, list) and any(v is UNKNOWN for v in values)):
            out.unknown_paths.append(join_path(ipath, "values"))
            continue
        if values is None:
            values = []
        if not isinstance(values, list):
            raise TypeError(f"{join_path(ipath, 'values')} must be a list of strings, got {fmt(values)}")
        out.requirements.append(Requirement(key.strip(), str(operator), tuple(normalise(v) for v in values), ipath))
    return out


def parse_labels(labels: Any, path: str) -> Parsed:
    """Labels that name an instance type, family, size... as `In [value]` requirements (Karpenter and nodeSelector
    both treat an exact label as such a requirement)."""
    out = Parsed()
    if labels is None:
        return out
    if labels is UNKNOWN:
        out.unknown_paths.append(path)
        return out
    if not isinstance(labels, dict):
        raise TypeError(f"{path} must be a mapping of label to value, got {fmt(labels)}")
    for key, value in labels.items():
        if key.strip() not in DIMENSIONS:
            continue
        kpath = join_path(path, key)
        if value is UNKNOWN:
            out.unknown_paths.append(kpath)
            continue
        out.requirements.append(Requirement(key.strip(), "In", (normalise(value),), kpath))
    return out


@dataclass
class _Constraint:
    allowed: set[str] | None = None
    excluded: set[str] = field(default_factory=set)
    impossible: bool = False
    bounds: list[tuple[str, float]] = field(default_factory=list)

    def add(self, req: Requirement) -> None:
        op = req.operator
        if op == "In":
            vals = set(req.values)
            self.allowed = vals if self.allowed is None else self.allowed & vals
        elif op == "NotIn":
            self.excluded |= set(req.values)
        elif op == "DoesNotExist":
            self.impossible = True  # every EC2 node carries these labels, so no node satisfies DoesNotExist
        elif op in ("Gt", "Lt", "Gte", "Lte") and req.values:
            try:
                self.bounds.append((op, float(req.values[0])))
            except ValueError:
                self.impossible = True  # Karpenter compares as integers; a non-number matches nothing
        # Exists: every node has the label, so it constrains nothing. Unknown operators are left to the CRD.

    def admits(self, value: str) -> bool:
        if self.impossible:
            return False
        if self.allowed is not None and value not in self.allowed:
            return False
        if value in self.excluded:
            return False
        for op, bound in self.bounds:
            try:
                n = float(value)
            except ValueError:
                return False
            if not {"Gt": n > bound, "Lt": n < bound, "Gte": n >= bound, "Lte": n <= bound}[op]:
                return False
        return True


def admitted_types(requirements: Iterable[Requirement]) -> frozenset[str] | None:
    """The explicit set of instance types the ANDed requirements admit, or None when it is not bounded here."""
    cons = {dim: _Constraint() for dim in set(DIMENSIONS.values())}
    for req in requirements:
        cons[DIMENSIONS[req.key]].add(req)
    if any(c.impossible for c in cons.values()):
        return frozenset()

    def family_ok(family: str) -> bool:
        if not cons["family"].admits(family):
            return False
        parts = family_parts(family)
        if parts is None:  # cannot tell its category/generation: keep it (never over-report a pin)
            return True
        return cons["category"].admits(parts[0]) and cons["generation"].admits(parts[1])

    def type_ok(instance_type: str) -> bool:
        if not cons["type"].admits(instance_type):
            return False
        parts = split_type(instance_type)
        if parts is None:
            return True
        return family_ok(parts[0]) and cons["size"].admits(parts[1])

    types = cons["type"]
    if types.allowed is not None:
        return frozenset(t for t in types.allowed if type_ok(t))
    fam, size = cons["family"], cons["size"]
    if fam.allowed is not None and size.allowed is not None:
        return frozenset(f"{f}.{s}" for f in fam.allowed for s in size.allowed
                         if family_ok(f) and size.admits(s) and types.admits(f"{f}.{s}"))
    return None


def describe(requirements: Iterable[Requirement]) -> str:
    """The instance-type requirements as a short conjunction for messages."""
    return " AND ".join(r.describe() for r in requirements) or "(none)"
