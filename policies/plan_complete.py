"""Rule `plan-complete`: every Helm Chart in the plan has its rendered objects as children, or no rule judged them.

A real `pulumi preview` renders each `helm.v4.Chart` and registers every object as a child of the Chart, so the other
rules see the charts' Deployments, ServiceAccounts and CRDs. A Chart with no children means its objects were never
judged: offline, the synth could not render it (the archive is not in the chart cache: `python -m components charts
pull`); in a preview, its inputs were unknown and the provider skipped the render ("Preview is incomplete"). Either
way the plan is shallow, and a pass would be silent: this mandatory stack rule names each such chart instead.
"""
from __future__ import annotations

from typing import Any

from .declare import plan_policy
from .plan import Res
from .resources import fmt
from .unknowns import UNKNOWN, unknown_message

NAME = "plan-complete"

RENDERED_CHART_TYPES = ("kubernetes:helm.sh/v4:Chart", "kubernetes:helm.sh/v3:Chart")
"""Chart components whose rendered objects a preview registers as their children (a v3 Release has none)."""


def _describe(props: Any) -> str:
    chart = props.get("chart") if isinstance(props, dict) else None
    version = props.get("version") if isinstance(props, dict) else None
    name = str(chart).rstrip("/").rsplit("/", 1)[-1] if isinstance(chart, str) else fmt(chart)
    return f"chart {name} {version if isinstance(version, str) else fmt(version)}"


def _unknown_paths(value: Any, path: str = "") -> list[str]:
    if value is UNKNOWN:
        return [path or "<props>"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _unknown_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _unknown_paths(v, f"{path}[{i}]")]
    return []


def shallow_charts(resources: list[Res]) -> list[tuple[str, str]]:
    """(urn, message) for every Chart among `resources` with no child."""
    parents = {r.parent for r in resources if r.parent}
    out = []
    for r in resources:
        if r.type not in RENDERED_CHART_TYPES or r.urn in parents:
            continue
        what = f"{r.urn.rsplit('::', 1)[-1]} ({_describe(r.props)})"
        unknown = _unknown_paths(r.props)
        if unknown:  # the provider skips the render of a Chart with unknown inputs ("Preview is incomplete")
            out.append((r.urn, f"{what}: " + unknown_message(unknown[0], "the objects the chart installs (a Chart "
                                                                       "with unknown inputs renders nothing)")))
            continue
        out.append((r.urn, f"{what} has no rendered objects in the plan, so no rule judged what it installs: the "
                           f"plan is shallow (offline: put the archive in the chart cache with `python -m components "
                           f"charts pull`)"))
    return out


POLICY = plan_policy(
    NAME, "Every Helm Chart's rendered objects are in the plan (a Chart with no children was never judged).",
    shallow_charts)

POLICIES = [POLICY]
