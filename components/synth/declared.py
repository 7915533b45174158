"""The versions a plan declares (cluster, charts, Existing* facts, worker base image) beside the catalogue's pins."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import catalogue

CHART_TYPE = "kubernetes:helm.sh/v4:Chart"
"""A `helm.v4.Chart` registration (the same token as charts.CHART_TYPE; this module loads no chart machinery)."""

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


def version_lines(plan: dict[str, Any]) -> list[str]:
    """The summary's versions section: what the stack declares (with the catalogue's pin where it differs), then
    the catalogue's pins the stack does not declare (what a component installs when not told otherwise)."""
    declared = declared_versions(plan)
    lines = ["Versions this stack declares:" if declared else "Versions this stack declares: none"]
    for d in declared:
        note = f" (catalogue pin {d.pin})" if d.differs else ""
        lines.append(f"  {d.name:<22} {d.version}  from {d.source}{note}")
    named = {d.name for d in declared}
    rest = {k: v for k, v in catalogue.describe_pins().items() if k not in named}
    if rest:
        lines += ["", "Catalogue pins this stack does not declare (components/catalogue/pins.py; a component's "
                      "default):"]
        lines += [f"  {k:<22} {v}" for k, v in rest.items()]
    return lines


def release_line_versions(plan: dict[str, Any]) -> set[tuple[str, str]]:
    """(karpenter or keda, version) for each release line the plan runs: its charts' and its Existing* facts'."""
    return {(d.name, d.version) for d in declared_versions(plan) if d.name in ("karpenter", "keda")}
