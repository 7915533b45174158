"""worker-iam: S3 put/get/delete under the results prefix and SQS get-attributes, as the worker, on moto_server."""
from __future__ import annotations

import json

import boto3
import pytest

from components.verify import iam
from components.verify.aws import Aws
from components.verify.context import Context
from components.verify.model import VerifySettings, Workload

ROLE = "arn:aws:iam::123456789012:role/gpuburst-dev-slides-worker"


def _env(aws_url):
    iam_client = boto3.client("iam")
    iam_client.create_role(RoleName="gpuburst-dev-slides-worker", AssumeRolePolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
                                                "Action": ["sts:AssumeRole", "sts:TagSession"]}]}))
    boto3.client("s3").create_bucket(Bucket="gpuburst-dev-results")
    return boto3.client("sqs").create_queue(QueueName="gpuburst-dev-slides")["QueueUrl"]


def _ctx(**kw):
    return Context(settings=VerifySettings(**kw), aws_factory=lambda region: Aws(region))


def test_worker_role_can_write_read_and_query_its_queue(aws, monkeypatch):
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    url = _env(aws)
    r = iam.run(_ctx(workloads=[Workload("slides", url, ROLE)], results_bucket="gpuburst-dev-results",
                     results_prefix="results/"))
    assert r.status == "pass", r
    text = "\n".join(r.evidence)
    for action in ("sts:AssumeRole", "sqs:GetQueueAttributes", "s3:PutObject", "s3:GetObject", "s3:DeleteObject"):
        assert f"{action} on" in text
    assert "s3://gpuburst-dev-results/results/gpuburst-verify/" in text
    assert boto3.client("s3").list_objects_v2(Bucket="gpuburst-dev-results").get("KeyCount") == 0  # cleaned up


def test_missing_bucket_fails_naming_action_resource_and_code(aws):
    url = _env(aws)
    r = iam.run(_ctx(workloads=[Workload("slides", url, ROLE)], results_bucket="no-such-results-bucket"))
    assert r.status == "fail"
    assert r.summary.startswith("[slides] s3:PutObject on s3://no-such-results-bucket/results/gpuburst-verify/")
    assert "NoSuchBucket" in r.summary


def test_missing_queue_fails_naming_the_queue_and_code(aws):
    _env(aws)
    gone = aws + "/123456789012/gpuburst-dev-gone"
    r = iam.run(_ctx(workloads=[Workload("slides", gone, ROLE)], results_bucket="gpuburst-dev-results"))
    assert r.status == "fail"
    assert f"sqs:GetQueueAttributes on {gone}: AWS.SimpleQueueService.NonExistentQueue" in r.summary


def test_no_role_outside_a_pod_fails_instead_of_testing_the_callers_rights(aws, monkeypatch):
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE", raising=False)
    url = _env(aws)
    r = iam.run(_ctx(workloads=[Workload("slides", url, None)], results_bucket="gpuburst-dev-results"))
    assert r.status == "fail" and "no worker role given and not running in a pod" in r.summary


def test_in_a_pod_the_ambient_identity_is_the_worker(aws, monkeypatch):
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials")
    url = _env(aws)
    r = iam.run(_ctx(workloads=[Workload("slides", url, None)], results_bucket="gpuburst-dev-results"))
    assert r.status == "pass", r
    assert "ambient credentials" in r.evidence[0]


def test_no_workloads_fails():
    r = iam.judge_worker_iam({})
    assert r.status == "fail" and "--queue-url" in r.summary


def test_denied_delete_is_reported_not_failed_and_access_denied_put_fails():
    steps = {"slides": [
        iam.Step("sts:AssumeRole", ROLE, True),
        iam.Step("s3:PutObject", "s3://b/results/gpuburst-verify/x.txt", True),
        iam.Step("s3:GetObject", "s3://b/results/gpuburst-verify/x.txt", True),
        iam.Step("s3:DeleteObject", "s3://b/results/gpuburst-verify/x.txt", False, "AccessDenied", required=False),
        iam.Step("s3:DeleteObject (as the caller, cleanup)", "s3://b/results/gpuburst-verify/x.txt", True),
    ]}
    assert iam.judge_worker_iam(steps).status == "pass"
    steps["slides"][1] = iam.Step("s3:PutObject", "s3://b/results/gpuburst-verify/x.txt", False,
                                  "AccessDenied (User is not authorized to perform s3:PutObject)")
    r = iam.judge_worker_iam(steps)
    assert r.status == "fail"
    assert r.summary == ("[slides] s3:PutObject on s3://b/results/gpuburst-verify/x.txt: AccessDenied (User is not "
                         "authorized to perform s3:PutObject)")


@pytest.mark.parametrize("prefix,key", [("results/", "results/gpuburst-verify/u.txt"),
                                        ("results", "results/gpuburst-verify/u.txt"),
                                        ("", "gpuburst-verify/u.txt")])
def test_probe_key(prefix, key):
    assert iam.probe_key(prefix, "u") == key
