"""AuditTrail: a CloudTrail trail of the clinical buckets' object reads and writes and of every management call, kept
tamper-evident, and alarms on the changes an auditor of health data asks about first.

What it declares (the documents are `spec.audit_documents`, with their sources):

- an audit KMS key (yearly rotation) that encrypts the log files, the log group and the alarm topic, and whose policy
  lets CloudTrail use it for this trail only, CloudWatch Logs for this log group only and CloudWatch for these
  alarms only;
- the trail: management events and the S3 data events of the given buckets (advanced event selectors), log file
  validation on (hourly signed digest files: a deleted or altered log file is detectable, CloudTrail User Guide,
  "Validating CloudTrail log file integrity"), SSE-KMS with the audit key. Multi-region by default: STS records an
  AssumeRole in the region of the endpoint it was sent to, and "if you activate AWS STS endpoints in Regions other
  than the default global endpoint, then you must also turn on CloudTrail logging in those Regions" (IAM User Guide,
  "Logging IAM and AWS STS API calls with AWS CloudTrail"); a single-region trail would miss a break-glass session
  started through another region's endpoint, and any activity in a region the stack does not use. Global service
  events (IAM, STS's global endpoint) are included, as a multi-region trail requires. The trail delivers the events
  of every region into its home region's bucket and log group;
- the trail bucket: S3 Object Lock with a default retention (GOVERNANCE by default, COMPLIANCE allowed), versioned,
  private (public access block, BucketOwnerEnforced), TLS only, SSE-S3 by default (CloudTrail encrypts each log file
  with the audit key itself), and the documented CloudTrail bucket policy pinned to this trail's ARN;
- a CloudWatch Logs log group (encrypted with the audit key) the trail also delivers to, through a role only
  CloudTrail may assume for this trail, which may only create CloudTrail's streams in that group and write to them;
- metric filters and alarms (a matching event in 5 minutes; no data is not breaching) on bucket-control changes of
  the given buckets and the trail bucket, key-control changes of the given keys and the audit key, trail tampering,
  and break-glass sessions; they publish to an SNS topic encrypted with the audit key, with e-mail subscriptions.

The trail bucket, its controls and the audit key are `retain_on_delete`: audit logs outlive the stack that produced
them (they are the record of what happened to the data, asked for after the platform is gone), and the key is what
decrypts them (deleting it would make every retained log unreadable). A `pulumi destroy` still completes: it forgets
them instead of failing on a bucket whose locked object versions cannot be deleted (a delete of a COMPLIANCE-locked
version fails for everyone). The log group, role, trail and alarms go with the stack: the bucket is the record, the
log group the working copy. A retained key costs its monthly fee until someone schedules its deletion deliberately,
once the logs it decrypts may go.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from .catalogue import LOG_RETENTION_DAYS
from .keys import LOGS_KEY_ACTIONS
from .queue import _is_email_list
from .spec.audit_documents import (
    KMS_KEY_ARN,
    LOCK_DAYS_MAX,
    LOCK_MODES,
    ROLE_ARN_GLOB,
    S3_BUCKET_ARN,
    AuditNames,
    advanced_event_selectors,
    audit_alarm_specs,
    audit_filter_patterns,
    audit_key_policy,
    break_glass_pattern,
    logs_role_policy,
    logs_role_trust_policy,
    object_lock_rule,
    trail_arn,
    trail_bucket_policy,
)
from .spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate

_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")


@dataclass
class AuditTrailArgs:
    """Inputs of an AuditTrail."""

    name_prefix: str
    """Prefix of every physical name (`StackConfig.name_prefix`, e.g. `gpuburst-dev`): 3..40 lowercase letters,
    digits or '-'. Required."""
    bucket_arns: Sequence[pulumi.Input[str]] = ()
    """The clinical buckets (`arn:aws:s3:::NAME`, may be Outputs, e.g. `SlideStorage.slides_bucket_arn`): their object
    reads and writes are recorded (S3 data events) and a change of their controls alarms. Default none: management
    events only."""
    key_arns: Sequence[pulumi.Input[str]] = ()
    """KMS key ARNs (not aliases; may be Outputs, e.g. `DataKey.key_arn`) whose policy changes, disabling or scheduled
    deletion alarm. The audit key is always watched. Default none."""
    break_glass_role_arns: list[str] = field(default_factory=list)
    """IAM role ARNs (`*` allowed in the name, as `SlideStorageArgs.break_glass_role_arns`) whose sessions alarm.
    Plain strings: the filter pattern must be known at preview. Default none: no break-glass alarm."""
    alarm_emails: list[str] = field(default_factory=list)
    """Addresses subscribed (protocol email) to the alarm topic; each must confirm the e-mail AWS sends. At least one:
    an audit alarm nobody hears is no control."""
    region: str | None = None
    """The stack's region (the trail's home region). Default None: the AWS provider's."""
    account_id: str | None = None
    """The stack's account id. Default None: the AWS provider's caller identity."""
    partition: str = "aws"
    """AWS partition (`aws`, `aws-us-gov`, `aws-cn`). Default `aws`."""
    multi_region: bool = True
    """Record every region (see the module docstring for why). Default True."""
    lock_mode: str = "GOVERNANCE"
    """Object Lock mode of the trail bucket's default retention: GOVERNANCE (a principal with
    `s3:BypassGovernanceRetention` can still remove a version early) or COMPLIANCE (nobody can, the account root
    included, for `lock_days`; choose it only with the retention decided). Default GOVERNANCE."""
    lock_days: int = 365
    """Days every log file version stays locked (1..36500). Default 365."""
    log_retention_days: int = 365
    """Retention of the CloudWatch Logs copy, one of CloudWatch Logs' periods (`catalogue.LOG_RETENTION_DAYS`). The
    bucket keeps the record; the log group feeds the alarms and searches. Default 365."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags on every taggable resource. Default none."""


def _arns(pattern: re.Pattern) -> Any:
    return lambda v: isinstance(v, (list, tuple)) and all(
        isinstance(a, pulumi.Output) or (isinstance(a, str) and bool(pattern.match(a))) for a in v)


RULES: tuple[Rule, ...] = (
    Rule("bucket_arns", _arns(S3_BUCKET_ARN), "a list of S3 bucket ARNs (arn:aws:s3:::BUCKET, items may be Outputs)"),
    Rule("key_arns", _arns(KMS_KEY_ARN),
         "a list of KMS key ARNs (arn:aws:kms:REGION:ACCOUNT:key/ID, not aliases; items may be Outputs)"),
    Rule("break_glass_role_arns", lambda v: isinstance(v, list) and all(
        isinstance(a, str) and bool(ROLE_ARN_GLOB.match(a)) for a in v),
         "a list of IAM role ARNs (arn:aws:iam::ACCOUNT:role/NAME, '*' allowed in the name), plain strings"),
    Rule("alarm_emails", _is_email_list, "a list of at least one distinct email address (an unheard alarm is none)"),
    Rule("region", lambda v: v is None or (isinstance(v, str) and bool(_REGION.match(v))),
         "None or an AWS region like 'us-east-1'"),
    Rule("account_id", lambda v: v is None or (isinstance(v, str) and bool(_ACCOUNT.match(v))),
         "None or a 12-digit AWS account id as a string"),
    Rule("partition", lambda v: v in ("aws", "aws-us-gov", "aws-cn"), "one of aws, aws-us-gov, aws-cn"),
    Rule("multi_region", lambda v: isinstance(v, bool), "true or false"),
    Rule("lock_mode", lambda v: v in LOCK_MODES, "GOVERNANCE or COMPLIANCE"),
    Rule("lock_days", is_int_between(1, LOCK_DAYS_MAX), f"an int of days in 1..{LOCK_DAYS_MAX}"),
    Rule("log_retention_days", lambda v: v in LOG_RETENTION_DAYS,
         f"one of CloudWatch Logs' retention periods in days: {', '.join(map(str, LOG_RETENTION_DAYS))}"),
    Rule("tags", lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str)
                                                       for k, x in v.items()), "a dict of str to str"),
)


def validate_args(args: AuditTrailArgs) -> AuditNames:
    """Raise ConfigError (one line naming field and value) for the first bad field; the layer's names."""
    names = AuditNames(args.name_prefix)
    validate(vars(args), RULES)
    if args.break_glass_role_arns:
        break_glass_pattern(args.break_glass_role_arns)  # too long, or a character its regex cannot hold
    if args.partition == "aws-cn" and args.region is not None and not args.region.startswith("cn-"):
        raise ConfigError("region", args.region, "a cn-* region with partition aws-cn")
    return names


@names_its_errors
class AuditTrail(pulumi.ComponentResource):
    """The audit trail of the clinical buckets, its locked bucket, log group, key, alarms and topic."""

    trail_arn: pulumi.Output[str]
    trail_name: str
    log_bucket_name: pulumi.Output[str]
    log_bucket_arn: pulumi.Output[str]
    key_arn: pulumi.Output[str]
    log_group_name: str
    topic_arn: pulumi.Output[str]
    alarm_names: list[str]
    key: aws.kms.Key
    bucket: aws.s3.Bucket
    lock: aws.s3.BucketObjectLockConfiguration
    log_group: aws.cloudwatch.LogGroup
    trail: aws.cloudtrail.Trail
    topic: aws.sns.Topic

    def __init__(self, name: str, args: AuditTrailArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        names = validate_args(args)
        super().__init__("gpuburst:index:AuditTrail", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Kept when the stack goes (module docstring): the record, and the key that decrypts it.
        kept = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        invoke = pulumi.InvokeOutputOptions(parent=self)
        region = args.region if args.region is not None else aws.get_region_output(opts=invoke).region
        account = (args.account_id if args.account_id is not None
                   else aws.get_caller_identity_output(opts=invoke).account_id)
        tags = dict(args.tags) or None
        specs = audit_alarm_specs(names, break_glass=bool(args.break_glass_role_arns))
        self.alarm_names = [s.name for s in specs]
        trail = pulumi.Output.all(account, region).apply(
            lambda a: trail_arn(partition=args.partition, region=a[1], account_id=a[0], trail_name=names.trail))

        self.key = aws.kms.Key(
            f"{name}-key", description=f"Audit key of {args.name_prefix}: CloudTrail logs, their log group, alarms",
            key_usage="ENCRYPT_DECRYPT", customer_master_key_spec="SYMMETRIC_DEFAULT", enable_key_rotation=True,
            deletion_window_in_days=30, tags=tags, opts=kept,
            policy=pulumi.Output.all(account, region).apply(lambda a: json.dumps(audit_key_policy(
                account_id=a[0], partition=args.partition, region=a[1], trail_name=names.trail,
                log_group_name=names.log_group, alarm_names=self.alarm_names, logs_key_actions=LOGS_KEY_ACTIONS))))
        aws.kms.Alias(f"{name}-key-alias", name=names.key_alias, target_key_id=self.key.key_id, opts=child)

        self.bucket = aws.s3.Bucket(f"{name}-trail-logs", object_lock_enabled=True, force_destroy=False, tags=tags,
                                    opts=kept)
        controls: list[pulumi.Resource] = [
            aws.s3.BucketPublicAccessBlock(
                f"{name}-trail-logs-public-access-block", bucket=self.bucket.id, block_public_acls=True,
                block_public_policy=True, ignore_public_acls=True, restrict_public_buckets=True, opts=kept),
            aws.s3.BucketOwnershipControls(f"{name}-trail-logs-ownership", bucket=self.bucket.id,
                                           rule={"object_ownership": "BucketOwnerEnforced"}, opts=kept),
            aws.s3.BucketServerSideEncryptionConfiguration(
                f"{name}-trail-logs-encryption", bucket=self.bucket.id,
                rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}}], opts=kept),
        ]
        # Object Lock turns versioning on at creation; the resource states it (and it can never be suspended).
        versioning = aws.s3.BucketVersioning(f"{name}-trail-logs-versioning", bucket=self.bucket.id,
                                             versioning_configuration={"status": "Enabled"}, opts=kept)
        self.lock = aws.s3.BucketObjectLockConfiguration(
            f"{name}-trail-logs-object-lock", bucket=self.bucket.id, object_lock_enabled="Enabled",
            rule=object_lock_rule(args.lock_mode, args.lock_days),
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True, depends_on=[versioning]))
        controls += [versioning, self.lock]
        # Last of the bucket's settings (S3 refuses concurrent bucket changes), and before the trail: CloudTrail
        # checks the policy when the trail is created.
        bucket_policy = aws.s3.BucketPolicy(
            f"{name}-trail-logs-policy", bucket=self.bucket.id,
            policy=pulumi.Output.all(self.bucket.arn, trail, account).apply(lambda a: json.dumps(
                trail_bucket_policy(a[0], trail_arn=a[1], account_id=a[2]))),
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True, depends_on=controls))

        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-log-group", name=names.log_group, retention_in_days=args.log_retention_days,
            kms_key_id=self.key.arn, tags=tags, opts=child)
        role = aws.iam.Role(
            f"{name}-logs-role", name=names.logs_role, tags=tags, opts=child,
            description=f"CloudTrail writes trail {names.trail} into {names.log_group}",
            assume_role_policy=pulumi.Output.all(account, trail).apply(lambda a: json.dumps(
                logs_role_trust_policy(account_id=a[0], trail_arn=a[1]))))
        role_policy = aws.iam.RolePolicy(
            f"{name}-logs-role-policy", role=role.id, opts=child,
            policy=pulumi.Output.all(account, region).apply(lambda a: json.dumps(logs_role_policy(
                account_id=a[0], partition=args.partition, region=a[1], log_group_name=names.log_group))))

        audited = list(args.bucket_arns)
        self.trail = aws.cloudtrail.Trail(
            f"{name}-trail", name=names.trail, s3_bucket_name=self.bucket.bucket, kms_key_id=self.key.arn,
            enable_log_file_validation=True, is_multi_region_trail=args.multi_region,
            include_global_service_events=True,
            advanced_event_selectors=pulumi.Output.all(*audited).apply(lambda a: advanced_event_selectors(list(a))),
            # CloudTrail takes the log group's ARN with the log-stream wildcard.
            cloud_watch_logs_group_arn=self.log_group.arn.apply(lambda a: f"{a}:*"),
            cloud_watch_logs_role_arn=role.arn, tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[bucket_policy, role_policy]))

        self.topic = aws.sns.Topic(f"{name}-alarms", name=names.topic, kms_master_key_id=self.key.arn, tags=tags,
                                   opts=child)
        for i, email in enumerate(args.alarm_emails):
            aws.sns.TopicSubscription(f"{name}-alarm-email-{i}", topic=self.topic.arn, protocol="email",
                                      endpoint=email, opts=child)
        patterns = pulumi.Output.all(
            pulumi.Output.all(*audited, self.bucket.arn), pulumi.Output.all(*args.key_arns, self.key.arn),
        ).apply(lambda a: {k: p.render() for k, p in audit_filter_patterns(
            bucket_arns=list(a[0]), key_arns=list(a[1]), break_glass_role_arns=args.break_glass_role_arns).items()})
        self.alarms: list[aws.cloudwatch.MetricAlarm] = []
        for s in specs:
            metric_filter = aws.cloudwatch.LogMetricFilter(
                f"{name}-{s.key}-filter", name=s.name, log_group_name=self.log_group.name,
                pattern=patterns.apply(lambda p, k=s.key: p[k]),
                metric_transformation={"name": s.name, "namespace": s.namespace, "value": "1"}, opts=child)
            self.alarms.append(aws.cloudwatch.MetricAlarm(
                f"{name}-{s.key}-alarm", name=s.name, namespace=s.namespace, metric_name=s.name,
                statistic=s.statistic, period=s.period_s, evaluation_periods=s.evaluation_periods,
                threshold=s.threshold, comparison_operator=s.comparison_operator,
                treat_missing_data=s.treat_missing_data, alarm_description=s.description,
                alarm_actions=[self.topic.arn], tags=tags,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[metric_filter])))

        self.trail_arn = trail
        self.trail_name = names.trail
        self.log_bucket_name = self.bucket.bucket
        self.log_bucket_arn = self.bucket.arn
        self.key_arn = self.key.arn
        self.log_group_name = names.log_group
        self.topic_arn = self.topic.arn
        self.register_outputs({
            "trailArn": self.trail_arn, "trailName": self.trail_name, "logBucketName": self.log_bucket_name,
            "logBucketArn": self.log_bucket_arn, "keyArn": self.key_arn, "logGroupName": self.log_group_name,
            "topicArn": self.topic_arn, "alarmNames": self.alarm_names,
        })
