"""Two private, encrypted, TLS-only S3 buckets, whole-slide images in and results out, with their access logs.

Encryption is SSE-KMS (`aws:kms`), not SSE-S3 (AES256): this is clinical research data, and with KMS every decrypt
is a CloudTrail event naming the principal, and access can be revoked at the key (a customer-managed key can be
passed in, as the platform does with its `DataKey`; the default is the account's AWS-managed `aws/s3` key, which
in-account roles use through S3 without a key grant). The S3 Bucket Key is on, so a burst of GPU workers reading
slides makes one KMS call per bucket key rather than one per object (KMS request quotas are shared by the whole
account). Both buckets are versioned: the results bucket so a re-run or a bug cannot silently overwrite or delete a
delivered result, the slides bucket because the slides are the source data and an overwritten or deleted original
cannot be reproduced. Both are tagged `DATA_CLASS_TAG: clinical-slides`.

Every request to either bucket is logged (S3 server access logging) into a third private, TLS-only, versioned
bucket that only S3 log delivery may write to, for these two buckets of this account (the documented bucket policy);
it is SSE-S3, because server access logs cannot be delivered to a bucket whose default encryption is SSE-KMS (S3
User Guide, "Enabling Amazon S3 server access logging"). With `vpc_endpoint_ids`, both data buckets refuse every
request that does not come through those VPC endpoints (see `SlideStorageArgs.break_glass_role_arns`).
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from .spec import policy_documents
from .spec.bucket_access import BucketPart, data_bucket_statements
from .spec.deploy_model import DeployModel
from .spec.names import ACCESS_LOGS, CLINICAL_SLIDES, DATA_CLASS_TAG
from .spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate

SSE_ALGORITHM = "aws:kms"
"""Default encryption of both buckets (see the module docstring for why not AES256)."""

ACCESS_LOG_SSE_ALGORITHM = "AES256"
"""Encryption of the access-log bucket: SSE-S3, the only default encryption S3 delivers server access logs into."""

ACCESS_LOG_PREFIX = "s3-access-logs/"
"""Key prefix of the access logs in the log bucket; each data bucket logs under `<prefix><slides|results>/`."""

ABORT_INCOMPLETE_MULTIPART_DAYS = 7
"""Slides are uploaded in parts; parts of an abandoned upload are billed but invisible, so they go after 7 days."""

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IP = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
_KMS_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")
_VPCE = re.compile(r"^vpce-[0-9a-f]{8,17}$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/*-]{1,512}$")
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
    kms_key_arn: pulumi.Input[str] | None = None
    """Customer-managed KMS key ARN for both buckets (may be an Output, e.g. `DataKey.key_arn`). Default None: the
    AWS-managed `aws/s3` key. With a key, readers need kms:Decrypt and writers kms:GenerateDataKey on it
    (`s3_prefix_statements(kms_key_arn=...)`)."""
    slides_versioning: bool = True
    """Keep every version of every slide (overwrites and deletes recoverable). Default True. The results bucket is
    always versioned."""
    noncurrent_version_expiration_days: int | None = None
    """Days after which an overwritten or deleted object version is removed (1..36500). Default None: versions
    are kept until someone decides otherwise (a retention decision for the study, not for infrastructure)."""
    tags: dict[str, str] | None = None
    """Extra tags on every bucket. Default none. DATA_CLASS_TAG is reserved (SlideStorage sets it)."""
    vpc_endpoint_ids: Sequence[pulumi.Input[str]] | None = None
    """VPC endpoints (`vpce-...`, may be Outputs) the two data buckets may be reached through: every S3 request to
    them from anywhere else is denied (`aws:SourceVpce`), whoever makes it. Default None: no such restriction. This
    denies the deploying principal too: run `pulumi up` from inside the VPC, or list its role in
    `break_glass_role_arns`."""
    break_glass_role_arns: list[str] | None = None
    """Break-glass: IAM role ARNs (`arn:aws:iam::ACCOUNT:role/NAME`, `*` allowed in the name) exempt from the
    endpoint restriction (`ArnNotLike` on `aws:PrincipalArn`), e.g. the deployment role and an incident-response role
    whose use is itself alerted on. Sessions of these roles can reach the buckets from anywhere, so keep the list
    short, guard who may assume them, and watch CloudTrail for their use. Only with `vpc_endpoint_ids`. Default
    None: nobody is exempt (the account root can still delete the bucket policy)."""
    deploy_model: DeployModel | None = None
    """Who deploys and from where, who uploads slides and reads results from outside the VPC, who may break glass
    (`spec.deploy_model`): with `vpc_endpoint_ids`, the buckets' policies are built from it
    (`spec.bucket_access.data_bucket_statements`), so the deployers manage the buckets from where they deploy and
    never read an object, and the outside roles do exactly their part from their place. Excludes
    `break_glass_role_arns` (the model names them). Default None: nobody but break-glass roles is exempt."""
    access_logs: bool = True
    """Log every request to the two data buckets into the access-log bucket. Default True."""
    access_log_bucket_name: str | None = None
    """Physical name of the access-log bucket. Default None: auto-named."""


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
    Rule("kms_key_arn", lambda v: v is None or isinstance(v, pulumi.Output) or (
        isinstance(v, str) and bool(_KMS_ARN.match(v))), "None or a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)"),
    Rule("slides_versioning", lambda v: isinstance(v, bool), "true or false"),
    Rule("noncurrent_version_expiration_days", lambda v: v is None or is_int_between(1, 36500)(v),
         "None or an int of days in 1..36500"),
    Rule("tags", lambda v: v is None or (isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, str) for k, x in v.items()) and DATA_CLASS_TAG not in v),
         f"None or a dict of str to str without {DATA_CLASS_TAG!r} (SlideStorage sets it)"),
    Rule("vpc_endpoint_ids", lambda v: v is None or (
        isinstance(v, (list, tuple)) and len(v) > 0
        and all(isinstance(e, pulumi.Output) or (isinstance(e, str) and bool(_VPCE.match(e))) for e in v)),
         "None or a non-empty list of VPC endpoint ids (vpce-..., items may be Outputs)"),
    Rule("break_glass_role_arns", lambda v: v is None or (
        isinstance(v, (list, tuple)) and all(isinstance(a, str) and bool(_ROLE_ARN.match(a)) for a in v)),
         "None or a list of IAM role ARNs (arn:aws:iam::ACCOUNT:role/NAME, '*' allowed in the name)"),
    Rule("access_logs", lambda v: isinstance(v, bool), "true or false"),
    Rule("access_log_bucket_name", _is_bucket_name,
         "None or an S3 bucket name: 3..63 lowercase letters, digits, '.' or '-', starting and ending alphanumeric"),
)


def validate_args(args: SlideStorageArgs) -> None:
    """Raise ConfigError (one line naming field and value) for the first bad field."""
    validate(vars(args), RULES)
    if (args.slides_bucket_name is not None and args.slides_bucket_name == args.results_bucket_name):
        raise ConfigError("results_bucket_name", args.results_bucket_name,
                          "a name different from slides_bucket_name (slides and results live in separate buckets)")
    if args.access_log_bucket_name is not None and args.access_log_bucket_name in (
            args.slides_bucket_name, args.results_bucket_name):
        raise ConfigError("access_log_bucket_name", args.access_log_bucket_name,
                          "a name different from both data buckets (a bucket logging into itself loops)")
    if args.deploy_model is not None and args.break_glass_role_arns:
        raise ConfigError("break_glass_role_arns", args.break_glass_role_arns,
                          "None with a deploy_model (its break_glass_role_arns are the ones exempt)")
    if args.deploy_model is not None and not isinstance(args.deploy_model, DeployModel):
        raise ConfigError("deploy_model", args.deploy_model, "None or a spec.deploy_model.DeployModel")
    if args.break_glass_role_arns and args.vpc_endpoint_ids is None:
        raise ConfigError("break_glass_role_arns", args.break_glass_role_arns,
                          "None unless vpc_endpoint_ids is set (there is no endpoint restriction to be exempt from)")


def encryption_rule(kms_key_arn: pulumi.Input[str] | None) -> dict[str, Any]:
    """The default-encryption rule of a data bucket (inputs of BucketServerSideEncryptionConfiguration.rules[0])."""
    by_default: dict[str, Any] = {"sse_algorithm": SSE_ALGORITHM}
    if kms_key_arn is not None:
        by_default["kms_master_key_id"] = kms_key_arn
    return {"apply_server_side_encryption_by_default": by_default, "bucket_key_enabled": True}


def lifecycle_rules(noncurrent_version_expiration_days: int | None) -> list[dict[str, Any]]:
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
    """One bucket and its controls but its policy (a helper of SlideStorage, not a component of its own)."""

    bucket: aws.s3.Bucket
    public_access_block: aws.s3.BucketPublicAccessBlock
    ownership: aws.s3.BucketOwnershipControls
    encryption: aws.s3.BucketServerSideEncryptionConfiguration
    versioning: aws.s3.BucketVersioning
    lifecycle: aws.s3.BucketLifecycleConfiguration
    policy: aws.s3.BucketPolicy
    name: str

    def __init__(self, name: str, bucket_name: str | None, *, versioned: bool, tags: dict[str, str],
                 encryption: dict[str, Any], noncurrent_days: int | None, parent: pulumi.Resource) -> None:
        child = pulumi.ResourceOptions(parent=parent)
        self.name = name
        self.bucket = aws.s3.Bucket(name, bucket=bucket_name, force_destroy=False, tags=tags, opts=child)
        self.public_access_block = aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access-block", bucket=self.bucket.id, block_public_acls=True, block_public_policy=True,
            ignore_public_acls=True, restrict_public_buckets=True, opts=child)
        self.ownership = aws.s3.BucketOwnershipControls(
            f"{name}-ownership", bucket=self.bucket.id, rule={"object_ownership": "BucketOwnerEnforced"},
            opts=child)
        self.encryption = aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption", bucket=self.bucket.id, rules=[encryption], opts=child)
        self.versioning = aws.s3.BucketVersioning(
            f"{name}-versioning", bucket=self.bucket.id,
            versioning_configuration={"status": "Enabled" if versioned else "Suspended"}, opts=child)
        # After the versioning resource: a noncurrent-version rule on an unversioned bucket would do nothing.
        self.lifecycle = aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle", bucket=self.bucket.id, rules=lifecycle_rules(noncurrent_days),
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[self.versioning]))
        self.controls: list[pulumi.Resource] = [self.public_access_block, self.ownership, self.encryption,
                                                self.versioning, self.lifecycle]

    def set_policy(self, policy: pulumi.Input[dict[str, Any]], parent: pulumi.Resource,
                   after: list[pulumi.Resource] | None = None) -> None:
        # Last: S3 rejects concurrent bucket-level changes (OperationAborted), and a deny of requests from outside
        # the VPC endpoints must not lock the deployment out of the bucket's other settings half-way.
        self.policy = aws.s3.BucketPolicy(
            f"{self.name}-tls-only", bucket=self.bucket.id,
            policy=pulumi.Output.from_input(policy).apply(json.dumps),
            opts=pulumi.ResourceOptions(parent=parent, depends_on=[*self.controls, *(after or [])]))


def data_bucket_policy(bucket_arn: pulumi.Input[str], part: BucketPart,
                       args: SlideStorageArgs) -> pulumi.Input[dict[str, Any]]:
    """A clinical bucket's policy: TLS only; with `vpc_endpoint_ids`, the endpoint boundary, from the deploy model
    when there is one (`spec.bucket_access`), else with only `break_glass_role_arns` exempt."""
    if args.vpc_endpoint_ids is None or args.deploy_model is None:
        return policy_documents.data_bucket_policy(bucket_arn, vpc_endpoint_ids=args.vpc_endpoint_ids,
                                                   break_glass_role_arns=list(args.break_glass_role_arns or []))
    model = args.deploy_model

    def build(values: list[Any]) -> dict:
        arn, *endpoints = values
        doc = policy_documents.bucket_tls_only_policy(arn)
        doc["Statement"] += data_bucket_statements(arn, part, model, endpoints)
        return doc
    return pulumi.Output.all(bucket_arn, *args.vpc_endpoint_ids).apply(build)


@names_its_errors
class SlideStorage(pulumi.ComponentResource):
    """The slides bucket and the results bucket, each private, SSE-KMS with a bucket key, versioned, TLS-only,
    tagged as clinical, access-logged, and with `vpc_endpoint_ids` reachable only through those endpoints."""

    slides_bucket_name: pulumi.Output[str]
    slides_bucket_arn: pulumi.Output[str]
    results_bucket_name: pulumi.Output[str]
    results_bucket_arn: pulumi.Output[str]
    access_log_bucket_name: pulumi.Output[str] | None
    access_log_bucket_arn: pulumi.Output[str] | None
    slides_prefix: str
    results_prefix: str
    slides: _PrivateBucket
    results: _PrivateBucket

    def __init__(self, name: str, args: SlideStorageArgs | None = None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        args = args or SlideStorageArgs()
        validate_args(args)
        super().__init__("gpuburst:index:SlideStorage", name, None, opts)
        extra = dict(args.tags or {})
        data_tags = {**extra, DATA_CLASS_TAG: CLINICAL_SLIDES}
        self.slides = _PrivateBucket(
            f"{name}-slides", args.slides_bucket_name, versioned=args.slides_versioning, tags=data_tags,
            encryption=encryption_rule(args.kms_key_arn), noncurrent_days=args.noncurrent_version_expiration_days,
            parent=self)
        self.results = _PrivateBucket(
            f"{name}-results", args.results_bucket_name, versioned=True, tags=data_tags,
            encryption=encryption_rule(args.kms_key_arn), noncurrent_days=args.noncurrent_version_expiration_days,
            parent=self)
        data = {"slides": self.slides, "results": self.results}
        self.access_logs: _PrivateBucket | None = None
        logged: dict[str, list[pulumi.Resource]] = {kind: [] for kind in data}
        if args.access_logs:
            self.access_logs = self._access_log_bucket(name, args, extra, data)
            for kind, b in data.items():
                logged[kind].append(aws.s3.BucketLogging(
                    f"{b.name}-access-logging", bucket=b.bucket.id, target_bucket=self.access_logs.bucket.id,
                    target_prefix=f"{ACCESS_LOG_PREFIX}{kind}/",
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[self.access_logs.policy])))
        prefixes = {"slides": args.slides_prefix, "results": args.results_prefix}
        for kind, b in data.items():
            b.set_policy(data_bucket_policy(b.bucket.arn, BucketPart(kind, prefixes[kind]), args), self, logged[kind])

        self.slides_bucket_name = self.slides.bucket.bucket
        self.slides_bucket_arn = self.slides.bucket.arn
        self.results_bucket_name = self.results.bucket.bucket
        self.results_bucket_arn = self.results.bucket.arn
        self.access_log_bucket_name = self.access_logs.bucket.bucket if self.access_logs else None
        self.access_log_bucket_arn = self.access_logs.bucket.arn if self.access_logs else None
        self.slides_prefix = args.slides_prefix
        self.results_prefix = args.results_prefix
        self.register_outputs({
            "slidesBucketName": self.slides_bucket_name, "slidesBucketArn": self.slides_bucket_arn,
            "resultsBucketName": self.results_bucket_name, "resultsBucketArn": self.results_bucket_arn,
            "accessLogBucketName": self.access_log_bucket_name,
            "slidesPrefix": self.slides_prefix, "resultsPrefix": self.results_prefix,
        })

    def _access_log_bucket(self, name: str, args: SlideStorageArgs, extra: dict[str, str],
                           data: dict[str, _PrivateBucket]) -> _PrivateBucket:
        logs = _PrivateBucket(
            f"{name}-access-logs", args.access_log_bucket_name, versioned=True,
            tags={**extra, DATA_CLASS_TAG: ACCESS_LOGS},
            encryption={"apply_server_side_encryption_by_default": {"sse_algorithm": ACCESS_LOG_SSE_ALGORITHM}},
            noncurrent_days=None, parent=self)
        account = aws.get_caller_identity_output(opts=pulumi.InvokeOutputOptions(parent=self)).account_id
        logs.set_policy(policy_documents.access_log_bucket_policy(
            logs.bucket.arn, ACCESS_LOG_PREFIX, [b.bucket.arn for b in data.values()], account), self)
        return logs
