"""The dead-letter queue for a person: list its messages with their reasons, and redrive them to the work queue."""
from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from worker import s3io
from worker.message_actions import DLQ_ATTRS, DLQ_REASON_ATTR
from worker.messages import ContractError, parse_message

#: What `list` shows for a message without a `gpuburst-reason`: SQS's redrive policy moved it after
#: maxReceiveCount receives, with no attempt that the worker judged permanently bad (a worker killed mid-slide or
#: during a long poll, a spot interruption, an out-of-memory kill, or transient failures until the count ran out).
NO_REASON = "no reason: receives ran out"
#: The attribute a redriven copy carries: the dead-letter queue's message id it was copied from.
REDRIVE_ID_ATTR = "gpuburst-redrive-id"
#: Seconds a message seen by `list` (or passed over by `redrive --id`) stays hidden before it is released again;
#: a listing that dies half-way hides nothing for longer than this.
SCAN_VISIBILITY_S = 120
#: Seconds a message being redriven stays hidden in the dead-letter queue from the moment it is claimed: 11 h, as
#: long as SQS allows (12 h counted from the receive) with room for the receive before it. If the redrive dies
#: after the send and before the delete, this keeps the DLQ copy out of every listing and redrive until the sent
#: copy has long been processed: see `redrive_messages`.
REDRIVE_HOLD_S = 11 * 3600
#: Seconds between polls of a running message-move task.
MOVE_TASK_POLL_S = 2.0


class DlqError(Exception):
    """A one-line reason the command cannot run; `exit_code` 2 (usage: no queue to work on) unless said otherwise."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class DeadLetter:
    """One message in the dead-letter queue, as a person needs it to decide what to do."""

    id: str
    """The message id in the dead-letter queue (what `redrive --id` takes)."""
    reason: str
    """The worker's one-line reason (`gpuburst-reason`), or NO_REASON when SQS's redrive policy moved it."""
    receives: int
    """Receives at the work queue: what the worker recorded when it dead-lettered the message
    (`gpuburst-receive-count`), else SQS's ApproximateReceiveCount less this listing's own receive (it also counts
    earlier listings of the dead-letter queue)."""
    age_s: float
    """Seconds since the message was sent (SentTimestamp: for a message the redrive policy moved on a standard queue,
    since the producer sent it; for one the worker dead-lettered, since then)."""
    slide: str | None
    """The slide's S3 address from the body, or None when the body has none."""
    slide_id: str | None
    """The slide id the worker uses for its outputs, or None when the body breaks the contract."""
    body_problem: str | None = None
    """Why the body is not a valid message (the contract's one-line error), or None."""
    source_message_id: str | None = None
    """The message id at the work queue, when the worker dead-lettered it (`gpuburst-source-message-id`)."""
    source_queue: str | None = None
    """The work queue the worker took it from (`gpuburst-source-queue`), or None."""
    group: str | None = None
    """MessageGroupId on a FIFO queue, else None."""
    body: str = field(default="", repr=False)
    receipt: str = field(default="", repr=False)
    attributes: dict = field(default_factory=dict, repr=False)

    def to_json(self) -> dict:
        d = asdict(self)
        for k in ("body", "receipt", "attributes"):
            d.pop(k)
        d["age_s"] = round(self.age_s, 1)
        return d


def describe(msg: dict, now: float | None = None) -> DeadLetter:
    """A DeadLetter from a received message (system and message attributes included)."""
    now = time.time() if now is None else now
    sysattrs = msg.get("Attributes") or {}
    attrs = msg.get("MessageAttributes") or {}

    def attr(name: str) -> str | None:
        v = attrs.get(name)
        return v.get("StringValue") if isinstance(v, dict) else None

    recorded = attr("gpuburst-receive-count")
    if recorded is not None and recorded.isdigit():
        receives = int(recorded)
    else:
        receives = max(int(sysattrs.get("ApproximateReceiveCount", "1")) - 1, 0)
    sent = sysattrs.get("SentTimestamp")
    age = max(now - int(sent) / 1000.0, 0.0) if sent and str(sent).isdigit() else 0.0
    body = msg.get("Body") or ""
    slide = slide_id = problem = None
    try:
        m = parse_message(body)
        slide, slide_id = str(m.slide), m.slide_id
    except ContractError as e:
        problem = str(e)
        try:  # a body that breaks the contract may still name its slide
            raw = json.loads(body)
            slide = raw.get("slide") if isinstance(raw, dict) and isinstance(raw.get("slide"), str) else None
        except ValueError:
            pass
    return DeadLetter(id=msg["MessageId"], reason=attr(DLQ_REASON_ATTR) or NO_REASON, receives=receives, age_s=age,
                      slide=slide, slide_id=slide_id, body_problem=problem,
                      source_message_id=attr("gpuburst-source-message-id"), source_queue=attr("gpuburst-source-queue"),
                      group=sysattrs.get("MessageGroupId"), body=body, receipt=msg.get("ReceiptHandle", ""),
                      attributes=attrs)


def queue_arn(sqs: Any, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def dlq_of(sqs: Any, queue_url: str) -> str:
    """The dead-letter queue's URL from the work queue's RedrivePolicy (same account and region, as SQS requires)."""
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"]).get("Attributes", {})
    policy = attrs.get("RedrivePolicy")
    if not policy:
        raise DlqError(f"--queue-url {queue_url}: the queue has no RedrivePolicy, so no dead-letter queue; "
                       "pass --dlq-url")
    name, _account = s3io.queue_name_from_arn(json.loads(policy)["deadLetterTargetArn"])
    return queue_url.rsplit("/", 1)[0] + "/" + name


def source_queues(sqs: Any, dlq_url: str) -> list[str]:
    """The queues whose RedrivePolicy names this dead-letter queue (ListDeadLetterSourceQueues, all pages)."""
    urls: list[str] = []
    kwargs: dict[str, Any] = {"QueueUrl": dlq_url}
    while True:
        r = sqs.list_dead_letter_source_queues(**kwargs)
        urls += r.get("queueUrls", [])
        if not r.get("NextToken"):
            return urls
        kwargs["NextToken"] = r["NextToken"]


def counts(sqs: Any, url: str) -> tuple[int, int]:
    """(visible, in flight) as SQS approximates them."""
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(a["ApproximateNumberOfMessages"]), int(a["ApproximateNumberOfMessagesNotVisible"])


def _receive(sqs: Any, url: str, n: int, visibility_s: int) -> list[dict]:
    # A 1 s long poll asks every SQS server, so an empty answer means "nothing visible", not "none sampled".
    return sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=max(1, min(n, 10)), WaitTimeSeconds=1,
                               VisibilityTimeout=visibility_s, MessageSystemAttributeNames=["All"],
                               MessageAttributeNames=["All"]).get("Messages", [])


def scan(sqs: Any, dlq_url: str, *, limit: int, want: Iterable[str] = (),
         visibility_s: int = SCAN_VISIBILITY_S) -> list[dict]:
    """Receive up to `limit` messages, each once, holding them hidden for `visibility_s` (release them after).

    Stops at the first receive with nothing new, or once every message in `want` (message ids, or the work
    queue's ids the worker recorded) has been seen. SQS has no peek: every listing is a receive.
    """
    seen: dict[str, dict] = {}
    wanted = set(want)
    while len(seen) < limit:
        msgs = _receive(sqs, dlq_url, limit - len(seen), visibility_s)
        new = [m for m in msgs if m["MessageId"] not in seen]
        for m in msgs:
            seen[m["MessageId"]] = m  # a message seen again (its visibility ran out) keeps its newest receipt
        if not new:
            break
        if wanted and wanted <= {i for m in seen.values() for i in _ids(m)}:
            break
    return list(seen.values())


def _ids(msg: dict) -> set[str]:
    src = ((msg.get("MessageAttributes") or {}).get("gpuburst-source-message-id") or {}).get("StringValue")
    return {msg["MessageId"], *([src] if src else [])}


def release(sqs: Any, url: str, msgs: Iterable[dict]) -> None:
    """Make received messages visible again at once (best effort: otherwise they reappear after their timeout)."""
    msgs = list(msgs)
    for i in range(0, len(msgs), 10):
        entries = [{"Id": str(k), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                   for k, m in enumerate(msgs[i:i + 10])]
        try:
            sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
        except Exception:  # noqa: BLE001 - they reappear after SCAN_VISIBILITY_S anyway
            pass


def list_dead_letters(sqs: Any, dlq_url: str, *, limit: int = 1000) -> list[DeadLetter]:
    """Every message in the dead-letter queue (up to `limit`), oldest first; each is released again afterwards."""
    msgs = scan(sqs, dlq_url, limit=limit)
    try:
        now = time.time()
        return sorted((describe(m, now) for m in msgs), key=lambda d: -d.age_s)
    finally:
        release(sqs, dlq_url, msgs)


@dataclass
class RedriveResult:
    """What a redrive did: the method, each message moved, each id not found, each failure."""

    method: str
    destination: str
    moved: list[dict] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)
    task: dict | None = None


def redrive_attributes(letter: DeadLetter) -> dict:
    """The redriven copy's message attributes: the original's own (the worker's gpuburst-* dead-letter facts left
    behind: they describe the attempt that failed) plus REDRIVE_ID_ATTR."""
    out = {k: {kk: vv for kk, vv in v.items() if kk in ("DataType", "StringValue", "BinaryValue")}
           for k, v in letter.attributes.items() if k not in DLQ_ATTRS and k != REDRIVE_ID_ATTR}
    out = dict(list(out.items())[:9])  # SQS allows 10 message attributes
    out[REDRIVE_ID_ATTR] = {"DataType": "String", "StringValue": letter.id}
    return out


class MoveError(Exception):
    """One message could not be moved: at which step, and whether the copy had already been sent."""

    def __init__(self, stage: str, sent: bool, cause: BaseException) -> None:
        code = s3io.error_code(cause) or type(cause).__name__
        first = str(cause).splitlines()[0] if str(cause) else ""
        super().__init__(f"{stage} failed: {code}: {first}"[:300])
        self.stage, self.sent = stage, sent


def _move(sqs: Any, dlq_url: str, dest_url: str, letter: DeadLetter, hold_s: int) -> str:
    """Copy one received dead letter to `dest_url`, then delete it from the DLQ; returns the new message id.

    Claim, send, delete, in that order (the guarantee is spelled out in `redrive_messages`); raises MoveError.
    """
    # 1. Claim: hide the DLQ copy for hold_s. A run that dies from here on leaves it hidden that long, so no other
    #    listing or redrive can send it a second time while the copy sent below may still be waiting for a worker.
    try:
        sqs.change_message_visibility(QueueUrl=dlq_url, ReceiptHandle=letter.receipt, VisibilityTimeout=hold_s)
    except Exception as e:  # noqa: BLE001 - the receipt expired (another run has it now): leave it to that run
        raise MoveError("claim", False, e) from None
    # 2. Send before delete: dying between the two can leave two copies (see above), never none.
    kwargs: dict[str, Any] = {"QueueUrl": dest_url, "MessageBody": letter.body or "(empty)",
                              "MessageAttributes": redrive_attributes(letter)}
    if dest_url.endswith(".fifo"):
        try:
            study = json.loads(letter.body).get("study")
        except (ValueError, AttributeError):
            study = None
        kwargs["MessageGroupId"] = letter.group or (study if isinstance(study, str) else None) or "gpuburst-redrive"
        # The same DLQ message always gets the same deduplication id: a send repeated within SQS's 5-minute
        # deduplication window (a retried call, a rerun) is accepted but delivered once.
        kwargs["MessageDeduplicationId"] = f"redrive-{letter.id}"
    try:
        new_id = sqs.send_message(**kwargs)["MessageId"]
    except Exception as e:  # noqa: BLE001
        raise MoveError("send", False, e) from None
    # 3. Delete the DLQ copy. If this fails, it stays hidden for hold_s (step 1), then reappears in the DLQ.
    try:
        sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=letter.receipt)
    except Exception as e:  # noqa: BLE001
        raise MoveError("delete", True, e) from None
    return new_id


def redrive_messages(sqs: Any, dlq_url: str, dest_url: str, *, ids: Iterable[str] | None = None,
                     limit: int = 100_000, hold_s: int = REDRIVE_HOLD_S,
                     say: Callable[[str], None] = lambda _: None) -> RedriveResult:
    """Move dead letters to `dest_url` by receive, send, delete: the ones in `ids` (DLQ message ids, or the work
    queue's ids the worker recorded), or all of them (`ids` None).

    The guarantee. A message is never lost: it leaves the DLQ only after SQS accepted its copy. A run that dies
    before the send leaves it in the DLQ (hidden for at most `hold_s` if it was already claimed). A run that dies
    after the send and before the delete (or whose delete fails) leaves two copies: the sent one in the work queue
    and the DLQ one, hidden for `hold_s` (11 h). Within those 11 h no listing or redrive sees it, so none can send
    it again. After them it shows in `dlq list` once more; redriving it again sends a second copy of a slide whose
    first copy has almost always been processed by then, and the worker, finding that slide's summary with the same
    input ETag, deletes it without computing anything (`slide.skipped`). Should two copies ever be worked on at once
    (a backlog older than 11 h), both compute but only one summary commit wins (an S3 conditional write): the
    results are written once. On a FIFO work queue the copy's MessageDeduplicationId is derived from the DLQ message
    id, so SQS itself drops a repeated send within its 5-minute window, and the copy keeps its MessageGroupId.
    """
    result = RedriveResult("copy", dest_url)
    if ids is not None:
        wanted = set(ids)
        msgs = scan(sqs, dlq_url, limit=limit, want=wanted)
        letters = [describe(m) for m in msgs]
        chosen = [d for d in letters if {d.id, d.source_message_id} & wanted]
        result.missing = sorted(wanted - {i for d in chosen for i in (d.id, d.source_message_id) if i})
        release(sqs, dlq_url, (m for m, d in zip(msgs, letters) if d not in chosen))
        _move_all(sqs, dlq_url, dest_url, chosen, hold_s, result, say)
        return result
    attempted: set[str] = set()
    passed_over: dict[str, dict] = {}
    while len(attempted) < limit:
        msgs = _receive(sqs, dlq_url, 10, SCAN_VISIBILITY_S)
        fresh = [m for m in msgs if m["MessageId"] not in attempted]
        # One try per message and run: one that failed and came back is held until the end, then released.
        passed_over.update((m["MessageId"], m) for m in msgs if m["MessageId"] in attempted)
        if not fresh:
            break
        attempted.update(m["MessageId"] for m in fresh)
        _move_all(sqs, dlq_url, dest_url, [describe(m) for m in fresh], hold_s, result, say)
    release(sqs, dlq_url, passed_over.values())
    return result


def _move_all(sqs: Any, dlq_url: str, dest_url: str, letters: list[DeadLetter], hold_s: int,
              result: RedriveResult, say: Callable[[str], None]) -> None:
    for d in letters:
        try:
            new_id = _move(sqs, dlq_url, dest_url, d, hold_s)
        except MoveError as e:  # one message's trouble must not stop the others
            if e.stage == "send":  # not sent: put it back at once, so `list` shows it and a rerun can move it
                release(sqs, dlq_url, [{"ReceiptHandle": d.receipt}])
            result.failed.append({"id": d.id, "slide": d.slide, "stage": e.stage, "sent": e.sent, "error": str(e)})
            say(f"failed {d.id}: {e}")
            continue
        result.moved.append({"id": d.id, "new_id": new_id, "slide": d.slide, "reason": d.reason})
        say(f"moved {d.id} -> {new_id} ({d.slide or 'no slide'})")


def start_move_task(sqs_once: Any, dlq_arn: str, dest_arn: str) -> str:
    """Start SQS's own message-move task from the DLQ to `dest_arn`; returns its TaskHandle (raises ClientError).

    The destination is always given: a message the worker dead-lettered itself was *sent* to the DLQ, so SQS knows
    no "original source" to return it to.
    """
    return sqs_once.start_message_move_task(SourceArn=dlq_arn, DestinationArn=dest_arn)["TaskHandle"]


def wait_move_task(sqs: Any, dlq_arn: str, *, poll_s: float = MOVE_TASK_POLL_S, timeout_s: float = 3600.0,
                   say: Callable[[str], None] = lambda _: None, sleep: Callable[[float], None] = time.sleep) -> dict:
    """Poll the DLQ's newest move task until it is no longer running; returns ListMessageMoveTasks' entry for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        tasks = sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=1).get("Results", [])
        task = tasks[0] if tasks else {}
        status = task.get("Status", "UNKNOWN")
        if status not in ("RUNNING", "CANCELLING") or time.monotonic() >= deadline:
            return task
        say(f"move task {status.lower()}: {task.get('ApproximateNumberOfMessagesMoved', 0)} of "
            f"{task.get('ApproximateNumberOfMessagesToMove', '?')} moved")
        sleep(poll_s)


# --- the command line: `python -m worker dlq list|redrive` (commands.py builds the parser) ---------------------------

def _age(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 172800:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def format_list(letters: list[DeadLetter], dlq_url: str, sources: list[str], hidden: int, unlisted: int = 0) -> str:
    """The listing as a person reads it: one row per message, the reason last (unshortened)."""
    name = dlq_url.rsplit("/", 1)[-1]
    src = ", ".join(u.rsplit("/", 1)[-1] for u in sources) or "none found"
    lines = [f"{len(letters)} message(s) in {name} (source queue: {src})"]
    if letters:
        wid = max(len(d.id) for d in letters)
        rows = [(d.id, str(d.receives), _age(d.age_s), d.slide or "(no slide)", d.reason) for d in letters]
        sw = min(max(len(r[3]) for r in rows), 60)
        lines.append(f"{'ID':<{wid}}  RECEIVES  {'AGE':<10}  {'SLIDE':<{sw}}  REASON")
        lines += [f"{i:<{wid}}  {n:>8}  {a:<10}  {s:<{sw}}  {r}" for i, n, a, s, r in rows]
    if unlisted:
        lines.append(f"{unlisted} more visible, not listed: past --limit, or behind the first 10 of a FIFO message "
                     "group (a receive hands out no more of one group)")
    if hidden:
        lines.append(f"{hidden} more in flight, not listed: being received elsewhere (a worker, another listing), "
                     f"or held by an interrupted redrive for up to {REDRIVE_HOLD_S // 3600} h")
    return "\n".join(lines)


def _clients() -> tuple[Any, Any]:
    """(the SQS client, one that tries each call once: for probing StartMessageMoveTask where it may not exist)."""
    import boto3
    from botocore.config import Config

    once = Config(retries={"mode": "standard", "total_max_attempts": 1}, read_timeout=40, connect_timeout=10)
    return s3io.sqs_client(), boto3.client("sqs", config=once)


def _need_a_queue(args: Any) -> None:
    if not (args.dlq_url or args.queue_url):
        raise DlqError("--dlq-url (or $DLQ_URL) is required, or --queue-url (or $QUEUE_URL) of a work queue with "
                       "a RedrivePolicy")


def resolve_queues(sqs: Any, dlq_url: str | None, queue_url: str | None) -> tuple[str, list[str]]:
    """(the DLQ URL, its source queues' URLs): --dlq-url, else the work queue's RedrivePolicy."""
    if not dlq_url:
        if not queue_url:
            raise DlqError("no --dlq-url and no --queue-url")
        dlq_url = dlq_of(sqs, queue_url)
    return dlq_url, source_queues(sqs, dlq_url)


def run_list(args: Any, out: Callable[[str], None] = print) -> int:
    """`dlq list`: every message with its reason, receives, age and slide; exit 0."""
    _need_a_queue(args)
    if args.limit < 1:
        raise DlqError(f"--limit {args.limit}: must be at least 1")
    sqs, _ = _clients()
    dlq_url, sources = resolve_queues(sqs, args.dlq_url, args.queue_url)
    letters = list_dead_letters(sqs, dlq_url, limit=args.limit)
    # After the release, SQS's counts say what the listing could not see (approximately, as SQS counts).
    visible, hidden = counts(sqs, dlq_url)
    unlisted = max(visible - len(letters), 0)
    if args.json:
        out(json.dumps({"dlq_url": dlq_url, "source_queues": sources, "messages": [d.to_json() for d in letters],
                        "visible_not_listed": unlisted, "in_flight_not_listed": hidden}, indent=2,
                       ensure_ascii=False))
    else:
        out(format_list(letters, dlq_url, sources, hidden, unlisted))
    return 0


def run_redrive(args: Any, out: Callable[[str], None] = print,
                say: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> int:
    """`dlq redrive --all | --id ID...`: back to the work queue; exit 0, or 1 when a message failed or was not found."""
    _need_a_queue(args)
    if args.method == "move-task" and not args.all:
        raise DlqError("--method move-task moves every message (SQS's task takes no ids): use it with --all")
    sqs, once = _clients()
    dlq_url, sources = resolve_queues(sqs, args.dlq_url, args.queue_url)
    dest = args.queue_url or (sources[0] if len(sources) == 1 else None)
    if not dest:
        raise DlqError(f"{dlq_url.rsplit('/', 1)[-1]} is the dead-letter queue of "
                       f"{len(sources) or 'no'} queue(s){': ' + ', '.join(sources) if sources else ''}; "
                       "pass --queue-url to say where to redrive")
    result: RedriveResult | None = None
    if args.all and args.method in ("auto", "move-task"):
        try:
            dlq_arn = queue_arn(sqs, dlq_url)
            handle = start_move_task(once, dlq_arn, queue_arn(sqs, dest))
        except Exception as e:  # noqa: BLE001 - no move tasks here (an emulator, no permission): copy instead
            code = s3io.error_code(e) or type(e).__name__
            if args.method == "move-task":
                raise DlqError(f"StartMessageMoveTask failed: {code}: {str(e).splitlines()[0][:200]}", 1) from None
            say(f"SQS's message-move task is not available here ({code}); moving message by message")
        else:
            say(f"message-move task started: {handle} (it runs in SQS; Ctrl-C stops waiting, not the task)")
            task = wait_move_task(sqs, dlq_arn, say=say)
            result = RedriveResult("move-task", dest, task={"handle": handle, **{
                k: v for k, v in task.items() if k in ("Status", "ApproximateNumberOfMessagesMoved",
                                                       "ApproximateNumberOfMessagesToMove", "FailureReason")}})
    if result is None:
        result = redrive_messages(sqs, dlq_url, dest, ids=None if args.all else args.id, say=say)
    failed = bool(result.failed or result.missing) or (result.task or {}).get("Status") not in (None, "COMPLETED")
    if args.json:
        out(json.dumps(asdict(result), indent=2, ensure_ascii=False))
        return 1 if failed else 0
    name = dest.rsplit("/", 1)[-1]
    if result.task is not None:
        t = result.task
        out(f"message-move task {t.get('Status', '?')}: {t.get('ApproximateNumberOfMessagesMoved', 0)} message(s) "
            f"moved to {name}" + (f"; {t['FailureReason']}" if t.get("FailureReason") else ""))
    else:
        out(f"{len(result.moved)} message(s) moved to {name}")
        for m in result.moved:
            out(f"  {m['id']} -> {m['new_id']}  {m['slide'] or '(no slide)'}")
    for i in result.missing:
        out(f"not found: {i} (not in the dead-letter queue, or in flight there)")
    for f in result.failed:
        what = ("sent, but not deleted from the dead-letter queue: it reappears there in "
                f"{REDRIVE_HOLD_S // 3600} h; the worker skips the slide if it is done by then") if f["sent"] \
            else "left in the dead-letter queue"
        out(f"failed: {f['id']}: {f['error']} ({what})")
    return 1 if failed else 0
