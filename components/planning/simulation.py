"""The burst simulation: a deterministic discrete-event model of one burst, or of a recorded trace of arrivals,
through KEDA, Karpenter and the GPU pods, as configured.

Model (all times in seconds from the burst's arrival, or from a trace's first arrival; the defaults of every stage
are `catalogue.STAGE_DURATIONS`). A burst of n messages is the trace of one arrival of n at 0 s: both go through the
same `simulate`.

- **ScaledJob**: a Job takes up to `messages_per_job` (N) messages, one at a time, then exits (the worker's
  `--max-messages`; KEDA's `queueLength` is N too); at most `parallel` Jobs at once (`maxReplicas`, capped by the
  NodePool's GPU limit; 1 for ordered or stateful work, which cannot run in parallel). KEDA creates Jobs only when
  it polls: worst case, the (first) arrival lands just after a poll, so polls fall at `poll`, 2 × `poll`, ... on a
  fixed grid. At a poll, KEDA's default strategy with in-flight counting (components/scaledjob.py) starts
  min(ceil(Q / N), `parallel`) − running Jobs, Q being the messages arrived and not yet done (visible or in flight),
  running the Jobs not yet exited (pending ones included). Every Job loads the model once, then receives messages
  in arrival order, each when its previous one is done (a message that arrives later: when it arrives); a Job that
  finds the queue empty waits one long poll (`catalogue.WORKER_EMPTY_RECEIVE_S`) and exits. With N = 1 this is one
  Job per message, each picked up at the first poll at or after max(its arrival, a slot frees).
- **Model load**: every pod pays `model_load_s` (the workload's `modelLoadS`: the model, on the node's disk with
  its digest checked, loaded onto the GPU). With a lab's own model, the first pod on a node first fetches it from S3
  into the node-local cache (`stages["model_fetch"]`); a later pod (one that starts while that fetch runs waits for
  it) reads the cached file and checks its digest (`stages["model_cache_hit"]`); both are 0 s when the model is in
  the image.
- **Consumer**: one pod created at the (first) arrival (it long-polls SQS itself, no KEDA poll), loads the model
  once and does the items in arrival order, each at max(its arrival, the previous item's end). It is persistent: its
  node is never consolidated, so its idle cost per day is a whole day of that node. The figures count one model
  load (the first burst after a deploy or a node replacement).
- **Nodes**: a pod goes to a node with a free slot (a Ready one, or one in flight: Karpenter counts in-flight
  NodeClaims); else Karpenter launches one: `nodeclaim` (batch window included), `ec2_ready`, `gpu_registered`,
  `image_pull`; a later pod on that node finds the image cached. The node type is the cheapest admitted type that
  can host the pod (CPU, memory, GPUs; DaemonSets ignored). ScaledJob nodes are released `consolidate_after_s` after
  they go empty (WhenEmpty consolidation), so a trace with a longer gap launches fresh (cold) nodes again; billing is
  per second from the EC2 launch with a 60 s minimum; ScaledJob nodes cost spot (`catalogue.SPOT_PRICE_FRACTION` of
  on-demand, an assumption) when the pool allows spot.
- **Warm floor** (`StackConfig.warm_gpus`): a message arriving inside its cron window (`cron.window_active` in the
  floor's time zone) finds `count` nodes Ready with the image cached; one arriving outside finds them only if they
  are still busy or within `consolidate_after_s` of their last pod (they are ordinary nodes then). They are billed
  to the burst only from the arrival a pod serves to that pod's end (their standing cost is the idle cost per day).
- **`warm=True`** (`plan-burst --warm`): every node a pod needs is Ready with the image cached AND KEDA's poll is
  zeroed; what is left is the chooser's seed model: ordered Jobs take n × (load + per_item), one consumer
  load + n × per_item (docs/planner.md: 20 × (45 + 8) = 1,060 s and 45 + 20 × 8 = 205 s). `overrides` apply after it.
- **Latency**: per message, its result time − its arrival; reported as mean, p95 (nearest rank) and max.

Trace CSV (`plan-burst --trace FILE`, `parse_trace`): a header row, then one row per arrival; columns `at`
(ISO-8601 datetime, naive = UTC; required), `items` (messages, a whole number >= 1; default 1) and `workload` (the
row applies only to that workload; empty cell or no column: to every workload). Rows in any order; rows at the same
time add up; blank lines and lines starting with # are skipped. E.g.::

    at,items,workload
    2026-01-05T09:00:00Z,20,studies
    2026-01-05T10:00:00Z,20,studies
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import catalogue
from ..spec.validation import ConfigError
from .jobs import run_jobs
from .stages import CONSOLIDATE_AFTER_S, POD_CPU_CORES, POD_GPUS, POD_MEMORY_GIB, stage_durations

__all__ = [
    "NodeType",
    "pods_per_node",
    "node_type",
    "TIMELINE_PODS",
    "PatternPlan",
    "TIMELINE_ARRIVALS",
    "simulate",
    "seed_estimates",
]

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
    """One GPU node during the simulation (times in seconds from the burst, or a trace's first arrival)."""

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
    model_at: float | None = None
    """When the model is in the node-local cache (the first pod's fetch done); None (default) before any pod."""

    def running(self, t: float) -> int:
        """Pods running at `t`."""
        self.ends = [e for e in self.ends if e > t]  # query times never go back, so ended pods are dropped for good
        return len(self.ends)

    def last_end(self) -> float:
        """When the node last went (or goes) empty: its last pod's end, or image_at before any."""
        return self.image_at if self.last is None else self.last


@dataclass(frozen=True)
class PatternPlan:
    """One pattern's run of one burst or trace: the times, the bill and the timeline behind them (seconds, USD)."""

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
    """Nodes Karpenter launched for the burst (warm-floor nodes not counted): the cold starts."""
    warm_floor_nodes: int
    """Warm-floor nodes Ready at the burst (a trace: at its first arrival; 0 outside the schedule)."""
    cold_start_s: float
    """Burst arrival to the first pod serving (poll + node + image + model load, as paid)."""
    stages: dict[str, Any]
    """Stage name -> seconds used (with model_load and per_item)."""
    latency_mean_s: float
    """Mean over the messages of (result time - the message's arrival)."""
    latency_p95_s: float
    """95th percentile (nearest rank) of the same."""
    latency_max_s: float
    """Largest of the same."""
    arrivals: int
    """Distinct arrival times (1 for a burst)."""
    timeline: dict[str, Any] = field(repr=False, default_factory=dict)
    """{'nodes': [...], 'pods': [...], 'arrivals': [(s, messages), ...]} with each stage's times, for the PNG."""
    messages_per_job: int = 1
    """Messages one Job takes before it exits (1 for the consumer, which is not a Job). Default 1."""
    pods: int = 1
    """Pods run: the Jobs KEDA started, or 1 (the consumer). Default 1."""
    model_fetches: int = 0
    """Pods that fetched the model into a node's cache (the first on each node; 0 when `model_fetch` is 0)."""

    def summary(self) -> dict[str, Any]:
        """The JSON keys (no timeline)."""
        keys = ("pattern", "items", "time_to_first_result_s", "time_to_last_result_s", "cold_start_s", "gpu_busy_s",
                "gpu_node_seconds_billed", "cost_usd", "cost_per_item_usd", "idle_cost_per_day_usd", "instance_type",
                "capacity_type", "usd_per_hour", "parallel", "messages_per_job", "pods", "model_fetches",
                "nodes_launched", "warm_floor_nodes", "stages", "latency_mean_s", "latency_p95_s", "latency_max_s",
                "arrivals")
        out = {k: getattr(self, k) for k in keys}
        for k in ("cost_usd", "cost_per_item_usd", "idle_cost_per_day_usd", "usd_per_hour"):
            out[k] = round(out[k], 6)
        return out


def _arrivals(items: int | None, arrivals: Iterable[tuple[float, int]] | None) -> list[tuple[float, int]]:
    """The arrivals as sorted (seconds from the first arrival, messages), one per distinct time; a burst of `items`
    is one arrival at 0 s. Bad input raises a one-line ConfigError."""
    if arrivals is None:
        if isinstance(items, bool) or not isinstance(items, int) or items < 1:
            raise ConfigError("items", items, "a whole number of messages >= 1")
        return [(0.0, items)]
    merged: dict[float, int] = {}
    for t, n in arrivals:
        if isinstance(n, bool) or not isinstance(n, int) or n < 1 or not math.isfinite(float(t)):
            raise ConfigError("arrivals", (t, n), "(seconds, messages) with finite seconds and messages >= 1")
        merged[float(t)] = merged.get(float(t), 0) + n
    if not merged:
        raise ConfigError("arrivals", [], "at least one (seconds, messages) arrival")
    first = min(merged)
    out = sorted((t - first, n) for t, n in merged.items())  # the model's clock starts at the first arrival
    if items is not None and items != sum(n for _, n in out):
        raise ConfigError("items", items, f"the arrivals' total ({sum(n for _, n in out)}) or None")
    return out


def _union_s(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by the union of [a, b) intervals."""
    total, cur_a, cur_b = 0.0, None, None
    for a, b in sorted(intervals):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    return total + (cur_b - cur_a if cur_b is not None else 0.0)


def _p95(values: list[float]) -> float:
    """95th percentile, nearest rank (the smallest value with at least 95% of the values at or below it)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)] if ordered else 0.0


TIMELINE_ARRIVALS = 5000
"""Distinct arrival times kept for the timeline's 'messages' row."""


def simulate(pattern: str, *, items: int | None = None, model_load_s: float, seconds_per_item: float, parallel: int,
             stages: Mapping[str, float], node: NodeType | None = None, max_nodes: int | None = None,
             warm_floor_nodes: int = 0, consolidate_after_s: float = CONSOLIDATE_AFTER_S,
             idle_cost_per_day_usd: float | None = None, arrivals: Iterable[tuple[float, int]] | None = None,
             floor_open: Callable[[float], bool] | None = None, messages_per_job: int = 1) -> PatternPlan:
    """Run messages through `pattern` ('scaledjob' or 'consumer') and return its plan (pure).

    `arrivals` are (seconds, messages) pairs, any order (times are taken from the first arrival); without them, one
    burst of `items` at 0 s, the special case every burst is. `floor_open(t)` says whether a message arriving at
    t s finds the `warm_floor_nodes` floor nodes up (None: always). `node` None prices nothing (cost 0; the chooser's
    use); `max_nodes` None means no NodePool limit. `messages_per_job` (>= 1) is what a ScaledJob's Job takes before
    it exits; the consumer ignores it. `stages` without `model_fetch` fetch nothing."""
    if pattern not in ("scaledjob", "consumer"):
        raise ConfigError("pattern", pattern, "scaledjob or consumer")
    if isinstance(messages_per_job, bool) or not isinstance(messages_per_job, int) or messages_per_job < 1:
        raise ConfigError("messagesPerJob", messages_per_job, "a whole number of messages >= 1")
    node = node or NodeType("unpriced", 1, 1, 0.0, "on-demand")
    load, per = float(model_load_s), float(seconds_per_item)
    fetch, hit = float(stages.get("model_fetch", 0.0)), float(stages.get("model_cache_hit", 0.0))
    arrivals = _arrivals(items, arrivals)
    msgs = [t for t, n in arrivals for _ in range(n)]  # one arrival time per message, in arrival order
    items = len(msgs)
    opened = {t: True if floor_open is None else bool(floor_open(t)) for t, _ in arrivals}
    nodes: list[_Node] = [_Node(i, 0.0, 0.0, 0.0, 0.0, floor=True) for i in range(warm_floor_nodes)]
    pods: list[dict] = []
    latencies: list[float] = []
    floor_use: dict[int, list[tuple[float, float]]] = {}
    tally = {"first": math.inf, "last": 0.0, "busy": 0.0, "serving": math.inf, "fetches": 0}

    def alive(n: _Node, t: float, floor_ok: bool) -> bool:
        """Whether node `n` is still up at `t` for a message that finds the floor open (`floor_ok`) or not."""
        if pattern == "consumer":
            return True  # the consumer's node is never consolidated
        if n.floor and floor_ok:
            return True
        if n.floor:  # outside its window a floor node is an ordinary node: kept only while busy or recently busy
            return n.last is not None and (n.running(t) > 0 or t <= n.last + consolidate_after_s)
        return n.running(t) > 0 or t <= n.last_end() + consolidate_after_s

    def place(created: float, floor_ok: bool) -> _Node:
        """The node a pod created at `created` goes to: a live one with a free slot, else a new launch."""
        free = [n for n in nodes if alive(n, created, floor_ok) and n.running(created) < node.pods_per_node]
        if free:
            return min(free, key=lambda n: (max(created, n.image_at), n.id))
        if max_nodes is not None and sum(1 for n in nodes if alive(n, created, floor_ok)) >= max_nodes:
            raise ConfigError("gpuLimit", max_nodes, "room for one more node (the model's parallelism exceeds it)")
        launched = created + stages["nodeclaim"]
        ready = launched + stages["ec2_ready"]
        gpu = ready + stages["gpu_registered"]
        n = _Node(len(nodes), launched, ready, gpu, gpu + stages["image_pull"], created_at=created)
        nodes.append(n)
        return n

    def start_pod(n: _Node, created: float) -> tuple[float, float]:
        """(start, serving) of a pod created at `created` on `n`: the first pod on a node fetches the model into
        the node's cache; a later one (waiting for that fetch if it still runs) checks the cached file; each then
        loads it."""
        start = max(created, n.image_at)
        if n.model_at is None:
            n.model_at = start + fetch
            tally["fetches"] += fetch > 0
            serving = n.model_at + load
        else:
            serving = max(start, n.model_at) + hit + load
        tally["serving"] = min(tally["serving"], serving)
        return start, serving

    def result(pod: dict, a: float) -> None:
        """The pod does the message that arrived at `a`, at max(a, its previous item's end); `base + per * k` (not
        a running sum) so a burst's results are exactly serving + per × k."""
        if a > pod["end"]:  # the pod sat idle: the next run of items starts at this message's arrival
            pod["base"], pod["k"] = a, 0
            pod["runs"].append([a, a])
        pod["k"] += 1
        pod["end"] = end = pod["base"] + per * pod["k"]
        pod["runs"][-1][1] = end
        pod["first_arrival"] = a if pod["first_arrival"] is None else pod["first_arrival"]
        pod["count"] += 1
        latencies.append(end - a)
        if len(pod["results"]) < TIMELINE_PODS:
            pod["results"].append(end)
        tally["first"], tally["last"] = min(tally["first"], end), max(tally["last"], end)

    def open_pod(n: _Node, created: float, label: str) -> dict:
        """A pod placed on `n` at `created`, holding one of the node's slots until `close_pod`."""
        start, serving = start_pod(n, created)
        n.ends.append(math.inf)  # running until it exits
        return {"label": label, "n": n, "created": created, "start": start, "serving": serving, "end": serving,
                "base": serving, "k": 0, "runs": [[serving, serving]], "results": [], "first_arrival": None,
                "count": 0}

    def close_pod(pod: dict, end: float) -> None:
        """The pod exits at `end`: its slot on the node frees, the floor's charge and the timeline are recorded."""
        n = pod["n"]
        n.ends.remove(math.inf)
        n.ends.append(end)
        n.last = end if n.last is None else max(n.last, end)
        if n.floor:  # the burst is charged a floor node from the arrival it serves to the pod's end
            floor_use.setdefault(n.id, []).append((pod["first_arrival"] if pod["first_arrival"] is not None
                                                   else pod["created"], end))
        tally["busy"] += end - pod["start"]
        if len(pods) < TIMELINE_PODS:
            pods.append({"label": pod["label"], "node": n.id, "created": pod["created"], "start": pod["start"],
                         "serving": pod["serving"], "end": end, "messages": pod["count"], "results": pod["results"],
                         "runs": [tuple(r) for r in pod["runs"][:TIMELINE_PODS]]})

    if pattern == "consumer":
        pod = open_pod(place(0.0, opened[0.0]), 0.0, "consumer")  # one pod from the first arrival, items in order
        for a in msgs:
            result(pod, a)
        close_pod(pod, pod["end"])
        parallel, jobs = 1, 1
    else:
        jobs = run_jobs(msgs, opened, float(stages["poll"]), max(1, parallel), messages_per_job, node.pods_per_node,
                         alive, place, open_pod, result, close_pod)

    launched = [n for n in nodes if not n.floor]
    billed = 0.0
    node_rows = []
    for n in nodes:
        if n.floor:
            end = n.last if n.last is not None else 0.0
            span = _union_s(floor_use.get(n.id, []))  # the floor is paid anyway; charged only while it serves
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
    used.setdefault("model_fetch", 0.0)
    used.setdefault("model_cache_hit", 0.0)
    if pattern == "consumer":
        used["poll"] = 0.0
    used.update(model_load=load, per_item=per)
    return PatternPlan(
        pattern=pattern, items=items, time_to_first_result_s=tally["first"], time_to_last_result_s=tally["last"],
        gpu_busy_s=tally["busy"], gpu_node_seconds_billed=billed, cost_usd=cost,
        cost_per_item_usd=cost / items, idle_cost_per_day_usd=idle_cost_per_day_usd, instance_type=node.name,
        capacity_type=node.capacity_type, usd_per_hour=node.usd_per_hour, parallel=parallel,
        nodes_launched=len(launched), warm_floor_nodes=warm_floor_nodes if opened[0.0] else 0,
        cold_start_s=tally["serving"], stages=used,
        latency_mean_s=sum(latencies) / len(latencies), latency_p95_s=_p95(latencies),
        latency_max_s=max(latencies), arrivals=len(arrivals),
        timeline={"nodes": node_rows, "pods": pods, "arrivals": arrivals[:TIMELINE_ARRIVALS]},
        messages_per_job=messages_per_job if pattern == "scaledjob" else 1, pods=jobs,
        model_fetches=tally["fetches"])


def seed_estimates(*, items: int, model_load_s: float, seconds_per_item: float, parallel: int,
                   messages_per_job: int = 1) -> tuple[float, float, float]:
    """(jobs GPU-seconds, consumer seconds, jobs wall seconds) of the warm model, as the chooser uses them."""
    stages = stage_durations(warm=True)
    jobs = simulate("scaledjob", items=items, model_load_s=model_load_s, seconds_per_item=seconds_per_item,
                    parallel=parallel, stages=stages, messages_per_job=messages_per_job)
    consumer = simulate("consumer", items=items, model_load_s=model_load_s, seconds_per_item=seconds_per_item,
                        parallel=1, stages=stages)
    return jobs.gpu_busy_s, consumer.time_to_last_result_s, jobs.time_to_last_result_s
