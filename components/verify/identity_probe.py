"""The `workload-identity` check: a short Job per workload runs **as that workload's own ServiceAccount**, in its
namespace, with its image, and makes the worker's AWS calls under the credentials EKS Pod Identity gives it.

`worker-iam` proves the worker role's *policy* (verify assumes the role itself); this check proves the *wiring*: the
ServiceAccount the live ScaledJob/Deployment names has a Pod Identity association, the association names a role,
and that role may write under the results prefix and read the queue. The Job runs `python -c` with a short boto3
script (the worker image has boto3; `python -m worker` has no command for this) that prints one JSON line per call:
`{"call": "s3:PutObject", "resource": "s3://b/k", "ok": true}` or `..."ok": false, "code": "AccessDenied"}`.

Every call ok passes; a failed call fails naming the workload, the ServiceAccount, the call and its code
(`AccessDenied`, `NoCredentialsError` when the ServiceAccount has no association: the wiring is the defect). The
check reports `error` when the probe could not run: the Job could not be created (RBAC 403), its pod never started
before the deadline, or the script printed nothing judgeable. The Job carries `ttlSecondsAfterFinished` and is
deleted on every path.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..spec.names import WORKER_LABEL, WORKER_UID
from ..spec.verify_admission import IDENTITY_PROBE_SCRIPT as PROBE_SCRIPT  # one source: the admission rule's
from .context import Context, one_line
from .gpujob import job_finished, pod_problem
from .iam import probe_key
from .model import ERROR, FAIL, PASS, CheckResult, CouldNotRun, headline, name_of

NAME = "workload-identity"
MANAGED_BY = "gpuburst-verify"
WORKER_SELECTOR = f"app.kubernetes.io/name={WORKER_LABEL}"
"""Label selector of the consumer Deployments (components/consumer.py labels them so)."""
START_TIMEOUT_S = 300.0
"""Longest wait for the probe Job to finish (image pull on a CPU node included), unless --timeout-s is shorter."""
REQUIRED_CALLS = ("s3:PutObject", "s3:GetObject", "sqs:GetQueueAttributes")
"""Calls that must succeed; `s3:DeleteObject` (the worker may lack it) and `sts:GetCallerIdentity` are reported."""
PROBE_RESOURCES: dict[str, dict[str, str]] = {"requests": {"cpu": "50m", "memory": "128Mi"},
                                              "limits": {"cpu": "500m", "memory": "256Mi"}}
"""The probe's own small resources: the worker's requests (GPU, tens of GiB) would need a GPU node for four calls."""

DEFAULT_POD_SC: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": WORKER_UID, "runAsGroup": WORKER_UID,
                  "seccompProfile": {"type": "RuntimeDefault"}}
DEFAULT_CONTAINER_SC: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": WORKER_UID, "runAsGroup": WORKER_UID,
                        "allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
"""The probe's securityContexts when the workload's pod template sets none (the gpu-job's)."""


@dataclass
class Target:
    """One live workload whose identity the probe tests."""

    kind: str
    """`ScaledJob` or `Deployment`."""
    namespace: str
    name: str
    service_account: str
    """The pod template's serviceAccountName (`default` when unset)."""
    image: str
    container: dict[str, Any] = field(default_factory=dict)
    """The worker container of the pod template."""
    pod_spec: dict[str, Any] = field(default_factory=dict)
    """The pod template's spec."""
    pod_labels: dict[str, Any] = field(default_factory=dict)
    """The pod template's labels (the worker NetworkPolicy selects them: the probe needs the same egress)."""

    @property
    def who(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name} (ServiceAccount {self.service_account})"

    def env(self, name: str) -> str | None:
        for e in self.container.get("env") or []:
            if e.get("name") == name and "value" in e:
                return str(e["value"])
        return None


def _target(kind: str, obj: dict, template: dict) -> Target | None:
    spec = (template or {}).get("spec") or {}
    containers = spec.get("containers") or []
    if not containers:
        return None
    container = next((c for c in containers if c.get("name") == "worker"), containers[0])
    md = obj.get("metadata") or {}
    return Target(kind, md.get("namespace") or "", md.get("name") or "", spec.get("serviceAccountName") or "default",
                  container.get("image") or "", container, spec, dict((template.get("metadata") or {}).get("labels")
                                                                      or {}))


def live_targets(scaled_jobs: list[dict[str, Any]], deployments: list[dict[str, Any]]) -> list[Target]:
    """The workloads as the cluster runs them: each ScaledJob's jobTargetRef template, each worker Deployment's."""
    out = []
    for sj in scaled_jobs:
        t = _target("ScaledJob", sj, ((sj.get("spec") or {}).get("jobTargetRef") or {}).get("template") or {})
        if t:
            out.append(t)
    for d in deployments:
        t = _target("Deployment", d, (d.get("spec") or {}).get("template") or {})
        if t:
            out.append(t)
    return out


def job_name() -> str:
    """A fresh Job name: `gpuburst-verify-id-<8 hex>`."""
    return f"gpuburst-verify-id-{uuid.uuid4().hex[:8]}"


def build_probe_job(name: str, t: Target, *, bucket: str, key: str, queue_url: str, region: str,
                    deadline_s: int, ttl_s: int = 300) -> dict[str, Any]:
    """The probe Job: the workload's ServiceAccount, namespace, image, pod labels and securityContexts; no GPU, no
    GPU node selector or toleration; small resources; no retries; ttlSecondsAfterFinished."""
    labels = dict(t.pod_labels)
    labels.update({"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/component": NAME})
    labels.setdefault("app.kubernetes.io/name", WORKER_LABEL)
    job_labels = {"app.kubernetes.io/name": "gpuburst-verify", "app.kubernetes.io/managed-by": MANAGED_BY,
                  "app.kubernetes.io/component": NAME}
    env = [e for e in t.container.get("env") or [] if e.get("name") not in ("HOME", "TMPDIR")]
    env += [{"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"}]
    # The worker's own hardening, copied; verify's (the gpu-job's) where the template sets none.
    container_sc = dict(t.container.get("securityContext") or DEFAULT_CONTAINER_SC)
    pod_sc = dict(t.pod_spec.get("securityContext") or DEFAULT_POD_SC)
    resources = {k: dict(v) for k, v in PROBE_RESOURCES.items()}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": t.namespace, "labels": job_labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(deadline_s),
            "ttlSecondsAfterFinished": int(ttl_s),
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": t.service_account,
                    "restartPolicy": "Never",
                    # As the worker: EKS Pod Identity's webhook adds its own projected token, not the API token.
                    "automountServiceAccountToken": t.pod_spec.get("automountServiceAccountToken", False),
                    "enableServiceLinks": False,
                    "securityContext": pod_sc,
                    "containers": [{
                        "name": "identity-probe",
                        "image": t.image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["python", "-c", PROBE_SCRIPT, bucket, key, queue_url, region],
                        "env": env,
                        "resources": resources,
                        "securityContext": container_sc,
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                    }],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                },
            },
        },
    }


def parse_probe_log(text: str) -> tuple[list[dict[str, Any]], str | None, bool]:
    """(the call lines, the identity ARN it ran as, whether the script reached its end) from the probe's log."""
    calls: list[dict] = []
    identity: str | None = None
    done = False
    for line in (text or "").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if "call" in obj:
            calls.append(obj)
        elif "identity" in obj:
            identity = str(obj["identity"])
        elif obj.get("done"):
            done = True
    return calls, identity, done


@dataclass
class Outcome:
    """One workload's probe: `pass`, `fail` or `error`, the one-line reason, and its evidence."""

    status: str
    line: str
    evidence: list[str] = field(default_factory=list)


def judge_probe(t: Target, job_name_: str, calls: list[dict[str, Any]], identity: str | None, done: bool,
                finished: str | None, log: str) -> Outcome:
    """Pass when every required call succeeded; fail naming the first failed call and its code; error when the
    script printed no judgeable lines (it could not run)."""
    evidence = [f"{t.who}: probe Job {t.namespace}/{job_name_} ran as {identity or 'an unknown identity'}"]
    for c in calls:
        evidence.append(f"{t.who}: {c.get('call')} {c.get('resource', '')}".rstrip() + ": "
                        + ("ok" if c.get("ok") else f"{c.get('code')} {c.get('message', '')}".rstrip()))
    failed = [c for c in calls if not c.get("ok") and c.get("call") in REQUIRED_CALLS + ("import boto3",)]
    if failed and failed[0].get("call") == "import boto3":
        return Outcome(ERROR, f"{t.who}: the probe could not run: its image has no boto3",
                       evidence + [f"{t.who}: image {t.image} has no boto3 (import boto3: "
                                   f"{failed[0].get('code')})"])
    if failed:
        c = failed[0]
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return Outcome(FAIL, f"{t.who}: {c.get('call')} on {c.get('resource')}: {c.get('code')}{more}", evidence)
    seen = {c.get("call") for c in calls}
    missing = [c for c in REQUIRED_CALLS if c not in seen]
    if missing or not done:
        tail = " | ".join((log or "").strip().splitlines()[-3:])[:300]
        what = ("any required call" if len(missing) == len(REQUIRED_CALLS) else ", ".join(missing)) or "its end"
        # The summary keeps the start of the log's tail; the Job's name and the whole tail are in the evidence.
        evidence.append(f"{t.who}: probe Job {t.namespace}/{job_name_} {(finished or 'unfinished').lower()} without "
                        f"reporting {what}" + (f"; log: {tail}" if tail else "; no log"))
        return Outcome(ERROR, f"{t.who}: the probe could not run: it {(finished or 'unfinished').lower()} without "
                              f"reporting {what}" + (f" (log: {tail[:60]})" if tail else " (no log)"), evidence)
    not_ok = [c for c in calls if not c.get("ok")]
    note = f"; not allowed (reported only): {', '.join(str(c.get('call')) for c in not_ok)}" if not_ok else ""
    return Outcome(PASS, f"{t.who}: {len(REQUIRED_CALLS)} required call(s) ok as {identity or '?'}{note}", evidence)


def probe(ctx: Context, t: Target) -> Outcome:
    """Create the probe Job for one workload, wait, judge, remove the test object and the Job on every path."""
    s = ctx.settings
    queue_url = t.env("QUEUE_URL") or ""
    region = t.env("AWS_REGION") or s.region or ""
    bucket = t.env("RESULTS_BUCKET") or s.results_bucket or ""
    prefix = t.env("RESULTS_PREFIX") or s.results_prefix
    if not t.image:
        return Outcome(ERROR, f"{t.who}: the probe could not run: the pod template names no image")
    if not bucket:
        return Outcome(ERROR, f"{t.who}: the probe could not run: no results bucket (give --results-bucket or "
                              "--stack)")
    key = probe_key(prefix, f"{uuid.uuid4().hex}.identity")
    name = job_name()
    deadline = int(min(s.timeout_s, START_TIMEOUT_S))
    manifest = build_probe_job(name, t, bucket=bucket, key=key, queue_url=queue_url, region=region,
                               deadline_s=deadline)
    try:
        ctx.kube.create_job(t.namespace, manifest)
    except CouldNotRun as e:
        return Outcome(ERROR, f"{t.who}: the probe could not run: {one_line(e)}", [one_line(e)])
    outcome: Outcome | None = None
    try:
        start = ctx.clock.monotonic()
        job: dict | None = None
        pods: list[dict] = []
        while True:
            job = ctx.kube.get_job(t.namespace, name)
            pods = ctx.kube.list_pods(t.namespace, label_selector=f"job-name={name}")
            if job is None or job_finished(job):
                break
            stuck = next((pod_problem(p) for p in pods if pod_problem(p)), None)
            if stuck:
                outcome = Outcome(ERROR, f"{t.who}: the probe could not run: its pod cannot start: {stuck}")
                break
            if ctx.clock.monotonic() - start >= deadline + 30:
                phase = ", ".join(f"{name_of(p)} {(p.get('status') or {}).get('phase', 'Unknown')}" for p in pods)
                outcome = Outcome(ERROR, f"{t.who}: the probe could not run: Job {name} did not finish within "
                                         f"{deadline + 30} s ({phase or 'no pod'})")
                break
            ctx.clock.sleep(s.poll_interval_s)
        if outcome is None:
            log = ""
            for p in pods:
                log = ctx.kube.read_pod_log(t.namespace, name_of(p), tail_lines=50) or log
            calls, identity, done = parse_probe_log(log)
            outcome = judge_probe(t, name, calls, identity, done, job_finished(job) if job else "gone", log)
            if not any(c.get("call") == "s3:DeleteObject" and c.get("ok") for c in calls) and \
                    any(c.get("call") == "s3:PutObject" and c.get("ok") for c in calls):
                try:  # the worker may not delete results: verify's own identity removes the test object
                    from .aws import region_from_queue_url

                    ctx.aws(s.region or region_from_queue_url(queue_url)).delete_object(bucket, key)
                    outcome.evidence.append(f"s3://{bucket}/{key} removed as the caller (cleanup)")
                except Exception as e:  # noqa: BLE001 - reported, never hides the verdict
                    outcome.evidence.append(f"s3://{bucket}/{key} NOT removed ({one_line(e)}): remove it by hand")
    except CouldNotRun as e:  # verify's own read refused mid-probe: no verdict for this workload
        outcome = Outcome(ERROR, f"{t.who}: the probe could not run: {one_line(e)}", [one_line(e)])
    finally:
        try:
            deleted = ctx.kube.delete_job(t.namespace, name)
            cleanup = f"Job {t.namespace}/{name} " + ("deleted (propagationPolicy Background)" if deleted
                                                      else "already gone")
        except Exception as e:  # noqa: BLE001 - the cleanup failure is reported, never hides the verdict
            cleanup = (f"Job {t.namespace}/{name} NOT deleted ({one_line(e)}): kubectl -n {t.namespace} delete "
                       f"job {name}")
        if outcome is not None:
            outcome.evidence.append(cleanup)
            if " NOT deleted " in cleanup and outcome.status == PASS:
                outcome.status, outcome.line = ERROR, outcome.line + " (and the probe Job could not be deleted)"
    return outcome


def judge(outcomes: list[Outcome], n_targets: int) -> CheckResult:
    """fail when any workload's identity failed a call; else error when any probe could not run; else pass."""
    if not n_targets:
        return CheckResult(NAME, FAIL, "no workload to probe: no ScaledJob in the namespace and no Deployment "
                                       f"labelled {WORKER_SELECTOR}", [])
    evidence = [e for o in outcomes for e in o.evidence]
    for status in (FAIL, ERROR):
        bad = [o.line for o in outcomes if o.status == status]
        if bad:
            others = [o.line for o in outcomes if o.status != status and o.status != PASS]
            return CheckResult(NAME, status, headline(bad, "failing workloads" if status == FAIL else
                                                      "workloads not probed"), bad + others + evidence)
    reported = [o for o in outcomes if "not allowed (reported only)" in o.line]
    return CheckResult(NAME, PASS, f"{len(outcomes)} workload(s) made their S3/SQS calls as their own "
                                   "ServiceAccount's Pod Identity" +
                       (f"; {len(reported)} with a call not allowed (reported only): "
                        f"{reported[0].line.split('(reported only): ', 1)[1]}" if reported else ""),
                       [o.line for o in outcomes] + evidence)


def run(ctx: Context) -> CheckResult:
    """Probe each live ScaledJob of the namespace and each worker Deployment (once per ServiceAccount and queue)."""
    s = ctx.settings
    targets = live_targets(ctx.kube.list_scaled_jobs(s.namespace), ctx.kube.list_deployments(WORKER_SELECTOR))
    outcomes: list[Outcome] = []
    seen: set[tuple[str, str, str]] = set()
    for t in targets:
        k = (t.namespace, t.service_account, t.env("QUEUE_URL") or "")
        if k in seen:
            continue
        seen.add(k)
        outcomes.append(probe(ctx, t))
    result = judge(outcomes, len(targets))
    result.evidence.insert(0, "workloads: " + (", ".join(f"{t.kind} {t.namespace}/{t.name}" for t in targets)
                                               or "none"))
    return result
