"""The advisor's answer (`plan-burst --deadline/--budget`): one priced configuration of a burst (`Option`) and a
workload's ranked configurations (`Advice`); the advisor (`advisor`) builds them, the report (`report`) prints them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .arrivals import Burst
from .simulation import PatternPlan

__all__ = ["Option", "Advice"]


@dataclass(frozen=True)
class Option:
    """One configuration of the burst, its figures and the config keys that set it."""

    pattern: str
    """'scaledjob' or 'consumer'."""
    messages_per_job: int
    """Messages per Job (`messagesPerJob`; 1 for the consumer)."""
    jobs_at_once: int
    """Most Jobs at once as modelled (min of maxReplicas, what gpuLimit holds, and ceil(burst / messages per Job));
    1 for the consumer."""
    instance_type: str
    """The node type (the cheapest admitted type that hosts the pod, once the keys are set)."""
    capacity_type: str
    """'spot' or 'on-demand'."""
    warm_floor: int
    """Warm-floor nodes up at the burst's time."""
    plan: PatternPlan = field(repr=False)
    """The burst model's run, priced for this type and capacity type (`plan-burst`'s figures)."""
    cost_usd: float
    """What the option costs: the burst's cost plus the floor's window that day (ScaledJob), or the node all day
    (consumer)."""
    workload_keys: dict[str, Any]
    """`gpuburst:workloads.<name>` keys to set (camelCase -> value)."""
    stack_keys: dict[str, Any]
    """Stack-wide `gpuburst:` keys to set (camelCase -> value; None: remove the key); they affect every workload."""

    @property
    def time_to_first_result_s(self) -> float:
        """Burst arrival to the first result."""
        return self.plan.time_to_first_result_s

    @property
    def time_to_last_result_s(self) -> float:
        """Burst arrival to the last result."""
        return self.plan.time_to_last_result_s

    @property
    def cost_per_item_usd(self) -> float:
        """cost_usd / messages."""
        return self.cost_usd / self.plan.items

    def key(self) -> tuple[Any, ...]:
        """Stable tie-break: fewer keys to change first (`pattern` aside), then the option's own values."""
        return (len(self.workload_keys) + len(self.stack_keys), self.pattern, self.instance_type, self.capacity_type,
                self.warm_floor, self.jobs_at_once, self.messages_per_job)


@dataclass(frozen=True)
class Advice:
    """The advisor's answer for one workload's burst."""

    workload: str
    """Workload name."""
    stack: str
    """Stack name (for `Pulumi.<stack>.yaml`)."""
    burst: Burst
    """The burst searched."""
    deadline_s: float | None
    """Time to the last result asked for, seconds; None without --deadline."""
    budget_usd: float | None
    """Most the burst may cost, USD; None without --budget."""
    current: Option
    """The stack as configured."""
    options: list[Option]
    """The configurations that meet the goal, best first (cheapest first with a deadline, else fastest)."""
    meeting: int
    """How many evaluated configurations meet the goal."""
    evaluated: int
    """Configurations priced (simulations × the types and capacity types of their shape)."""
    simulations: int
    """Burst-model runs."""
    space: int
    """Configurations in the unpruned space."""
    seconds: float
    """Wall time of the search."""
    bound: str | None
    """Why nothing meets the goal (which stage bounds it), or None."""
    notes: list[str] = field(default_factory=list)
    """What the search left out and why (a type that cannot be selected on its own, a floor without a time)."""
