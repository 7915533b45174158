"""A slide that kills its worker is dead-lettered, not retried: two consumers SIGKILLed mid-slide against moto_server,
then the third receive goes to the DLQ with that reason without processing; a failed or released attempt, and a
record of another message, count no death."""
from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from sqs_helpers import (  # noqa: E402
    OUT,
    RESULTS,
    Proc,
    clients,
    consumer_settings,
    counts,
    drain,
    get_json,
    keys,
    make_buckets,
    make_queues,
    put_slides,
    send,
    slide_message,
)
from standin_processor import StandIn  # noqa: E402

from worker import attempts  # noqa: E402
from worker.message_actions import DLQ_REASON_ATTR  # noqa: E402
from worker.messages import parse_message  # noqa: E402
from worker.sqs_consumer import Consumer  # noqa: E402

RECORD = "run/.gpuburst-attempts/a"


# -- counting deaths ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("record, receives, kills", [
    (None, 2, 0),
    ({"message_id": "m", "receive_count": 1, "kills": 0, "state": "processing"}, 2, 1),  # died at receive 1
    ({"message_id": "m", "receive_count": 2, "kills": 1, "state": "processing"}, 3, 2),  # and again at 2
    ({"message_id": "m", "receive_count": 1, "kills": 0, "state": "ended"}, 2, 0),  # it ended: a retry, no death
    ({"message_id": "m", "receive_count": 2, "kills": 1, "state": "ended"}, 3, 1),  # deaths before stay counted
    ({"message_id": "other", "receive_count": 1, "kills": 5, "state": "processing"}, 2, 0),  # a redrive: new id
    ({"message_id": "m", "receive_count": 2, "kills": 0, "state": "processing"}, 2, 0),  # this very receive
    ({"message_id": "m", "receive_count": "x", "kills": None, "state": "processing"}, 2, 1),  # damaged figures
])
def test_deaths_are_counted_from_the_record_of_the_same_message_only(record, receives, kills):
    assert attempts.kills_before(record, "m", receives) == kills


def test_the_record_lives_beside_the_results_where_no_slide_id_can_reach():
    m = parse_message(json.dumps(slide_message("a")))
    assert str(attempts.attempt_uri(m)) == f"{OUT}.gpuburst-attempts/a"
    assert not str(attempts.attempt_uri(m)).endswith((".json", ".tif", ".png"))


# -- against moto_server -----------------------------------------------------------------------------------------
@pytest.fixture
def env(aws):
    s3, sqs = clients()
    make_buckets(s3)
    put_slides(s3, ["a"])
    return s3, sqs


def _wait_visible(sqs, url: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while counts(sqs, url) != (1, 0):
        assert time.monotonic() < deadline, f"the message did not come back: {counts(sqs, url)}"
        time.sleep(0.2)


@pytest.mark.slow  # two worker subprocesses
def test_a_slide_that_killed_two_workers_is_dead_lettered_with_that_reason(env):
    s3, sqs = env
    url, dlq = make_queues(sqs, max_receive=5)
    mid = send(sqs, url, slide_message("a"))
    args = ["consume", "--queue-url", url, "--mode", "job", "--wait-time", "1", "--max-messages", "1",
            "--visibility-timeout", "2", "--visibility-extension-interval", "1"]
    for receive in (1, 2):
        worker = Proc(["--die", "--"] + args, {}, harness=True)
        try:
            code = worker.finish(60)
        finally:
            worker.close()
        assert code == -9, worker.output  # SIGKILL, mid-slide: no final action, no log line after slide.processing
        assert "slide.processing" in worker.output and "slide.done" not in worker.output
        record = get_json(s3, RECORD)
        assert (record["state"], record["receive_count"], record["kills"]) == ("processing", receive, receive - 1)
        _wait_visible(sqs, url)
    proc = StandIn()
    c = Consumer(consumer_settings(url), proc)
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["dead-lettered"] and proc.calls == []  # not processed a third time
    (dead,) = drain(sqs, dlq)
    attrs = dead["MessageAttributes"]
    assert attrs[DLQ_REASON_ATTR]["StringValue"] == (
        "bad slide s3://slides-in/a.tif: it killed the worker processing it 2 times (the attempts ended without a "
        "result or a verdict, the last at receive 2: out of memory, a crash in a native parser, or a lost node); "
        "dead-lettered instead of retried")
    assert attrs["gpuburst-receive-count"]["StringValue"] == "3"
    assert attrs["gpuburst-source-message-id"]["StringValue"] == mid
    assert get_json(s3, RECORD) == {**get_json(s3, RECORD), "state": "ended", "kills": 2,
                                    "outcome": "dead-lettered: killed its workers"}
    assert keys(s3) == [] and counts(sqs, url) == (0, 0)


def test_one_death_is_retried_and_a_failed_attempt_is_no_death(env):
    s3, sqs = env
    url, dlq = make_queues(sqs, max_receive=5)
    mid = send(sqs, url, slide_message("a"))
    # Receive 1 fails as a transient error: the record ends "failed", which the next receive does not count.
    c = Consumer(consumer_settings(url, max_messages=1), StandIn(fail=RuntimeError("S3 throttled")))
    assert c.run() == 0 and [o.status for o in c.outcomes] == ["retry"]
    assert get_json(s3, RECORD)["state"] == "ended" and get_json(s3, RECORD)["outcome"] == "failed"
    # Receive 2 "dies": its record is left processing, as a SIGKILL leaves it.
    m = parse_message(json.dumps(slide_message("a")))
    attempts.write(s3, m, message_id=mid, receives=2, kills=0, state="processing")
    sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)  # the receive that died
    proc = StandIn()
    c = Consumer(consumer_settings(url), proc)
    assert c.run() == 0 and [o.status for o in c.outcomes] == ["done"] and proc.calls == ["a"]
    record = get_json(s3, RECORD)
    assert (record["receive_count"], record["kills"], record["state"]) == (3, 1, "ended")
    assert get_json(s3, "run/a.json")["message"]["receive_count"] == 3
    assert counts(sqs, dlq) == (0, 0)
    assert RESULTS in {b["Name"] for b in s3.list_buckets()["Buckets"]}


@pytest.mark.parametrize("interruptible", [True, False], ids=["cancelled", "released-by-the-watchdog"])
def test_a_released_slide_is_no_death(env, interruptible):
    # Stopped (SIGTERM) mid-slide: cancelled at its next progress report, or (a slide that cannot be interrupted)
    # released by the grace-period watchdog, which would then end the process: either way the record says so.
    s3, sqs = env
    url, _ = make_queues(sqs, max_receive=5)
    mid = send(sqs, url, slide_message("a"))
    c = Consumer(consumer_settings(url, grace_period_s=0.2), StandIn(2.6, interruptible=interruptible))

    def stop_when_processing():
        while c._phase != "processing":
            time.sleep(0.02)
        c.request_stop("test")

    threading.Thread(target=stop_when_processing, daemon=True).start()
    assert c.run() == 0 and [o.status for o in c.outcomes] == ["released"]
    record = get_json(s3, RECORD)
    assert (record["state"], record["outcome"]) == ("ended", "released")
    assert attempts.kills_before(record, mid, 2) == 0
