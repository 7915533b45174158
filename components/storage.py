"""Two private, encrypted, TLS-only S3 buckets: whole-slide images in, overlays and results out.

Encryption is SSE-KMS (`aws:kms`), not SSE-S3 (AES256): this is clinical research data, and with KMS every decrypt
is a CloudTrail event naming the principal, and access can be revoked at the key (a customer-managed key can be
passed in; the default is the account's AWS-managed `aws/s3` key, which in-account roles use through S3 without a
key grant). The S3 Bucket Key is on, so a burst of GPU workers reading slides makes one KMS call per bucket key
rather than one per object (KMS request quotas are shared by the whole account). Both buckets are versioned: the
results bucket so a re-run or a bug cannot silently overwrite or delete a delivered result, the slides bucket
because the slides are the source data and an overwritten or deleted original cannot be reproduced.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from .spec import policy_documents
from .spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate

SSE_ALGORITHM = "aws:kms"
"""Default encryption of both buckets (see the module docstring for why not AES256)."""

ABORT_INCOMPLETE_MULTIPART_DAYS = 7
"""Slides are uploaded in parts; parts of an abandoned upload are billed but invisible, so they go after 7 days."""

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IP = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
_KMS_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")
_PREFIX = re.compile(r"^[A-Za-z0-9!_.'()-][A-Za-z0-9!_.'()/-]{0,510}/$")


@dataclass
class SlideStorageArgs:
    """Inputs of a SlideStorage."""

    slides_bucket_name: str | None = None
    """Physical name of the slides (input) bucket. Default None: Pulumi auto-names it from the resource name."""
    results_bucket_name: str | None = None
    """Physical name of the results (output) bucket. Default None: auto-named."""
    slides_prefix: str = "slides/"
    """Key prefix under which slides are uploaded (ends with '/'). Default `slides/`."""
    results_prefix: str = "results/"
    """Key prefix under which overlays, previews and summaries are written (ends with '/'). Default `results/`."""
    kms_key_arn: str | None = None
    """Customer-managed KMS key ARN for both buckets. Default None: the AWS-managed `aws/s3` key. With a key,
    readers need kms:Decrypt and writers kms:GenerateDataKey on it (`s3_prefix_statements(kms_key_arn=...)`)."""
    slides_versioning: bool = True
    """Keep every version of every slide (overwrites and deletes recoverable). Default True. The results bucket is
    always versioned."""
    noncurrent_version_expiration_days: int | None = None
    """Days after which an overwritten or deleted object version is removed (1..36500). Default None: versions
    are kept until someone decides otherwise (a retention decision for the study, not for infrastructure)."""
    tags: dict[str, str] | None = None
    """Extra tags on both buckets. Default none."""


def _is_bucket_name(v: Any) -> bool:
    return v is None or (isinstance(v, str) and bool(_BUCKET.match(v)) and ".." not in v and not _IP.match(v)
                         and not v.startswith(("xn--", "sthree-")) and not v.endswith(("-s3alias", "--ol-s3")))


def _is_prefix(v: Any) -> bool:
    return isinstance(v, str) and bool(_PREFIX.match(v)) and "//" not in v


RULES: tuple[Rule, ...] = (
    Rule("slides_bucket_name", _is_bucket_name,
         "None or an S3 bucket name: 3..63 lowercase letters, digits, '.' or '-', starting and ending alphanumeric"),
    Rule("results_bucket_name", _is_bucket_name,
         "None or an S3 bucket name: 3..63 lowercase letters, digits, '.' or '-', starting and ending alphanumeric"),
    Rule("slides_prefix", _is_prefix,
         "a key prefix ending in '/', not starting with '/', of letters, digits and !_.'()-/ (e.g. 'slides/')"),
    Rule("results_prefix", _is_prefix,
         "a key prefix ending in '/', not starting with '/', of letters, digits and !_.'()-/ (e.g. 'results/')"),
    Rule("kms_key_arn", lambda v: v is None or (isinstance(v, str) and bool(_KMS_ARN.match(v))),
         "None or a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)"),
    Rule("slides_versioning", lambda v: isinstance(v, bool), "true or false"),
    Rule("noncurrent_version_expiration_days", lambda v: v is None or is_int_between(1, 36500)(v),
         "None or an int of days in 1..36500"),
    Rule("tags", lambda v: v is None or (isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, str) for k, x in v.items())), "None or a dict of str to str"),
)


def validate_args(args: SlideStorageArgs) -> None:
    """Raise ConfigError (one line naming field and value) for the first bad field."""
    validate(vars(args), RULES)
    if (args.slides_bucket_name is not None and args.slides_bucket_name == args.results_bucket_name):
        raise ConfigError("results_bucket_name", args.results_bucket_name,
                          "a name different from slides_bucket_name (slides and results live in separate buckets)")


def encryption_rule(kms_key_arn: str | None) -> dict:
    """The default-encryption rule (inputs of BucketServerSideEncryptionConfiguration.rules[0])."""
    by_default: dict[str, Any] = {"sse_algorithm": SSE_ALGORITHM}
    if kms_key_arn:
        by_default["kms_master_key_id"] = kms_key_arn
    return {"apply_server_side_encryption_by_default": by_default, "bucket_key_enabled": True}


def lifecycle_rules(noncurrent_version_expiration_days: int | None) -> list[dict]:
    """Lifecycle rules (inputs of BucketLifecycleConfiguration.rules) for one bucket."""
    rules: list[dict] = [{
        "id": "abort-incomplete-multipart-uploads",
        "status": "Enabled",
        "filter": {},
        "abort_incomplete_multipart_upload": {"days_after_initiation": ABORT_INCOMPLETE_MULTIPART_DAYS},
    }]
    if noncurrent_version_expiration_days is not None:
        rules.append({
            "id": "expire-noncurrent-versions",
            "status": "Enabled",
            "filter": {},
            "noncurrent_version_expiration": {"noncurrent_days": noncurrent_version_expiration_days},
        })
    return rules


class _PrivateBucket:
    """One bucket and its controls (a helper of SlideStorage, not a component of its own)."""

    def __init__(self, name: str, bucket_name: str | None, *, versioned: bool, args: SlideStorageArgs,
                 parent: pulumi.Resource) -> None:
        child = pulumi.ResourceOptions(parent=parent)
        self.bucket = aws.s3.Bucket(name, bucket=bucket_name, force_destroy=False, tags=args.tags or {}, opts=child)
        self.public_access_block = aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access-block", bucket=self.bucket.id, block_public_acls=True, block_public_policy=True,
            ignore_public_acls=True, restrict_public_buckets=True, opts=child)
        self.ownership = aws.s3.BucketOwnershipControls(
            f"{name}-ownership", bucket=self.bucket.id, rule={"object_ownership": "BucketOwnerEnforced"},
            opts=child)
        self.encryption = aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption", bucket=self.bucket.id, rules=[encryption_rule(args.kms_key_arn)], opts=child)
        self.versioning = aws.s3.BucketVersioning(
            f"{name}-versioning", bucket=self.bucket.id,
            versioning_configuration={"status": "Enabled" if versioned else "Suspended"}, opts=child)
        # After the versioning resource: a noncurrent-version rule on an unversioned bucket would do nothing.
        self.lifecycle = aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle", bucket=self.bucket.id,
            rules=lifecycle_rules(args.noncurrent_version_expiration_days),
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[self.versioning]))
        # After the public access block: S3 rejects concurrent bucket-level changes (OperationAborted).
        self.policy = aws.s3.BucketPolicy(
            f"{name}-tls-only", bucket=self.bucket.id,
            policy=self.bucket.arn.apply(lambda arn: json.dumps(policy_documents.bucket_tls_only_policy(arn))),
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[self.public_access_block, self.ownership]))


@names_its_errors
class SlideStorage(pulumi.ComponentResource):
    """The slides bucket and the results bucket, each private, SSE-KMS with a bucket key, versioned, TLS-only."""

    slides_bucket_name: pulumi.Output[str]
    slides_bucket_arn: pulumi.Output[str]
    results_bucket_name: pulumi.Output[str]
    results_bucket_arn: pulumi.Output[str]
    slides_prefix: str
    results_prefix: str

    def __init__(self, name: str, args: SlideStorageArgs | None = None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        args = args or SlideStorageArgs()
        validate_args(args)
        super().__init__("gpuburst:index:SlideStorage", name, None, opts)
        self.slides = _PrivateBucket(f"{name}-slides", args.slides_bucket_name, versioned=args.slides_versioning,
                                     args=args, parent=self)
        self.results = _PrivateBucket(f"{name}-results", args.results_bucket_name, versioned=True, args=args,
                                      parent=self)
        self.slides_bucket_name = self.slides.bucket.bucket
        self.slides_bucket_arn = self.slides.bucket.arn
        self.results_bucket_name = self.results.bucket.bucket
        self.results_bucket_arn = self.results.bucket.arn
        self.slides_prefix = args.slides_prefix
        self.results_prefix = args.results_prefix
        self.register_outputs({
            "slidesBucketName": self.slides_bucket_name, "slidesBucketArn": self.slides_bucket_arn,
            "resultsBucketName": self.results_bucket_name, "resultsBucketArn": self.results_bucket_arn,
            "slidesPrefix": self.slides_prefix, "resultsPrefix": self.results_prefix,
        })
