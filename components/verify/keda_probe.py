"""The keda check's probe: one marked test message on a ScaledJob's queue that must make it create a Job, sent and
watched without ever receiving from the queue, so no real message is touched (see docs/verify.md, "The probe
message")."""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from .. import catalogue
from .context import Context
from .model import name_of, ns_name, parse_time

PROBE_ATTRIBUTE = "gpuburst-verify"
"""SQS message attribute (String) that marks a verify probe; its value is the probe's uuid."""
CLOCK_SKEW_S = 2
"""Seconds the API server's clock (creationTimestamp) may trail verify's own when telling a Job made after the send
from one made before it."""


def sqs_triggers(sj: dict[str, Any]) -> list[dict[str, Any]]:
    """The ScaledJob's aws-sqs-queue triggers: queue URL (queueURL, or queueURLFromEnv resolved from the job's
    containers), region and authenticationRef."""
    spec = sj.get("spec") or {}
    env: dict[str, str] = {}
    tmpl = ((((spec.get("jobTargetRef") or {}).get("template") or {}).get("spec") or {}).get("containers") or [])
    for c in tmpl:
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = e["value"]
    out = []
    for t in spec.get("triggers") or []:
        if t.get("type") != "aws-sqs-queue":
            continue
        md = t.get("metadata") or {}
        url = md.get("queueURL") or env.get(md.get("queueURLFromEnv", ""), None)
        out.append({"queue_url": url, "region": md.get("awsRegion"), "auth": t.get("authenticationRef"),
                    "activation": int(float(md.get("activationQueueLength") or 0)),
                    "in_flight": str(md.get("scaleOnInFlight", "true")).lower() == "true"})
    return out


def polling_interval_s(sj: dict[str, Any]) -> int:
    """spec.pollingInterval, seconds (KEDA's default 30 when absent)."""
    return int((sj.get("spec") or {}).get("pollingInterval") or catalogue.KEDA_DEFAULT_POLLING_INTERVAL_S)


def probe_body(probe_id: str) -> str:
    """The probe's body: not a slide message (the worker's contract rejects it), so nothing can process it as work."""
    return json.dumps({"verify_probe": probe_id})


def is_probe(message: dict[str, Any], probe_id: str) -> bool:
    """True when a received SQS message is this run's probe (by its message attribute, never by its body)."""
    attr = (message.get("MessageAttributes") or {}).get(PROBE_ATTRIBUTE) or {}
    return attr.get("StringValue") == probe_id


def queue_is_idle(attributes: dict[str, str]) -> bool:
    """No visible, in-flight or delayed message (so verify's receive cannot touch real work)."""
    return all(int(attributes.get(k, "0") or 0) == 0 for k in (
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"))


def owned_jobs(jobs: list[dict[str, Any]], sj: dict[str, Any]) -> list[dict[str, Any]]:
    """Jobs this ScaledJob created: an ownerReference to it (its uid, when both sides state one). KEDA always sets
    that reference; a Job carrying only the `scaledjob.keda.sh/name` label (made by hand, or by a ScaledJob of the
    same name that was deleted and recreated) is not its Job."""
    uid = (sj.get("metadata") or {}).get("uid")
    out = []
    for j in jobs:
        refs = (j.get("metadata") or {}).get("ownerReferences") or []
        if any(r.get("kind") == "ScaledJob" and r.get("name") == name_of(sj)
               and (uid is None or r.get("uid") in (None, uid)) for r in refs):
            out.append(j)
    return out


def running_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Jobs not finished (no Complete or Failed condition True): those count against maxReplicaCount."""
    def finished(j: dict) -> bool:
        return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                   for c in (j.get("status") or {}).get("conditions") or [])
    return [j for j in jobs if not finished(j)]


def max_replicas(sj: dict[str, Any]) -> int:
    """spec.maxReplicaCount (KEDA's default 100 when absent)."""
    value = (sj.get("spec") or {}).get("maxReplicaCount")
    return int(value) if value is not None else 100


def probe_blocked(sj: dict[str, Any], trigger: dict[str, Any], attributes: dict[str, str],
                  jobs: list[dict[str, Any]]) -> str | None:
    """Why one probe message cannot make this ScaledJob create a Job (so the probe is not sent), else None.

    - activationQueueLength: KEDA activates only when the queue length is above it; one probe next to the messages
      already counted (visible, plus in flight unless scaleOnInFlight is false) may not be.
    - maxReplicaCount: with that many of its Jobs still running, KEDA creates no more, whatever the queue holds.
    """
    who = f"ScaledJob {ns_name(sj)}"
    counted = int(attributes.get("ApproximateNumberOfMessages", "0") or 0)
    if trigger.get("in_flight", True):
        counted += int(attributes.get("ApproximateNumberOfMessagesNotVisible", "0") or 0)
    activation = int(trigger.get("activation") or 0)
    if counted + 1 <= activation:
        return (f"{who}: activationQueueLength {activation}: the queue would hold {counted + 1} message(s) with the "
                f"probe, which does not activate it (KEDA creates Jobs only above {activation}); probe not sent")
    running = running_jobs(owned_jobs(jobs, sj))
    if len(running) >= max_replicas(sj):
        return (f"{who}: at maxReplicaCount {max_replicas(sj)} ({len(running)} of its Jobs running: "
                f"{', '.join(name_of(j) for j in running[:5])}); KEDA creates no more, probe not sent")
    return None


def new_jobs(before_uids: set[str], jobs: list[dict[str, Any]], sj: dict[str, Any],
             sent_at: datetime | None = None) -> list[dict[str, Any]]:
    """Jobs of the ScaledJob that appeared for the probe: not there before it was sent (by uid) and created at or
    after the send (creationTimestamp, whole seconds, so a Job KEDA made for real work between verify's first look
    and the send does not count).

    Why not by the message itself: KEDA creates a Job from the ScaledJob's template and only the Job's worker, once
    it runs, receives a message (it logs `verify probe <id> acknowledged`); nothing on a fresh Job can name the
    message that caused it. Verify sends its probe only when nothing else can explain a new Job that quickly (the
    ScaledJob healthy, below maxReplicaCount, above activation) and judges a Job it did not cause as someone's work.
    """
    floor = sent_at.replace(microsecond=0) - timedelta(seconds=CLOCK_SKEW_S) if sent_at is not None else None
    out = []
    for j in owned_jobs(jobs, sj):
        md = j.get("metadata") or {}
        if md.get("uid") in before_uids:
            continue
        created = parse_time(md.get("creationTimestamp"))
        if floor is not None and created is not None and created < floor:
            continue
        out.append(j)
    return out


def job_started(pods: list[dict[str, Any]]) -> bool:
    """True when any pod of a Job has a container that started (it may have received a message)."""
    for p in pods:
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            state = cs.get("state") or {}
            if "running" in state or "terminated" in state:
                return True
    return False


def judge_probe(sj: dict[str, Any], queue_url: str, appeared: list[dict[str, Any]], waited_s: float,
                window_s: float) -> tuple[bool, str]:
    """(ok, evidence line): a Job owned by the ScaledJob appeared within the window after the probe was sent."""
    who = f"ScaledJob {ns_name(sj)}"
    if appeared:
        return True, (f"{who}: Job {name_of(appeared[0])} appeared {int(waited_s)} s after a probe message on "
                      f"{queue_url}")
    return False, (f"{who}: created no Job within {int(window_s)} s (pollingInterval {polling_interval_s(sj)} s + "
                   f"margin) of a probe message on {queue_url}")


def _probe(ctx, sj: dict, trigger: dict) -> tuple[bool | None, str, list[str]]:
    """Send one probe to the ScaledJob's queue and wait for its Job; (ok, verdict line, evidence), ok None when the
    probe was not sent because it could not work (see probe_blocked). Its only SQS calls are GetQueueAttributes and
    SendMessage: nothing on the queue is ever received, deleted or hidden (see after_probe)."""
    from .aws import region_from_queue_url  # boto3 loads only when a check talks to AWS

    s = ctx.settings
    url = trigger["queue_url"]
    aws = ctx.aws(trigger.get("region") or region_from_queue_url(url))
    evidence: list[str] = []
    probe_id = str(uuid.uuid4())
    attrs = aws.queue_attributes(url, ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                                       "ApproximateNumberOfMessagesDelayed", "FifoQueue"])
    idle_before = queue_is_idle(attrs)  # evidence only: verify receives from no queue, idle or busy
    fifo = attrs.get("FifoQueue") == "true" or url.endswith(".fifo")
    jobs_before = ctx.kube.list_jobs(name_of_ns(sj))
    blocked = probe_blocked(sj, trigger, attrs, jobs_before)
    if blocked:
        return None, blocked, [blocked]
    before = {(j.get("metadata") or {}).get("uid") for j in owned_jobs(jobs_before, sj)}
    window = polling_interval_s(sj) + s.probe_extra_s
    sent_at = ctx.clock.now()
    # Nothing to undo on any path (an interrupt, a send that timed out after SQS took the message): the probe is
    # the worker's to acknowledge, and verify creates nothing else.
    aws.send_message(url, probe_body(probe_id), {PROBE_ATTRIBUTE: probe_id},
                     group_id=f"gpuburst-verify-{probe_id}" if fifo else None,
                     dedup_id=probe_id if fifo else None)
    evidence.append(f"probe {probe_id} sent to {url} (queue {'idle' if idle_before else 'busy: ' + str(attrs)})")
    start = ctx.clock.monotonic()
    while True:
        appeared = new_jobs(before, ctx.kube.list_jobs(name_of_ns(sj)), sj, sent_at)
        waited = ctx.clock.monotonic() - start
        if appeared or waited >= window:
            break
        ctx.clock.sleep(min(s.poll_interval_s, max(0.0, window - waited)))
    ok, verdict = judge_probe(sj, url, appeared, waited, window)
    evidence.append(verdict)
    evidence += after_probe(ctx, url, probe_id, sj, appeared)
    return ok, verdict, evidence


def name_of_ns(sj: dict[str, Any]) -> str:
    return (sj.get("metadata") or {}).get("namespace") or ""


def after_probe(ctx: Context, url: str, probe_id: str, sj: dict[str, Any], appeared: list[dict[str, Any]]) -> list[str]:
    """What becomes of the probe message and the Job it caused; verify removes neither (see docs/verify.md).

    The message: verify never calls ReceiveMessage, DeleteMessage or ChangeMessageVisibility on a work queue. SQS
    cannot limit those calls to one message: a receive hands out whatever is visible (a real message then counts
    one more ApproximateReceiveCount, toward the dead-letter queue, and stays hidden for the visibility timeout),
    so the only way never to touch real work is never to receive. The worker acknowledges the probe (deletes it
    unprocessed, by its attribute). The Job KEDA made for it: left to run, because its worker is what takes the
    probe off the queue (deleted before it runs, KEDA would only make another for the probe still queued)."""
    notes = [f"probe {probe_id}: left on {url} for the worker to acknowledge (verify never receives from a work "
             "queue, so it cannot touch a real message)"]
    for job in appeared:
        ns, jname = name_of_ns(job) or name_of_ns(sj), name_of(job)
        notes.append(f"Job {ns}/{jname}: left to run (its worker acknowledges the probe); the ScaledJob's history "
                     "limits and TTL remove it")
        try:
            pods = ctx.kube.list_pods(ns, label_selector=f"job-name={jname}")
            notes += acknowledged_by(ctx, ns, jname, pods, probe_id)
        except Exception as e:  # noqa: BLE001 - evidence only: the verdict is already made
            notes.append(f"Job {ns}/{jname}: its pods were not read ({type(e).__name__}: {e})")
    return notes


def acknowledged_by(ctx: Context, namespace: str, job_name: str, pods: list[dict[str, Any]],
                    probe_id: str) -> list[str]:
    """Evidence, once a Job's worker ran: whether its log says it acknowledged this run's probe (the worker logs
    `verify probe <uuid> acknowledged`) — the one place the message that woke the Job can be seen."""
    for p in pods:
        if not job_started([p]):
            continue
        text = ctx.kube.read_pod_log(namespace, name_of(p), tail_lines=500)
        if f"verify probe {probe_id}" in text:
            return [f"Job {namespace}/{job_name}: pod {name_of(p)} logged `verify probe {probe_id} acknowledged`: "
                    "it is the probe's Job, by its message"]
    return []
