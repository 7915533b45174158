"""The SQS consumer: long-polls the work queue, one slide at a time, commits results, and never loses a message."""
from __future__ import annotations

import json
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from worker import s3io
from worker.consumer_settings import ConsumerSettings
from worker.logfmt import event
from worker.message_actions import MessageActions
from worker.message_handling import MessageHandling
from worker.outcome import Cancelled, Outcome, where
from worker.study_state import StudyState

log = logging.getLogger("worker.consumer")

#: A slide processor: (local slide path, local output dir, slide_id, progress callback) -> summary dict. The slide
#: path is a file for a one-object slide and a folder (every object under the prefix) for a multi-file one.
#: It must write `<slide_id>.overlay.ome.tif`, `<slide_id>.preview.png` and `<slide_id>.json` into the output dir.
Processor = Callable[[Path, Path, str, Callable[..., None]], dict]

#: Seconds past the grace period before the watchdog releases a slide whose processor never checks for
#: cancellation (a processor that reports progress is cancelled right at the end of the grace period).
WATCHDOG_SLACK_S = 2.0
#: Longest the watchdog waits for its release call (SQS ChangeMessageVisibility) before it exits anyway: a slow or
#: retrying SQS must not keep a stopping pod past its grace period (the message then reappears at its visibility
#: timeout instead of at once).
WATCHDOG_RELEASE_TIMEOUT_S = 5.0


class Consumer(MessageHandling, MessageActions):
    """Receives messages one at a time and gives each exactly one final action: delete, dead-letter, retry, release."""

    def __init__(self, settings: ConsumerSettings, processor: Processor, *, sqs: Any = None, s3: Any = None) -> None:
        settings.validate()
        self.settings = settings
        self.processor = processor
        self.sqs = sqs or s3io.sqs_client()
        self.s3 = s3 or s3io.s3_client()
        self.outcomes: list[Outcome] = []
        self.model_load_s: float | None = None
        """Seconds this process took to load its model (set by `run`); charged to the first slide it finishes."""
        self._model_load_charged = False
        self.studies: dict[str, StudyState] = {}
        self.exit_reason = ""
        self.fifo = False
        self.dlq_url: str | None = None
        self.max_receive_count: int | None = None
        self._described = False
        self._stop = threading.Event()
        self._stop_at: float | None = None
        self._finished = threading.Event()
        self._lock = threading.Lock()
        self._phase = "idle"  # idle | processing | committing
        self._current: dict | None = None
        self._released = False
        self._attempt: dict | None = None
        """The attempt record in progress (worker.attempts): written before the processor runs, ended after."""

    # --- lifecycle -----------------------------------------------------------------------------------------------
    def request_stop(self, why: str = "signal") -> None:
        """Stop taking messages; the slide in progress may finish within grace_period_s (safe from a signal handler)."""
        if self._stop.is_set():
            # A second request: do not wait for the grace period any longer.
            self._stop_at = time.monotonic() - self.settings.grace_period_s
            return
        self._stop_at = time.monotonic()
        self._stop.set()
        log.info(event("consumer.stopping", why=why, grace_period_s=float(self.settings.grace_period_s)))

    @property
    def _deadline(self) -> float | None:
        return None if self._stop_at is None else self._stop_at + self.settings.grace_period_s

    def _past_deadline(self) -> bool:
        d = self._deadline
        return d is not None and time.monotonic() >= d

    def touch_liveness(self) -> None:
        """Mark the main loop as alive (see ConsumerSettings.liveness_file); never fails the work."""
        path = self.settings.liveness_file
        if path:
            try:
                Path(path).touch()
            except OSError as e:
                log.warning(event("liveness.touch_failed", path=path, error=str(e)))

    def check_cancel(self, *_: Any, **__: Any) -> None:
        """Raise Cancelled when the grace period is over (passed to the processor as part of its progress callback)."""
        self.touch_liveness()
        if self._past_deadline():
            raise Cancelled(f"grace period of {self.settings.grace_period_s:g} s after stop request ran out")

    def describe_queue(self) -> None:
        """Read the queue's FifoQueue and RedrivePolicy; find the dead-letter queue's URL (errors propagate)."""
        attrs = self.sqs.get_queue_attributes(QueueUrl=self.settings.queue_url,
                                              AttributeNames=["FifoQueue", "RedrivePolicy"]).get("Attributes", {})
        self.fifo = attrs.get("FifoQueue") == "true"
        policy = attrs.get("RedrivePolicy")
        if policy:
            p = json.loads(policy)
            self.max_receive_count = int(p.get("maxReceiveCount", 0)) or None
            name, _account = s3io.queue_name_from_arn(p["deadLetterTargetArn"])
            # SQS requires the DLQ in the same account and region as its source queue, so its URL is the work
            # queue's URL with the last segment replaced: no sqs:GetQueueUrl grant on the DLQ needed, only
            # sqs:SendMessage (and the DLQ key's kms:GenerateDataKey/Decrypt when it is KMS-encrypted).
            self.dlq_url = self.settings.queue_url.rsplit("/", 1)[0] + "/" + name
        log.info(event("queue.ready", queue=self.settings.queue_url, fifo=self.fifo, dlq=self.dlq_url,
                       max_receive_count=self.max_receive_count, mode=self.settings.mode,
                       visibility_timeout_s=self.settings.visibility_timeout_s,
                       extension_interval_s=float(self.settings.visibility_extension_interval_s)))
        self._described = True
        if not self.dlq_url:
            log.warning(event("queue.no_dlq", queue=self.settings.queue_url,
                              detail="no RedrivePolicy: bad messages are logged and left on the queue"))

    def run(self) -> int:
        """Consume until the mode's exit condition; return the process exit code (0, or 1 if SQS keeps failing)."""
        s = self.settings
        if not self._described:
            self.describe_queue()
        watchdog = threading.Thread(target=self._watchdog, name="grace-watchdog", daemon=True)
        watchdog.start()
        received = 0
        errors_in_a_row = 0
        last_message_at = time.monotonic()
        code = 0
        try:
            while True:
                self.touch_liveness()
                if self._stop.is_set():
                    self.exit_reason = "stop requested"
                    break
                if s.max_messages is not None and received >= s.max_messages:
                    self.exit_reason = f"max-messages {s.max_messages} reached"
                    break
                wait = s.wait_time_s
                if s.mode == "service" and s.idle_exit_s is not None:
                    remaining = s.idle_exit_s - (time.monotonic() - last_message_at)
                    if remaining <= 0:
                        self.exit_reason = f"idle for {s.idle_exit_s:g} s"
                        break
                    wait = max(0, min(wait, math.ceil(remaining)))
                try:
                    messages = self.sqs.receive_message(
                        QueueUrl=s.queue_url, MaxNumberOfMessages=1, WaitTimeSeconds=wait,
                        VisibilityTimeout=s.visibility_timeout_s, MessageSystemAttributeNames=["All"],
                        MessageAttributeNames=["All"]).get("Messages", [])
                    errors_in_a_row = 0
                except Exception as e:  # noqa: BLE001 - network/SQS trouble: back off, retry, give up after 10
                    errors_in_a_row += 1
                    log.error(event("queue.receive_failed", error=s3io.error_code(e) or type(e).__name__,
                                    detail=str(e), attempt=errors_in_a_row))
                    if errors_in_a_row >= 10:
                        self.exit_reason = "receive kept failing"
                        code = 1
                        break
                    self._stop.wait(min(2.0 ** errors_in_a_row, 30.0))
                    continue
                if not messages:
                    if s.mode == "job":
                        self.exit_reason = "queue empty"
                        break
                    continue
                received += 1
                last_message_at = time.monotonic()
                msg = messages[0]
                if self._stop.is_set():
                    self._change_visibility(msg, 0)
                    log.info(event("message.released", msg=msg["MessageId"], reason="received after stop request"))
                    self.outcomes.append(Outcome(msg["MessageId"], "released", reason="received after stop"))
                    continue
                try:
                    self.outcomes.append(self.handle(msg))
                except Exception as e:  # noqa: BLE001 - a bug here must not end a service; the message stays
                    log.error(event("message.failed", msg=msg["MessageId"], error=type(e).__name__, detail=str(e),
                                    at=where(e)))
                    self.outcomes.append(Outcome(msg["MessageId"], "retry", reason=f"{type(e).__name__}: {e}"))
                last_message_at = time.monotonic()
        finally:
            self._finished.set()
        counts: dict[str, int] = {}
        for o in self.outcomes:
            counts[o.status] = counts.get(o.status, 0) + 1
        log.info(event("consumer.exit", reason=self.exit_reason, messages=received,
                       **{k.replace("-", "_"): v for k, v in sorted(counts.items())}, code=code))
        return code

    def _watchdog(self) -> None:
        """After a stop request, release a slide still running WATCHDOG_SLACK_S after the grace period, then exit 0."""
        while not self._stop.wait(0.5):
            if self._finished.is_set():
                return
        while not self._finished.is_set():
            deadline = self._deadline
            if deadline is not None and time.monotonic() >= deadline + WATCHDOG_SLACK_S:
                break
            time.sleep(0.1)
        else:
            return
        with self._lock:
            if self._phase != "processing" or self._current is None:
                return
            msg = self._current
            # The release runs on its own thread so that a hung SQS call cannot hold the exit below; the lock stays
            # held meanwhile, so the processing thread cannot commit a slide whose message is being released.
            release = threading.Thread(target=self._release_locked, name="grace-release", daemon=True,
                                       args=(msg, "grace period ran out; slide not interruptible"))
            release.start()
            release.join(WATCHDOG_RELEASE_TIMEOUT_S)
            if release.is_alive():
                self._released = True
                log.warning(event("message.release_timeout", msg=msg["MessageId"], timeout_s=WATCHDOG_RELEASE_TIMEOUT_S,
                                  detail="SQS did not answer; the message reappears when its visibility times out"))
        if self.settings.hard_exit_after_grace:
            log.info(event("consumer.exit", reason="grace period over, message released", code=0))
            logging.shutdown()
            os._exit(0)


def _not_loaded(*_: Any) -> dict:
    raise RuntimeError("no processor: the model is not loaded yet")


def model_processor(model: Any, precision: str = "auto") -> Processor:
    """The production processor: the compute half's process_slide with a model loaded once per process."""
    from worker.inference import InferenceSettings
    from worker.pipeline import PipelineSettings, process_slide

    settings = PipelineSettings(inference=InferenceSettings(precision=precision))

    def process(slide_path: Path, out_dir: Path, slide_id: str, progress: Callable[..., None]) -> dict:
        return process_slide(slide_path, out_dir, model, slide_id=slide_id, settings=settings, progress=progress)

    return process


def select_and_describe(choice: str) -> Any:
    """Run the GPU self-check (raises worker.device.NoUsableGpu) and log which device the worker will use."""
    from worker.device import describe_device, select_device

    device = select_device(choice)
    log.info(event("device.selected", choice=choice, device=describe_device(device)))
    return device


def run(settings: ConsumerSettings, *, processor: Processor | None = None,
        wrap_processor: Callable[[Processor], Processor] | None = None) -> int:
    """Check the device, load the model once, install SIGTERM/SIGINT handlers and consume; return the exit code.

    `processor` replaces the model and device entirely (tests); `wrap_processor` decorates the real one.
    """
    settings.validate()
    device = None if processor is not None else select_and_describe(settings.device)
    if device is not None:
        from worker.device import check_precision

        note = check_precision(settings.precision, device)  # UnsupportedPrecision: refused before anything else
        if note:
            log.warning(event("precision.note", precision=settings.precision, detail=note))
    consumer = Consumer(settings, processor or _not_loaded)
    consumer.describe_queue()  # a wrong queue URL or missing permission fails before the (slow) model load
    if processor is None:
        from worker.models.loading import load_model
        from worker.models.model_store import ModelCache, fetch_model

        # Fetched (S3 or the node's cache) and checked against its digest before any message is received; the
        # stage the planner calls model_load is both: fetch and load.
        t0 = time.monotonic()
        cache = (ModelCache(Path(settings.model_cache_dir), settings.model_cache_max_bytes)
                 if settings.model_cache_dir else None)
        model = load_model(fetch_model(settings.model_path, settings.model_sha256, cache=cache, s3=consumer.s3,
                                       temp_dir=settings.scratch_dir), device)
        consumer.model_load_s = time.monotonic() - t0
        log.info(event("model.loaded", name=getattr(model, "name", "?"), version=getattr(model, "version", "?"),
                       path=settings.model_path or "built-in", sha256=model.sha256, origin=model.origin,
                       fetch_s=model.fetch_s, seconds=consumer.model_load_s))
        processor = model_processor(model, settings.precision)
    consumer.processor = wrap_processor(processor) if wrap_processor is not None else processor
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda signum, _frame: consumer.request_stop(
                signal.Signals(signum).name))
    try:
        return consumer.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
