"""`python -m worker dlq list|redrive` on a real moto_server: reasons, receives, redrive by id or all, no duplicates."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sqs_helpers import (  # noqa: E402
    SLIDES,
    clients,
    consumer_settings,
    counts,
    drain,
    get_json,
    make_buckets,
    make_queues,
    put_slides,
    send,
    slide_message,
)
from standin_processor import StandIn  # noqa: E402

from worker import commands, dlq  # noqa: E402
from worker.sqs_consumer import Consumer  # noqa: E402


@pytest.fixture
def env(aws):
    s3, sqs = clients()
    make_buckets(s3)
    put_slides(s3, ("good1", "good2", "good3"))
    return s3, sqs


def run_out_of_receives(sqs, url: str, max_receive: int) -> None:
    """What a worker SIGKILLed during a long poll leaves behind, max_receive times: a receive SQS counted, no
    attempt, no reason; the next receive moves every such message to the dead-letter queue."""
    for _ in range(max_receive):
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0, WaitTimeSeconds=0)
        assert got.get("Messages"), "nothing to receive"
    assert not sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages")


def dlq_main(*args: str) -> int:
    return commands.main(["dlq", *args])


def consume(url: str, processor: StandIn) -> Consumer:
    c = Consumer(consumer_settings(url), processor)
    assert c.run() == 0
    return c


def test_list_shows_the_workers_reason_and_no_reason_when_receives_ran_out(env, capsys):
    s3, sqs = env
    url, dlq_url = make_queues(sqs, max_receive=2)
    send(sqs, url, slide_message("good1", study="s-1"))
    run_out_of_receives(sqs, url, 2)  # a good slide, dead-lettered without one failed attempt
    send(sqs, url, slide_message("missing"))
    consume(url, StandIn())  # the worker dead-letters it at once, with its reason
    assert counts(sqs, dlq_url) == (2, 0)

    assert dlq_main("list", "--queue-url", url) == 0  # the DLQ found from the work queue's RedrivePolicy
    text = capsys.readouterr().out
    assert text.splitlines()[0] == "2 message(s) in work-dlq (source queue: work)"
    assert text.splitlines()[1].split() == ["ID", "RECEIVES", "AGE", "SLIDE", "REASON"]
    [good] = [line for line in text.splitlines() if f"s3://{SLIDES}/good1.tif" in line]
    [bad] = [line for line in text.splitlines() if f"s3://{SLIDES}/missing.tif" in line]
    assert good.endswith("no reason: receives ran out")
    assert bad.endswith(f"bad slide s3://{SLIDES}/missing.tif: slide object not found")

    assert dlq_main("list", "--dlq-url", dlq_url, "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    by_slide = {m["slide"]: m for m in listed["messages"]}
    good, bad = by_slide[f"s3://{SLIDES}/good1.tif"], by_slide[f"s3://{SLIDES}/missing.tif"]
    assert (good["reason"], good["slide_id"], good["group"]) == (dlq.NO_REASON, "good1", None)
    assert good["receives"] >= 2 and bad["receives"] == 1  # SQS's count (listings add to it) / the worker's record
    assert bad["source_message_id"] and bad["source_queue"] == url
    assert all(0 <= m["age_s"] < 120 for m in listed["messages"])
    assert listed["source_queues"] == [url] and listed["in_flight_not_listed"] == 0
    assert counts(sqs, dlq_url) == (2, 0)  # listing released everything it received


def test_redrive_id_moves_only_that_one_and_the_slide_is_then_processed_once(env, capsys):
    s3, sqs = env
    url, dlq_url = make_queues(sqs, max_receive=1)
    send(sqs, url, slide_message("good1"))
    send(sqs, url, slide_message("good2"))
    run_out_of_receives(sqs, url, 1)
    letters = {d.slide_id: d for d in dlq.list_dead_letters(sqs, dlq_url)}
    assert sorted(letters) == ["good1", "good2"]

    assert dlq_main("redrive", "--dlq-url", dlq_url, "--id", letters["good1"].id) == 0  # source: the DLQ's only one
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "1 message(s) moved to work" and letters["good1"].id in out
    assert counts(sqs, dlq_url) == (1, 0) and counts(sqs, url) == (1, 0)
    # Look at the copy (a receive, which counts: give the work queue receives to spare first).
    policy = json.dumps({"deadLetterTargetArn": dlq.queue_arn(sqs, dlq_url), "maxReceiveCount": "3"})
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
    [copy] = drain(sqs, url)
    assert copy["MessageAttributes"][dlq.REDRIVE_ID_ATTR]["StringValue"] == letters["good1"].id
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=copy["ReceiptHandle"], VisibilityTimeout=0)

    standin = StandIn()
    c = consume(url, standin)
    assert standin.calls == ["good1"] and [o.status for o in c.outcomes] == ["done"]
    assert get_json(s3, "run/good1.json")["slide_id"] == "good1"
    assert counts(sqs, url) == (0, 0)
    assert [d.slide_id for d in dlq.list_dead_letters(sqs, dlq_url)] == ["good2"]

    assert dlq_main("redrive", "--dlq-url", dlq_url, "--id", letters["good1"].id) == 1  # gone: said, not guessed
    assert f"not found: {letters['good1'].id}" in capsys.readouterr().out


def test_redrive_all_moves_every_message_and_each_slide_is_processed_once(env, capsys):
    s3, sqs = env
    url, dlq_url = make_queues(sqs, max_receive=1)
    for name in ("good1", "good2", "good3"):
        send(sqs, url, slide_message(name))
    run_out_of_receives(sqs, url, 1)
    assert counts(sqs, dlq_url) == (3, 0)

    assert dlq_main("redrive", "--all", "--queue-url", url) == 0
    captured = capsys.readouterr()
    # moto has no StartMessageMoveTask: the command says so and moves message by message.
    assert "message-move task is not available here" in captured.err
    assert captured.out.splitlines()[0] == "3 message(s) moved to work"
    assert counts(sqs, dlq_url) == (0, 0) and counts(sqs, url) == (3, 0)
    standin = StandIn()
    consume(url, standin)
    assert sorted(standin.calls) == ["good1", "good2", "good3"]


class Crash(BaseException):
    """The process dying (SIGKILL, node loss): nothing after it runs."""


class DiesBeforeDelete:
    """The real SQS client, except that the process 'dies' when it is about to delete from the DLQ."""

    def __init__(self, real):
        self.real = real

    def delete_message(self, **kw):
        raise Crash()

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_redrive_that_dies_between_send_and_delete_never_makes_the_slide_run_twice(env):
    s3, sqs = env
    url, dlq_url = make_queues(sqs, max_receive=1)
    send(sqs, url, slide_message("good1"))
    run_out_of_receives(sqs, url, 1)
    with pytest.raises(Crash):
        dlq.redrive_messages(DiesBeforeDelete(sqs), dlq_url, url, hold_s=2)
    # Two copies now: the sent one, and the DLQ one held hidden, out of reach of every listing and redrive.
    assert counts(sqs, url) == (1, 0) and counts(sqs, dlq_url) == (0, 1)
    assert dlq.list_dead_letters(sqs, dlq_url) == []
    assert dlq.redrive_messages(sqs, dlq_url, url).moved == []
    standin = StandIn()
    consume(url, standin)
    assert standin.calls == ["good1"]

    time.sleep(2.5)  # the hold runs out: the DLQ copy shows again, and a person redrives it again
    assert [d.slide_id for d in dlq.list_dead_letters(sqs, dlq_url)] == ["good1"]
    assert len(dlq.redrive_messages(sqs, dlq_url, url).moved) == 1
    c = consume(url, standin)
    assert standin.calls == ["good1"]  # not computed again: the worker found its summary and skipped it
    assert [o.status for o in c.outcomes] == ["skipped"] and counts(sqs, url) == (0, 0)


def test_fifo_redrive_keeps_the_group_and_sqs_drops_a_repeated_send(env):
    s3, sqs = env
    url, dlq_url = make_queues(sqs, fifo=True, max_receive=1)
    send(sqs, url, slide_message("good1", study="s-7"), group="s-7")
    run_out_of_receives(sqs, url, 1)
    with pytest.raises(Crash):
        dlq.redrive_messages(DiesBeforeDelete(sqs), dlq_url, url, hold_s=2)
    time.sleep(2.5)
    moved = dlq.redrive_messages(sqs, dlq_url, url).moved  # sent again within SQS's 5-minute window
    assert len(moved) == 1 and counts(sqs, dlq_url) == (0, 0)
    got = drain(sqs, url)
    assert len(got) == 1  # the same deduplication id: SQS delivered the copy once
    assert got[0]["Attributes"]["MessageGroupId"] == "s-7"


def test_redrive_refuses_to_guess_the_destination(env, capsys):
    s3, sqs = env
    _, dlq_url = make_queues(sqs, max_receive=1)
    arn = dlq.queue_arn(sqs, dlq_url)
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "1"})
    sqs.create_queue(QueueName="other", Attributes={"RedrivePolicy": policy})  # a second source queue
    assert dlq_main("redrive", "--all", "--dlq-url", dlq_url) == commands.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is the dead-letter queue of 2 queue(s)" in err[0] and "pass --queue-url" in err[0]


def test_without_any_queue_the_command_says_what_it_needs(monkeypatch, capsys):
    monkeypatch.delenv("DLQ_URL", raising=False)
    monkeypatch.delenv("QUEUE_URL", raising=False)
    assert dlq_main("list") == commands.EXIT_USAGE
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("python -m worker dlq list: error: --dlq-url (or $DLQ_URL) is required")


def test_describe_reads_a_body_that_breaks_the_contract():
    msg = {"MessageId": "m-1", "Body": json.dumps({"slide": "s3://b/x.tif", "output": "s3://r/", "sequnce": 3}),
           "Attributes": {"ApproximateReceiveCount": "4", "SentTimestamp": "1000000"}}
    d = dlq.describe(msg, now=1000.0 + 3600)
    assert (d.reason, d.receives, d.slide, d.slide_id) == (dlq.NO_REASON, 3, "s3://b/x.tif", None)
    assert "sequnce" in d.body_problem and d.age_s == 3600.0


def test_the_move_task_is_started_to_the_work_queue_and_waited_for():
    """SQS's own move task (moto has none, so botocore's Stubber stands in for the two calls it makes)."""
    import boto3
    from botocore.stub import Stubber

    sqs = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    src, dst = "arn:aws:sqs:us-east-1:123456789012:work-dlq", "arn:aws:sqs:us-east-1:123456789012:work"
    with Stubber(sqs) as stub:
        stub.add_response("start_message_move_task", {"TaskHandle": "h-1"}, {"SourceArn": src, "DestinationArn": dst})
        running = {"Status": "RUNNING", "ApproximateNumberOfMessagesMoved": 1, "ApproximateNumberOfMessagesToMove": 2}
        done = {"Status": "COMPLETED", "ApproximateNumberOfMessagesMoved": 2, "ApproximateNumberOfMessagesToMove": 2}
        for r in (running, done):
            stub.add_response("list_message_move_tasks", {"Results": [r]}, {"SourceArn": src, "MaxResults": 1})
        assert dlq.start_move_task(sqs, src, dst) == "h-1"
        said: list[str] = []
        task = dlq.wait_move_task(sqs, src, say=said.append, sleep=lambda s: None)
        stub.assert_no_pending_responses()
    assert task["Status"] == "COMPLETED" and said == ["move task running: 1 of 2 moved"]


@pytest.mark.parametrize("args,says", [
    (["list", "--limit", "0"], "--limit 0: must be at least 1"),
    (["redrive", "--id", "m-1", "--method", "move-task"], "--method move-task moves every message"),
])
def test_usage_errors_are_one_line_before_any_call(args, says, capsys):
    assert dlq_main(*args, "--dlq-url", "http://127.0.0.1:9/123456789012/q-dlq") == commands.EXIT_USAGE
    [line] = capsys.readouterr().err.strip().splitlines()
    assert says in line
