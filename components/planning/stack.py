"""The stack as configured: each workload's burst or trace planned under both patterns on a StackConfig, with its
warm floor."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from ..spec.validation import ConfigError
from .arrivals import Burst, Trace, TraceCsv
from .node_stages import image_pull_note, image_pull_seconds, model_seconds
from .simulation import node_type, simulate
from .stages import stage_durations

if TYPE_CHECKING:
    from ..config import StackConfig, WorkloadConfig

__all__ = [
    "warm_floor_at",
    "warm_floor_open",
    "warm_floor_seconds_per_day",
    "WorkloadPlan",
    "plan_workload",
    "plan_stack",
]

def warm_floor_at(config: StackConfig, at: datetime | None) -> int:
    """Warm-floor nodes Ready at `at`: `config.warm_gpus.count` inside its cron window, else 0 (also without a time
    or without `warm_gpus`)."""
    from zoneinfo import ZoneInfo

    from .cron import window_active

    warm = config.warm_gpus
    if warm is None or at is None:
        return 0
    local = at.astimezone(ZoneInfo(warm.timezone))
    return int(warm.count) if window_active(warm.start, warm.end, local) else 0


def warm_floor_open(config: StackConfig, at: datetime | None, offsets_s: Iterable[float]) -> list[bool]:
    """For each arrival (seconds after `at`), whether the warm floor's cron window is active then (as
    `warm_floor_at`); all False without `warm_gpus` or without a time. Sorted offsets are swept minute by minute from
    the previous one (as `cron.active_seconds` does) rather than searched back from scratch each time."""
    from zoneinfo import ZoneInfo

    from .cron import matches, window_active

    offsets_s = list(offsets_s)
    warm = config.warm_gpus
    if warm is None or at is None:
        return [False] * len(offsets_s)
    tz = ZoneInfo(warm.timezone)
    utc0 = at.astimezone(timezone.utc)  # step in UTC: wall-clock arithmetic in `tz` would skip or repeat at DST
    out: list[bool] = []
    minute: datetime | None = None
    state = False
    for s in offsets_s:
        when = utc0 + timedelta(seconds=s)
        m = when.replace(second=0, microsecond=0)
        if minute is None or m < minute or m - minute > timedelta(days=7):
            state, minute = window_active(warm.start, warm.end, when.astimezone(tz)), m
        while minute < m:
            minute += timedelta(minutes=1)
            local = minute.astimezone(tz)
            if matches(warm.end, local):  # end before start at the same minute, as window_active reads it
                state = False
            elif matches(warm.start, local):
                state = True
        out.append(state)
    return out


def warm_floor_seconds_per_day(config: StackConfig, at: datetime | None) -> float:
    """Seconds a day the warm floor holds its nodes: on the burst's local date, or averaged over the week starting
    Monday 2026-01-05 when the burst has no time."""
    from zoneinfo import ZoneInfo

    from .cron import active_seconds

    warm = config.warm_gpus
    if warm is None:
        return 0.0
    tz = ZoneInfo(warm.timezone)
    if at is not None:
        local = at.astimezone(tz)
        return float(active_seconds(warm.start, warm.end, datetime(local.year, local.month, local.day, tzinfo=tz)))
    week = active_seconds(warm.start, warm.end, datetime(2026, 1, 5, tzinfo=tz), timedelta(days=7))
    return week / 7


@dataclass(frozen=True)
class WorkloadPlan:
    """One workload's burst (or trace) under both patterns, and which one the stack runs."""

    workload: str
    """Workload name."""
    burst: Burst | Trace
    """The burst or the trace planned."""
    pattern: str
    """The pattern the stack runs (the config's `pattern`, or the chooser's pick)."""
    reason: str
    """The chooser's reason."""
    patterns: dict[str, Any]
    """'scaledjob' and 'consumer' -> PatternPlan."""
    image_pull: str = ""
    """How the image pull stage was derived (layers, parallel or one stream, and what the other would take)."""

    def summary(self) -> dict[str, Any]:
        """The chosen pattern's keys, its `reason`, the burst (a trace: its file and span), and `patterns` with
        both."""
        out = self.patterns[self.pattern].summary()
        out.update(pattern=self.pattern, reason=self.reason,
                   burst_at=self.burst.at.isoformat() if self.burst.at else None,
                   patterns={k: p.summary() for k, p in self.patterns.items()})
        if isinstance(self.burst, Trace):
            out["trace"] = {"file": self.burst.source, "arrivals": len(self.burst.arrivals), "items": self.burst.items,
                            "first_arrival_at": self.burst.at.isoformat(),
                            "last_arrival_at": self.burst.arrivals[-1][0].isoformat()}
        return out


def plan_workload(config: StackConfig, workload: WorkloadConfig, burst: Burst | Trace | None = None, *,
                  warm: bool = False, overrides: Mapping[str, float] | None = None) -> WorkloadPlan:
    """Plan one burst (default: `workload.burst_items`, no time) or one trace of `workload` on the stack `config` (a
    StackConfig). A burst is the trace of one arrival: both go through the same `simulate`."""
    from .chooser import choose_pattern, parallel_blocker

    burst = burst or Burst(workload.burst_items)
    arrivals = burst.arrivals_s()
    facts = workload.facts()
    per_job = workload.messages_per_job
    choice = choose_pattern(facts, messages_per_job=per_job)
    pattern = workload.pattern or choice.pattern
    opened = dict(zip((t for t, _ in arrivals), warm_floor_open(config, burst.at, (t for t, _ in arrivals))))
    # The floor's nodes exist in the model only when some message finds the window open (a burst: its arrival).
    floor = config.warm_gpus.count if config.warm_gpus is not None and any(opened.values()) else 0
    floor_s = warm_floor_seconds_per_day(config, burst.at)
    plans = {}
    for p in ("scaledjob", "consumer"):
        spot = p == "scaledjob" and "spot" in config.gpu_capacity_types
        nt = node_type(config.gpu_instance_types, spot=spot)
        stages = stage_durations(warm=warm, overrides=overrides,
                                 polling_interval_s=config.polling_interval_s,
                                 image_pull_s=image_pull_seconds(config, nt.name),
                                 model_s=model_seconds(config, workload, nt.name))
        max_nodes = max(1, config.gpu_limit // nt.gpus)
        if p == "consumer" or parallel_blocker(facts) is not None:
            parallel = 1
        else:
            parallel = min(workload.max_replicas, max_nodes * nt.pods_per_node)
        floor_nodes = min(floor, max_nodes)
        idle = (nt.usd_per_hour * 24 if p == "consumer"
                else (config.warm_gpus.count if config.warm_gpus is not None else 0) * floor_s * nt.usd_per_hour / 3600)
        plans[p] = simulate(p, arrivals=arrivals, model_load_s=workload.model_load_s,
                            seconds_per_item=workload.seconds_per_item, parallel=parallel, stages=stages, node=nt,
                            max_nodes=max_nodes, warm_floor_nodes=floor_nodes, idle_cost_per_day_usd=idle,
                            floor_open=opened.__getitem__, messages_per_job=per_job)
    return WorkloadPlan(workload.name, burst, pattern, choice.reason, plans,
                        image_pull_note(config, plans[pattern].instance_type))


def plan_stack(config: StackConfig, *, workload: str | None = None, bursts: Iterable[Burst] = (), warm: bool = False,
               overrides: Mapping[str, float] | None = None, trace: TraceCsv | None = None
               ) -> dict[str, list[WorkloadPlan]]:
    """Workload name -> one WorkloadPlan per burst (default: one burst of its `burstItems`), or, with `trace`, one
    plan of the trace's rows for that workload (workloads without rows are left out; `trace` with `bursts` is
    refused, as is a trace with no rows for any planned workload)."""
    names = [w.name for w in config.workloads]
    if workload is not None and workload not in names:
        raise ConfigError("--workload", workload, f"one of {', '.join(names)}")
    bursts = list(bursts)
    selected = [w for w in config.workloads if workload in (None, w.name)]
    if trace is None:
        return {w.name: [plan_workload(config, w, b, warm=warm, overrides=overrides) for b in (bursts or [None])]
                for w in selected}
    if bursts:
        raise ConfigError("--trace", trace.source, "not with --burst (a trace is the whole arrival pattern: give one "
                                                   "or the other)")
    trace.check_workloads(names)
    out = {w.name: [plan_workload(config, w, t, warm=warm, overrides=overrides)]
           for w in selected if (t := trace.for_workload(w.name)) is not None}
    if not out:
        raise ConfigError("--trace", trace.source, f"rows for {workload or 'a workload of the stack'} (its workload "
                                                   f"column names none)")
    return out
