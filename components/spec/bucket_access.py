"""The clinical buckets' access statements, built from the deploy model: the VPC-endpoint boundary for everyone, the
deployers' bucket management from where they deploy, the uploaders' and readers' exact actions from their places.

What AWS decides (IAM User Guide, "Policy evaluation logic"; S3 User Guide, "Controlling access from VPC endpoints
with bucket policies"): an explicit Deny in the bucket policy wins over any Allow; every condition of a statement
must hold for it to apply; a negated operator (`StringNotEquals`, `NotIpAddress`, `ArnNotLike`) on a key the request
does not carry is true. A request through a VPC endpoint carries `aws:SourceVpce` and no `aws:SourceIp`; one over the
internet carries `aws:SourceIp` and no `aws:SourceVpce`. So "outside its place" is `StringNotEquals aws:SourceVpce`
AND `NotIpAddress aws:SourceIp`: true only when the request came neither through one of the endpoints nor from one of
the CIDRs. The statements (each Sid is quoted by `gpuburst rehearse` when it denies):

- `DenyOutsideVpce`: every S3 action on the bucket and its objects, for any request that does not come through the
  stack's endpoints, unless the principal is one the model names for this bucket (deployers when they deploy from
  CIDRs, this bucket's uploaders or readers, break-glass roles).
- `DenyDeployersObjectData`: deployers never touch a clinical object, from anywhere (they manage buckets; a deploy
  role stolen from CI reads no slide).
- `DenyDeployersOutsideDeployPlace`: deployers manage the bucket only from the deploy CIDRs or the endpoints.
- `Allow<Part><n>` / `Deny<Part><n>OtherActions` / `Deny<Part><n>OutsidePlace`: an uploader may put objects under the
  slides prefix, a reader get objects under the results prefix (and list it), each nothing else and only from its
  place; `DenyOtherBucketsRoles`: the other bucket's outside roles get nothing here.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .deploy_model import DeployModel, OutsideRole

UPLOADER_ACTIONS = ("s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts")
"""What a slide uploader does: put objects (multipart included: Create/UploadPart/Complete are s3:PutObject), abort
and list the parts of its own uploads."""
READER_OBJECT_ACTIONS = ("s3:GetObject",)
"""What a results reader does with objects (HeadObject is authorised by s3:GetObject)."""
READER_BUCKET_ACTIONS = ("s3:ListBucket",)
"""And with the bucket: list the results prefix (so a missing result answers 404, and a person can browse)."""


@dataclass(frozen=True)
class BucketPart:
    """Which clinical bucket a policy is for, and the roles from outside that belong to it."""

    kind: str
    """`slides` or `results`."""
    prefix: str
    """The key prefix the outside roles work under (`slides/`, `results/`)."""


def _roles(model: DeployModel, kind: str) -> tuple[OutsideRole, ...]:
    return model.slide_uploaders if kind == "slides" else model.result_readers


def _other_roles(model: DeployModel, kind: str) -> tuple[OutsideRole, ...]:
    return model.result_readers if kind == "slides" else model.slide_uploaders


def exempt_principals(model: DeployModel, kind: str) -> list[str]:
    """Principal ARNs (ArnLike patterns) the endpoint deny of bucket `kind` leaves to their own statements."""
    exempt: list[str] = []
    if model.deploy_cidrs:
        exempt += model.deployer_role_arns
    exempt += [r.role_arn for r in _roles(model, kind)]
    exempt += model.break_glass_role_arns
    return list(dict.fromkeys(exempt))


def _outside_place(endpoints: Sequence[str], cidrs: Sequence[str]) -> dict[str, Any]:
    condition: dict[str, Any] = {"StringNotEquals": {"aws:SourceVpce": list(endpoints)}}
    if cidrs:
        condition["NotIpAddress"] = {"aws:SourceIp": list(cidrs)}
    return condition


def data_bucket_statements(bucket_arn: str, part: BucketPart, model: DeployModel,
                           vpc_endpoint_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The deploy-model statements of one clinical bucket (added after its TLS-only statements). `bucket_arn` and
    `vpc_endpoint_ids` are plain strings here (the caller resolves Outputs first)."""
    if part.kind not in ("slides", "results"):
        raise ValueError(f"part.kind: {part.kind!r} is not valid: 'slides' or 'results'")
    objects = f"{bucket_arn}/*"
    both = [bucket_arn, objects]
    endpoints = list(vpc_endpoint_ids)
    deny_outside: dict[str, Any] = {"StringNotEquals": {"aws:SourceVpce": endpoints}}
    exempt = exempt_principals(model, part.kind)
    if exempt:
        deny_outside["ArnNotLike"] = {"aws:PrincipalArn": exempt}
    statements: list[dict] = [
        {"Sid": "DenyOutsideVpce", "Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": both,
         "Condition": deny_outside},
        {"Sid": "DenyDeployersObjectData", "Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": objects,
         "Condition": {"ArnLike": {"aws:PrincipalArn": list(model.deployer_role_arns)}}},
    ]
    if model.deploy_cidrs:
        statements.append({
            "Sid": "DenyDeployersOutsideDeployPlace", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
            "Resource": both, "Condition": {"ArnLike": {"aws:PrincipalArn": list(model.deployer_role_arns)},
                                            **_outside_place(endpoints, model.deploy_cidrs)}})
    others = [r.role_arn for r in _other_roles(model, part.kind)]
    if others:
        statements.append({"Sid": "DenyOtherBucketsRoles", "Effect": "Deny", "Principal": "*", "Action": "s3:*",
                           "Resource": both, "Condition": {"ArnLike": {"aws:PrincipalArn": others}}})
    label = "Uploader" if part.kind == "slides" else "Reader"
    under = f"{bucket_arn}/{part.prefix}*"
    for i, role in enumerate(_roles(model, part.kind)):
        who = {"ArnLike": {"aws:PrincipalArn": [role.role_arn]}}
        if part.kind == "slides":
            allows = [{"Sid": f"Allow{label}{i}", "Effect": "Allow", "Principal": {"AWS": role.role_arn},
                       "Action": list(UPLOADER_ACTIONS), "Resource": under}]
            own = list(UPLOADER_ACTIONS)
        else:
            allows = [{"Sid": f"Allow{label}{i}", "Effect": "Allow", "Principal": {"AWS": role.role_arn},
                       "Action": list(READER_OBJECT_ACTIONS), "Resource": under},
                      {"Sid": f"Allow{label}{i}List", "Effect": "Allow", "Principal": {"AWS": role.role_arn},
                       "Action": list(READER_BUCKET_ACTIONS), "Resource": bucket_arn,
                       "Condition": {"StringLike": {"s3:prefix": [f"{part.prefix}*"]}}}]
            own = [*READER_OBJECT_ACTIONS, *READER_BUCKET_ACTIONS]
        statements += allows
        statements.append({"Sid": f"Deny{label}{i}OtherActions", "Effect": "Deny", "Principal": "*",
                           "NotAction": own, "Resource": both, "Condition": who})
        statements.append({"Sid": f"Deny{label}{i}OutsidePlace", "Effect": "Deny", "Principal": "*",
                           "Action": "s3:*", "Resource": both, "Condition": {
                               **who, **_outside_place([*endpoints, *role.place.vpc_endpoint_ids],
                                                       role.place.cidrs)}})
    return statements


def outside_role_key_statements(model: DeployModel, *, account_id: str, partition: str,
                                region: str) -> list[dict[str, Any]]:
    """Data-key statements for the uploaders (GenerateDataKey, and Decrypt that multipart uploads need) and the
    readers (Decrypt), each only through S3 in this region (`kms:ViaService`), as the worker statement does."""
    dns = "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"
    out = []
    for sid, roles, actions in (
            ("SlideUploadersEncryptThroughS3", model.slide_uploaders, ["kms:GenerateDataKey", "kms:Decrypt"]),
            ("ResultReadersDecryptThroughS3", model.result_readers, ["kms:Decrypt"])):
        if roles:
            out.append({"Sid": sid, "Effect": "Allow", "Principal": {"AWS": "*"}, "Action": actions,
                        "Resource": "*", "Condition": {
                            "StringEquals": {"kms:CallerAccount": account_id,
                                             "kms:ViaService": f"s3.{region}.{dns}"},
                            "ArnLike": {"aws:PrincipalArn": [r.role_arn for r in roles]}}})
    return out
