"""The stack's customer-managed data key for slides, results, queues, secrets and control-plane logs, and its policy.

One symmetric KMS key per stack, rotated yearly by KMS, so that every read of clinical data at rest is a KMS call
CloudTrail records with the caller, and access can be cut at one place (disable the key). Its policy
(`data_key_policy`) has three statements: the account administers the key through IAM (the default key policy's
statement, KMS Developer Guide, "Default key policy"); the worker roles (by their IAM path) may decrypt and generate
data keys only through S3 and SQS in this region (`kms:ViaService`, `kms:CallerAccount`: the form AWS-managed keys'
policies use, KMS Developer Guide, "kms:ViaService"); CloudWatch Logs may use it only for the named log groups (the
encryption-context condition, CloudWatch Logs User Guide, "Encrypt log data in CloudWatch Logs using AWS KMS").
EKS secrets envelope encryption needs no statement: EKS creates a grant with the deploying principal's kms:CreateGrant
(EKS User Guide, "Encrypt Kubernetes secrets with KMS on existing clusters"), which the account statement delegates.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from .spec.bucket_access import outside_role_key_statements
from .spec.deploy_model import DeployModel
from .spec.policy_documents import policy_document
from .spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate

LOGS_KEY_ACTIONS = ("kms:Encrypt", "kms:Decrypt", "kms:ReEncryptFrom", "kms:ReEncryptTo", "kms:GenerateDataKey",
                    "kms:GenerateDataKeyWithoutPlaintext", "kms:GenerateDataKeyPair",
                    "kms:GenerateDataKeyPairWithoutPlaintext", "kms:DescribeKey")
"""What CloudWatch Logs may do with the key: the documented `kms:Encrypt*`, `kms:Decrypt*`, `kms:ReEncrypt*`,
`kms:GenerateDataKey*`, `kms:Describe*` written out action by action (no `*` action outside the account statement)."""

WORKER_KEY_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")
"""What the worker roles may do through S3 and SQS: read (Decrypt) and write (GenerateDataKey; S3 with a bucket key
and SQS producers need both)."""

_ACCOUNT = re.compile(r"^\d{12}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_PATH = re.compile(r"^/([\x21-\x7e]{1,510}/)$")
_ALIAS = re.compile(r"^alias/(?!aws/)[A-Za-z0-9/_-]{1,250}$")


def data_key_policy(*, account_id: str, partition: str, region: str, worker_role_path: str | None = None,
                    log_group_names: Sequence[str] = (), deploy_model: DeployModel | None = None) -> dict[str, Any]:
    """The data key's policy (see the module docstring): account administration, the worker roles under
    `worker_role_path` through S3 and SQS only, CloudWatch Logs for `log_group_names` only, and with a
    `deploy_model` its slide uploaders and result readers through S3 only (`spec.bucket_access`)."""
    if not isinstance(account_id, str) or not _ACCOUNT.match(account_id):
        raise ConfigError("account_id", account_id, "a 12-digit AWS account id as a string")
    if partition not in ("aws", "aws-us-gov", "aws-cn"):
        raise ConfigError("partition", partition, "one of aws, aws-us-gov, aws-cn")
    if not isinstance(region, str) or not _REGION.match(region):
        raise ConfigError("region", region, "an AWS region like 'us-east-1'")
    dns = "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"
    statements: list[dict] = [{
        "Sid": "AccountAdministersKeyThroughIam",
        "Effect": "Allow",
        "Principal": {"AWS": f"arn:{partition}:iam::{account_id}:root"},
        "Action": "kms:*",
        "Resource": "*",
    }]
    if worker_role_path is not None:
        if not isinstance(worker_role_path, str) or not _PATH.match(worker_role_path):
            raise ConfigError("worker_role_path", worker_role_path, "an IAM path other than '/', like '/gpuburst/'")
        statements.append({
            "Sid": "WorkerRolesUseKeyOnlyThroughS3AndSqs",
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": list(WORKER_KEY_ACTIONS),
            "Resource": "*",
            "Condition": {
                "StringEquals": {"kms:CallerAccount": account_id,
                                 "kms:ViaService": [f"s3.{region}.{dns}", f"sqs.{region}.{dns}"]},
                "ArnLike": {"aws:PrincipalArn": f"arn:{partition}:iam::{account_id}:role{worker_role_path}*"},
            },
        })
    if isinstance(log_group_names, str):
        raise ConfigError("log_group_names", log_group_names, "a list of log group names, not one string")
    if log_group_names:
        statements.append({
            "Sid": "CloudWatchLogsEncryptsNamedLogGroups",
            "Effect": "Allow",
            "Principal": {"Service": f"logs.{region}.{dns}"},
            "Action": list(LOGS_KEY_ACTIONS),
            "Resource": "*",
            "Condition": {"ArnLike": {"kms:EncryptionContext:aws:logs:arn": [
                f"arn:{partition}:logs:{region}:{account_id}:log-group:{n}" for n in log_group_names]}},
        })
    if deploy_model is not None:
        statements += outside_role_key_statements(deploy_model, account_id=account_id, partition=partition,
                                                  region=region)
    return policy_document(statements)


@dataclass
class DataKeyArgs:
    """Inputs of a DataKey."""

    alias: str | None = None
    """Alias of the key (`alias/NAME`, not under `alias/aws/`). Default None: no alias."""
    worker_role_path: str | None = None
    """IAM path of the roles allowed to use the key through S3 and SQS (`WorkloadIdentityArgs.role_path` of the
    workers, e.g. `/gpuburst-dev/workers/`). Default None: no such statement (IAM policies alone then grant use)."""
    log_group_names: list[str] = field(default_factory=list)
    """CloudWatch log groups the key encrypts (`spec.names.control_plane_log_group`). Default none."""
    region: str | None = None
    """The stack's region. Default None: the AWS provider's (an invoke, answered during preview)."""
    account_id: str | None = None
    """The stack's account id. Default None: the AWS provider's caller identity."""
    partition: str = "aws"
    """AWS partition (`aws`, `aws-us-gov`, `aws-cn`). Default `aws`."""
    deletion_window_days: int = 30
    """Days between scheduling the key's deletion and its deletion (7..30): the time to notice that everything the
    key encrypts is about to become unreadable. Default 30, the maximum."""
    description: str = "Data key of gpuburst: slides, results, queues, Kubernetes secrets, control-plane logs"
    """Description of the key."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags on the key. Default none."""
    deploy_model: DeployModel | None = None
    """The stack's deploy model: its slide uploaders may encrypt and its result readers decrypt through S3 (the
    deployers administer the key through IAM, the account statement). Default None: no such statements."""


RULES: tuple[Rule, ...] = (
    Rule("alias", lambda v: v is None or (isinstance(v, str) and bool(_ALIAS.match(v))),
         "None or 'alias/NAME' (letters, digits, '/', '_', '-'; not under alias/aws/)"),
    Rule("worker_role_path", lambda v: v is None or (isinstance(v, str) and bool(_PATH.match(v))),
         "None or an IAM path other than '/', like '/gpuburst/'"),
    Rule("log_group_names", lambda v: isinstance(v, list) and all(isinstance(n, str) and n for n in v),
         "a list of log group names"),
    Rule("region", lambda v: v is None or (isinstance(v, str) and bool(_REGION.match(v))),
         "None or an AWS region like 'us-east-1'"),
    Rule("account_id", lambda v: v is None or (isinstance(v, str) and bool(_ACCOUNT.match(v))),
         "None or a 12-digit AWS account id as a string"),
    Rule("partition", lambda v: v in ("aws", "aws-us-gov", "aws-cn"), "one of aws, aws-us-gov, aws-cn"),
    Rule("deletion_window_days", is_int_between(7, 30), "an int of days in 7..30"),
    Rule("deploy_model", lambda v: v is None or isinstance(v, DeployModel), "None or a spec.deploy_model.DeployModel"),
    Rule("tags", lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str)
                                                       for k, x in v.items()), "a dict of str to str"),
)


@names_its_errors
class DataKey(pulumi.ComponentResource):
    """A symmetric customer-managed KMS key with yearly rotation and `data_key_policy`, and its alias."""

    key: aws.kms.Key
    """The KMS key."""
    key_arn: pulumi.Output[str]
    """The key's ARN: `WorkQueueArgs.kms_key_id` and a workload's `queue_kms_key_arn`."""
    key_id: pulumi.Output[str]
    """The key's id."""

    def __init__(self, name: str, args: DataKeyArgs | None = None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        args = args or DataKeyArgs()
        validate(vars(args), RULES)
        super().__init__("gpuburst:index:DataKey", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        invoke = pulumi.InvokeOutputOptions(parent=self)
        region = args.region if args.region is not None else aws.get_region_output(opts=invoke).region
        account = (args.account_id if args.account_id is not None
                   else aws.get_caller_identity_output(opts=invoke).account_id)
        policy = pulumi.Output.all(account, region).apply(lambda a: json.dumps(data_key_policy(
            account_id=a[0], partition=args.partition, region=a[1], worker_role_path=args.worker_role_path,
            log_group_names=list(args.log_group_names), deploy_model=args.deploy_model)))
        self.key = aws.kms.Key(
            f"{name}-key", description=args.description, key_usage="ENCRYPT_DECRYPT",
            customer_master_key_spec="SYMMETRIC_DEFAULT", enable_key_rotation=True,
            deletion_window_in_days=args.deletion_window_days, policy=policy, tags=dict(args.tags) or None,
            opts=child)
        if args.alias is not None:
            aws.kms.Alias(f"{name}-alias", name=args.alias, target_key_id=self.key.key_id, opts=child)
        self.key_arn = self.key.arn
        self.key_id = self.key.key_id
        self.register_outputs({"keyArn": self.key_arn, "keyId": self.key_id})
