"""The opt-in `burst` check: send N real probe slides, time every stage of the burst, and judge the measured
timeline against the planner's prediction and the stack's `gpuburst:burstBudget`.

It costs GPU time and sends real work, so it runs only when named (`--check burst`). The decisions are pure functions
over API objects (burst_timeline, burst_budget); `run` here is the thin live flow around them."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .burst_budget import budget_for, default_workload, judge, predicted
from .burst_probes import (
    BURST_ATTRIBUTE,
    PROBE_MPP_UM,
    PROBE_SIDE_PX,
    Probe,
    ProbeResult,
    is_burst_probe,
    make_probes,
    probe_tiff,
)
from .burst_timeline import measured_timeline
from .context import Context, blocked_result
from .model import ERROR, FAIL, PASS, CheckResult, VerifySettings

if TYPE_CHECKING:
    from ..config import StackConfig

NAME = "burst"


@dataclass
class _Run:
    """What the live flow has created so far (for the cleanup)."""

    run_id: str
    probes: list[Probe] = field(default_factory=list)
    uploaded: list[Probe] = field(default_factory=list)
    sent: int = 0


def _load_config(s: VerifySettings) -> StackConfig:
    from ..config import parse_config
    from ..config.files import read_stack_config

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


def run(ctx: Context) -> CheckResult:
    """Send the probe burst, wait (bounded) for every result, collect the stage timestamps, judge, clean up."""
    from .aws import region_from_queue_url
    from .context import one_line
    from .keda_probe import owned_jobs, queue_is_idle, sqs_triggers

    s = ctx.settings
    if ctx.gpu_nodes_blocked():
        return blocked_result(NAME, ctx.gpu_nodes_blocked(), "the burst would send real work that no GPU node of "
                                                             "the pool can run")
    if not (s.stack or s.stack_file):
        return _fail("no stack config for the prediction and the budget: pass --stack NAME (Pulumi.NAME.yaml in "
                     "--pulumi-dir) or --stack-file PATH")
    try:
        config = _load_config(s)
        name = s.burst_workload or default_workload(config)
        prediction = predicted(config, name, s.burst_probes, ctx.clock.now())
    except Exception as e:  # noqa: BLE001 - StackFileError, ConfigError, a bad file: one line, before any cost
        return _fail(f"cannot plan the burst: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    budget = budget_for(config.burst_budget, prediction, first_override=s.burst_first_result_s,
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
    except Exception as e:  # noqa: BLE001 - an API call failed mid-run: `error` (no verdict), after the cleanup below
        error = one_line(e)
    finally:
        cleanup = _cleanup(aws, url, state)
    evidence += cleanup
    if error is not None:
        return CheckResult(NAME, ERROR, f"the burst could not be measured: {error}", evidence)
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
