"""WorkQueue: the pure renderers, the validation table, and what the component registers under mocks."""
from __future__ import annotations

import json
from dataclasses import replace

import pulumi
import pytest

from components import queue as q
from components.queue import WorkQueue, WorkQueueArgs
from components.spec.validation import ConfigError
from components.synth.mocks import FAKE_ACCOUNT, run_under_mocks

EMAILS = ["oncall@example.org"]


def _args(**kw) -> WorkQueueArgs:
    kw.setdefault("expected_processing_s", 600)
    kw.setdefault("alarm_emails", list(EMAILS))
    return WorkQueueArgs(**kw)


def _run(args: WorkQueueArgs, name: str = "slides"):
    def program():
        wq = WorkQueue(name, args)
        for key in ("queue_url", "queue_arn", "dlq_url", "dlq_arn", "topic_arn"):
            pulumi.export(key, getattr(wq, key))
        pulumi.export("queue_name", wq.queue_name)
        pulumi.export("visibility_timeout_s", wq.visibility_timeout_s)
        pulumi.export("fifo", wq.fifo)
    return run_under_mocks(program)


def _queues(res) -> dict[str, dict]:
    """Queue inputs keyed by role tag."""
    return {r.properties["tags"][q.TAG_ROLE]: r.properties for r in res.monitor.by_type("aws:sqs/queue:Queue")}


# --------------------------------------------------------------------------------------------------------------------
# Pure renderers.
# --------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("expected,visibility", [(1, 2), (600, 1200), (21600, 43200)])
def test_visibility_is_twice_the_declared_processing_time(expected, visibility):
    assert q.derived_visibility_timeout_s(expected) == visibility


def test_visibility_past_the_sqs_ceiling_is_a_clear_error():
    with pytest.raises(ConfigError) as e:
        q.derived_visibility_timeout_s(21601)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("expected_processing_s: 21601 ") and "43200" in msg


def test_standard_queue_attributes():
    attrs = q.queue_attributes(_args())
    assert attrs == {"VisibilityTimeout": "1200", "ReceiveMessageWaitTimeSeconds": "20",
                     "SqsManagedSseEnabled": "true", "MessageRetentionPeriod": "345600"}
    dlq = q.dead_letter_attributes(_args())
    assert dlq["MessageRetentionPeriod"] == "1209600"
    assert dlq["VisibilityTimeout"] == "1200" and dlq["SqsManagedSseEnabled"] == "true"


def test_fifo_attributes():
    attrs = q.queue_attributes(_args(fifo=True))
    assert attrs["FifoQueue"] == "true"
    assert attrs["ContentBasedDeduplication"] == "true"
    assert attrs["DeduplicationScope"] == "messageGroup"
    assert attrs["FifoThroughputLimit"] == "perMessageGroupId"
    assert q.dead_letter_attributes(_args(fifo=True))["FifoQueue"] == "true"
    assert q.queue_names("slides", True) == ("slides.fifo", "slides-dlq.fifo")
    assert q.queue_names("slides", False) == ("slides", "slides-dlq")


def test_kms_attributes_replace_sqs_managed_sse():
    attrs = q.queue_attributes(_args(kms_key_id="alias/gpuburst", kms_data_key_reuse_s=600))
    assert attrs["KmsMasterKeyId"] == "alias/gpuburst"
    assert attrs["KmsDataKeyReusePeriodSeconds"] == "600"
    assert "SqsManagedSseEnabled" not in attrs


def test_redrive_policies():
    dlq = "arn:aws:sqs:us-east-1:123456789012:slides-dlq"
    assert json.loads(q.redrive_policy(dlq, 3)) == {"deadLetterTargetArn": dlq, "maxReceiveCount": 3}
    assert json.loads(q.redrive_allow_policy("arn:aws:sqs:us-east-1:123456789012:slides")) == {
        "redrivePermission": "byQueue", "sourceQueueArns": ["arn:aws:sqs:us-east-1:123456789012:slides"]}


def test_pulumi_queue_args_types_and_unknown_attribute():
    kw = q.pulumi_queue_args(q.queue_attributes(_args(fifo=True)))
    assert kw["visibility_timeout_seconds"] == 1200 and kw["fifo_queue"] is True
    assert kw["sqs_managed_sse_enabled"] is True and kw["deduplication_scope"] == "messageGroup"
    with pytest.raises(KeyError):
        q.pulumi_queue_args({"Policy": "{}"})


def test_age_alarm_threshold_default_and_override():
    assert q.oldest_message_alarm_threshold_s(_args(expected_processing_s=60)) == 900
    assert q.oldest_message_alarm_threshold_s(_args(expected_processing_s=1800)) == 3600
    assert q.oldest_message_alarm_threshold_s(_args(oldest_message_alarm_s=700)) == 700


# --------------------------------------------------------------------------------------------------------------------
# Validation: every error is one line naming the field and the value.
# --------------------------------------------------------------------------------------------------------------------

BAD = [
    ("name", "bad name!"),
    ("name", "x" * 72),
    ("name", ""),
    ("expected_processing_s", 0),
    ("expected_processing_s", 21601),
    ("expected_processing_s", True),
    ("expected_processing_s", 60.5),
    ("max_receive_count", 0),
    ("max_receive_count", 1001),
    ("message_retention_s", 59),
    ("message_retention_s", 1209601),
    ("kms_key_id", "my key"),
    ("kms_data_key_reuse_s", 59),
    ("alarm_emails", []),
    ("alarm_emails", ["not-an-address"]),
    ("alarm_emails", ["a@example.org", "A@example.org"]),
    ("alarm_emails", "a@example.org"),
    ("oldest_message_alarm_s", 59),
    ("oldest_message_alarm_s", 600),          # == expected_processing_s: normal work would alarm
    ("oldest_message_alarm_s", 345600),       # == retention: messages would expire first
    ("dlq_alarm_threshold", -1),
    ("tags", {"gpuburst.io/role": "x"}),
]


@pytest.mark.parametrize("field,value", BAD, ids=[f"{f}={v!r}"[:40] for f, v in BAD])
def test_each_bad_field_is_a_one_line_error_naming_field_and_value(field, value):
    args = replace(_args(), **{field: value})
    with pytest.raises(ConfigError) as e:
        q.validate_args(args, args.name if args.name is not None else "slides")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{field}: {value!r} is not valid: ")


def test_derived_age_threshold_must_stay_below_retention():
    args = _args(expected_processing_s=3600, message_retention_s=3600)  # derived threshold 7200 ≥ retention
    with pytest.raises(ConfigError) as e:
        q.validate_args(args, "slides")
    assert str(e.value).startswith("oldest_message_alarm_s: 7200 ")


def test_the_component_validates_before_registering_anything():
    with pytest.raises(ConfigError, match=r"^WorkQueue 'slides': max_receive_count: 0 "):
        run_under_mocks(lambda: WorkQueue("slides", _args(max_receive_count=0)))
    with pytest.raises(ConfigError, match=r"^WorkQueue 'Bad\.Name': name: 'Bad\.Name' "):
        run_under_mocks(lambda: WorkQueue("Bad.Name", _args()))


def test_good_args_pass():
    q.validate_args(_args(name="gpuburst-prod_slides", fifo=True, kms_key_id=(
        "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"),
        alarm_emails=["a@example.org", "b.c+gpu@lab.example.ac.uk"], oldest_message_alarm_s=3600,
        dlq_alarm_threshold=5, tags={"team": "pathology"}), "x")


# --------------------------------------------------------------------------------------------------------------------
# Under mocks.
# --------------------------------------------------------------------------------------------------------------------

def test_queue_pair_inputs_standard():
    res = _run(_args(name="gpuburst-dev-slides"))
    queues = _queues(res)
    work, dlq = queues["work"], queues["dead-letter"]
    assert work["name"] == "gpuburst-dev-slides" and dlq["name"] == "gpuburst-dev-slides-dlq"
    assert work["visibilityTimeoutSeconds"] == 1200
    assert work["receiveWaitTimeSeconds"] == 20 and dlq["receiveWaitTimeSeconds"] == 20
    assert work["sqsManagedSseEnabled"] is True and dlq["sqsManagedSseEnabled"] is True
    assert work["messageRetentionSeconds"] == 345600 and dlq["messageRetentionSeconds"] == 1209600
    assert "fifoQueue" not in work
    redrive = json.loads(work["redrivePolicy"])
    assert redrive == {"deadLetterTargetArn": f"arn:aws:sqs:us-east-1:{FAKE_ACCOUNT}:gpuburst-dev-slides-dlq",
                       "maxReceiveCount": 5}
    assert "redrivePolicy" not in dlq
    for props in (work, dlq):
        assert props["tags"][q.TAG_EXPECTED_PROCESSING] == "600"
        assert props["visibilityTimeoutSeconds"] >= 2 * int(props["tags"][q.TAG_EXPECTED_PROCESSING])


def test_redrive_allow_policy_names_the_source_queue_on_the_dlq():
    res = _run(_args(name="s"))
    (allow,) = res.monitor.by_type("aws:sqs/redriveAllowPolicy:RedriveAllowPolicy")
    assert allow.properties["queueUrl"] == f"https://sqs.us-east-1.amazonaws.com/{FAKE_ACCOUNT}/s-dlq"
    assert json.loads(allow.properties["redriveAllowPolicy"]) == {
        "redrivePermission": "byQueue", "sourceQueueArns": [f"arn:aws:sqs:us-east-1:{FAKE_ACCOUNT}:s"]}


def test_both_queues_deny_non_tls():
    res = _run(_args(name="s"))
    policies = {r.properties["queueUrl"].rsplit("/", 1)[1]: json.loads(r.properties["policy"])
                for r in res.monitor.by_type("aws:sqs/queuePolicy:QueuePolicy")}
    assert set(policies) == {"s", "s-dlq"}
    for qname, doc in policies.items():
        (st,) = doc["Statement"]
        assert st["Effect"] == "Deny" and st["Action"] == "sqs:*" and st["Principal"] == "*"
        assert st["Resource"] == f"arn:aws:sqs:us-east-1:{FAKE_ACCOUNT}:{qname}"
        assert st["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_fifo_variant():
    res = _run(_args(name="s", fifo=True))
    queues = _queues(res)
    work, dlq = queues["work"], queues["dead-letter"]
    assert work["name"] == "s.fifo" and dlq["name"] == "s-dlq.fifo"
    for props in (work, dlq):
        assert props["fifoQueue"] is True
        assert props["contentBasedDeduplication"] is True
        assert props["deduplicationScope"] == "messageGroup"
        assert props["fifoThroughputLimit"] == "perMessageGroupId"
    assert json.loads(work["redrivePolicy"])["deadLetterTargetArn"].endswith(":s-dlq.fifo")
    assert res.outputs["fifo"] is True and res.outputs["queue_name"] == "s.fifo"


def test_kms_variant():
    res = _run(_args(name="s", kms_key_id="alias/gpuburst-queues"))
    for props in _queues(res).values():
        assert props["kmsMasterKeyId"] == "alias/gpuburst-queues"
        assert props["kmsDataKeyReusePeriodSeconds"] == 300
        assert "sqsManagedSseEnabled" not in props


def test_a_customer_key_of_the_stack_encrypts_both_queues_and_the_topic_keeps_its_own():
    """The platform passes its DataKey's ARN, an Output: both queues name it (and depend on the key), while the
    alarm topic keeps the key CloudWatch may use."""
    key_arn = f"arn:aws:kms:us-east-1:{FAKE_ACCOUNT}:key/00000000-0000-0000-0000-000000000000"

    def program():
        key = pulumi.Output.from_input(key_arn)
        WorkQueue("slides", _args(name="s", kms_key_id=key))
    res = run_under_mocks(program)
    queues = _queues(res)
    assert set(queues) == {"work", "dead-letter"}
    for props in queues.values():
        assert props["kmsMasterKeyId"] == key_arn and "sqsManagedSseEnabled" not in props
    (topic,) = res.monitor.by_type("aws:sns/topic:Topic")
    (alarm_key,) = res.monitor.by_type("aws:kms/key:Key")   # the mocks give every key one ARN: judge by dependency
    assert alarm_key.name == "slides-alarm-key" and alarm_key.urn in topic.dependencies


def test_alarms_watch_the_right_metrics_and_notify_the_topic():
    res = _run(_args(name="s", max_receive_count=5))
    (topic,) = res.monitor.by_type("aws:sns/topic:Topic")
    topic_arn = f"arn:aws:sns:us-east-1:{FAKE_ACCOUNT}:s-alarms"
    alarms = {r.properties["metricName"]: r.properties for r in res.monitor.by_type(
        "aws:cloudwatch/metricAlarm:MetricAlarm")}
    assert set(alarms) == {"ApproximateAgeOfOldestMessage", "ApproximateNumberOfMessagesVisible"}
    age, dlq = alarms["ApproximateAgeOfOldestMessage"], alarms["ApproximateNumberOfMessagesVisible"]
    assert age["namespace"] == dlq["namespace"] == "AWS/SQS"
    assert age["dimensions"] == {"QueueName": "s"}
    assert dlq["dimensions"] == {"QueueName": "s-dlq"}
    assert age["threshold"] == 1200 and age["comparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert dlq["threshold"] == 0 and dlq["comparisonOperator"] == "GreaterThanThreshold"
    for a in (age, dlq):
        assert a["statistic"] == "Maximum"
        assert a["treatMissingData"] == "notBreaching"
        assert a["alarmActions"] == [topic_arn] and a["okActions"] == [topic_arn]
    assert "5 times" in dlq["alarmDescription"]
    assert res.outputs["topic_arn"] == topic_arn


def test_topic_is_encrypted_with_a_key_cloudwatch_may_use():
    res = _run(_args(name="s"))
    (topic,) = res.monitor.by_type("aws:sns/topic:Topic")
    (key,) = res.monitor.by_type("aws:kms/key:Key")
    assert topic.properties["kmsMasterKeyId"].startswith(f"arn:aws:kms:us-east-1:{FAKE_ACCOUNT}:key/")
    assert topic.properties["kmsMasterKeyId"] != "alias/aws/sns"
    assert key.properties["enableKeyRotation"] is True
    cw = json.loads(key.properties["policy"])["Statement"][1]
    assert cw["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    alarm_names = sorted(r.properties["name"] for r in res.monitor.by_type("aws:cloudwatch/metricAlarm:MetricAlarm"))
    assert sorted(cw["Condition"]["ArnLike"]["aws:SourceArn"]) == [
        f"arn:aws:cloudwatch:us-east-1:{FAKE_ACCOUNT}:alarm:{n}" for n in alarm_names]


def test_one_email_subscription_per_address():
    res = _run(_args(name="s", alarm_emails=["a@example.org", "b@example.org"]))
    subs = res.monitor.by_type("aws:sns/topicSubscription:TopicSubscription")
    assert sorted(s.properties["endpoint"] for s in subs) == ["a@example.org", "b@example.org"]
    assert {s.properties["protocol"] for s in subs} == {"email"}
    assert {s.properties["topic"] for s in subs} == {f"arn:aws:sns:us-east-1:{FAKE_ACCOUNT}:s-alarms"}


def test_outputs_and_parentage():
    res = _run(_args(expected_processing_s=900), name="gpuburst-dev-slides")
    out = res.outputs
    assert out["queue_url"] == f"https://sqs.us-east-1.amazonaws.com/{FAKE_ACCOUNT}/gpuburst-dev-slides"
    assert out["queue_arn"] == f"arn:aws:sqs:us-east-1:{FAKE_ACCOUNT}:gpuburst-dev-slides"
    assert out["dlq_arn"] == f"arn:aws:sqs:us-east-1:{FAKE_ACCOUNT}:gpuburst-dev-slides-dlq"
    assert out["dlq_url"].endswith("/gpuburst-dev-slides-dlq")
    assert out["visibility_timeout_s"] == 1800 and out["fifo"] is False
    (comp,) = res.monitor.by_type("gpuburst:index:WorkQueue")
    children = [r for r in res.registrations if r is not comp]
    assert children and all(r.parent == comp.urn for r in children)
