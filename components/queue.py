"""A work queue for slides: SQS queue + dead-letter queue, TLS-only and encrypted, with alarms that page someone.

The queue's settings are rendered by pure functions (`queue_attributes`, `dead_letter_attributes`,
`redrive_policy`) in SQS's own attribute names, so the component and the moto_server test create queues from the
very same values. The alarms exist because this product's failures are silent: work that nobody consumes just
waits, and a poison message just moves to the DLQ.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from .spec import policy_documents
from .spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate

SQS_MAX_VISIBILITY_TIMEOUT_S = 43200
"""SQS's ceiling on a visibility timeout (12 hours)."""

VISIBILITY_FACTOR = 2
"""Visibility timeout = this × the declared processing time: room for a slow slide before a second worker gets it."""

MAX_EXPECTED_PROCESSING_S = SQS_MAX_VISIBILITY_TIMEOUT_S // VISIBILITY_FACTOR
"""Longest processing time that can be declared (21600 s): twice it is SQS's visibility ceiling."""

RECEIVE_WAIT_TIME_S = 20
"""Long polling: a receive waits up to 20 s (SQS's maximum) for a message instead of returning empty at once."""

DLQ_RETENTION_S = 1209600
"""Dead-letter retention: 14 days, SQS's maximum, so a failure found after a holiday is still there to inspect."""

DEFAULT_OLDEST_MESSAGE_ALARM_FLOOR_S = 900
"""Smallest derived age-alarm threshold: GPU scale-from-zero (node boot + multi-GB CUDA image pull) takes minutes."""

TAG_EXPECTED_PROCESSING = "gpuburst.io/expected-processing-s"
"""Queue tag holding the declared processing seconds; a policy rule checks visibility ≥ 2× it."""

TAG_ROLE = "gpuburst.io/role"
"""Queue tag saying what the queue is: `work` or `dead-letter`."""

DLQ_SUFFIX = "-dlq"
FIFO_SUFFIX = ".fifo"
MAX_BASE_NAME = 80 - len(DLQ_SUFFIX) - len(FIFO_SUFFIX)
"""Longest base name (71): SQS names are ≤ 80 characters including `-dlq` and `.fifo`."""

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_EMAIL = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$")
_KMS_KEY = re.compile(r"^(arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key|alias)/.+|alias/[A-Za-z0-9/_-]+|[0-9a-f-]{36})$")


@dataclass
class WorkQueueArgs:
    """Inputs of a WorkQueue."""

    expected_processing_s: int
    """Seconds one slide normally takes end to end on a warm worker (1..21600). Required: the visibility timeout is
    derived from it (2×), and it is tagged on both queues so a policy can check the derivation."""
    name: str | None = None
    """Base physical name of the queues (letters, digits, `-`, `_`; ≤ 71 characters): the work queue is `NAME`,
    the DLQ `NAME-dlq` (each with `.fifo` when `fifo`). Default: the component's resource name. Include the stack
    name: SQS names are unique per account and region."""
    max_receive_count: int = 5
    """Receives before a message moves to the DLQ (1..1000). Default 5: a worker killed during a long poll (a spot
    interruption, an eviction) still takes a receive that SQS counts, so 3 dead-lettered good slides in a soak with
    kills; 5 absorbs that, and a slide the worker judges bad is dead-lettered at once anyway (docs/worker.md,
    "Choosing maxReceiveCount")."""
    message_retention_s: int = 345600
    """How long the work queue keeps a message, in seconds (60..1209600). Default 4 days. Keep it below the DLQ's
    14 days: a standard queue's DLQ keeps a message's original enqueue time, so retention left over in the DLQ is
    14 days minus the time the message already spent here."""
    fifo: bool = False
    """FIFO queues (`.fifo` names, content-based dedup, high-throughput mode: `deduplication_scope=messageGroup`,
    `fifo_throughput_limit=perMessageGroupId`). Producers set MessageGroupId = the message's `study`, so slides of
    one study are processed in order, one at a time, while different studies run in parallel. Default False."""
    kms_key_id: pulumi.Input[str] | None = None
    """Customer-managed KMS key (ARN, `alias/...` or key id; may be an Output, e.g. `DataKey.key_arn`) to encrypt
    both queues with (SSE-KMS). Consumers then need kms:Decrypt and producers kms:GenerateDataKey and kms:Decrypt on
    it (`queue_consumer_statements`/`queue_producer_statements(kms_key_arn=...)`). The alarm topic keeps its own key
    (CloudWatch must be allowed to use it). Default None: SQS-managed SSE (SSE-SQS), which needs no key policy and no
    KMS permission on the consumers' roles."""
    kms_data_key_reuse_s: int = 300
    """With `kms_key_id`: seconds SQS reuses a data key before calling KMS again (60..86400). Default 300."""
    alarm_emails: list[str] = field(default_factory=list)
    """Addresses subscribed (protocol email) to the alarm topic. At least one is required: an alarm nobody hears
    is the silent failure these alarms exist to prevent. Each subscriber must confirm the email AWS sends."""
    oldest_message_alarm_s: int | None = None
    """Alarm when the oldest message is at least this many seconds old (60..1209600). It must exceed
    `expected_processing_s` (a message being worked on counts: SQS measures the oldest undeleted message) and be
    below `message_retention_s` (or messages expire before anyone is told). Default None: max(900, 2 ×
    expected_processing_s)."""
    dlq_alarm_threshold: int = 0
    """Alarm when the DLQ holds more than this many visible messages (0..100000). Default 0: any message."""
    tags: dict[str, str] = field(default_factory=dict)
    """Extra tags on every resource. Default none. The `gpuburst.io/` keys are reserved."""


# --------------------------------------------------------------------------------------------------------------------
# Validation.
# --------------------------------------------------------------------------------------------------------------------

def _is_email_list(v: Any) -> bool:
    return (isinstance(v, list) and len(v) >= 1 and all(isinstance(a, str) and _EMAIL.match(a) for a in v)
            and len({a.lower() for a in v}) == len(v))


EXPECTED_PROCESSING_RULE = Rule(
    "expected_processing_s", is_int_between(1, MAX_EXPECTED_PROCESSING_S),
    f"an int of seconds in 1..{MAX_EXPECTED_PROCESSING_S} (the visibility timeout is {VISIBILITY_FACTOR}x it "
    f"and SQS caps visibility at {SQS_MAX_VISIBILITY_TIMEOUT_S} s)")
"""The rule behind the derived visibility timeout."""

RULES: tuple[Rule, ...] = (
    Rule("name", lambda v: isinstance(v, str) and bool(_NAME.match(v)) and len(v) <= MAX_BASE_NAME,
         f"1..{MAX_BASE_NAME} letters, digits, '-' or '_' (the DLQ adds '{DLQ_SUFFIX}', FIFO adds '{FIFO_SUFFIX}')"),
    EXPECTED_PROCESSING_RULE,
    Rule("max_receive_count", is_int_between(1, 1000), "an int in 1..1000"),
    Rule("message_retention_s", is_int_between(60, 1209600), "an int of seconds in 60..1209600 (1 minute..14 days)"),
    Rule("fifo", lambda v: isinstance(v, bool), "true or false"),
    Rule("kms_key_id", lambda v: v is None or isinstance(v, pulumi.Output) or (
        isinstance(v, str) and bool(_KMS_KEY.match(v))), "None or a KMS key ARN, 'alias/NAME' or key id"),
    Rule("kms_data_key_reuse_s", is_int_between(60, 86400), "an int of seconds in 60..86400"),
    Rule("alarm_emails", _is_email_list,
         "a list of at least one distinct email address (the alarms are the only signal that work is stuck)"),
    Rule("oldest_message_alarm_s", lambda v: v is None or is_int_between(60, 1209600)(v),
         "None or an int of seconds in 60..1209600"),
    Rule("dlq_alarm_threshold", is_int_between(0, 100000), "an int count of messages in 0..100000"),
    Rule("tags", lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str)
                                                       and not k.startswith("gpuburst.io/") for k, x in v.items()),
         "a dict of str to str without 'gpuburst.io/' keys (reserved)"),
)
"""Per-field rules; cross-field rules are in `validate_args`."""


def validate_args(args: WorkQueueArgs, name: str) -> None:
    """Raise ConfigError (one line: field, value, what is allowed) for the first bad field of `args`."""
    values = dict(vars(args))
    values["name"] = name
    validate(values, RULES)
    if args.oldest_message_alarm_s is not None:
        if args.oldest_message_alarm_s <= args.expected_processing_s:
            raise ConfigError("oldest_message_alarm_s", args.oldest_message_alarm_s,
                              f"more than expected_processing_s={args.expected_processing_s} (a message being "
                              "processed counts as the oldest message; a smaller threshold alarms on normal work)")
    threshold = oldest_message_alarm_threshold_s(args)
    if threshold >= args.message_retention_s:
        raise ConfigError("oldest_message_alarm_s", threshold,
                          f"less than message_retention_s={args.message_retention_s} (otherwise messages expire "
                          "before the age alarm fires)")


# --------------------------------------------------------------------------------------------------------------------
# Pure renderers: the values both the component and the moto_server test use.
# --------------------------------------------------------------------------------------------------------------------

def derived_visibility_timeout_s(expected_processing_s: int) -> int:
    """Visibility timeout = 2 × the declared processing time; ConfigError past SQS's 43200 s ceiling."""
    validate({"expected_processing_s": expected_processing_s}, [EXPECTED_PROCESSING_RULE])
    return VISIBILITY_FACTOR * expected_processing_s


def oldest_message_alarm_threshold_s(args: WorkQueueArgs) -> int:
    """The age alarm's threshold in seconds: the declared one, or max(900, 2 × expected_processing_s)."""
    if args.oldest_message_alarm_s is not None:
        return args.oldest_message_alarm_s
    return max(DEFAULT_OLDEST_MESSAGE_ALARM_FLOOR_S, VISIBILITY_FACTOR * args.expected_processing_s)


def queue_names(name: str, fifo: bool) -> tuple[str, str]:
    """(work queue name, DLQ name) for a base name."""
    suffix = FIFO_SUFFIX if fifo else ""
    return f"{name}{suffix}", f"{name}{DLQ_SUFFIX}{suffix}"


def _common_attributes(args: WorkQueueArgs) -> dict[str, Any]:
    attrs = {
        "VisibilityTimeout": str(derived_visibility_timeout_s(args.expected_processing_s)),
        "ReceiveMessageWaitTimeSeconds": str(RECEIVE_WAIT_TIME_S),
    }
    if args.kms_key_id:
        attrs["KmsMasterKeyId"] = args.kms_key_id
        attrs["KmsDataKeyReusePeriodSeconds"] = str(args.kms_data_key_reuse_s)
    else:
        attrs["SqsManagedSseEnabled"] = "true"
    if args.fifo:
        attrs.update({
            "FifoQueue": "true",
            # Dedup on a SHA-256 of the body: a producer re-sending the same slide message within 5 minutes is a no-op.
            "ContentBasedDeduplication": "true",
            # High-throughput FIFO: dedup and the throughput quota are per message group (= per study).
            "DeduplicationScope": "messageGroup",
            "FifoThroughputLimit": "perMessageGroupId",
        })
    return attrs


def queue_attributes(args: WorkQueueArgs) -> dict[str, Any]:
    """The work queue's SQS attributes (CreateQueue names and string values; `KmsMasterKeyId` may be an Output),
    without the RedrivePolicy."""
    attrs = _common_attributes(args)
    attrs["MessageRetentionPeriod"] = str(args.message_retention_s)
    return attrs


def dead_letter_attributes(args: WorkQueueArgs) -> dict[str, Any]:
    """The DLQ's SQS attributes: same visibility, polling, encryption and FIFO-ness; 14 days' retention."""
    attrs = _common_attributes(args)
    attrs["MessageRetentionPeriod"] = str(DLQ_RETENTION_S)
    return attrs


def redrive_policy(dlq_arn: str, max_receive_count: int) -> str:
    """The work queue's RedrivePolicy JSON: after `max_receive_count` receives a message moves to `dlq_arn`."""
    return json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receive_count})


def redrive_allow_policy(source_queue_arn: str) -> str:
    """The DLQ's RedriveAllowPolicy JSON: only the named source queue may use it as its dead-letter queue."""
    return json.dumps({"redrivePermission": "byQueue", "sourceQueueArns": [source_queue_arn]})


def queue_tags(args: WorkQueueArgs, role: str) -> dict[str, str]:
    """Tags of one queue: the caller's, plus the declared processing seconds and the queue's role."""
    tags = dict(args.tags)
    tags[TAG_EXPECTED_PROCESSING] = str(args.expected_processing_s)
    tags[TAG_ROLE] = role
    return tags


_PULUMI_QUEUE_ARGS: dict[str, tuple[str, type]] = {
    "VisibilityTimeout": ("visibility_timeout_seconds", int),
    "ReceiveMessageWaitTimeSeconds": ("receive_wait_time_seconds", int),
    "MessageRetentionPeriod": ("message_retention_seconds", int),
    "SqsManagedSseEnabled": ("sqs_managed_sse_enabled", bool),
    "KmsMasterKeyId": ("kms_master_key_id", str),
    "KmsDataKeyReusePeriodSeconds": ("kms_data_key_reuse_period_seconds", int),
    "FifoQueue": ("fifo_queue", bool),
    "ContentBasedDeduplication": ("content_based_deduplication", bool),
    "DeduplicationScope": ("deduplication_scope", str),
    "FifoThroughputLimit": ("fifo_throughput_limit", str),
}
"""SQS attribute name -> (aws.sqs.Queue keyword, Python type)."""


def pulumi_queue_args(attributes: dict[str, Any]) -> dict[str, Any]:
    """Translate SQS attributes into `aws.sqs.Queue` keyword arguments (plain values, known during preview; an
    Output, such as a key ARN, is passed through)."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if key not in _PULUMI_QUEUE_ARGS:
            raise KeyError(f"no aws.sqs.Queue argument for SQS attribute {key!r}")
        kw, typ = _PULUMI_QUEUE_ARGS[key]
        out[kw] = value if isinstance(value, pulumi.Output) else (value == "true") if typ is bool else typ(value)
    return out


@dataclass(frozen=True)
class AlarmSpec:
    """One CloudWatch alarm on an SQS metric, as plain values."""

    name: str
    """Alarm name (also the last part of its ARN, which the topic key's policy names)."""
    queue_name: str
    """The `QueueName` dimension."""
    metric_name: str
    """SQS metric in the `AWS/SQS` namespace."""
    comparison_operator: str
    threshold: float
    statistic: str
    period_s: int
    evaluation_periods: int
    treat_missing_data: str
    description: str


def alarm_specs(args: WorkQueueArgs, name: str) -> list[AlarmSpec]:
    """The two alarms: work waiting too long on the work queue, and anything at all in the DLQ."""
    work, dlq = queue_names(name, args.fifo)
    age = oldest_message_alarm_threshold_s(args)
    return [
        AlarmSpec(
            name=f"{work}-oldest-message-age", queue_name=work, metric_name="ApproximateAgeOfOldestMessage",
            comparison_operator="GreaterThanOrEqualToThreshold", threshold=float(age), statistic="Maximum",
            period_s=60, evaluation_periods=1,
            # SQS publishes a queue's metrics only while it is active (it holds messages, or was called in the last
            # 6 hours). No data therefore means an idle, empty queue: nothing is waiting, which is not breaching.
            treat_missing_data="notBreaching",
            description=(f"A slide has waited {age} s or more in {work}: nothing is consuming the queue (workers "
                         "not scaling, crashing, or lacking permissions), or a slide is stuck in processing."),
        ),
        AlarmSpec(
            name=f"{dlq}-not-empty", queue_name=dlq, metric_name="ApproximateNumberOfMessagesVisible",
            comparison_operator="GreaterThanThreshold", threshold=float(args.dlq_alarm_threshold),
            statistic="Maximum", period_s=60, evaluation_periods=1,
            # A DLQ holding messages is active, so its metrics keep flowing for as long as anything sits in it.
            # Missing data means it is empty and idle: not breaching. (NumberOfMessagesSent would miss redriven
            # messages; ApproximateNumberOfMessagesVisible counts them.)
            treat_missing_data="notBreaching",
            description=(f"{dlq} holds more than {args.dlq_alarm_threshold} message(s): slides failed "
                         f"{args.max_receive_count} times and were set aside. Inspect, fix, then redrive."),
        ),
    ]


# --------------------------------------------------------------------------------------------------------------------
# The component.
# --------------------------------------------------------------------------------------------------------------------

@names_its_errors
class WorkQueue(pulumi.ComponentResource):
    """SQS work queue + DLQ (redrive, TLS-only policies, SSE), two CloudWatch alarms, and an encrypted SNS topic."""

    queue: aws.sqs.Queue
    """The work queue."""
    dlq: aws.sqs.Queue
    """Its dead-letter queue."""
    topic: aws.sns.Topic
    """The encrypted SNS topic both alarms notify (`alarm_emails` are subscribed to it)."""
    queue_url: pulumi.Output[str]
    """The work queue's URL: a workload's `queue_url`, what producers send to."""
    queue_arn: pulumi.Output[str]
    """The work queue's ARN: a workload's `queue_arn` (its role's grants)."""
    queue_name: str
    """The work queue's physical name (`NAME`, or `NAME.fifo`)."""
    dlq_url: pulumi.Output[str]
    """The dead-letter queue's URL (`python -m worker dlq list` reads it)."""
    dlq_arn: pulumi.Output[str]
    """The dead-letter queue's ARN: a workload's `dead_letter_queue_arn`."""
    dlq_name: str
    """The dead-letter queue's physical name (`NAME-dlq`, or `NAME-dlq.fifo`)."""
    topic_arn: pulumi.Output[str]
    """The alarm topic's ARN."""
    visibility_timeout_s: int
    """The work queue's visibility timeout, seconds: 2 × `expected_processing_s`. Pass it as both
    `WorkerPodSettings.visibility_timeout_s` and the workload's `queue_visibility_timeout_s`."""
    fifo: bool
    """Whether the queues are FIFO (`WorkQueueArgs.fifo`)."""
    topic_key: aws.kms.Key
    alarms: list[aws.cloudwatch.MetricAlarm]

    def __init__(self, name: str, args: WorkQueueArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        base = args.name if args.name is not None else name
        validate_args(args, base)
        super().__init__("gpuburst:index:WorkQueue", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        self.fifo = args.fifo
        self.visibility_timeout_s = derived_visibility_timeout_s(args.expected_processing_s)
        self.queue_name, self.dlq_name = queue_names(base, args.fifo)

        self.dlq = aws.sqs.Queue(
            f"{name}-dlq", name=self.dlq_name, tags=queue_tags(args, "dead-letter"),
            **pulumi_queue_args(dead_letter_attributes(args)), opts=child)
        self.queue = aws.sqs.Queue(
            f"{name}-queue", name=self.queue_name, tags=queue_tags(args, "work"),
            redrive_policy=self.dlq.arn.apply(lambda arn: redrive_policy(arn, args.max_receive_count)),
            **pulumi_queue_args(queue_attributes(args)), opts=child)
        # A separate resource, not the DLQ's own attribute: the DLQ must exist before the queue that names it, so it
        # cannot name that queue at creation.
        aws.sqs.RedriveAllowPolicy(
            f"{name}-dlq-redrive-allow", queue_url=self.dlq.url,
            redrive_allow_policy=self.queue.arn.apply(redrive_allow_policy), opts=child)
        for label, q in (("queue", self.queue), ("dlq", self.dlq)):
            aws.sqs.QueuePolicy(
                f"{name}-{label}-tls-only", queue_url=q.url,
                policy=q.arn.apply(lambda arn: json.dumps(policy_documents.queue_tls_only_policy(arn))), opts=child)

        specs = alarm_specs(args, base)
        alarm_names = [s.name for s in specs]
        # Partition, region and account come from the queue's own ARN (arn:PARTITION:sqs:REGION:ACCOUNT:NAME): the
        # alarms live where the queue lives, and no lookup is needed.
        key_policy = self.queue.arn.apply(lambda arn: json.dumps(policy_documents.alarm_topic_key_policy(
            arn.split(":")[4], arn.split(":")[1], arn.split(":")[3], alarm_names)))
        # Not alias/aws/sns: CloudWatch cannot use the AWS-managed SNS key (its policy cannot grant the CloudWatch
        # service principal), so alarms would fire into a topic that silently drops them.
        self.topic_key = aws.kms.Key(
            f"{name}-alarm-key", description=f"Encrypts the alarm topic of {self.queue_name}",
            enable_key_rotation=True, deletion_window_in_days=30, policy=key_policy, tags=dict(args.tags),
            opts=child)
        aws.kms.Alias(f"{name}-alarm-key-alias", name=f"alias/{base}-alarms", target_key_id=self.topic_key.key_id,
                      opts=child)
        self.topic = aws.sns.Topic(
            f"{name}-alarms", name=f"{base}-alarms", kms_master_key_id=self.topic_key.arn, tags=dict(args.tags),
            opts=child)
        for i, email in enumerate(args.alarm_emails):
            aws.sns.TopicSubscription(f"{name}-alarm-email-{i}", topic=self.topic.arn, protocol="email",
                                      endpoint=email, opts=child)
        self.alarms = [
            aws.cloudwatch.MetricAlarm(
                f"{name}-{'age' if i == 0 else 'dlq'}-alarm", name=s.name, namespace="AWS/SQS",
                metric_name=s.metric_name, dimensions={"QueueName": s.queue_name}, statistic=s.statistic,
                period=s.period_s, evaluation_periods=s.evaluation_periods, threshold=s.threshold,
                comparison_operator=s.comparison_operator, treat_missing_data=s.treat_missing_data,
                alarm_description=s.description, alarm_actions=[self.topic.arn], ok_actions=[self.topic.arn],
                tags=dict(args.tags),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.queue, self.dlq]))
            for i, s in enumerate(specs)
        ]

        self.queue_url = self.queue.url
        self.queue_arn = self.queue.arn
        self.dlq_url = self.dlq.url
        self.dlq_arn = self.dlq.arn
        self.topic_arn = self.topic.arn
        self.register_outputs({
            "queueUrl": self.queue_url, "queueArn": self.queue_arn, "queueName": self.queue_name,
            "dlqUrl": self.dlq_url, "dlqArn": self.dlq_arn, "topicArn": self.topic_arn,
            "visibilityTimeoutS": self.visibility_timeout_s, "fifo": self.fifo,
        })
