"""Advisory stack rule `outside-this-stack`: in a partial plan, one line per end of a reference that lives in another
stack, naming what could not be checked, why, and which fact would let the rule check it.

Every cross-resource rule (`policies.declare.scoped_policy`) yields an `Outside` where the end it looks for is absent
from a partial plan and no fact describes it; its own policy reports only the mismatches. This policy re-runs those
rules with its own policy config and reports their `Outside`s once each: the same end missed by several rules (the
device plugin for every GPU pool, the system node group for every controller, KEDA's version for every
TriggerAuthentication) is one line, naming the rules that could not check it. A whole plan (one that declares
`gpuburst:index:GpuBurstPlatform`, or policy config `wholePlatform: true`) has no ends outside: there an absent end
is each rule's violation, and this policy says nothing.
"""
from __future__ import annotations

from typing import Any

from pulumi_policy import EnforcementLevel

from . import (
    buckets,
    hardware,
    keda_provider,
    keys,
    model_cache,
    network,
    schedulability,
    teams,
    trust,
    versions,
    wiring,
)
from .declare import SCOPED, ScopedRule, plan_policy
from .facts import FACTS, Scope, config_schema, scope_of
from .outside import outsides
from .plan import Res

NAME = "outside-this-stack"

SOURCES = (keda_provider, versions, wiring, schedulability, hardware, network, trust, buckets, keys, teams,
           model_cache)
"""The rule modules whose scoped policies this one collects from, in pack order (a test keeps it equal to every
scoped policy of the pack)."""


def scoped_rules() -> list[ScopedRule]:
    """The scoped rules of `SOURCES`, in pack order."""
    return [SCOPED[p.name] for module in SOURCES for p in module.POLICIES if p.name in SCOPED]


def _how(keys: list[str], scope: Scope, rules: list[str]) -> str:
    on = f"{', '.join(rules)} and {NAME}"
    return "".join(f"; to check it, {scope.hint(k, on)}" for k in keys)


def boundary_findings(resources: list[Res], config: dict[str, Any] | None = None) -> list[tuple[str | None, str]]:
    """(urn, message) once per distinct end outside this plan, over every scoped rule."""
    scope = scope_of(resources, config)
    if scope.whole:
        return []
    merged: dict[str, tuple[str | None, list[str], list[str]]] = {}
    for rule in scoped_rules():
        try:
            found = list(rule.findings(resources, scope))
        except Exception:  # noqa: BLE001 (the rule's own policy fails closed on it; the other rules still speak)
            continue
        for end in outsides(found):
            urn, rules, keys = merged.setdefault(end.message, (end.urn, [], []))
            if rule.name not in rules:
                rules.append(rule.name)
            keys += [k for k in end.keys if k not in keys]
    return [(urn, f"{message}{_how(keys, scope, rules)} (not checked by {', '.join(rules)}: {scope.why})")
            for message, (urn, rules, keys) in merged.items()]


POLICY = plan_policy(
    NAME, "Names once each end of a reference that a partial plan leaves to another stack (what could not be checked "
          "and which fact would let it be), instead of failing the rule that looks for it.",
    boundary_findings, level=EnforcementLevel.ADVISORY,
    config_schema=config_schema(*(k for k in FACTS if FACTS[k].schema is not None)))

POLICIES = [POLICY]
