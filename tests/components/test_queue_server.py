"""The WorkQueue's rendered attributes against a real moto_server: redrive after maxReceiveCount, visibility, FIFO.

The queues are created from the same pure functions the component uses (`queue_attributes`,
`dead_letter_attributes`, `redrive_policy`, `queue_tags`), so what is proved here is what the component deploys.
Every receive passes WaitTimeSeconds explicitly: the queues long-poll 20 s by default.
"""
from __future__ import annotations

import json
import time

import boto3
import pytest

from components import queue as q
from components.queue import WorkQueueArgs


def _create_pair(sqs, args: WorkQueueArgs, base: str) -> tuple[str, str]:
    """Create DLQ and work queue exactly as the component renders them; return (queue_url, dlq_url)."""
    work_name, dlq_name = q.queue_names(base, args.fifo)
    dlq_url = sqs.create_queue(QueueName=dlq_name, Attributes=q.dead_letter_attributes(args),
                               tags=q.queue_tags(args, "dead-letter"))["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    attrs = dict(q.queue_attributes(args), RedrivePolicy=q.redrive_policy(dlq_arn, args.max_receive_count))
    queue_url = sqs.create_queue(QueueName=work_name, Attributes=attrs, tags=q.queue_tags(args, "work"))["QueueUrl"]
    return queue_url, dlq_url


def _receive(sqs, url: str, wait_s: int = 1) -> list[dict]:
    return sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_s,
                               MessageSystemAttributeNames=["ApproximateReceiveCount"]).get("Messages", [])


@pytest.fixture
def sqs(aws):
    return boto3.client("sqs", endpoint_url=aws, region_name="us-east-1")


def test_the_server_accepts_and_reports_the_rendered_attributes(sqs):
    args = WorkQueueArgs(expected_processing_s=30, alarm_emails=["a@example.org"])
    queue_url, dlq_url = _create_pair(sqs, args, "attrs")
    got = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert got["VisibilityTimeout"] == "60"
    assert got["ReceiveMessageWaitTimeSeconds"] == "20"
    assert got["MessageRetentionPeriod"] == "345600"
    assert got["SqsManagedSseEnabled"] == "true"
    redrive = json.loads(got["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"].endswith(":attrs-dlq") and int(redrive["maxReceiveCount"]) == 5
    dlq = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["All"])["Attributes"]
    assert dlq["MessageRetentionPeriod"] == "1209600"
    assert sqs.list_queue_tags(QueueUrl=queue_url)["Tags"] == {
        q.TAG_EXPECTED_PROCESSING: "30", q.TAG_ROLE: "work"}


def test_a_message_received_max_receive_count_times_lands_in_the_dlq(sqs):
    args = WorkQueueArgs(expected_processing_s=30, alarm_emails=["a@example.org"])
    queue_url, dlq_url = _create_pair(sqs, args, "redrive")
    sqs.send_message(QueueUrl=queue_url, MessageBody='{"slide": "s3://b/slides/poison.svs"}')
    for attempt in range(1, args.max_receive_count + 1):
        (msg,) = _receive(sqs, queue_url)
        assert int(msg["Attributes"]["ApproximateReceiveCount"]) == attempt
        # The worker fails without deleting; release at once instead of waiting out the visibility timeout.
        sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0)
    assert _receive(sqs, queue_url) == []          # the next receive moves it instead of delivering it
    (dead,) = _receive(sqs, dlq_url)
    assert dead["Body"] == '{"slide": "s3://b/slides/poison.svs"}'
    assert _receive(sqs, queue_url, wait_s=0) == []


def test_the_visibility_timeout_hides_a_received_message_for_its_duration(sqs):
    # expected 1 s -> visibility 2 s (the derivation under test, at a size a test can wait for).
    args = WorkQueueArgs(expected_processing_s=1, alarm_emails=["a@example.org"])
    queue_url, _ = _create_pair(sqs, args, "visibility")
    sqs.send_message(QueueUrl=queue_url, MessageBody="slide")
    (first,) = _receive(sqs, queue_url)
    received_at = time.monotonic()
    assert _receive(sqs, queue_url, wait_s=1) == []          # still invisible ~1 s later
    time.sleep(max(0.0, received_at + q.derived_visibility_timeout_s(1) + 0.2 - time.monotonic()))
    (again,) = _receive(sqs, queue_url, wait_s=0)
    assert again["MessageId"] == first["MessageId"]
    assert int(again["Attributes"]["ApproximateReceiveCount"]) == 2


def test_fifo_pair_dedups_by_content_and_dead_letters_per_group(sqs):
    args = WorkQueueArgs(expected_processing_s=30, alarm_emails=["a@example.org"], fifo=True, max_receive_count=2)
    queue_url, dlq_url = _create_pair(sqs, args, "study")
    assert queue_url.endswith("/study.fifo") and dlq_url.endswith("/study-dlq.fifo")
    got = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["All"])["Attributes"]
    assert got["DeduplicationScope"] == "messageGroup" and got["FifoThroughputLimit"] == "perMessageGroupId"
    body = '{"slide": "s3://b/slides/a.svs", "study": "S1"}'
    for _ in range(2):  # the producer retries the same message: content-based dedup drops the second
        sqs.send_message(QueueUrl=queue_url, MessageBody=body, MessageGroupId="S1")
    for attempt in range(1, args.max_receive_count + 1):
        (msg,) = _receive(sqs, queue_url)
        assert int(msg["Attributes"]["ApproximateReceiveCount"]) == attempt
        sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=0)
    assert _receive(sqs, queue_url) == []
    (dead,) = _receive(sqs, dlq_url)
    assert dead["Body"] == body


def test_a_customer_key_is_accepted_on_both_queues_and_messages_still_flow(sqs, aws):
    """With the stack's data key (SSE-KMS) the rendered attributes name the key on both queues and a message still
    goes through (moto neither encrypts nor turns its SqsManagedSseEnabled default off; the component never sets it
    with a key: tests/components/test_queue.py)."""
    kms = boto3.client("kms", endpoint_url=aws, region_name="us-east-1")
    key_arn = kms.create_key(Description="data key")["KeyMetadata"]["Arn"]
    args = WorkQueueArgs(expected_processing_s=30, alarm_emails=["a@example.org"], kms_key_id=key_arn)
    queue_url, dlq_url = _create_pair(sqs, args, "cmk")
    for url in (queue_url, dlq_url):
        got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert got["KmsMasterKeyId"] == key_arn and got["KmsDataKeyReusePeriodSeconds"] == "300"
    sqs.send_message(QueueUrl=queue_url, MessageBody='{"slide": "s3://b/slides/a.svs"}')
    assert [m["Body"] for m in _receive(sqs, queue_url)] == ['{"slide": "s3://b/slides/a.svs"}']
