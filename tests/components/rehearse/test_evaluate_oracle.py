"""The IAM evaluator held against an independent one: a generated corpus of realistic same-account requests (bucket,
key, queue, topic, repository and endpoint policies x principals x actions x contexts) run through
`components.rehearse.evaluate` and, in ONE node call, through @cloud-copilot/iam-simulate (tests/iam_oracle.py).
Every verdict must agree (allowed, explicit deny or implicit deny), except the cases excluded below, each with the
AWS documentation that says why the oracle differs; an exclusion that no longer differs fails the test too."""
from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from iam_oracle import simulation_of

from components.rehearse import Policy, Request
from components.rehearse.evaluate import evaluate

pytestmark = pytest.mark.slow  # one node subprocess

ACCOUNT = "123456789012"
WORKER = f"arn:aws:iam::{ACCOUNT}:role/gpuburst-worker"
DEPLOYER = f"arn:aws:iam::{ACCOUNT}:role/ci/gpuburst-deployer"
READER = f"arn:aws:iam::{ACCOUNT}:role/reader"
ALICE = f"arn:aws:iam::{ACCOUNT}:user/alice"
S3_SERVICE = "s3.amazonaws.com"
WORKER_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/gpuburst-worker/rehearse"
BUCKET = "arn:aws:s3:::gpuburst-slides"
SECRETS = "arn:aws:s3:::gpuburst-secrets"
KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
QUEUE = f"arn:aws:sqs:us-east-1:{ACCOUNT}:gpuburst-jobs"
TOPIC = f"arn:aws:sns:us-east-1:{ACCOUNT}:gpuburst-events"
REPO = f"arn:aws:ecr:us-east-1:{ACCOUNT}:repository/gpuburst-worker"
VPCE = "vpce-0a1b2c3d4e5f60718"


def doc(*statements: dict) -> dict:
    return {"Version": "2012-10-17", "Statement": list(statements)}


IDENTITY = {
    WORKER: [Policy("identity:worker", doc(
        {"Sid": "ReadSlides", "Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"],
         "Resource": [BUCKET, f"{BUCKET}/*"]},
        {"Sid": "Jobs", "Effect": "Allow", "Action": ["sqs:ReceiveMessage", "sqs:DeleteMessage"], "Resource": QUEUE},
        {"Sid": "Decrypt", "Effect": "Allow", "Action": "kms:Decrypt", "Resource": KEY},
        {"Sid": "Pull", "Effect": "Allow", "Action": ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
         "Resource": "*"},
        {"Sid": "NeverDelete", "Effect": "Deny", "Action": "s3:DeleteObject", "Resource": "*"}))],
    DEPLOYER: [Policy("identity:deployer", doc(
        {"Sid": "AllButIam", "Effect": "Allow", "NotAction": ["iam:*", "organizations:*"], "Resource": "*"}))],
    READER: [],
    ALICE: [Policy("identity:alice", doc(
        {"Sid": "S3NotSecrets", "Effect": "Allow", "Action": "s3:*", "NotResource": f"{SECRETS}/*"},
        {"Sid": "SnsInRegion", "Effect": "Allow", "Action": "sns:*", "Resource": "arn:aws:sns:us-east-1:*:*"}))],
    S3_SERVICE: [],
}
ROLES = (WORKER, DEPLOYER, READER, ALICE)

TLS_DENY = {"Sid": "DenyInsecureTransport", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
            "Resource": [BUCKET, f"{BUCKET}/*"], "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
BUCKET_POLICY = doc(
    TLS_DENY,
    {"Sid": "DenyOldTls", "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:*", "Resource": f"{BUCKET}/*",
     "Condition": {"NumericLessThan": {"s3:TlsVersion": "1.2"}}},
    {"Sid": "DenyOutsideVpce", "Effect": "Deny", "Principal": "*", "Action": ["s3:GetObject", "s3:PutObject"],
     "Resource": f"{BUCKET}/*",
     "Condition": {"StringNotEquals": {"aws:SourceVpce": VPCE},
                   "ArnNotLike": {"aws:PrincipalArn": f"arn:aws:iam::{ACCOUNT}:role/ci/*"}}},
    {"Sid": "WorkerWrites", "Effect": "Allow", "Principal": {"AWS": WORKER}, "Action": "s3:PutObject",
     "Resource": f"{BUCKET}/results/*"},
    {"Sid": "ReaderLists", "Effect": "Allow", "Principal": {"AWS": [READER, ACCOUNT]}, "Action": "s3:ListBucket",
     "Resource": BUCKET, "Condition": {"StringLike": {"s3:prefix": ["slides/*", "results/?/*"]}}},
    {"Sid": "AccountDelegates", "Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
     "Action": "s3:*", "Resource": [BUCKET, f"{BUCKET}/*"]})
PLACE_POLICY = doc(
    {"Sid": "DenyOutsidePlaces", "Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": f"{BUCKET}/*",
     "Condition": {"NotIpAddress": {"aws:SourceIp": ["203.0.113.0/24", "2001:db8::/32"]},
                   "Null": {"aws:SourceVpc": "true"}}},
    {"Sid": "ReaderReads", "Effect": "Allow", "Principal": {"AWS": READER}, "Action": "s3:GetObject",
     "Resource": f"{BUCKET}/*", "Condition": {"IpAddressIfExists": {"aws:SourceIp": "203.0.113.0/24"}}},
    {"Sid": "SessionWrites", "Effect": "Allow", "Principal": {"AWS": WORKER_SESSION}, "Action": "s3:PutObject",
     "Resource": f"{BUCKET}/results/*"})
ENDPOINT_POLICY = doc(
    {"Sid": "SlidesOnly", "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket",
                                                                           "s3:PutObject"],
     "Resource": [BUCKET, f"{BUCKET}/*"]},
    {"Sid": "NoDeletes", "Effect": "Deny", "Principal": "*", "Action": "s3:Delete*", "Resource": "*"})
KEY_POLICY = doc(
    {"Sid": "EnableIamPolicies", "Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
     "Action": "kms:*", "Resource": "*"},
    {"Sid": "WorkerViaS3", "Effect": "Allow", "Principal": {"AWS": WORKER},
     "Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Resource": "*",
     "Condition": {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com", "kms:CallerAccount": ACCOUNT}}},
    {"Sid": "NoDeletionOutsideCi", "Effect": "Deny", "Principal": "*", "Action": "kms:ScheduleKeyDeletion",
     "Resource": "*", "Condition": {"ArnNotLike": {"aws:PrincipalArn": f"arn:aws:iam::{ACCOUNT}:role/ci/*"}}})
KEY_POLICY_NO_ROOT = doc(
    {"Sid": "ReaderDirect", "Effect": "Allow", "Principal": {"AWS": [READER, ACCOUNT]}, "Action": "kms:Decrypt",
     "Resource": "*", "Condition": {"StringLike": {"kms:ViaService": "s3.*.amazonaws.com"}}},
    {"Sid": "DeployerAdmin", "Effect": "Allow", "Principal": {"AWS": DEPLOYER}, "Action": "kms:*", "Resource": "*"})
QUEUE_POLICY = doc(
    {"Sid": "BucketNotifications", "Effect": "Allow", "Principal": {"Service": S3_SERVICE},
     "Action": "sqs:SendMessage", "Resource": QUEUE,
     "Condition": {"ArnLike": {"aws:SourceArn": "arn:aws:s3:*:*:gpuburst-*"},
                   "StringEquals": {"aws:SourceAccount": ACCOUNT}}},
    {"Sid": "DenyInsecure", "Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": QUEUE,
     "Condition": {"BoolIfExists": {"aws:SecureTransport": "false"}}},
    {"Sid": "ReaderPeeks", "Effect": "Allow", "Principal": {"AWS": READER}, "Action": "sqs:Receive*",
     "Resource": QUEUE},
    {"Sid": "NobodyPurges", "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "sqs:PurgeQueue",
     "Resource": QUEUE, "Condition": {"StringNotEqualsIgnoreCase": {"aws:PrincipalArn": DEPLOYER.upper()}}})
TOPIC_POLICY = doc(
    {"Sid": "S3Publishes", "Effect": "Allow", "Principal": {"Service": S3_SERVICE}, "Action": "sns:Publish",
     "Resource": TOPIC, "Condition": {"ArnEquals": {"aws:SourceArn": BUCKET}}},
    {"Sid": "OnlyNamedPublish", "Effect": "Deny",
     "NotPrincipal": {"AWS": [WORKER, WORKER_SESSION, f"arn:aws:iam::{ACCOUNT}:root"], "Service": S3_SERVICE},
     "Action": "sns:Publish", "Resource": TOPIC},
    {"Sid": "WorkerPublishes", "Effect": "Allow", "Principal": {"AWS": WORKER}, "Action": "sns:Publish",
     "Resource": TOPIC})
REPO_POLICY = doc(
    {"Sid": "AccountPulls", "Effect": "Allow", "Principal": {"AWS": ACCOUNT},
     "Action": ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"]},
    {"Sid": "ReaderPulls", "Effect": "Allow", "Principal": {"AWS": READER},
     "Action": ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
     "Condition": {"ForAnyValue:StringEquals": {"aws:PrincipalTag/team": ["ml", "platform"]},
                   "DateLessThanIfExists": {"aws:CurrentTime": "2027-01-01T00:00:00Z"}}},
    {"Sid": "OnlyCiPushes", "Effect": "Deny", "Principal": "*", "NotAction": ["ecr:BatchGetImage",
                                                                               "ecr:GetDownloadUrlForLayer"],
     "Condition": {"ArnNotEquals": {"aws:PrincipalArn": DEPLOYER}}})
BOUNDARY = doc({"Sid": "Ceiling", "Effect": "Allow", "Action": ["s3:GetObject", "sqs:*"], "Resource": "*"})

VPC_IN = {"aws:SecureTransport": True, "aws:SourceVpce": VPCE, "aws:SourceVpc": "vpc-0123456789abcdef0",
          "aws:VpcSourceIp": "10.0.1.5"}
IP_IN = {"aws:SecureTransport": True, "aws:SourceIp": "203.0.113.7"}
IP_OUT = {"aws:SecureTransport": True, "aws:SourceIp": "198.51.100.9"}
IP6_IN = {"aws:SecureTransport": True, "aws:SourceIp": "2001:db8::5"}
PLAIN_HTTP = {"aws:SecureTransport": False, "aws:SourceIp": "203.0.113.7"}


@dataclass(frozen=True)
class Scenario:
    name: str
    resource_policy: dict
    actions: tuple[tuple[str, str, dict], ...]
    """(action, resource, extra context for that action)"""
    contexts: tuple[dict, ...]
    principals: tuple[str, ...] = ROLES
    endpoint: dict | None = None
    """Applied to the contexts that go through the endpoint (aws:SourceVpce set)."""
    boundary: dict | None = None
    """Attached to the worker only."""
    differs: Callable[[Request], str | None] = field(default=lambda request: None)


def _notprincipal_differs(request: Request) -> str | None:
    if request.action == "sns:Publish" and request.principal in (DEPLOYER, READER, ALICE):
        return ("NotPrincipal in a same-account Deny: iam-simulate exempts any caller of a listed account; the IAM "
                "NotPrincipal page says AWS may check the account, the role and the session in turn, so only a "
                "caller named at every level is exempt (we deny the others)")
    return None


S3_ACTIONS = (("s3:GetObject", f"{BUCKET}/slides/a.svs", {"s3:TlsVersion": "1.3"}),
              ("s3:GetObject", f"{BUCKET}/slides/b.svs", {"s3:TlsVersion": "1.1"}),
              ("s3:PutObject", f"{BUCKET}/results/a.json", {"s3:TlsVersion": "1.2"}),
              ("s3:DeleteObject", f"{BUCKET}/results/a.json", {}),
              ("s3:ListBucket", BUCKET, {"s3:prefix": "slides/2026/"}),
              ("s3:ListBucket", BUCKET, {"s3:prefix": "results/7/x"}),
              ("s3:ListBucket", BUCKET, {"s3:prefix": "private/"}),
              ("s3:GetObject", f"{SECRETS}/k", {}))
KMS_ACTIONS = (("kms:Decrypt", KEY, {"kms:ViaService": "s3.us-east-1.amazonaws.com", "kms:CallerAccount": ACCOUNT}),
               ("kms:Decrypt", KEY, {"kms:CallerAccount": ACCOUNT}),
               ("kms:GenerateDataKey", KEY, {"kms:ViaService": "s3.us-east-1.amazonaws.com",
                                             "kms:CallerAccount": ACCOUNT}),
               ("kms:ScheduleKeyDeletion", KEY, {}))
SCENARIOS = (
    Scenario("bucket", BUCKET_POLICY, S3_ACTIONS, (VPC_IN, IP_IN, IP_OUT, PLAIN_HTTP), endpoint=ENDPOINT_POLICY),
    Scenario("bucket-places", PLACE_POLICY, S3_ACTIONS[:4], (VPC_IN, IP_IN, IP_OUT, IP6_IN, {}),
             principals=ROLES),
    Scenario("bucket-boundary", PLACE_POLICY, S3_ACTIONS[:4], (IP_IN, VPC_IN), principals=(WORKER,),
             boundary=BOUNDARY),
    Scenario("key", KEY_POLICY, KMS_ACTIONS, ({}, {"aws:SourceIp": "203.0.113.7"})),
    Scenario("key-no-root", KEY_POLICY_NO_ROOT, KMS_ACTIONS, ({},)),
    Scenario("key-boundary", KEY_POLICY, KMS_ACTIONS[:2], ({},), principals=(WORKER,), boundary=BOUNDARY),
    Scenario("queue", QUEUE_POLICY,
             (("sqs:ReceiveMessage", QUEUE, {}), ("sqs:DeleteMessage", QUEUE, {}), ("sqs:PurgeQueue", QUEUE, {}),
              ("sqs:SendMessage", QUEUE, {})),
             ({"aws:SecureTransport": True}, {"aws:SecureTransport": False}, {})),
    Scenario("queue-service", QUEUE_POLICY, (("sqs:SendMessage", QUEUE, {}),),
             ({"aws:SourceArn": "arn:aws:s3:::gpuburst-slides", "aws:SourceAccount": ACCOUNT,
               "aws:SecureTransport": True},
              {"aws:SourceArn": "arn:aws:s3:::other-bucket", "aws:SourceAccount": ACCOUNT, "aws:SecureTransport": True},
              {"aws:SourceArn": "arn:aws:s3:::gpuburst-slides", "aws:SourceAccount": "210987654321",
               "aws:SecureTransport": True},
              {"aws:SourceArn": "arn:aws:s3:::gpuburst-slides", "aws:SourceAccount": ACCOUNT,
               "aws:SecureTransport": False}),
             principals=(S3_SERVICE,)),
    Scenario("topic", TOPIC_POLICY, (("sns:Publish", TOPIC, {}), ("sns:Subscribe", TOPIC, {})),
             ({"aws:SourceArn": BUCKET}, {"aws:SourceArn": "arn:aws:s3:::elsewhere"}),
             principals=(*ROLES, S3_SERVICE), differs=_notprincipal_differs),
    Scenario("repository", REPO_POLICY,
             (("ecr:BatchGetImage", REPO, {}), ("ecr:GetDownloadUrlForLayer", REPO, {}),
              ("ecr:PutImage", REPO, {}), ("ecr:BatchDeleteImage", REPO, {})),
             ({}, {"aws:PrincipalTag/team": "ml"}, {"aws:PrincipalTag/team": "finance"},
              {"aws:PrincipalTag/team": "platform", "aws:CurrentTime": "2026-12-01T09:30:00Z"},
              {"aws:PrincipalTag/team": "ml", "aws:CurrentTime": "2027-02-01T00:00:00Z"})),
)


@dataclass(frozen=True)
class Case:
    scenario: str
    request: Request
    kwargs: dict[str, Any]
    excluded: str | None


def corpus() -> list[Case]:
    cases = []
    for sc in SCENARIOS:
        for principal, (action, resource, extra), ctx in itertools.product(sc.principals, sc.actions, sc.contexts):
            if principal == S3_SERVICE and sc.name == "topic" and action != "sns:Publish":
                continue
            request = Request(principal, action, resource, {**ctx, **extra}, resource_account=ACCOUNT)
            kwargs: dict[str, Any] = {"identity_policies": IDENTITY[principal], "resource_policy": sc.resource_policy}
            if sc.endpoint is not None and "aws:SourceVpce" in ctx and action.startswith("s3:"):
                kwargs["endpoint_policy"] = sc.endpoint
            if sc.boundary is not None and principal == WORKER:
                kwargs["permissions_boundary"] = sc.boundary
            cases.append(Case(sc.name, request, kwargs, sc.differs(request)))
    return cases


def simulation(case: Case) -> dict[str, Any]:
    """The same request as an iam-simulate Simulation (tests/iam_oracle.py `simulation_of`)."""
    return simulation_of(case.request, ACCOUNT, **case.kwargs)


ORACLE_VERDICT = {"Allowed": "allow", "ExplicitlyDenied": "explicit-deny", "ImplicitlyDenied": "implicit-deny"}


def test_the_corpus_is_large_and_varied():
    cases = corpus()
    verdicts = {evaluate(c.request, **c.kwargs).verdict for c in cases}
    assert len(cases) >= 300, len(cases)
    assert verdicts == {"allow", "explicit-deny", "implicit-deny"}


def test_every_verdict_agrees_with_iam_simulate(iam_oracle):
    cases = corpus()
    results = iam_oracle([simulation(c) for c in cases])
    refused = [(c.scenario, c.request, r["errors"]) for c, r in zip(cases, results) if r["decision"] is None]
    assert refused == [], f"iam-simulate refused {len(refused)} simulations, first: {refused[:2]}"
    ignored = [(c.scenario, c.request.action, r["ignoredContextKeys"]) for c, r in zip(cases, results)
               if r["ignoredContextKeys"]]
    assert ignored == [], f"iam-simulate dropped context keys our evaluator read: {ignored[:3]}"
    compared, mismatches, stale, excluded = 0, [], [], {}
    for case, result in zip(cases, results):
        ours = evaluate(case.request, **case.kwargs).verdict
        theirs = ORACLE_VERDICT[result["decision"]]
        if case.excluded:
            excluded[case.excluded] = excluded.get(case.excluded, 0) + 1
            if ours == theirs:
                stale.append((case.scenario, case.request))
            continue
        compared += 1
        if ours != theirs:
            mismatches.append(f"{case.scenario}: {case.request.principal} {case.request.action} "
                              f"{case.request.resource} {dict(case.request.context)}: ours {ours}, "
                              f"iam-simulate {theirs}")
    print(f"\ncompared {compared} verdicts with iam-simulate; excluded {sum(excluded.values())}:")
    for reason, count in excluded.items():
        print(f"  {count} x {reason}")
    assert mismatches == [], f"{len(mismatches)} of {compared} differ:\n" + "\n".join(mismatches[:30])
    assert stale == [], f"excluded cases that no longer differ (drop the exclusion): {stale[:5]}"
    assert compared >= 300
