"""workload-identity: a probe Job per live workload, as its own ServiceAccount, judged from the JSON lines it prints;
the Job is deleted on every path. The probe script itself runs here against moto_server."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import boto3
import pytest
from verify_fakes import FakeKube, finish_job, identity_probe_log, load

from components.verify import identity_probe
from components.verify.aws import Aws
from components.verify.context import Context
from components.verify.kube import KubeError
from components.verify.model import VerifySettings

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker@sha256:" + "d" * 64
HARDENED = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "allowPrivilegeEscalation": False,
            "privileged": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


def _scaled_job() -> dict:
    sj = load("scaledjob_ready.json")
    spec = sj["spec"]["jobTargetRef"]["template"]
    spec["metadata"] = {"labels": {"app.kubernetes.io/name": "gpuburst-worker", "app.kubernetes.io/instance": "slides"}}
    spec["spec"]["securityContext"] = {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001}
    c = spec["spec"]["containers"][0]
    c["securityContext"] = dict(HARDENED)
    c["resources"] = {"limits": {"nvidia.com/gpu": "1", "memory": "30Gi"}}
    c["env"].append({"name": "AWS_REGION", "value": "us-east-1"})
    return sj


def _deployment() -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "thumbs", "namespace": "thumbs-ns",
                         "labels": {"app.kubernetes.io/name": "gpuburst-worker"}},
            "spec": {"template": {"metadata": {"labels": {"app.kubernetes.io/name": "gpuburst-worker"}},
                                  "spec": {"serviceAccountName": "gpuburst-thumbs",
                                           "containers": [{"name": "worker", "image": IMAGE, "env": [
                                               {"name": "QUEUE_URL", "value": "https://sqs.us-east-1.amazonaws.com/"
                                                                              "123456789012/gpuburst-dev-thumbs"}]}]}}}}


def _ctx(kube, clock, **kw) -> Context:
    kw.setdefault("results_bucket", "gpuburst-dev-results")
    return Context(settings=VerifySettings(namespace="gpuburst", poll_interval_s=5, **kw), kube=kube, clock=clock,
                   aws_factory=lambda region: Aws(region or "us-east-1"))


def _runs(logs: dict[str, str] | None = None, default: str | None = None, succeeded: bool = True):
    """An on_get_job hook: the probe Job of the workload whose ServiceAccount is a key of `logs` finishes with that
    log (else `default`; None = it never finishes)."""
    def hook(k, ns, name):
        job = next((j for j in k.jobs if j["metadata"]["name"] == name), None)
        if job is None:
            return
        sa = job["spec"]["template"]["spec"]["serviceAccountName"]
        log = (logs or {}).get(sa, default)
        if log is not None:
            finish_job(k, name, log, succeeded=succeeded)
    return hook


def test_the_probe_job_runs_as_each_workloads_own_service_account(clock):
    kube = FakeKube(scaled_jobs=[_scaled_job()], deployments=[_deployment()])
    kube.on_get_job = _runs(default=identity_probe_log())
    r = identity_probe.run(_ctx(kube, clock))
    assert r.status == "pass", r
    assert len(kube.created) == 2
    by_sa = {j["spec"]["template"]["spec"]["serviceAccountName"]: j for j in kube.created}
    sj_job, dep_job = by_sa["gpuburst-slides"], by_sa["gpuburst-thumbs"]
    assert sj_job["metadata"]["namespace"] == "gpuburst" and dep_job["metadata"]["namespace"] == "thumbs-ns"
    pod = sj_job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["image"] == load("scaledjob_ready.json")["spec"]["jobTargetRef"]["template"]["spec"]["containers"][0][
        "image"]
    assert dep_job["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE
    # a template without a securityContext still gets a hardened probe (verify's own)
    assert dep_job["spec"]["template"]["spec"]["containers"][0]["securityContext"] == \
        identity_probe.DEFAULT_CONTAINER_SC
    assert dep_job["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    # hardened like the worker: its own securityContexts, copied
    assert c["securityContext"] == HARDENED
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001}
    # no GPU: no GPU resource, no GPU node selector or toleration
    assert "nvidia.com/gpu" not in json.dumps(c["resources"])
    assert "nodeSelector" not in pod and "tolerations" not in pod
    # the worker's pod labels (its NetworkPolicy's egress), plus verify's own
    labels = sj_job["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/instance"] == "slides" and labels["app.kubernetes.io/managed-by"] == \
        "gpuburst-verify"
    assert sj_job["spec"]["ttlSecondsAfterFinished"] > 0 and sj_job["spec"]["backoffLimit"] == 0
    # python -c SCRIPT bucket key queue region: the results prefix and the workload's own queue
    assert c["command"][:3] == ["python", "-c", identity_probe.PROBE_SCRIPT]
    bucket, key, queue, region = c["command"][3:]
    assert bucket == "gpuburst-dev-results" and key.startswith("results/gpuburst-verify/")
    assert queue == "https://sqs.us-east-1.amazonaws.com/123456789012/gpuburst-dev-slides" and region == "us-east-1"
    assert dep_job["spec"]["template"]["spec"]["containers"][0]["command"][5] == \
        "https://sqs.us-east-1.amazonaws.com/123456789012/gpuburst-dev-thumbs"
    # both deleted
    assert sorted(kube.deleted) == sorted(f"{j['metadata']['namespace']}/{j['metadata']['name']}"
                                          for j in kube.created)
    assert kube.jobs == []
    assert r.summary == "2 workload(s) made their S3/SQS calls as their own ServiceAccount's Pod Identity"
    assert "ScaledJob gpuburst/slides (ServiceAccount gpuburst-slides): 3 required call(s) ok as " \
           "arn:aws:sts::123456789012:assumed-role/gpuburst-dev-slides-worker/eks-pod" in r.evidence


def test_access_denied_fails_naming_the_workload_service_account_call_and_code(clock):
    kube = FakeKube(scaled_jobs=[_scaled_job()], deployments=[_deployment()])
    kube.on_get_job = _runs({"gpuburst-thumbs": identity_probe_log(denied={"s3:PutObject": "AccessDenied"})},
                            default=identity_probe_log())
    r = identity_probe.run(_ctx(kube, clock))
    assert r.status == "fail"
    assert r.summary == ("Deployment thumbs-ns/thumbs (ServiceAccount gpuburst-thumbs): s3:PutObject on "
                         "s3://gpuburst-dev-results/results/k: AccessDenied")
    assert kube.jobs == [] and len(kube.deleted) == 2


def test_no_pod_identity_credentials_fail_too(clock):
    log = identity_probe_log(denied={c: "NoCredentialsError" for c in ("sts:GetCallerIdentity", "s3:PutObject",
                                                                        "s3:GetObject", "s3:DeleteObject",
                                                                        "sqs:GetQueueAttributes")})
    kube = FakeKube(scaled_jobs=[_scaled_job()])
    kube.on_get_job = _runs(default=log, succeeded=True)
    r = identity_probe.run(_ctx(kube, clock))
    assert r.status == "fail" and "NoCredentialsError (+2 more)" in r.summary
    assert "ran as an unknown identity" in "\n".join(r.evidence)


def test_a_denied_delete_is_reported_and_the_caller_removes_the_object(aws, clock):
    boto3.client("s3").create_bucket(Bucket="gpuburst-dev-results")
    kube = FakeKube(scaled_jobs=[_scaled_job()])

    def pod_writes_then_may_not_delete(k, ns, name):
        job = next(j for j in k.jobs if j["metadata"]["name"] == name)
        bucket, key = job["spec"]["template"]["spec"]["containers"][0]["command"][3:5]
        boto3.client("s3").put_object(Bucket=bucket, Key=key, Body=b"probe")
        finish_job(k, name, identity_probe_log(denied={"s3:DeleteObject": "AccessDenied"}))

    kube.on_get_job = pod_writes_then_may_not_delete
    r = identity_probe.run(_ctx(kube, clock))
    assert r.status == "pass", r
    assert r.summary.endswith("; 1 with a call not allowed (reported only): s3:DeleteObject")
    assert any("removed as the caller (cleanup)" in e for e in r.evidence)
    assert boto3.client("s3").list_objects_v2(Bucket="gpuburst-dev-results").get("KeyCount") == 0


def test_forbidden_job_creation_is_error_not_fail(clock):
    kube = FakeKube(scaled_jobs=[_scaled_job()])

    def forbidden(namespace, manifest):
        raise KubeError(f"create job in {namespace}: 403 Forbidden: jobs.batch is forbidden: User "
                        "\"ci\" cannot create resource \"jobs\"")

    kube.create_job = forbidden
    r = identity_probe.run(_ctx(kube, clock))
    assert r.status == "error"
    assert r.summary.startswith("ScaledJob gpuburst/slides (ServiceAccount gpuburst-slides): the probe could not run: "
                                "KubeError: create job in gpuburst: 403 Forbidden")
    assert kube.jobs == []


def test_a_pod_that_never_starts_is_error_and_the_job_is_deleted(clock):
    kube = FakeKube(scaled_jobs=[_scaled_job()])
    kube.on_get_job = _runs()  # never finishes
    r = identity_probe.run(_ctx(kube, clock, timeout_s=120))
    assert r.status == "error"
    assert "the probe could not run: Job gpuburst-verify-id-" in r.summary and "did not finish within 150 s" in \
        r.summary
    assert kube.jobs == [] and len(kube.deleted) == 1
    assert clock.t >= 150


def test_a_pod_stuck_on_its_image_is_error(clock):
    kube = FakeKube(scaled_jobs=[_scaled_job()])

    def stuck(k, ns, name):
        if not any(p["metadata"]["name"] == name + "-x" for p in k.pods):
            k.pods.append({"metadata": {"name": name + "-x", "namespace": ns, "labels": {"job-name": name}},
                           "status": {"phase": "Pending", "containerStatuses": [{"name": "identity-probe", "state": {
                               "waiting": {"reason": "InvalidImageName", "message": "bad ref"}}}]}})

    kube.on_get_job = stuck
    r = identity_probe.run(_ctx(kube, clock))
    assert r.status == "error" and "its pod cannot start: InvalidImageName: bad ref" in r.summary
    assert kube.jobs == []


@pytest.mark.parametrize("log,reason", [
    (json.dumps({"call": "import boto3", "resource": "", "ok": False, "code": "ModuleNotFoundError"}) + "\n",
     "has no boto3"),
    (identity_probe_log(done=False).split("\n", 3)[0] + "\n", "without reporting any required call"),
    ("Traceback (most recent call last):\nSyntaxError\n", "(log: Traceback (most recent call last): | SyntaxError)"),
])
def test_a_probe_that_reports_nothing_judgeable_is_error(clock, log, reason):
    kube = FakeKube(scaled_jobs=[_scaled_job()])
    kube.on_get_job = _runs(default=log, succeeded=False)
    r = identity_probe.run(_ctx(kube, clock))
    assert r.status == "error" and reason in r.summary, r
    assert kube.jobs == []


def test_interrupt_while_waiting_still_deletes_the_job(clock):
    kube = FakeKube(scaled_jobs=[_scaled_job()])

    def interrupt(k, ns, name):
        raise KeyboardInterrupt

    kube.on_get_job = interrupt
    with pytest.raises(KeyboardInterrupt):
        identity_probe.run(_ctx(kube, clock))
    assert kube.jobs == [] and len(kube.deleted) == 1


def test_a_job_that_cannot_be_deleted_turns_a_pass_into_error(clock):
    kube = FakeKube(scaled_jobs=[_scaled_job()])
    kube.on_get_job = _runs(default=identity_probe_log())

    def refuse(namespace, name):
        raise KubeError(f"delete job {namespace}/{name}: 403 Forbidden")

    kube.delete_job = refuse
    r = identity_probe.run(_ctx(kube, clock))
    assert r.status == "error" and r.summary.endswith("(and the probe Job could not be deleted)")
    assert any("NOT deleted" in e and "kubectl -n gpuburst delete job gpuburst-verify-id-" in e for e in r.evidence)


def test_no_workload_and_no_bucket():
    assert identity_probe.judge([], 0).status == "fail"
    kube = FakeKube(scaled_jobs=[_scaled_job()])
    r = identity_probe.run(Context(settings=VerifySettings(), kube=kube))
    assert r.status == "error" and "no results bucket" in r.summary and kube.created == []


def test_the_probe_script_itself_against_moto(aws):
    """The exact script the Job runs, run here with the venv's boto3 against moto_server: every call ok, one JSON
    line each, the object removed; then against a queue that does not exist: that call reports its code."""
    boto3.client("s3").create_bucket(Bucket="gpuburst-dev-results")
    url = boto3.client("sqs").create_queue(QueueName="gpuburst-dev-slides")["QueueUrl"]

    def run_script(queue: str) -> str:
        return subprocess.run([sys.executable, "-c", identity_probe.PROBE_SCRIPT, "gpuburst-dev-results",
                               "results/gpuburst-verify/t.identity.txt", queue, "us-east-1"], env=dict(os.environ),
                              capture_output=True, text=True, timeout=60, check=True).stdout

    calls, identity, done = identity_probe.parse_probe_log(run_script(url))
    assert done and identity and identity.startswith("arn:aws:")
    assert [(c["call"], c["ok"]) for c in calls] == [("sts:GetCallerIdentity", True), ("s3:PutObject", True),
                                                     ("s3:GetObject", True), ("s3:DeleteObject", True),
                                                     ("sqs:GetQueueAttributes", True)]
    assert boto3.client("s3").list_objects_v2(Bucket="gpuburst-dev-results").get("KeyCount") == 0
    calls, _, _ = identity_probe.parse_probe_log(run_script(url + "-gone"))
    assert calls[-1]["call"] == "sqs:GetQueueAttributes" and not calls[-1]["ok"]
    assert "NonExistentQueue" in calls[-1]["code"]


def test_live_targets_read_the_service_account_default():
    sj = _scaled_job()
    del sj["spec"]["jobTargetRef"]["template"]["spec"]["serviceAccountName"]
    (t,) = identity_probe.live_targets([sj], [])
    assert t.service_account == "default" and t.kind == "ScaledJob"
    broken = copy.deepcopy(sj)
    broken["spec"]["jobTargetRef"]["template"]["spec"]["containers"] = []
    assert identity_probe.live_targets([broken], []) == []
