"""The burst planner: a deterministic discrete-event model of one burst, or of a recorded trace of arrivals, through KEDA, Karpenter and the GPU pods, as configured.

Model (all times in seconds from the burst's arrival, or from a trace's first arrival; the defaults of every stage
are `catalogue.STAGE_DURATIONS`). A burst of n messages is the trace of one arrival of n at 0 s: both go through the
same `simulate`.

- **ScaledJob**: one Job per message (`maxMessagesPerJob` 1), at most `parallel` at once (`maxReplicas`, capped by
  the NodePool's GPU limit; 1 for ordered or stateful work, which cannot run in parallel). KEDA creates Jobs only
  when it polls: worst case, the (first) arrival lands just after a poll, so polls fall at `poll`, 2 × `poll`, ...
  on a fixed grid; a message arriving at t is picked up at the first poll at or after max(t, a slot frees). Every
  Job loads the model (`model_load_s`), then does one item.
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
  load + n × per_item (README: 20 × (45 + 8) = 1,060 s and 45 + 20 × 8 = 205 s). `overrides` apply after it.
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

import heapq
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

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
                    polling_interval_s: float | None = None, image_pull_s: float | None = None) -> dict[str, float]:
    """Stage name -> seconds: the catalogue's defaults, the workload's polling interval, the stack's image pull
    (`image_pull_seconds`), `warm`'s zeros, then `overrides` (unknown stage names or negative values raise a one-line
    ConfigError)."""
    stages = {name: float(s.seconds) for name, s in catalogue.STAGE_DURATIONS.items()}
    if polling_interval_s is not None:
        stages["poll"] = float(polling_interval_s)
    if image_pull_s is not None:
        stages["image_pull"] = float(image_pull_s)
    if warm:
        stages.update({name: 0.0 for name in WARM_ZEROED})
    for name, value in (overrides or {}).items():
        if name not in stages:
            raise ConfigError("--set", name, f"a stage, one of {', '.join(STAGES)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
            raise ConfigError(f"--set {name}", value, "seconds >= 0")
        stages[name] = float(value)
    return stages


def parallel_pull(config: Any, instance_type: str) -> bool:
    """Whether nodes of `instance_type` pull in parallel on this stack: FastImagePull on, the image store on fast
    enough storage (the NVMe RAID0 on a type with NVMe; the stack's gp3 root volume is below nodeadm's 600 MiB/s),
    and the node above nodeadm's floor (4 vCPU, 7 GiB), which ignores the gate below it."""
    t = catalogue.instance_type(instance_type)
    if t is None or not getattr(config, "fast_image_pull", True):
        return False
    on_nvme = getattr(config, "gpu_instance_store_policy", "RAID0") == "RAID0" and t.local_nvme_gb > 0
    return (on_nvme and t.vcpu >= catalogue.FAST_IMAGE_PULL_MIN_VCPU
            and t.memory_mib >= catalogue.FAST_IMAGE_PULL_MIN_MEMORY_GIB * 1024)


def image_pull_seconds(config: Any, instance_type: str) -> float:
    """The worker image's pull on a fresh node of `instance_type` (catalogue layer sizes and pull rates), in whole
    seconds: in parallel where `parallel_pull` says so, else one layer stream at a time."""
    return float(round(catalogue.image_pull_seconds(catalogue.worker_image_bytes(),
                                                    parallel=parallel_pull(config, instance_type))))


def image_pull_note(config: Any, instance_type: str) -> str:
    """One line for the table: the worker image's size and layers, the pull as modelled, and the other way's time."""
    layers = catalogue.worker_image_bytes()
    one = round(catalogue.image_pull_seconds(layers, parallel=False))
    par = round(catalogue.image_pull_seconds(layers, parallel=True))
    head = f"worker image ~{sum(layers) / 1e9:.2f} GB compressed, largest layer {max(layers) / 1e9:.2f} GB: "
    if parallel_pull(config, instance_type):
        return head + (f"{par} s as a parallel pull (fastImagePull, image store on {instance_type}'s NVMe RAID0); "
                       f"{one} s as one stream")
    why = ("fastImagePull is off" if not getattr(config, "fast_image_pull", True)
           else f"no NVMe RAID0 for the image store on {instance_type}")
    return head + f"{one} s as one stream ({why}); {par} s with fastImagePull on the NVMe RAID0"


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

    def arrivals_s(self) -> list[tuple[float, int]]:
        """One arrival of every message at 0 s: a burst is the one-arrival case of a trace."""
        return [(0.0, self.items)]


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
class Trace:
    """A recorded arrival pattern for one workload: messages arriving over time (one workload's rows of a --trace
    CSV)."""

    arrivals: tuple[tuple[datetime, int], ...]
    """(time-zone aware arrival time, messages), sorted, one entry per distinct time. At least one."""
    source: str = "trace"
    """Where it came from (the CSV's path as given). Default 'trace'."""

    @property
    def items(self) -> int:
        """Messages in the whole trace."""
        return sum(n for _, n in self.arrivals)

    @property
    def at(self) -> datetime:
        """The first arrival: the model's time zero."""
        return self.arrivals[0][0]

    def arrivals_s(self) -> list[tuple[float, int]]:
        """(seconds from the first arrival, messages) per arrival."""
        return [((t - self.at).total_seconds(), n) for t, n in self.arrivals]


TRACE_COLUMNS = ("at", "items", "workload")
"""Columns a --trace CSV may have: `at` (required), `items` and `workload` (optional)."""
TRACE_FORMAT = ("a header row, then one row per arrival: at (ISO-8601 datetime, naive = UTC), optional items "
                "(messages, whole number >= 1, default 1) and optional workload (the row applies only to that "
                "workload; empty or no column: to every workload); rows in any order; blank lines and lines starting "
                "with # are skipped")
"""The CSV format, for --help and the errors."""


@dataclass(frozen=True)
class TraceRow:
    """One arrival row of a --trace CSV."""

    at: datetime
    """Arrival time (time-zone aware; a naive time was taken as UTC)."""
    items: int
    """Messages arriving then (>= 1; default 1)."""
    workload: str | None
    """The workload it applies to; None: every workload."""
    line: int
    """Line number in the file (1 = the first line), for errors."""


@dataclass(frozen=True)
class TraceCsv:
    """A parsed --trace CSV: its rows for every workload."""

    source: str
    """The path as given on the command line."""
    rows: tuple[TraceRow, ...]
    """Arrival rows in file order. At least one."""

    def for_workload(self, name: str) -> Trace | None:
        """The rows that apply to workload `name` as a Trace (same times merged, sorted); None when none apply."""
        merged: dict[datetime, int] = {}
        for r in self.rows:
            if r.workload in (None, name):
                merged[r.at] = merged.get(r.at, 0) + r.items
        return Trace(tuple(sorted(merged.items())), self.source) if merged else None

    def check_workloads(self, names: Iterable[str]) -> None:
        """Refuse (one line, with the line number) a row naming a workload the stack does not have."""
        names = list(names)
        for r in self.rows:
            if r.workload is not None and r.workload not in names:
                raise ConfigError(f"--trace {self.source} line {r.line} column workload", r.workload,
                                  f"a workload of the stack: one of {', '.join(names)}")


def parse_trace(path: Any) -> TraceCsv:
    """Read a --trace CSV (format: TRACE_FORMAT); a bad file, header or row raises a one-line ConfigError naming the
    file, the line, the column and the value."""
    import csv
    import io
    from pathlib import Path

    name = str(path)
    where = f"--trace {name}"
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # -sig: spreadsheet exports often open with a BOM
    except OSError as e:
        raise ConfigError("--trace", name, f"a readable CSV file ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ConfigError("--trace", name, "a UTF-8 text CSV file") from None
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    rows: list[TraceRow] = []
    try:
        for cells in reader:
            line = reader.line_num
            if not any(c.strip() for c in cells) or cells[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [c.strip().lower() for c in cells]
                bad = [c for c in header if c not in TRACE_COLUMNS]
                if bad or "at" not in header or len(set(header)) != len(header):
                    raise ConfigError(f"{where} line {line} header", ",".join(cells),
                                      "the column at, optionally items and workload (each once, any order)")
                continue
            if len(cells) != len(header):
                raise ConfigError(f"{where} line {line}", ",".join(cells),
                                  f"{len(header)} fields ({','.join(header)}), got {len(cells)}")
            row = {k: v.strip() for k, v in zip(header, cells)}
            try:
                at = datetime.fromisoformat(row["at"])
            except ValueError:
                raise ConfigError(f"{where} line {line} column at", row["at"],
                                  "an ISO-8601 datetime (naive = UTC), e.g. 2026-01-05T09:30:00Z") from None
            items = row.get("items") or "1"
            if not re.fullmatch(r"[0-9]+", items) or int(items) < 1:
                raise ConfigError(f"{where} line {line} column items", row["items"], "a whole number of messages >= 1")
            rows.append(TraceRow(at if at.tzinfo else at.replace(tzinfo=timezone.utc), int(items),
                                 row.get("workload") or None, line))
    except csv.Error as e:
        raise ConfigError(f"{where} line {reader.line_num}", str(e), "well-formed CSV") from None
    if not rows:
        raise ConfigError("--trace", name, f"an arrival trace: {TRACE_FORMAT}; it has no arrival rows")
    return TraceCsv(name, tuple(rows))


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
    stages: dict
    """Stage name -> seconds used (with model_load and per_item)."""
    latency_mean_s: float
    """Mean over the messages of (result time - the message's arrival)."""
    latency_p95_s: float
    """95th percentile (nearest rank) of the same."""
    latency_max_s: float
    """Largest of the same."""
    arrivals: int
    """Distinct arrival times (1 for a burst)."""
    timeline: dict = field(repr=False, default_factory=dict)
    """{'nodes': [...], 'pods': [...], 'arrivals': [(s, messages), ...]} with each stage's times, for the PNG."""

    def summary(self) -> dict[str, Any]:
        """The JSON keys (no timeline)."""
        keys = ("pattern", "items", "time_to_first_result_s", "time_to_last_result_s", "cold_start_s", "gpu_busy_s",
                "gpu_node_seconds_billed", "cost_usd", "cost_per_item_usd", "idle_cost_per_day_usd", "instance_type",
                "capacity_type", "usd_per_hour", "parallel", "nodes_launched", "warm_floor_nodes", "stages",
                "latency_mean_s", "latency_p95_s", "latency_max_s", "arrivals")
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
             floor_open: Callable[[float], bool] | None = None) -> PatternPlan:
    """Run messages through `pattern` ('scaledjob' or 'consumer') and return its plan (pure).

    `arrivals` are (seconds, messages) pairs, any order (times are taken from the first arrival); without them, one
    burst of `items` at 0 s, the special case every burst is. `floor_open(t)` says whether a message arriving at
    t s finds the `warm_floor_nodes` floor nodes up (None: always). `node` None prices nothing (cost 0; the chooser's
    use); `max_nodes` None means no NodePool limit."""
    if pattern not in ("scaledjob", "consumer"):
        raise ConfigError("pattern", pattern, "scaledjob or consumer")
    node = node or NodeType("unpriced", 1, 1, 0.0, "on-demand")
    load, per = float(model_load_s), float(seconds_per_item)
    arrivals = _arrivals(items, arrivals)
    msgs = [t for t, n in arrivals for _ in range(n)]  # one arrival time per message, in arrival order
    items = len(msgs)
    opened = {t: True if floor_open is None else bool(floor_open(t)) for t, _ in arrivals}
    nodes: list[_Node] = [_Node(i, 0.0, 0.0, 0.0, 0.0, floor=True) for i in range(warm_floor_nodes)]
    pods: list[dict] = []
    latencies: list[float] = []
    floor_use: dict[int, list[tuple[float, float]]] = {}
    tally = {"first": math.inf, "last": 0.0, "busy": 0.0, "serving": math.inf}

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

    def run_pod(n: _Node, created: float, arrived: list[float], label: str) -> float:
        """Run a pod on `n` for the messages that arrived at `arrived` (sorted); its end time."""
        start = max(created, n.image_at)
        serving = start + load
        # Items in order, each at max(its arrival, the previous one's end); `base + per * k` (not a running sum) so
        # a burst's results are exactly serving + per × k.
        end, base, k = serving, serving, 0
        results, runs = [], [[serving, serving]]
        for a in arrived:
            if a > end:  # the pod sat idle: the next run of items starts at this message's arrival
                base, k = a, 0
                runs.append([a, a])
            k += 1
            end = base + per * k
            runs[-1][1] = end
            latencies.append(end - a)
            if len(results) < TIMELINE_PODS:
                results.append(end)
            tally["first"] = min(tally["first"], end)
        n.ends.append(end)
        n.last = end if n.last is None else max(n.last, end)
        if n.floor:  # the burst is charged a floor node from the arrival it serves to the pod's end
            floor_use.setdefault(n.id, []).append((arrived[0], end))
        tally["last"] = max(tally["last"], end)
        tally["busy"] += end - start
        tally["serving"] = min(tally["serving"], serving)
        if len(pods) < TIMELINE_PODS:
            pods.append({"label": label, "node": n.id, "created": created, "start": start, "serving": serving,
                         "end": end, "results": results, "runs": [tuple(r) for r in runs[:TIMELINE_PODS]]})
        return end

    if pattern == "consumer":
        run_pod(place(0.0, opened[0.0]), 0.0, msgs, "consumer")  # one pod from the first arrival, all items in order
        parallel = 1
    else:
        poll = float(stages["poll"])

        def next_poll(t: float) -> float:
            """KEDA's first poll at or after `t`."""
            # Polls on a fixed grid from the first arrival, which (worst case) lands just after one.
            return t if poll == 0 else poll * max(1, math.ceil(t / poll - 1e-9))

        # One heap entry per GPU slot: (free at, tie-break, node it last ran on). A slot's own node has the image
        # cached and a free slot when the slot frees, so it is the best place for the next Job while it is alive.
        slots: list = [(0.0, k, None) for k in range(max(1, parallel))]
        heapq.heapify(slots)
        for i, arrived in enumerate(msgs):
            free_at, k, n = heapq.heappop(slots)
            created = next_poll(max(arrived, free_at))
            floor_ok = opened[arrived]
            if not (n is not None and alive(n, created, floor_ok)
                    and n.running(created) < node.pods_per_node):  # (place() may have filled it meanwhile)
                n = place(created, floor_ok)
            heapq.heappush(slots, (run_pod(n, created, [arrived], f"job {i + 1}"), k, n))

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
        timeline={"nodes": node_rows, "pods": pods, "arrivals": arrivals[:TIMELINE_ARRIVALS]})


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


def warm_floor_open(config: Any, at: datetime | None, offsets_s: Iterable[float]) -> list[bool]:
    """For each arrival (seconds after `at`), whether the warm floor's cron window is active then (as
    `warm_floor_at`); all False without `warm_gpus` or without a time. Sorted offsets are swept minute by minute from
    the previous one (as `cron.active_seconds` does) rather than searched back from scratch each time."""
    from zoneinfo import ZoneInfo

    from .cron import matches, window_active

    offsets_s = list(offsets_s)
    warm = getattr(config, "warm_gpus", None)
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
    """One workload's burst (or trace) under both patterns, and which one the stack runs."""

    workload: str
    """Workload name."""
    burst: Burst | Trace
    """The burst or the trace planned."""
    pattern: str
    """The pattern the stack runs (the config's `pattern`, or the chooser's pick)."""
    reason: str
    """The chooser's reason."""
    patterns: dict
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


def plan_workload(config: Any, workload: Any, burst: Burst | Trace | None = None, *, warm: bool = False,
                  overrides: Mapping[str, float] | None = None) -> WorkloadPlan:
    """Plan one burst (default: `workload.burst_items`, no time) or one trace of `workload` on the stack `config` (a
    StackConfig). A burst is the trace of one arrival: both go through the same `simulate`."""
    from .chooser import choose_pattern, parallel_blocker

    burst = burst or Burst(workload.burst_items)
    arrivals = burst.arrivals_s()
    facts = workload.facts()
    choice = choose_pattern(facts)
    pattern = workload.pattern or choice.pattern
    opened = dict(zip((t for t, _ in arrivals), warm_floor_open(config, burst.at, (t for t, _ in arrivals))))
    # The floor's nodes exist in the model only when some message finds the window open (a burst: its arrival).
    floor = getattr(getattr(config, "warm_gpus", None), "count", 0) if any(opened.values()) else 0
    floor_s = warm_floor_seconds_per_day(config, burst.at)
    plans = {}
    for p in ("scaledjob", "consumer"):
        spot = p == "scaledjob" and "spot" in config.gpu_capacity_types
        nt = node_type(config.gpu_instance_types, spot=spot)
        stages = stage_durations(warm=warm, overrides=overrides,
                                 polling_interval_s=getattr(workload, "polling_interval_s", None),
                                 image_pull_s=image_pull_seconds(config, nt.name))
        max_nodes = max(1, config.gpu_limit // nt.gpus)
        if p == "consumer" or parallel_blocker(facts) is not None:
            parallel = 1
        else:
            parallel = min(workload.max_replicas, max_nodes * nt.pods_per_node)
        floor_nodes = min(floor, max_nodes)
        idle = (nt.usd_per_hour * 24 if p == "consumer"
                else getattr(getattr(config, "warm_gpus", None), "count", 0) * floor_s * nt.usd_per_hour / 3600)
        plans[p] = simulate(p, arrivals=arrivals, model_load_s=workload.model_load_s,
                            seconds_per_item=workload.seconds_per_item, parallel=parallel, stages=stages, node=nt,
                            max_nodes=max_nodes, warm_floor_nodes=floor_nodes, idle_cost_per_day_usd=idle,
                            floor_open=opened.__getitem__)
    return WorkloadPlan(workload.name, burst, pattern, choice.reason, plans,
                        image_pull_note(config, plans[pattern].instance_type))


def plan_stack(config: Any, *, workload: str | None = None, bursts: Iterable[Burst] = (), warm: bool = False,
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


def plans_json(plans: Mapping[str, list[WorkloadPlan]]) -> dict[str, Any]:
    """`{"workloads": {NAME: {first burst's keys..., "patterns": {...}, "bursts": [every burst]}}}`."""
    out = {}
    for name, per_burst in plans.items():
        entry = per_burst[0].summary()
        entry["bursts"] = [p.summary() for p in per_burst]
        out[name] = entry
    return {"workloads": out}


def _fmt_s(s: float) -> str:
    """Seconds as `1,060 s (17 min 40 s)`, or `19,703 s (5 h 28 min)` from an hour (a trace's spans)."""
    if s >= 3600:
        return f"{s:,.0f} s ({int(s // 3600)} h {int(s % 3600 // 60):02d} min)"
    return f"{s:,.0f} s ({int(s // 60)} min {s % 60:02.0f} s)" if s >= 60 else f"{s:,.0f} s"


def plans_table(plans: Mapping[str, list[WorkloadPlan]]) -> str:
    """A readable report: per workload and burst, the stages and both patterns' times and costs."""
    lines = []
    for name, per_burst in plans.items():
        for wp in per_burst:
            if isinstance(wp.burst, Trace):
                what = (f"trace {wp.burst.source}: {wp.burst.items} messages in {len(wp.burst.arrivals)} arrivals "
                        f"from {wp.burst.at.isoformat()} to {wp.burst.arrivals[-1][0].isoformat()}")
            else:
                when = wp.burst.at.isoformat() if wp.burst.at else "no time (warm floor not applied)"
                what = f"burst of {wp.burst.items} at {when}"
            lines += [f"{name}: {what}; runs as {wp.pattern}", f"  chooser: {wp.reason}"]
            st = wp.patterns["scaledjob"].stages
            lines.append("  stages: " + ", ".join(f"{k} {v:g} s" for k, v in st.items()))
            if wp.image_pull:
                lines.append(f"  image pull: {wp.image_pull}")
            lines.append(f"  {'pattern':<11}{'type':<24}{'par':>4}{'nodes':>6}{'floor':>6}{'cold start':>22}"
                         f"{'first result':>23}{'last result':>23}{'latency mean/p95/max s':>24}{'node-s':>9}"
                         f"{'cost $':>10}{'$/item':>10}{'idle $/day':>11}")
            for p in ("scaledjob", "consumer"):
                pp = wp.patterns[p]
                mark = "*" if p == wp.pattern else " "
                latency = f"{pp.latency_mean_s:,.0f}/{pp.latency_p95_s:,.0f}/{pp.latency_max_s:,.0f}"
                lines.append(f" {mark}{p:<11}{pp.instance_type + ' ' + pp.capacity_type:<24}{pp.parallel:>4}"
                             f"{pp.nodes_launched:>6}{pp.warm_floor_nodes:>6}{_fmt_s(pp.cold_start_s):>22}"
                             f"{_fmt_s(pp.time_to_first_result_s):>23}{_fmt_s(pp.time_to_last_result_s):>23}"
                             f"{latency:>24}{pp.gpu_node_seconds_billed:>9,.0f}{pp.cost_usd:>10.4f}"
                             f"{pp.cost_per_item_usd:>10.5f}"
                             f"{pp.idle_cost_per_day_usd:>11.2f}")
            lines.append("")
    lines.append("* = the pattern the stack runs. Times from the burst's arrival (a trace: its first arrival); latency "
                 "= a message's result time - its arrival; costs per burst or trace (per-second billing, "
                 f"60 s minimum, {CONSOLIDATE_AFTER_S} s consolidation tail for Job nodes; spot at "
                 f"{catalogue.SPOT_PRICE_FRACTION:.0%} of on-demand, an assumption).")
    return "\n".join(lines)


def write_timeline(wp: WorkloadPlan, path: Any) -> None:
    """A PNG timeline of both patterns (nodes with their start-up stages, pods with load and inference, results, and
    a 'messages' row with a tick per arrival)."""
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
            runs = pod.get("runs") or [(pod["serving"], pod["end"])]  # a consumer idles between a trace's arrivals
            rows.append((pod["label"], [(pod["created"], pod["start"], "wait"),
                                        (pod["start"], pod["serving"], "model_load")]
                         + [(a, b, "inference") for a, b in runs]))
        for y, (label, segs) in enumerate(rows):
            for a, b, kind in segs:
                if b > a:
                    ax.barh(y, b - a, left=a, color=colours[kind], edgecolor="none")
        results = sorted(r for pod in plan.timeline["pods"] for r in pod["results"])
        ax.plot(results, [len(rows)] * len(results), "|", color="black")
        arrivals = plan.timeline.get("arrivals") or [(0.0, plan.items)]
        ax.plot([t for t, _ in arrivals], [len(rows) + 1] * len(arrivals), "|", color="#3182bd", markersize=10)
        if len(arrivals) <= 30:  # label how many arrived at each tick while they stay legible
            for t, n in arrivals:
                ax.annotate(f"{n}", (t, len(rows) + 1), textcoords="offset points", xytext=(2, 3), fontsize=6)
        ax.set_yticks(range(len(rows) + 2), [r[0] for r in rows] + ["results", "messages"], fontsize=6)
        ax.invert_yaxis()
        span = (f"{len(arrivals)} arrivals, " if len(arrivals) > 1 else "")
        ax.set_title(f"{wp.workload} as {p}: {plan.items} messages, {span}first result "
                     f"{plan.time_to_first_result_s:,.0f} s, last {plan.time_to_last_result_s:,.0f} s, latency p95 "
                     f"{plan.latency_p95_s:,.0f} s, {plan.nodes_launched} "
                     f"node{'' if plan.nodes_launched == 1 else 's'} launched, ${plan.cost_usd:.3f}",
                     fontsize=9)
        ax.set_xlabel("seconds from the first arrival" if isinstance(wp.burst, Trace) else "seconds from the burst")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()]
    fig.legend(handles, list(colours), loc="lower center", ncol=len(colours), fontsize=7)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
