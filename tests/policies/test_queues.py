"""Tests for `sqs-work-queue`: work queues have a DLQ, SSE and visibility >= 2x processing; DLQs are encrypted."""
from __future__ import annotations

import pytest

from policies import queues as rule


def check(run_rule, samples, props, name="q") -> list[str]:
    return run_rule(rule.POLICY, samples.T_QUEUE, props, name)


def test_compliant_queues_pass(run_rule, samples):
    assert check(run_rule, samples, samples.work_queue()) == []
    assert check(run_rule, samples, samples.dead_letter_queue()) == []
    kms = samples.work_queue()
    del kms["sqsManagedSseEnabled"]
    kms["kmsMasterKeyId"] = "alias/slides"
    assert check(run_rule, samples, kms) == []


@pytest.mark.parametrize("mutate,expected", [
    (lambda q: q.pop("redrivePolicy"), "redrivePolicy is missing"),
    (lambda q: q.update(redrivePolicy='{"maxReceiveCount": 3}'), "needs a deadLetterTargetArn"),
    (lambda q: q.update(redrivePolicy='{"deadLetterTargetArn": "arn:x", "maxReceiveCount": 0}'),
     "maxReceiveCount >= 1"),
    (lambda q: q.update(redrivePolicy="not json"), "is not JSON"),
    (lambda q: q.pop("sqsManagedSseEnabled"), "sqsManagedSseEnabled is not set"),
    (lambda q: q.update(sqsManagedSseEnabled=False), "sqsManagedSseEnabled is False"),
    (lambda q: q.update(visibilityTimeoutSeconds=599), "visibilityTimeoutSeconds = 599, less than 2 x"),
    (lambda q: q.pop("visibilityTimeoutSeconds"), "is not set (SQS default 30 s)"),
    (lambda q: q["tags"].pop("gpuburst.io/expected-processing-s"), "expected-processing-s\" is missing"),
    (lambda q: q["tags"].update({"gpuburst.io/expected-processing-s": "soon"}), "declare a positive number"),
], ids=["no-redrive", "no-target", "zero-receives", "bad-json", "no-sse", "sse-off", "short-visibility",
        "default-visibility", "undeclared-processing", "bad-processing"])
def test_work_queue_failures_name_the_field(run_rule, samples, mutate, expected):
    props = samples.work_queue()
    mutate(props)
    messages = check(run_rule, samples, props)
    assert len(messages) == 1 and expected in messages[0], messages
    assert "(a work queue:" in messages[0]


def test_visibility_boundary_and_float_numbers(run_rule, samples):
    props = samples.work_queue()
    props["visibilityTimeoutSeconds"] = 600.0  # a Struct number
    assert check(run_rule, samples, props) == []
    props["tags"]["gpuburst.io/expected-processing-s"] = "300.5"
    assert "set visibilityTimeoutSeconds >= 601" in check(run_rule, samples, props)[0]


def test_dead_letter_queue_needs_only_encryption(run_rule, samples):
    dlq = samples.dead_letter_queue()
    del dlq["sqsManagedSseEnabled"]
    messages = check(run_rule, samples, dlq)
    assert len(messages) == 1 and "sqsManagedSseEnabled is not set" in messages[0]
    assert "(a dead-letter queue:" in messages[0]


@pytest.mark.parametrize("props,name,kind", [
    ({"sqsManagedSseEnabled": True, "name": "slides-dlq"}, "x", "dead-letter"),
    ({"sqsManagedSseEnabled": True, "name": "slides-dlq.fifo"}, "x", "dead-letter"),
    ({"sqsManagedSseEnabled": True}, "slides-dead-letter", "dead-letter"),
    ({"sqsManagedSseEnabled": True, "redriveAllowPolicy": '{"redrivePermission": "allowAll"}'}, "x", "dead-letter"),
    ({"sqsManagedSseEnabled": True, "tags": {"gpuburst.io/role": "dlq"}}, "x", "dead-letter"),
    ({"sqsManagedSseEnabled": True}, "results", "work"),
    ({"sqsManagedSseEnabled": True, "name": "results", "tags": {"team": "x"}}, "x", "work"),
])
def test_which_queues_are_work_queues(run_rule, samples, props, name, kind):
    messages = check(run_rule, samples, props, name)
    if kind == "dead-letter":
        assert messages == []
    else:  # an untagged queue that is not a DLQ is a work queue: it needs a DLQ (no processing time declared)
        assert len(messages) == 1 and "redrivePolicy is missing" in messages[0]


def test_missing_properties(run_rule, samples):
    messages = check(run_rule, samples, {}, "plain")
    assert any("redrivePolicy is missing" in m for m in messages)
    assert any("sqsManagedSseEnabled is not set" in m for m in messages)


def test_unknown_values(run_rule, samples):
    U = samples.U
    computed = samples.work_queue()
    computed["redrivePolicy"] = U  # the DLQ's ARN is an Output at preview: presence is what counts
    computed["kmsMasterKeyId"] = U
    assert check(run_rule, samples, computed) == []
    for mutate, expected in ((lambda q: q.update(visibilityTimeoutSeconds=U), "visibilityTimeoutSeconds is unknown"),
                             (lambda q: q.update(sqsManagedSseEnabled=U), "sqsManagedSseEnabled is unknown"),
                             (lambda q: q["tags"].update({"gpuburst.io/expected-processing-s": U}),
                              "expected-processing-s\" is unknown")):
        props = samples.work_queue()
        mutate(props)
        messages = check(run_rule, samples, props)
        assert len(messages) == 1 and expected in messages[0], messages
    untold = {"sqsManagedSseEnabled": True, "tags": U}
    messages = check(run_rule, samples, untold)
    assert len(messages) == 1 and "whether this queue is a work queue" in messages[0]


def test_over_grpc_with_config_overrides(analyze, samples):
    props = samples.work_queue()
    props["visibilityTimeoutSeconds"] = 30
    doc = samples.plan((samples.T_QUEUE, props))
    assert [d.level for d in analyze(doc).by_policy(rule.NAME)] == ["MANDATORY"]
    assert [d.level for d in analyze(doc, {rule.NAME: "advisory"}).by_policy(rule.NAME)] == ["ADVISORY"]
    assert analyze(doc, {rule.NAME: {"enforcementLevel": "disabled"}}).by_policy(rule.NAME) == []
    props["visibilityTimeoutSeconds"] = samples.U
    assert [d.level for d in analyze(samples.plan((samples.T_QUEUE, props))).by_policy(rule.NAME)] == ["MANDATORY"]


def test_tag_names_match_the_components():
    from components import queue

    assert rule.TAG_ROLE == queue.TAG_ROLE
    assert rule.TAG_EXPECTED_PROCESSING == queue.TAG_EXPECTED_PROCESSING
    assert rule.VISIBILITY_FACTOR == queue.VISIBILITY_FACTOR
    assert queue.queue_tags(queue.WorkQueueArgs(expected_processing_s=1), "dead-letter")[rule.TAG_ROLE] \
        in rule.DLQ_ROLES


def test_a_declared_other_role_needs_only_encryption(run_rule, samples):
    events = {"sqsManagedSseEnabled": True, "messageRetentionSeconds": 300,
              "tags": {"gpuburst.io/role": "events"}}
    assert check(run_rule, samples, events) == []
    events["sqsManagedSseEnabled"] = False
    messages = check(run_rule, samples, events)
    assert len(messages) == 1 and "(a queue that is not a work queue:" in messages[0]
    # A role tag cannot exempt a queue that has a redrive policy: that makes it a work queue.
    redriven = dict(samples.work_queue(), tags={"gpuburst.io/role": "events"}, sqsManagedSseEnabled=False)
    messages = check(run_rule, samples, redriven)
    assert len(messages) == 1 and "(a work queue: it has a redrivePolicy)" in messages[0]
