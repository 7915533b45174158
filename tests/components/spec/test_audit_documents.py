"""The audit layer's pure builders: names, event selectors, the trail bucket's, key's and role's policies, the Object
Lock rule, and the alarms' filter patterns, which a small matcher (the subset of CloudWatch Logs' JSON pattern syntax
the builders write) runs against CloudTrail events shaped like the documented examples."""
from __future__ import annotations

import re

import pytest

from components.keys import LOGS_KEY_ACTIONS
from components.spec import audit_documents as ad
from components.spec.policy_documents import allow_wildcard_actions
from components.spec.validation import ConfigError

ACCOUNT = "123456789012"
TRAIL = f"arn:aws:cloudtrail:us-east-1:{ACCOUNT}:trail/gpuburst-dev-audit"
SLIDES = "arn:aws:s3:::gpuburst-dev-slides"
RESULTS = "arn:aws:s3:::gpuburst-dev-results"
KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/00000000-0000-0000-0000-000000000000"
OTHER_KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/11111111-1111-1111-1111-111111111111"
IR = f"arn:aws:iam::{ACCOUNT}:role/incident-response"
GLOB = f"arn:aws:iam::{ACCOUNT}:role/breakglass-*"
NAMES = ad.AuditNames("gpuburst-dev")


def _by_sid(doc: dict) -> dict[str, dict]:
    return {st["Sid"]: st for st in doc["Statement"]}


# --------------------------------------------------------------------------------------------------------------------
# A test oracle for the filter patterns: parses `{ ... }` with (), &&, || and `$.selector = "string" | %regex%`.
# --------------------------------------------------------------------------------------------------------------------

_TOKEN = re.compile(r'\s*(\{|\}|\(|\)|&&|\|\||=|\$[\w.\[\]]+|"[^"]*"|%[^%]*%)')


def _tokens(pattern: str) -> list[str]:
    out, pos = [], 0
    while pos < len(pattern.rstrip()):
        m = _TOKEN.match(pattern, pos)
        assert m, f"cannot read the pattern at {pattern[pos:pos + 20]!r}"
        out.append(m.group(1))
        pos = m.end()
    return out


def _value(event: dict, selector: str):
    node = event
    for name, index in re.findall(r"\.(\w+)|\[(\d+)\]", selector[1:]):
        if name:
            node = node.get(name) if isinstance(node, dict) else None
        else:
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) else None
        if node is None:
            return None
    return node


def matches(pattern: str, event: dict) -> bool:
    toks = _tokens(pattern)
    assert toks[0] == "{" and toks[-1] == "}"
    toks = toks[1:-1]
    pos = 0

    def or_expr() -> bool:
        nonlocal pos
        value = and_expr()
        while pos < len(toks) and toks[pos] == "||":
            pos += 1
            value = and_expr() or value
        return value

    def and_expr() -> bool:
        nonlocal pos
        value = atom()
        while pos < len(toks) and toks[pos] == "&&":
            pos += 1
            value = atom() and value
        return value

    def atom() -> bool:
        nonlocal pos
        if toks[pos] == "(":
            pos += 1
            value = or_expr()
            assert toks[pos] == ")"
            pos += 1
            return value
        selector, op, literal = toks[pos:pos + 3]
        assert selector.startswith("$.") and op == "=", toks[pos:pos + 3]
        pos += 3
        found = _value(event, selector)
        if not isinstance(found, str):
            return False
        if literal.startswith("%"):  # CloudWatch Logs searches the regex in the value; ours anchor themselves
            return re.search(literal[1:-1], found) is not None
        return found == literal[1:-1]

    result = or_expr()
    assert pos == len(toks), f"unread tokens {toks[pos:]}"
    return result


def _s3_event(name: str, bucket: str) -> dict:
    return {"eventSource": "s3.amazonaws.com", "eventName": name, "awsRegion": "us-east-1",
            "requestParameters": {"bucketName": bucket, "Host": f"{bucket}.s3.amazonaws.com", "policy": [""]},
            "resources": [{"ARN": f"arn:aws:s3:::{bucket}", "type": "AWS::S3::Bucket"}]}


def _kms_event(name: str, key: str, key_id: str = "alias/data") -> dict:
    return {"eventSource": "kms.amazonaws.com", "eventName": name, "requestParameters": {"keyId": key_id},
            "resources": [{"ARN": key, "accountId": ACCOUNT}]}


def _assume(role: str, name: str = "AssumeRole") -> dict:
    return {"eventSource": "sts.amazonaws.com", "eventName": name,
            "userIdentity": {"type": "IAMUser", "arn": f"arn:aws:iam::{ACCOUNT}:user/alice"},
            "requestParameters": {"roleArn": role, "roleSessionName": "alice"},
            "resources": [{"ARN": role, "type": "AWS::IAM::Role"}]}


def _in_session(role: str) -> dict:
    return {"eventSource": "s3.amazonaws.com", "eventName": "GetObject",
            "userIdentity": {"type": "AssumedRole", "sessionContext": {"sessionIssuer": {"type": "Role", "arn": role}}},
            "requestParameters": {"bucketName": "gpuburst-dev-slides", "key": "slides/a.svs"}}


def test_the_oracle_reads_the_documented_example():
    """The matcher agrees with the CloudWatch Logs User Guide's own example pattern and event."""
    event = {"eventType": "UpdateTrail", "sourceIPAddress": "111.111.111.111", "arrayKey": ["value", "another value"]}
    assert matches('{ $.eventType = "UpdateTrail" }', event)
    assert matches('{ ($.eventType = "UpdateTrail") && ($.arrayKey[0] = "value") }', event)
    assert not matches('{ $.eventType = "UpdateTrail" && $.arrayKey[1] = "value" }', event)
    assert matches('{ $.eventType = %Trail% }', event)


# --------------------------------------------------------------------------------------------------------------------
# Names, ARNs, selectors.
# --------------------------------------------------------------------------------------------------------------------

def test_names_derive_from_the_prefix():
    assert (NAMES.trail, NAMES.log_group, NAMES.logs_role, NAMES.key_alias, NAMES.topic) == (
        "gpuburst-dev-audit", "/aws/cloudtrail/gpuburst-dev-audit", "gpuburst-dev-cloudtrail-logs",
        "alias/gpuburst-dev-audit", "gpuburst-dev-audit-alarms")
    assert NAMES.alarm("break-glass") == "gpuburst-dev-audit-break-glass"
    assert ad.trail_arn(partition="aws", region="us-east-1", account_id=ACCOUNT, trail_name=NAMES.trail) == TRAIL


@pytest.mark.parametrize("prefix", ["Gpuburst", "x", "gpuburst-", "a" * 41, "9lives"])
def test_a_bad_prefix_is_a_one_line_error(prefix):
    with pytest.raises(ConfigError, match=r"^name_prefix: ") as e:
        ad.AuditNames(prefix)
    assert "\n" not in str(e.value)


def test_selectors_log_management_events_and_the_named_buckets_objects_only():
    mgmt, data = ad.advanced_event_selectors([SLIDES, RESULTS, SLIDES])
    assert mgmt["field_selectors"] == [{"field": "eventCategory", "equals": ["Management"]}]
    fields = {f["field"]: f for f in data["field_selectors"]}
    assert fields["eventCategory"]["equals"] == ["Data"]
    assert fields["resources.type"]["equals"] == ["AWS::S3::Object"]
    # The trailing '/' keeps a bucket named gpuburst-dev-slides-old out.
    assert fields["resources.ARN"]["starts_withs"] == [f"{SLIDES}/", f"{RESULTS}/"]


def test_no_data_selector_without_buckets_and_bad_arns_refused():
    assert [s["name"] for s in ad.advanced_event_selectors([])] == ["Management events"]
    with pytest.raises(ConfigError, match=r"^bucket_arns: 'arn:aws:s3:::Bad_Bucket' "):
        ad.advanced_event_selectors(["arn:aws:s3:::Bad_Bucket"])


# --------------------------------------------------------------------------------------------------------------------
# Policies and the lock rule.
# --------------------------------------------------------------------------------------------------------------------

def test_trail_bucket_policy_is_tls_only_and_the_documented_cloudtrail_statements_for_this_trail():
    log_bucket = "arn:aws:s3:::gpuburst-dev-trail-logs"
    sids = _by_sid(ad.trail_bucket_policy(log_bucket, trail_arn=TRAIL, account_id=ACCOUNT))
    assert sids["DenyInsecureTransport"]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    acl, write = sids["AWSCloudTrailAclCheck"], sids["AWSCloudTrailWrite"]
    for st in (acl, write):
        assert (st["Effect"], st["Principal"]) == ("Allow", {"Service": "cloudtrail.amazonaws.com"})
    assert (acl["Action"], acl["Resource"]) == ("s3:GetBucketAcl", log_bucket)
    assert acl["Condition"] == {"StringEquals": {"aws:SourceArn": TRAIL}}
    assert (write["Action"], write["Resource"]) == ("s3:PutObject", f"{log_bucket}/AWSLogs/{ACCOUNT}/*")
    assert write["Condition"] == {"StringEquals": {"s3:x-amz-acl": "bucket-owner-full-control",
                                                   "aws:SourceArn": TRAIL}}


def test_trail_bucket_policy_refuses_a_trail_that_is_not_one():
    with pytest.raises(ConfigError, match=r"^trail_arn: "):
        ad.trail_bucket_policy("arn:aws:s3:::b-logs", trail_arn="arn:aws:cloudtrail:us-east-1:1:trail/x",
                               account_id=ACCOUNT)


def test_object_lock_rule():
    assert ad.object_lock_rule("GOVERNANCE", 365) == {"default_retention": {"mode": "GOVERNANCE", "days": 365}}
    assert ad.object_lock_rule("COMPLIANCE", 2190)["default_retention"]["mode"] == "COMPLIANCE"
    for mode, days, field in (("LEGAL", 1, "lock_mode"), ("GOVERNANCE", 0, "lock_days"),
                              ("GOVERNANCE", 36501, "lock_days"), ("GOVERNANCE", True, "lock_days")):
        with pytest.raises(ConfigError, match=f"^{field}: "):
            ad.object_lock_rule(mode, days)


def _key_policy(**kw) -> dict:
    args = dict(account_id=ACCOUNT, partition="aws", region="us-east-1", trail_name=NAMES.trail,
                log_group_name=NAMES.log_group, alarm_names=[NAMES.alarm("key-controls")],
                logs_key_actions=LOGS_KEY_ACTIONS)
    args.update(kw)
    return ad.audit_key_policy(**args)


def test_key_policy_lets_cloudtrail_encrypt_and_describe_for_this_trail_only():
    sids = _by_sid(_key_policy())
    assert sids["AccountAdministersKeyThroughIam"]["Principal"] == {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}
    enc, desc = sids["AllowCloudTrailEncryptLogs"], sids["AllowCloudTrailDescribeKey"]
    assert enc["Principal"] == desc["Principal"] == {"Service": "cloudtrail.amazonaws.com"}
    assert enc["Action"] == "kms:GenerateDataKey*" and desc["Action"] == "kms:DescribeKey"
    assert enc["Condition"] == {
        "StringEquals": {"aws:SourceArn": TRAIL},
        "StringLike": {"kms:EncryptionContext:aws:cloudtrail:arn": f"arn:aws:cloudtrail:*:{ACCOUNT}:trail/*"}}
    assert desc["Condition"] == {"StringEquals": {"aws:SourceArn": TRAIL}}


def test_key_policy_lets_logs_use_it_for_the_log_group_and_cloudwatch_for_the_alarms():
    sids = _by_sid(_key_policy())
    logs = sids["CloudWatchLogsEncryptsAuditLogGroup"]
    assert logs["Principal"] == {"Service": "logs.us-east-1.amazonaws.com"}
    assert logs["Action"] == list(LOGS_KEY_ACTIONS)
    assert logs["Condition"] == {"ArnLike": {"kms:EncryptionContext:aws:logs:arn":
                                             f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:{NAMES.log_group}"}}
    alarms = sids["CloudWatchAlarmsPublishToEncryptedTopic"]
    assert alarms["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert alarms["Condition"]["ArnLike"] == {"aws:SourceArn": [
        f"arn:aws:cloudwatch:us-east-1:{ACCOUNT}:alarm:gpuburst-dev-audit-key-controls"]}
    # Wildcard actions: the account statement's, and the documented GenerateDataKey* of CloudTrail and CloudWatch.
    assert sorted(allow_wildcard_actions(_key_policy()["Statement"])) == [
        "kms:*", "kms:GenerateDataKey*", "kms:GenerateDataKey*"]
    china = _by_sid(_key_policy(partition="aws-cn", region="cn-north-1"))["CloudWatchLogsEncryptsAuditLogGroup"]
    assert china["Principal"] == {"Service": "logs.cn-north-1.amazonaws.com.cn"}


def test_logs_role_is_cloudtrails_for_this_trail_and_writes_its_streams_only():
    (trust,) = ad.logs_role_trust_policy(account_id=ACCOUNT, trail_arn=TRAIL)["Statement"]
    assert (trust["Principal"], trust["Action"]) == ({"Service": "cloudtrail.amazonaws.com"}, "sts:AssumeRole")
    assert trust["Condition"] == {"StringEquals": {"aws:SourceArn": TRAIL, "aws:SourceAccount": ACCOUNT}}
    doc = ad.logs_role_policy(account_id=ACCOUNT, partition="aws", region="us-east-1", log_group_name=NAMES.log_group)
    group = f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:{NAMES.log_group}"
    streams = [f"{group}:log-stream:{ACCOUNT}_CloudTrail_us-east-1*"]
    assert [(st["Action"], st["Resource"]) for st in doc["Statement"]] == [
        (["logs:CreateLogStream"], streams), (["logs:PutLogEvents"], streams)]


@pytest.mark.parametrize("field,kw", [("account_id", {"account_id": "12"}), ("partition", {"partition": "gcp"}),
                                      ("region", {"region": "mars"}), ("alarm_names", {"alarm_names": "one"})])
def test_bad_key_policy_inputs_are_one_line_errors(field, kw):
    with pytest.raises(ConfigError, match=f"^{field}: "):
        _key_policy(**kw)


# --------------------------------------------------------------------------------------------------------------------
# Filter patterns and alarms.
# --------------------------------------------------------------------------------------------------------------------

def test_bucket_controls_match_policy_and_access_changes_of_the_audited_buckets_only():
    pattern = ad.bucket_controls_pattern([SLIDES, RESULTS]).render()
    for name in ("PutBucketPolicy", "DeleteBucketPolicy", "PutBucketAcl", "PutBucketPublicAccessBlock",
                 "DeleteBucketPublicAccessBlock", "PutBucketEncryption"):
        assert matches(pattern, _s3_event(name, "gpuburst-dev-results")), name
    assert not matches(pattern, _s3_event("PutBucketPolicy", "someone-elses-bucket"))
    assert not matches(pattern, _s3_event("GetBucketPolicy", "gpuburst-dev-slides"))
    assert not matches(pattern, {**_s3_event("PutBucketPolicy", "gpuburst-dev-slides"), "eventSource": "x"})


def test_key_controls_match_the_watched_keys_by_their_recorded_arn():
    pattern = ad.key_controls_pattern([KEY]).render()
    for name in ad.KEY_CONTROL_EVENTS:
        assert matches(pattern, _kms_event(name, KEY)), name
    assert not matches(pattern, _kms_event("ScheduleKeyDeletion", OTHER_KEY))
    assert not matches(pattern, _kms_event("Decrypt", KEY))
    assert not matches(pattern, _kms_event("CreateGrant", KEY))  # decided: too noisy (see KEY_CONTROL_EVENTS)
    with pytest.raises(ConfigError, match=r"^key_arns: 'alias/data' "):
        ad.key_controls_pattern(["alias/data"])


def test_trail_controls_match_stopping_any_trail():
    pattern = ad.trail_controls_pattern().render()
    assert matches(pattern, {"eventSource": "cloudtrail.amazonaws.com", "eventName": "StopLogging"})
    assert not matches(pattern, {"eventSource": "cloudtrail.amazonaws.com", "eventName": "LookupEvents"})


def test_break_glass_matches_exact_and_wildcard_roles_and_their_sessions():
    pattern = ad.break_glass_pattern([IR, GLOB])
    text = pattern.render()
    assert matches(text, _assume(IR)) and matches(text, _assume(IR, "AssumeRoleWithSAML"))
    assert matches(text, _assume(f"arn:aws:iam::{ACCOUNT}:role/breakglass-db"))
    assert matches(text, _in_session(f"arn:aws:iam::{ACCOUNT}:role/breakglass-db"))
    assert matches(text, _in_session(IR))
    for other in (f"arn:aws:iam::{ACCOUNT}:role/incident-response-2", f"arn:aws:iam::{ACCOUNT}:role/ops",
                  "arn:aws:iam::999999999999:role/breakglass-db", f"arn:aws:iam::{ACCOUNT}:role/xbreakglass-db"):
        assert not matches(text, _assume(other)), other
        assert not matches(text, _in_session(other)), other
    assert not matches(text, {**_assume(IR), "eventName": "GetCallerIdentity"})
    # Structure: the exact ARN compared as a string, the glob as one anchored regex per branch (quota: two).
    start, session = pattern.branches
    assert (start[-1].selector, session[0].selector) == (
        "$.requestParameters.roleArn", "$.userIdentity.sessionContext.sessionIssuer.arn")
    assert start[-1].values == session[0].values == (IR,) and start[-1].regex == session[0].regex
    assert session[0].regex == rf"^arn:aws:iam::{ACCOUNT}:role/breakglass-.*$" and pattern.regex_count == 2


def test_glob_regex_escapes_and_keeps_to_cloudwatch_logs_regex_characters():
    regex = ad.glob_to_filter_regex(["arn:aws:iam::123456789012:role/a.b+c", "arn:aws:iam::123456789012:role/x/*"])
    assert regex == r"^arn:aws:iam::123456789012:role/a\.b\+c$|^arn:aws:iam::123456789012:role/x/.*$"
    assert set(regex) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_#=@/;,-^$?[]{}|\\*+.")
    assert re.search(regex, "arn:aws:iam::123456789012:role/a.b+c")
    assert not re.search(regex, "arn:aws:iam::123456789012:role/aXb+c")
    with pytest.raises(ConfigError, match=r"^break_glass_role_arns: .*cannot hold it"):
        ad.glob_to_filter_regex(["arn:aws:iam::123456789012:role/a!*"])
    with pytest.raises(ConfigError, match=r"^break_glass_role_arns: "):  # IAM names are ASCII
        ad.break_glass_pattern(["arn:aws:iam::123456789012:role/caf\u00e9*"])


def test_patterns_over_cloudwatch_logs_limit_are_refused():
    many = [f"arn:aws:s3:::{'b' * 60}-{i:02d}" for i in range(12)]
    with pytest.raises(ConfigError, match=r"^bucket_arns: .* over CloudWatch Logs' 1024"):
        ad.bucket_controls_pattern(many)
    # The dev stack's worst case (four buckets of 63 characters) fits.
    assert len(ad.bucket_controls_pattern([f"arn:aws:s3:::{c * 63}" for c in "abcd"]).render()) <= 1024


def test_alarm_specs_fire_on_one_event_in_five_minutes_and_missing_data_is_not_breaching():
    specs = ad.audit_alarm_specs(NAMES, break_glass=True)
    assert [s.key for s in specs] == ["bucket-controls", "key-controls", "trail-controls", "break-glass"]
    for s in specs:
        assert (s.statistic, s.period_s, s.evaluation_periods, s.threshold, s.comparison_operator,
                s.treat_missing_data) == ("Sum", 300, 1, 1.0, "GreaterThanOrEqualToThreshold", "notBreaching")
        assert s.name == f"gpuburst-dev-audit-{s.key}" and s.description
    assert [s.key for s in ad.audit_alarm_specs(NAMES, break_glass=False)] == [
        "bucket-controls", "key-controls", "trail-controls"]
    patterns = ad.audit_filter_patterns(bucket_arns=[SLIDES], key_arns=[KEY], break_glass_role_arns=[])
    assert set(patterns) == {"bucket-controls", "key-controls", "trail-controls"}
