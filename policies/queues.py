"""Rule `sqs-work-queue`: every SQS work queue has a dead-letter queue, encryption, and a long enough visibility.

Which queues: every `aws:sqs/queue:Queue` is a work queue unless it is itself a dead-letter queue or declares
another role. A queue is a work queue when it is tagged `gpuburst.io/role: work` or has a `redrivePolicy`; it is a
DLQ when it is tagged `gpuburst.io/role: dead-letter` (or `dlq`), declares a `redriveAllowPolicy`, or its name (the
`name` property, else the resource name, without `.fifo`) ends in `-dlq`, `_dlq` or `-dead-letter`; a queue tagged
with any other role (e.g. `gpuburst.io/role: events` on Karpenter's interruption queue, whose consumer deletes every
message it reads) only has to be encrypted. An untagged queue without a redrive policy that is not named as a DLQ
is held to the work-queue rules: forgetting the tag must not exempt a queue.

Why: clinical slides pass through these queues, so every queue (the DLQ too: failed messages move there) must be
encrypted at rest (`sqsManagedSseEnabled: true` or a `kmsMasterKeyId`). A work queue without a redrive policy
retries a poison message forever, burning GPU time; and a visibility timeout shorter than twice the declared
processing time (`gpuburst.io/expected-processing-s`, required on queues tagged `work`) hands a slide to a second
worker while the first is still on it.
"""
from __future__ import annotations

import json
from typing import Any

from .declare import resource_policy
from .resources import SQS_QUEUE, as_int, as_number, dig, fmt
from .unknowns import unknown_message

NAME = "sqs-work-queue"
TAG_ROLE = "gpuburst.io/role"
"""Tag saying what a queue is (set by components/queue.py; tests keep the two in step)."""
TAG_EXPECTED_PROCESSING = "gpuburst.io/expected-processing-s"
"""Tag with the declared seconds one message takes to process."""
ROLE_WORK = "work"
DLQ_ROLES = ("dead-letter", "dlq")
DLQ_NAME_SUFFIXES = ("-dlq", "_dlq", "-dead-letter")
VISIBILITY_FACTOR = 2
"""The visibility timeout must be at least this many times the declared processing time."""
SQS_DEFAULT_VISIBILITY_S = 30
"""What SQS uses when `visibilityTimeoutSeconds` is not set."""
KIND_NAMES = {"work": "work queue", "dlq": "dead-letter queue", "other": "queue that is not a work queue"}


def role(props: Any, resource_name: str) -> tuple[str | None, str]:
    """("work" | "dlq" | "other" | None when it cannot be told during preview, why)."""
    tags = dig(props, "tags")
    redrive = dig(props, "redrivePolicy")
    tag = dig(props, "tags", TAG_ROLE)
    if isinstance(tag.value, str) and tag.value.strip().lower() == ROLE_WORK:
        return "work", f"{tag.path} = {fmt(tag.value)}"
    if isinstance(tag.value, str) and tag.value.strip().lower() in DLQ_ROLES:
        return "dlq", f"{tag.path} = {fmt(tag.value)}"
    if not redrive.missing:
        return "work", "it has a redrivePolicy"
    if isinstance(tag.value, str) and tag.value.strip():
        return "other", f"{tag.path} = {fmt(tag.value)} declares it is not a work queue"
    if not dig(props, "redriveAllowPolicy").missing:
        return "dlq", "it declares a redriveAllowPolicy"
    if tags.unknown or tag.unknown:
        return None, (tags if tags.unknown else tag).path
    name = dig(props, "name")
    if name.unknown:
        return None, name.path
    label = name.value if isinstance(name.value, str) else resource_name
    base = label[: -len(".fifo")] if label.endswith(".fifo") else label
    if base.lower().endswith(DLQ_NAME_SUFFIXES):
        return "dlq", f"its name {label!r} marks a dead-letter queue"
    return "work", "it is not a dead-letter queue"


def _encryption_problem(props: Any) -> str | None:
    kms = dig(props, "kmsMasterKeyId")
    if kms.unknown or (isinstance(kms.value, str) and kms.value.strip()):
        return None  # a customer-managed key is set (its id may be another resource's output)
    sse = dig(props, "sqsManagedSseEnabled")
    if sse.unknown:
        return unknown_message(sse.path, "whether the queue is encrypted")
    if sse.value is True:
        return None
    got = "is not set" if sse.missing else f"is {fmt(sse.value)}"
    return (f"{sse.path} {got} and kmsMasterKeyId is not set: the queue holds clinical data unencrypted; set "
            "sqsManagedSseEnabled: true (SSE-SQS) or kmsMasterKeyId (SSE-KMS)")


def _redrive_problem(props: Any) -> str | None:
    redrive = dig(props, "redrivePolicy")
    if redrive.unknown:
        return None  # present; its content (the DLQ's ARN) is computed at preview, as it normally is
    if redrive.missing:
        return (f"{redrive.path} is missing: a poison message would be retried forever; attach a dead-letter queue "
                "with redrivePolicy {deadLetterTargetArn: DLQ_ARN, maxReceiveCount: N}")
    doc = redrive.value
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except ValueError:
            return f"{redrive.path} = {fmt(redrive.value)} is not JSON: write {{deadLetterTargetArn, maxReceiveCount}}"
    if not isinstance(doc, dict):
        return f"{redrive.path} = {fmt(redrive.value)}: write {{deadLetterTargetArn, maxReceiveCount}}"
    target, count = doc.get("deadLetterTargetArn"), as_int(doc.get("maxReceiveCount"))
    if not (isinstance(target, str) and target.strip()) or count is None or count < 1:
        return (f"{redrive.path} = {fmt(redrive.value)}: it needs a deadLetterTargetArn and a maxReceiveCount >= 1 "
                "to move a poison message to the DLQ")
    return None


def _visibility_problem(props: Any, is_tagged_work: bool) -> str | None:
    expected = dig(props, "tags", TAG_EXPECTED_PROCESSING)
    if expected.unknown:
        return unknown_message(expected.path, "the visibility timeout against the declared processing time")
    if expected.missing:
        if is_tagged_work:
            return (f"{expected.path} is missing: a queue tagged {TAG_ROLE}: {ROLE_WORK} must declare how many "
                    f"seconds one message takes, so the visibility timeout can be checked against it")
        return None
    seconds = as_number(expected.value)
    if seconds is None or seconds <= 0:
        return f"{expected.path} = {fmt(expected.value)}: declare a positive number of seconds"
    visibility = dig(props, "visibilityTimeoutSeconds")
    if visibility.unknown:
        return unknown_message(visibility.path, "the visibility timeout against the declared processing time")
    vis = SQS_DEFAULT_VISIBILITY_S if visibility.missing else as_number(visibility.value)
    need = VISIBILITY_FACTOR * seconds
    if vis is not None and vis >= need:
        return None
    shown = (f"is not set (SQS default {SQS_DEFAULT_VISIBILITY_S} s)" if visibility.missing
             else f"= {fmt(visibility.value)}")
    return (f"{visibility.path} {shown}, less than {VISIBILITY_FACTOR} x {expected.path} ({fmt(expected.value)} s) "
            f"= {need:g} s: a second worker would get the message while the first is still processing it; set "
            f"visibilityTimeoutSeconds >= {need:g}")


def problems(props: Any, resource_name: str = "") -> list[str]:
    """Why this SQS queue (plain props) breaks the queue rules; empty when it is fine."""
    kind, why = role(props, resource_name)
    if kind is None:
        return [unknown_message(why, "whether this queue is a work queue or a dead-letter queue")]
    out = [_encryption_problem(props)]
    if kind == "work":
        tagged = dig(props, "tags", TAG_ROLE).value
        out += [_redrive_problem(props),
                _visibility_problem(props, isinstance(tagged, str) and tagged.strip().lower() == ROLE_WORK)]
    suffix = f" (a {KIND_NAMES[kind]}: {why})"
    return [p + suffix for p in out if p]


POLICY = resource_policy(
    NAME, "Every SQS queue is encrypted (SSE-SQS or KMS); every work queue also has a dead-letter queue "
          f"(redrivePolicy) and a visibility timeout >= {VISIBILITY_FACTOR}x its declared processing time.",
    (SQS_QUEUE,), lambda r: problems(r.props, r.name))

POLICIES = [POLICY]
