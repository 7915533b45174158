"""A background thread that keeps one in-flight SQS message invisible while its slide is being processed."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from worker.logfmt import event
from worker.s3io import error_code

log = logging.getLogger("worker.heartbeat")


class Heartbeat:
    """Every `interval_s`, reset the message's visibility timeout to `timeout_s` from now, until stopped.

    Use as a context manager around the work on one message. `lost` turns True when SQS refuses an extension
    because the receipt handle is no longer valid (the message was deleted, or its 12-hour visibility limit passed).
    """

    def __init__(self, sqs: Any, queue_url: str, receipt_handle: str, *, timeout_s: int, interval_s: float,
                 fields: dict[str, Any] | None = None) -> None:
        if not 0 < interval_s < timeout_s:
            raise ValueError(f"heartbeat interval {interval_s} s must be > 0 and < the visibility timeout "
                             f"{timeout_s} s")
        self._sqs = sqs
        self._queue_url = queue_url
        self._receipt = receipt_handle
        self._timeout_s = int(timeout_s)
        self._interval_s = float(interval_s)
        self._fields = dict(fields or {})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="visibility-heartbeat", daemon=True)
        self.extensions = 0
        """How many extensions SQS accepted so far."""
        self.lost = False
        """True once SQS rejected the receipt handle: another consumer may now own the message."""

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop extending (idempotent); returns once the thread has finished any call in progress."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(self._interval_s):
            try:
                self._sqs.change_message_visibility(QueueUrl=self._queue_url, ReceiptHandle=self._receipt,
                                                    VisibilityTimeout=self._timeout_s)
                self.extensions += 1
                log.debug(event("visibility.extended", **self._fields, timeout_s=self._timeout_s,
                                seconds=time.monotonic() - t0))
            except Exception as e:  # noqa: BLE001 - a heartbeat must never crash the worker
                code = error_code(e)
                if code in ("ReceiptHandleIsInvalid", "InvalidParameterValue", "MessageNotInflight"):
                    self.lost = True
                log.warning(event("visibility.extend_failed", **self._fields, error=code or type(e).__name__,
                                  detail=str(e), seconds=time.monotonic() - t0))
