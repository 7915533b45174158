"""The clinical buckets' deploy-model statements: which Sid carries which exemption (what AWS decides with them is
tested against iam-simulate in tests/components/rehearse/test_deploy_boundary_oracle.py)."""
import pytest

from components.spec.bucket_access import (
    UPLOADER_ACTIONS,
    BucketPart,
    data_bucket_statements,
    exempt_principals,
    outside_role_key_statements,
)
from components.spec.deploy_model import parse_deploy_model

BUCKET = "arn:aws:s3:::lab-slides"
VPCE = ["vpce-0123456789abcdef0"]
DEPLOYER = "arn:aws:iam::123456789012:role/deploy"
UPLOADER = "arn:aws:iam::123456789012:role/scanner"
READER = "arn:aws:iam::123456789012:role/researchers"
BREAK = "arn:aws:iam::123456789012:role/break-glass-*"


def model(**over):
    raw = {"deployerRoleArns": [DEPLOYER], "deployCidrs": ["198.51.100.0/24"],
           "slideUploaders": [{"roleArn": UPLOADER, "cidrs": ["192.0.2.0/24"]}],
           "resultReaders": [{"roleArn": READER, "vpcEndpointIds": ["vpce-0fedcba9876543210"]}],
           "breakGlassRoleArns": [BREAK], **over}
    return parse_deploy_model(raw)


def by_sid(statements):
    return {st["Sid"]: st for st in statements}


def test_the_slides_bucket_exempts_deployers_its_uploader_and_break_glass_from_the_endpoint_deny():
    st = by_sid(data_bucket_statements(BUCKET, BucketPart("slides", "slides/"), model(), VPCE))
    deny = st["DenyOutsideVpce"]["Condition"]
    assert deny["StringNotEquals"] == {"aws:SourceVpce": VPCE}
    assert deny["ArnNotLike"] == {"aws:PrincipalArn": [DEPLOYER, UPLOADER, BREAK]}
    assert st["DenyDeployersObjectData"]["Resource"] == f"{BUCKET}/*"
    place = st["DenyDeployersOutsideDeployPlace"]["Condition"]
    assert place["NotIpAddress"] == {"aws:SourceIp": ["198.51.100.0/24"]} and place["StringNotEquals"] == {
        "aws:SourceVpce": VPCE}
    assert st["DenyOtherBucketsRoles"]["Condition"] == {"ArnLike": {"aws:PrincipalArn": [READER]}}
    assert st["AllowUploader0"]["Principal"] == {"AWS": UPLOADER}
    assert st["AllowUploader0"]["Resource"] == f"{BUCKET}/slides/*"
    assert st["DenyUploader0OtherActions"]["NotAction"] == list(UPLOADER_ACTIONS)


def test_a_reader_from_an_endpoint_is_held_to_that_endpoint_and_lists_only_its_prefix():
    st = by_sid(data_bucket_statements(BUCKET, BucketPart("results", "results/"), model(), VPCE))
    outside = st["DenyReader0OutsidePlace"]["Condition"]
    assert outside["StringNotEquals"] == {"aws:SourceVpce": [*VPCE, "vpce-0fedcba9876543210"]}
    assert "NotIpAddress" not in outside  # its place has no CIDR: through the endpoint or not at all
    assert st["AllowReader0List"]["Condition"] == {"StringLike": {"s3:prefix": ["results/*"]}}
    assert "AllowUploader0" not in st


def test_deployers_that_deploy_only_from_the_runner_get_no_exemption_outside_the_vpc():
    runner_only = model(deployCidrs=[], runner={"roleArn": DEPLOYER, "backendUrl": "s3://example-state"})
    assert DEPLOYER not in exempt_principals(runner_only, "slides")
    st = by_sid(data_bucket_statements(BUCKET, BucketPart("slides", "slides/"), runner_only, VPCE))
    assert "DenyDeployersOutsideDeployPlace" not in st and "DenyDeployersObjectData" in st


def test_the_key_lets_uploaders_encrypt_and_readers_decrypt_only_through_s3():
    st = by_sid(outside_role_key_statements(model(), account_id="123456789012", partition="aws",
                                            region="eu-west-1"))
    assert st["SlideUploadersEncryptThroughS3"]["Condition"]["StringEquals"]["kms:ViaService"] == \
        "s3.eu-west-1.amazonaws.com"
    assert st["ResultReadersDecryptThroughS3"]["Action"] == ["kms:Decrypt"]
    assert st["ResultReadersDecryptThroughS3"]["Condition"]["ArnLike"] == {"aws:PrincipalArn": [READER]}


def test_an_unknown_part_is_refused():
    with pytest.raises(ValueError, match="part.kind: 'models'"):
        data_bucket_statements(BUCKET, BucketPart("models", "m/"), model(), VPCE)
