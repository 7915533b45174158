"""The plan as the stack rules read it: `Res` (one resource, plain props) from `stack_resources`, and how resources
name and contain each other (metadata names, Helm charts and the objects they render)."""
from __future__ import annotations

import re
from typing import Any, NamedTuple

from pulumi_policy import StackValidationArgs

from .resources import HELM_CHART_TYPES, Found, dig, k8s_kind
from .unknowns import UNKNOWN, plain


class Res(NamedTuple):
    """One plan resource with plain props."""

    type: str
    urn: str
    name: str
    parent: str | None
    """The parent's URN (None at the top or when the parent is not in the stack)."""
    props: Any
    dependencies: tuple[str, ...] = ()
    """URNs of the resources it depends on (an Output's source is one: how an unknown reference is resolved)."""


def stack_resources(args: StackValidationArgs) -> list[Res]:
    """The stack's resources as `Res` (unknowns become `UNKNOWN`)."""
    out = []
    for r in args.resources:
        parent = getattr(r, "parent", None)
        deps = tuple(d.urn for d in (getattr(r, "dependencies", None) or []) if getattr(d, "urn", None))
        out.append(Res(r.resource_type, r.urn, r.name, getattr(parent, "urn", None), plain(r.props), deps))
    return out


def meta_name(props: Any) -> Any:
    return dig(props, "metadata", "name").value


def meta_namespace(props: Any) -> Any:
    return dig(props, "metadata", "namespace").value


def describe_res(res: Res) -> str:
    """`ScaledJob gpuburst/slides` / `NodePool 'gpu'` / the resource name: how a message names one end."""
    kind = k8s_kind(res.type)
    name = meta_name(res.props)
    if kind and isinstance(name, str):
        ns = meta_namespace(res.props)
        return f"{kind[1]} {ns + '/' if isinstance(ns, str) else ''}{name}"
    return f"{res.type.rsplit(':', 1)[-1]} {res.name}"


# --------------------------------------------------------------------------------------------------------------------
# Helm charts and what they render.
# --------------------------------------------------------------------------------------------------------------------

_ARCHIVE_VERSION = re.compile(r"^(?P<name>.+?)-(?P<version>v?\d+\.\d+\.\d+\S*)$")


class ChartRef(NamedTuple):
    """A chart found in the plan."""

    name: str | None
    """The chart's name (last path segment of `chart`), None when `chart` is missing, UNKNOWN when unknown."""
    version: Found
    """`version` (or the version embedded in an archive name / OCI tag)."""


def chart_name(chart: str) -> tuple[str, str | None]:
    """(name, embedded version or None) from a chart reference: `oci://r/karpenter/karpenter` -> karpenter;
    `kedacore/keda` -> keda; `https://x/keda-2.20.2.tgz` -> (keda, 2.20.2); `oci://r/karpenter:1.14.1`."""
    last = chart.strip().rstrip("/").rsplit("/", 1)[-1]
    embedded = None
    if last.endswith(".tgz"):
        last = last[: -len(".tgz")]
        m = _ARCHIVE_VERSION.match(last)
        if m:
            last, embedded = m.group("name"), m.group("version")
    elif ":" in last:
        last, embedded = last.split(":", 1)
    return last.strip().lower(), embedded


def chart_ref(props: Any) -> ChartRef:
    """The chart name and version of a helm v3 Release / v4 Chart (plain props)."""
    chart = dig(props, "chart")
    version = dig(props, "version")
    if chart.unknown:
        return ChartRef(UNKNOWN, version)
    if not isinstance(chart.value, str):
        return ChartRef(None, version)
    name, embedded = chart_name(chart.value)
    if version.missing and embedded:
        version = Found(embedded, f"{chart.path} (its embedded version)")
    return ChartRef(name, version)


def chart_of(res: Res, by_urn: dict[str, Res]) -> str | None:
    """The name of the Helm chart (`karpenter`, `keda`...) that rendered this resource, walking up its parents."""
    seen = 0
    urn = res.parent
    while urn and seen < 50:
        parent = by_urn.get(urn)
        if parent is None:
            return None
        if parent.type in HELM_CHART_TYPES:
            name = chart_ref(parent.props).name
            return name if isinstance(name, str) else None
        urn, seen = parent.parent, seen + 1
    return None


def charts(resources: list[Res], name: str) -> list[Res]:
    """The Helm chart resources of chart `name`."""
    return [r for r in resources if r.type in HELM_CHART_TYPES and chart_ref(r.props).name == name]


def rendered(resources: list[Res], chart: Res) -> list[Res]:
    """The objects rendered from `chart` (its descendants) in the plan."""
    by_parent: dict[str, list[Res]] = {}
    for r in resources:
        if r.parent:
            by_parent.setdefault(r.parent, []).append(r)
    out, todo = [], [chart.urn]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            out.append(child)
            todo.append(child.urn)
    return out
