"""A slide over the limits through the consumer against moto_server: dead-lettered at once with its one-line reason,
never retried nor decoded; an object or prefix too large refused from its HEAD or listing, before any download; the
consumer's own limits, not the environment's, in force while a message is processed."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "slides")]

from slide_bombs import declared_dims_bomb, forbid_decoding  # noqa: E402
from sqs_helpers import (  # noqa: E402, E501
    OUT,
    SLIDES,
    clients,
    consumer_settings,
    counts,
    drain,
    keys,
    make_buckets,
    make_queues,
    send,
)
from standin_processor import StandIn  # noqa: E402

from worker.message_actions import DLQ_REASON_ATTR  # noqa: E402
from worker.slides.limits import SlideLimits, current_limits  # noqa: E402
from worker.sqs_consumer import Consumer  # noqa: E402


class CallsS3:
    """The real boto3 S3 client with every call recorded as (method, Bucket, Key/Prefix): a spy, calls go through."""

    def __init__(self, real):
        self.real = real
        self.calls: list[tuple[str, str | None, str | None]] = []

    def __getattr__(self, name):
        attr = getattr(self.real, name)
        if not callable(attr):
            return attr

        def call(*args, **kw):
            self.calls.append((name, kw.get("Bucket", args[1] if len(args) > 1 else None),
                               kw.get("Key", kw.get("Prefix", args[2] if len(args) > 2 else None))))
            return attr(*args, **kw)
        return call

    def downloads(self) -> list[tuple]:
        return [c for c in self.calls if c[0] in ("get_object", "download_file", "download_fileobj")]


@pytest.fixture
def queues(aws):
    s3, sqs = clients()
    make_buckets(s3)
    url, dlq = make_queues(sqs, max_receive=5)
    return s3, sqs, url, dlq


def _reason(sqs, dlq) -> tuple[str, str]:
    dead = drain(sqs, dlq)
    assert len(dead) == 1
    attrs = dead[0]["MessageAttributes"]
    return attrs[DLQ_REASON_ATTR]["StringValue"], attrs["gpuburst-receive-count"]["StringValue"]


@pytest.mark.slow
def test_a_bomb_is_dead_lettered_on_its_first_receive_with_its_line_and_never_decoded(queues, tmp_path,
                                                                                      monkeypatch):
    from worker.device import select_device
    from worker.models.loading import load_model
    from worker.sqs_consumer import model_processor

    s3, sqs, url, dlq = queues
    bomb = declared_dims_bomb(tmp_path / "bomb.tif")
    s3.upload_file(str(bomb), SLIDES, "in/bomb.tif")
    send(sqs, url, {"slide": f"s3://{SLIDES}/in/bomb.tif", "output": OUT})
    c = Consumer(consumer_settings(url, scratch_dir=str(tmp_path / "scratch")),
                 model_processor(load_model(None, select_device("cpu"))))
    calls = forbid_decoding(monkeypatch)  # a decode would raise AssertionError: a transient failure, retried
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["dead-lettered"]
    reason, receives = _reason(sqs, dlq)
    assert reason == (f"bad slide s3://{SLIDES}/in/bomb.tif: bomb.tif: directory 0 declares 1000000 × 1000000 px "
                      f"(1.0e12 px) over the limit of 4.0e10 px (SLIDE_MAX_PIXELS)")
    assert receives == "1" and calls == []
    assert keys(s3) == [] and counts(sqs, url) == (0, 0)  # nothing written, nothing left to retry


def test_the_consumers_limits_not_the_environments_apply_while_it_processes(queues, monkeypatch):
    s3, sqs, url, dlq = queues
    s3.put_object(Bucket=SLIDES, Key="in/a.tif", Body=b"II*\x00 a stand-in slide")
    send(sqs, url, {"slide": f"s3://{SLIDES}/in/a.tif", "output": OUT})
    monkeypatch.setenv("SLIDE_MAX_LEVELS", "1")  # would refuse most slides: the settings must win
    mine = SlideLimits(max_levels=9, max_pixels=123_456)
    seen: list[SlideLimits] = []
    standin = StandIn()

    def processor(path, out, slide_id, progress):
        seen.append(current_limits())
        return standin(path, out, slide_id, progress)

    c = Consumer(consumer_settings(url, slide_limits=mine), processor)
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["done"] and seen == [mine]
    assert current_limits().max_levels == 1  # outside the message, the block is gone


def test_an_object_over_the_size_limit_is_dead_lettered_from_its_head_before_any_download(queues):
    s3, sqs, url, dlq = queues
    s3.put_object(Bucket=SLIDES, Key="in/big.tif", Body=b"II*\x00" + bytes(1996))
    send(sqs, url, {"slide": f"s3://{SLIDES}/in/big.tif", "output": OUT})
    spy, proc = CallsS3(s3), StandIn()
    c = Consumer(consumer_settings(url, slide_limits=SlideLimits(max_file_bytes=1999)), proc, s3=spy)
    assert c.run() == 0
    assert [o.status for o in c.outcomes] == ["dead-lettered"]
    reason, receives = _reason(sqs, dlq)
    assert reason == (f"bad slide s3://{SLIDES}/in/big.tif: the slide is 2,000 bytes (2 KiB) over the limit of "
                      f"1,999 bytes (SLIDE_MAX_FILE_BYTES); not downloaded")
    assert receives == "1" and proc.calls == [] and spy.downloads() == []
    assert ("head_object", SLIDES, "in/big.tif") in spy.calls
    # At its own size it is admitted (and downloaded).
    send(sqs, url, {"slide": f"s3://{SLIDES}/in/big.tif", "output": OUT})
    c = Consumer(consumer_settings(url, slide_limits=SlideLimits(max_file_bytes=2000)), proc, s3=spy)
    c.run()
    assert [o.status for o in c.outcomes] == ["done"] and proc.calls == ["big"]


def test_a_prefix_over_the_size_limit_is_dead_lettered_from_its_listing(queues):
    s3, sqs, url, dlq = queues
    for name, n in (("S1.mrxs", 100), ("S1/Data0000.dat", 900)):
        s3.put_object(Bucket=SLIDES, Key=f"in/case/{name}", Body=bytes(n))
    send(sqs, url, {"slide": f"s3://{SLIDES}/in/case/", "output": OUT})
    spy, proc = CallsS3(s3), StandIn()
    c = Consumer(consumer_settings(url, slide_limits=SlideLimits(max_file_bytes=999)), proc, s3=spy)
    assert c.run() == 0
    reason, _ = _reason(sqs, dlq)
    assert reason == (f"bad slide s3://{SLIDES}/in/case/: the slide is 1,000 bytes over the limit of 999 "
                      f"bytes (SLIDE_MAX_FILE_BYTES); not downloaded")
    assert proc.calls == [] and spy.downloads() == []
