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
    assert r.summary.endswith("passed 5 S3/SQS call(s) (the role's policy, as verify assumed it; workload-identity "
                              "proves the Pod Identity wiring)")
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


# --- scaler-iam: the TriggerAuthentication's roleArn, its policies and trust, read from moto IAM ------------------

SCALER = "arn:aws:iam::123456789012:role/keda-scalers/gpuburst-dev-slides-scaler"
OPERATOR = "arn:aws:iam::123456789012:role/gpuburst-dev-keda-operator"
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:gpuburst-dev-slides"


def _doc(*statements):
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def _iam_world(*, scaler_allows=("sqs:GetQueueAttributes",), queue_arn=QUEUE_ARN, trusted=OPERATOR,
               operator_may_assume=True, extra=()):
    iam_client = boto3.client("iam")
    iam_client.create_role(RoleName="gpuburst-dev-keda-operator", AssumeRolePolicyDocument=_doc(
        {"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
         "Action": ["sts:AssumeRole", "sts:TagSession"]}))
    if operator_may_assume:  # components/keda.py operator_assume_policy: the scaler role path, wildcarded
        iam_client.put_role_policy(RoleName="gpuburst-dev-keda-operator", PolicyName="assume-scalers",
                                   PolicyDocument=_doc({"Effect": "Allow", "Action": "sts:AssumeRole",
                                                        "Resource": "arn:aws:iam::123456789012:role/keda-scalers/*"}))
    iam_client.create_role(RoleName="gpuburst-dev-slides-scaler", Path="/keda-scalers/",
                           AssumeRolePolicyDocument=_doc({"Effect": "Allow", "Principal": {"AWS": trusted},
                                                          "Action": "sts:AssumeRole"}))
    if scaler_allows:
        iam_client.put_role_policy(RoleName="gpuburst-dev-slides-scaler", PolicyName="queue-metrics",
                                   PolicyDocument=_doc({"Sid": "QueueMetrics", "Effect": "Allow",
                                                        "Action": list(scaler_allows), "Resource": queue_arn},
                                                       *extra))


def _keda_cluster():
    from verify_fakes import FakeKube, load

    ta = load("triggerauthentication_aws.json")
    ta["spec"]["podIdentity"]["roleArn"] = SCALER
    return FakeKube(tas=[ta], scaled_jobs=[load("scaledjob_ready.json")], deployments=[load(
        "deployment_keda_2.20.2.json")])


def _scaler_ctx(kube, **kw):
    kw.setdefault("keda_operator_role_arn", OPERATOR)
    return Context(settings=VerifySettings(namespace="gpuburst", **kw), kube=kube,
                   aws_factory=lambda region: Aws(region or "us-east-1"))


def test_scaler_role_that_may_read_the_queue_and_trusts_the_operator_passes(aws):
    from components.verify import scaler_iam

    _iam_world()
    r = scaler_iam.run(_scaler_ctx(_keda_cluster()))
    assert r.status == "pass", r
    assert r.summary == ("1 scaler role(s) may sqs:GetQueueAttributes on their queues and trust the KEDA operator's "
                         "role")
    text = "\n".join(r.evidence)
    assert f"sqs:GetQueueAttributes on {QUEUE_ARN}: allowed by inline policy queue-metrics statement QueueMetrics" \
           in text
    assert f"trust for the operator role {OPERATOR}: yes" in text


@pytest.mark.parametrize("world,expected,evidence", [
    (dict(scaler_allows=("sqs:ReceiveMessage",)),
     "scaler role gpuburst-dev-slides-scaler may not sqs:GetQueueAttributes on queue gpuburst-dev-slides (implicit); "
     "its policies grant it on no resource",
     f"TriggerAuthentication gpuburst/keda-aws roleArn {SCALER} may not sqs:GetQueueAttributes on {QUEUE_ARN} "
     "(implicit; used by ScaledJob gpuburst/slides)"),
    (dict(scaler_allows=()),
     "scaler role gpuburst-dev-slides-scaler may not sqs:GetQueueAttributes on queue gpuburst-dev-slides (implicit)",
     f"role {SCALER}: its policies grant sqs:GetQueueAttributes on no resource at all"),
    # the drift: a stale queue ARN; the summary quotes what the policy does grant
    (dict(queue_arn="arn:aws:sqs:us-east-1:123456789012:gpuburst-dev-other"),
     "scaler role gpuburst-dev-slides-scaler may not sqs:GetQueueAttributes on queue gpuburst-dev-slides (implicit); "
     "its policies grant it on arn:aws:sqs:us-east-1:123456789012:gpuburst-dev-other",
     f"role {SCALER}: its policies grant sqs:GetQueueAttributes on arn:aws:sqs:us-east-1:123456789012:"
     "gpuburst-dev-other"),
    (dict(scaler_allows=("sqs:*",), extra=({"Effect": "Deny", "Action": "sqs:Get*", "Resource": "*"},)),
     "scaler role gpuburst-dev-slides-scaler may not sqs:GetQueueAttributes on queue gpuburst-dev-slides (denied); "
     f"its policies grant it on {QUEUE_ARN}",
     f"TriggerAuthentication gpuburst/keda-aws roleArn {SCALER} may not sqs:GetQueueAttributes on {QUEUE_ARN} "
     "(denied;"),
    (dict(trusted="arn:aws:iam::123456789012:role/someone-else"),
     "scaler role gpuburst-dev-slides-scaler does not trust the KEDA operator's role gpuburst-dev-keda-operator: no "
     "statement allows it",
     f"TriggerAuthentication gpuburst/keda-aws roleArn {SCALER} does not trust the KEDA operator's role {OPERATOR}: "
     "no statement allows it"),
    (dict(operator_may_assume=False),
     "the KEDA operator's role gpuburst-dev-keda-operator may not sts:AssumeRole scaler role "
     "gpuburst-dev-slides-scaler (implicit)",
     f"TriggerAuthentication gpuburst/keda-aws roleArn {SCALER}: the KEDA operator's role {OPERATOR} may not "
     "sts:AssumeRole it (implicit)"),
])
def test_scaler_role_defects_fail_naming_the_role_and_what_its_policy_grants(aws, world, expected, evidence):
    from components.verify import scaler_iam

    _iam_world(**world)
    r = scaler_iam.run(_scaler_ctx(_keda_cluster()))
    assert r.status == "fail", r
    assert r.summary.startswith(expected), r.summary
    assert len(r.summary) <= 200
    assert any(e.startswith(evidence) for e in r.evidence), r.evidence


def test_a_managed_policy_and_the_permissions_boundary_count(aws):
    from components.verify import scaler_iam

    _iam_world(scaler_allows=())
    iam_client = boto3.client("iam")
    arn = iam_client.create_policy(PolicyName="queue-metrics", PolicyDocument=_doc(
        {"Effect": "Allow", "Action": "sqs:GetQueueAttributes", "Resource": "arn:aws:sqs:*:123456789012:gpuburst-*"}
    ))["Policy"]["Arn"]
    iam_client.attach_role_policy(RoleName="gpuburst-dev-slides-scaler", PolicyArn=arn)
    assert scaler_iam.run(_scaler_ctx(_keda_cluster())).status == "pass"
    boundary = iam_client.create_policy(PolicyName="boundary", PolicyDocument=_doc(
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}))["Policy"]["Arn"]
    iam_client.put_role_permissions_boundary(RoleName="gpuburst-dev-slides-scaler", PermissionsBoundary=boundary)
    r = scaler_iam.run(_scaler_ctx(_keda_cluster()))
    assert r.status == "fail" and f"(implicit by its permissions boundary {boundary})" in r.summary


def test_a_scaler_role_that_cannot_be_read_is_error(aws):
    from components.verify import scaler_iam

    r = scaler_iam.run(_scaler_ctx(_keda_cluster()))  # no roles at all in IAM
    assert r.status == "error"
    assert r.summary.startswith("scaler role gpuburst-dev-slides-scaler could not be read: AwsError: "
                                "iam:ListRolePolicies on gpuburst-dev-slides-scaler: NoSuchEntity")
    assert any(e.startswith(f"TriggerAuthentication gpuburst/keda-aws roleArn {SCALER}: could not be read: ")
               for e in r.evidence)


def test_without_the_operator_role_the_trust_is_not_judged_and_said_so(aws):
    from components.verify import scaler_iam

    _iam_world(trusted="arn:aws:iam::123456789012:role/someone-else")
    r = scaler_iam.run(_scaler_ctx(_keda_cluster(), keda_operator_role_arn=None))
    assert r.status == "pass"
    assert r.summary.endswith("; trust not judged: no cluster name (--cluster-name or --stack) to read the "
                              "operator's Pod Identity association")


def test_the_operator_role_from_its_pod_identity_association(aws):
    """moto has no Pod Identity associations: the EKS calls are stubbed (botocore Stubber), the IAM reads are moto."""
    from botocore.stub import Stubber

    from components.verify import scaler_iam

    _iam_world(trusted="arn:aws:iam::123456789012:role/someone-else")
    ctx = _scaler_ctx(_keda_cluster(), keda_operator_role_arn=None, cluster_name="gpuburst-dev")
    eks = ctx.aws()._client("eks")
    with Stubber(eks) as stub:
        stub.add_response("list_pod_identity_associations", {"associations": [{"associationId": "a-1"}]},
                          {"clusterName": "gpuburst-dev", "namespace": "keda", "serviceAccount": "keda-operator"})
        stub.add_response("describe_pod_identity_association", {"association": {"roleArn": OPERATOR}},
                          {"clusterName": "gpuburst-dev", "associationId": "a-1"})
        r = scaler_iam.run(ctx)
    assert r.status == "fail" and "does not trust the KEDA operator's role gpuburst-dev-keda-operator" in r.summary
    assert f"KEDA operator role: {OPERATOR} (from the Pod Identity association of keda/keda-operator in cluster " \
           "gpuburst-dev)" in r.evidence


@pytest.mark.parametrize("principal,ok", [
    ({"AWS": OPERATOR}, True), ({"AWS": [OPERATOR, "x"]}, True), ({"AWS": "arn:aws:iam::123456789012:root"}, True),
    ({"AWS": "arn:aws:iam::999999999999:root"}, False), ({"Service": "pods.eks.amazonaws.com"}, False),
])
def test_trust_evaluation(principal, ok):
    from components.verify import scaler_iam

    trusted, _ = scaler_iam.trusts({"Statement": [{"Effect": "Allow", "Principal": principal,
                                                   "Action": "sts:AssumeRole"}]}, OPERATOR)
    assert trusted is ok
