"""The opt-in `burst` check: send N real probe slides, time every stage of the burst from the API's own timestamps,
and judge the measured timeline against the planner's prediction and the stack's `gpuburst:burstBudget`.

It costs GPU time and sends real work, so it runs only when named (`--check burst`). The decisions are pure functions
over API objects (`measured_timeline`, `predicted`, `budget_for`, `judge`); `run` is the thin live flow around them.

Stage mapping (the planner's names; seconds, times from the API server, S3 and the sender's clock):

- poll: probes sent -> the first probe Job's creationTimestamp (KEDA's poll and Job creation).
- nodeclaim: the pod that caused a node -> its NodeClaim's creationTimestamp (Karpenter's batch window included).
- ec2_ready: NodeClaim created -> condition Registered (EC2 launch, boot, kubelet join; `Launched`, which comes a few
  seconds after creation once CreateFleet answered, is shown as evidence only).
- gpu_registered: Registered -> Initialized (node Ready, startup taints gone, nvidia.com/gpu registered).
- image_pull: the pod's Pulling -> Pulled events (the Pulled message's "including waiting" duration when it has
  one); "already present on machine" is a cached image (0 s).
- model_load, per_item: the worker's result summary (`stages_s.model_load`; per_item = `stages_s.total` minus it).
- first / last result: probes sent -> the first / last result summary's S3 LastModified.

A pod on a node that existed before the burst pays no node stage: the timeline says "warm node". Node stages are the
slowest cold node's, image_pull the slowest pod's, model_load and per_item the slowest probe's.
"""
from __future__ import annotations

import io
import json
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .model import FAIL, PASS, CheckResult, condition, name_of, parse_time

NAME = "burst"
BURST_ATTRIBUTE = "gpuburst-verify-burst"
"""String message attribute on every burst probe (value: the run's id). Not keda.PROBE_ATTRIBUTE: the worker
deletes a message carrying that one unprocessed, and a burst probe must be processed like real work."""
PROBE_FOLDER = "gpuburst-verify/"
"""Folder under the slides prefix and the results prefix where probe slides and their results go."""
BURST_TOLERANCE = 1.5
"""Without `gpuburst:burstBudget` (or budget flags), the budget is the planner's cold prediction x this."""
PROBE_SIDE_PX = 1024
"""Side of the square probe slide, pixels (full resolution)."""
PROBE_MPP_UM = 0.5
"""Pixel size of the probe slide, µm per pixel (the built-in model's input resolution, 20x)."""
MAX_PROBES = 50
"""Most probe slides one run may send."""
STAGES = ("poll", "nodeclaim", "ec2_ready", "gpu_registered", "image_pull", "model_load", "per_item")
"""The planner's stage names, in the order of the timeline."""
NODE_STAGES = ("nodeclaim", "ec2_ready", "gpu_registered")
"""Stages only a pod on a node launched for the burst pays."""
OUTPUT_SUFFIXES = (".overlay.ome.tif", ".preview.png", ".json")
"""The worker's result files per slide (worker/messages.py OUTPUT_SUFFIXES); the summary (.json) is written last."""


# ----------------------------------------------------------------------------------------------------------------
# The probe slide and its message
# ----------------------------------------------------------------------------------------------------------------

def probe_tiff(seed: int = 0, side_px: int = PROBE_SIDE_PX, mpp_um: float = PROBE_MPP_UM, tile: int = 256) -> bytes:
    """A small calibrated pyramidal tiled TIFF (zlib, 2 levels as SubIFDs, X/YResolution in CENTIMETER) with an
    H&E-like tissue blob and nuclei, generated here so the installed package needs no `worker` import."""
    import numpy as np
    import tifffile

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:side_px, 0:side_px].astype(np.float32) / side_px
    angle = np.arctan2(yy - 0.5, xx - 0.5)
    edge = 0.33 + 0.04 * np.sin(5 * angle + seed) + 0.02 * np.sin(11 * angle)
    tissue = np.hypot(xx - 0.5, (yy - 0.5) * 1.2) < edge
    img = np.empty((side_px, side_px, 3), np.float32)
    img[:] = (246, 244, 247)  # glass
    img[tissue] = (222, 150, 192)  # eosin pink
    centres = rng.uniform(0.2, 0.8, size=(400, 2)) * side_px
    r_px = 3.5 / mpp_um  # nuclei ~7 µm across
    for cx, cy in centres:
        if not tissue[int(cy), int(cx)]:
            continue
        x0, x1 = int(max(0, cx - r_px - 1)), int(min(side_px, cx + r_px + 2))
        y0, y1 = int(max(0, cy - r_px - 1)), int(min(side_px, cy + r_px + 2))
        sub_y, sub_x = np.mgrid[y0:y1, x0:x1]
        disc = (sub_x - cx) ** 2 + (sub_y - cy) ** 2 <= r_px ** 2
        img[y0:y1, x0:x1][disc] = (92, 52, 128)  # haematoxylin purple
    img += rng.normal(0, 6, img.shape).astype(np.float32) * tissue[..., None]
    level0 = np.clip(img, 0, 255).astype(np.uint8)
    f = 4
    level1 = level0.reshape(side_px // f, f, side_px // f, f, 3).mean(axis=(1, 3)).round().astype(np.uint8)
    per_cm = 1e4 / mpp_um
    buf = io.BytesIO()
    with tifffile.TiffWriter(buf) as tif:
        tif.write(level0, photometric="rgb", tile=(tile, tile), compression="zlib", subifds=1,
                  resolution=(per_cm, per_cm), resolutionunit="CENTIMETER", software="gpuburst verify burst probe")
        tif.write(level1, photometric="rgb", tile=(tile, tile), compression="zlib", subfiletype=1,
                  resolution=(per_cm / f, per_cm / f), resolutionunit="CENTIMETER")
    return buf.getvalue()


def _folder(prefix: str) -> str:
    prefix = prefix or ""
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


@dataclass(frozen=True)
class Probe:
    """One probe slide of a run: where it is uploaded, where its results go, and its message body."""

    probe_id: str
    """The slide_id of the probe (`burst-<run 8 hex>-<i>`), also the name of its result files."""
    slides_bucket: str
    """Bucket of the probe slide."""
    slide_key: str
    """Key of the probe slide: `<slides prefix>gpuburst-verify/<run>/<probe_id>.tif`."""
    results_bucket: str
    """Bucket of its results."""
    output_key: str
    """Key prefix of its results: `<results prefix>gpuburst-verify/<run>/`."""

    @property
    def summary_key(self) -> str:
        """The result summary's key (the worker's commit marker)."""
        return f"{self.output_key}{self.probe_id}.json"

    @property
    def result_keys(self) -> list[str]:
        """Every result file the worker writes for it."""
        return [f"{self.output_key}{self.probe_id}{s}" for s in OUTPUT_SUFFIXES]

    def body(self) -> str:
        """The message body in the worker's contract (worker/messages.py: slide, output, slide_id)."""
        return json.dumps({"output": f"s3://{self.results_bucket}/{self.output_key}",
                           "slide": f"s3://{self.slides_bucket}/{self.slide_key}", "slide_id": self.probe_id},
                          sort_keys=True)


def make_probes(run_id: str, n: int, *, slides_bucket: str, slides_prefix: str, results_bucket: str,
                results_prefix: str) -> list[Probe]:
    """The run's N probes (pure)."""
    short = run_id.replace("-", "")[:8]
    slides = f"{_folder(slides_prefix)}{PROBE_FOLDER}{run_id}/"
    output = f"{_folder(results_prefix)}{PROBE_FOLDER}{run_id}/"
    return [Probe(f"burst-{short}-{i + 1}", slides_bucket, f"{slides}burst-{short}-{i + 1}.tif", results_bucket,
                  output) for i in range(n)]


def is_burst_probe(message: dict, run_id: str) -> bool:
    """True when a received SQS message is one of this run's probes (by its message attribute)."""
    attr = (message.get("MessageAttributes") or {}).get(BURST_ATTRIBUTE) or {}
    return attr.get("StringValue") == run_id


# ----------------------------------------------------------------------------------------------------------------
# The measured timeline (pure)
# ----------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProbeResult:
    """What S3 held for one probe when verify last looked."""

    probe_id: str
    """The probe's slide_id."""
    written_at: datetime | None = None
    """S3 LastModified of its result summary; None = no summary. Default None."""
    summary: dict | None = None
    """The summary JSON (with `stages_s`); None = none. Default None."""


@dataclass(frozen=True)
class NodeTimes:
    """One node a probe pod ran on (seconds from the burst being sent)."""

    node: str
    """Node name (spec.nodeName of the pod; '' when the NodeClaim has no node yet)."""
    nodeclaim: str | None
    """The NodeClaim behind it (status.nodeName), None when Karpenter does not own the node."""
    cold: bool
    """True when the NodeClaim was launched for the burst; False = a warm node (up before the burst)."""
    created_s: float | None = None
    """NodeClaim creationTimestamp. Default None."""
    launched_s: float | None = None
    """Condition Launched=True. Default None."""
    registered_s: float | None = None
    """Condition Registered=True. Default None."""
    initialized_s: float | None = None
    """Condition Initialized=True. Default None."""
    caused_by_s: float | None = None
    """creationTimestamp of the earliest probe pod created before the NodeClaim (the pod that caused it). Default
    None."""


@dataclass(frozen=True)
class PodTimes:
    """One probe pod (seconds from the burst being sent)."""

    name: str
    """Pod name."""
    node: str | None
    """spec.nodeName; None while unscheduled."""
    created_s: float | None = None
    """metadata.creationTimestamp. Default None."""
    scheduled_s: float | None = None
    """PodScheduled=True lastTransitionTime; None = never scheduled. Default None."""
    pull_s: float | None = None
    """Image pull duration (Pulling -> Pulled, including waiting); 0 when cached; None = no Pulled event. Default
    None."""
    image_cached: bool = False
    """True when the Pulled event says the image was already present on the machine. Default False."""
    started_s: float | None = None
    """The container's state running/terminated startedAt. Default None."""
    finished_s: float | None = None
    """The container's terminated finishedAt. Default None."""


@dataclass(frozen=True)
class Timeline:
    """The burst as measured: each planner stage's seconds and the times to the first and last result."""

    stages: dict
    """Stage name (STAGES) -> seconds, or None when not measured (a warm node has no node stages)."""
    time_to_first_result_s: float | None
    """Sent -> first result summary, seconds; None = no result."""
    time_to_last_result_s: float | None
    """Sent -> last result summary, seconds; None = some probe wrote no result."""
    probes: int
    """Probes sent."""
    results: int
    """Probes with a result summary."""
    nodes: tuple = ()
    """NodeTimes of the nodes the probe pods ran on (and burst NodeClaims without a node yet)."""
    pods: tuple = ()
    """PodTimes of the probe pods."""
    notes: tuple = ()
    """Facts worth printing ("warm node ...", "image already present on machine")."""
    problems: tuple = ()
    """What went missing (no Job, a pod never scheduled, a NodeClaim never registered, a probe without result)."""
    warm_node: bool = False
    """True when no probe pod ran on a node launched for the burst."""


_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def go_duration_s(text: str) -> float | None:
    """A Go duration (`1m58.2s`, `850ms`, `1h2m3s`) in seconds, or None when it is not one."""
    text = (text or "").strip()
    if not text or _GO_DURATION.sub("", text) != "":
        return None
    return sum(float(v) * _UNITS[u] for v, u in _GO_DURATION.findall(text))


def pull_duration_s(message: str) -> float | None:
    """Seconds of a kubelet Pulled message: the '(X including waiting)' duration, else 'in X'; None without one."""
    m = re.search(r"\(([0-9.a-zµ]+) including waiting\)", message or "")
    if m and go_duration_s(m.group(1)) is not None:
        return go_duration_s(m.group(1))
    m = re.search(r" in ([0-9.a-zµ]+?)(?:[ .]|$)", message or "")
    return go_duration_s(m.group(1)) if m else None


def _since(t: datetime | None, sent_at: datetime) -> float | None:
    return None if t is None else round((t - sent_at).total_seconds(), 3)


def _created(obj: dict) -> datetime | None:
    return parse_time((obj.get("metadata") or {}).get("creationTimestamp"))


def _true_at(obj: dict, type_: str) -> datetime | None:
    c = condition(obj, type_)
    return parse_time(c.get("lastTransitionTime")) if c and c.get("status") == "True" else None


def _event_time(ev: dict, first: bool) -> datetime | None:
    keys = ("firstTimestamp", "eventTime", "lastTimestamp") if first else ("lastTimestamp", "eventTime",
                                                                             "firstTimestamp")
    for k in keys:
        t = parse_time(ev.get(k))
        if t is not None:
            return t
    return _created(ev)


def pods_of(jobs: Iterable[dict], pods: Iterable[dict]) -> list[dict]:
    """The pods of these Jobs (label job-name / batch.kubernetes.io/job-name, or an ownerReference to the Job)."""
    names = {name_of(j) for j in jobs}
    uids = {(j.get("metadata") or {}).get("uid") for j in jobs} - {None}
    out = []
    for p in pods:
        md = p.get("metadata") or {}
        labels = md.get("labels") or {}
        owners = md.get("ownerReferences") or []
        if (labels.get("job-name") in names or labels.get("batch.kubernetes.io/job-name") in names
                or any(o.get("kind") == "Job" and (o.get("uid") in uids or o.get("name") in names) for o in owners)):
            out.append(p)
    return out


def _pod_times(pod: dict, events: list[dict], sent_at: datetime) -> PodTimes:
    name = name_of(pod)
    started = finished = None
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        state = cs.get("state") or {}
        run = state.get("running") or state.get("terminated") or {}
        started = started or parse_time(run.get("startedAt"))
        finished = finished or parse_time((state.get("terminated") or {}).get("finishedAt"))
    mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == name
            and (e.get("involvedObject") or {}).get("kind", "Pod") == "Pod"]
    pulling = [e for e in mine if e.get("reason") == "Pulling"]
    pulled = [e for e in mine if e.get("reason") == "Pulled"]
    cached = any("already present on machine" in (e.get("message") or "") for e in pulled)
    pull = None
    if cached:
        pull = 0.0
    elif pulled:
        pull = pull_duration_s(pulled[-1].get("message") or "")
        if pull is None and pulling:
            a, b = _event_time(pulling[0], True), _event_time(pulled[-1], False)
            pull = None if a is None or b is None else round((b - a).total_seconds(), 3)
    return PodTimes(name, (pod.get("spec") or {}).get("nodeName"), _since(_created(pod), sent_at),
                    _since(_true_at(pod, "PodScheduled"), sent_at), pull, cached, _since(started, sent_at),
                    _since(finished, sent_at))


def _summary_stages(summary: dict) -> tuple[float | None, float | None]:
    st = summary.get("stages_s") if isinstance(summary.get("stages_s"), dict) else {}
    load = st.get("model_load")
    total = st.get("total")
    if isinstance(total, (int, float)):
        per = total - (load or 0.0)
    else:
        parts = [st.get(k) for k in ("download", "open", "tissue", "inference", "write", "upload")]
        nums = [v for v in parts if isinstance(v, (int, float))]
        per = sum(nums) if nums else None
    return (float(load) if isinstance(load, (int, float)) else None,
            None if per is None else round(float(per), 3))


def _max(values: Iterable[float | None]) -> float | None:
    nums = [v for v in values if v is not None]
    return max(nums) if nums else None


def measured_timeline(sent_at: datetime, jobs: list[dict], pods: list[dict], nodeclaims: list[dict],
                      events: list[dict], results: list[ProbeResult], *, probes: int | None = None,
                      waited_s: float | None = None, preexisting_nodeclaims: Iterable[str] | None = None,
                      pattern: str = "scaledjob") -> Timeline:
    """The burst's measured timeline from recorded API objects (pure; see the module docstring for the mapping).

    `jobs`: the probe Jobs (those the ScaledJob created after the probes were sent); `pods`, `nodeclaims`, `events`:
    as listed (filtered here); `results`: one per probe; `preexisting_nodeclaims`: uids of the NodeClaims that
    existed before the burst (None = judge by creationTimestamp against `sent_at`); `waited_s`: how long verify
    waited (for the problems' wording); `pattern` 'consumer' expects no Job (the consumer long-polls)."""
    probes = len(results) if probes is None else probes
    within = f" within {waited_s:.0f} s" if waited_s is not None else ""
    notes: list[str] = []
    problems: list[str] = []
    stages: dict[str, float | None] = {s: None for s in STAGES}

    if pattern == "consumer":
        stages["poll"] = 0.0
        notes.append("consumer: no KEDA poll and no Job (the persistent consumer long-polls the queue)")
    elif not jobs:
        problems.append(f"the ScaledJob created no Job for the burst{within}")
    else:
        first_job = min((t for t in (_created(j) for j in jobs) if t is not None), default=None)
        stages["poll"] = _since(first_job, sent_at)
        if len(jobs) < probes:
            notes.append(f"{len(jobs)} Job(s) for {probes} probe(s) (a Job may have taken several messages, or KEDA "
                         "had not created them all yet)")

    probe_pods = pods_of(jobs, pods) if jobs else []
    pod_times = sorted((_pod_times(p, events, sent_at) for p in probe_pods),
                       key=lambda p: (p.created_s is None, p.created_s or 0.0, p.name))
    for p in pod_times:
        if p.scheduled_s is None:
            pod = next(x for x in probe_pods if name_of(x) == p.name)
            c = condition(pod, "PodScheduled")
            why = (f" (PodScheduled={c.get('status')}, reason {c.get('reason')}: {c.get('message', '')})"
                   if c else " (no PodScheduled condition)")
            problems.append(f"pod {p.name}: never scheduled{within}{why}")
    if jobs and not probe_pods and pattern != "consumer":
        problems.append(f"the probe Jobs have no pod{within}")

    before = None if preexisting_nodeclaims is None else set(preexisting_nodeclaims)

    def is_cold(nc: dict) -> bool:
        if before is not None:
            return (nc.get("metadata") or {}).get("uid") not in before
        created = _created(nc)
        return created is not None and created >= sent_at

    by_node = {(nc.get("status") or {}).get("nodeName"): nc for nc in nodeclaims if (nc.get("status") or {})
               .get("nodeName")}
    pod_created = [p.created_s for p in pod_times if p.created_s is not None]
    node_rows: list[NodeTimes] = []
    seen: set[str] = set()
    for node in dict.fromkeys(p.node for p in pod_times if p.node):
        nc = by_node.get(node)
        if nc is None:
            node_rows.append(NodeTimes(node, None, False))
            continue
        seen.add(name_of(nc))
        node_rows.append(_node_times(node, nc, is_cold(nc), sent_at, pod_created))
    waiting = any(p.node is None for p in pod_times)
    for nc in nodeclaims:  # a probe pod waits: NodeClaims launched since the burst are (probably) for it
        if waiting and name_of(nc) not in seen and is_cold(nc):
            node_rows.append(_node_times((nc.get("status") or {}).get("nodeName") or "", nc, True, sent_at,
                                         pod_created))
    cold = [n for n in node_rows if n.cold]
    for n in node_rows:
        if not n.cold:
            notes.append(f"warm node {n.node}: no node stages ("
                         + (f"NodeClaim {n.nodeclaim} up before the burst)" if n.nodeclaim else
                            "not a Karpenter NodeClaim)"))
    for n in cold:
        if n.registered_s is None:
            problems.append(f"NodeClaim {n.nodeclaim}: not Registered{within}" + (
                f" (Launched at +{n.launched_s:.0f} s)" if n.launched_s is not None else " (not even Launched)"))
        elif n.initialized_s is None:
            problems.append(f"NodeClaim {n.nodeclaim}: Registered but not Initialized{within} (no allocatable "
                            "nvidia.com/gpu yet?)")
    if cold:
        stages["nodeclaim"] = _max(None if n.created_s is None or n.caused_by_s is None else
                                   round(n.created_s - n.caused_by_s, 3) for n in cold)
        stages["ec2_ready"] = _max(None if n.created_s is None or n.registered_s is None else
                                   round(n.registered_s - n.created_s, 3) for n in cold)
        stages["gpu_registered"] = _max(None if n.registered_s is None or n.initialized_s is None else
                                        round(n.initialized_s - n.registered_s, 3) for n in cold)
    pulls = [p for p in pod_times if p.pull_s is not None]
    if pulls:
        stages["image_pull"] = _max(p.pull_s for p in pulls)
        if all(p.image_cached for p in pulls):
            notes.append("image already present on machine (cached) for every probe pod")
    loads, pers = [], []
    for r in results:
        if r.summary:
            load, per = _summary_stages(r.summary)
            loads.append(load)
            pers.append(per)
    stages["model_load"] = _max(loads)
    stages["per_item"] = _max(pers)

    written = [r.written_at for r in results if r.written_at is not None]
    missing = [r.probe_id for r in results if r.written_at is None]
    if missing:
        problems.append(f"{len(missing)} of {probes} probe(s) wrote no result{within}: {', '.join(missing)}")
    first = _since(min(written), sent_at) if written else None
    last = _since(max(written), sent_at) if written and not missing else None
    return Timeline(stages, first, last, probes, len(written), tuple(node_rows), tuple(pod_times), tuple(notes),
                    tuple(problems), warm_node=bool(node_rows) and not cold)


def _node_times(node: str, nc: dict, cold: bool, sent_at: datetime, pod_created: list[float]) -> NodeTimes:
    created = _since(_created(nc), sent_at)
    causes = [c for c in pod_created if created is not None and c <= created + 1e-6]
    caused_by = max(causes) if causes else (min(pod_created) if pod_created else None)
    return NodeTimes(node, name_of(nc), cold, created, _since(_true_at(nc, "Launched"), sent_at),
                     _since(_true_at(nc, "Registered"), sent_at), _since(_true_at(nc, "Initialized"), sent_at),
                     caused_by)


# ----------------------------------------------------------------------------------------------------------------
# The prediction and the budget (pure)
# ----------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Prediction:
    """The planner's plan of the probe burst on the stack as configured."""

    workload: str
    """Workload name."""
    pattern: str
    """'scaledjob' or 'consumer' (the one the stack runs)."""
    items: int
    """Probes in the burst."""
    stages: dict
    """Stage name -> seconds the planner used (STAGES)."""
    time_to_first_result_s: float
    """Predicted sent -> first result, seconds (warm floor applied when the burst falls in its window)."""
    time_to_last_result_s: float
    """Predicted sent -> last result, seconds."""
    cold_first_result_s: float
    """The same burst with no warm floor (every node cold): first result, seconds."""
    cold_last_result_s: float
    """Cold: last result, seconds."""
    warm_floor_nodes: int = 0
    """Warm-floor nodes the planner assumed up at the burst. Default 0."""


def default_workload(config: Any) -> str:
    """The first workload of the config that runs as a ScaledJob, else the first workload."""
    for w in config.workloads:
        if not w.runs_as_consumer:
            return w.name
    return config.workloads[0].name


def predicted(config: Any, workload_name: str, n: int, at: datetime | None = None) -> Prediction:
    """The planner's prediction for a burst of `n` probes of `workload_name` at `at` (pure; ConfigError when the
    workload is not in the config)."""
    from ..planning import Burst, plan_workload
    from ..spec.validation import ConfigError

    workload = next((w for w in config.workloads if w.name == workload_name), None)
    if workload is None:
        raise ConfigError("--burst-workload", workload_name,
                          f"a workload of the stack, one of {', '.join(w.name for w in config.workloads)}")
    wp = plan_workload(config, workload, Burst(n, at))
    cold = plan_workload(config, workload, Burst(n, None)).patterns[wp.pattern]
    plan = wp.patterns[wp.pattern]
    return Prediction(workload.name, wp.pattern, n, {k: float(plan.stages.get(k, 0.0)) for k in STAGES},
                      plan.time_to_first_result_s, plan.time_to_last_result_s, cold.time_to_first_result_s,
                      cold.time_to_last_result_s, plan.warm_floor_nodes)


@dataclass(frozen=True)
class Budget:
    """The limits the burst is judged against, and where they came from."""

    first_result_s: float
    """Most seconds from sending to the first result."""
    last_result_s: float
    """Most seconds from sending to the last result."""
    source: str
    """Where the figures came from, for the output."""


def budget_for(config_budget: Any, prediction: Prediction, *, first_override: float | None = None,
               last_override: float | None = None, tolerance: float = BURST_TOLERANCE) -> Budget:
    """Flags win, then `gpuburst:burstBudget`, then the planner's cold prediction x `tolerance` (pure)."""
    if config_budget is not None:
        first, last, source = config_budget.first_result_s, config_budget.last_result_s, "gpuburst:burstBudget"
    else:
        first = round(prediction.cold_first_result_s * tolerance, 1)
        last = round(prediction.cold_last_result_s * tolerance, 1)
        source = (f"no gpuburst:burstBudget in the stack config: the planner's cold prediction x {tolerance:g} "
                  f"({prediction.cold_first_result_s:.0f} s / {prediction.cold_last_result_s:.0f} s)")
    if first_override is not None or last_override is not None:
        first = first if first_override is None else float(first_override)
        last = last if last_override is None else float(last_override)
        source = "--burst-first-result-s/--burst-last-result-s" + (f" over {source}" if source else "")
    return Budget(float(first), float(last), source)


# ----------------------------------------------------------------------------------------------------------------
# The verdict (pure)
# ----------------------------------------------------------------------------------------------------------------

def _fmt(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:,.0f} s ({int(s // 60)}m{s % 60:02.0f}s)" if s >= 60 else f"{s:,.1f} s"


def worst_overrun(measured: Timeline, prediction: Prediction) -> tuple[str, float, float] | None:
    """(stage, measured s, predicted s) of the stage that overran its prediction most, or None when none did."""
    worst = None
    for s in STAGES:
        m, p = measured.stages.get(s), prediction.stages.get(s)
        if m is None or p is None or m <= p:
            continue
        if worst is None or m - p > worst[1] - worst[2]:
            worst = (s, m, p)
    return worst


def judge(measured: Timeline, prediction: Prediction, budget: Budget) -> tuple[bool, list[str]]:
    """(ok, lines): fails when the first or last result is missing or past the budget. When it fails, the first
    lines say which limit, by how much, and the stage that overran its prediction most; then the timeline, stage by
    stage beside the prediction; then the notes and the problems seen."""
    failures: list[str] = []
    for what, m, limit in (("first result", measured.time_to_first_result_s, budget.first_result_s),
                           ("last result", measured.time_to_last_result_s, budget.last_result_s)):
        if m is None:
            failures.append(f"time to {what}: none within the wait (budget {limit:.0f} s)")
        elif m > limit:
            failures.append(f"time to {what} {m:.0f} s exceeds the budget of {limit:.0f} s by {m - limit:.0f} s")
    lines: list[str] = []
    if failures:
        worst = worst_overrun(measured, prediction)
        lines += failures
        lines.append(f"stage that overran its prediction most: {worst[0]} {worst[1]:.0f} s vs {worst[2]:.0f} s "
                     f"predicted (+{worst[1] - worst[2]:.0f} s)" if worst else
                     "no single stage overran its prediction (the time went between the stages)")
        lines += [f"problem: {p}" for p in measured.problems]
    lines.append(f"{'stage':<16}{'measured':>18}{'predicted':>18}")
    node_cold = any(n.cold for n in measured.nodes)
    for s in STAGES:
        m, p = measured.stages.get(s), prediction.stages.get(s)
        if m is None and s in NODE_STAGES and measured.warm_node:
            shown = "warm node"
        elif s == "image_pull" and m == 0.0 and not node_cold and any(x.image_cached for x in measured.pods):
            shown = "0 s (cached)"
        else:
            shown = _fmt(m)
        delta = f"  ({m - p:+,.0f} s)" if m is not None and p is not None else ""
        lines.append(f"{s:<16}{shown:>18}{_fmt(p):>18}{delta}")
    for what, m, p, limit in (
            ("first result", measured.time_to_first_result_s, prediction.time_to_first_result_s,
             budget.first_result_s),
            ("last result", measured.time_to_last_result_s, prediction.time_to_last_result_s, budget.last_result_s)):
        verdict = "no result" if m is None else ("within budget" if m <= limit else "OVER BUDGET")
        lines.append(f"{what:<16}{_fmt(m):>18}{_fmt(p):>18}  budget {limit:,.0f} s: {verdict}")
    lines.append(f"budget: {budget.source}")
    lines.append(f"prediction: {prediction.workload} as {prediction.pattern}, {prediction.items} probe(s)"
                 + (f", {prediction.warm_floor_nodes} warm-floor node(s)" if prediction.warm_floor_nodes else ""))
    for n in measured.nodes:
        if n.cold:
            lines.append(f"node {n.node or '(none yet)'} (NodeClaim {n.nodeclaim}): created +{_fmt(n.created_s)}, "
                         f"Launched +{_fmt(n.launched_s)}, Registered +{_fmt(n.registered_s)}, Initialized "
                         f"+{_fmt(n.initialized_s)}")
    for p in measured.pods:
        lines.append(f"pod {p.name} on {p.node or '(unscheduled)'}: created +{_fmt(p.created_s)}, scheduled "
                     f"+{_fmt(p.scheduled_s)}, image {'cached' if p.image_cached else _fmt(p.pull_s)}, container "
                     f"started +{_fmt(p.started_s)}" + (f", finished +{_fmt(p.finished_s)}" if p.finished_s else ""))
    lines += list(measured.notes)
    if not failures:
        lines += [f"problem: {p}" for p in measured.problems]
    return not failures, lines


# ----------------------------------------------------------------------------------------------------------------
# The live flow
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class _Run:
    """What the live flow has created so far (for the cleanup)."""

    run_id: str
    probes: list[Probe] = field(default_factory=list)
    uploaded: list[Probe] = field(default_factory=list)
    sent: int = 0


def _load_config(s: Any) -> Any:
    from ..config import parse_config
    from ..offline.synth import read_stack_config

    stack_file = Path(s.stack_file) if s.stack_file else None
    raw = read_stack_config(s.stack or "verify", Path(s.pulumi_dir or "."), stack_file)
    return parse_config(raw, stack=s.stack or (stack_file.name.split(".")[1] if stack_file and
                                               stack_file.name.count(".") >= 2 else "verify"))


def _get_result(aws: Any, bucket: str, key: str) -> tuple[datetime, dict] | None:
    """(S3 LastModified, JSON) of a result summary, None while it does not exist."""
    from .aws import AwsError, _wrap

    try:
        out = _wrap("s3:GetObject", f"s3://{bucket}/{key}", aws._client("s3").get_object, Bucket=bucket, Key=key)
    except AwsError as e:
        if e.code in ("NoSuchKey", "404", "NotFound"):
            return None
        raise
    try:
        doc = json.loads(out["Body"].read() or b"{}")
    except ValueError:
        doc = {}
    return out["LastModified"], doc if isinstance(doc, dict) else {}


def _queue_counts(aws: Any, url: str) -> dict[str, str]:
    return aws.queue_attributes(url, ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                                      "ApproximateNumberOfMessagesDelayed", "FifoQueue"])


def _fail(summary: str, evidence: list[str] | None = None) -> CheckResult:
    return CheckResult(NAME, FAIL, summary, [summary] + list(evidence or []))


def run(ctx: Any) -> CheckResult:
    """Send the probe burst, wait (bounded) for every result, collect the stage timestamps, judge, clean up."""
    from .aws import region_from_queue_url
    from .checks import one_line
    from .keda import owned_jobs, queue_is_idle, sqs_triggers

    s = ctx.settings
    if not (s.stack or s.stack_file):
        return _fail("no stack config for the prediction and the budget: pass --stack NAME (Pulumi.NAME.yaml in "
                     "--pulumi-dir) or --stack-file PATH")
    try:
        config = _load_config(s)
        name = s.burst_workload or default_workload(config)
        prediction = predicted(config, name, s.burst_probes, ctx.clock.now())
    except Exception as e:  # noqa: BLE001 - SynthError, ConfigError, a bad file: one line, before any cost
        return _fail(f"cannot plan the burst: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    budget = budget_for(getattr(config, "burst_budget", None), prediction, first_override=s.burst_first_result_s,
                        last_override=s.burst_last_result_s)
    workload = next((w for w in s.workloads if w.name == name), None)
    if workload is None and len(s.workloads) == 1:
        workload = s.workloads[0]
    if workload is None:
        return _fail(f"no queue for workload {name!r} (queues: {', '.join(w.name for w in s.workloads) or 'none'}): "
                     "pass --burst-workload or --queue-url")
    if not (s.slides_bucket and s.results_bucket):
        return _fail("the burst needs --slides-bucket and --results-bucket (the stack's slidesBucket and "
                     "resultsBucket outputs)")
    url = workload.queue_url
    sj = None
    if prediction.pattern == "scaledjob":
        sj = next((x for x in ctx.kube.list_scaled_jobs(s.namespace)
                   if any(t["queue_url"] == url for t in sqs_triggers(x))), None)
        if sj is None:
            return _fail(f"no ScaledJob in namespace {s.namespace} watches {url} (workload {name} runs as a "
                         "ScaledJob)")
    aws = ctx.aws(region_from_queue_url(url))
    counts = _queue_counts(aws, url)
    if not queue_is_idle(counts):
        return _fail(f"queue {url} is not idle ({counts.get('ApproximateNumberOfMessages', '?')} visible, "
                     f"{counts.get('ApproximateNumberOfMessagesNotVisible', '?')} in flight): a burst measured "
                     "next to real work measures that work too; run it when the queue is idle")
    fifo = counts.get("FifoQueue") == "true" or url.endswith(".fifo")
    wait_s = s.burst_timeout_s if s.burst_timeout_s is not None else budget.last_result_s + s.probe_extra_s
    state = _Run(str(uuid.uuid4()))
    state.probes = make_probes(state.run_id, s.burst_probes, slides_bucket=s.slides_bucket,
                               slides_prefix=s.slides_prefix, results_bucket=s.results_bucket,
                               results_prefix=s.results_prefix)
    ns = s.namespace
    before_jobs = ({(j.get("metadata") or {}).get("uid") for j in owned_jobs(ctx.kube.list_jobs(ns), sj)}
                   if sj else set())
    before_ncs = {(nc.get("metadata") or {}).get("uid") for nc in ctx.kube.list_nodeclaims()}
    evidence = [f"run {state.run_id}: {s.burst_probes} probe slide(s) of {PROBE_SIDE_PX}x{PROBE_SIDE_PX} px at "
                f"{PROBE_MPP_UM} µm/px to {url} (workload {name}, {prediction.pattern}); waiting up to "
                f"{wait_s:.0f} s"]
    cleanup: list[str] = []
    error = None
    try:
        for i, p in enumerate(state.probes):
            aws.put_object(p.slides_bucket, p.slide_key, probe_tiff(seed=i))
            state.uploaded.append(p)
        sent_at = ctx.clock.now()
        start = ctx.clock.monotonic()
        for p in state.probes:
            aws.send_message(url, p.body(), {BURST_ATTRIBUTE: state.run_id},
                             group_id=f"gpuburst-verify-{p.probe_id}" if fifo else None,
                             dedup_id=p.probe_id if fifo else None)
            state.sent += 1
        results: dict[str, ProbeResult] = {p.probe_id: ProbeResult(p.probe_id) for p in state.probes}
        queue_empty_s = None
        while True:
            for p in state.probes:
                if results[p.probe_id].written_at is None:
                    got = _get_result(aws, p.results_bucket, p.summary_key)
                    if got is not None:
                        results[p.probe_id] = ProbeResult(p.probe_id, got[0], got[1])
            waited = ctx.clock.monotonic() - start
            if queue_empty_s is None:
                c = _queue_counts(aws, url)
                if int(c.get("ApproximateNumberOfMessages", "0") or 0) + int(
                        c.get("ApproximateNumberOfMessagesNotVisible", "0") or 0) == 0:
                    queue_empty_s = waited
            if all(r.written_at is not None for r in results.values()) or waited >= wait_s:
                break
            ctx.clock.sleep(min(s.poll_interval_s, max(0.0, wait_s - waited)))
        jobs = [j for j in owned_jobs(ctx.kube.list_jobs(ns), sj)
                if (j.get("metadata") or {}).get("uid") not in before_jobs] if sj else []
        pods = ctx.kube.list_pods(ns) if jobs else []
        nodeclaims = ctx.kube.list_nodeclaims()
        events = ctx.kube.list_events(ns, field_selector="involvedObject.kind=Pod") if jobs else []
        measured = measured_timeline(sent_at, jobs, pods, nodeclaims, events, list(results.values()),
                                     probes=len(state.probes), waited_s=waited, preexisting_nodeclaims=before_ncs,
                                     pattern=prediction.pattern)
        ok, lines = judge(measured, prediction, budget)
        evidence += lines
        evidence.append("every probe message left the queue " + (
            f"by +{queue_empty_s:.0f} s (seen by polling)" if queue_empty_s is not None else
            "- no: some were still queued or in flight at the end"))
    except Exception as e:  # noqa: BLE001 - an API call failed mid-run: fail with it, after the cleanup below
        error = one_line(e)
    finally:
        cleanup = _cleanup(aws, url, state)
    evidence += cleanup
    if error is not None:
        return _fail(f"the burst could not be measured: {error}", evidence)
    if ok:
        summary = (f"burst of {measured.probes} on {name}: first result {measured.time_to_first_result_s:.0f} s "
                   f"(budget {budget.first_result_s:.0f} s), last {measured.time_to_last_result_s:.0f} s (budget "
                   f"{budget.last_result_s:.0f} s)" + ("; warm node" if measured.warm_node else ""))
        return CheckResult(NAME, PASS, summary, evidence)
    head = [x for x in lines if x.startswith(("time to ", "stage that overran", "no single stage"))]
    return CheckResult(NAME, FAIL, "; ".join(head), evidence)


def _cleanup(aws: Any, url: str, state: _Run) -> list[str]:
    """Remove this run's probe messages still queued, its probe slides and their results; never raises."""
    from .aws import AwsError

    notes: list[str] = []
    if state.sent:
        removed = 0
        try:
            for _ in range(3):
                msgs = aws.receive_messages(url, attribute_names=[BURST_ATTRIBUTE], max_messages=10,
                                            visibility_timeout_s=5, wait_s=1)
                for m in msgs:
                    if is_burst_probe(m, state.run_id):
                        aws.delete_message(url, m["ReceiptHandle"])
                        removed += 1
                    else:  # the queue was idle before the burst; anything else is real work that just arrived
                        aws.release_message(url, m["ReceiptHandle"])
                if not msgs:
                    break
            notes.append(f"cleanup: {removed} probe message(s) still queued deleted by receipt handle" if removed
                         else "cleanup: no probe message left on the queue")
        except AwsError as e:
            notes.append(f"cleanup of the probe messages failed: {e}")
    failed = []
    for p in state.uploaded:
        for bucket, key in [(p.slides_bucket, p.slide_key)] + [(p.results_bucket, k) for k in p.result_keys]:
            try:
                aws.delete_object(bucket, key)
            except AwsError as e:
                failed.append(str(e))
    if state.uploaded:
        notes.append(f"cleanup: {len(state.uploaded)} probe slide(s) and their results deleted" if not failed else
                     f"cleanup: {len(failed)} probe object(s) not deleted: {failed[0]}")
    return notes
