"""Pure builders of IAM and resource-policy documents (TLS-only queue/bucket policies, least-privilege statements).

Every function returns plain dicts. ARNs may be plain strings or `pulumi.Output`s: strings are checked and joined
here; Outputs are joined with `Output.concat`, so a caller can pass the result straight to
`pulumi.Output.from_input(doc).apply(json.dumps)`. No Allow statement here ever uses a `*` action; the only `*`
actions are in the Deny statements of the TLS-only policies (deny *everything* over plain HTTP) and in the key
policy's account-root statement (the standard statement that keeps a KMS key manageable through IAM).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import pulumi

from .validation import ConfigError

POLICY_VERSION = "2012-10-17"
"""The IAM policy language version every document here declares."""

QUEUE_CONSUMER_ACTIONS = (
    "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes",
    "sqs:GetQueueUrl",
)
"""What a worker needs on its queue: receive, delete when done, extend visibility (the heartbeat), look up the URL."""

QUEUE_PRODUCER_ACTIONS = ("sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl")
"""What a producer needs on the queue (SendMessageBatch is authorised by sqs:SendMessage)."""

QUEUE_METRICS_ACTIONS = ("sqs:GetQueueAttributes",)
"""What a scaler (KEDA's aws-sqs-queue trigger) needs: the queue-length attributes, nothing else."""

S3_READ_ACTIONS = ("s3:GetObject",)
"""Reading objects (HeadObject is authorised by s3:GetObject)."""

S3_WRITE_ACTIONS = ("s3:PutObject", "s3:AbortMultipartUpload")
"""Writing objects, multipart included (Create/UploadPart/Complete are authorised by s3:PutObject)."""

_SQS_ARN = re.compile(r"^arn:aws[a-z-]*:sqs:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,75}(\.fifo)?$")
_S3_BUCKET_ARN = re.compile(r"^arn:aws[a-z-]*:s3:::[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_KMS_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key|alias)/.+$")
# A key prefix: printable ASCII, ending in '/', no leading '/', and no IAM wildcard characters ('*', '?') that would
# widen the grant beyond the prefix.
_PREFIX = re.compile(r"^[!-~](?:[ -~]{0,510})?/$")


def _is_output(value: Any) -> bool:
    return isinstance(value, pulumi.Output)


def _join(*parts: Any) -> Any:
    """Concatenate strings, or build an Output when any part is one."""
    if any(_is_output(p) for p in parts):
        return pulumi.Output.concat(*parts)
    return "".join(parts)


def _check_arn(field: str, value: Any, pattern: re.Pattern, what: str) -> None:
    """Check a plain-string ARN; Outputs are checked by the provider at deploy time."""
    if _is_output(value):
        return
    if not isinstance(value, str) or not pattern.match(value):
        raise ConfigError(field, value, what)


def _check_prefixes(field: str, prefixes: Sequence[str]) -> list[str]:
    if isinstance(prefixes, str):
        raise ConfigError(field, prefixes, "a list of key prefixes, not a single string")
    out = []
    for p in prefixes:
        if not isinstance(p, str) or not _PREFIX.match(p) or p.startswith("/") or "*" in p or "?" in p:
            raise ConfigError(field, p, "a key prefix of printable ASCII ending in '/', not starting with '/', "
                                        "without '*' or '?' (e.g. 'results/')")
        out.append(p)
    return out


def policy_document(statements: Iterable[dict]) -> dict:
    """Wrap statements in a policy document."""
    return {"Version": POLICY_VERSION, "Statement": list(statements)}


def deny_insecure_transport_statement(service: str, resources: list[Any]) -> dict:
    """Deny every action of `service` on `resources` to everyone when the request is not over TLS."""
    return {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": f"{service}:*",
        "Resource": resources if len(resources) > 1 else resources[0],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def queue_tls_only_policy(queue_arn: Any) -> dict:
    """SQS queue policy: deny all SQS actions on the queue over plain HTTP (`aws:SecureTransport` false)."""
    _check_arn("queue_arn", queue_arn, _SQS_ARN, "an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)")
    return policy_document([deny_insecure_transport_statement("sqs", [queue_arn])])


MINIMUM_TLS_VERSION = "1.2"
"""Oldest TLS version the buckets accept (S3's `s3:TlsVersion` condition key)."""


def bucket_tls_only_policy(bucket_arn: Any) -> dict:
    """S3 bucket policy: deny all S3 actions over plain HTTP, and over TLS older than `MINIMUM_TLS_VERSION`."""
    _check_arn("bucket_arn", bucket_arn, _S3_BUCKET_ARN, "an S3 bucket ARN (arn:aws:s3:::BUCKET)")
    resources = [bucket_arn, _join(bucket_arn, "/*")]
    return policy_document([
        deny_insecure_transport_statement("s3", resources),
        {
            "Sid": "DenyOutdatedTls",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": resources,
            "Condition": {"NumericLessThan": {"s3:TlsVersion": MINIMUM_TLS_VERSION}},
        },
    ])


def _kms_statement(kms_key_arn: Any, actions: tuple[str, ...], service: str) -> dict:
    _check_arn("kms_key_arn", kms_key_arn, _KMS_ARN, "a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)")
    # kms:ViaService limits the grant to use through the queue/bucket: the role cannot decrypt anything else with it.
    return {
        "Effect": "Allow",
        "Action": list(actions),
        "Resource": kms_key_arn,
        "Condition": {"StringLike": {"kms:ViaService": f"{service}.*.amazonaws.com"}},
    }


def queue_consumer_statements(queue_arn: Any, *, kms_key_arn: Any = None) -> list[dict]:
    """IAM statements a worker needs to consume one queue (receive, delete, extend visibility, get attributes/URL).

    `kms_key_arn`: the customer-managed key the queue is encrypted with, when it is (kms:Decrypt through SQS);
    None for SQS-managed SSE, which needs no KMS permission.
    """
    _check_arn("queue_arn", queue_arn, _SQS_ARN, "an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)")
    statements = [{"Effect": "Allow", "Action": list(QUEUE_CONSUMER_ACTIONS), "Resource": queue_arn}]
    if kms_key_arn is not None:
        statements.append(_kms_statement(kms_key_arn, ("kms:Decrypt",), "sqs"))
    return statements


def queue_producer_statements(queue_arn: Any, *, kms_key_arn: Any = None) -> list[dict]:
    """IAM statements a producer needs to send to one queue (plus GenerateDataKey/Decrypt when CMK-encrypted)."""
    _check_arn("queue_arn", queue_arn, _SQS_ARN, "an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)")
    statements = [{"Effect": "Allow", "Action": list(QUEUE_PRODUCER_ACTIONS), "Resource": queue_arn}]
    if kms_key_arn is not None:
        statements.append(_kms_statement(kms_key_arn, ("kms:GenerateDataKey", "kms:Decrypt"), "sqs"))
    return statements


def queue_metrics_statements(queue_arn: Any) -> list[dict]:
    """IAM statements a queue-length scaler needs (sqs:GetQueueAttributes on the one queue)."""
    _check_arn("queue_arn", queue_arn, _SQS_ARN, "an SQS queue ARN (arn:aws:sqs:REGION:ACCOUNT:NAME)")
    return [{"Effect": "Allow", "Action": list(QUEUE_METRICS_ACTIONS), "Resource": queue_arn}]


def s3_prefix_statements(bucket_arn: Any, read_prefixes: Sequence[str], write_prefixes: Sequence[str], *,
                         kms_key_arn: Any = None) -> list[dict]:
    """IAM statements to read objects under `read_prefixes` and write objects under `write_prefixes` of one bucket.

    Reading also gets `s3:ListBucket` limited (by the `s3:prefix` condition) to the read prefixes, so a missing
    object answers 404 rather than 403 (the worker tells "not there yet" from "not allowed" that way). A prefix
    that is both read and written (results the worker checks before writing) goes in both lists. `kms_key_arn`:
    the bucket's customer-managed key, when there is one (None for SSE-S3 or the AWS-managed `aws/s3` key, which
    in-account principals use through S3 without a KMS grant).
    """
    _check_arn("bucket_arn", bucket_arn, _S3_BUCKET_ARN, "an S3 bucket ARN (arn:aws:s3:::BUCKET)")
    reads = _check_prefixes("read_prefixes", read_prefixes)
    writes = _check_prefixes("write_prefixes", write_prefixes)
    if not reads and not writes:
        raise ConfigError("read_prefixes", list(read_prefixes), "at least one read or write prefix")
    statements: list[dict] = []
    if reads:
        statements.append({"Effect": "Allow", "Action": list(S3_READ_ACTIONS),
                           "Resource": [_join(bucket_arn, "/", p, "*") for p in reads]})
        statements.append({"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": bucket_arn,
                           "Condition": {"StringLike": {"s3:prefix": [p + "*" for p in reads]}}})
    if writes:
        statements.append({"Effect": "Allow", "Action": list(S3_WRITE_ACTIONS),
                           "Resource": [_join(bucket_arn, "/", p, "*") for p in writes]})
    if kms_key_arn is not None:
        actions = (("kms:Decrypt",) if reads else ()) + (("kms:GenerateDataKey",) if writes else ())
        if writes and "kms:Decrypt" not in actions:
            actions += ("kms:Decrypt",)  # multipart uploads decrypt the data key to complete the upload
        statements.append(_kms_statement(kms_key_arn, actions, "s3"))
    return statements


def alarm_topic_key_policy(account_id: str, partition: str, region: str, alarm_names: Sequence[str]) -> dict:
    """Key policy of the customer-managed key that encrypts an alarm topic.

    CloudWatch publishes to an SSE topic only if the topic's key lets `cloudwatch.amazonaws.com` use it. The
    AWS-managed `alias/aws/sns` key's policy cannot be changed, so alarms publishing to a topic encrypted with it
    fail (the alarm changes state; nobody is told). The grant is pinned to this account and to the named alarms.
    """
    root = f"arn:{partition}:iam::{account_id}:root"
    alarm_arns = [f"arn:{partition}:cloudwatch:{region}:{account_id}:alarm:{n}" for n in alarm_names]
    return policy_document([
        {
            "Sid": "AccountAdministersKeyThroughIam",
            "Effect": "Allow",
            "Principal": {"AWS": root},
            "Action": "kms:*",
            "Resource": "*",
        },
        {
            "Sid": "CloudWatchAlarmsPublishToEncryptedTopic",
            "Effect": "Allow",
            "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
            "Resource": "*",
            "Condition": {"StringEquals": {"aws:SourceAccount": account_id},
                          "ArnLike": {"aws:SourceArn": alarm_arns}},
        },
    ])


def allow_wildcard_actions(statements: Iterable[dict]) -> list[str]:
    """Every action with a `*` in an Allow statement (empty for a least-privilege set of statements)."""
    found = []
    for st in statements:
        if st.get("Effect") != "Allow":
            continue
        actions = st.get("Action", [])
        for a in [actions] if isinstance(actions, str) else actions:
            if "*" in a:
                found.append(a)
    return found
