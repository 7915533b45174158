"""The S3 rows of the provider-actions catalogue: which IAM actions the Pulumi AWS provider's S3 resources call, as
plain data that `provider_actions` turns into its entries.

Each phase is a tuple of rows `(IAM action, SDK operation, resource template, when)`: the resource template is
`{arn}` (the bucket, `arn:aws:s3:::NAME`), `{arn}/*` (the bucket's objects) or `*`; `when` is empty for a call the
phase always makes, else the condition under which the provider makes it. The rows were read from
hashicorp/terraform-provider-aws (the v6 line that pulumi-aws 7.x wraps; see `provider_actions` for which stored
versions), function by function; the SDK operation to IAM action mapping is the Amazon S3 User Guide's "Required
permissions for Amazon S3 API operations" (docs.aws.amazon.com/AmazonS3/latest/userguide/using-with-s3-policy-
actions.html), which also lists the Delete* operations that need a Put* action (DeleteBucketCors needs
s3:PutBucketCORS, DeleteBucketEncryption s3:PutEncryptionConfiguration, DeletePublicAccessBlock
s3:PutBucketPublicAccessBlock, DeleteBucketLifecycle s3:PutLifecycleConfiguration, ...).
"""
from __future__ import annotations

from typing import Any

__all__ = ["S3_ENTRIES"]

_B = "{arn}"
_O = "{arn}/*"
_TAGS = "tags are set"
_LOCK = "object_lock_enabled is set"
_FORCE = "force_destroy is true and DeleteBucket answered BucketNotEmpty"


def _inline(arg: str) -> str:
    """The condition of an update row driven by one of the bucket's deprecated inline arguments."""
    return f"the deprecated inline `{arg}` argument changes"


_BUCKET_READ = (
    ("s3:ListBucket", "HeadBucket", _B, ""),
    ("s3:GetBucketPolicy", "GetBucketPolicy", _B, ""),
    ("s3:GetBucketAcl", "GetBucketAcl", _B, ""),
    ("s3:GetBucketCORS", "GetBucketCors", _B, ""),
    ("s3:GetBucketWebsite", "GetBucketWebsite", _B, ""),
    ("s3:GetBucketVersioning", "GetBucketVersioning", _B, ""),
    ("s3:GetAccelerateConfiguration", "GetBucketAccelerateConfiguration", _B, ""),
    ("s3:GetBucketRequestPayment", "GetBucketRequestPayment", _B, ""),
    ("s3:GetBucketLogging", "GetBucketLogging", _B, ""),
    ("s3:GetLifecycleConfiguration", "GetBucketLifecycleConfiguration", _B, ""),
    ("s3:GetReplicationConfiguration", "GetBucketReplication", _B, ""),
    ("s3:GetEncryptionConfiguration", "GetBucketEncryption", _B, ""),
    ("s3:GetBucketObjectLockConfiguration", "GetObjectLockConfiguration", _B, ""),
    # manager.GetBucketRegion (findBucketRegion) answers the bucket's region from a HeadBucket request.
    ("s3:ListBucket", "HeadBucket", _B, ""),
    # The transparent tagging (@Tags resourceType "Bucket") lists the tags after the read: tags.go bucketListTags.
    ("s3:GetBucketTagging", "GetBucketTagging", _B, ""),
)

S3_ENTRIES: dict[str, dict[str, Any]] = {
    "aws:s3/bucket:Bucket": {
        "terraform": "aws_s3_bucket",
        "file": "internal/service/s3/bucket.go",
        "functions": ("resourceBucketCreate", "resourceBucketRead", "resourceBucketUpdate", "resourceBucketDelete"),
        "helpers": ("internal/service/s3/tags.go: bucketCreateTags, bucketListTags, bucketUpdateTags",
                    "internal/service/s3/delete.go: emptyBucket, deletePage"),
        "arn_of": "the bucket: arn:aws:s3:::NAME",
        "reads_after": ("create", "update"),
        "create": (
            ("s3:ListBucket", "HeadBucket", _B, "the region is us-east-1 (a pre-check that the name is free)"),
            # CreateBucket always carries a canned ACL (`private` unless acl/grant is set); the S3 guide lists
            # s3:PutBucketAcl for a CreateBucket request that specifies an ACL.
            ("s3:CreateBucket", "CreateBucket", _B, ""),
            ("s3:PutBucketAcl", "CreateBucket", _B, ""),
            ("s3:PutBucketObjectLockConfiguration", "CreateBucket", _B, _LOCK),
            ("s3:PutBucketVersioning", "CreateBucket", _B, _LOCK),
            ("s3:ListBucket", "HeadBucket", _B, ""),
            ("s3:GetBucketTagging", "GetBucketTagging", _B, _TAGS),
            ("s3:PutBucketTagging", "PutBucketTagging", _B, _TAGS),
        ),
        "read": _BUCKET_READ,
        "update": (
            ("s3:PutBucketPolicy", "PutBucketPolicy", _B, _inline("policy")),
            ("s3:DeleteBucketPolicy", "DeleteBucketPolicy", _B, _inline("policy")),
            ("s3:PutBucketCORS", "PutBucketCors", _B, _inline("cors_rule")),
            ("s3:PutBucketCORS", "DeleteBucketCors", _B, _inline("cors_rule")),
            ("s3:PutBucketWebsite", "PutBucketWebsite", _B, _inline("website")),
            ("s3:DeleteBucketWebsite", "DeleteBucketWebsite", _B, _inline("website")),
            ("s3:PutBucketVersioning", "PutBucketVersioning", _B, _inline("versioning")),
            ("s3:PutBucketAcl", "PutBucketAcl", _B, _inline("acl") + " (or `grant`)"),
            ("s3:GetBucketAcl", "GetBucketAcl", _B, _inline("grant")),
            ("s3:PutBucketLogging", "PutBucketLogging", _B, _inline("logging")),
            ("s3:PutLifecycleConfiguration", "PutBucketLifecycleConfiguration", _B, _inline("lifecycle_rule")),
            ("s3:PutLifecycleConfiguration", "DeleteBucketLifecycle", _B, _inline("lifecycle_rule")),
            ("s3:PutAccelerateConfiguration", "PutBucketAccelerateConfiguration", _B, _inline("acceleration_status")),
            ("s3:PutBucketRequestPayment", "PutBucketRequestPayment", _B, _inline("request_payer")),
            ("s3:PutReplicationConfiguration", "PutBucketReplication", _B, _inline("replication_configuration")),
            ("s3:PutReplicationConfiguration", "DeleteBucketReplication", _B, _inline("replication_configuration")),
            ("s3:PutEncryptionConfiguration", "PutBucketEncryption", _B,
             _inline("server_side_encryption_configuration")),
            ("s3:PutEncryptionConfiguration", "DeleteBucketEncryption", _B,
             _inline("server_side_encryption_configuration")),
            ("s3:PutBucketObjectLockConfiguration", "PutObjectLockConfiguration", _B,
             _inline("object_lock_configuration")),
            ("s3:GetBucketTagging", "GetBucketTagging", _B, "tags change"),
            ("s3:PutBucketTagging", "PutBucketTagging", _B, "tags change"),
            ("s3:PutBucketTagging", "DeleteBucketTagging", _B, "every tag is removed"),
        ),
        "delete": (
            ("s3:DeleteBucket", "DeleteBucket", _B, ""),
            ("s3:ListBucketVersions", "ListObjectVersions", _B, _FORCE),
            ("s3:DeleteObject", "DeleteObjects", _O, _FORCE),
            ("s3:DeleteObjectVersion", "DeleteObjects", _O, _FORCE),
            ("s3:BypassGovernanceRetention", "DeleteObjects", _O, _FORCE + " and Object Lock is enabled"),
            ("s3:PutObjectLegalHold", "PutObjectLegalHold", _O, _FORCE + ", Object Lock is on and a version is held"),
            # The wait for the bucket to be gone (RetryUntilNotFound over findBucket).
            ("s3:ListBucket", "HeadBucket", _B, ""),
        ),
        "note": "create ends by calling update and then read; update runs only the parts whose arguments changed. "
                "A PutBucketReplication also needs iam:PassRole on the replication role.",
    },
    "aws:s3/bucketPolicy:BucketPolicy": {
        "terraform": "aws_s3_bucket_policy",
        "file": "internal/service/s3/bucket_policy.go",
        "functions": ("resourceBucketPolicyPut", "resourceBucketPolicyRead", "resourceBucketPolicyPut",
                      "resourceBucketPolicyDelete"),
        "arn_of": "the bucket the policy is attached to: arn:aws:s3:::NAME",
        "reads_after": ("create", "update"),
        "create": (("s3:PutBucketPolicy", "PutBucketPolicy", _B, ""),
                   ("s3:GetBucketPolicy", "GetBucketPolicy", _B, "")),
        "read": (("s3:GetBucketPolicy", "GetBucketPolicy", _B, ""),),
        "update": (("s3:PutBucketPolicy", "PutBucketPolicy", _B, ""),),
        "delete": (("s3:DeleteBucketPolicy", "DeleteBucketPolicy", _B, ""),
                   ("s3:GetBucketPolicy", "GetBucketPolicy", _B, "")),
        "note": "S3 lets the bucket owner account's root user call GetBucketPolicy, PutBucketPolicy and "
                "DeleteBucketPolicy even when the bucket policy denies them (S3 API reference, PutBucketPolicy); "
                "any other principal is bound by the policy.",
    },
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": {
        "terraform": "aws_s3_bucket_public_access_block",
        "file": "internal/service/s3/bucket_public_access_block.go",
        "functions": ("resourceBucketPublicAccessBlockCreate", "resourceBucketPublicAccessBlockRead",
                      "resourceBucketPublicAccessBlockUpdate", "resourceBucketPublicAccessBlockDelete"),
        "arn_of": "the bucket: arn:aws:s3:::NAME",
        "reads_after": ("create",),
        "create": (("s3:PutBucketPublicAccessBlock", "PutPublicAccessBlock", _B, ""),
                   ("s3:GetBucketPublicAccessBlock", "GetPublicAccessBlock", _B, "")),
        "read": (("s3:GetBucketPublicAccessBlock", "GetPublicAccessBlock", _B, ""),),
        "update": (("s3:PutBucketPublicAccessBlock", "PutPublicAccessBlock", _B, ""),),
        "delete": (("s3:PutBucketPublicAccessBlock", "DeletePublicAccessBlock", _B, ""),
                   ("s3:GetBucketPublicAccessBlock", "GetPublicAccessBlock", _B, "")),
        "note": "update skips the read afterwards (eventual consistency; the function says so).",
    },
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": {
        "terraform": "aws_s3_bucket_ownership_controls",
        "file": "internal/service/s3/bucket_ownership_controls.go",
        "functions": ("resourceBucketOwnershipControlsCreate", "resourceBucketOwnershipControlsRead",
                      "resourceBucketOwnershipControlsUpdate", "resourceBucketOwnershipControlsDelete"),
        "arn_of": "the bucket: arn:aws:s3:::NAME",
        "reads_after": ("create", "update"),
        "create": (("s3:PutBucketOwnershipControls", "PutBucketOwnershipControls", _B, ""),
                   ("s3:GetBucketOwnershipControls", "GetBucketOwnershipControls", _B, "")),
        "read": (("s3:GetBucketOwnershipControls", "GetBucketOwnershipControls", _B, ""),),
        "update": (("s3:PutBucketOwnershipControls", "PutBucketOwnershipControls", _B, ""),),
        "delete": (("s3:PutBucketOwnershipControls", "DeleteBucketOwnershipControls", _B, ""),
                   ("s3:GetBucketOwnershipControls", "GetBucketOwnershipControls", _B, "")),
    },
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": {
        "terraform": "aws_s3_bucket_server_side_encryption_configuration",
        "file": "internal/service/s3/bucket_server_side_encryption_configuration.go",
        "functions": ("resourceBucketServerSideEncryptionConfigurationCreate",
                      "resourceBucketServerSideEncryptionConfigurationRead",
                      "resourceBucketServerSideEncryptionConfigurationUpdate",
                      "resourceBucketServerSideEncryptionConfigurationDelete"),
        "arn_of": "the bucket: arn:aws:s3:::NAME",
        "reads_after": ("create", "update"),
        "create": (("s3:PutEncryptionConfiguration", "PutBucketEncryption", _B, ""),
                   ("s3:GetEncryptionConfiguration", "GetBucketEncryption", _B, "")),
        "read": (("s3:GetEncryptionConfiguration", "GetBucketEncryption", _B, ""),),
        "update": (("s3:PutEncryptionConfiguration", "PutBucketEncryption", _B, ""),),
        "delete": (("s3:PutEncryptionConfiguration", "DeleteBucketEncryption", _B, ""),),
        "note": "delete does not wait: a bucket always has a default encryption configuration.",
    },
    "aws:s3/bucketVersioning:BucketVersioning": {
        "terraform": "aws_s3_bucket_versioning",
        "file": "internal/service/s3/bucket_versioning.go",
        "functions": ("resourceBucketVersioningCreate", "resourceBucketVersioningRead",
                      "resourceBucketVersioningUpdate", "resourceBucketVersioningDelete"),
        "arn_of": "the bucket: arn:aws:s3:::NAME",
        "reads_after": ("create", "update"),
        "create": (("s3:PutBucketVersioning", "PutBucketVersioning", _B, "status is not Disabled"),),
        "read": (("s3:GetBucketVersioning", "GetBucketVersioning", _B, ""),),
        "update": (("s3:PutBucketVersioning", "PutBucketVersioning", _B, ""),),
        "delete": (("s3:PutBucketVersioning", "PutBucketVersioning", _B, "status is not Disabled (it suspends)"),),
    },
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": {
        "terraform": "aws_s3_bucket_lifecycle_configuration",
        "file": "internal/service/s3/bucket_lifecycle_configuration.go",
        "functions": ("resourceBucketLifecycleConfiguration.Create", "resourceBucketLifecycleConfiguration.Read",
                      "resourceBucketLifecycleConfiguration.Update", "resourceBucketLifecycleConfiguration.Delete"),
        "arn_of": "the bucket: arn:aws:s3:::NAME",
        "reads_after": (),
        "create": (("s3:PutLifecycleConfiguration", "PutBucketLifecycleConfiguration", _B, ""),
                   ("s3:GetLifecycleConfiguration", "GetBucketLifecycleConfiguration", _B, "")),
        "read": (("s3:GetLifecycleConfiguration", "GetBucketLifecycleConfiguration", _B, ""),),
        "update": (("s3:PutLifecycleConfiguration", "PutBucketLifecycleConfiguration", _B, ""),
                   ("s3:GetLifecycleConfiguration", "GetBucketLifecycleConfiguration", _B, "")),
        "delete": (("s3:PutLifecycleConfiguration", "DeleteBucketLifecycle", _B, ""),
                   ("s3:GetLifecycleConfiguration", "GetBucketLifecycleConfiguration", _B, "")),
        "note": "a Terraform Plugin Framework resource: create and update wait for the rules with their own "
                "GetBucketLifecycleConfiguration calls instead of calling Read.",
    },
    "aws:s3/bucketLogging:BucketLogging": {
        "terraform": "aws_s3_bucket_logging",
        "file": "internal/service/s3/bucket_logging.go",
        "functions": ("resourceBucketLoggingCreate", "resourceBucketLoggingRead", "resourceBucketLoggingUpdate",
                      "resourceBucketLoggingDelete"),
        "arn_of": "the source bucket (the one whose access is logged): arn:aws:s3:::NAME",
        "reads_after": ("create", "update"),
        "create": (("s3:PutBucketLogging", "PutBucketLogging", _B, ""),
                   ("s3:GetBucketLogging", "GetBucketLogging", _B, "")),
        "read": (("s3:GetBucketLogging", "GetBucketLogging", _B, ""),),
        "update": (("s3:PutBucketLogging", "PutBucketLogging", _B, ""),),
        "delete": (("s3:PutBucketLogging", "PutBucketLogging", _B, ""),),
        "note": "delete puts an empty BucketLoggingStatus; the target bucket is written by the logging service "
                "principal, not by the deployer.",
    },
    "aws:s3/bucketObjectLockConfiguration:BucketObjectLockConfiguration": {
        "terraform": "aws_s3_bucket_object_lock_configuration",
        "file": "internal/service/s3/bucket_object_lock_configuration.go",
        "functions": ("resourceBucketObjectLockConfigurationCreate", "resourceBucketObjectLockConfigurationRead",
                      "resourceBucketObjectLockConfigurationUpdate", "resourceBucketObjectLockConfigurationDelete"),
        "arn_of": "the bucket: arn:aws:s3:::NAME",
        "reads_after": ("create", "update"),
        "create": (("s3:PutBucketObjectLockConfiguration", "PutObjectLockConfiguration", _B, ""),
                   ("s3:GetBucketObjectLockConfiguration", "GetObjectLockConfiguration", _B, "")),
        "read": (("s3:GetBucketObjectLockConfiguration", "GetObjectLockConfiguration", _B, ""),),
        "update": (("s3:PutBucketObjectLockConfiguration", "PutObjectLockConfiguration", _B, ""),),
        "delete": (("s3:PutBucketObjectLockConfiguration", "PutObjectLockConfiguration", _B, ""),),
        "note": "delete puts a configuration without a rule (Object Lock itself cannot be turned off).",
    },
}
"""The S3 entries, keyed by Pulumi type token; `provider_actions.PROVIDER_ACTIONS` holds them as dataclasses."""
