"""Whether a pod can land on a node shape: its tolerations against the shape's taints, and its nodeSelector and
required node affinity against the shape's labels, per instance type."""
from __future__ import annotations

from typing import Any

from .resources import dig, fmt, join_path
from .selection import normalise
from .shapes import TYPE_KEYS, Shape, req_items, satisfiable
from .unknowns import UNKNOWN


def tolerates(tolerations: list[Any], taint: dict[str, Any]) -> bool:
    """Whether one of the tolerations tolerates the taint (Kubernetes' matching rules)."""
    for tol in tolerations:
        if not isinstance(tol, dict):
            continue
        key, op = tol.get("key") or "", tol.get("operator") or "Equal"
        effect = tol.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        if op == "Exists" and (key == "" or key == taint.get("key")):
            return True
        if op == "Equal" and key == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def pod_terms(pod: Any, path: str, unknown: list[str]) -> list[list[tuple[str, str, list[str], str]]]:
    """The pod's required node selection as ORed terms of ANDed (key, op, values, path)."""
    selector = dig(pod, "nodeSelector", base=path)
    base: list[tuple[str, str, list[str], str]] = []
    if selector.unknown:
        unknown.append(selector.path)
    for key, value in (selector.value.items() if isinstance(selector.value, dict) else []):
        if value is UNKNOWN:
            unknown.append(join_path(selector.path, key))
            continue
        base.append((key, "In", [normalise(value) if key in TYPE_KEYS else str(value)], join_path(selector.path, key)))
    terms = dig(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                "nodeSelectorTerms", base=path)
    if terms.unknown:
        unknown.append(terms.path)
    items = terms.value if isinstance(terms.value, list) and terms.value else None
    if not items:
        return [base]
    out = []
    for i, term in enumerate(items):
        tpath = join_path(terms.path, i)
        exprs = dig(term, "matchExpressions", base=tpath) if isinstance(term, dict) else None
        if term is UNKNOWN:
            unknown.append(tpath)
            continue
        out.append(base + (req_items(exprs.value, exprs.path, unknown) if exprs else []))
    return out


def _term_fails(term, shape: Shape, t: Any) -> str | None:
    for key, op, values, path in term:
        if not satisfiable(shape.space(key, t), op, values):
            vals = "" if op in ("Exists", "DoesNotExist") else f" {fmt(values)}"
            return f"{path} ({key} {op}{vals})"
    return None


def match(pod: Any, path: str, shape: Shape) -> tuple[str | None, list[Any], list[str]]:
    """(why the pod cannot land on the shape or None, the shape's instance types it can land on, unknown paths)."""
    unknown: list[str] = []
    terms = pod_terms(pod, path, unknown)
    tol = dig(pod, "tolerations", base=path)
    if tol.unknown or (isinstance(tol.value, list) and UNKNOWN in tol.value):
        unknown.append(tol.path)
        return f"{tol.path} is unknown", [], unknown  # no verdict either way: callers report the unknown
    tolerations = tol.value if isinstance(tol.value, list) else []
    for taint in shape.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            value = f"={taint.get('value')}" if taint.get("value") else ""
            return (f"{tol.path} does not tolerate {shape.what}'s taint {taint.get('key')}{value}:"
                    f"{taint.get('effect')}"), [], unknown
    reasons = []
    fitting: list[Any] = []
    for term in terms:
        if shape.types:
            ok = [t for t in shape.types if _term_fails(term, shape, t) is None]
            if ok:
                fitting += [t for t in ok if t not in fitting]
                continue
            reasons.append(_term_fails(term, shape, shape.types[0]) or "no instance type")
        else:
            why = _term_fails(term, shape, None)
            if why is None:
                return None, [], unknown
            reasons.append(why)
    if fitting:
        return None, fitting, unknown
    if not shape.types and not shape.karpenter:
        return f"{' / '.join(reasons)} matches no label of {shape.what}", [], unknown
    if not shape.types:
        return f"{shape.what} admits no instance type the facts describe", [], unknown
    return f"{' / '.join(reasons)} matches no node of {shape.what}", [], unknown
