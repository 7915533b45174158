"""The burst planner: a deterministic discrete-event model of one burst through KEDA, Karpenter and the GPU pods, as configured.

Model (all times in seconds from the burst's arrival; the defaults of every stage are `catalogue.STAGE_DURATIONS`):

- **ScaledJob**: one Job per message (`maxMessagesPerJob` 1), at most `parallel` at once (`maxReplicas`, capped by
  the NodePool's GPU limit; 1 for ordered or stateful work, which cannot run in parallel). KEDA creates Jobs only
  when it polls: worst case, the burst lands just after a poll, so polls fall at `poll`, 2 × `poll`, ...; a slot
  freed between polls waits for the next one. Every Job loads the model (`model_load_s`), then does one item.
- **Consumer**: one pod created at the burst (it long-polls SQS itself, no KEDA poll), loads the model once and does
  the items in order. It is persistent: its node is never consolidated, so its idle cost per day is a whole day of
  that node. The per-burst figures count one model load (the first burst after a deploy or a node replacement).
- **Nodes**: a pod goes to a node with a free slot (a Ready one, or one in flight: Karpenter counts in-flight
  NodeClaims); else Karpenter launches one: `nodeclaim` (batch window included), `ec2_ready`, `gpu_registered`,
  `image_pull`; a later pod on that node finds the image cached. The node type is the cheapest admitted type that
  can host the pod (CPU, memory, GPUs; DaemonSets ignored). ScaledJob nodes are released `consolidate_after_s` after
  they go empty (WhenEmpty consolidation); billing is per second from the EC2 launch with a 60 s minimum; ScaledJob
  nodes cost spot (`catalogue.SPOT_PRICE_FRACTION` of on-demand, an assumption) when the pool allows spot.
- **Warm floor** (`StackConfig.warm_gpus`): inside its cron window `count` nodes are already Ready with the image
  cached at the burst; they are billed to the burst only while used (their standing cost is the idle cost per day).
- **`warm=True`** (`plan-burst --warm`): every node a pod needs is Ready with the image cached AND KEDA's poll is
  zeroed; what is left is the chooser's seed model: ordered Jobs take n × (load + per_item), one consumer
  load + n × per_item (README: 20 × (45 + 8) = 1,060 s and 45 + 20 × 8 = 205 s). `overrides` apply after it.
"""
from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping

from . import catalogue
from .validation import ConfigError

STAGES = tuple(catalogue.STAGE_DURATIONS)
"""Stages `--set` may override: poll, nodeclaim, ec2_ready, gpu_registered, image_pull."""
NODE_STAGES = ("nodeclaim", "ec2_ready", "gpu_registered", "image_pull")
"""The stages a pod pays only on a node that is not up with the image cached."""
WARM_ZEROED = ("poll",) + NODE_STAGES
"""What `warm=True` sets to 0 s: KEDA's poll and every node and image stage."""
KEDA_DEFAULT_POLLING_INTERVAL_S = catalogue.STAGE_DURATIONS["poll"].seconds
"""KEDA's default `pollingInterval` (30 s), used when a workload sets none."""
CONSOLIDATE_AFTER_S = 300
"""The GPU NodePool's `consolidateAfter` (GpuNodePoolArgs default "5m"), seconds an empty node is kept."""
POD_CPU_CORES, POD_MEMORY_GIB, POD_GPUS = 4.0, 24, 1
"""The worker pod's requests (WorkerPodSettings defaults: 4 cores, 24 GiB, 1 GPU), to find the types that host it."""
SECONDS_PER_DAY = 86_400


def stage_durations(*, warm: bool = False, overrides: Mapping[str, float] | None = None,
                    polling_interval_s: float | None = None) -> dict[str, float]:
    """Stage name -> seconds: the catalogue's defaults, the workload's polling interval, `warm`'s zeros, then
    `overrides` (unknown stage names or negative values raise a one-line ConfigError)."""
    stages = {name: float(s.seconds) for name, s in catalogue.STAGE_DURATIONS.items()}
    if polling_interval_s is not None:
        stages["poll"] = float(polling_interval_s)
    if warm:
        stages.update({name: 0.0 for name in WARM_ZEROED})
    for name, value in (overrides or {}).items():
        if name not in stages:
            raise ConfigError("--set", name, f"a stage, one of {', '.join(STAGES)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
            raise ConfigError(f"--set {name}", value, "seconds >= 0")
        stages[name] = float(value)
    return stages


def parse_set(text: str) -> tuple[str, float]:
    """`image_pull=40` -> ("image_pull", 40.0); a bad one raises ConfigError naming --set and the value."""
    name, sep, value = str(text).partition("=")
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not sep or name not in STAGES or not (seconds >= 0 and math.isfinite(seconds)):
        raise ConfigError("--set", text, f"STAGE=SECONDS with STAGE one of {', '.join(STAGES)} and SECONDS >= 0")
    return name, seconds


@dataclass(frozen=True)
class Burst:
    """One burst: how many messages arrive at once, and when (for the warm floor's schedule)."""

    items: int
    """Messages arriving together. >= 1."""
    at: datetime | None = None
    """When they arrive (time-zone aware; a naive time is UTC). None (default): no time, the warm floor is ignored."""


def parse_burst(text: str) -> Burst:
    """`20@2026-01-05T09:30:00+00:00` -> Burst(20, that time); a bad one raises ConfigError naming --burst."""
    m = re.match(r"^(\d+)@(.+)$", str(text).strip())
    try:
        if not m or int(m.group(1)) < 1:
            raise ValueError
        at = datetime.fromisoformat(m.group(2))
    except ValueError:
        raise ConfigError("--burst", text, "N@ISO-DATETIME with N >= 1, e.g. 20@2026-01-05T09:30:00+00:00") from None
    return Burst(int(m.group(1)), at if at.tzinfo else at.replace(tzinfo=timezone.utc))


@dataclass(frozen=True)
class NodeType:
    """The instance type a pod lands on and what it costs."""

    name: str
    """Instance type, e.g. g4dn.2xlarge (the cheapest admitted type that hosts the pod)."""
    pods_per_node: int
    """Worker pods one node holds (by GPUs, CPU and memory)."""
    gpus: int
    """GPUs of one node."""
    usd_per_hour: float
    """What one node costs per hour as priced (on-demand, or spot by `catalogue.SPOT_PRICE_FRACTION`)."""
    capacity_type: str
    """'spot' or 'on-demand'."""


def pods_per_node(t: catalogue.InstanceType, cpu_cores: float = POD_CPU_CORES, memory_gib: float = POD_MEMORY_GIB,
                  gpus: int = POD_GPUS) -> int:
    """How many worker pods of these requests instance type `t` holds (0 when it cannot host one)."""
    return int(min(t.gpus // gpus, t.allocatable_cpu_m // int(cpu_cores * 1000),
                   t.allocatable_memory_mib // int(memory_gib * 1024)))


def node_type(instance_types: Iterable[str], *, spot: bool) -> NodeType:
    """The cheapest (on-demand price) admitted type that can host the worker pod; ConfigError when none can."""
    hosts = [(t.on_demand_usd_per_hour, t.name, t) for name in instance_types
             if (t := catalogue.instance_type(name)) is not None and pods_per_node(t) >= 1]
    if not hosts:
        raise ConfigError("gpuInstanceTypes", list(instance_types),
                          f"at least one type that hosts the worker pod ({POD_CPU_CORES:g} CPU, {POD_MEMORY_GIB} GiB, "
                          f"{POD_GPUS} GPU)")
    price, name, t = min(hosts)
    return NodeType(name, pods_per_node(t), t.gpus, price * (catalogue.SPOT_PRICE_FRACTION if spot else 1.0),
                    "spot" if spot else "on-demand")


TIMELINE_PODS = 200
"""Pods (and results per pod) kept for the timeline; the figures always count every pod."""


@dataclass
class _Node:
    """One GPU node during the simulation (times in seconds from the burst)."""

    id: int
    """Index in launch order (warm-floor nodes first)."""
    launched_at: float
    """NodeClaim created / EC2 launch: billing starts here."""
    ready_at: float
    """Node Ready."""
    gpu_at: float
    """nvidia.com/gpu allocatable."""
    image_at: float
    """Worker image on the node (pods can start)."""
    floor: bool = False
    """True for a warm-floor node (up before the burst, never consolidated). Default False."""
    created_at: float = 0.0
    """When the pod that caused the launch was created. Default 0."""
    ends: list = field(default_factory=list)
    """End times of pods still running at the last query."""
    last: float | None = None
    """End of the last pod placed here; None (default) before any."""

    def running(self, t: float) -> int:
        self.ends = [e for e in self.ends if e > t]  # query times never go back, so ended pods are dropped for good
        return len(self.ends)

    def last_end(self) -> float:
        return self.image_at if self.last is None else self.last


@dataclass(frozen=True)
class PatternPlan:
    """One pattern's run of one burst: the times, the bill and the timeline behind them (seconds, USD)."""

    pattern: str
    """'scaledjob' or 'consumer'."""
    items: int
    """Messages in the burst."""
    time_to_first_result_s: float
    """Burst arrival to the first result."""
    time_to_last_result_s: float
    """Burst arrival to the last result."""
    gpu_busy_s: float
    """Pod-seconds from container start to exit (with warm=True: n × (load + per_item) as Jobs, load + n × per_item
    as one consumer)."""
    gpu_node_seconds_billed: float
    """Node-seconds billed for the burst (per second, 60 s minimum per launch, consolidation tail included)."""
    cost_usd: float
    """gpu_node_seconds_billed × the node's price."""
    cost_per_item_usd: float
    """cost_usd / items."""
    idle_cost_per_day_usd: float
    """What the pattern costs on a day with no burst: the consumer's node all day; for Jobs the warm floor's hours."""
    instance_type: str
    """Node type (cheapest admitted type hosting the pod)."""
    capacity_type: str
    """'spot' or 'on-demand'."""
    usd_per_hour: float
    """Price of one node as assumed."""
    parallel: int
    """Most pods at once."""
    nodes_launched: int
    """Nodes Karpenter launched for the burst (warm-floor nodes not counted)."""
    warm_floor_nodes: int
    """Warm-floor nodes Ready at the burst (0 outside the schedule)."""
    cold_start_s: float
    """Burst arrival to the first pod serving (poll + node + image + model load, as paid)."""
    stages: dict
    """Stage name -> seconds used (with model_load and per_item)."""
    timeline: dict = field(repr=False, default_factory=dict)
    """{'nodes': [...], 'pods': [...]} with each stage's times, for the PNG."""

    def summary(self) -> dict[str, Any]:
        """The JSON keys (no timeline)."""
        keys = ("pattern", "items", "time_to_first_result_s", "time_to_last_result_s", "cold_start_s", "gpu_busy_s",
                "gpu_node_seconds_billed", "cost_usd", "cost_per_item_usd", "idle_cost_per_day_usd", "instance_type",
                "capacity_type", "usd_per_hour", "parallel", "nodes_launched", "warm_floor_nodes", "stages")
        out = {k: getattr(self, k) for k in keys}
        for k in ("cost_usd", "cost_per_item_usd", "idle_cost_per_day_usd", "usd_per_hour"):
            out[k] = round(out[k], 6)
        return out


def simulate(pattern: str, *, items: int, model_load_s: float, seconds_per_item: float, parallel: int,
             stages: Mapping[str, float], node: NodeType | None = None, max_nodes: int | None = None,
             warm_floor_nodes: int = 0, consolidate_after_s: float = CONSOLIDATE_AFTER_S,
             idle_cost_per_day_usd: float | None = None) -> PatternPlan:
    """Run one burst of `items` through `pattern` ('scaledjob' or 'consumer') and return its plan (pure).

    `node` None prices nothing (cost 0; the chooser's use); `max_nodes` None means no NodePool limit."""
    if pattern not in ("scaledjob", "consumer"):
        raise ConfigError("pattern", pattern, "scaledjob or consumer")
    node = node or NodeType("unpriced", 1, 1, 0.0, "on-demand")
    load, per = float(model_load_s), float(seconds_per_item)
    nodes: list[_Node] = [_Node(i, 0.0, 0.0, 0.0, 0.0, floor=True) for i in range(warm_floor_nodes)]
    pods: list[dict] = []
    tally = {"first": math.inf, "last": 0.0, "busy": 0.0, "serving": math.inf}

    def alive(n: _Node, t: float) -> bool:
        return n.floor or pattern == "consumer" or n.running(t) > 0 or t <= n.last_end() + consolidate_after_s

    def place(created: float) -> _Node:
        free = [n for n in nodes if alive(n, created) and n.running(created) < node.pods_per_node]
        if free:
            return min(free, key=lambda n: (max(created, n.image_at), n.id))
        if max_nodes is not None and sum(1 for n in nodes if alive(n, created)) >= max_nodes:
            raise ConfigError("gpuLimit", max_nodes, "room for one more node (the model's parallelism exceeds it)")
        launched = created + stages["nodeclaim"]
        ready = launched + stages["ec2_ready"]
        gpu = ready + stages["gpu_registered"]
        n = _Node(len(nodes), launched, ready, gpu, gpu + stages["image_pull"], created_at=created)
        nodes.append(n)
        return n

    def run_pod(n: _Node, created: float, items_here: int, label: str) -> float:
        start = max(created, n.image_at)
        serving = start + load
        end = serving + per * items_here
        n.ends.append(end)
        n.last = end if n.last is None else max(n.last, end)
        tally["first"] = min(tally["first"], serving + per)
        tally["last"] = max(tally["last"], end)
        tally["busy"] += end - start
        tally["serving"] = min(tally["serving"], serving)
        if len(pods) < TIMELINE_PODS:
            pods.append({"label": label, "node": n.id, "created": created, "start": start, "serving": serving,
                         "end": end, "results": [serving + per * (k + 1) for k in range(min(items_here, TIMELINE_PODS))]})
        return end

    if pattern == "consumer":
        run_pod(place(0.0), 0.0, items, "consumer")
        parallel = 1
    else:
        poll = float(stages["poll"])

        def next_poll(t: float) -> float:
            return t if poll == 0 else poll * max(1, math.ceil(t / poll - 1e-9))

        # One heap entry per GPU slot: (free at, tie-break, node it last ran on). A slot's own node has the image
        # cached and a free slot when the slot frees, so it is the best place for the next Job while it is alive.
        slots: list = [(0.0, k, None) for k in range(max(1, parallel))]
        heapq.heapify(slots)
        for i in range(items):
            free_at, k, n = heapq.heappop(slots)
            created = next_poll(free_at)
            reusable = n is not None and (n.floor or created <= n.last_end() + consolidate_after_s
                                          or n.running(created) > 0)
            if not (reusable and n.running(created) < node.pods_per_node):  # (place() may have filled it meanwhile)
                n = place(created)
            heapq.heappush(slots, (run_pod(n, created, 1, f"job {i + 1}"), k, n))

    launched = [n for n in nodes if not n.floor]
    billed = 0.0
    node_rows = []
    for n in nodes:
        if n.floor:
            end = n.last if n.last is not None else 0.0
            span = end  # the floor is paid anyway; the burst is charged only while it uses a floor node
        else:
            end = n.last_end() + (0.0 if pattern == "consumer" else consolidate_after_s)
            span = max(float(catalogue.BILLING_MINIMUM_S), end - n.launched_at)
        billed += span
        node_rows.append({"id": n.id, "floor": n.floor, "created": n.created_at,
                          "launched": n.launched_at, "ready": n.ready_at, "gpu": n.gpu_at, "image": n.image_at,
                          "released": end})
    cost = billed * node.usd_per_hour / 3600
    if idle_cost_per_day_usd is None:
        idle_cost_per_day_usd = node.usd_per_hour * 24 if pattern == "consumer" else 0.0
    used = dict(stages)
    if pattern == "consumer":
        used["poll"] = 0.0
    used.update(model_load=load, per_item=per)
    return PatternPlan(
        pattern=pattern, items=items, time_to_first_result_s=tally["first"], time_to_last_result_s=tally["last"],
        gpu_busy_s=tally["busy"], gpu_node_seconds_billed=billed, cost_usd=cost,
        cost_per_item_usd=cost / items, idle_cost_per_day_usd=idle_cost_per_day_usd, instance_type=node.name,
        capacity_type=node.capacity_type, usd_per_hour=node.usd_per_hour, parallel=parallel,
        nodes_launched=len(launched), warm_floor_nodes=warm_floor_nodes,
        cold_start_s=tally["serving"], stages=used, timeline={"nodes": node_rows, "pods": pods})


def seed_estimates(*, items: int, model_load_s: float, seconds_per_item: float, parallel: int
                   ) -> tuple[float, float, float]:
    """(jobs GPU-seconds, consumer seconds, jobs wall seconds) of the warm model, as the chooser uses them."""
    stages = stage_durations(warm=True)
    jobs = simulate("scaledjob", items=items, model_load_s=model_load_s, seconds_per_item=seconds_per_item,
                    parallel=parallel, stages=stages)
    consumer = simulate("consumer", items=items, model_load_s=model_load_s, seconds_per_item=seconds_per_item,
                        parallel=1, stages=stages)
    return jobs.gpu_busy_s, consumer.time_to_last_result_s, jobs.time_to_last_result_s


# --------------------------------------------------------------------------------------------------------------------
# The stack as configured.
# --------------------------------------------------------------------------------------------------------------------

def warm_floor_at(config: Any, at: datetime | None) -> int:
    """Warm-floor nodes Ready at `at`: `config.warm_gpus.count` inside its cron window, else 0 (also without a time
    or without `warm_gpus`)."""
    from zoneinfo import ZoneInfo

    from .cron import window_active

    warm = getattr(config, "warm_gpus", None)
    if warm is None or at is None:
        return 0
    local = at.astimezone(ZoneInfo(warm.timezone))
    return int(warm.count) if window_active(warm.start, warm.end, local) else 0


def warm_floor_seconds_per_day(config: Any, at: datetime | None) -> float:
    """Seconds a day the warm floor holds its nodes: on the burst's local date, or averaged over the week starting
    Monday 2026-01-05 when the burst has no time."""
    from zoneinfo import ZoneInfo

    from .cron import active_seconds

    warm = getattr(config, "warm_gpus", None)
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
    """One workload's burst under both patterns, and which one the stack runs."""

    workload: str
    """Workload name."""
    burst: Burst
    """The burst planned."""
    pattern: str
    """The pattern the stack runs (the config's `pattern`, or the chooser's pick)."""
    reason: str
    """The chooser's reason."""
    patterns: dict
    """'scaledjob' and 'consumer' -> PatternPlan."""

    def summary(self) -> dict[str, Any]:
        """The chosen pattern's keys, its `reason`, the burst, and `patterns` with both."""
        out = self.patterns[self.pattern].summary()
        out.update(pattern=self.pattern, reason=self.reason,
                   burst_at=self.burst.at.isoformat() if self.burst.at else None,
                   patterns={k: p.summary() for k, p in self.patterns.items()})
        return out


def plan_workload(config: Any, workload: Any, burst: Burst | None = None, *, warm: bool = False,
                  overrides: Mapping[str, float] | None = None) -> WorkloadPlan:
    """Plan one burst (default: `workload.burst_items`, no time) of `workload` on the stack `config` (a StackConfig)."""
    from .chooser import choose_pattern, parallel_blocker

    burst = burst or Burst(workload.burst_items)
    facts = workload.facts()
    choice = choose_pattern(facts)
    pattern = workload.pattern or choice.pattern
    stages = stage_durations(warm=warm, overrides=overrides,
                             polling_interval_s=getattr(workload, "polling_interval_s", None))
    floor = warm_floor_at(config, burst.at)
    floor_s = warm_floor_seconds_per_day(config, burst.at)
    plans = {}
    for p in ("scaledjob", "consumer"):
        spot = p == "scaledjob" and "spot" in config.gpu_capacity_types
        nt = node_type(config.gpu_instance_types, spot=spot)
        max_nodes = max(1, config.gpu_limit // nt.gpus)
        if p == "consumer" or parallel_blocker(facts) is not None:
            parallel = 1
        else:
            parallel = min(workload.max_replicas, max_nodes * nt.pods_per_node)
        floor_nodes = min(floor, max_nodes)
        idle = (nt.usd_per_hour * 24 if p == "consumer"
                else getattr(getattr(config, "warm_gpus", None), "count", 0) * floor_s * nt.usd_per_hour / 3600)
        plans[p] = simulate(p, items=burst.items, model_load_s=workload.model_load_s,
                            seconds_per_item=workload.seconds_per_item, parallel=parallel, stages=stages, node=nt,
                            max_nodes=max_nodes, warm_floor_nodes=floor_nodes, idle_cost_per_day_usd=idle)
    return WorkloadPlan(workload.name, burst, pattern, choice.reason, plans)


def plan_stack(config: Any, *, workload: str | None = None, bursts: Iterable[Burst] = (), warm: bool = False,
               overrides: Mapping[str, float] | None = None) -> dict[str, list[WorkloadPlan]]:
    """Workload name -> one WorkloadPlan per burst (default: one burst of its `burstItems`)."""
    names = [w.name for w in config.workloads]
    if workload is not None and workload not in names:
        raise ConfigError("--workload", workload, f"one of {', '.join(names)}")
    bursts = list(bursts)
    return {w.name: [plan_workload(config, w, b, warm=warm, overrides=overrides) for b in (bursts or [None])]
            for w in config.workloads if workload in (None, w.name)}


def plans_json(plans: Mapping[str, list[WorkloadPlan]]) -> dict[str, Any]:
    """`{"workloads": {NAME: {first burst's keys..., "patterns": {...}, "bursts": [every burst]}}}`."""
    out = {}
    for name, per_burst in plans.items():
        entry = per_burst[0].summary()
        entry["bursts"] = [p.summary() for p in per_burst]
        out[name] = entry
    return {"workloads": out}


def _fmt_s(s: float) -> str:
    return f"{s:,.0f} s ({int(s // 60)} min {s % 60:02.0f} s)" if s >= 60 else f"{s:,.0f} s"


def plans_table(plans: Mapping[str, list[WorkloadPlan]]) -> str:
    """A readable report: per workload and burst, the stages and both patterns' times and costs."""
    lines = []
    for name, per_burst in plans.items():
        for wp in per_burst:
            when = wp.burst.at.isoformat() if wp.burst.at else "no time (warm floor not applied)"
            lines += [f"{name}: burst of {wp.burst.items} at {when}; runs as {wp.pattern}", f"  chooser: {wp.reason}"]
            st = wp.patterns["scaledjob"].stages
            lines.append("  stages: " + ", ".join(f"{k} {v:g} s" for k, v in st.items()))
            lines.append(f"  {'pattern':<11}{'type':<24}{'par':>4}{'nodes':>6}{'floor':>6}{'cold start':>22}"
                         f"{'first result':>22}{'last result':>22}{'node-s':>9}{'cost $':>10}{'$/item':>10}"
                         f"{'idle $/day':>11}")
            for p in ("scaledjob", "consumer"):
                pp = wp.patterns[p]
                mark = "*" if p == wp.pattern else " "
                lines.append(f" {mark}{p:<11}{pp.instance_type + ' ' + pp.capacity_type:<24}{pp.parallel:>4}"
                             f"{pp.nodes_launched:>6}{pp.warm_floor_nodes:>6}{_fmt_s(pp.cold_start_s):>22}"
                             f"{_fmt_s(pp.time_to_first_result_s):>22}{_fmt_s(pp.time_to_last_result_s):>22}"
                             f"{pp.gpu_node_seconds_billed:>9,.0f}{pp.cost_usd:>10.4f}{pp.cost_per_item_usd:>10.5f}"
                             f"{pp.idle_cost_per_day_usd:>11.2f}")
            lines.append("")
    lines.append("* = the pattern the stack runs. Times from the burst's arrival; costs per burst (per-second billing, "
                 f"60 s minimum, {CONSOLIDATE_AFTER_S} s consolidation tail for Job nodes; spot at "
                 f"{catalogue.SPOT_PRICE_FRACTION:.0%} of on-demand, an assumption).")
    return "\n".join(lines)


def write_timeline(wp: WorkloadPlan, path: Any) -> None:
    """A PNG timeline of both patterns (nodes with their start-up stages, pods with load and inference, results)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"nodeclaim": "#bbbbbb", "ec2_ready": "#9ecae1", "gpu_registered": "#6baed6", "image_pull": "#fd8d3c",
               "wait": "#eeeeee", "model_load": "#e6550d", "inference": "#31a354", "node_up": "#dadaeb"}
    fig, axes = plt.subplots(2, 1, figsize=(12, 7), squeeze=False)
    for ax, p in zip(axes[:, 0], ("scaledjob", "consumer")):
        plan = wp.patterns[p]
        rows: list[tuple[str, list[tuple[float, float, str]]]] = []
        for n in plan.timeline["nodes"]:
            segs = [] if n["floor"] else [(n["created"], n["launched"], "nodeclaim"), (n["launched"], n["ready"], "ec2_ready"),
                                          (n["ready"], n["gpu"], "gpu_registered"), (n["gpu"], n["image"], "image_pull")]
            segs.append((n["image"], n["released"], "node_up"))
            rows.append((f"node {n['id']}{' (floor)' if n['floor'] else ''}", segs))
        for pod in plan.timeline["pods"][:40]:
            rows.append((pod["label"], [(pod["created"], pod["start"], "wait"), (pod["start"], pod["serving"], "model_load"),
                                        (pod["serving"], pod["end"], "inference")]))
        for y, (label, segs) in enumerate(rows):
            for a, b, kind in segs:
                if b > a:
                    ax.barh(y, b - a, left=a, color=colours[kind], edgecolor="none")
        results = sorted(r for pod in plan.timeline["pods"] for r in pod["results"])
        ax.plot(results, [len(rows)] * len(results), "|", color="black")
        ax.set_yticks(range(len(rows) + 1), [r[0] for r in rows] + ["results"], fontsize=6)
        ax.invert_yaxis()
        ax.set_title(f"{wp.workload} as {p}: {plan.items} messages, first result {plan.time_to_first_result_s:,.0f} s, "
                     f"last {plan.time_to_last_result_s:,.0f} s, ${plan.cost_usd:.3f}", fontsize=9)
        ax.set_xlabel("seconds from the burst")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    fig.legend(handles, list(colours), loc="lower center", ncol=len(colours), fontsize=7)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
