"""Test helpers shared by the worker's server tests: queues with a dead-letter queue, slides in S3, queue counts."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import boto3

from worker.consumer_settings import ConsumerSettings

ROOT = Path(__file__).resolve().parents[2]
SLIDES, RESULTS = "slides-in", "results-out"
OUT = f"s3://{RESULTS}/run/"  # where the server tests' messages ask for their results


def aws_child_env(endpoint_url: str) -> dict[str, str]:
    """Environment for a child process that talks to the test's moto_server."""
    from moto_server import aws_env

    return aws_env(endpoint_url)


def consumer_settings(url: str, **kw) -> ConsumerSettings:
    """ConsumerSettings for an in-process consumer under test: job mode, no long polls, short visibility, no
    retry backoff, and no hard exit after the grace period; `kw` overrides any of them."""
    base = dict(queue_url=url, mode="job", wait_time_s=0, visibility_timeout_s=30,
                visibility_extension_interval_s=10, retry_backoff_s=0, hard_exit_after_grace=False)
    base.update(kw)
    return ConsumerSettings(**base)


def clients() -> tuple[Any, Any]:
    """(s3, sqs) clients on the environment the `aws` fixture set."""
    return boto3.client("s3"), boto3.client("sqs")


def make_queues(sqs: Any, *, fifo: bool = False, max_receive: int = 3, name: str = "work") -> tuple[str, str]:
    """A work queue with a RedrivePolicy onto its own dead-letter queue; returns (work URL, DLQ URL)."""
    suffix = ".fifo" if fifo else ""
    extra = {"FifoQueue": "true"} if fifo else {}
    dlq = sqs.create_queue(QueueName=f"{name}-dlq{suffix}", Attributes=extra)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    attrs = {**extra, "VisibilityTimeout": "30",
             "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": str(max_receive)})}
    url = sqs.create_queue(QueueName=f"{name}{suffix}", Attributes=attrs)["QueueUrl"]
    return url, dlq


def make_buckets(s3: Any) -> None:
    """The input and output buckets."""
    for b in (SLIDES, RESULTS):
        s3.create_bucket(Bucket=b)


def slide_message(name: str, **kw: Any) -> dict:
    """A message body for the slide s3://slides-in/<name>.tif with its results under OUT; `kw` adds fields."""
    return {"slide": f"s3://{SLIDES}/{name}.tif", "output": OUT, **kw}


def put_slides(s3: Any, names: Any) -> None:
    """Stand-in slides s3://slides-in/<name>.tif (a TIFF signature and the name: the stand-in processor decodes
    nothing)."""
    for name in names:
        s3.put_object(Bucket=SLIDES, Key=f"{name}.tif", Body=b"II*\x00 not really a slide " + name.encode())


def send(sqs: Any, url: str, body: Any, *, group: str | None = None, dedup: str | None = None) -> str:
    """Send one message (a dict is JSON-encoded); returns its message id."""
    kwargs: dict[str, Any] = {"QueueUrl": url, "MessageBody": body if isinstance(body, str) else json.dumps(body)}
    if url.endswith(".fifo"):
        kwargs["MessageGroupId"] = group or "default"
        kwargs["MessageDeduplicationId"] = dedup or str(time.monotonic_ns())
    return sqs.send_message(**kwargs)["MessageId"]


def counts(sqs: Any, url: str) -> tuple[int, int]:
    """(visible, in flight) message counts of a queue."""
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(a["ApproximateNumberOfMessages"]), int(a["ApproximateNumberOfMessagesNotVisible"])


def drain(sqs: Any, url: str, *, wait_s: int = 1) -> list[dict]:
    """Receive every visible message (with attributes) without deleting them (they hide for 30 s)."""
    out: list[dict] = []
    while True:
        r = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_s, VisibilityTimeout=30,
                                MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"])
        if not r.get("Messages"):
            return out
        out.extend(r["Messages"])


def keys(s3: Any, bucket: str = RESULTS, *, attempts: bool = False) -> list[str]:
    """All keys in a bucket, sorted; the worker's attempt records (worker.attempts, under `.gpuburst-attempts/`)
    only with `attempts`: the tests that say "nothing written" mean no result."""
    from worker.attempts import ATTEMPTS_DIR

    found = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))
    return found if attempts else [k for k in found if f"/{ATTEMPTS_DIR}" not in f"/{k}"]


def get_json(s3: Any, key: str, bucket: str = RESULTS) -> dict:
    """One JSON object from S3."""
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


class Proc:
    """A worker subprocess with its output collected line by line on a thread; always killed in `close()`."""

    def __init__(self, args: list[str], env: dict[str, str], *, harness: bool = False) -> None:
        cmd = [sys.executable, str(ROOT / "tests" / "worker" / "consumer_harness.py")] if harness else [
            sys.executable, "-m", "worker"]
        full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.p = subprocess.Popen(cmd + args, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._new = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            with self._new:
                self.lines.append(line.rstrip("\n"))
                self._new.notify_all()

    def wait_for(self, needle: str, timeout_s: float, start: int = 0) -> str:
        """Wait until an output line (from index `start`) contains `needle`; fail with the output after timeout_s."""
        deadline = time.monotonic() + timeout_s
        with self._new:
            while True:
                for line in self.lines[start:]:
                    if needle in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no line with {needle!r} within {timeout_s} s; output:\n" + self.output)
                self._new.wait(timeout=min(left, 0.5))

    def finish(self, timeout_s: float) -> int:
        """Wait for exit and for the rest of the output; return the exit code (fail with the output after
        timeout_s, so a hang says where the process was)."""
        try:
            code = self.p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker did not exit within {timeout_s} s; output so far:\n"
                                 + self.output) from None
        self._reader.join(timeout=10)
        return code

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def signal(self, sig: int) -> None:
        self.p.send_signal(sig)

    def close(self) -> None:
        """Kill the process if it still runs (by its own handle)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
            self.p.wait(timeout=10)
        self._reader.join(timeout=10)
