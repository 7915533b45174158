"""The `karpenter-health` check: the Karpenter controller's own log has no ERROR line since it started (the upgrade),
and no NodeClaim is stuck before `Initialized`, because a reconcile error every 60 s is invisible to `kubectl get`."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .. import catalogue
from .context import Context
from .karpenter_log import ERROR_LEVELS, LogEntry, LogReading, read_log
from .model import ERROR, FAIL, PASS, CheckResult, age_s, condition, fmt_age, labels_of, name_of, parse_time

NAME = "karpenter-health"
CONTROLLER_SELECTOR = "app.kubernetes.io/name=karpenter"
"""Label of the Karpenter chart's controller pods (the chart is pinned in catalogue.CHARTS["karpenter"])."""
NODECLAIM_INITIALIZED_WITHIN_S = 900.0
"""Default seconds a NodeClaim may take from creation to `Initialized=True` (launch, registration, the device
plugin's GPU) before it counts as stuck; `run` uses the run's `timeout_s` (the gpu-job's deadline, default 900)."""
LOG_TAIL_LINES = 20000
"""Most log lines read per controller pod (the newest ones)."""
QUOTE_CHARS = 300
"""A quoted log line is trimmed to this many characters."""
SUMMARY_ERROR_CHARS = 70
"""The error text in the summary is trimmed to this many characters (the evidence quotes the lines)."""
NODECLAIM_STEPS = ("Launched", "Registered", "Initialized")
"""A NodeClaim's conditions in the order Karpenter reaches them (kubernetes-sigs/karpenter v1
pkg/controllers/nodeclaim/lifecycle: launch, registration, initialization)."""
_OBJECT_KINDS = ("EC2NodeClass", "NodePool", "NodeClaim", "Node", "Pod")
"""Keys of a Karpenter log line that name the object a reconcile was about (`"EC2NodeClass":{"name":"gpu"}`)."""
_NOISE_KEYS = ("caller", "logger", "reconcileID", "commit", "stacktrace")
"""Keys left out of a quoted line so that the error text fits in the trimmed quote."""


@dataclass
class LogError:
    """One ERROR line of the controller log, parsed."""

    pod: str
    """The controller pod that logged it."""
    time: datetime | None
    """Its `time` field."""
    controller: str
    """Its `controller` field (`nodeclass.status`), else its logger."""
    error: str
    """Its `error` field, else its message."""
    objects: tuple[str, ...]
    """The objects it names, as `Kind name` (`EC2NodeClass gpu`)."""
    line: str
    """The line as quoted: the record without noise keys (caller, reconcileID, empty namespace), trimmed."""


@dataclass
class ErrorGroup:
    """Every ERROR line of one controller with one error text."""

    controller: str
    """The controller that logged them."""
    error: str
    """The error text."""
    lines: list[LogError] = field(default_factory=list)
    """The lines, oldest first."""

    def objects(self) -> list[str]:
        """The objects the lines are about, in first-seen order."""
        return list(dict.fromkeys(o for e in self.lines for o in e.objects))

    def pods(self) -> list[str]:
        """The pods that logged them."""
        return list(dict.fromkeys(e.pod for e in self.lines))


def _objects(record: dict) -> tuple[str, ...]:
    found = []
    for kind in _OBJECT_KINDS:
        ref = record.get(kind)
        if isinstance(ref, dict) and ref.get("name"):
            found.append(f"{kind} {ref['name']}")
    return tuple(found)


def error_of(entry: LogEntry, pod: str) -> LogError | None:
    """The LogError of an ERROR (or worse) entry, None for any other level."""
    if entry.level not in ERROR_LEVELS:
        return None
    record = {"level": entry.level, "time": entry.time_text or None,
              "message": entry.message, **entry.fields}
    quoted = {k: v for k, v in record.items() if k not in _NOISE_KEYS and v not in ("", None)}
    fields = entry.fields
    return LogError(pod, entry.time, str(fields.get("controller") or fields.get("logger") or "controller"),
                    str(fields.get("error") or entry.message or "").strip(), _objects(fields),
                    _quote(json.dumps(quoted, separators=(",", ":"), default=str)))


def parse_error_line(line: str, pod: str) -> LogError | None:
    """An ERROR line of the controller (JSON, or zap's console form with or without the logger and caller columns),
    or None for any other line."""
    entries = read_log(line).entries
    return error_of(entries[0], pod) if entries else None


def group_errors(errors: list[LogError]) -> list[ErrorGroup]:
    """Errors grouped by controller and error text, the largest group first."""
    groups: dict[tuple[str, str], ErrorGroup] = {}
    for e in errors:
        groups.setdefault((e.controller, e.error), ErrorGroup(e.controller, e.error)).lines.append(e)
    return sorted(groups.values(), key=lambda g: -len(g.lines))


def pod_started(pod: dict[str, Any]) -> datetime | None:
    """When the controller container last started (its running state), else the pod's startTime."""
    st = pod.get("status") or {}
    starts = [parse_time(((c.get("state") or {}).get("running") or {}).get("startedAt"))
              for c in st.get("containerStatuses") or []]
    starts = [s for s in starts if s is not None]
    return max(starts) if starts else parse_time(st.get("startTime"))


def _quote(line: str, limit: int = QUOTE_CHARS) -> str:
    return line if len(line) <= limit else line[:limit - 1] + "…"


def instance_of(nodeclaim: dict[str, Any]) -> str | None:
    """The EC2 instance of a NodeClaim from its status.providerID (`aws:///us-east-1a/i-0abc…` -> `i-0abc…`; another
    provider's id as it is), None before the launch."""
    provider_id = (nodeclaim.get("status") or {}).get("providerID") or ""
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return (last if last.startswith("i-") else provider_id) or None


def missing_step(nodeclaim: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The first of Launched, Registered, Initialized that is not True, with its condition ({} when absent)."""
    for step in NODECLAIM_STEPS:
        c = condition(nodeclaim, step) or {}
        if c.get("status") != "True":
            return step, c
    return None


def _condition_text(c: dict, step: str) -> str:
    text = f"{step}={c.get('status', 'absent')}"
    if c.get("reason") or c.get("message"):
        text += f" ({c.get('reason') or 'no reason'}" + (f": {_quote(str(c['message']).strip(), 120)}"
                                                        if c.get("message") else "") + ")"
    return text


@dataclass
class StuckNodeClaim:
    """A NodeClaim older than the bound without Initialized=True."""

    name: str
    """Its name."""
    instance: str | None
    """Its EC2 instance (status.providerID), None when none was launched."""
    step: str
    """The step it never reached: Launched, Registered or Initialized."""
    reason: str
    """That condition's reason (`NodeNotFound`), else its status (`status Unknown, no reason`) or `no condition`."""

    def short(self) -> str:
        """`gpu-x7k2p (i-0abc…, never Registered: NodeNotFound)` for the summary."""
        return f"{self.name} ({self.instance or 'no instance'}, never {self.step}: {self.reason})"


def stuck_nodeclaims(nodeclaims: list[dict[str, Any]], events: list[dict[str, Any]], now: datetime,
                     bound_s: float) -> tuple[list[StuckNodeClaim], list[str], list[str]]:
    """(stuck NodeClaims, their evidence lines, the other NodeClaims' lines): NodeClaims older than bound_s without
    `Initialized=True`, each line with its instance, its conditions (status, reason, message) and its events'
    reasons, and for a stuck one the step it never reached."""
    stuck: list[StuckNodeClaim] = []
    stuck_lines, fine = [], []
    for nc in nodeclaims:
        name = name_of(nc)
        age = age_s(nc, now)
        pool = labels_of(nc).get("karpenter.sh/nodepool", "?")
        itype = labels_of(nc).get("node.kubernetes.io/instance-type", "type not chosen")
        instance = instance_of(nc)
        states = ", ".join(_condition_text(condition(nc, t) or {}, t) for t in NODECLAIM_STEPS)
        mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == name
                and (e.get("involvedObject") or {}).get("kind", "NodeClaim") == "NodeClaim"]
        reasons = ", ".join(f"{e.get('type', 'Normal')} {e.get('reason')} x{e.get('count') or 1}"
                            + (f" ({_quote(str(e.get('message', '')).strip())})" if e.get("type") == "Warning"
                               else "") for e in mine)
        line = (f"NodeClaim {name} (NodePool {pool}, {itype}, instance {instance or 'none launched'}, age "
                f"{fmt_age(age)}): {states}" + (f"; events: {reasons}" if reasons else "; no events"))
        missing = missing_step(nc)
        if missing and not (nc.get("metadata") or {}).get("deletionTimestamp") and age is not None \
                and age >= bound_s:
            step, c = missing
            reason = c.get("reason") or (f"status {c['status']}, no reason" if c.get("status") else "no condition")
            stuck.append(StuckNodeClaim(name, instance, step, reason))
            stuck_lines.append(line + f" — stuck: never {step} after {int(bound_s)} s")
        else:
            fine.append(line)
    return stuck, stuck_lines, fine


def _read_evidence(namespace: str, pname: str, reading: LogReading, start: datetime | None, since: datetime | None,
                   errors: int) -> list[str]:
    layouts = reading.layouts()
    shown = ", ".join(f"{layouts[k]} {'JSON' if k == 'json' else k}" for k in ("json", "console") if k in layouts)
    lines = [f"pod {namespace}/{pname}: {reading.lines} log line(s) read since "
             f"{start.isoformat() if start else 'its start'}{' (--since)' if since else ' (the container start)'}: "
             f"{reading.understood} understood ({shown or 'no entry'}"
             + (f", {reading.stack_lines} stack line(s)" if reading.stack_lines else "")
             + f"), {len(reading.unreadable)} not understood; {errors} ERROR line(s)"]
    if reading.unreadable:
        lines.append(f"  not understood (first of {len(reading.unreadable)}): {_quote(reading.unreadable[0])!r}")
    return lines


def judge_karpenter_health(namespace: str, pods: list[dict[str, Any]], logs: dict[str, str],
                           nodeclaims: list[dict[str, Any]],
                           events: list[dict[str, Any]], now: datetime, *, since: datetime | None = None,
                           bound_s: float = NODECLAIM_INITIALIZED_WITHIN_S) -> CheckResult:
    """The verdict from the controller pods, their logs (pod name -> text), the NodeClaims and their events.

    ERROR lines count from `since`, else from each pod's (container's) start: the upgrade that restarted it. A log
    with lines but none understood cannot pass (`error`: verify could not read it), nor can one whose unreadable
    lines mention an error."""
    evidence: list[str] = []
    if not pods:
        return CheckResult(NAME, FAIL, f"no Karpenter controller pod in namespace {namespace} (label "
                                       f"{CONTROLLER_SELECTOR}): nothing provisions GPU nodes", evidence)
    errors: list[LogError] = []
    unread: list[str] = []
    for pod in pods:
        pname = name_of(pod)
        start = since or pod_started(pod)
        reading = read_log(logs.get(pname, ""))
        mine = [e for e in (error_of(entry, pname) for entry in reading.entries) if e is not None
                and (start is None or e.time is None or e.time >= start)]
        errors += mine
        evidence += _read_evidence(namespace, pname, reading, start, since, len(mine))
        if reading.lines and not reading.understood:
            unread.append(f"{namespace}/{pname}'s log: none of its {reading.lines} line(s) is JSON or zap's console "
                          f"layout (first: {_quote(reading.unreadable[0], 60)!r})")
        elif reading.unreadable_mentioning_error():
            hidden = reading.unreadable_mentioning_error()
            unread.append(f"{namespace}/{pname}'s log: {len(hidden)} line(s) not understood mention an error "
                          f"(first: {_quote(hidden[0], 60)!r})")
    groups = group_errors(errors)
    for g in groups:
        about = ", ".join(g.objects()) or "no object named"
        evidence.append(f"controller {g.controller} ({about}): {g.error!r} x{len(g.lines)} in pod(s) "
                        f"{', '.join(g.pods())}")
        evidence.append(f"  first: {_quote(g.lines[0].line)}")
        if len(g.lines) > 1:
            evidence.append(f"  last:  {_quote(g.lines[-1].line)}")
    stuck, stuck_lines, fine = stuck_nodeclaims(nodeclaims, events, now, bound_s)
    evidence += stuck_lines + fine
    problems = []
    if groups:
        top = groups[0]
        about = ", ".join(top.objects()) or "no object named"
        more = f", +{len(groups) - 1} more error group(s)" if len(groups) > 1 else ""
        when = since.isoformat() if since else "its start"
        pods_named = top.pods()
        who = f"{namespace}/{pods_named[0]}" + (f" +{len(pods_named) - 1}" if len(pods_named) > 1 else "")
        head = f"{len(errors)} ERROR line(s) since {when}: "
        if stuck:  # both halves must fit: the controller, the pod and the whole error are in the evidence
            count = f" x{len(top.lines)}" if len(groups) > 1 else ""
            problems.append(head + f"{_quote(top.error, SUMMARY_ERROR_CHARS - 35)!r}{count} on {about}")
        else:
            problems.append(head + f"{_quote(top.error, SUMMARY_ERROR_CHARS)!r} x{len(top.lines)} on {about} "
                                   f"(controller {top.controller}{more}); Karpenter pod {who}")
    if stuck:
        more = f" +{len(stuck) - 1} more" if len(stuck) > 1 else ""
        problems.append(f"{len(stuck)} NodeClaim(s) stuck past {int(bound_s)} s: {stuck[0].short()}{more}")
    if problems:
        return CheckResult(NAME, FAIL, " | ".join(problems), unread + evidence)
    if unread:
        more = f" (+{len(unread) - 1} more)" if len(unread) > 1 else ""
        return CheckResult(NAME, ERROR, f"could not read {unread[0]}{more}", unread + evidence)
    names = ", ".join(f"{namespace}/{name_of(p)}" for p in pods)
    return CheckResult(NAME, PASS, f"no ERROR line since the start in Karpenter pod(s) {names}; {len(nodeclaims)} "
                                   "NodeClaim(s), none stuck before Initialized", evidence)


def run(ctx: Context) -> CheckResult:
    """Read the controller pods and their logs (since each pod's start), the NodeClaims and their events; judge."""
    kube = ctx.kube
    namespace = catalogue.CHARTS["karpenter"].namespace
    now = ctx.clock.now()
    pods = kube.list_pods(namespace, label_selector=CONTROLLER_SELECTOR)
    logs = {}
    since = ctx.settings.since
    for pod in pods:
        start = since or pod_started(pod)
        since_s = int((now - start).total_seconds()) + 1 if start else None
        logs[name_of(pod)] = kube.read_pod_log(namespace, name_of(pod), tail_lines=LOG_TAIL_LINES,
                                               since_seconds=since_s if since_s and since_s > 0 else None)
    nodeclaims = kube.list_nodeclaims()
    events: list[dict] = []
    if nodeclaims:
        # Events of a cluster-scoped object are recorded in the `default` namespace.
        events = kube.list_events("default", field_selector="involvedObject.kind=NodeClaim")
    return judge_karpenter_health(namespace, pods, logs, nodeclaims, events, now, since=since,
                                  bound_s=ctx.settings.timeout_s)
