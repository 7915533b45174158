"""The versions a plan declares (cluster, charts, Existing* facts, worker base image) beside the catalogue's pins."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import catalogue

CHART_TYPE = "kubernetes:helm.sh/v4:Chart"
"""A `helm.v4.Chart` registration (the same token as charts.CHART_TYPE; this module loads no chart machinery)."""

_USED_BY_TYPE: dict[str, tuple[str, ...]] = {
    # pin -> the registration types (a trailing '/' or ':' marks a prefix) of the things that install, attach to or
    # rely on it: a stack with none of them does not use that pin, so the summary does not list it
    "kubernetes": ("kubernetes:", "eks:index:Cluster", "gpuburst:index:Cluster", "gpuburst:index:ExistingCluster",
                   "gpuburst:index:ExistingKarpenter", "gpuburst:index:ExistingKeda"),
    "karpenter": ("gpuburst:index:Karpenter", "gpuburst:index:ExistingKarpenter", "gpuburst:index:GpuNodePool",
                  "kubernetes:karpenter.sh/", "kubernetes:karpenter.k8s.aws/"),
    "keda": ("gpuburst:index:Keda", "gpuburst:index:ExistingKeda", "gpuburst:index:GpuScaledJob",
             "gpuburst:index:KedaScalerAuth", "kubernetes:keda.sh/"),
    # GPU pods get `nvidia.com/gpu` only where the device plugin advertises it
    "nvidia-device-plugin": ("gpuburst:index:NvidiaDevicePlugin", "gpuburst:index:GpuScaledJob",
                             "gpuburst:index:GpuConsumer", "gpuburst:index:GpuNodePool",
                             "gpuburst:index:WarmGpuFloor"),
    # the base image is used only where the stack builds the worker image (a stack given an image builds nothing)
    "worker-base-image": ("gpuburst:index:WorkerImage", "docker-build:index:Image"),
}
_USED_BY_TYPE["karpenter-crd"] = _USED_BY_TYPE["karpenter"]  # the CRDs of the same chart version (KARPENTER_CHARTS)

_FACT_SOURCES = {
    # registration type -> (what the plan's `version` property is the version of)
    "gpuburst:index:ExistingKeda": "keda",
    "gpuburst:index:ExistingKarpenter": "karpenter",
}


@dataclass(frozen=True)
class DeclaredVersion:
    """One version the plan states, where it states it, and the catalogue's pin for the same thing."""

    name: str
    """What is versioned, as `catalogue.describe_pins()` names it: kubernetes, karpenter, karpenter-crd, keda,
    nvidia-device-plugin, worker-base-image (or a chart the catalogue does not pin)."""
    version: str
    """The version the plan holds."""
    source: str
    """The registration that holds it: `<type's last part> '<name>'` (e.g. `ExistingKeda 'keda'`)."""
    pin: str | None
    """The catalogue's pin for `name`; None when the catalogue pins no such thing."""

    @property
    def differs(self) -> bool:
        """Whether the stack runs another version than the catalogue's pin."""
        return self.pin is not None and self.pin != self.version


def _chart_name(chart_input: Any) -> str:
    return str(chart_input or "").rstrip("/").rsplit("/", 1)[-1]


def declared_versions(plan: dict[str, Any]) -> list[DeclaredVersion]:
    """Every version the plan's own registrations declare, sorted by name then source: the EKS cluster's Kubernetes,
    each Helm chart's version, ExistingKeda/ExistingKarpenter's `version` facts and the worker image's base image."""
    pins = catalogue.describe_pins()
    found: list[tuple[str, str, str]] = []
    for res in plan.get("resources", []):
        if res.get("source"):
            continue  # a chart's rendered object: its chart is the declaration
        props, kind = res.get("properties") or {}, str(res.get("type", ""))
        label = f"{kind.rsplit(':', 1)[-1]} {res.get('name', '')!r}"
        if kind == "eks:index:Cluster" and props.get("version"):
            found.append(("kubernetes", str(props["version"]), label))
        elif kind == CHART_TYPE and props.get("version"):
            found.append((_chart_name(props.get("chart")), str(props["version"]), label))
        elif kind in _FACT_SOURCES and props.get("version"):
            found.append((_FACT_SOURCES[kind], str(props["version"]), label))
        elif kind == "docker-build:index:Image":
            base = (props.get("buildArgs") or {}).get("BASE_IMAGE")
            if isinstance(base, str) and base:
                found.append(("worker-base-image", base, label))
    return [DeclaredVersion(name, version, source, pins.get(name)) for name, version, source in sorted(found)]


def _uses(types: set[str], charts: set[str], pin: str) -> bool:
    """Whether a plan with these registration types and chart names uses the pinned `pin` (a pin this module has no
    rule for is listed: better one line too many than a pin the stack runs left out)."""
    if pin in charts:
        return True
    if pin not in _USED_BY_TYPE:
        return True
    marks = _USED_BY_TYPE[pin]
    return any(t == m or (m.endswith(("/", ":")) and t.startswith(m)) for t in types for m in marks)


def used_pins(plan: dict[str, Any]) -> dict[str, str]:
    """The catalogue's pins (`catalogue.describe_pins()`) of what the plan installs, attaches to or relies on: a
    consumer-only stack uses no KEDA, a stack given a worker image builds none."""
    resources = plan.get("resources", [])
    types = {str(r.get("type", "")) for r in resources}
    charts = {_chart_name((r.get("properties") or {}).get("chart")) for r in resources if r.get("type") == CHART_TYPE}
    return {k: v for k, v in catalogue.describe_pins().items() if _uses(types, charts, k)}


def version_lines(plan: dict[str, Any]) -> list[str]:
    """The summary's versions section: what the stack declares (with the catalogue's pin where it differs), then
    the catalogue's pins of what it uses but does not declare (what a component installs when not told otherwise,
    or what the cluster it attaches to is expected to run)."""
    declared = declared_versions(plan)
    lines = ["Versions this stack declares:" if declared else "Versions this stack declares: none"]
    for d in declared:
        note = f" (catalogue pin {d.pin})" if d.differs else ""
        lines.append(f"  {d.name:<22} {d.version}  from {d.source}{note}")
    named = {d.name for d in declared}
    rest = {k: v for k, v in used_pins(plan).items() if k not in named}
    if rest:
        lines += ["", "Catalogue pins of what this stack uses but does not declare (gpuburst.catalogue.pins; a "
                      "component's default):"]
        lines += [f"  {k:<22} {v}" for k, v in rest.items()]
    return lines


def release_line_versions(plan: dict[str, Any]) -> set[tuple[str, str]]:
    """(karpenter or keda, version) for each release line the plan runs: its charts' and its Existing* facts'."""
    return {(d.name, d.version) for d in declared_versions(plan) if d.name in ("karpenter", "keda")}
