"""How a rule module declares its policies: `resource_policy` judges each resource of some kinds, `plan_policy` the
whole plan, `scoped_policy` the references between resources (whose ends may live outside a partial plan); all read
plain `Res` values and run inside the guards, so no rule passes silently."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from .facts import Scope, config_schema, scope_of
from .outside import Finding, Outside, violations
from .plan import Res, stack_resources
from .resources import k8s_kind
from .unknowns import guard, guard_stack, plain

ResourceCheck = Callable[[Res], Iterable[str]]
"""A resource rule's body: one message per violation of the resource."""

PlanFindings = Callable[..., Iterable[tuple[str | None, str]]]
"""A plan rule's body: `(resources)` (or `(resources, config)`) -> (urn or None, message) per violation."""

ScopedFindings = Callable[[list[Res], Scope], Iterable[Finding | Outside]]
"""A reference rule's body: `(resources, scope)` -> a violation per mismatch, an `Outside` per end not in the plan."""


class ScopedRule(NamedTuple):
    """A reference rule as `outside-this-stack` re-runs it."""

    name: str
    findings: ScopedFindings
    keys: tuple[str, ...]
    """The facts it reads (its policy config keys besides wholePlatform)."""


SCOPED: dict[str, ScopedRule] = {}
"""Every policy declared with `scoped_policy`, by name (filled as the rule modules are imported)."""


def _kinds(applies_to: Iterable[tuple[str, str] | str]) -> frozenset[tuple[str, str] | str]:
    kinds = frozenset(applies_to)
    for kind in kinds:
        is_token = isinstance(kind, str) and ":" in kind
        is_kind = isinstance(kind, tuple) and len(kind) == 2 and all(isinstance(k, str) for k in kind)
        if not (is_token or is_kind):
            raise TypeError(f"applies_to must hold (group, kind) pairs or type tokens, got {kind!r}")
    return kinds


def resource_policy(name: str, description: str, applies_to: Iterable[tuple[str, str] | str], check: ResourceCheck,
                    level: EnforcementLevel = EnforcementLevel.MANDATORY) -> ResourceValidationPolicy:
    """A policy reporting `check(resource)` for every resource `applies_to` names: Kubernetes (group, kind) pairs
    (any API version) or exact type tokens (`aws:sqs/queue:Queue`); every other resource is not judged."""
    kinds = _kinds(applies_to)

    def judge(args: ResourceValidationArgs) -> Iterable[str]:
        if args.resource_type not in kinds and k8s_kind(args.resource_type) not in kinds:
            return []
        parent = getattr(args.opts, "parent", None) or None
        return check(Res(args.resource_type, args.urn, args.name, parent, plain(args.props)))

    judge.__name__ = f"check_{name}"
    return ResourceValidationPolicy(name=name, description=description, enforcement_level=level,
                                    validate=guard(judge))


def plan_policy(name: str, description: str, findings: PlanFindings,
                level: EnforcementLevel = EnforcementLevel.MANDATORY,
                config_schema: PolicyConfigSchema | None = None) -> StackValidationPolicy:
    """A stack policy reporting `findings(resources)` -> [(urn, message)] over the whole plan; a policy with a
    `config_schema` is called `findings(resources, config)` with its policy config."""

    def judge(args: StackValidationArgs) -> Iterable[tuple[str | None, str]]:
        if config_schema is None:
            return findings(stack_resources(args))
        config: dict[str, Any] = dict(args.get_config() or {})
        return findings(stack_resources(args), config)

    judge.__name__ = f"check_{name}"
    return StackValidationPolicy(name=name, description=description, enforcement_level=level,
                                 validate=guard_stack(judge), config_schema=config_schema)


def scoped_policy(name: str, description: str, findings: ScopedFindings, keys: Iterable[str] = (),
                  level: EnforcementLevel = EnforcementLevel.MANDATORY) -> StackValidationPolicy:
    """A stack policy over references between resources: it reports the violations of `findings(resources, scope)`
    (the scope from the plan and the policy config: `wholePlatform` and the fact `keys`); the `Outside` markers,
    ends that are not in a partial plan, are left to `outside-this-stack`, which re-runs every scoped rule."""
    keys = tuple(keys)
    SCOPED[name] = ScopedRule(name, findings, keys)

    def judge(resources: list[Res], config: dict[str, Any]) -> list[tuple[str | None, str]]:
        return violations(findings(resources, scope_of(resources, config)))

    return plan_policy(name, description, judge, level, config_schema(*keys))
