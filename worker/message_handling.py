"""One received message from start to final action: probe or contract check, download, process, commit, outputs."""
from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from worker import attempts, s3io
from worker.heartbeat import Heartbeat
from worker.logfmt import event
from worker.messages import OUTPUT_SUFFIXES, ContractError, SlideMessage, parse_message
from worker.outcome import Cancelled, Outcome, PermanentError, permanent_types, where
from worker.slides.limits import use_limits
from worker.study_state import StudyState, slide_metrics
from worker.verify_probe import verify_probe_id

log = logging.getLogger("worker.consumer")


class MessageHandling:
    """How the Consumer handles one message (a mixin: it uses the Consumer's settings, clients, lock, processor,
    studies and final actions)."""

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
        except permanent_types() as e:
            self._idle()
            reason = str(e) if isinstance(e, PermanentError) else f"bad slide {m.slide}: {e}"
            outcome = self._dead_letter(msg, reason, base, t0)
            if outcome.status == "dead-lettered" and self.settings.mode == "service" and study is not None:
                state = self.studies.get(study) or StudyState(study)
                self.studies[study] = state.after(m.slide_id, m.sequence, None)
            return outcome
        except Exception as e:  # noqa: BLE001 - anything else may be transient: leave it for redelivery
            self._idle()
            return self._retry(msg, f"{type(e).__name__}: {e} (at {where(e)})", base, receives, t0)
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
        # A slide larger than the limit is refused from its HEAD (or listing), before a byte of it is downloaded.
        too_big = self.settings.slide_limits.size_refusal(identity["size_bytes"])
        if too_big is not None:
            raise PermanentError(f"bad slide {m.slide}: {too_big}; not downloaded")
        existing = s3io.get_json(self.s3, m.summary_uri)
        if existing is not None and (existing[0].get("input") or {}).get("etag") == identity["etag"]:
            base.status, base.summary = "skipped", existing[0]
            base.reason = ("summary with the same input manifest exists (already done)" if listing is not None
                           else "summary with the same input ETag exists (already done)")
            return base
        kills = self._earlier_kills(msg, m, receives)
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
            attempt = {"m": m, "message_id": msg["MessageId"], "receives": receives, "kills": kills}
            attempts.write(self.s3, state="processing", **attempt)  # before the slide is opened
            with self._lock:
                self._attempt = attempt
            outcome = "failed"
            try:
                with use_limits(self.settings.slide_limits):  # what every slide opened for this message may declare
                    summary = self.processor(local, out_dir, m.slide_id, self.check_cancel)
                outcome = "processed"
            except permanent_types() as e:
                outcome = "refused"
                # The reader names its (scratch) file or folder; the S3 address is what an operator can act on:
                # a file inside a downloaded prefix becomes s3://bucket/prefix/<relative path>.
                detail = str(e)
                shown = str(m.slide).rstrip("/") if listing is not None else local.name
                for scratch_path in sorted({str(local.resolve()), str(local)}, key=len, reverse=True):
                    detail = detail.replace(scratch_path, shown)
                raise PermanentError(f"bad slide {m.slide}: {detail}") from None
            except Cancelled:
                outcome = "released"
                raise
            finally:
                self._end_attempt(outcome)
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

    def _earlier_kills(self, msg: dict, m: SlideMessage, receives: int) -> int:
        """Workers this message's slide has killed (see worker.attempts); PermanentError once it reaches
        max_slide_kills. A first receive has no earlier attempt, so it reads nothing."""
        if receives <= 1:
            return 0
        found = s3io.get_json(self.s3, attempts.attempt_uri(m))
        record = found[0] if found else None
        kills = attempts.kills_before(record, msg["MessageId"], receives)
        if kills >= self.settings.max_slide_kills:
            attempts.write(self.s3, m, message_id=msg["MessageId"], receives=receives, kills=kills, state="ended",
                           outcome="dead-lettered: killed its workers")
            raise PermanentError(attempts.kill_reason(m, kills, record))
        if kills:
            log.warning(event("slide.killed_before", slide_id=m.slide_id, msg=msg["MessageId"], kills=kills,
                              receive_count=receives, max_slide_kills=self.settings.max_slide_kills))
        return kills

    def _end_attempt(self, outcome: str, *, locked: bool = False) -> None:
        """Mark the attempt in progress ended (the processing thread's finally; the watchdog's release, which holds
        the lock: `locked`); a failure is logged, never raised: the record then reads as one death at this
        message's next receive."""
        if locked:
            attempt, self._attempt = self._attempt, None
        else:
            with self._lock:
                attempt, self._attempt = self._attempt, None
        if attempt is None:
            return
        try:
            attempts.write(self.s3, state="ended", outcome=outcome, **attempt)
        except Exception as e:  # noqa: BLE001
            log.warning(event("attempt.end_failed", slide_id=attempt["m"].slide_id, msg=attempt["message_id"],
                              error=s3io.error_code(e) or type(e).__name__, detail=str(e)))

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

