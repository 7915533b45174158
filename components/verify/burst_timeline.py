"""The burst check's measured timeline: every stage of a burst timed from the API's own timestamps.

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
slowest cold node's, image_pull the slowest pod's, model_load and per_item the slowest probe's."""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .burst_probes import ProbeResult
from .model import condition, name_of, parse_time

STAGES = ("poll", "nodeclaim", "ec2_ready", "gpu_registered", "image_pull", "model_load", "per_item")
"""The planner's stage names, in the order of the timeline."""


NODE_STAGES = ("nodeclaim", "ec2_ready", "gpu_registered")
"""Stages only a pod on a node launched for the burst pays."""


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

    stages: dict[str, Any]
    """Stage name (STAGES) -> seconds, or None when not measured (a warm node has no node stages)."""
    time_to_first_result_s: float | None
    """Sent -> first result summary, seconds; None = no result."""
    time_to_last_result_s: float | None
    """Sent -> last result summary, seconds; None = some probe wrote no result."""
    probes: int
    """Probes sent."""
    results: int
    """Probes with a result summary."""
    nodes: tuple[Any, ...] = ()
    """NodeTimes of the nodes the probe pods ran on (and burst NodeClaims without a node yet)."""
    pods: tuple[Any, ...] = ()
    """PodTimes of the probe pods."""
    notes: tuple[Any, ...] = ()
    """Facts worth printing ("warm node ...", "image already present on machine")."""
    problems: tuple[Any, ...] = ()
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


def pods_of(jobs: Iterable[dict[str, Any]], pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
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


def measured_timeline(sent_at: datetime, jobs: list[dict[str, Any]], pods: list[dict[str, Any]],
                      nodeclaims: list[dict[str, Any]],
                      events: list[dict[str, Any]], results: list[ProbeResult], *, probes: int | None = None,
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
