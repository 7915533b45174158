"""The final actions on a received SQS message: delete, dead-letter with its reason, retry after a backoff, release."""
from __future__ import annotations

import logging
import time
from typing import Any

from worker import s3io
from worker.logfmt import event
from worker.outcome import Outcome

log = logging.getLogger("worker.consumer")

#: Upper bound of the retry backoff after a failed attempt, in seconds (SQS allows up to 12 h).
MAX_BACKOFF_S = 900
#: Names of the message attributes put on a message the consumer sends to the dead-letter queue.
DLQ_REASON_ATTR = "gpuburst-reason"
DLQ_ATTRS = (DLQ_REASON_ATTR, "gpuburst-source-queue", "gpuburst-source-message-id", "gpuburst-receive-count")


class MessageActions:
    """The Consumer's final actions on a message (a mixin: it uses the Consumer's sqs, settings, dlq_url,
    max_receive_count and _released)."""

    def _delete(self, msg: dict) -> None:
        try:
            self.sqs.delete_message(QueueUrl=self.settings.queue_url, ReceiptHandle=msg["ReceiptHandle"])
        except Exception as e:  # noqa: BLE001 - it comes back, and is then skipped as already done
            log.warning(event("message.delete_failed", msg=msg["MessageId"], error=s3io.error_code(e) or
                              type(e).__name__, detail=str(e)))

    def _change_visibility(self, msg: dict, seconds: int) -> bool:
        try:
            self.sqs.change_message_visibility(QueueUrl=self.settings.queue_url, ReceiptHandle=msg["ReceiptHandle"],
                                               VisibilityTimeout=int(seconds))
            return True
        except Exception as e:  # noqa: BLE001 - the message then reappears when its visibility times out
            log.warning(event("message.visibility_failed", msg=msg["MessageId"], error=s3io.error_code(e) or
                              type(e).__name__, detail=str(e)))
            return False

    def _release_locked(self, msg: dict, reason: str) -> None:
        """Make the message visible again at once (caller holds self._lock); an attempt still in progress (the
        watchdog releasing a slide that cannot be interrupted) is marked ended, so the next receive does not count
        this stop as the slide killing its worker."""
        self._change_visibility(msg, 0)
        self._released = True
        self._end_attempt("released", locked=True)
        log.warning(event("message.released", msg=msg["MessageId"], reason=reason))

    def _retry(self, msg: dict, reason: str, base: Outcome, receives: int, t0: float) -> Outcome:
        """Leave the message for redelivery after a backoff; SQS's redrive moves it to the DLQ after maxReceiveCount."""
        backoff = 0 if self.settings.retry_backoff_s == 0 else min(
            self.settings.retry_backoff_s * 2 ** (receives - 1), MAX_BACKOFF_S)
        self._change_visibility(msg, backoff)
        base.status, base.reason, base.seconds = "retry", reason, time.monotonic() - t0
        limit = f"{receives}/{self.max_receive_count}" if self.max_receive_count else str(receives)
        log.error(event("slide.failed", slide_id=base.slide_id, msg=base.message_id, seconds=base.seconds,
                        error=reason, receive_count=limit, retry_in_s=backoff))
        return base

    def _dead_letter(self, msg: dict, reason: str, base: Outcome, t0: float) -> Outcome:
        """Send a permanently bad message to the DLQ with its reason, then delete it (one log line either way)."""
        mid = msg["MessageId"]
        base.reason = reason
        if not self.dlq_url:
            self._change_visibility(msg, MAX_BACKOFF_S)
            base.status, base.seconds = "retry", time.monotonic() - t0
            log.error(event("message.rejected", slide_id=base.slide_id, msg=mid, seconds=base.seconds, reason=reason,
                            detail="no dead-letter queue configured; left on the queue"))
            return base
        attrs = {
            DLQ_REASON_ATTR: reason[:1000],
            "gpuburst-source-queue": self.settings.queue_url,
            "gpuburst-source-message-id": mid,
            "gpuburst-receive-count": msg.get("Attributes", {}).get("ApproximateReceiveCount", "1"),
        }
        message_attrs = {k: {"DataType": "String", "StringValue": v} for k, v in attrs.items()}
        for k, v in (msg.get("MessageAttributes") or {}).items():
            if len(message_attrs) < 10 and k not in message_attrs:
                message_attrs[k] = {kk: vv for kk, vv in v.items() if kk in ("DataType", "StringValue", "BinaryValue")}
        kwargs: dict[str, Any] = {"QueueUrl": self.dlq_url, "MessageBody": msg["Body"] or "(empty)",
                                  "MessageAttributes": message_attrs}
        if self.dlq_url.endswith(".fifo"):
            kwargs["MessageGroupId"] = msg.get("Attributes", {}).get("MessageGroupId") or "gpuburst-dead-letter"
            kwargs["MessageDeduplicationId"] = mid
        try:
            self.sqs.send_message(**kwargs)
            self._delete(msg)
        except Exception as e:  # noqa: BLE001 - could not move it: leave it, redrive will
            base.status, base.seconds = "retry", time.monotonic() - t0
            log.error(event("message.dead_letter_failed", slide_id=base.slide_id, msg=mid, seconds=base.seconds,
                            reason=reason, error=s3io.error_code(e) or type(e).__name__, detail=str(e)))
            return base
        base.status, base.seconds = "dead-lettered", time.monotonic() - t0
        log.error(event("message.dead_lettered", slide_id=base.slide_id, msg=mid, seconds=base.seconds,
                        reason=reason, dlq=self.dlq_url.rsplit("/", 1)[-1]))
        return base
