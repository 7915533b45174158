"""Tests of the pure policy-document builders: TLS-only policies, least-privilege statements, the alarm key policy."""
from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws
import pytest

from components.spec import policy_documents as pd
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks

QUEUE = "arn:aws:sqs:us-east-1:123456789012:slides"
BUCKET = "arn:aws:s3:::gpuburst-dev-results"
KEY = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"


def _one_line_naming(err: ConfigError, field: str, value) -> None:
    text = str(err)
    assert "\n" not in text
    assert text.startswith(field + ":")
    assert repr(value) in text


def test_queue_tls_only_policy_denies_everything_without_tls():
    doc = pd.queue_tls_only_policy(QUEUE)
    assert doc["Version"] == "2012-10-17"
    (st,) = doc["Statement"]
    assert st["Effect"] == "Deny" and st["Principal"] == "*" and st["Action"] == "sqs:*"
    assert st["Resource"] == QUEUE
    assert st["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_bucket_tls_only_policy_covers_bucket_and_objects_and_old_tls():
    doc = pd.bucket_tls_only_policy(BUCKET)
    insecure, old_tls = doc["Statement"]
    for st in (insecure, old_tls):
        assert st["Effect"] == "Deny" and st["Principal"] == "*" and st["Action"] == "s3:*"
        assert st["Resource"] == [BUCKET, BUCKET + "/*"]
    assert insecure["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert old_tls["Condition"] == {"NumericLessThan": {"s3:TlsVersion": "1.2"}}


def test_queue_consumer_statements_are_exact_and_scoped_to_the_queue():
    sts = pd.queue_consumer_statements(QUEUE)
    assert sts == [{"Effect": "Allow", "Resource": QUEUE, "Action": [
        "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl"]}]
    assert pd.allow_wildcard_actions(sts) == []
    assert "sqs:SendMessage" not in sts[0]["Action"]


def test_queue_consumer_statements_with_a_cmk_decrypt_through_sqs_only():
    sts = pd.queue_consumer_statements(QUEUE, kms_key_arn=KEY)
    kms = sts[-1]
    assert kms["Action"] == ["kms:Decrypt"] and kms["Resource"] == KEY
    assert kms["Condition"] == {"StringLike": {"kms:ViaService": "sqs.*.amazonaws.com"}}
    assert pd.allow_wildcard_actions(sts) == []


def test_producer_and_metrics_statements():
    prod = pd.queue_producer_statements(QUEUE)
    assert prod[0]["Action"] == ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"]
    assert pd.queue_metrics_statements(QUEUE) == [
        {"Effect": "Allow", "Action": ["sqs:GetQueueAttributes"], "Resource": QUEUE}]
    kms = pd.queue_producer_statements(QUEUE, kms_key_arn=KEY)[-1]
    assert kms["Action"] == ["kms:GenerateDataKey", "kms:Decrypt"]


def test_s3_prefix_statements_read_write_and_list():
    sts = pd.s3_prefix_statements(BUCKET, ["slides/"], ["results/"])
    read, listing, write = sts
    assert read == {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [BUCKET + "/slides/*"]}
    assert listing == {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": BUCKET,
                       "Condition": {"StringLike": {"s3:prefix": ["slides/*"]}}}
    assert write == {"Effect": "Allow", "Action": ["s3:PutObject", "s3:AbortMultipartUpload"],
                     "Resource": [BUCKET + "/results/*"]}
    assert pd.allow_wildcard_actions(sts) == []
    # Never the whole bucket's objects.
    assert all(r != BUCKET + "/*" for st in sts for r in ([st["Resource"]] if isinstance(st["Resource"], str)
                                                          else st["Resource"]))


def test_s3_prefix_statements_write_only_has_no_read_or_list():
    sts = pd.s3_prefix_statements(BUCKET, [], ["results/a/", "results/b/"])
    assert len(sts) == 1
    assert sts[0]["Resource"] == [BUCKET + "/results/a/*", BUCKET + "/results/b/*"]


def test_s3_prefix_statements_with_a_cmk():
    kms = pd.s3_prefix_statements(BUCKET, ["slides/"], ["results/"], kms_key_arn=KEY)[-1]
    assert sorted(kms["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert kms["Condition"] == {"StringLike": {"kms:ViaService": "s3.*.amazonaws.com"}}
    kms_read = pd.s3_prefix_statements(BUCKET, ["slides/"], [], kms_key_arn=KEY)[-1]
    assert kms_read["Action"] == ["kms:Decrypt"]


@pytest.mark.parametrize("field,prefixes", [
    ("read_prefixes", ["slides"]),          # no trailing slash: would also match slides-secret/...
    ("read_prefixes", ["/slides/"]),
    ("read_prefixes", ["*/"]),
    ("write_prefixes", ["res?lts/"]),
    ("write_prefixes", [""]),
])
def test_s3_prefix_statements_reject_bad_prefixes(field, prefixes):
    kwargs = {"read_prefixes": [], "write_prefixes": []}
    kwargs[field] = prefixes
    with pytest.raises(ConfigError) as e:
        pd.s3_prefix_statements(BUCKET, **kwargs)
    _one_line_naming(e.value, field, prefixes[0])


def test_s3_prefix_statements_reject_a_string_and_nothing_at_all():
    with pytest.raises(ConfigError) as e:
        pd.s3_prefix_statements(BUCKET, "slides/", [])
    _one_line_naming(e.value, "read_prefixes", "slides/")
    with pytest.raises(ConfigError):
        pd.s3_prefix_statements(BUCKET, [], [])


@pytest.mark.parametrize("call,field,value", [
    (lambda: pd.queue_consumer_statements("slides"), "queue_arn", "slides"),
    (lambda: pd.queue_consumer_statements(BUCKET), "queue_arn", BUCKET),
    (lambda: pd.queue_tls_only_policy("arn:aws:sqs:us-east-1:1234:q"), "queue_arn", "arn:aws:sqs:us-east-1:1234:q"),
    (lambda: pd.s3_prefix_statements(QUEUE, ["a/"], []), "bucket_arn", QUEUE),
    (lambda: pd.bucket_tls_only_policy("my-bucket"), "bucket_arn", "my-bucket"),
    (lambda: pd.queue_consumer_statements(QUEUE, kms_key_arn="alias/aws/sqs"), "kms_key_arn", "alias/aws/sqs"),
])
def test_bad_arns_are_one_line_errors(call, field, value):
    with pytest.raises(ConfigError) as e:
        call()
    _one_line_naming(e.value, field, value)


def test_alarm_topic_key_policy_lets_cloudwatch_use_the_key_for_named_alarms_only():
    doc = pd.alarm_topic_key_policy("123456789012", "aws", "eu-west-1", ["a-oldest-message-age", "a-dlq-not-empty"])
    root, cw = doc["Statement"]
    assert root["Principal"] == {"AWS": "arn:aws:iam::123456789012:root"}
    assert cw["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert cw["Action"] == ["kms:Decrypt", "kms:GenerateDataKey*"]
    assert cw["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    assert cw["Condition"]["ArnLike"]["aws:SourceArn"] == [
        "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:a-oldest-message-age",
        "arn:aws:cloudwatch:eu-west-1:123456789012:alarm:a-dlq-not-empty"]


def test_allow_wildcard_actions_finds_them():
    statements = [{"Effect": "Allow", "Action": "s3:*"},
                  {"Effect": "Deny", "Action": "sqs:*"},
                  {"Effect": "Allow", "Action": ["s3:Get*", "s3:PutObject"]}]
    assert pd.allow_wildcard_actions(statements) == ["s3:*", "s3:Get*"]


def test_builders_accept_outputs_and_render_real_json_under_mocks():
    """ARNs that are Outputs (as in a real program) are joined into the document and serialise to plain JSON."""
    def program():
        q = aws.sqs.Queue("q", name="slides")
        b = aws.s3.Bucket("b", bucket="gpuburst-dev-results")
        statements = pd.queue_consumer_statements(q.arn) + pd.s3_prefix_statements(b.arn, ["results/"], ["results/"])
        aws.iam.Policy("p", policy=pulumi.Output.from_input(pd.policy_document(statements)).apply(json.dumps))
        aws.s3.BucketPolicy("bp", bucket=b.id,
                            policy=pulumi.Output.from_input(pd.bucket_tls_only_policy(b.arn)).apply(json.dumps))

    res = run_under_mocks(program)
    (policy,) = res.monitor.by_type("aws:iam/policy:Policy")
    doc = json.loads(policy.properties["policy"])
    assert doc["Statement"][0]["Resource"] == "arn:aws:sqs:us-east-1:123456789012:slides"
    assert doc["Statement"][1]["Resource"] == ["arn:aws:s3:::gpuburst-dev-results/results/*"]
    (bp,) = res.monitor.by_type("aws:s3/bucketPolicy:BucketPolicy")
    assert json.loads(bp.properties["policy"])["Statement"][0]["Resource"] == [
        "arn:aws:s3:::gpuburst-dev-results", "arn:aws:s3:::gpuburst-dev-results/*"]


# --------------------------------------------------------------------------------------------------------------------
# Issue 19: the dead-letter send, the endpoint-only bucket policy, the access-log bucket, the Pod Identity trust.
# --------------------------------------------------------------------------------------------------------------------

DLQ = "arn:aws:sqs:us-east-1:123456789012:slides-dlq"
VPCE = "vpce-0a1b2c3d4e5f60001"


def test_dead_letter_sender_may_only_send_and_with_a_cmk_generate_a_data_key_through_sqs():
    assert pd.dead_letter_sender_statements(DLQ) == [
        {"Effect": "Allow", "Action": ["sqs:SendMessage"], "Resource": DLQ}]
    send, kms = pd.dead_letter_sender_statements(DLQ, kms_key_arn=KEY)
    assert kms == {"Effect": "Allow", "Action": ["kms:GenerateDataKey", "kms:Decrypt"], "Resource": KEY,
                   "Condition": {"StringLike": {"kms:ViaService": "sqs.*.amazonaws.com"}}}
    with pytest.raises(ConfigError, match="^dead_letter_queue_arn: "):
        pd.dead_letter_sender_statements("slides-dlq")


def test_data_bucket_policy_denies_everything_from_outside_the_endpoints():
    doc = pd.data_bucket_policy(BUCKET, vpc_endpoint_ids=[VPCE])
    assert [st["Sid"] for st in doc["Statement"]] == ["DenyInsecureTransport", "DenyOutdatedTls", "DenyOutsideVpce"]
    assert doc["Statement"][2] == {
        "Sid": "DenyOutsideVpce", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
        "Resource": [BUCKET, BUCKET + "/*"], "Condition": {"StringNotEquals": {"aws:SourceVpce": [VPCE]}}}
    assert pd.data_bucket_policy(BUCKET) == pd.bucket_tls_only_policy(BUCKET)


def test_break_glass_roles_are_exempt_by_principal_arn():
    role = "arn:aws:iam::123456789012:role/break-glass-*"
    st = pd.deny_outside_vpc_endpoints_statement([BUCKET], [VPCE], [role])
    assert st["Condition"] == {"StringNotEquals": {"aws:SourceVpce": [VPCE]},
                               "ArnNotLike": {"aws:PrincipalArn": [role]}}


@pytest.mark.parametrize("endpoints,roles,field", [
    ([], (), "vpc_endpoint_ids"), (VPCE, (), "vpc_endpoint_ids"), (["vpc-0a1b2c3d"], (), "vpc_endpoint_ids"),
    ([VPCE], "arn:aws:iam::123456789012:role/a", "break_glass_role_arns"),
    ([VPCE], ["arn:aws:iam::123456789012:user/a"], "break_glass_role_arns"),
])
def test_bad_endpoint_restrictions_are_one_line_errors(endpoints, roles, field):
    with pytest.raises(ConfigError) as e:
        pd.deny_outside_vpc_endpoints_statement([BUCKET], endpoints, roles)
    assert str(e.value).startswith(f"{field}: ") and "\n" not in str(e.value)


def test_access_log_bucket_policy_lets_s3_log_delivery_write_for_the_named_buckets_only():
    logs = "arn:aws:s3:::gb-logs"
    doc = pd.access_log_bucket_policy(logs, "s3-access-logs/", [BUCKET], "123456789012")
    assert [st["Sid"] for st in doc["Statement"]] == ["DenyInsecureTransport", "DenyOutdatedTls",
                                                      "S3ServerAccessLogsPolicy"]
    st = doc["Statement"][2]
    assert st["Principal"] == {"Service": "logging.s3.amazonaws.com"} and st["Action"] == ["s3:PutObject"]
    assert st["Resource"] == "arn:aws:s3:::gb-logs/s3-access-logs/*"
    assert st["Condition"] == {"ArnLike": {"aws:SourceArn": [BUCKET]},
                               "StringEquals": {"aws:SourceAccount": "123456789012"}}
    with pytest.raises(ConfigError, match="^prefix: "):
        pd.access_log_bucket_policy(logs, "logs", [BUCKET], "123456789012")


def test_pod_identity_subject_check():
    pd.check_pod_identity_subject("gpuburst", "slides-worker")
    with pytest.raises(ConfigError, match="^namespace: "):
        pd.check_pod_identity_subject("a" * 64, "sa")
    with pytest.raises(ConfigError, match="^service_account: "):
        pd.check_pod_identity_subject("gpuburst", "Bad_SA")


def test_s3_object_read_statements_grant_that_one_object_and_decrypt_through_s3_only():
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    read, decrypt = pd.s3_object_read_statements("arn:aws:s3:::tils-lab-models/tils/v3.pt2", kms_key_arn=key)
    assert read == {"Sid": "ReadModelObject", "Effect": "Allow", "Action": ["s3:GetObject"],
                    "Resource": "arn:aws:s3:::tils-lab-models/tils/v3.pt2"}
    assert decrypt == {"Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": key,
                       "Condition": {"StringLike": {"kms:ViaService": "s3.*.amazonaws.com"}}}
    assert pd.s3_object_read_statements("arn:aws:s3:::tils-lab-models/v3.pt2") == [
        {"Sid": "ReadModelObject", "Effect": "Allow", "Action": ["s3:GetObject"],
         "Resource": "arn:aws:s3:::tils-lab-models/v3.pt2"}]


@pytest.mark.parametrize("arn", ["arn:aws:s3:::tils-lab-models", "arn:aws:s3:::tils-lab-models/*",
                                 "arn:aws:s3:::tils-lab-models/models/v?.pt2"])
def test_s3_object_read_statements_refuse_a_bucket_or_a_wildcard(arn):
    with pytest.raises(ConfigError, match=r"^object_arn: .* is not valid: one S3 object's ARN"):
        pd.s3_object_read_statements(arn)
