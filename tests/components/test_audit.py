"""AuditTrail under mocks: the trail records the clinical buckets' objects (buckets given as Outputs too), its bucket is
Object-Locked, private, TLS-only and kept on destroy with the audit key, the key and role policies are the builders',
and the alarms watch the given buckets and keys and the layer's own."""
from __future__ import annotations

import json

import pulumi_aws as aws
import pytest

from components.audit import AuditTrail, AuditTrailArgs
from components.keys import LOGS_KEY_ACTIONS
from components.spec import audit_documents as ad
from components.spec.validation import ConfigError
from components.synth.mocks import FAKE_ACCOUNT, RecordingMonitor, run_under_mocks

KEY = f"arn:aws:kms:us-east-1:{FAKE_ACCOUNT}:key/11111111-1111-1111-1111-111111111111"
MOCK_KEY = f"arn:aws:kms:us-east-1:{FAKE_ACCOUNT}:key/00000000-0000-0000-0000-000000000000"
IR = f"arn:aws:iam::{FAKE_ACCOUNT}:role/incident-response"
TRAIL = f"arn:aws:cloudtrail:us-east-1:{FAKE_ACCOUNT}:trail/gpuburst-dev-audit"
NAMES = ad.AuditNames("gpuburst-dev")


def _args(**kw) -> AuditTrailArgs:
    base = dict(name_prefix="gpuburst-dev", key_arns=[KEY], break_glass_role_arns=[IR, f"{IR}-*"],
                alarm_emails=["oncall@example.com", "privacy@example.com"])
    base.update(kw)
    return AuditTrailArgs(**base)


def _run(args: AuditTrailArgs, monkeypatch, with_output_bucket: bool = True, seen: list[str] | None = None):
    """Run the component (with the slides bucket as an Output of another resource) and note which registrations
    asked to be retained on delete (RecordingMonitor does not keep that flag); `seen` gets every name registered."""
    retained: set[str] = set()
    register = RecordingMonitor.RegisterResource

    def recording(self, request):
        if seen is not None:
            seen.append(request.name)
        if request.retainOnDelete:
            retained.add(request.name)
        return register(self, request)

    monkeypatch.setattr(RecordingMonitor, "RegisterResource", recording)

    def program():
        arns = list(args.bucket_arns)
        if with_output_bucket:
            arns.append(aws.s3.Bucket("slides", bucket="gpuburst-dev-slides").arn)
        AuditTrail("audit", AuditTrailArgs(**{**vars(args), "bucket_arns": arns}))
    res = run_under_mocks(program)
    return res, retained


@pytest.fixture(scope="module")
def run():
    mp = pytest.MonkeyPatch()
    try:
        yield _run(_args(bucket_arns=["arn:aws:s3:::gpuburst-dev-results"]), mp)
    finally:
        mp.undo()


def _one(res, type_: str):
    (r,) = res.monitor.by_type(type_)
    return r


def test_the_trail_records_management_events_and_the_buckets_objects_everywhere(run):
    res, _ = run
    trail = _one(res, "aws:cloudtrail/trail:Trail")
    p = trail.properties
    assert p["name"] == "gpuburst-dev-audit"
    assert (p["enableLogFileValidation"], p["isMultiRegionTrail"], p["includeGlobalServiceEvents"]) == (True,) * 3
    assert (p["kmsKeyId"], p["s3BucketName"]) == (MOCK_KEY, "audit-trail-logs")
    mgmt, data = p["advancedEventSelectors"]
    assert mgmt["fieldSelectors"] == [{"field": "eventCategory", "equals": ["Management"]}]
    fields = {f["field"]: f for f in data["fieldSelectors"]}
    assert fields["resources.ARN"]["startsWiths"] == ["arn:aws:s3:::gpuburst-dev-results/",
                                                      "arn:aws:s3:::gpuburst-dev-slides/"]
    assert fields["eventCategory"]["equals"] == ["Data"]
    assert fields["resources.type"]["equals"] == ["AWS::S3::Object"]
    group = _one(res, "aws:cloudwatch/logGroup:LogGroup")
    assert p["cloudWatchLogsGroupArn"].endswith(f"{NAMES.log_group}:*")
    assert p["cloudWatchLogsRoleArn"].endswith(":role/gpuburst-dev-cloudtrail-logs")
    urns = {r.name: r.urn for r in res.registrations}
    # Created after the bucket policy and the role's policy: CloudTrail checks both when the trail is created.
    assert {urns["audit-trail-logs-policy"], urns["audit-logs-role-policy"], group.urn} <= set(trail.dependencies)


def test_the_trail_bucket_is_locked_private_tls_only_and_pinned_to_the_trail(run):
    res, _ = run
    buckets = [b for b in res.monitor.by_type("aws:s3/bucket:Bucket") if b.name == "audit-trail-logs"]
    (bucket,) = buckets
    assert bucket.properties["objectLockEnabled"] is True and bucket.properties["forceDestroy"] is False
    lock = _one(res, "aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration")
    assert lock.properties["rule"] == {"defaultRetention": {"mode": "GOVERNANCE", "days": 365}}
    pab = _one(res, "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").properties
    assert all(pab[k] is True for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls",
                                        "restrictPublicBuckets"))
    own = _one(res, "aws:s3/bucketOwnershipControls:BucketOwnershipControls").properties
    assert own["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
    ver = _one(res, "aws:s3/bucketVersioning:BucketVersioning").properties
    assert ver["versioningConfiguration"]["status"] == "Enabled"
    policy = _one(res, "aws:s3/bucketPolicy:BucketPolicy")
    assert json.loads(policy.properties["policy"]) == ad.trail_bucket_policy(
        "arn:aws:s3:::audit-trail-logs", trail_arn=TRAIL, account_id=FAKE_ACCOUNT)
    controls = {r.urn for r in res.registrations if r.name.startswith("audit-trail-logs-") and r is not policy}
    assert len(controls) == 5 and controls <= set(policy.dependencies)


def test_the_record_and_its_key_outlive_the_stack_and_nothing_else_does(run):
    _, retained = run
    assert retained == {"audit-key", "audit-trail-logs", "audit-trail-logs-public-access-block",
                        "audit-trail-logs-ownership", "audit-trail-logs-encryption", "audit-trail-logs-versioning",
                        "audit-trail-logs-object-lock", "audit-trail-logs-policy"}


def test_the_audit_key_rotates_and_its_policy_is_the_builders(run):
    res, _ = run
    key = _one(res, "aws:kms/key:Key").properties
    assert key["enableKeyRotation"] is True and key["deletionWindowInDays"] == 30
    assert json.loads(key["policy"]) == ad.audit_key_policy(
        account_id=FAKE_ACCOUNT, partition="aws", region="us-east-1", trail_name=NAMES.trail,
        log_group_name=NAMES.log_group, alarm_names=[NAMES.alarm(k) for k in (
            "bucket-controls", "key-controls", "trail-controls", "break-glass")], logs_key_actions=LOGS_KEY_ACTIONS)
    assert _one(res, "aws:kms/alias:Alias").properties["name"] == "alias/gpuburst-dev-audit"
    group = _one(res, "aws:cloudwatch/logGroup:LogGroup").properties
    assert (group["name"], group["kmsKeyId"], group["retentionInDays"]) == (NAMES.log_group, MOCK_KEY, 365)


def test_the_logs_role_is_cloudtrails_and_writes_only_its_streams(run):
    res, _ = run
    role = _one(res, "aws:iam/role:Role").properties
    assert json.loads(role["assumeRolePolicy"]) == ad.logs_role_trust_policy(account_id=FAKE_ACCOUNT, trail_arn=TRAIL)
    policy = _one(res, "aws:iam/rolePolicy:RolePolicy").properties
    assert json.loads(policy["policy"]) == ad.logs_role_policy(
        account_id=FAKE_ACCOUNT, partition="aws", region="us-east-1", log_group_name=NAMES.log_group)


def test_alarms_watch_the_given_and_the_layers_own_buckets_and_keys(run):
    res, _ = run
    topic = _one(res, "aws:sns/topic:Topic").properties
    assert topic["kmsMasterKeyId"] == MOCK_KEY and topic["name"] == "gpuburst-dev-audit-alarms"
    subs = res.monitor.by_type("aws:sns/topicSubscription:TopicSubscription")
    assert sorted(s.properties["endpoint"] for s in subs) == ["oncall@example.com", "privacy@example.com"]
    filters = {f.properties["name"]: f.properties for f in res.monitor.by_type(
        "aws:cloudwatch/logMetricFilter:LogMetricFilter")}
    alarms = {a.properties["name"]: a for a in res.monitor.by_type("aws:cloudwatch/metricAlarm:MetricAlarm")}
    assert set(filters) == set(alarms) == {NAMES.alarm(k) for k in (
        "bucket-controls", "key-controls", "trail-controls", "break-glass")}
    for name, alarm in alarms.items():
        a = alarm.properties
        assert (a["metricName"], a["namespace"], a["threshold"], a["period"], a["treatMissingData"],
                a["comparisonOperator"], a["statistic"]) == (
            name, "gpuburst/Audit", 1, 300, "notBreaching", "GreaterThanOrEqualToThreshold", "Sum")
        assert a["alarmActions"] == [f"arn:aws:sns:us-east-1:{FAKE_ACCOUNT}:gpuburst-dev-audit-alarms"]
        assert filters[name]["logGroupName"] == NAMES.log_group
        assert filters[name]["metricTransformation"] == {"name": name, "namespace": "gpuburst/Audit", "value": "1"}
    buckets = filters[NAMES.alarm("bucket-controls")]["pattern"]
    for bucket in ("gpuburst-dev-results", "gpuburst-dev-slides", "audit-trail-logs"):
        assert f'$.requestParameters.bucketName = "{bucket}"' in buckets, bucket
    keys = filters[NAMES.alarm("key-controls")]["pattern"]
    assert f'"{KEY}"' in keys and f'"{MOCK_KEY}"' in keys
    assert filters[NAMES.alarm("break-glass")]["pattern"] == ad.break_glass_pattern([IR, f"{IR}-*"]).render()


def test_children_are_parented_and_no_break_glass_alarm_without_roles(monkeypatch):
    res, _ = _run(_args(break_glass_role_arns=[], lock_mode="COMPLIANCE", lock_days=2190, multi_region=False),
                  monkeypatch, with_output_bucket=False)
    (comp,) = res.monitor.by_type("gpuburst:index:AuditTrail")
    assert all(r.parent == comp.urn for r in res.registrations if r is not comp)
    assert len(res.monitor.by_type("aws:cloudwatch/metricAlarm:MetricAlarm")) == 3
    trail = _one(res, "aws:cloudtrail/trail:Trail").properties
    assert trail["isMultiRegionTrail"] is False and len(trail["advancedEventSelectors"]) == 1
    lock = _one(res, "aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration")
    assert lock.properties["rule"] == {"defaultRetention": {"mode": "COMPLIANCE", "days": 2190}}


@pytest.mark.parametrize("field,value", [
    ("name_prefix", "GPU"), ("bucket_arns", ["arn:aws:s3:::Bad"]), ("key_arns", ["alias/data"]),
    ("break_glass_role_arns", [f"arn:aws:iam::{FAKE_ACCOUNT}:user/alice"]), ("alarm_emails", []),
    ("lock_mode", "LEGAL"),
    ("lock_days", 0), ("log_retention_days", 42), ("region", "east"), ("multi_region", "yes"),
])
def test_bad_args_are_one_line_errors_before_anything_is_registered(field, value, monkeypatch):
    seen: list[str] = []
    with pytest.raises(ConfigError, match=f"^AuditTrail 'audit': {field}: ") as e:
        _run(_args(**{field: value}), monkeypatch, with_output_bucket=False, seen=seen)
    assert "\n" not in str(e.value)
    assert [n for n in seen if n.startswith("audit")] == []


def test_the_dev_plan_holds_the_trail_the_locked_bucket_and_the_alarms(dev):
    """Issue 27: the platform wires the audit layer onto its clinical buckets, its access-log bucket and its key."""
    import json

    res = dev["plan"]["resources"]
    (trail,) = [r for r in res if r["type"] == "aws:cloudtrail/trail:Trail"]
    selectors = json.dumps(trail["properties"]["advancedEventSelectors"])
    for bucket in ("gpuburst-storage-slides", "gpuburst-storage-results", "gpuburst-storage-access-logs"):
        assert f"arn:aws:s3:::{bucket}/" in selectors
    (lock,) = [r for r in res if r["type"] == "aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration"]
    assert lock["properties"]["bucket"] == trail["properties"]["s3BucketName"]
    assert lock["properties"]["rule"]["defaultRetention"]["days"] >= 1
    alarms = {r["name"] for r in res if r["type"] == "aws:cloudwatch/metricAlarm:MetricAlarm" and "audit" in r["name"]}
    assert {"gpuburst-audit-bucket-controls-alarm", "gpuburst-audit-key-controls-alarm",
            "gpuburst-audit-break-glass-alarm"} <= alarms
    (glass,) = [r for r in res if r["name"] == "gpuburst-audit-break-glass-filter"]
    assert "arn:aws:iam::123456789012:role/gpuburst-break-glass" in glass["properties"]["pattern"]
