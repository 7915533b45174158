"""The SQS consumer: long-polls the work queue, processes one slide at a time, commits results, and never loses a message."""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from worker import s3io
from worker.heartbeat import Heartbeat
from worker.logfmt import event
from worker.messages import OUTPUT_SUFFIXES, ContractError, SlideMessage, parse_message
from worker.study import StudyState, slide_metrics

log = logging.getLogger("worker.consumer")

#: A slide processor: (local slide path, local output dir, slide_id, progress callback) -> summary dict. The slide
#: path is a file for a one-object slide and a folder (every object under the prefix) for a multi-file one.
#: It must write `<slide_id>.overlay.ome.tif`, `<slide_id>.preview.png` and `<slide_id>.json` into the output dir.
Processor = Callable[[Path, Path, str, Callable[..., None]], dict]

#: Upper bound of the retry backoff after a failed attempt, in seconds (SQS allows up to 12 h).
MAX_BACKOFF_S = 900
#: SQS's limits on a visibility timeout, in seconds.
SQS_MAX_VISIBILITY_S = 43200
#: Seconds past the grace period before the watchdog releases a slide whose processor never checks for
#: cancellation (a processor that reports progress is cancelled right at the end of the grace period).
WATCHDOG_SLACK_S = 2.0
#: Longest the watchdog waits for its release call (SQS ChangeMessageVisibility) before it exits anyway: a slow or
#: retrying SQS must not keep a stopping pod past its grace period (the message then reappears at its visibility
#: timeout instead of at once).
WATCHDOG_RELEASE_TIMEOUT_S = 5.0
#: Names of the message attributes put on a message the consumer sends to the dead-letter queue.
DLQ_REASON_ATTR = "gpuburst-reason"
DLQ_ATTRS = (DLQ_REASON_ATTR, "gpuburst-source-queue", "gpuburst-source-message-id", "gpuburst-receive-count")


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


@dataclass(frozen=True)
class ConsumerSettings:
    """How the consumer runs; `python -m worker consume` fills it from flags (and a few environment variables)."""

    queue_url: str
    """The SQS work queue's URL (flag --queue-url, env QUEUE_URL)."""
    mode: str = "job"
    """'job' (a KEDA ScaledJob pod: exit 0 once a long poll comes back empty or after max_messages) or 'service'
    (the persistent Deployment: loop until idle_exit_s without messages, or SIGTERM). Default 'job'."""
    max_messages: int | None = None
    """Stop after receiving this many messages (both modes); None (default) = no limit."""
    idle_exit_s: float | None = None
    """Service mode: exit 0 after this many seconds without a message; None (default) = run until SIGTERM."""
    device: str = "auto"
    """'auto', 'cuda' or 'cpu' (flag --device, env DEVICE); 'cuda' without a usable GPU exits at once. Default auto."""
    model_path: str | None = None
    """A model file, .pt2 (torch.export) or TorchScript (flag --model, env MODEL_PATH); None (default) = the built-in
    model."""
    visibility_timeout_s: int = 600
    """Seconds a received message stays invisible, renewed by the heartbeat (env VISIBILITY_TIMEOUT). Default 600."""
    visibility_extension_interval_s: float = 120.0
    """Seconds between heartbeat renewals; must be below visibility_timeout_s (env VISIBILITY_EXTENSION_INTERVAL).
    Default 120."""
    wait_time_s: int = 20
    """Long-poll wait per ReceiveMessage call, 0-20 s. Default 20 (the SQS maximum; tests use less)."""
    grace_period_s: float = 25.0
    """After SIGTERM/SIGINT: seconds the current slide may still take before it is released to the queue
    (visibility 0) and the process exits 0. Default 25, below Kubernetes' default terminationGracePeriodSeconds 30."""
    retry_backoff_s: int = 30
    """After a failed attempt the message becomes visible again after retry_backoff_s * 2^(receives-1) seconds,
    capped at 900. Default 30; 0 = retry at once."""
    scratch_dir: str | None = None
    """Folder for downloaded slides and local results (flag --scratch, env SCRATCH_DIR, else $TMPDIR). Needs room
    for one slide plus its overlay."""
    liveness_file: str | None = None
    """A file the main loop touches at every poll and every slide progress report (env LIVENESS_FILE); the consumer
    Deployment's liveness probe fails when it is older than the visibility timeout, so a hung process is restarted
    instead of holding its message for hours. None (default) = no file."""
    hard_exit_after_grace: bool = True
    """Whether the grace-period watchdog may end the process (os._exit(0)) when the slide cannot be interrupted.
    Default True; in-process callers such as tests set False."""
    max_prefix_bytes: int = s3io.DEFAULT_MAX_PREFIX_BYTES
    """A multi-file slide (a `slide` prefix) larger than this many bytes in all is dead-lettered instead of
    downloaded. Default 64 GiB (s3io.DEFAULT_MAX_PREFIX_BYTES); at most s3io.MAX_PREFIX_OBJECTS objects either way."""

    def validate(self) -> None:
        """Raise ValueError (one line, naming the setting) when the settings cannot work."""
        if not self.queue_url:
            raise ValueError("queue_url: required (--queue-url or QUEUE_URL)")
        if self.mode not in ("job", "service"):
            raise ValueError(f"mode={self.mode!r}: must be 'job' or 'service'")
        if self.device not in ("auto", "cuda", "cpu"):
            raise ValueError(f"device={self.device!r}: must be auto, cuda or cpu")
        if not 1 <= self.visibility_timeout_s <= SQS_MAX_VISIBILITY_S:
            raise ValueError(f"visibility_timeout_s={self.visibility_timeout_s}: must be 1-{SQS_MAX_VISIBILITY_S} s")
        if not 0 < self.visibility_extension_interval_s < self.visibility_timeout_s:
            raise ValueError(f"visibility_extension_interval_s={self.visibility_extension_interval_s}: must be > 0 "
                             f"and < visibility_timeout_s={self.visibility_timeout_s}")
        if not 0 <= self.wait_time_s <= 20:
            raise ValueError(f"wait_time_s={self.wait_time_s}: must be 0-20 s (SQS long-poll limit)")
        if self.max_messages is not None and self.max_messages < 1:
            raise ValueError(f"max_messages={self.max_messages}: must be at least 1")
        if self.idle_exit_s is not None and self.idle_exit_s <= 0:
            raise ValueError(f"idle_exit_s={self.idle_exit_s}: must be > 0")
        if self.grace_period_s < 0:
            raise ValueError(f"grace_period_s={self.grace_period_s}: must be >= 0")
        if self.retry_backoff_s < 0:
            raise ValueError(f"retry_backoff_s={self.retry_backoff_s}: must be >= 0")
        if self.max_prefix_bytes < 1:
            raise ValueError(f"max_prefix_bytes={self.max_prefix_bytes}: must be at least 1")


@dataclass
class Outcome:
    """What happened to one received message (kept in Consumer.outcomes, in order)."""

    message_id: str
    """The SQS message id."""
    status: str
    """'done', 'skipped' (already finished), 'dead-lettered', 'retry' (left for redelivery), 'released', or 'probe'
    (a `verify` probe, deleted at once)."""
    slide_id: str | None = None
    """The slide's id, when the body was valid."""
    study: str | None = None
    """The study (message group), when known."""
    sequence: int | None = None
    """The message's sequence, when given."""
    seconds: float = 0.0
    """Wall-clock seconds from receipt to the final action on the message."""
    reason: str = ""
    """Why it was dead-lettered, retried or released (one line)."""
    summary: dict | None = None
    """The committed summary (status 'done'), or the existing one (status 'skipped')."""


class PermanentError(Exception):
    """A failure that no retry can fix (contract violation, missing slide, unreadable slide): dead-letter at once."""


class Cancelled(Exception):
    """The grace period after SIGTERM ran out while a slide was in progress."""


class _Disposition(Exception):
    """Internal: carries the final action for a message out of the processing block."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


def _permanent_types() -> tuple[type[BaseException], ...]:
    """Exception types from the compute half that mean 'this slide can never be processed' (bad file)."""
    types: list[type[BaseException]] = [PermanentError]
    try:
        from worker.slides import SlideError
        types.append(SlideError)
    except ImportError:  # pragma: no cover - the compute half is absent only in partial checkouts
        pass
    return tuple(types)


def _where(exc: BaseException) -> str:
    """'file.py:123' of the innermost frame of an exception's traceback (for one-line error logs)."""
    tb = traceback.extract_tb(exc.__traceback__)
    return f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"


class Consumer:
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
                                    at=_where(e)))
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

    # --- one message -----------------------------------------------------------------------------------------
    def handle(self, msg: dict) -> Outcome:
        """Process one received message and give it its final action; never raises for a bad message."""
        t0 = time.monotonic()
        mid = msg["MessageId"]
        attrs = msg.get("Attributes", {})
        receives = int(attrs.get("ApproximateReceiveCount", "1"))
        group = attrs.get("MessageGroupId")
        probe = verify_probe_id(msg)
        if probe is not None:
            # `python -m components verify` sends this to see KEDA start a Job; it is not work and never a failure.
            self._delete(msg)
            log.info(event("verify.probe", msg=mid, probe=probe, detail=f"verify probe {probe} acknowledged"))
            return Outcome(mid, "probe", reason=f"verify probe {probe}", seconds=time.monotonic() - t0)
        try:
            m = parse_message(msg["Body"])
        except ContractError as e:
            return self._dead_letter(msg, f"contract violation: {e}", Outcome(mid, "", study=group), t0)
        study = m.study or group
        fields = {"slide_id": m.slide_id, "msg": mid}
        log.info(event("slide.received", **fields, slide=str(m.slide), study=study, sequence=m.sequence,
                       receive_count=receives))
        seq_check = "none"
        if self.settings.mode == "service" and study is not None:
            state = self.studies.get(study) or StudyState(study)
            seq_check = state.check_sequence(m.sequence)
            if seq_check not in ("ok", "none"):
                log.warning(event("study.sequence", **fields, study=study, sequence=m.sequence, check=seq_check,
                                  last_sequence=state.last_sequence))
        base = Outcome(mid, "", slide_id=m.slide_id, study=study, sequence=m.sequence)
        with self._lock:
            self._phase, self._current, self._released = "processing", msg, False
        hb = Heartbeat(self.sqs, self.settings.queue_url, msg["ReceiptHandle"],
                       timeout_s=self.settings.visibility_timeout_s,
                       interval_s=self.settings.visibility_extension_interval_s, fields=fields)
        try:
            with hb:
                outcome = self._process(msg, m, study, seq_check, receives, base, t0, hb)
        except Cancelled as e:
            with self._lock:
                if not self._released:
                    self._release_locked(msg, str(e))
            base.status, base.reason, base.seconds = "released", str(e), time.monotonic() - t0
            return base
        except _permanent_types() as e:
            self._idle()
            reason = str(e) if isinstance(e, PermanentError) else f"bad slide {m.slide}: {e}"
            outcome = self._dead_letter(msg, reason, base, t0)
            if outcome.status == "dead-lettered" and self.settings.mode == "service" and study is not None:
                state = self.studies.get(study) or StudyState(study)
                self.studies[study] = state.after(m.slide_id, m.sequence, None)
            return outcome
        except Exception as e:  # noqa: BLE001 - anything else may be transient: leave it for redelivery
            self._idle()
            return self._retry(msg, f"{type(e).__name__}: {e} (at {_where(e)})", base, receives, t0)
        finally:
            self._idle()
        # Final action for a finished or skipped slide: outputs are committed, so the message can go.
        self._delete(msg)
        outcome.seconds = time.monotonic() - t0
        if outcome.status == "done":
            stages = (outcome.summary or {}).get("stages_s") or {}
            clock = {f"{k}_s": v for k, v in stages.items() if k != "total" and v is not None}
            log.info(event("slide.done", **fields, seconds=outcome.seconds, **clock, study=study, sequence=m.sequence,
                           heartbeats=hb.extensions, summary=str(m.summary_uri)))
        else:
            log.info(event("slide.skipped", **fields, seconds=outcome.seconds, reason=outcome.reason))
        return outcome

    def _idle(self) -> None:
        with self._lock:
            self._phase, self._current = "idle", None

    def _process(self, msg: dict, m: SlideMessage, study: str | None, seq_check: str, receives: int,
                 base: Outcome, t0: float, hb: Heartbeat) -> Outcome:
        fields = {"slide_id": m.slide_id, "msg": msg["MessageId"]}
        self.check_cancel()
        # The input's identity, recorded in the summary and compared for the "already done" skip: the object's
        # ETag, or for a prefix a digest over its sorted (relative key, ETag, size) list.
        listing: s3io.PrefixListing | None = None
        try:
            if m.is_prefix:
                listing = s3io.list_prefix(self.s3, m.slide, max_total_bytes=self.settings.max_prefix_bytes)
                identity = listing.identity()
            else:
                info = s3io.head(self.s3, m.slide)
                identity = {"etag": info.etag, "size_bytes": info.size_bytes}
        except s3io.PrefixError as e:
            raise PermanentError(f"bad slide {m.slide}: {e}") from None
        except Exception as e:
            if s3io.is_not_found(e):
                what = "bucket not found" if s3io.error_code(e) == "NoSuchBucket" else "slide object not found"
                raise PermanentError(f"bad slide {m.slide}: {what}") from None
            raise
        existing = s3io.get_json(self.s3, m.summary_uri)
        if existing is not None and (existing[0].get("input") or {}).get("etag") == identity["etag"]:
            base.status, base.summary = "skipped", existing[0]
            base.reason = ("summary with the same input manifest exists (already done)" if listing is not None
                           else "summary with the same input ETag exists (already done)")
            return base
        scratch = Path(self.settings.scratch_dir or tempfile.gettempdir())
        scratch.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f"{m.slide_id}.", dir=scratch))
        try:
            t_dl = time.monotonic()
            # The contract keeps '.', '..' and '' out of a prefix's segments; slide_id is the fallback regardless.
            name = m.slide.name if m.slide.name not in ("", ".", "..") else m.slide_id
            local = work / "input" / name
            if listing is not None:
                nbytes = s3io.download_prefix(self.s3, listing, local, progress=self.check_cancel)
                # Objects added or removed after the listing are invisible to If-Match: list again and compare.
                again = s3io.list_prefix(self.s3, m.slide, max_total_bytes=self.settings.max_prefix_bytes)
                if again.digest != listing.digest:
                    raise s3io.PrefixChanged(f"objects under {m.slide} changed during the download")
            else:
                nbytes = s3io.download(self.s3, m.slide, local, if_match=identity["etag"])
            t_proc = time.monotonic()
            extra = {"objects": len(listing.objects)} if listing is not None else {}
            log.info(event("slide.processing", **fields, bytes=nbytes, **extra, download_s=t_proc - t_dl))
            self.check_cancel()
            out_dir = work / "out"
            out_dir.mkdir()
            try:
                summary = self.processor(local, out_dir, m.slide_id, self.check_cancel)
            except _permanent_types() as e:
                # The reader names its (scratch) file or folder; the S3 address is what an operator can act on:
                # a file inside a downloaded prefix becomes s3://bucket/prefix/<relative path>.
                detail = str(e)
                shown = str(m.slide).rstrip("/") if listing is not None else local.name
                for scratch_path in sorted({str(local.resolve()), str(local)}, key=len, reverse=True):
                    detail = detail.replace(scratch_path, shown)
                raise PermanentError(f"bad slide {m.slide}: {detail}") from None
            t_up = time.monotonic()
            files = [out_dir / (m.slide_id + s) for s in OUTPUT_SUFFIXES]
            missing = [f.name for f in files if not f.is_file()]
            if missing:
                raise RuntimeError(f"processor did not write {', '.join(missing)}")
            written = json.loads(files[-1].read_text())
            if isinstance(written, dict):
                summary = {**written, **(summary if isinstance(summary, dict) else {})}
            metrics = slide_metrics(summary)
            new_state = None
            if self.settings.mode == "service" and study is not None:
                new_state = (self.studies.get(study) or StudyState(study)).after(m.slide_id, m.sequence, metrics)
            self._enrich(summary, msg, m, identity, study, receives, seq_check, new_state,
                         {"download": t_proc - t_dl, "process": t_up - t_proc})
            with self._lock:
                if self._released:
                    raise Cancelled("message was released by the grace-period watchdog")
                self.check_cancel()
                self._phase = "committing"
            # Commit: the two images under their final keys, then the summary (the commit marker) last and
            # conditionally, so two racing workers cannot both commit and a stale summary is replaced only once.
            for f, suffix in zip(files[:2], OUTPUT_SUFFIXES[:2]):
                s3io.upload(self.s3, f, m.output_uri(suffix))
            summary["consumer"]["seconds"]["upload"] = round(time.monotonic() - t_up, 3)
            summary["consumer"]["seconds"]["total"] = round(time.monotonic() - t0, 3)
            summary["stages_s"] = self._stages(summary, t_proc - t_dl)
            summary["model_load_s_process"] = None if self.model_load_s is None else round(self.model_load_s, 3)
            try:
                s3io.put_json_conditional(self.s3, m.summary_uri, summary,
                                          replace_etag=existing[1] if existing else None)
            except Exception as e:
                if not s3io.is_precondition_failed(e):
                    raise
                now = s3io.get_json(self.s3, m.summary_uri)
                if now is not None and (now[0].get("input") or {}).get("etag") == identity["etag"]:
                    base.status, base.summary = "skipped", now[0]
                    base.reason = "another worker committed this slide first"
                    return base
                raise RuntimeError("summary changed under us (concurrent writer); will retry") from None
            if hb.lost:
                log.warning(event("visibility.lost", **fields,
                                  detail="heartbeat lost the receipt handle; results committed anyway"))
            if new_state is not None and study is not None:
                self.studies[study] = new_state
            base.status, base.summary = "done", summary
            return base
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _stages(self, summary: dict, download_s: float) -> dict[str, float | None]:
        """This slide's clock, stage by stage, as the burst planner models it: download, model load (paid once per
        process: its load time on the first slide the process finishes, 0 after), open, tissue, inference (reading,
        model and overlay overlapped), write, upload, total (seconds)."""
        t = summary.get("timings_s") if isinstance(summary.get("timings_s"), dict) else {}
        seconds = summary["consumer"]["seconds"]
        load = 0.0
        if self.model_load_s is not None and not self._model_load_charged:
            load, self._model_load_charged = self.model_load_s, True
        return {"download": round(download_s, 3), "model_load": round(load, 3), "open": t.get("open"),
                "tissue": t.get("tissue"), "inference": t.get("analyse"), "write": t.get("write"),
                "upload": seconds.get("upload"), "total": seconds.get("total")}

    def _enrich(self, summary: dict, msg: dict, m: SlideMessage, identity: dict[str, Any], study: str | None,
                receives: int, seq_check: str, state: StudyState | None, seconds: dict[str, float]) -> None:
        """Add the queue-side facts to the pipeline's summary: input identity, message, study state, outputs.

        `identity` is {etag, size_bytes} of the object, or for a prefix {etag: "manifest-sha256:<hex>", objects,
        size_bytes} (s3io.PrefixListing.identity).
        """
        inp = summary.get("input") if isinstance(summary.get("input"), dict) else {}
        summary["input"] = {**inp, "uri": str(m.slide), **identity}
        summary["slide_id"] = m.slide_id
        summary["message"] = {"id": msg["MessageId"], "receive_count": receives,
                              "message_group_id": msg.get("Attributes", {}).get("MessageGroupId"),
                              "queue_url": self.settings.queue_url, "body": m.to_dict()}
        summary["study"] = study
        summary["sequence"] = m.sequence
        if state is not None:
            summary["sequence_check"] = seq_check
            summary["study_state"] = state.to_dict()
        summary["outputs"] = {s.lstrip(".").split(".")[0] if s != ".json" else "summary": str(m.output_uri(s))
                              for s in OUTPUT_SUFFIXES}
        summary["consumer"] = {"mode": self.settings.mode, "finished_at": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": {k: round(v, 3) for k, v in seconds.items()}}

    # --- final actions -----------------------------------------------------------------------------------------
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
        """Make the message visible again at once (caller holds self._lock)."""
        self._change_visibility(msg, 0)
        self._released = True
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


# --- wiring --------------------------------------------------------------------------------------------------
VERIFY_PROBE_ATTRIBUTE = "gpuburst-verify"
"""Message attribute `python -m components verify` puts on its probe message (its value is the probe's uuid)."""


def verify_probe_id(msg: dict) -> str | None:
    """The uuid of a `verify` probe message (by its attribute, or a JSON body `{"verify_probe": uuid}`), else None."""
    attr = (msg.get("MessageAttributes") or {}).get(VERIFY_PROBE_ATTRIBUTE)
    if attr and attr.get("StringValue"):
        return attr["StringValue"]
    body = msg.get("Body", "")
    if "verify_probe" not in body:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    if isinstance(doc, dict) and set(doc) == {"verify_probe"} and isinstance(doc["verify_probe"], str):
        return doc["verify_probe"]
    return None


def _not_loaded(*_: Any) -> dict:
    raise RuntimeError("no processor: the model is not loaded yet")


def model_processor(model: Any) -> Processor:
    """The production processor: the compute half's process_slide with a model loaded once per process."""
    from worker.pipeline import process_slide

    def process(slide_path: Path, out_dir: Path, slide_id: str, progress: Callable[..., None]) -> dict:
        return process_slide(slide_path, out_dir, model, slide_id=slide_id, progress=progress)

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
    consumer = Consumer(settings, processor or _not_loaded)
    consumer.describe_queue()  # a wrong queue URL or missing permission fails before the (slow) model load
    if processor is None:
        from worker.model import load_model

        t0 = time.monotonic()
        model = load_model(settings.model_path, device)
        consumer.model_load_s = time.monotonic() - t0
        log.info(event("model.loaded", name=getattr(model, "name", "?"), version=getattr(model, "version", "?"),
                       path=settings.model_path or "built-in", seconds=consumer.model_load_s))
        processor = model_processor(model)
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
