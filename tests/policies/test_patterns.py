"""Tests for the advisory `consumer-for-independent-work`: a GpuConsumer declared for work the chooser would run as a
ScaledJob is named with the chooser's estimate, from the component's own annotations to the pack's line."""
from __future__ import annotations

import pulumi_aws as aws
from pulumi_policy import EnforcementLevel

from components.consumer import GpuConsumer, GpuConsumerArgs
from components.spec.worker_pod import WorkerPodSettings
from components.spec.workload import WorkloadFacts
from components.synth.mocks import run_under_mocks
from components.synth.synth import plan_document
from policies import pack
from policies import patterns as rule
from policies.plan import Res

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/tils-worker@sha256:" + "ab" * 32
T = "kubernetes:apps/v1:Deployment"


def consumer_plan(**facts) -> dict:
    base = dict(items_independent=True, state_across_messages=False, ordered=False, model_load_s=10,
                seconds_per_item=6, burst_items=400, max_replicas=8)
    base.update(facts)

    def program():
        queue = aws.sqs.Queue("slides-queue", name="lab-slides", visibility_timeout_seconds=600)
        GpuConsumer("slides", GpuConsumerArgs(
            cluster_name="gpuburst-dev", namespace="lab", queue_url=queue.url, queue_arn=queue.arn,
            bucket_arn="arn:aws:s3:::lab-results", egress_cidrs=["10.64.0.0/16"], nodepool="tils-lab",
            facts=WorkloadFacts(**base), pod=WorkerPodSettings(image=IMAGE)))

    return plan_document("lab", run_under_mocks(program, project="tils-lab", stack="lab"))


def deployment(plan: dict) -> Res:
    (d,) = [r for r in plan["resources"] if r["type"] == T]
    return Res(d["type"], d["urn"], d["name"], d.get("parent"), d["properties"])


def test_a_consumer_for_independent_burst_work_gets_the_chooser_estimate_and_the_component_fix():
    (message,) = rule.consumer_findings(deployment(consumer_plan()))
    assert "Deployment lab/slides" in message and "items-independent=true" in message
    assert "400 items on up to 8 parallel jobs" in message and "as one consumer" in message  # the estimate
    assert "declare a GpuScaledJob" in message and "gpuburst:" not in message


def test_ordered_work_or_work_the_chooser_keeps_on_a_consumer_is_not_named():
    assert rule.consumer_findings(deployment(consumer_plan(ordered=True))) == []
    assert rule.consumer_findings(deployment(consumer_plan(max_replicas=1))) == []  # one GPU: no speed-up


def test_a_consumer_without_facts_or_without_the_worker_label_is_not_judged():
    res = deployment(consumer_plan())
    props = dict(res.props, metadata={**res.props["metadata"], "annotations": {}})
    assert rule.consumer_findings(res._replace(props=props)) == []
    unlabelled = {**res.props, "metadata": {**res.props["metadata"], "labels": {"app": "x"}},
                  "spec": {**res.props["spec"], "template": {**res.props["spec"]["template"],
                                                             "metadata": {"labels": {"app": "x"}}}}}
    assert rule.consumer_findings(res._replace(props=unlabelled)) == []


def test_it_is_advisory_and_reported_over_grpc(analyze):
    assert {p.name: p.enforcement_level for p in pack.all_policies()}[rule.NAME] == EnforcementLevel.ADVISORY
    report = analyze(consumer_plan())
    (found,) = report.by_policy(rule.NAME)
    assert found.level == "ADVISORY" and "parallel jobs" in found.message
    assert found.line().startswith(f"ADVISORY {rule.NAME} slides-deployment: Deployment lab/slides ")
