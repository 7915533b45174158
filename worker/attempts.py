"""The attempt record: a small S3 object written before a slide is processed and marked ended after, so a slide whose
processing kills its worker (out of memory, a native parser's crash) is told from an ordinary redelivery.

SQS counts receives but cannot say why one ended, and a killed worker says nothing; its scratch disk goes with its
pod. So the worker writes `<output>.gpuburst-attempts/<slide_id>` (JSON: message id, receive count, state
`processing`) before it opens the slide and rewrites it `ended` when it is done with it, whatever the outcome. A
record still `processing` from an earlier receive of the same message means that receive's worker died mid-slide;
after `max_slide_kills` such deaths the next worker dead-letters the message at once, with that reason, instead of
letting it kill workers until `maxReceiveCount`. The record is rewritten, never deleted: the worker's role may put
objects under its results prefix but not delete them (docs/security.md). A redriven message has a new id, so it
starts with no deaths counted. The key cannot collide with a result: a slide_id never starts with '.'.
"""
from __future__ import annotations

import json
import socket
import time
from typing import Any

from worker.messages import S3Uri, SlideMessage

#: The folder, under a message's output prefix, that holds one attempt record per slide_id.
ATTEMPTS_DIR = ".gpuburst-attempts/"


def attempt_uri(m: SlideMessage) -> S3Uri:
    """Where the attempt record of this message's slide lives."""
    return m.output.child(ATTEMPTS_DIR + m.slide_id)


def kills_before(record: dict[str, Any] | None, message_id: str, receives: int) -> int:
    """How many earlier receives of this message ended with their worker killed mid-slide: the deaths the record
    already counts, plus one when it is still `processing` from an earlier receive. A record of another message (a
    redrive, a resend) counts nothing."""
    if not record or record.get("message_id") != message_id:
        return 0
    kills = _int(record.get("kills"))
    if record.get("state") == "processing" and _int(record.get("receive_count")) < receives:
        kills += 1
    return kills


def kill_reason(m: SlideMessage, kills: int, record: dict[str, Any] | None) -> str:
    """The one-line dead-letter reason for a slide that killed `kills` workers."""
    last = _int((record or {}).get("receive_count"))
    return (f"bad slide {m.slide}: it killed the worker processing it {kills} times (the attempts ended without a "
            f"result or a verdict, the last at receive {last}: out of memory, a crash in a native parser, or a lost "
            f"node); dead-lettered instead of retried")


def write(s3: Any, m: SlideMessage, *, message_id: str, receives: int, kills: int, state: str,
          outcome: str = "") -> None:
    """Write the record: `state` is "processing" (before the slide is opened) or "ended" (with its `outcome`)."""
    body = {"message_id": message_id, "receive_count": receives, "kills": kills, "state": state,
            "slide": str(m.slide), "slide_id": m.slide_id, "host": socket.gethostname(),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if outcome:
        body["outcome"] = outcome
    uri = attempt_uri(m)
    s3.put_object(Bucket=uri.bucket, Key=uri.key, Body=(json.dumps(body, sort_keys=True) + "\n").encode(),
                  ContentType="application/json")


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
