"""The `karpenter-health` check: the Karpenter controller's own log has no ERROR line since it started (the upgrade),
and no NodeClaim is stuck before `Initialized`, because a reconcile error every 60 s is invisible to `kubectl get`."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime

from .. import catalogue
from .context import Context
from .model import FAIL, PASS, CheckResult, age_s, condition, fmt_age, labels_of, name_of, parse_time

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
_OBJECT_KINDS = ("EC2NodeClass", "NodePool", "NodeClaim", "Node", "Pod")
"""Keys of a Karpenter log line that name the object a reconcile was about (`"EC2NodeClass":{"name":"gpu"}`)."""
_NOISE_KEYS = ("caller", "logger", "reconcileID", "commit", "stacktrace")
"""Keys left out of a quoted line so that the error text fits in the trimmed quote."""
_CONSOLE = re.compile(r"^(?P<time>\S+)\t(?P<level>[A-Z]+)\t(?P<logger>\S*)\t(?P<message>[^\t{]*)\t?(?P<rest>\{.*)?$")


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


def parse_error_line(line: str, pod: str) -> LogError | None:
    """An ERROR line of the controller (JSON, Karpenter's default, or zap's console form), or None for anything
    else."""
    text = line.strip()
    record: dict = {}
    if text.startswith("{"):
        try:
            record = json.loads(text)
        except ValueError:
            return None
    else:
        m = _CONSOLE.match(text)
        if not m:
            return None
        try:
            record = json.loads(m["rest"]) if m["rest"] else {}
        except ValueError:
            record = {}
        record.update(level=m["level"], time=m["time"], logger=m["logger"], message=m["message"].strip())
    if not isinstance(record, dict) or str(record.get("level", "")).upper() not in ("ERROR", "DPANIC", "PANIC",
                                                                                       "FATAL"):
        return None
    quoted = {k: v for k, v in record.items() if k not in _NOISE_KEYS and v not in ("", None)}
    return LogError(pod, parse_time(str(record.get("time") or "")),
                    str(record.get("controller") or record.get("logger") or "controller"),
                    str(record.get("error") or record.get("message") or "").strip(), _objects(record),
                    _quote(json.dumps(quoted, separators=(",", ":"))))


def group_errors(errors: list[LogError]) -> list[ErrorGroup]:
    """Errors grouped by controller and error text, the largest group first."""
    groups: dict[tuple[str, str], ErrorGroup] = {}
    for e in errors:
        groups.setdefault((e.controller, e.error), ErrorGroup(e.controller, e.error)).lines.append(e)
    return sorted(groups.values(), key=lambda g: -len(g.lines))


def pod_started(pod: dict) -> datetime | None:
    """When the controller container last started (its running state), else the pod's startTime."""
    st = pod.get("status") or {}
    starts = [parse_time(((c.get("state") or {}).get("running") or {}).get("startedAt"))
              for c in st.get("containerStatuses") or []]
    starts = [s for s in starts if s is not None]
    return max(starts) if starts else parse_time(st.get("startTime"))


def _quote(line: str) -> str:
    return line if len(line) <= QUOTE_CHARS else line[:QUOTE_CHARS - 1] + "…"


def stuck_nodeclaims(nodeclaims: list[dict], events: list[dict], now: datetime,
                     bound_s: float) -> tuple[list[str], list[str]]:
    """(stuck lines, other lines): NodeClaims older than bound_s without `Initialized=True`, each with its
    conditions and the reasons of its events."""
    stuck, fine = [], []
    for nc in nodeclaims:
        name = name_of(nc)
        age = age_s(nc, now)
        pool = labels_of(nc).get("karpenter.sh/nodepool", "?")
        itype = labels_of(nc).get("node.kubernetes.io/instance-type", "type not chosen")
        states = ", ".join(f"{t}={(condition(nc, t) or {}).get('status', 'absent')}"
                           for t in ("Launched", "Registered", "Initialized"))
        mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == name
                and (e.get("involvedObject") or {}).get("kind", "NodeClaim") == "NodeClaim"]
        reasons = ", ".join(f"{e.get('type', 'Normal')} {e.get('reason')} x{e.get('count') or 1}"
                            + (f" ({_quote(str(e.get('message', '')).strip())})" if e.get("type") == "Warning"
                               else "") for e in mine)
        line = (f"NodeClaim {name} (NodePool {pool}, {itype}, age {fmt_age(age)}): {states}"
                + (f"; events: {reasons}" if reasons else "; no events"))
        initialized = (condition(nc, "Initialized") or {}).get("status") == "True"
        if not initialized and not (nc.get("metadata") or {}).get("deletionTimestamp") and age is not None \
                and age >= bound_s:
            stuck.append(line + f" — not Initialized after {int(bound_s)} s")
        else:
            fine.append(line)
    return stuck, fine


def judge_karpenter_health(namespace: str, pods: list[dict], logs: dict[str, str], nodeclaims: list[dict],
                           events: list[dict], now: datetime, *, since: datetime | None = None,
                           bound_s: float = NODECLAIM_INITIALIZED_WITHIN_S) -> CheckResult:
    """The verdict from the controller pods, their logs (pod name -> text), the NodeClaims and their events.

    ERROR lines count from `since`, else from each pod's (container's) start: the upgrade that restarted it."""
    evidence: list[str] = []
    if not pods:
        return CheckResult(NAME, FAIL, f"no Karpenter controller pod in namespace {namespace} (label "
                                       f"{CONTROLLER_SELECTOR}): nothing provisions GPU nodes", evidence)
    errors: list[LogError] = []
    for pod in pods:
        pname = name_of(pod)
        start = since or pod_started(pod)
        text = logs.get(pname, "")
        lines = [ln for ln in text.splitlines() if ln.strip()]
        mine = [e for e in (parse_error_line(ln, pname) for ln in lines) if e is not None
                and (start is None or e.time is None or e.time >= start)]
        errors += mine
        evidence.append(f"pod {namespace}/{pname}: {len(lines)} log line(s) read since "
                        f"{start.isoformat() if start else 'its start'}"
                        f"{' (--since)' if since else ' (the container start)'}, {len(mine)} ERROR line(s)")
    groups = group_errors(errors)
    for g in groups:
        about = ", ".join(g.objects()) or "no object named"
        evidence.append(f"controller {g.controller} ({about}): {g.error!r} x{len(g.lines)} in pod(s) "
                        f"{', '.join(g.pods())}")
        evidence.append(f"  first: {_quote(g.lines[0].line)}")
        if len(g.lines) > 1:
            evidence.append(f"  last:  {_quote(g.lines[-1].line)}")
    stuck, fine = stuck_nodeclaims(nodeclaims, events, now, bound_s)
    evidence += stuck + fine
    problems = []
    if groups:
        top = groups[0]
        about = ", ".join(top.objects()) or "no object named"
        more = f"; {len(groups) - 1} more error group(s)" if len(groups) > 1 else ""
        when = since.isoformat() if since else "its start"
        problems.append(f"Karpenter pod {namespace}/{', '.join(top.pods())} logged {len(errors)} ERROR line(s) "
                        f"since {when}: controller {top.controller} on {about}: {top.error!r} x{len(top.lines)}"
                        f"{more}")
    if stuck:
        problems.append(f"{len(stuck)} NodeClaim(s) not Initialized after {int(bound_s)} s: "
                        + "; ".join(s.split(":", 1)[0].removeprefix("NodeClaim ") for s in stuck))
    if problems:
        return CheckResult(NAME, FAIL, " | ".join(problems), evidence)
    names = ", ".join(f"{namespace}/{name_of(p)}" for p in pods)
    return CheckResult(NAME, PASS, f"Karpenter pod(s) {names}: no ERROR line since the start; {len(nodeclaims)} "
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
