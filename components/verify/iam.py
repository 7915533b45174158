"""The `worker-iam` check: as the worker's own IAM role, write, read back and remove one object under the results
prefix, and read its queue's attributes; a failure names the action, the resource and AWS's error code.

The worker role trusts only EKS Pod Identity (pods.eks.amazonaws.com) unless the stack adds a trust statement for
the CI role that runs verify; inside a pod running as the worker's service account, the ambient credentials are the
worker's, and no role is assumed.
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any

from ..spec.verify_admission import PROBE_FOLDER, PROBE_OBJECT_SUFFIX
from .context import Context
from .model import FAIL, PASS, CheckResult, Workload

NAME = "worker-iam"


@dataclass(frozen=True)
class Step:
    """One AWS call made as the worker, and how it went."""

    action: str
    """IAM action, e.g. `s3:PutObject`."""
    resource: str
    """What it acted on (s3://bucket/key, the queue URL, the role ARN)."""
    ok: bool
    """True when the call succeeded (and, for a read, returned what was written)."""
    detail: str = ""
    """The AWS error code and message, or a note."""
    required: bool = True
    """False for a step whose failure is only reported (the cleanup delete, which the worker role may lack)."""


def in_pod_identity() -> bool:
    """True when ambient credentials come from EKS Pod Identity or IRSA (verify runs in a pod)."""
    return bool(os.environ.get("AWS_CONTAINER_CREDENTIALS_FULL_URI") or os.environ.get("AWS_WEB_IDENTITY_TOKEN_FILE"))


def probe_key(prefix: str, probe_id: str) -> str:
    """`results/gpuburst-verify/<uuid>.txt` for prefix `results/`."""
    prefix = prefix or ""
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    # The folder and suffix are the admission rule's and the verify role's S3 scope (`.../gpuburst-verify/*.txt`).
    return f"{prefix}{PROBE_FOLDER}{probe_id}{PROBE_OBJECT_SUFFIX}"


def judge_worker_iam(steps_by_workload: dict[str, list[Step]]) -> CheckResult:
    """Fail naming every required step that failed (action on resource: code); pass when all succeeded."""
    evidence: list[str] = []
    failures: list[str] = []
    for workload, steps in steps_by_workload.items():
        for st in steps:
            mark = "ok" if st.ok else ("FAILED" if st.required else "not allowed")
            evidence.append(f"[{workload}] {st.action} on {st.resource}: {mark}" + (f" — {st.detail}"
                                                                                    if st.detail else ""))
            if st.required and not st.ok:
                failures.append(f"[{workload}] {st.action} on {st.resource}: {st.detail or 'failed'}")
    if not steps_by_workload:
        return CheckResult(NAME, FAIL, "no workload to test: give --queue-url (and --worker-role-arn) or --stack",
                           evidence)
    if failures:
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        return CheckResult(NAME, FAIL, failures[0] + more, failures + evidence)
    n = sum(len(v) for v in steps_by_workload.values())
    return CheckResult(NAME, PASS, f"worker role(s) of {len(steps_by_workload)} workload(s) passed "
                                   f"{n} S3/SQS call(s) (the role's policy, as verify assumed it; workload-identity "
                                   "proves the Pod Identity wiring)", evidence)


def exercise(workload: Workload, bucket: str | None, prefix: str, base: Any, *, in_pod: bool) -> list[Step]:
    """Make the calls as the workload's worker and record each; `base` is an Aws of the caller's identity."""
    from .aws import AwsError

    steps: list[Step] = []
    if workload.worker_role_arn:
        try:
            worker = base.assume_role(workload.worker_role_arn)
            steps.append(Step("sts:AssumeRole", workload.worker_role_arn, True))
        except AwsError as e:
            hint = (" (the worker role trusts pods.eks.amazonaws.com; let the CI role assume it or run verify in a "
                    "pod as the worker's service account)") if e.code == "AccessDenied" else ""
            return [Step("sts:AssumeRole", workload.worker_role_arn, False, f"{e.code} ({e.message}){hint}")]
    elif in_pod:
        worker = base
        steps.append(Step("ambient credentials", "pod identity", True, "no --worker-role-arn: testing the pod's "
                                                                       "own identity"))
    else:
        return [Step("sts:AssumeRole", "(no --worker-role-arn)", False,
                     "no worker role given and not running in a pod: the caller's own rights would prove nothing "
                     "about the worker's")]

    def attempt(action: str, resource: str, fn, *, required: bool = True) -> bool:
        try:
            fn()
        except AwsError as e:
            steps.append(Step(action, resource, False, f"{e.code}" + (f" ({e.message})" if e.message else ""),
                              required))
            return False
        steps.append(Step(action, resource, True, required=required))
        return True

    attempt("sqs:GetQueueAttributes", workload.queue_url,
            lambda: worker.queue_attributes(workload.queue_url, ["QueueArn", "ApproximateNumberOfMessages"]))
    if not bucket:
        steps.append(Step("s3:PutObject", "(no results bucket)", False, "give --results-bucket or --stack"))
        return steps
    key = probe_key(prefix, uuid.uuid4().hex)
    uri = f"s3://{bucket}/{key}"
    body = f"gpuburst verify worker-iam probe {key}\n".encode()
    if not attempt("s3:PutObject", uri, lambda: worker.put_object(bucket, key, body)):
        return steps
    got: list[bytes] = []
    if attempt("s3:GetObject", uri, lambda: got.append(worker.get_object(bucket, key))) and got[0] != body:
        steps[-1] = Step("s3:GetObject", uri, False, "read back different bytes than were written")
    # The worker's least-privilege policy may well deny delete (results are never removed by workers): then the
    # caller removes the object, and the denial is reported, not failed.
    if not attempt("s3:DeleteObject", uri, lambda: worker.delete_object(bucket, key), required=False):
        if worker is not base:
            attempt("s3:DeleteObject (as the caller, cleanup)", uri, lambda: base.delete_object(bucket, key))
        else:
            steps.append(Step("cleanup", uri, False, "the test object is left behind (no other identity to remove "
                                                     "it with); remove it by hand", required=False))
    return steps


def run(ctx: Context) -> CheckResult:
    """Exercise each workload's worker role (once per distinct role and queue)."""
    s = ctx.settings
    steps: dict[str, list[Step]] = {}
    seen: set[tuple[str | None, str]] = set()
    for w in s.workloads:
        if (w.worker_role_arn, w.queue_url) in seen:
            continue
        seen.add((w.worker_role_arn, w.queue_url))
        from .aws import region_from_queue_url

        steps[w.name] = exercise(w, s.results_bucket, s.results_prefix,
                                 ctx.aws(s.region or region_from_queue_url(w.queue_url)), in_pod=in_pod_identity())
    return judge_worker_iam(steps)
