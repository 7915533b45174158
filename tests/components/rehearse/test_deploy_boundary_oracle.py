"""Issue 27's "done when", on the dev and prod plans, each request decided twice — by our evaluator and by the
independent iam-simulate (tests/iam_oracle.py) — and both must give the expected answer:

- the deployer the config names manages every clinical bucket and the data key from where it deploys (outside the
  VPC; prod also from the in-VPC runner);
- a same-account role with `s3:*` outside the VPC gets, puts, deletes and lists no clinical object; nor does a
  deployer get, put or delete one;
- the workers read slides and write results through the VPC's S3 endpoint;
- the slide uploader puts into the slides bucket from its place, the results reader gets from the results bucket
  from its place; neither does the other's actions, deletes, or reads the other bucket.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from iam_oracle import simulation_of

from components.rehearse import Policy, Request
from components.rehearse.evaluate import evaluate
from components.rehearse.plan_model import StackFacts, read_facts
from components.rehearse.scenarios import ADMIN, INTRUDER, OUTSIDE_IP, S3_STAR, Place, places, request_for

BUCKET_MANAGEMENT = ("s3:GetBucketPolicy", "s3:PutBucketPolicy", "s3:DeleteBucketPolicy", "s3:GetBucketTagging",
                     "s3:PutBucketTagging", "s3:GetBucketVersioning", "s3:PutBucketVersioning",
                     "s3:GetEncryptionConfiguration", "s3:PutEncryptionConfiguration",
                     "s3:GetLifecycleConfiguration", "s3:PutLifecycleConfiguration", "s3:GetBucketLogging",
                     "s3:PutBucketLogging", "s3:DeleteBucket", "s3:ListBucket")
KEY_MANAGEMENT = ("kms:DescribeKey", "kms:GetKeyPolicy", "kms:PutKeyPolicy", "kms:EnableKeyRotation",
                  "kms:ScheduleKeyDeletion")
ORACLE_VERDICT = {"Allowed": True, "ExplicitlyDenied": False, "ImplicitlyDenied": False}


@dataclass(frozen=True)
class Case:
    what: str
    request: Request
    policies: dict[str, Any]
    allowed: bool


def _bucket(f: StackFacts, kind: str):
    (g,) = [g for g in f.governed if g.clinical and kind in g.arn]
    return g


def _key(f: StackFacts):
    (g,) = [g for g in f.governed if g.resource.type == "aws:kms/key:Key" and "data-key" in g.resource.name]
    return g


def _case(f: StackFacts, what: str, principal: str, action: str, resource: str, place: Place, identity, g,
          allowed: bool, extra: dict | None = None) -> Case:
    request, policies = request_for(f, principal, action, resource, place, identity=identity,
                                    resource_policy=g.policy, label=g.policy_name or g.resource.name, extra=extra)
    return Case(what, request, policies, allowed)


def cases(f: StackFacts) -> list[Case]:
    m = f.model
    assert m is not None
    slides, results, key = _bucket(f, "slides"), _bucket(f, "results"), _key(f)
    out: list[Case] = []
    for role in m.deployer_role_arns:
        runner = m.runner is not None and m.runner.role_arn == role
        for place in places(m.deploy_cidrs, runner=runner):
            for g in (slides, results):
                out += [_case(f, "deployer manages the bucket", role, a, g.arn, place, [ADMIN], g, True)
                        for a in BUCKET_MANAGEMENT]
                out += [_case(f, "deployer touches no object", role, a, f"{g.arn}/slides/x", place, [ADMIN], g, False)
                        for a in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")]
            out += [_case(f, "deployer manages the key", role, a, key.arn, place, [ADMIN], key, True)
                    for a in KEY_MANAGEMENT]
    stranger = f"arn:aws:iam::{f.account}:{INTRUDER}"
    outside = Place(OUTSIDE_IP, False, OUTSIDE_IP)
    for g in (slides, results):
        obj = f"{g.arn}/{'slides' if g is slides else 'results'}/case-0001.svs"
        out += [_case(f, "a stranger with s3:* gets nothing from outside", stranger, a, obj, outside, [S3_STAR], g,
                      False) for a in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")]
        out.append(_case(f, "a stranger lists nothing from outside", stranger, "s3:ListBucket", g.arn, outside,
                         [S3_STAR], g, False))
    inside = Place("the VPC", True)
    workers = {arn: docs for arn, (name, docs) in f.roles.items() if arn.endswith("/slides-worker-role")}
    assert len(workers) == 1
    for arn, docs in workers.items():
        identity = [Policy("identity:worker", d) for d in docs]
        out.append(_case(f, "the worker reads slides through the endpoint", arn, "s3:GetObject",
                         f"{slides.arn}/slides/case-0001.svs", inside, identity, slides, True))
        out.append(_case(f, "the worker writes results through the endpoint", arn, "s3:PutObject",
                         f"{results.arn}/results/case-0001/overlay.ome.tif", inside, identity, results, True))
    for up in m.slide_uploaders:
        for place in places(up.place.cidrs, up.place.vpc_endpoint_ids):
            out.append(_case(f, "the uploader puts a slide", up.role_arn, "s3:PutObject",
                             f"{slides.arn}/slides/case-0002.svs", place, [], slides, True))
            out.append(_case(f, "the uploader's key use through S3", up.role_arn, "kms:GenerateDataKey", key.arn,
                             Place("S3", False, OUTSIDE_IP), [], key, True,
                             {"kms:ViaService": f"s3.{f.region}.amazonaws.com", "kms:CallerAccount": f.account}))
            for action, g, obj in (("s3:GetObject", slides, "slides/case-0002.svs"),
                                   ("s3:DeleteObject", slides, "slides/case-0002.svs"),
                                   ("s3:GetObject", results, "results/case-0002/summary.json"),
                                   ("s3:PutObject", results, "results/case-0002/summary.json")):
                out.append(_case(f, "the uploader does nothing else, even with s3:*", up.role_arn, action,
                                 f"{g.arn}/{obj}", place, [S3_STAR], g, False))
    for rd in m.result_readers:
        for place in places(rd.place.cidrs, rd.place.vpc_endpoint_ids):
            out.append(_case(f, "the reader gets a result", rd.role_arn, "s3:GetObject",
                             f"{results.arn}/results/case-0002/summary.json", place, [], results, True))
            out.append(_case(f, "the reader's key use through S3", rd.role_arn, "kms:Decrypt", key.arn,
                             Place("S3", False, OUTSIDE_IP), [], key, True,
                             {"kms:ViaService": f"s3.{f.region}.amazonaws.com", "kms:CallerAccount": f.account}))
            for action, g, obj in (("s3:PutObject", results, "results/case-0002/summary.json"),
                                   ("s3:DeleteObject", results, "results/case-0002/summary.json"),
                                   ("s3:GetObject", slides, "slides/case-0002.svs"),
                                   ("s3:PutObject", slides, "slides/case-0002.svs")):
                out.append(_case(f, "the reader does nothing else, even with s3:*", rd.role_arn, action,
                                 f"{g.arn}/{obj}", place, [S3_STAR], g, False))
    return out


def simulation(case: Case, account: str) -> dict[str, Any]:
    """The same request for iam-simulate (tests/iam_oracle.py `simulation_of`)."""
    return simulation_of(case.request, account, **case.policies)


@pytest.fixture(scope="module", params=["dev", "prod"])
def stack(request):
    plan = request.getfixturevalue(request.param)["plan"]
    return request.param, read_facts(plan)


def test_every_case_is_decided_as_the_deploy_model_needs_by_both_evaluators(stack, iam_oracle):
    name, f = stack
    all_cases = cases(f)
    assert len(all_cases) >= 60 and {c.allowed for c in all_cases} == {True, False}
    results = iam_oracle([simulation(c, f.account) for c in all_cases])
    wrong = []
    for case, result in zip(all_cases, results):
        ours = evaluate(case.request, **case.policies).allowed
        theirs = ORACLE_VERDICT.get(result["decision"])
        if ours != case.allowed or theirs != case.allowed:
            wrong.append(f"{case.what}: {case.request.principal} {case.request.action} {case.request.resource} "
                         f"{dict(case.request.context)}: expected {case.allowed}, ours {ours}, iam-simulate "
                         f"{theirs} {result.get('errors') or ''}")
    print(f"\n{name}: {len(all_cases)} requests, each decided by both evaluators as the deploy model needs")
    assert wrong == [], f"{len(wrong)} of {len(all_cases)}:\n" + "\n".join(wrong[:20])


def test_prod_deploys_from_the_runner_inside_the_vpc(prod):
    f = read_facts(prod["plan"])
    assert f.model is not None and f.model.runner is not None
    runner_cases = [c for c in cases(f) if c.what == "deployer manages the bucket"
                    and "aws:SourceVpce" in c.request.context]
    assert runner_cases and all(evaluate(c.request, **c.policies).allowed for c in runner_cases)
