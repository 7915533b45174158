"""The advisor (`plan-burst --deadline/--budget`): the configurations of one workload's burst that the stack allows,
searched with the burst model, ranked cheapest first (or fastest first), each with the config keys that set it.

The space: the pattern (both where the workload's facts allow parallel Jobs), each admitted instance type that hosts
the worker pod, each capacity type the pool may buy (spot, on-demand), the warm floor at the burst's time (off, or
1 to the nodes gpuLimit allows, at most FLOOR_SEARCH_MAX), Jobs at once (`maxReplicas`, 1 to what `gpuLimit` holds)
and messages per Job (1 to the burst). The search prunes it; tests check it against a brute force of small spaces:

- Types of one *shape* (GPUs and pods per node, image pull and model fetch seconds) have the same timeline: each
  shape is simulated once and priced per type and capacity type (cost is node-seconds × price).
- A burst of n messages with N per Job starts ceil(n / N) Jobs, at most R: R above ceil(n / N) changes nothing, so
  each (R, N) is simulated as R = min(R, ceil(n / N)).
- Without a floor every Job starts together, so J Jobs of ceil(n / J) messages (one wave) beat fewer messages per
  Job (more model loads and polls, on the same nodes): J = 1 .. the GPU limit.
- With a floor, Jobs on its nodes start first and may take more than their share: N runs over both ends of each
  class of N that starts J Jobs (ceil(n / J), and the largest N with ceil(n / N) = J), ~4√n values; then, since a
  Job that drains the queue pays an empty long poll, N = the most messages any Job took is tried too.
- Jobs that leave a node's GPUs idle are slower on the same nodes, so no cheaper: Jobs at once run over whole nodes
  (multiples of the pods a node holds), and the top of the range.
- A floor of more nodes than the Jobs fill only costs: the floor runs 1 .. ceil(R / pods per node).
- Time falls and cost rises with R: for each (shape, floor, N) a binary search finds the fewest Jobs at once that
  meet the deadline (with only a budget: the most that fit it); the points it probes are ranked too.
- With a deadline, a (shape, floor, N) whose lower-bound cost (`_Search.cannot_rank`) is above the `top` cheapest
  found so far is skipped: it could not be listed.

Costs: a ScaledJob's is the node-seconds the burst holds (`node_seconds`: `plan-burst`'s bill, but a warm floor's
nodes from its window's start until consolidated after the window or their last Job, whichever is later); the
consumer's is its node for the whole day (it is never released). Pure and deterministic, but for the search's own
duration, which it reports.
"""
from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .. import catalogue
from ..spec.validation import ConfigError
from ..spec.workload import MESSAGES_PER_JOB_MAX
from .advice import Advice, Option
from .arrivals import Burst
from .chooser import choose_pattern, parallel_blocker
from .cron import weekly_window, window_around
from .node_stages import image_pull_seconds, model_seconds
from .report import bound_paragraph
from .simulation import NodeType, PatternPlan, pods_per_node, simulate
from .stack import plan_workload, warm_floor_at
from .stages import CONSOLIDATE_AFTER_S, NODE_STAGES, stage_durations

if TYPE_CHECKING:
    from ..config import StackConfig, WorkloadConfig

__all__ = [
    "MESSAGES_PER_JOB_MAX",
    "ADVICE_TOP",
    "advise",
]

ADVICE_TOP = 5
"""Configurations the advisor lists by default (`--top`)."""
FLOOR_SEARCH_MAX = 16
"""Most warm-floor nodes the advisor tries (a floor is a few idle GPUs; the stack allows at most gpuLimit)."""
FLOOR_LEAD_MARGIN_S = 60
"""Seconds a proposed warm floor comes up before the burst beyond KEDA's poll and the node stages, so its nodes are
Ready with the image cached when the burst lands."""


@dataclass(frozen=True)
class _Shape:
    """Instance types that share one timeline; each priced per capacity type."""

    node: NodeType
    """The first (cheapest) type of the shape, unpriced."""
    max_nodes: int
    """GPU nodes the NodePool's gpuLimit allows."""
    stages: dict
    """Stage seconds for this shape."""
    prices: list
    """(usd per hour, instance type, capacity type), cheapest first."""


def _hosts(config: StackConfig) -> list[catalogue.InstanceType]:
    """Admitted types that host the worker pod, cheapest first (as `node_type` ranks them)."""
    types = [t for name in dict.fromkeys(config.gpu_instance_types)
             if (t := catalogue.instance_type(name)) is not None and pods_per_node(t) >= 1]
    return sorted(types, key=lambda t: (t.on_demand_usd_per_hour, t.name))


def _type_keys(config: StackConfig, chosen: catalogue.InstanceType) -> tuple[dict, str | None]:
    """({'gpuInstanceTypes': [...]} or {}, refusal): the pool's list without the hosting types the planner would
    pick before `chosen`; a refusal when fewer than two hosting types would be left (gpu-pod-effective-diversity)."""
    hosts = _hosts(config)
    cheaper = {t.name for t in hosts if (t.on_demand_usd_per_hour, t.name) < (chosen.on_demand_usd_per_hour,
                                                                               chosen.name)}
    if not cheaper:
        return {}, None
    kept = [n for n in config.gpu_instance_types if n not in cheaper]
    if sum(1 for t in hosts if t.name not in cheaper) < 2 or len(set(kept)) < 2:
        return {}, (f"{chosen.name}: not searched on its own: without the cheaper {', '.join(sorted(cheaper))} fewer "
                    "than two admitted types would host the worker pod (the gpuInstanceTypes rule and the pack's "
                    "gpu-pod-effective-diversity refuse that)")
    return {"gpuInstanceTypes": kept}, None


class _Search:
    """The memoised burst-model runs of one advice, and the options they price."""

    def __init__(self, config: StackConfig, workload: WorkloadConfig, burst: Burst, overrides: Mapping | None):
        self.config, self.workload, self.burst = config, workload, burst
        self.overrides = dict(overrides or {})
        self.runs: dict[tuple, PatternPlan] = {}
        self.options: dict[tuple, Option] = {}
        self.notes: list[str] = []
        self.floors: dict[tuple, tuple[float, float, dict]] = {}
        self.picks: dict[tuple, str] = {}
        self.goal: Callable[[Option], bool] = lambda o: False
        """Whether an option meets the goal; `top_costs` keeps the `top` cheapest costs of those priced so far."""
        self.top, self.top_costs = 1, []

    def shapes(self, pattern: str) -> list[_Shape]:
        """The shapes of the admitted hosting types, with their (price, type, capacity type) for `pattern`."""
        caps = [c for c in ("spot", "on-demand") if c in self.config.gpu_capacity_types]
        if pattern == "consumer" or not caps:
            caps = ["on-demand"]  # the consumer selects on-demand nodes; "reserved" alone is priced as on-demand
        out: dict[tuple, _Shape] = {}
        for t in _hosts(self.config):
            keys, refusal = _type_keys(self.config, t)
            if refusal:
                if refusal not in self.notes:
                    self.notes.append(refusal)
                continue
            ppn = pods_per_node(t)
            pull = image_pull_seconds(self.config, t.name)
            model = model_seconds(self.config, self.workload, t.name)
            k = (ppn, t.gpus, pull, model)
            if k not in out:
                stages = stage_durations(overrides=self.overrides, polling_interval_s=self.config.polling_interval_s,
                                         image_pull_s=pull, model_s=model)
                out[k] = _Shape(NodeType(t.name, ppn, t.gpus, 0.0, "on-demand"),
                                max(1, self.config.gpu_limit // t.gpus), stages, [])
            for c in caps:
                price = t.on_demand_usd_per_hour * (catalogue.SPOT_PRICE_FRACTION if c == "spot" else 1.0)
                out[k].prices.append((price, t.name, c))
        for s in out.values():
            s.prices.sort()
        return list(out.values())

    def run(self, pattern: str, shape: _Shape, floor: int, jobs: int, per_job: int) -> PatternPlan:
        """The burst model for this point (memoised), unpriced."""
        k = (pattern, shape.node, floor, jobs, per_job)
        if k not in self.runs:
            self.runs[k] = simulate(pattern, arrivals=self.burst.arrivals_s(), model_load_s=self.workload.model_load_s,
                                    seconds_per_item=self.workload.seconds_per_item, parallel=jobs,
                                    stages=shape.stages, node=shape.node, max_nodes=shape.max_nodes,
                                    warm_floor_nodes=floor, messages_per_job=per_job)
        return self.runs[k]

    def floor(self, floor: int, stages: Mapping[str, float]) -> tuple[float, float, dict]:
        """(window start, window end, stack keys): `floor` warm nodes up at the burst, in seconds from it (the
        window that covers the burst), and the keys that give them; memoised per floor and per the stages that set
        its lead (a shape's own image pull may differ)."""
        k = (floor, *(stages[s] for s in ("poll", *NODE_STAGES)))
        if k not in self.floors:
            self.floors[k] = self._floor(floor, stages)
        return self.floors[k]

    def _floor(self, floor: int, stages: Mapping[str, float]) -> tuple[float, float, dict]:
        cfg, at = self.config, self.burst.at
        current = warm_floor_at(cfg, at)
        if floor == 0:
            return 0.0, 0.0, ({"warmGpus": None} if current else {})
        if current:  # the stack's floor covers the burst: its window, only the count may change
            ws, we = window_around(cfg.warm_gpus.start, cfg.warm_gpus.end, cfg.warm_gpus.timezone, at)
            keys = {} if floor == current else {"warmGpus": {
                "count": floor, "start": cfg.warm_gpus.start, "end": cfg.warm_gpus.end,
                "timezone": cfg.warm_gpus.timezone}}
            return ws, we, keys
        lead = stages["poll"] + sum(stages[s] for s in NODE_STAGES)
        tz = cfg.warm_gpus.timezone if cfg.warm_gpus is not None else "UTC"
        window = weekly_window(at, lead + FLOOR_LEAD_MARGIN_S, tz)  # on the burst's weekday, to the minute
        ws, we = window_around(window["start"], window["end"], tz, at)
        return ws, we, {"warmGpus": {"count": floor, **window, "timezone": tz}}

    def pick(self, max_replicas: int, per_job: int) -> str:
        """The chooser's pattern for the workload with these settings (memoised)."""
        k = (max_replicas, per_job)
        if k not in self.picks:
            facts = replace(self.workload, max_replicas=max_replicas).facts()
            self.picks[k] = choose_pattern(facts, messages_per_job=per_job).pattern
        return self.picks[k]

    def with_pattern(self, o: Option) -> Option:
        """`o` with a `pattern` key when the chooser would not pick its pattern for its settings (computed for the
        listed options only: the chooser runs the warm model)."""
        w = self.workload
        pick = self.pick(o.workload_keys.get("maxReplicas", w.max_replicas),
                         o.messages_per_job if o.pattern == "scaledjob" else w.messages_per_job)
        if (w.pattern or pick) == o.pattern:
            return o
        return replace(o, workload_keys={**o.workload_keys, "pattern": o.pattern})

    def option(self, pattern: str, shape: _Shape, floor: int, jobs: int, per_job: int) -> list[Option]:
        """Every priced option of one point (one per type and capacity type of the shape), cheapest first."""
        plan = self.run(pattern, shape, floor, jobs, per_job)
        out = []
        for price, type_name, cap in shape.prices:
            k = (pattern, type_name, cap, floor, jobs, per_job)
            if k not in self.options:
                o = self.options[k] = self._price(plan, pattern, shape, price, type_name, cap, floor, jobs, per_job)
                if self.goal(o):
                    bisect.insort(self.top_costs, o.cost_usd)
                    del self.top_costs[self.top:]
            out.append(self.options[k])
        return out

    def cannot_rank(self, shape: _Shape, floor: int, per_job: int) -> bool:
        """True when no point of (shape, floor, N) can cost less than the `top` cheapest that meet the goal so far: a
        lower bound of its node-seconds, the inference and one model load per Job (ceil(n / N) Jobs at least) shared
        by the pods of a node, plus each floor node's lead before the burst and every node's consolidation tail."""
        if len(self.top_costs) < self.top:
            return False
        n, w = self.burst.items, self.workload
        ws = self.floor(floor, shape.stages)[0] if floor else 0.0
        held = ((n * w.seconds_per_item + math.ceil(n / per_job) * w.model_load_s) / shape.node.pods_per_node
                + max(floor, 1) * CONSOLIDATE_AFTER_S - floor * ws)
        return held * shape.prices[0][0] / 3600 > self.top_costs[-1] * (1 + 1e-9)

    def _price(self, plan: PatternPlan, pattern: str, shape: _Shape, price: float, type_name: str, cap: str,
               floor: int, jobs: int, per_job: int) -> Option:
        w, cfg = self.workload, self.config
        stack_keys, _ = _type_keys(cfg, catalogue.instance_type(type_name))
        stack_keys = dict(stack_keys)
        workload_keys: dict[str, Any] = {}
        if pattern == "consumer":
            cost = price * 24  # never released: its node all day
        else:
            ws, we, floor_keys = self.floor(floor, shape.stages)
            stack_keys.update(floor_keys)
            cost = node_seconds(plan, ws, we) * price / 3600
            if "spot" in cfg.gpu_capacity_types and cap == "on-demand":
                stack_keys["gpuCapacityTypes"] = [c for c in cfg.gpu_capacity_types if c != "spot"]
            if per_job != w.messages_per_job:
                workload_keys["messagesPerJob"] = per_job
            if min(w.max_replicas, shape.max_nodes * shape.node.pods_per_node, math.ceil(plan.items / per_job)) != jobs:
                workload_keys["maxReplicas"] = jobs
        priced = replace(plan, instance_type=type_name, capacity_type=cap, usd_per_hour=price,
                         cost_usd=plan.gpu_node_seconds_billed * price / 3600,
                         cost_per_item_usd=plan.gpu_node_seconds_billed * price / 3600 / plan.items)
        return Option(pattern, per_job if pattern == "scaledjob" else 1, jobs, type_name, cap, floor, priced, cost,
                      workload_keys, stack_keys)


def node_seconds(plan: PatternPlan, window_start_s: float = 0.0, window_end_s: float = 0.0) -> float:
    """Node-seconds a ScaledJob burst really holds: each launched node as `simulate` bills it (launch to release,
    60 s minimum), each warm-floor node from its window's start (seconds from the burst, <= 0) until
    `consolidateAfter` past the later of the window's end and its last pod (an ordinary node once the window
    closes)."""
    total = 0.0
    for n in plan.timeline["nodes"]:
        if n["floor"]:
            total += max(window_end_s, n["released"]) + CONSOLIDATE_AFTER_S - window_start_s
        else:
            total += max(float(catalogue.BILLING_MINIMUM_S), n["released"] - n["launched"])
    return total


def _first_true(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The smallest x in [lo, hi] with ok(x), for ok monotone (False then True); None when ok(hi) is False."""
    if lo > hi or not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _last_true(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest x in [lo, hi] with ok(x), for ok monotone (True then False); None when ok(lo) is False."""
    if lo > hi or not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _undominated(ranked: list[Option]) -> list[Option]:
    """`ranked` less each option that an option ranked before it matches or beats on cost, first and last result: a
    list of five near-copies of the cheapest says less than the cheapest and what more money buys."""
    kept: list[Option] = []
    for o in ranked:
        if not any(k.cost_usd <= o.cost_usd + 1e-9 and k.time_to_first_result_s <= o.time_to_first_result_s
                   and k.time_to_last_result_s <= o.time_to_last_result_s for k in kept):
            kept.append(o)
    return kept


def advise(config: StackConfig, workload_name: str, burst: Burst, *, deadline_s: float | None = None,
           budget_usd: float | None = None, overrides: Mapping[str, float] | None = None, top: int = ADVICE_TOP,
           stack: str = "dev", clock: Callable[[], float] = time.perf_counter, undominated: bool = True) -> Advice:
    """Search the configurations of `workload_name`'s `burst` on `config` (see the module docstring) and rank those
    that meet `deadline_s` (cheapest first; within `budget_usd` too when given) or, with only a budget, those within
    it (fastest first). With `undominated` (default), an option that one ranked before it matches or beats on cost,
    first and last result is left out. A one-line ConfigError for a goal-less call or an unknown workload."""
    t0 = clock()
    if deadline_s is None and budget_usd is None:
        raise ConfigError("--deadline", None, "a deadline (e.g. 3h) or --budget USD: what the search aims at")
    names = [w.name for w in config.workloads]
    w = next((x for x in config.workloads if x.name == workload_name), None)
    if w is None:
        raise ConfigError("--workload", workload_name, f"one of {', '.join(names)}")
    search = _Search(config, w, burst, overrides)
    n = burst.items
    search.top = max(1, top)
    meets_time = (lambda o: o.time_to_last_result_s <= deadline_s) if deadline_s is not None else (lambda o: True)
    meets_cost = (lambda o: o.cost_usd <= budget_usd + 1e-12) if budget_usd is not None else (lambda o: True)
    search.goal = lambda o: meets_time(o) and meets_cost(o)
    # Both ends of each class of N that starts J Jobs (ceil(n / N) = J): the smallest, and the largest, which lets a
    # Job on a warm-floor node (it starts first) take more than its share.
    per_jobs = sorted({min(x, MESSAGES_PER_JOB_MAX) for j in range(1, n + 1)
                       for x in (math.ceil(n / j), n if j == 1 else math.ceil(n / (j - 1)) - 1)})
    patterns = ["consumer"] if parallel_blocker(w.facts()) is not None else ["scaledjob", "consumer"]
    if "on-demand" not in config.gpu_capacity_types and "consumer" in patterns:
        patterns.remove("consumer")
        search.notes.append("consumer: not searched: gpuCapacityTypes has no on-demand, which the consumer needs")
    if burst.at is None:
        search.notes.append("warm floor: not searched: the burst has no time (--burst N@TIME)")
    space = 0
    for pattern in patterns:
        for shape in search.shapes(pattern):
            if pattern == "consumer":  # one pod; it finds the stack's own floor when that covers the burst
                space += len(shape.prices)
                search.option("consumer", shape, min(warm_floor_at(config, burst.at), shape.max_nodes), 1, 1)
                continue
            capacity = shape.max_nodes * shape.node.pods_per_node
            floors = range(0, min(shape.max_nodes, FLOOR_SEARCH_MAX) + 1) if burst.at is not None else range(1)
            space += len(shape.prices) * len(floors) * capacity * min(n, MESSAGES_PER_JOB_MAX)

            def cheapest(floor: int, jobs: int, per_job: int, shape: _Shape = shape) -> Option:
                return search.option("scaledjob", shape, floor, jobs, per_job)[0]

            for floor in floors:
                groups: list[tuple[int, list[tuple[int, int]]]] = []
                ppn = shape.node.pods_per_node
                if floor == 0:  # one wave: J Jobs of ceil(n / J) messages
                    hi = min(capacity, n)
                    groups.append((0, [(j, min(math.ceil(n / j), MESSAGES_PER_JOB_MAX))
                                       for j in range(1, hi + 1) if j % ppn == 0 or j == hi]))
                else:
                    lo = (floor - 1) * ppn + 1
                    for per_job in reversed(per_jobs):  # few Jobs first: cheap, so the bound prunes sooner
                        if deadline_s is not None and search.cannot_rank(shape, floor, per_job):
                            continue
                        hi = min(capacity, math.ceil(n / per_job))
                        groups.append((floor, [(j, per_job) for j in range(lo, hi + 1) if j % ppn == 0 or j == hi]))
                for floor_, points in groups:
                    if not points:
                        continue
                    if deadline_s is not None:
                        _first_true(0, len(points) - 1,
                                    lambda i, p=points, f=floor_: meets_time(cheapest(f, *p[i])))
                    else:
                        _last_true(0, len(points) - 1, lambda i, p=points, f=floor_: meets_cost(cheapest(f, *p[i])))
                if floor:  # a Job that drains the queue pays an empty long poll: try N = what the busiest Job took
                    for (pat, node, f, jobs, per_job), run in list(search.runs.items()):
                        busiest = max((pod.get("messages", 0) for pod in run.timeline["pods"]), default=0)
                        if (pat, node, f) == ("scaledjob", shape.node, floor) and 0 < busiest < per_job and \
                                meets_time(cheapest(floor, jobs, per_job)):  # (it can only cost less)
                            cheapest(floor, jobs, busiest)
    evaluated = list(search.options.values())
    good = [o for o in evaluated if meets_time(o) and meets_cost(o)]
    meeting = len(good)
    if deadline_s is not None:
        good.sort(key=lambda o: (round(o.cost_usd, 9), o.time_to_last_result_s, o.time_to_first_result_s, o.key()))
    else:
        good.sort(key=lambda o: (o.time_to_last_result_s, round(o.cost_usd, 9), o.time_to_first_result_s, o.key()))
    good = [search.with_pattern(o) for o in (_undominated(good) if undominated else good)[:max(1, top)]]
    current = _current(search, config, w, burst, overrides)
    bound = None if good else bound_paragraph(evaluated, deadline_s, budget_usd, config, w)
    return Advice(w.name, stack, burst, deadline_s, budget_usd, current, good, meeting,
                  len(evaluated), len(search.runs), space, clock() - t0, bound, search.notes)


def _current(search: _Search, config: StackConfig, w: WorkloadConfig, burst: Burst,
             overrides: Mapping[str, float] | None) -> Option:
    """The stack as configured, as `plan-burst` plans it, with the advisor's cost."""
    wp = plan_workload(config, w, burst, overrides=overrides)
    plan = wp.patterns[wp.pattern]
    if wp.pattern == "consumer":
        cost = plan.usd_per_hour * 24
    else:
        ws, we = ((window_around(config.warm_gpus.start, config.warm_gpus.end, config.warm_gpus.timezone, burst.at))
                  if plan.warm_floor_nodes else (0.0, 0.0))
        cost = node_seconds(plan, ws, we) * plan.usd_per_hour / 3600
    return Option(wp.pattern, plan.messages_per_job, plan.parallel, plan.instance_type, plan.capacity_type,
                  plan.warm_floor_nodes, plan, cost, {}, {})
