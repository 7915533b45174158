"""The keda check's probe: one marked test message on a ScaledJob's queue that must make it create a Job, and the
cleanup that removes the probe and its Job on every path (see docs/verify.md, "The probe message")."""
from __future__ import annotations

import json
import uuid
from typing import Any

from .. import catalogue
from .model import name_of, ns_name

PROBE_ATTRIBUTE = "gpuburst-verify"
"""SQS message attribute (String) that marks a verify probe; its value is the probe's uuid."""


def sqs_triggers(sj: dict) -> list[dict[str, Any]]:
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
        out.append({"queue_url": url, "region": md.get("awsRegion"), "auth": t.get("authenticationRef")})
    return out


def polling_interval_s(sj: dict) -> int:
    """spec.pollingInterval, seconds (KEDA's default 30 when absent)."""
    return int((sj.get("spec") or {}).get("pollingInterval") or catalogue.KEDA_DEFAULT_POLLING_INTERVAL_S)


def probe_body(probe_id: str) -> str:
    """The probe's body: not a slide message (the worker's contract rejects it), so nothing can process it as work."""
    return json.dumps({"verify_probe": probe_id})


def is_probe(message: dict, probe_id: str) -> bool:
    """True when a received SQS message is this run's probe (by its message attribute, never by its body)."""
    attr = (message.get("MessageAttributes") or {}).get(PROBE_ATTRIBUTE) or {}
    return attr.get("StringValue") == probe_id


def queue_is_idle(attributes: dict[str, str]) -> bool:
    """No visible, in-flight or delayed message (so verify's receive cannot touch real work)."""
    return all(int(attributes.get(k, "0") or 0) == 0 for k in (
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"))


def owned_jobs(jobs: list[dict], sj: dict) -> list[dict]:
    """Jobs the ScaledJob created (ownerReference to it, or KEDA's `scaledjob.keda.sh/name` label)."""
    uid = (sj.get("metadata") or {}).get("uid")
    out = []
    for j in jobs:
        refs = (j.get("metadata") or {}).get("ownerReferences") or []
        by_ref = any(r.get("kind") == "ScaledJob" and r.get("name") == name_of(sj)
                     and (uid is None or r.get("uid") in (None, uid)) for r in refs)
        by_label = ((j.get("metadata") or {}).get("labels") or {}).get("scaledjob.keda.sh/name") == name_of(sj)
        if by_ref or by_label:
            out.append(j)
    return out


def new_jobs(before_uids: set[str], jobs: list[dict], sj: dict) -> list[dict]:
    """Jobs of the ScaledJob that were not there before the probe was sent (compared by uid, not by clock)."""
    return [j for j in owned_jobs(jobs, sj) if (j.get("metadata") or {}).get("uid") not in before_uids]


def job_started(pods: list[dict]) -> bool:
    """True when any pod of a Job has a container that started (it may have received a message)."""
    for p in pods:
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            state = cs.get("state") or {}
            if "running" in state or "terminated" in state:
                return True
    return False


def judge_probe(sj: dict, queue_url: str, appeared: list[dict], waited_s: float, window_s: float) -> tuple[bool, str]:
    """(ok, evidence line): a Job owned by the ScaledJob appeared within the window after the probe was sent."""
    who = f"ScaledJob {ns_name(sj)}"
    if appeared:
        return True, (f"{who}: Job {name_of(appeared[0])} appeared {int(waited_s)} s after a probe message on "
                      f"{queue_url}")
    return False, (f"{who}: created no Job within {int(window_s)} s (pollingInterval {polling_interval_s(sj)} s + "
                   f"margin) of a probe message on {queue_url}")


def _probe(ctx, sj: dict, trigger: dict) -> tuple[bool, str, list[str]]:
    """Send one probe to the ScaledJob's queue, wait for its Job, and clean up; (ok, verdict line, evidence)."""
    from .aws import AwsError, region_from_queue_url  # boto3 loads only when a check talks to AWS

    s = ctx.settings
    url = trigger["queue_url"]
    aws = ctx.aws(trigger.get("region") or region_from_queue_url(url))
    evidence: list[str] = []
    probe_id = str(uuid.uuid4())
    attrs = aws.queue_attributes(url, ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                                       "ApproximateNumberOfMessagesDelayed", "FifoQueue"])
    idle_before = queue_is_idle(attrs)
    fifo = attrs.get("FifoQueue") == "true" or url.endswith(".fifo")
    before = {(j.get("metadata") or {}).get("uid") for j in owned_jobs(ctx.kube.list_jobs(name_of_ns(sj)), sj)}
    window = polling_interval_s(sj) + s.probe_extra_s
    aws.send_message(url, probe_body(probe_id), {PROBE_ATTRIBUTE: probe_id},
                     group_id=f"gpuburst-verify-{probe_id}" if fifo else None, dedup_id=probe_id if fifo else None)
    evidence.append(f"probe {probe_id} sent to {url} (queue {'idle' if idle_before else 'busy: ' + str(attrs)})")
    start = ctx.clock.monotonic()
    appeared: list[dict] = []
    try:
        while True:
            appeared = new_jobs(before, ctx.kube.list_jobs(name_of_ns(sj)), sj)
            waited = ctx.clock.monotonic() - start
            if appeared or waited >= window:
                break
            ctx.clock.sleep(min(s.poll_interval_s, max(0.0, window - waited)))
        ok, verdict = judge_probe(sj, url, appeared, waited, window)
        evidence.append(verdict)
    finally:
        try:
            evidence += cleanup_probe(ctx, aws, url, probe_id, idle_before, sj, appeared)
        except AwsError as e:
            evidence.append(f"probe cleanup failed: {e}")
    return ok, verdict, evidence


def name_of_ns(sj: dict) -> str:
    return (sj.get("metadata") or {}).get("namespace") or ""


def cleanup_probe(ctx, aws, url: str, probe_id: str, idle_before: bool, sj: dict,
                  appeared: list[dict]) -> list[str]:
    """Remove the probe message and the Job it caused, without touching real work (see docs/verify.md).

    The message: received and deleted only when the queue was idle before the probe and now shows at most one
    visible message; any other message received on the way is handed back at once (visibility 0). Otherwise it is
    left for the worker, which acknowledges probes. The Job: deleted only when the queue was idle before the probe
    (so the Job is the probe's), verify deleted the probe itself, and none of its pods has started a container.
    """
    notes: list[str] = []
    probe_gone = False
    attrs = aws.queue_attributes(url, ["ApproximateNumberOfMessages"])
    if idle_before and int(attrs.get("ApproximateNumberOfMessages", "0") or 0) <= 1:
        for _ in range(3):
            msgs = aws.receive_messages(url, attribute_names=[PROBE_ATTRIBUTE], max_messages=10,
                                        visibility_timeout_s=5, wait_s=1)
            for m in msgs:
                if is_probe(m, probe_id):
                    aws.delete_message(url, m["ReceiptHandle"])
                    probe_gone = True
                else:
                    aws.release_message(url, m["ReceiptHandle"])
            if probe_gone or not msgs:
                break
        notes.append(f"probe {probe_id}: " + (
            "deleted by receipt handle" if probe_gone else
            "not in the queue any more (taken by the worker, which deletes probes)"))
    else:
        notes.append(f"probe {probe_id}: left for the worker to acknowledge (the queue holds other messages; "
                     "verify receives nothing next to real work)")
    for job in appeared:
        ns, jname = name_of_ns(job) or name_of_ns(sj), name_of(job)
        pods = ctx.kube.list_pods(ns, label_selector=f"job-name={jname}")
        if idle_before and probe_gone and not job_started(pods):
            ctx.kube.delete_job(ns, jname)
            notes.append(f"Job {ns}/{jname}: deleted (it was the probe's and had not started)")
        else:
            notes.append(f"Job {ns}/{jname}: left to finish (it may be serving real work); the ScaledJob's "
                         "history limits and TTL remove it")
    return notes
