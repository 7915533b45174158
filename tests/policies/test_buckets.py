"""Tests for `slide-bucket-boundary`: a bucket of clinical slides denies every request from outside the VPC endpoint
and is encrypted with a customer key of the plan; a bucket policy for another stack's bucket is judged alone."""
from __future__ import annotations

import pytest

from policies import boundary, buckets
from policies.harness import UNKNOWN_STRING as U
from tests.policies import clinical_fragments as C
from tests.policies import fragments as F

RULE = buckets.bucket_findings
WHO = "Bucket slides (tags.\"gpuburst.io/data-class\" = 'clinical-slides')"


def judge(*entries: dict, key: bool = True, config: dict | None = None) -> tuple[list[str], list[str]]:
    return C.judge(RULE, *entries, *([C.key()] if key else []), config=config)


def swap(entries: list[dict], *new: dict) -> list[dict]:
    names = {e["name"] for e in new}
    return [e for e in entries if e["name"] not in names] + list(new)


def test_a_sound_slide_bucket_passes_whole_or_partial():
    assert judge(*C.slide_bucket()) == ([], [])
    assert judge(C.platform(), *C.slide_bucket()) == ([], [])
    # A break-glass, the other forms of the condition, of the action and of the document.
    for statement in (C.deny_outside_vpce(Condition={"StringNotEqualsIfExists": {"aws:SourceVpc": "vpc-1"}}),
                      C.deny_outside_vpce(Action=["s3:GetObject", "s3:PutObject"]),
                      C.deny_outside_vpce(Principal={"AWS": "*"}, Resource="arn:aws:s3:::slides/*")):
        assert judge(*swap(C.slide_bucket(), C.bucket_policy(statements=[statement]))) == ([], []), statement
    assert judge(*swap(C.slide_bucket(), C.bucket_policy(as_json=False))) == ([], [])


def test_fragments_without_clinical_buckets_are_not_judged():
    for fragment in (F.workload(), F.lone_trigger_auth(), F.chart_fragment("keda")):
        assert judge(*fragment["resources"], key=False) == ([], [])
    logs = [C.bucket("logs", "access-logs", parent=F.urn(C.T_STORAGE, "storage")),
            C.bucket_policy("logs", C.tls_only("logs")), C.encryption("logs", None, "AES256", deps=[])]
    assert judge(F.entry(C.T_STORAGE, "storage", {}), *logs) == ([], [])
    assert judge(C.bucket("scratch", None), key=False) == ([], [])


def test_a_clinical_bucket_without_a_bucket_policy_is_mandatory():
    (message,) = judge(C.bucket(), C.encryption())[0]
    assert message.startswith(f"{WHO} has no aws:s3/bucketPolicy:BucketPolicy in the plan: nothing denies reading "
                              "its slides from outside the VPC endpoint")


@pytest.mark.parametrize("statements,held", [
    (C.tls_only(), "its Deny statements: DenyInsecureTransport"),
    ([C.deny_outside_vpce(Resource="arn:aws:s3:::slides")], "its Deny statements: DenyOutsideVpce"),
    ([C.deny_outside_vpce(Action="s3:PutObject")], "its Deny statements: DenyOutsideVpce"),
    ([C.deny_outside_vpce(Condition={"StringEquals": {"aws:SourceVpce": C.VPCE}})], "its Deny statements"),
    ([C.deny_outside_vpce(Principal={"AWS": "arn:aws:iam::123456789012:role/x"})], "its Deny statements"),
    ([C.deny_outside_vpce(Effect="Allow")], "it has no Deny statement"),
], ids=["tls-only", "bucket-arn-only", "put-only", "equals", "one-principal", "allow"])
def test_a_bucket_policy_without_the_endpoint_deny_is_mandatory_naming_it(statements, held):
    (message,) = judge(*swap(C.slide_bucket(), C.bucket_policy(statements=statements)))[0]
    assert message.startswith("BucketPolicy slides-policy policy has no Deny of s3:GetObject (or s3:*) on Bucket "
                              "slides's objects to Principal '*' conditioned StringNotEquals on aws:SourceVpce or "
                              f"aws:SourceVpc ({held}"), message


@pytest.mark.parametrize("sse,text", [
    (C.encryption(key_id="alias/aws/s3", deps=[]),
     "rules[0].applyServerSideEncryptionByDefault.kmsMasterKeyId = 'alias/aws/s3' is an AWS-managed key"),
    (C.encryption(key_id=None, deps=[]), "rules[0].applyServerSideEncryptionByDefault.kmsMasterKeyId is not set"),
    (C.encryption(key_id=None, algorithm="AES256", deps=[]),
     "rules[0].applyServerSideEncryptionByDefault.sseAlgorithm = 'AES256' encrypts Bucket slides with S3's own key"),
], ids=["aws-managed", "no-key", "sse-s3"])
def test_a_clinical_bucket_not_encrypted_with_the_plans_key_is_mandatory(sse, text):
    (message,) = judge(*swap(C.slide_bucket(), sse))[0]
    assert message.startswith(f"BucketServerSideEncryptionConfiguration slides-encryption {text}"), message
    (message,) = judge(C.bucket(), C.bucket_policy())[0]
    assert message.startswith("Bucket slides has no server-side encryption configuration in the plan")


def test_a_key_of_another_stack_is_outside_in_a_partial_plan_and_mandatory_in_a_whole_one():
    other = C.encryption(key_id="arn:aws:kms:us-east-1:123456789012:key/other", deps=[])
    violations, (line,) = judge(*swap(C.slide_bucket(), other))
    assert violations == [] and line.startswith("BucketServerSideEncryptionConfiguration slides-encryption rules[0]."
                                                "applyServerSideEncryptionByDefault.kmsMasterKeyId = 'arn:aws:kms:")
    assert "is a key from another stack: could not check" in line
    (message,) = judge(C.platform(), *swap(C.slide_bucket(), other))[0]
    assert "names no aws:kms/key:Key of the plan" in message


def test_an_untagged_slide_storage_bucket_is_judged_and_so_is_the_tag():
    storage = F.entry(C.T_STORAGE, "storage", {})
    (message,) = judge(storage, C.bucket("slides", None, parent=F.urn(C.T_STORAGE, "storage")), C.encryption())[0]
    assert message.startswith("Bucket slides (a SlideStorage bucket without gpuburst.io/data-class) has no "
                              "aws:s3/bucketPolicy:BucketPolicy")
    (message,) = judge(C.bucket(data_class=U), key=False)[0]
    assert message.startswith('Bucket slides tags."gpuburst.io/data-class" is unknown during preview')


def test_preview_unknowns_follow_dependencies_or_fail_closed():
    unknown_names = [C.bucket(), {**C.bucket_policy(), "properties": {"bucket": U, "policy": C.bucket_policy()[
        "properties"]["policy"]}}, {**C.encryption(), "properties": {**C.encryption()["properties"], "bucket": U}}]
    assert judge(*unknown_names) == ([], [])  # matched by the dependency the engine records
    computed_key = C.encryption(key_id=U)
    assert judge(*swap(C.slide_bucket(), computed_key)) == ([], [])  # the key it depends on is the plan's
    (message,) = judge(*swap(C.slide_bucket(), C.encryption(key_id=U, deps=[])))[0]
    assert "kmsMasterKeyId is unknown during preview" in message
    policy = C.bucket_policy()
    policy["properties"]["policy"] = U
    (message,) = judge(*swap(C.slide_bucket(), policy))[0]
    assert message.startswith("BucketPolicy slides-policy policy is unknown during preview")
    # Computed from the plan's VPC endpoint (its id is the condition's value): the Deny, as the components write it.
    endpoint = F.entry(C.T_VPC_ENDPOINT, "vpce-s3", {"serviceName": "com.amazonaws.us-east-1.s3"})
    policy["dependencies"] = policy["dependencies"] + [F.urn(C.T_VPC_ENDPOINT, "vpce-s3")]
    assert judge(endpoint, *swap(C.slide_bucket(), policy)) == ([], [])


def test_a_bucket_policy_for_another_stacks_bucket_is_judged_alone():
    good = C.bucket_policy("lab-slides")
    violations, (line,) = judge(good, key=False)
    assert violations == [] and line == ("BucketPolicy lab-slides-policy bucket = 'lab-slides' is a bucket from "
                                         "another stack: could not check that it is encrypted with a customer KMS key")
    bad = C.bucket_policy("lab-slides", C.tls_only("lab-slides"))
    (message,), _ = judge(bad, key=False)
    assert message.startswith("BucketPolicy lab-slides-policy policy has no Deny of s3:GetObject (or s3:*) on bucket "
                              "'lab-slides''s objects")
    (message,) = judge(C.platform(), good, key=False)[0]
    assert message.startswith("BucketPolicy lab-slides-policy bucket = 'lab-slides' names a bucket the plan does not "
                              "create")


def test_over_grpc_a_clinical_bucket_without_the_boundary_fails_and_another_stacks_bucket_is_advised(analyze):
    report = analyze(F.doc(C.key(), *swap(C.slide_bucket(), C.bucket_policy(statements=C.tls_only())),
                           C.bucket_policy("lab-slides")))
    (d,) = report.by_policy(buckets.NAME)
    assert d.level == "MANDATORY" and d.urn == F.urn(C.T_BUCKET_POLICY, "slides-policy")
    (line,) = [a for a in report.by_policy(boundary.NAME) if "lab-slides" in a.message]
    assert line.level == "ADVISORY" and "(not checked by slide-bucket-boundary: " in line.message
