"""The SQS consumer against a real moto_server: commit order, idempotence, visibility, DLQ, signals, FIFO studies."""
from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sqs_helpers import (  # noqa: E402
    OUT,
    RESULTS,
    SLIDES,
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

from worker.message_actions import DLQ_REASON_ATTR  # noqa: E402
from worker.sqs_consumer import Consumer  # noqa: E402


@pytest.fixture
def env(aws, tmp_path):
    s3, sqs = clients()
    make_buckets(s3)
    put_slides(s3, ("a", "b", "c", "d", "e", "f", "a0", "a1", "a2", "a3", "b0", "b1", "b2"))
    return s3, sqs


class RecordingS3:
    """The real boto3 S3 client, with the order of result writes recorded (a spy, not a mock: calls go through)."""

    def __init__(self, real):
        self.real = real
        self.writes: list[str] = []

    def upload_file(self, path, bucket, key, **kw):
        self.writes.append(key)
        return self.real.upload_file(path, bucket, key, **kw)

    def put_object(self, **kw):
        self.writes.append(kw["Key"])
        return self.real.put_object(**kw)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_job_mode_commits_three_outputs_summary_last_and_deletes(env):
    s3, sqs = env
    url, dlq = make_queues(sqs)
    mid = send(sqs, url, slide_message("a", study="S1", sequence=0))
    spy = RecordingS3(s3)
    c = Consumer(consumer_settings(url), StandIn(), s3=spy)
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["done"]
    # The attempt record before the slide is opened and once it is done with, then the commit, summary last.
    record = "run/.gpuburst-attempts/a"
    assert spy.writes == [record, record, "run/a.overlay.ome.tif", "run/a.preview.png", "run/a.json"]
    assert keys(s3) == ["run/a.json", "run/a.overlay.ome.tif", "run/a.preview.png"]
    assert get_json(s3, record) == {**get_json(s3, record), "message_id": mid, "state": "ended",
                                    "outcome": "processed", "kills": 0, "receive_count": 1}
    summary = get_json(s3, "run/a.json")
    head = s3.head_object(Bucket=SLIDES, Key="a.tif")
    assert summary["input"]["etag"] == head["ETag"]
    assert summary["input"]["size_bytes"] == head["ContentLength"]
    assert summary["message"]["id"] == mid and summary["message"]["receive_count"] == 1
    assert summary["tiles_seen"] == 4  # the pipeline's own fields survive
    assert summary["outputs"]["overlay"] == f"{OUT}a.overlay.ome.tif"
    assert counts(sqs, url) == (0, 0) and counts(sqs, dlq) == (0, 0)
    assert c.exit_reason == "queue empty"


def test_redelivery_of_a_finished_slide_is_skipped_and_deleted(env):
    s3, sqs = env
    url, _ = make_queues(sqs)
    first = send(sqs, url, slide_message("a"))
    send(sqs, url, slide_message("a"))
    proc = StandIn()
    spy = RecordingS3(s3)
    c = Consumer(consumer_settings(url), proc, s3=spy)
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["done", "skipped"]
    assert proc.calls == ["a"]
    assert len(spy.writes) == 5  # nothing written again (2 attempt records, 3 results)
    assert get_json(s3, "run/a.json")["message"]["id"] == first
    assert counts(sqs, url) == (0, 0)


def test_changed_input_is_processed_again_and_replaces_the_summary(env):
    s3, sqs = env
    url, _ = make_queues(sqs)
    send(sqs, url, slide_message("a"))
    Consumer(consumer_settings(url), StandIn()).run()
    old = get_json(s3, "run/a.json")["input"]["etag"]
    s3.put_object(Bucket=SLIDES, Key="a.tif", Body=b"II*\x00 rescanned")
    send(sqs, url, slide_message("a"))
    c = Consumer(consumer_settings(url), StandIn())
    c.run()
    assert [o.status for o in c.outcomes] == ["done"]
    new = get_json(s3, "run/a.json")["input"]["etag"]
    assert new != old and new == s3.head_object(Bucket=SLIDES, Key="a.tif")["ETag"]


def test_concurrent_commit_by_another_worker_is_not_duplicated(env):
    s3, sqs = env
    url, _ = make_queues(sqs)
    send(sqs, url, slide_message("a"))
    etag = s3.head_object(Bucket=SLIDES, Key="a.tif")["ETag"]

    def other_worker_commits(_slide_id):
        s3.put_object(Bucket=RESULTS, Key="run/a.json", Body=json.dumps({"input": {"etag": etag}, "by": "other"}))

    c = Consumer(consumer_settings(url), StandIn(during=other_worker_commits))
    assert c.run() == 0
    assert [(o.status, o.reason) for o in c.outcomes] == [("skipped", "another worker committed this slide first")]
    assert get_json(s3, "run/a.json")["by"] == "other"
    assert counts(sqs, url) == (0, 0)


def test_incomplete_local_results_upload_nothing_and_leave_the_message(env):
    s3, sqs = env
    url, dlq = make_queues(sqs, max_receive=5)
    send(sqs, url, slide_message("a"))
    c = Consumer(consumer_settings(url, max_messages=1), StandIn(skip_suffix=".preview.png"))
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["retry"]
    assert "did not write a.preview.png" in c.outcomes[0].reason
    assert keys(s3) == []
    assert counts(sqs, url) == (1, 0)  # retry_backoff 0: visible again at once
    assert counts(sqs, dlq) == (0, 0)


def test_visibility_is_extended_so_a_second_consumer_never_gets_the_slide(env):
    s3, sqs = env
    url, _ = make_queues(sqs)
    send(sqs, url, slide_message("a"))
    slow = StandIn(delay_s=4.5)
    a = Consumer(consumer_settings(url, visibility_timeout_s=2, visibility_extension_interval_s=0.5, wait_time_s=1),
                 slow)
    b_proc = StandIn()
    b = Consumer(consumer_settings(url, mode="service", idle_exit_s=6, wait_time_s=1, visibility_timeout_s=2,
                          visibility_extension_interval_s=0.5), b_proc)
    ta = threading.Thread(target=a.run)
    ta.start()
    while not slow.calls:  # consumer A holds the message now
        time.sleep(0.05)
    b.run()  # polls concurrently for 6 s: > 2x the visibility timeout
    ta.join(timeout=30)
    assert [o.status for o in a.outcomes] == ["done"]
    assert b.outcomes == [] and b_proc.calls == []
    assert slow.calls == ["a"]
    assert get_json(s3, "run/a.json")["message"]["receive_count"] == 1
    assert counts(sqs, url) == (0, 0)


def test_malformed_contract_violation_and_missing_slide_go_to_the_dlq_with_one_line_each(env, caplog):
    s3, sqs = env
    url, dlq = make_queues(sqs)
    send(sqs, url, '{"slide": "s3://slides-in/a.tif", "output": ')
    send(sqs, url, {"slide": "s3://slides-in/a.tif", "output": "s3://results-out/no-slash"})
    send(sqs, url, slide_message("never-uploaded"))
    send(sqs, url, slide_message("b"))
    caplog.set_level(logging.INFO)
    c = Consumer(consumer_settings(url), StandIn())
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["dead-lettered"] * 3 + ["done"]
    dead = drain(sqs, dlq)
    reasons = sorted(m["MessageAttributes"][DLQ_REASON_ATTR]["StringValue"] for m in dead)
    assert len(reasons) == 3
    assert reasons[0] == "bad slide s3://slides-in/never-uploaded.tif: slide object not found"
    assert reasons[1].startswith("contract violation: body=") and "is not JSON" in reasons[1]
    assert reasons[2].startswith('contract violation: output="s3://results-out/no-slash"')
    assert all(m["MessageAttributes"]["gpuburst-source-queue"]["StringValue"] == url for m in dead)
    dl_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("message.dead_lettered")]
    assert len(dl_lines) == 3 and all("\n" not in line for line in dl_lines)
    # No tracebacks for bad messages from the worker (asyncio may log an earlier test's unretrieved future here when
    # the garbage collector runs: not the worker's).
    assert not [r for r in caplog.records if r.exc_info and r.name.startswith("worker")]
    assert counts(sqs, url) == (0, 0)
    assert keys(s3) == ["run/b.json", "run/b.overlay.ome.tif", "run/b.preview.png"]


def test_transient_failures_are_retried_then_redriven_to_the_dlq(env):
    s3, sqs = env
    url, dlq = make_queues(sqs, max_receive=2)
    send(sqs, url, slide_message("a"))
    proc = StandIn(fail=RuntimeError("CUDA error: an illegal memory access was encountered"))
    c = Consumer(consumer_settings(url), proc)
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["retry", "retry"]
    assert "RuntimeError: CUDA error" in c.outcomes[0].reason
    assert proc.calls == ["a", "a"]
    dead = drain(sqs, dlq)
    assert len(dead) == 1 and json.loads(dead[0]["Body"])["slide"] == "s3://slides-in/a.tif"
    assert counts(sqs, url) == (0, 0) and keys(s3) == []


def test_without_a_dlq_bad_messages_are_logged_and_left(aws):
    s3, sqs = clients()
    url = sqs.create_queue(QueueName="plain")["QueueUrl"]
    send(sqs, url, "nonsense")
    c = Consumer(consumer_settings(url), StandIn())
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["retry"]
    assert counts(sqs, url) == (0, 1)  # hidden for the maximum backoff, still on the queue


def test_service_mode_keeps_fifo_order_per_study_and_carries_state(env, caplog):
    s3, sqs = env
    url, _ = make_queues(sqs, fifo=True)
    order = [("A", 0), ("B", 0), ("A", 1), ("B", 1), ("A", 3), ("B", 2), ("A", 2)]
    for study, seq in order:
        send(sqs, url, slide_message(f"{study.lower()}{seq}", study=study, sequence=seq), group=study)
    caplog.set_level(logging.INFO)
    proc = StandIn(areas={"tumour": 10.0})
    c = Consumer(consumer_settings(url, mode="service", idle_exit_s=1.5, wait_time_s=1), proc)
    assert c.run() == 0
    assert c.exit_reason == "idle for 1.5 s"
    per_study = {s: [i for i in proc.calls if i.startswith(s.lower())] for s in "AB"}
    assert per_study == {"A": ["a0", "a1", "a3", "a2"], "B": ["b0", "b1", "b2"]}
    a = c.studies["A"]
    assert (a.slides_done, a.last_sequence, a.gaps, a.out_of_order) == (4, 3, [[2, 2]], [2])
    assert a.class_areas_um2 == {"tumour": 40.0}
    assert c.studies["B"].slides_done == 3 and c.studies["B"].gaps == []
    s_a3 = get_json(s3, "run/a3.json")
    assert s_a3["sequence_check"] == "gap 2-2" and s_a3["study_state"]["slides_done"] == 3
    assert get_json(s3, "run/a2.json")["sequence_check"] == "out-of-order 2<=3"
    assert get_json(s3, "run/b2.json")["study_state"]["slide_ids"] == ["b0", "b1", "b2"]
    seq_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("study.sequence")]
    assert len(seq_lines) == 2 and "check=\"gap 2-2\"" in seq_lines[0]


def test_fifo_dead_letter_keeps_the_group(env):
    s3, sqs = env
    url, dlq = make_queues(sqs, fifo=True)
    send(sqs, url, "not json", group="S9")
    c = Consumer(consumer_settings(url), StandIn())
    c.run()
    dead = drain(sqs, dlq)
    assert [m["Attributes"]["MessageGroupId"] for m in dead] == ["S9"]


# --- subprocess tests: real signals --------------------------------------------------------------------------
def consume_args(url: str, *extra: str) -> list[str]:
    return ["consume", "--queue-url", url, "--mode", "job", "--wait-time", "1", "--retry-backoff", "0", *extra]


def test_sigterm_mid_slide_finishes_within_the_grace_period(env, aws):
    s3, sqs = env
    url, _ = make_queues(sqs)
    send(sqs, url, slide_message("a"))
    p = Proc(["--stand-in", "2", "--"] + consume_args(url, "--grace-period", "10"), {}, harness=True)
    try:
        p.wait_for("slide.processing", 30)
        t0 = time.monotonic()
        p.signal(signal.SIGTERM)
        assert p.finish(15) == 0, p.output
        assert time.monotonic() - t0 < 10
    finally:
        p.close()
    assert "consumer.stopping why=SIGTERM" in p.output
    assert "slide.done" in p.output
    assert keys(s3) == ["run/a.json", "run/a.overlay.ome.tif", "run/a.preview.png"]
    assert counts(sqs, url) == (0, 0)


class HangingRelease:
    """The real SQS client, except that making a message visible again (VisibilityTimeout=0) hangs until `unblock`."""

    def __init__(self, real):
        self.real = real
        self.unblock = threading.Event()

    def change_message_visibility(self, **kw):
        if kw.get("VisibilityTimeout") == 0:
            self.unblock.wait(60)
        return self.real.change_message_visibility(**kw)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_hung_sqs_does_not_keep_the_watchdog_past_its_bound(env, monkeypatch, caplog):
    """SIGTERM past the grace period on an uninterruptible slide while SQS does not answer the release: the watchdog
    gives up on the call after WATCHDOG_RELEASE_TIMEOUT_S (and would exit), the slide is not committed."""
    import worker.sqs_consumer as consumer_module

    monkeypatch.setattr(consumer_module, "WATCHDOG_SLACK_S", 0.2)
    monkeypatch.setattr(consumer_module, "WATCHDOG_RELEASE_TIMEOUT_S", 1.0)
    s3, sqs = env
    url, _ = make_queues(sqs)
    send(sqs, url, slide_message("a"))
    hanging = HangingRelease(sqs)
    c = Consumer(consumer_settings(url, grace_period_s=0.3), StandIn(4, interruptible=False), s3=s3, sqs=hanging)
    stopped = {}

    def stop_when_processing():
        while c._phase != "processing":
            time.sleep(0.05)
        stopped["at"] = time.time()
        c.request_stop("test")

    threading.Thread(target=stop_when_processing, daemon=True).start()
    try:
        with caplog.at_level(logging.INFO, logger="worker"):
            c.run()
    finally:
        hanging.unblock.set()
        for t in threading.enumerate():  # the unblocked release ends its attempt record and logs: let it finish
            if t.name == "grace-release":
                t.join(10)
    [timeout] = [r for r in caplog.records if "message.release_timeout" in r.getMessage()]
    assert timeout.created - stopped["at"] < 0.3 + 0.2 + 1.0 + 1.0  # grace + slack + release bound + the 0.5 s wake-up
    assert [o.status for o in c.outcomes] == ["released"] and keys(s3) == []


@pytest.mark.parametrize("uninterruptible", [False, True], ids=["cancelled-via-progress", "released-by-watchdog"])
def test_sigterm_past_the_grace_period_releases_the_message_at_once(env, aws, uninterruptible):
    s3, sqs = env
    url, _ = make_queues(sqs)
    send(sqs, url, slide_message("a"))
    extra = ["--uninterruptible"] if uninterruptible else []
    p = Proc(["--stand-in", "60", *extra, "--"] + consume_args(url, "--grace-period", "1"), {}, harness=True)
    try:
        p.wait_for("slide.processing", 30)
        t0 = time.monotonic()
        p.signal(signal.SIGTERM)
        assert p.finish(15) == 0, p.output
        assert time.monotonic() - t0 < 1 + 2 + 2  # grace period + watchdog slack + exit
    finally:
        p.close()
    assert "message.released" in p.output
    if uninterruptible:  # the stand-in never yields: the watchdog releases the message and ends the process
        assert "slide not interruptible" in p.output and 'reason="grace period over, message released"' in p.output
    else:  # the progress callback raised Cancelled inside the processor
        assert "grace period of 1 s after stop request ran out" in p.output
    assert keys(s3) == []
    r = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0, MessageSystemAttributeNames=["All"])
    assert len(r["Messages"]) == 1  # receivable immediately, not after the 600 s visibility timeout
    assert r["Messages"][0]["Attributes"]["ApproximateReceiveCount"] == "2"


# --- the real pipeline on small synthetic slides -----------------------------------------------------------------
@pytest.fixture(scope="module")
def synthetic_slide(tmp_path_factory) -> Path:
    from worker.devtools.synthetic import write_synthetic_slide

    return write_synthetic_slide(tmp_path_factory.mktemp("slides") / "real-1.ome.tif", width=1024, height=1024,
                                 seed=5, tissue_fraction=0.4)


def test_happy_path_with_the_real_pipeline(aws, synthetic_slide, tmp_path):
    import tifffile

    from worker import sqs_consumer as consumer

    s3, sqs = clients()
    make_buckets(s3)
    s3.upload_file(str(synthetic_slide), SLIDES, "study/real-1.ome.tif")
    url, dlq = make_queues(sqs)
    mid = send(sqs, url, {"slide": f"s3://{SLIDES}/study/real-1.ome.tif", "output": OUT, "study": "S"})
    code = consumer.run(consumer_settings(url, device="cpu", scratch_dir=str(tmp_path / "scratch")))
    assert code == 0
    assert keys(s3) == ["run/real-1.json", "run/real-1.overlay.ome.tif", "run/real-1.preview.png"]
    summary = get_json(s3, "run/real-1.json")
    assert summary["message"]["id"] == mid
    assert summary["input"]["etag"] == s3.head_object(Bucket=SLIDES, Key="study/real-1.ome.tif")["ETag"]
    assert summary["input"]["size_bytes"] == synthetic_slide.stat().st_size
    overlay = tmp_path / "overlay.ome.tif"
    s3.download_file(RESULTS, "run/real-1.overlay.ome.tif", str(overlay))
    with tifffile.TiffFile(overlay) as tif:
        assert tif.pages[0].shape[:2] and tif.is_ome
    png = s3.get_object(Bucket=RESULTS, Key="run/real-1.preview.png")["Body"].read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert counts(sqs, url) == (0, 0) and counts(sqs, dlq) == (0, 0)
    assert list((tmp_path / "scratch").iterdir()) == []  # scratch cleaned up


def test_corrupt_tiff_is_a_poison_message_sent_to_the_dlq_at_once(aws, tmp_path):
    from worker.device import select_device
    from worker.models.loading import load_model
    from worker.sqs_consumer import model_processor

    s3, sqs = clients()
    make_buckets(s3)
    s3.put_object(Bucket=SLIDES, Key="corrupt.tif", Body=b"II*\x00" + bytes(range(256)) * 8)
    url, dlq = make_queues(sqs, max_receive=5)
    send(sqs, url, slide_message("corrupt"))
    c = Consumer(consumer_settings(url), model_processor(load_model(None, select_device("cpu"))))
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["dead-lettered"]  # first receive: no retries wasted
    dead = drain(sqs, dlq)
    assert len(dead) == 1
    reason = dead[0]["MessageAttributes"][DLQ_REASON_ATTR]["StringValue"]
    assert reason.startswith("bad slide s3://slides-in/corrupt.tif: ") and "\n" not in reason
    assert dead[0]["MessageAttributes"]["gpuburst-receive-count"]["StringValue"] == "1"
    assert keys(s3) == [] and counts(sqs, url) == (0, 0)


def test_sigkill_mid_slide_leaves_it_to_be_finished_exactly_once_by_another_worker(aws, synthetic_slide):
    s3, sqs = clients()
    make_buckets(s3)
    s3.upload_file(str(synthetic_slide), SLIDES, "real-1.ome.tif")
    url, _ = make_queues(sqs)
    mid = send(sqs, url, {"slide": f"s3://{SLIDES}/real-1.ome.tif", "output": OUT})
    # Worker A: the real pipeline, held 30 s before it starts so the kill lands mid-slide; visibility 3 s, renewed
    # every 1 s, so the message comes back 3 s after A stops renewing.
    a = Proc(["--slow-before", "30", "--"] + consume_args(url, "--device", "cpu", "--visibility-timeout", "3",
                                                          "--visibility-extension-interval", "1"), {}, harness=True)
    try:
        a.wait_for("slide.processing", 60)
        time.sleep(1.5)  # at least one renewal: A holds the message past its first visibility window
        a.signal(signal.SIGKILL)
        a.finish(10)
    finally:
        a.close()
    assert "slide.done" not in a.output
    assert keys(s3) == []  # nothing committed by the killed worker
    assert counts(sqs, url) == (0, 1)  # still in flight: invisible until A's last renewal runs out
    b = Proc(consume_args(url, "--device", "cpu", "--max-messages", "1", "--wait-time", "10"), {})
    try:
        assert b.finish(90) == 0, b.output
    finally:
        b.close()
    assert b.output.count("slide.done") == 1, b.output
    assert keys(s3) == ["run/real-1.json", "run/real-1.overlay.ome.tif", "run/real-1.preview.png"]
    summary = get_json(s3, "run/real-1.json")
    assert summary["message"] == {**summary["message"], "id": mid, "receive_count": 2}
    assert counts(sqs, url) == (0, 0)
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages") is None


def test_verify_probe_is_acknowledged_not_dead_lettered(env):
    """`python -m components verify` sends a probe (attribute + body); the worker deletes it and writes nothing."""
    s3, sqs = env
    url, dlq = make_queues(sqs)
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"verify_probe": "probe-1"}),
                     MessageAttributes={"gpuburst-verify": {"DataType": "String", "StringValue": "probe-1"}})
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"verify_probe": "probe-2"}))  # body alone also counts
    c = Consumer(consumer_settings(url), StandIn())
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["probe", "probe"]
    assert counts(sqs, url) == (0, 0) and counts(sqs, dlq) == (0, 0)
    assert keys(s3) == []


def test_a_probe_shaped_body_with_other_keys_is_still_a_contract_violation(env):
    s3, sqs = env
    url, dlq = make_queues(sqs)
    send(sqs, url, {"verify_probe": "x", "slide": "s3://x/y.tif"})
    c = Consumer(consumer_settings(url), StandIn())
    c.run()
    assert [o.status for o in c.outcomes] == ["dead-lettered"]


def test_liveness_file_is_touched_by_the_main_loop(env, tmp_path):
    s3, sqs = env
    url, _ = make_queues(sqs)
    alive = tmp_path / "alive"
    send(sqs, url, slide_message("a"))
    c = Consumer(consumer_settings(url, liveness_file=str(alive)), StandIn())
    before = time.time()
    assert c.run() == 0
    assert alive.exists() and alive.stat().st_mtime >= before - 1


# --- multi-file slides: a `slide` prefix -------------------------------------------------------------------------
CASE = "in/case-7/"
# An MRXS-shaped slide (index file + data folder) and a folder marker, as a sync tool would upload it.
CASE_FILES = {"S1.mrxs": b"[GENERAL]\nindex", "S1/Index.dat": b"index data", "S1/Slidedat.ini": b"[GENERAL]\nv=1",
              "S1/Data0000.dat": b"\xff\xd8 tiles 0", "S1/Data0001.dat": b"\xff\xd8 tiles 1"}


def put_case(s3, files=CASE_FILES, prefix=CASE) -> None:
    s3.put_object(Bucket=SLIDES, Key=prefix, Body=b"")  # folder marker: skipped
    for rel, data in files.items():
        s3.put_object(Bucket=SLIDES, Key=prefix + rel, Body=data)


def test_a_prefix_reaches_the_processor_as_a_folder_and_its_redelivery_is_skipped(env, tmp_path):
    from worker import s3io
    from worker.messages import S3Uri

    s3, sqs = env
    put_case(s3)
    s3.put_object(Bucket=SLIDES, Key="in/case-70/x.dat", Body=b"a neighbour, not part of the slide")
    url, dlq = make_queues(sqs)
    first = send(sqs, url, {"slide": f"s3://{SLIDES}/{CASE}", "output": OUT})
    send(sqs, url, {"slide": f"s3://{SLIDES}/{CASE}", "output": OUT})
    proc = StandIn()
    spy = RecordingS3(s3)
    c = Consumer(consumer_settings(url, scratch_dir=str(tmp_path / "scratch")), proc, s3=spy)
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["done", "skipped"]
    assert c.outcomes[1].reason == "summary with the same input manifest exists (already done)"
    assert proc.calls == ["case-7"]
    path, is_dir, seen = proc.inputs[0]
    assert is_dir and path.name == "case-7" and path.parent.name == "input"
    assert seen == CASE_FILES
    assert [k for k in spy.writes if ".gpuburst-attempts" not in k] == [
        "run/case-7.overlay.ome.tif", "run/case-7.preview.png", "run/case-7.json"]
    summary = get_json(s3, "run/case-7.json")
    listing = s3io.list_prefix(s3, S3Uri(SLIDES, CASE))
    assert summary["input"] == {"uri": f"s3://{SLIDES}/{CASE}", "etag": listing.digest, "objects": 5,
                                "size_bytes": sum(len(b) for b in CASE_FILES.values())}
    assert summary["input"]["etag"].startswith("manifest-sha256:")
    assert summary["message"]["id"] == first and summary["message"]["body"]["slide"] == f"s3://{SLIDES}/{CASE}"
    assert summary["input_bytes"] == summary["input"]["size_bytes"]  # the stand-in saw every byte
    assert counts(sqs, url) == (0, 0) and counts(sqs, dlq) == (0, 0)
    assert list((tmp_path / "scratch").iterdir()) == []  # the downloaded folder is cleaned up


def test_a_changed_prefix_is_processed_again(env):
    s3, sqs = env
    put_case(s3)
    url, _ = make_queues(sqs)
    send(sqs, url, {"slide": f"s3://{SLIDES}/{CASE}", "output": OUT})
    Consumer(consumer_settings(url), StandIn()).run()
    old = get_json(s3, "run/case-7.json")["input"]
    s3.put_object(Bucket=SLIDES, Key=CASE + "S1/Data0001.dat", Body=b"\xff\xd8 tiles 9")  # same size, new ETag
    send(sqs, url, {"slide": f"s3://{SLIDES}/{CASE}", "output": OUT})
    proc = StandIn()
    c = Consumer(consumer_settings(url), proc)
    c.run()
    assert [o.status for o in c.outcomes] == ["done"]
    new = get_json(s3, "run/case-7.json")["input"]
    assert new["etag"] != old["etag"] and new["size_bytes"] == old["size_bytes"]
    assert proc.inputs[0][2]["S1/Data0001.dat"] == b"\xff\xd8 tiles 9"


def test_bad_prefixes_go_to_the_dlq_with_one_line_each(env):
    s3, sqs = env
    put_case(s3, {"../../outside.dat": b"x"}, prefix="in/evil/")
    s3.put_object(Bucket=SLIDES, Key="in/only-markers/", Body=b"")
    url, dlq = make_queues(sqs, max_receive=5)
    for slide in (f"s3://{SLIDES}/in/only-markers/", f"s3://{SLIDES}/in/never-uploaded/",
                  f"s3://{SLIDES}/in/evil/", "s3://no-such-bucket/in/case-7/", f"s3://{SLIDES}/in/S1.mrxs"):
        send(sqs, url, {"slide": slide, "output": OUT})
    proc = StandIn()
    c = Consumer(consumer_settings(url), proc)
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["dead-lettered"] * 5  # first receive each: no retries spent
    reasons = [m["MessageAttributes"][DLQ_REASON_ATTR]["StringValue"] for m in drain(sqs, dlq)]
    assert sorted(reasons) == sorted([
        f"bad slide s3://{SLIDES}/in/only-markers/: no objects under s3://{SLIDES}/in/only-markers/ "
        "(keys ending in '/' are folder markers and do not count)",
        f"bad slide s3://{SLIDES}/in/never-uploaded/: no objects under s3://{SLIDES}/in/never-uploaded/ "
        "(keys ending in '/' are folder markers and do not count)",
        f"bad slide s3://{SLIDES}/in/evil/: key='in/evil/../../outside.dat' under s3://{SLIDES}/in/evil/: would "
        "escape the download folder (a '..' segment); the prefix cannot be downloaded as one slide",
        "bad slide s3://no-such-bucket/in/case-7/: bucket not found",
        f'contract violation: slide="s3://{SLIDES}/in/S1.mrxs": is one file of a multi-file slide (.mrxs/.vms): '
        f"send the prefix that holds it and its data files instead, e.g. s3://{SLIDES}/in/",
    ])
    assert proc.calls == [] and keys(s3) == [] and counts(sqs, url) == (0, 0)


class PutDuringFirstGet(RecordingS3):
    """Writes `key` (rewriting or adding an object of the slide) just before the download's first GET (once)."""

    def __init__(self, real, key: str, body: bytes):
        super().__init__(real)
        self.key, self.body, self.done = key, body, False

    def get_object(self, **kw):
        if not self.done and kw.get("IfMatch"):
            self.done = True
            self.real.put_object(Bucket=SLIDES, Key=self.key, Body=self.body)
        return self.real.get_object(**kw)


def test_a_prefix_rewritten_during_the_download_is_retried_not_dead_lettered(env):
    s3, sqs = env
    put_case(s3)
    url, dlq = make_queues(sqs)
    send(sqs, url, {"slide": f"s3://{SLIDES}/{CASE}", "output": OUT})

    proc = StandIn()
    c = Consumer(consumer_settings(url), proc, s3=PutDuringFirstGet(s3, CASE + "S1/Index.dat", b"rescanned"))
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["retry", "done"]
    assert "PrefixChanged: " in c.outcomes[0].reason and "changed during the download" in c.outcomes[0].reason
    assert proc.calls == ["case-7"]  # the mixed first download never reached the processor
    assert proc.inputs[0][2]["S1/Index.dat"] == b"rescanned"
    assert counts(sqs, dlq) == (0, 0)


def test_an_object_added_during_the_download_is_caught_by_the_second_listing(env):
    s3, sqs = env
    put_case(s3)
    url, _ = make_queues(sqs)
    send(sqs, url, {"slide": f"s3://{SLIDES}/{CASE}", "output": OUT})

    proc = StandIn()
    c = Consumer(consumer_settings(url), proc, s3=PutDuringFirstGet(s3, CASE + "S1/Data0002.dat", b"late tiles"))
    c.run()
    assert [o.status for o in c.outcomes] == ["retry", "done"]
    assert f"objects under s3://{SLIDES}/{CASE} changed during the download" in c.outcomes[0].reason
    assert "S1/Data0002.dat" in proc.inputs[0][2] and get_json(s3, "run/case-7.json")["input"]["objects"] == 6


def test_a_bad_multi_file_slide_names_its_s3_file_not_the_scratch_folder(env, tmp_path):
    from worker.outcome import PermanentError

    s3, sqs = env
    put_case(s3)
    url, dlq = make_queues(sqs)
    send(sqs, url, {"slide": f"s3://{SLIDES}/{CASE}", "output": OUT})
    proc = StandIn(fail_with=lambda folder: PermanentError(f"{folder}/S1/Slidedat.ini: no [HIERARCHICAL] section"))
    c = Consumer(consumer_settings(url, scratch_dir=str(tmp_path / "scratch")), proc)
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["dead-lettered"]
    dead = drain(sqs, dlq)
    assert dead[0]["MessageAttributes"][DLQ_REASON_ATTR]["StringValue"] == (
        f"bad slide s3://{SLIDES}/{CASE}: s3://{SLIDES}/{CASE}S1/Slidedat.ini: no [HIERARCHICAL] section")


def test_a_prefix_over_the_size_limit_is_dead_lettered(env):
    s3, sqs = env
    put_case(s3)
    url, dlq = make_queues(sqs)
    send(sqs, url, {"slide": f"s3://{SLIDES}/{CASE}", "output": OUT})
    c = Consumer(consumer_settings(url, max_prefix_bytes=10), StandIn())
    c.run()
    assert [o.status for o in c.outcomes] == ["dead-lettered"]
    assert "holds more than 10 bytes (limit: 10 bytes per slide)" in c.outcomes[0].reason
