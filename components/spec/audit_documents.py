"""Pure builders of the audit layer: the trail's event selectors, bucket, key and role policies, and its alarms.

Every function takes plain strings (the component calls them inside `Output.apply`) and returns plain dicts or
frozen dataclasses. Sources, all AWS documentation:

- Trail bucket policy: CloudTrail User Guide, "Amazon S3 bucket policy for CloudTrail" (`s3:GetBucketAcl` and
  `s3:PutObject` on `AWSLogs/<account>/*`, both with `aws:SourceArn` = the trail ARN, the write also with
  `s3:x-amz-acl` = `bucket-owner-full-control`).
- Key policy: CloudTrail User Guide, "Configure AWS KMS key policies for CloudTrail" (`kms:GenerateDataKey*` with
  `aws:SourceArn` = the trail ARN and `kms:EncryptionContext:aws:cloudtrail:arn` like `arn:aws:cloudtrail:*:<account>:
  trail/*`; `kms:DescribeKey` with `aws:SourceArn`); CloudWatch Logs User Guide, "Encrypt log data in CloudWatch Logs
  using AWS KMS" (the `kms:EncryptionContext:aws:logs:arn` condition); the alarm statement is
  `policy_documents.alarm_topic_key_policy`'s.
- CloudWatch Logs role: CloudTrail User Guide, "Role policy document for CloudTrail to use CloudWatch Logs for
  monitoring" (`logs:CreateLogStream` and `logs:PutLogEvents` on the stream `<account>_CloudTrail_<region>*` only)
  and "Cross-service confused deputy prevention" (`aws:SourceArn`, `aws:SourceAccount` in the trust policy).
- Filter patterns: CloudWatch Logs User Guide, "Using filter patterns to match terms in JSON log events" and
  "Supported regular expressions (regex) syntax" (a regex sits between `%`; only letters, digits, `:_#=@/;,-` and the
  operators `^$?[]{}|\\*+.`; no `()` groups; at most two regexes per filter pattern, five regex patterns per log group;
  a pattern is at most 1,024 characters: the PutMetricFilter API's `FilterPattern`).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .policy_documents import alarm_topic_key_policy, bucket_tls_only_policy, policy_document
from .validation import ConfigError

CLOUDTRAIL_PRINCIPAL = "cloudtrail.amazonaws.com"
"""The service principal CloudTrail delivers logs and assumes its CloudWatch Logs role as."""

LOCK_MODES = ("GOVERNANCE", "COMPLIANCE")
"""S3 Object Lock retention modes: GOVERNANCE (a principal with `s3:BypassGovernanceRetention` can still delete a
version early: an escape hatch for a mistaken retention) and COMPLIANCE (nobody, the account root included, until the
retention ends)."""

LOCK_DAYS_MAX = 36500
"""Longest Object Lock retention S3 accepts: 100 years (S3 User Guide, "Object Lock considerations")."""

FILTER_PATTERN_MAX_CHARS = 1024
"""Longest metric filter pattern (CloudWatch Logs API Reference, PutMetricFilter: `filterPattern` maximum 1024)."""

AUDIT_METRIC_NAMESPACE = "gpuburst/Audit"
"""CloudWatch namespace of the audit metrics (one metric per alarm, named with the stack's prefix)."""

ALARM_PERIOD_S = 300
"""Each audit alarm sums its metric over 5 minutes and fires on the first matching event (threshold 1)."""

BUCKET_CONTROL_EVENTS = (
    "PutBucketPolicy", "DeleteBucketPolicy", "PutBucketAcl", "PutBucketPublicAccessBlock",
    "DeleteBucketPublicAccessBlock", "PutBucketOwnershipControls", "DeleteBucketOwnershipControls",
    "PutBucketEncryption", "DeleteBucketEncryption", "PutBucketLogging", "PutBucketVersioning", "PutBucketLifecycle",
)
"""CloudTrail event names (eventSource `s3.amazonaws.com`) that change who may reach an audited bucket (policy, ACL,
public access block, object ownership) or weaken what protects and records its data (default encryption, access
logging, versioning, lifecycle expiration). Each is a deliberate, rare change: a deploy that makes one is told too."""

KEY_CONTROL_EVENTS = ("PutKeyPolicy", "ScheduleKeyDeletion", "DisableKey", "DisableKeyRotation")
"""CloudTrail event names (eventSource `kms.amazonaws.com`) that change who may use a watched key or make what it
encrypts unreadable. CreateGrant is left out on purpose: AWS services create grants on a key holder's behalf as
routine work (EKS's grant for secrets encryption, any service using the key through a grant), so an alarm on it
would fire on reconciliation and teach people to ignore the topic; whoever may mint a grant for someone else needs
the key policy's account statement, whose changes PutKeyPolicy catches. Grants stay in the trail for review."""

TRAIL_CONTROL_EVENTS = ("StopLogging", "DeleteTrail", "UpdateTrail", "PutEventSelectors")
"""CloudTrail event names (eventSource `cloudtrail.amazonaws.com`) that blind or narrow a trail. Any trail of the
account: the StopLogging event of this very trail is still delivered before logging stops."""

ASSUME_ROLE_EVENTS = ("AssumeRole", "AssumeRoleWithSAML", "AssumeRoleWithWebIdentity")
"""STS event names that start a role session, each recording the role as `requestParameters.roleArn` (IAM User Guide,
"Logging IAM and AWS STS API calls with AWS CloudTrail", its examples of the three)."""

_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_PARTITIONS = ("aws", "aws-us-gov", "aws-cn")
_NAME = re.compile(r"^[a-z][a-z0-9-]{1,38}[a-z0-9]$")
S3_BUCKET_ARN = re.compile(r"^arn:aws[a-z-]*:s3:::([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])$")
"""An S3 bucket's ARN; group 1 is the bucket's name."""
KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")
"""A KMS key's ARN (not an alias's: CloudTrail records the key's ARN in `resources`)."""
_LOG_GROUP = re.compile(r"^[A-Za-z0-9_/.#-]{1,512}$")
ROLE_ARN_GLOB = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/*-]{1,512}$", re.ASCII)
"""An IAM role ARN, `*` allowed in the path and name (the form `SlideStorageArgs.break_glass_role_arns` takes)."""
_REGEX_LITERAL = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_#=@/;,-")
_REGEX_ESCAPED = set(".+")


def _check(field: str, value: object, pattern: re.Pattern, expected: str) -> None:
    if not isinstance(value, str) or not pattern.match(value):
        raise ConfigError(field, value, expected)


def _check_scope(account_id: str, partition: str, region: str) -> str:
    """Check account, partition and region; the DNS suffix of the partition's service principals."""
    _check("account_id", account_id, _ACCOUNT, "a 12-digit AWS account id as a string")
    if partition not in _PARTITIONS:
        raise ConfigError("partition", partition, "one of aws, aws-us-gov, aws-cn")
    _check("region", region, _REGION, "an AWS region like 'us-east-1'")
    return "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"


def _string_list(field: str, values: Sequence[str]) -> list[str]:
    if isinstance(values, str):
        raise ConfigError(field, values, "a list, not one string")
    return list(values)


# ----------------------------------------------------------------------------------------------------------------
# Names and ARNs known before anything exists (the key, bucket and role policies name them; CloudTrail checks the
# bucket policy when the trail is created, so the trail ARN cannot come from the trail).
# ----------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AuditNames:
    """The audit layer's physical names for one name prefix (e.g. `gpuburst-dev`)."""

    prefix: str

    def __post_init__(self) -> None:
        _check("name_prefix", self.prefix, _NAME,
               "3..40 lowercase letters, digits or '-', starting with a letter, not ending with '-'")

    @property
    def trail(self) -> str:
        """The trail's name."""
        return f"{self.prefix}-audit"

    @property
    def log_group(self) -> str:
        """The CloudWatch Logs log group the trail also delivers to."""
        return f"/aws/cloudtrail/{self.prefix}-audit"

    @property
    def logs_role(self) -> str:
        """The IAM role CloudTrail assumes to write into the log group."""
        return f"{self.prefix}-cloudtrail-logs"

    @property
    def key_alias(self) -> str:
        """The audit key's alias."""
        return f"alias/{self.prefix}-audit"

    @property
    def topic(self) -> str:
        """The SNS topic the audit alarms publish to."""
        return f"{self.prefix}-audit-alarms"

    def alarm(self, key: str) -> str:
        """The alarm (and metric) name of one audit alarm (`bucket-controls`, `key-controls`, ...)."""
        return f"{self.prefix}-audit-{key}"


def trail_arn(*, partition: str, region: str, account_id: str, trail_name: str) -> str:
    """A trail's ARN, `arn:PARTITION:cloudtrail:REGION:ACCOUNT:trail/NAME` (the form the policies above name)."""
    _check_scope(account_id, partition, region)
    return f"arn:{partition}:cloudtrail:{region}:{account_id}:trail/{trail_name}"


def log_group_arn(*, partition: str, region: str, account_id: str, log_group_name: str) -> str:
    """A log group's ARN without the `:*` suffix (`kms:EncryptionContext:aws:logs:arn` names it so)."""
    _check_scope(account_id, partition, region)
    _check("log_group_name", log_group_name, _LOG_GROUP, "a CloudWatch Logs log group name")
    return f"arn:{partition}:logs:{region}:{account_id}:log-group:{log_group_name}"


# ----------------------------------------------------------------------------------------------------------------
# The trail: what it records, and where it may write.
# ----------------------------------------------------------------------------------------------------------------

def bucket_names(bucket_arns: Sequence[str], field: str = "bucket_arns") -> list[str]:
    """Bucket names of S3 bucket ARNs (`arn:aws:s3:::NAME`), checked; in order, without repeats."""
    names: list[str] = []
    for arn in _string_list(field, bucket_arns):
        m = S3_BUCKET_ARN.match(arn) if isinstance(arn, str) else None
        if m is None:
            raise ConfigError(field, arn, "an S3 bucket ARN (arn:aws:s3:::BUCKET)")
        if m.group(1) not in names:
            names.append(m.group(1))
    return names


def advanced_event_selectors(bucket_arns: Sequence[str]) -> list[dict[str, Any]]:
    """The trail's advanced event selectors: every management event, and the S3 data events (object-level reads and
    writes) of the given buckets only (`resources.ARN` StartsWith `<bucket ARN>/`, so a bucket whose name merely
    starts the same way is not included). With advanced selectors a trail logs management events only through a
    selector of their own (`eventCategory` = Management)."""
    selectors: list[dict] = [{
        "name": "Management events",
        "field_selectors": [{"field": "eventCategory", "equals": ["Management"]}],
    }]
    bucket_names(bucket_arns)  # checks them
    if bucket_arns:
        selectors.append({
            "name": "S3 data events of the audited buckets",
            "field_selectors": [
                {"field": "eventCategory", "equals": ["Data"]},
                {"field": "resources.type", "equals": ["AWS::S3::Object"]},
                {"field": "resources.ARN", "starts_withs": list(dict.fromkeys(f"{a}/" for a in bucket_arns))},
            ],
        })
    return selectors


def trail_bucket_policy(log_bucket_arn: str, *, trail_arn: str, account_id: str) -> dict[str, Any]:
    """The trail bucket's policy: TLS only (`policy_documents.bucket_tls_only_policy`), and CloudTrail may read the
    bucket ACL and write log files under `AWSLogs/<account>/`, for this one trail only (the documented statements)."""
    _check("account_id", account_id, _ACCOUNT, "a 12-digit AWS account id as a string")
    _check("trail_arn", trail_arn, re.compile(r"^arn:aws[a-z-]*:cloudtrail:[a-z0-9-]+:\d{12}:trail/[\w.-]{3,128}$"),
           "a trail ARN (arn:aws:cloudtrail:REGION:ACCOUNT:trail/NAME)")
    doc = bucket_tls_only_policy(log_bucket_arn)
    cloudtrail = {"Effect": "Allow", "Principal": {"Service": CLOUDTRAIL_PRINCIPAL}}
    doc["Statement"] += [
        {"Sid": "AWSCloudTrailAclCheck", **cloudtrail, "Action": "s3:GetBucketAcl", "Resource": log_bucket_arn,
         "Condition": {"StringEquals": {"aws:SourceArn": trail_arn}}},
        {"Sid": "AWSCloudTrailWrite", **cloudtrail, "Action": "s3:PutObject",
         "Resource": f"{log_bucket_arn}/AWSLogs/{account_id}/*",
         "Condition": {"StringEquals": {"s3:x-amz-acl": "bucket-owner-full-control", "aws:SourceArn": trail_arn}}},
    ]
    return doc


def object_lock_rule(mode: str, days: int) -> dict[str, Any]:
    """The default-retention rule of an Object Lock bucket (inputs of `aws.s3.BucketObjectLockConfiguration.rule`):
    every new object version is locked in `mode` for `days` days."""
    if mode not in LOCK_MODES:
        raise ConfigError("lock_mode", mode, "GOVERNANCE or COMPLIANCE")
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= LOCK_DAYS_MAX:
        raise ConfigError("lock_days", days, f"an int of days in 1..{LOCK_DAYS_MAX}")
    return {"default_retention": {"mode": mode, "days": days}}


# ----------------------------------------------------------------------------------------------------------------
# The audit key and the CloudWatch Logs role.
# ----------------------------------------------------------------------------------------------------------------

def audit_key_policy(*, account_id: str, partition: str, region: str, trail_name: str, log_group_name: str,
                     alarm_names: Sequence[str], logs_key_actions: Sequence[str]) -> dict[str, Any]:
    """The audit key's policy: the account administers it through IAM (readers of the logs get `kms:Decrypt` from
    IAM policies); CloudTrail encrypts this trail's log and digest files and describes the key (`aws:SourceArn` = the
    trail); CloudWatch Logs encrypts the trail's log group only; CloudWatch alarms of this stack publish to the
    encrypted topic. `logs_key_actions` is `keys.LOGS_KEY_ACTIONS` (owned there)."""
    dns = _check_scope(account_id, partition, region)
    trail = trail_arn(partition=partition, region=region, account_id=account_id, trail_name=trail_name)
    group = log_group_arn(partition=partition, region=region, account_id=account_id, log_group_name=log_group_name)
    alarms = alarm_topic_key_policy(account_id, partition, region, _string_list("alarm_names", alarm_names))
    admin, publish = alarms["Statement"]
    cloudtrail = {"Effect": "Allow", "Principal": {"Service": CLOUDTRAIL_PRINCIPAL}}
    return policy_document([
        admin,
        {"Sid": "AllowCloudTrailEncryptLogs", **cloudtrail, "Action": "kms:GenerateDataKey*", "Resource": "*",
         "Condition": {"StringEquals": {"aws:SourceArn": trail},
                       "StringLike": {"kms:EncryptionContext:aws:cloudtrail:arn":
                                      f"arn:{partition}:cloudtrail:*:{account_id}:trail/*"}}},
        {"Sid": "AllowCloudTrailDescribeKey", **cloudtrail, "Action": "kms:DescribeKey", "Resource": "*",
         "Condition": {"StringEquals": {"aws:SourceArn": trail}}},
        {"Sid": "CloudWatchLogsEncryptsAuditLogGroup", "Effect": "Allow",
         "Principal": {"Service": f"logs.{region}.{dns}"}, "Action": list(logs_key_actions), "Resource": "*",
         "Condition": {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": group}}},
        publish,
    ])


def logs_role_trust_policy(*, account_id: str, trail_arn: str) -> dict[str, Any]:
    """Trust policy of the CloudWatch Logs role: only CloudTrail, only for this trail of this account."""
    _check("account_id", account_id, _ACCOUNT, "a 12-digit AWS account id as a string")
    return policy_document([{
        "Sid": "CloudTrailDeliversThisTrail",
        "Effect": "Allow",
        "Principal": {"Service": CLOUDTRAIL_PRINCIPAL},
        "Action": "sts:AssumeRole",
        "Condition": {"StringEquals": {"aws:SourceArn": trail_arn, "aws:SourceAccount": account_id}},
    }])


def logs_role_policy(*, account_id: str, partition: str, region: str, log_group_name: str) -> dict[str, Any]:
    """The CloudWatch Logs role's policy: create CloudTrail's log streams (`<account>_CloudTrail_<region>`, and the
    numbered ones of a busy trail) in the one log group and put events into them, nothing else."""
    group = log_group_arn(partition=partition, region=region, account_id=account_id, log_group_name=log_group_name)
    streams = f"{group}:log-stream:{account_id}_CloudTrail_{region}*"
    return policy_document([
        {"Sid": "AWSCloudTrailCreateLogStream", "Effect": "Allow", "Action": ["logs:CreateLogStream"],
         "Resource": [streams]},
        {"Sid": "AWSCloudTrailPutLogEvents", "Effect": "Allow", "Action": ["logs:PutLogEvents"],
         "Resource": [streams]},
    ])


# ----------------------------------------------------------------------------------------------------------------
# Metric filter patterns, built from a small structure (a disjunction of conjunctions of field tests) and rendered.
# ----------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FieldTest:
    """One JSON field of a CloudTrail event equals one of `values`, or matches `regex` (a CloudWatch Logs regex)."""

    selector: str
    """JSON selector, e.g. `$.eventName`."""
    values: tuple[str, ...] = ()
    """Exact string values (any of them)."""
    regex: str | None = None
    """A regex, written between `%` in the pattern. Default None."""

    def render(self) -> str:
        alternatives = [f'{self.selector} = "{v}"' for v in self.values]
        if self.regex is not None:
            alternatives.append(f"{self.selector} = %{self.regex}%")
        return "(" + " || ".join(alternatives) + ")"


@dataclass(frozen=True)
class FilterPattern:
    """A JSON filter pattern: any of `branches`, each branch all of its field tests."""

    branches: tuple[tuple[FieldTest, ...], ...]

    def render(self) -> str:
        """The pattern as CloudWatch Logs takes it, `{ ... }`."""
        parts = [" && ".join(t.render() for t in branch) for branch in self.branches]
        body = parts[0] if len(parts) == 1 else " || ".join(f"({p})" for p in parts)
        return "{ " + body + " }"

    @property
    def regex_count(self) -> int:
        """How many regexes the pattern holds (CloudWatch Logs allows two)."""
        return sum(t.regex is not None for branch in self.branches for t in branch)


def glob_to_filter_regex(globs: Sequence[str], field: str = "break_glass_role_arns") -> str:
    """One CloudWatch Logs regex matching a whole value that matches any of the IAM globs (`*`: any characters, as
    `ArnLike` reads it): `^A$|^B$`, with `.` and `+` escaped and `*` as `.*`. CloudWatch Logs' regex has no `()`
    groups, so the alternatives are anchored one by one; any character its regex does not support is refused."""
    alternatives = []
    for glob in globs:
        out = []
        for ch in glob:
            if ch == "*":
                out.append(".*")
            elif ch in _REGEX_ESCAPED:
                out.append("\\" + ch)
            elif ch in _REGEX_LITERAL:
                out.append(ch)
            else:
                raise ConfigError(field, glob, f"an ARN without {ch!r} (CloudWatch Logs' filter regex cannot hold it)")
        alternatives.append("^" + "".join(out) + "$")
    return "|".join(alternatives)


def _checked(pattern: FilterPattern, field: str, value: object) -> FilterPattern:
    text = pattern.render()
    if len(text) > FILTER_PATTERN_MAX_CHARS:
        raise ConfigError(field, value, f"fewer or shorter entries: the alarm's filter pattern would be {len(text)} "
                                        f"characters, over CloudWatch Logs' {FILTER_PATTERN_MAX_CHARS}")
    if pattern.regex_count > 2:
        raise ConfigError(field, value, "a pattern with at most two regexes (a CloudWatch Logs quota)")
    return pattern


def bucket_controls_pattern(bucket_arns: Sequence[str]) -> FilterPattern:
    """A change of the access or protection controls (`BUCKET_CONTROL_EVENTS`) of one of the given buckets
    (`requestParameters.bucketName`, which CloudTrail records for every bucket-level S3 call)."""
    names = bucket_names(bucket_arns)
    if not names:
        raise ConfigError("bucket_arns", list(bucket_arns), "at least one bucket ARN")
    return _checked(FilterPattern(((
        FieldTest("$.eventSource", ("s3.amazonaws.com",)),
        FieldTest("$.eventName", BUCKET_CONTROL_EVENTS),
        FieldTest("$.requestParameters.bucketName", tuple(names)),
    ),)), "bucket_arns", list(bucket_arns))


def key_controls_pattern(key_arns: Sequence[str]) -> FilterPattern:
    """A key-policy change, rotation switched off, a key disabled or scheduled for deletion (`KEY_CONTROL_EVENTS`)
    on one of the given keys. Matched on `resources[0].ARN`, the key's ARN as CloudTrail records it: the request's
    `keyId` may be an ID, an alias or an ARN, as the caller wrote it."""
    keys: list[str] = []
    for arn in _string_list("key_arns", key_arns):
        _check("key_arns", arn, KMS_KEY_ARN, "a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID), not an alias")
        if arn not in keys:
            keys.append(arn)
    if not keys:
        raise ConfigError("key_arns", list(key_arns), "at least one KMS key ARN")
    return _checked(FilterPattern(((
        FieldTest("$.eventSource", ("kms.amazonaws.com",)),
        FieldTest("$.eventName", KEY_CONTROL_EVENTS),
        FieldTest("$.resources[0].ARN", tuple(keys)),
    ),)), "key_arns", list(key_arns))


def trail_controls_pattern() -> FilterPattern:
    """Any trail of the account stopped, deleted, or its settings or event selectors changed."""
    return FilterPattern(((
        FieldTest("$.eventSource", ("cloudtrail.amazonaws.com",)),
        FieldTest("$.eventName", TRAIL_CONTROL_EVENTS),
    ),))


def break_glass_pattern(role_arns: Sequence[str]) -> FilterPattern:
    """A break-glass session: a role session started for one of `role_arns` (`ASSUME_ROLE_EVENTS`, on
    `requestParameters.roleArn`), or any call made in such a session (`userIdentity.sessionContext.sessionIssuer.arn`,
    the role the session belongs to), so the alarm stays raised while the session works and a session whose start
    was logged elsewhere is still seen. Exact ARNs are compared as strings; ARNs with `*` become one anchored regex
    per branch (`glob_to_filter_regex`): a bare `*` in a JSON filter value is not IAM's wildcard (the documented
    form is a prefix such as `123.123.*`; a `*` inside a value is not), so a glob is never written as a value."""
    arns: list[str] = []
    for arn in _string_list("break_glass_role_arns", role_arns):
        _check("break_glass_role_arns", arn, ROLE_ARN_GLOB,
               "an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME, '*' allowed in the name)")
        if arn not in arns:
            arns.append(arn)
    if not arns:
        raise ConfigError("break_glass_role_arns", list(role_arns), "at least one role ARN")
    exact = tuple(a for a in arns if "*" not in a)
    globs = [a for a in arns if "*" in a]
    regex = glob_to_filter_regex(globs) if globs else None
    return _checked(FilterPattern((
        (FieldTest("$.eventSource", ("sts.amazonaws.com",)),
         FieldTest("$.eventName", ASSUME_ROLE_EVENTS),
         FieldTest("$.requestParameters.roleArn", exact, regex)),
        (FieldTest("$.userIdentity.sessionContext.sessionIssuer.arn", exact, regex),),
    )), "break_glass_role_arns", list(role_arns))


ALARM_DESCRIPTIONS = {
    "bucket-controls": "The policy, ACL, public access block, ownership, encryption, logging, versioning or lifecycle "
                       "of an audited bucket changed. Check who did it (the trail's log group) and why.",
    "key-controls": "A watched KMS key's policy changed, its rotation was switched off, or it was disabled or "
                    "scheduled for deletion. A deletion can be cancelled (CancelKeyDeletion) until it happens; "
                    "everything the key encrypts is unreadable after.",
    "trail-controls": "A CloudTrail trail of this account was stopped, deleted or narrowed: the audit record may have "
                      "a gap. Restore it and find out who changed it.",
    "break-glass": "A break-glass role is in use (a session started, or made calls, in the last 5 minutes). Confirm "
                   "it is a declared incident; the trail records every call of the session.",
}
"""Each audit alarm's description (it reaches the e-mail): what happened and what to do."""


@dataclass(frozen=True)
class AuditAlarmSpec:
    """One audit alarm on the metric its filter publishes, as plain values (the pattern is `audit_filter_patterns`)."""

    key: str
    """Short name, a key of ALARM_DESCRIPTIONS."""
    name: str
    """Alarm name, also the metric's and the metric filter's (the key policy names the alarm's ARN)."""
    description: str
    namespace: str = AUDIT_METRIC_NAMESPACE
    statistic: str = "Sum"
    period_s: int = ALARM_PERIOD_S
    evaluation_periods: int = 1
    threshold: float = 1.0
    comparison_operator: str = "GreaterThanOrEqualToThreshold"
    treat_missing_data: str = "notBreaching"
    """No data means no matching event (a metric filter publishes only on a match): not breaching."""


def audit_alarm_specs(names: AuditNames, *, break_glass: bool) -> list[AuditAlarmSpec]:
    """The audit alarms: bucket, key and trail controls always; break-glass sessions when there are such roles."""
    keys = ["bucket-controls", "key-controls", "trail-controls"] + (["break-glass"] if break_glass else [])
    return [AuditAlarmSpec(k, names.alarm(k), ALARM_DESCRIPTIONS[k]) for k in keys]


def audit_filter_patterns(*, bucket_arns: Sequence[str], key_arns: Sequence[str],
                          break_glass_role_arns: Sequence[str]) -> dict[str, FilterPattern]:
    """Alarm key -> its filter pattern. `bucket_arns` and `key_arns` include the audit layer's own bucket and key."""
    patterns = {"bucket-controls": bucket_controls_pattern(bucket_arns), "key-controls": key_controls_pattern(key_arns),
                "trail-controls": trail_controls_pattern()}
    if break_glass_role_arns:
        patterns["break-glass"] = break_glass_pattern(break_glass_role_arns)
    return patterns
