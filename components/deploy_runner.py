"""DeployRunner: the in-VPC deploy runner, a CodeBuild project in the system subnets running `pulumi up` as a deployer.

The first `up` of an empty account (`gpuburst:deploy.bootstrap: true`, from a laptop or CI at the deploy CIDRs) makes
the data key, the network and this runner; every later `up` runs inside it (`gpuburst deploy --stack NAME`, which
uploads the project's git-tracked files to the source bucket and starts a build), so the EKS API endpoint never has to
be public. It creates:

- a private source bucket for the bundles (`<prefix>-deploy-<account>-<region>`, spec.deploy_runner): public access
  blocked, BucketOwnerEnforced, SSE-KMS with the data key and a bucket key, versioned (a build names the exact
  object version it runs), TLS-only, bundles and old versions expiring after `bundle_expiration_days`;
- a security group for the builds' network interfaces: no ingress; egress HTTPS to anywhere and DNS to the VPC.
  0.0.0.0/0 on 443 is needed because a deploy reaches public endpoints through the system subnets' NAT: the Pulumi
  backend (Pulumi Cloud, or S3), get.pulumi.com and github.com (the CLI and its plugins), PyPI, the Helm chart
  repositories, Docker Hub (the worker image's base) and the AWS APIs the program calls. Nothing listens, so nothing
  comes in; the lead's EKS cluster security group admits this group on 443 (`security_group_id`);
- the CodeBuild project: source S3 at `<bucket>/<stack>/source.zip`, the inline buildspec of spec.deploy_runner (a
  bundle cannot change it), NO_ARTIFACTS, encryption key the data key, privileged (the program builds the worker image
  with docker-build, which needs the Docker daemon CodeBuild starts only in privileged mode),
  logs to a log group it creates (KMS, retention), environment GPUBURST_STACK, PULUMI_BACKEND_URL and
  GPUBURST_PULUMI_COMMAND=up (StartBuild overrides the command). One build at a time (concurrentBuildLimit 1: CodeBuild
  throttles, does not queue, a StartBuild while one runs, so two deploys of the stack never overlap).

Whoever may call codebuild:StartBuild on the project holds the deployer role's power (StartBuild takes a
buildspecOverride; `gpuburst deploy` never sends one): grant it, and s3:PutObject on the source bucket, to the
deployers only.

The runner's role is NOT made here: it is a deployer's (`gpuburst:deploy.runner.roleArn`, one of deployerRoleArns),
so a build can do what a deploy does and nothing in the stack can widen it. Its trust policy must admit CodeBuild;
the exact statement (spec.deploy_runner.runner_trust_statement, for account 123456789012, eu-west-1, stack prefix
gpuburst-prod):

    {"Sid": "CodeBuildRunsTheDeployRunner", "Effect": "Allow",
     "Principal": {"Service": "codebuild.amazonaws.com"}, "Action": "sts:AssumeRole",
     "Condition": {
       "StringEquals": {"aws:SourceAccount": "123456789012"},
       "ArnLike": {"aws:SourceArn": "arn:aws:codebuild:eu-west-1:123456789012:project/gpuburst-prod-deploy"}}}

Beyond deploying, the role needs what CodeBuild does with it: read the bundle (s3:GetObject, s3:GetObjectVersion on the
source bucket; kms:Decrypt on the data key), write the logs (logs:CreateLogStream, logs:PutLogEvents on the log group;
CloudWatch Logs' own use of the key is the key policy's statement), the VPC network interfaces
(ec2:CreateNetworkInterface, DescribeNetworkInterfaces, DeleteNetworkInterface, DescribeSubnets,
DescribeSecurityGroups, DescribeDhcpOptions, DescribeVpcs, and ec2:CreateNetworkInterfacePermission held to these
subnets with `ec2:AuthorizedService: codebuild.amazonaws.com`: CodeBuild User Guide, "Use CodeBuild with Amazon
Virtual Private Cloud"), and secretsmanager:GetSecretValue on the runner's secrets. Whoever creates the project needs
iam:PassRole on the role.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from .catalogue import DEPLOY_RUNNER_IMAGE, LOG_RETENTION_DAYS
from .network import private_cidr_problem
from .spec import policy_documents
from .spec.deploy_model import DeployRunner as RunnerModel
from .spec.deploy_runner import (
    BACKEND_VAR,
    COMMAND_VAR,
    DEFAULT_COMMAND,
    STACK_VAR,
    buildspec_yaml,
    check_stack_name,
    runner_log_group,
    runner_name,
    source_bucket_name,
    source_object_key,
)
from .spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate

COMPUTE_TYPES = ("BUILD_GENERAL1_SMALL", "BUILD_GENERAL1_MEDIUM", "BUILD_GENERAL1_LARGE")
"""Linux container compute types the runner may use (CodeBuild User Guide, "Build environment compute types": SMALL 3 GB
and 2 vCPUs, MEDIUM 7 GB and 4 vCPUs, LARGE 15 GB and 8 vCPUs; 64/128/128 GB of disk)."""

ABORT_INCOMPLETE_MULTIPART_DAYS = 1
"""A bundle is one small PUT; parts of an abandoned multipart upload go after a day."""


@dataclass
class DeployRunnerArgs:
    """Inputs of a DeployRunner."""

    name_prefix: str
    """The stack's name prefix, `gpuburst-<environment>` (StackConfig.name_prefix): the project is `<prefix>-deploy`.
    Required."""
    vpc_id: pulumi.Input[str]
    """The VPC of the builds' network interfaces. Required."""
    subnet_ids: Sequence[pulumi.Input[str]]
    """The system subnets (a NAT route out; the GPU subnets have none). Required, at least one."""
    vpc_cidr: str
    """The VPC's IPv4 CIDR, plain string: the only destination of the builds' DNS. Required."""
    runner: RunnerModel
    """The runner's role, backend and secrets (`gpuburst:deploy.runner`, spec.deploy_model.DeployRunner). Required."""
    stack: str
    """The Pulumi stack the builds deploy (GPUBURST_STACK, and the bundle's key `<stack>/source.zip`). Required."""
    kms_key_arn: pulumi.Input[str]
    """The data key (DataKey.key_arn): encrypts the source bucket, the build logs and CodeBuild's artifacts. Its
    policy must name `runner_log_group(name_prefix)` among its log groups. Required."""
    project_dir: str = "."
    """The Pulumi project's folder inside the bundle. Default `.` (the repository root)."""
    policy_pack: str | None = "policies"
    """The CrossGuard pack (relative to project_dir) up and preview run with; None for none. Default `policies`."""
    compute_type: str = "BUILD_GENERAL1_MEDIUM"
    """CodeBuild compute type. Default BUILD_GENERAL1_MEDIUM (7 GB, 4 vCPUs, 128 GB disk: room for the worker image's
    ~5.3 GB build)."""
    build_timeout_min: int = 120
    """Minutes a build may run before CodeBuild stops it (5..2160). Default 120: a cluster's first `up` takes ~20."""
    queued_timeout_min: int = 60
    """Minutes a build may wait for capacity in CodeBuild's queue (5..480). Default 60."""
    log_retention_days: int = 365
    """Days CloudWatch keeps the build logs (a CloudWatch retention period). Default 365: a deploy's log is an audit
    record."""
    bundle_expiration_days: int = 30
    """Days after which a bundle, and a replaced bundle's old version, is deleted (1..3650). Default 30."""
    source_bucket_name: str | None = None
    """The source bucket's name. Default None: `<prefix>-deploy-<account>-<region>` (the name `gpuburst deploy`
    derives; pass `--source-bucket` to it when you set this)."""
    account_id: str | None = None
    """The stack's account id. Default None: the AWS provider's caller identity."""
    region: str | None = None
    """The stack's region. Default None: the AWS provider's."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags on every resource. Default none."""


RULES: tuple[Rule, ...] = (
    Rule("subnet_ids", lambda v: isinstance(v, (list, tuple)) and len(v) > 0,
         "a non-empty list of subnet ids (the system subnets; items may be Outputs)"),
    Rule("runner", lambda v: isinstance(v, RunnerModel), "a spec.deploy_model.DeployRunner (gpuburst:deploy.runner)"),
    Rule("compute_type", lambda v: v in COMPUTE_TYPES, f"one of {', '.join(COMPUTE_TYPES)}"),
    Rule("build_timeout_min", is_int_between(5, 2160), "an int of minutes in 5..2160"),
    Rule("queued_timeout_min", is_int_between(5, 480), "an int of minutes in 5..480"),
    Rule("log_retention_days", lambda v: v in LOG_RETENTION_DAYS,
         f"one of CloudWatch Logs' retention periods in days: {', '.join(map(str, LOG_RETENTION_DAYS))}"),
    Rule("bundle_expiration_days", is_int_between(1, 3650), "an int of days in 1..3650"),
    Rule("tags", lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str)
                                                       for k, x in v.items()), "a dict of str to str"),
)


def validate_args(args: DeployRunnerArgs) -> None:
    """Raise ConfigError (one line naming the field and the value) for the first bad field."""
    runner_name(args.name_prefix)
    check_stack_name(args.stack)
    validate(vars(args), RULES)
    problem = private_cidr_problem(args.vpc_cidr)
    if problem:
        raise ConfigError("vpc_cidr", args.vpc_cidr, problem)
    if args.source_bucket_name is None and args.account_id is not None and args.region is not None:
        source_bucket_name(args.name_prefix, args.account_id, args.region)


def security_group_egress(vpc_cidr: str) -> list[dict[str, Any]]:
    """The builds' egress (see the module docstring for why HTTPS goes anywhere): HTTPS out, DNS to the VPC only."""
    in_vpc = {"cidr_blocks": [vpc_cidr]}
    return [
        {"description": "HTTPS out through the NAT: Pulumi backend, get.pulumi.com, PyPI, charts, registries, AWS",
         "protocol": "tcp", "from_port": 443, "to_port": 443, "cidr_blocks": ["0.0.0.0/0"]},
        {"description": "DNS to the VPC resolver", "protocol": "udp", "from_port": 53, "to_port": 53, **in_vpc},
        {"description": "DNS over TCP to the VPC resolver", "protocol": "tcp", "from_port": 53, "to_port": 53,
         **in_vpc},
    ]


def source_lifecycle_rules(expiration_days: int) -> list[dict[str, Any]]:
    """Lifecycle rules of the source bucket: bundles, and replaced versions, go after `expiration_days`."""
    return [{
        "id": "expire-bundles",
        "status": "Enabled",
        "filter": {},
        "expiration": {"days": expiration_days},
        "noncurrent_version_expiration": {"noncurrent_days": expiration_days},
        "abort_incomplete_multipart_upload": {"days_after_initiation": ABORT_INCOMPLETE_MULTIPART_DAYS},
    }]


def environment_variables(args: DeployRunnerArgs) -> list[dict[str, Any]]:
    """The project's plain environment variables (no secret among them: those come from Secrets Manager through the
    buildspec)."""
    return [{"name": STACK_VAR, "value": args.stack, "type": "PLAINTEXT"},
            {"name": BACKEND_VAR, "value": args.runner.backend_url, "type": "PLAINTEXT"},
            {"name": COMMAND_VAR, "value": DEFAULT_COMMAND, "type": "PLAINTEXT"}]


@names_its_errors
class DeployRunner(pulumi.ComponentResource):
    """The runner's source bucket, security group, log group and CodeBuild project (see the module docstring)."""

    project_name: pulumi.Output[str]
    source_bucket_name: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    log_group_name: pulumi.Output[str]
    security_group: aws.ec2.SecurityGroup
    log_group: aws.cloudwatch.LogGroup
    project: aws.codebuild.Project
    bucket: aws.s3.Bucket
    public_access_block: aws.s3.BucketPublicAccessBlock
    ownership: aws.s3.BucketOwnershipControls
    encryption: aws.s3.BucketServerSideEncryptionConfiguration
    versioning: aws.s3.BucketVersioning
    lifecycle: aws.s3.BucketLifecycleConfiguration
    bucket_policy: aws.s3.BucketPolicy

    def __init__(self, name: str, args: DeployRunnerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        validate_args(args)
        spec_text = buildspec_yaml(args.runner, project_dir=args.project_dir, policy_pack=args.policy_pack)
        super().__init__("gpuburst:index:DeployRunner", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        project = runner_name(args.name_prefix)
        tags = dict(args.tags)
        bucket_name: pulumi.Input[str]
        if args.source_bucket_name is not None:
            bucket_name = args.source_bucket_name
        else:
            invoke = pulumi.InvokeOutputOptions(parent=self)
            account = (args.account_id if args.account_id is not None
                       else aws.get_caller_identity_output(opts=invoke).account_id)
            region = args.region if args.region is not None else aws.get_region_output(opts=invoke).region
            bucket_name = pulumi.Output.all(account, region).apply(
                lambda a: source_bucket_name(args.name_prefix, a[0], a[1]))
        self._source_bucket(name, bucket_name, args, tags)

        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg", vpc_id=args.vpc_id, description="Deploy runner builds: HTTPS out, DNS to the VPC; no ingress",
            ingress=[], egress=security_group_egress(args.vpc_cidr), tags={**tags, "Name": project}, opts=child)
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-logs", name=runner_log_group(args.name_prefix), retention_in_days=args.log_retention_days,
            kms_key_id=args.kms_key_arn, tags=tags or None, opts=child)
        self.project = aws.codebuild.Project(
            f"{name}-project", name=project,
            description=f"Runs pulumi up/preview/refresh/destroy for stack {args.stack} inside the VPC",
            service_role=args.runner.role_arn, build_timeout=args.build_timeout_min,
            queued_timeout=args.queued_timeout_min, concurrent_build_limit=1, encryption_key=args.kms_key_arn,
            artifacts={"type": "NO_ARTIFACTS"},
            source={"type": "S3", "buildspec": spec_text,
                    "location": pulumi.Output.concat(self.bucket.bucket, "/", source_object_key(args.stack))},
            environment={"type": "LINUX_CONTAINER", "compute_type": args.compute_type, "image": DEPLOY_RUNNER_IMAGE,
                         "image_pull_credentials_type": "CODEBUILD", "privileged_mode": True,
                         "environment_variables": environment_variables(args)},
            logs_config={"cloudwatch_logs": {"status": "ENABLED", "group_name": self.log_group.name,
                                             "stream_name": args.stack},
                         "s3_logs": {"status": "DISABLED"}},
            vpc_config={"vpc_id": args.vpc_id, "subnets": list(args.subnet_ids),
                        "security_group_ids": [self.security_group.id]},
            tags=tags or None,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.bucket_policy, self.log_group]))

        self.project_name = self.project.name
        self.source_bucket_name = self.bucket.bucket
        self.security_group_id = self.security_group.id
        self.log_group_name = self.log_group.name
        self.register_outputs({"projectName": self.project_name, "sourceBucketName": self.source_bucket_name,
                               "securityGroupId": self.security_group_id, "logGroupName": self.log_group_name})

    def _source_bucket(self, name: str, bucket_name: pulumi.Input[str], args: DeployRunnerArgs,
                       tags: dict[str, str]) -> None:
        child = pulumi.ResourceOptions(parent=self)
        self.bucket = aws.s3.Bucket(f"{name}-source", bucket=bucket_name, force_destroy=False, tags=tags or None,
                                    opts=child)
        self.public_access_block = aws.s3.BucketPublicAccessBlock(
            f"{name}-source-public-access-block", bucket=self.bucket.id, block_public_acls=True,
            block_public_policy=True, ignore_public_acls=True, restrict_public_buckets=True, opts=child)
        self.ownership = aws.s3.BucketOwnershipControls(
            f"{name}-source-ownership", bucket=self.bucket.id, rule={"object_ownership": "BucketOwnerEnforced"},
            opts=child)
        self.encryption = aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-source-encryption", bucket=self.bucket.id,
            rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "aws:kms",
                                                                "kms_master_key_id": args.kms_key_arn},
                    "bucket_key_enabled": True}], opts=child)
        self.versioning = aws.s3.BucketVersioning(
            f"{name}-source-versioning", bucket=self.bucket.id, versioning_configuration={"status": "Enabled"},
            opts=child)
        self.lifecycle = aws.s3.BucketLifecycleConfiguration(
            f"{name}-source-lifecycle", bucket=self.bucket.id,
            rules=source_lifecycle_rules(args.bundle_expiration_days),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.versioning]))
        # Last: S3 refuses concurrent bucket-level changes (OperationAborted).
        self.bucket_policy = aws.s3.BucketPolicy(
            f"{name}-source-tls-only", bucket=self.bucket.id,
            policy=pulumi.Output.from_input(policy_documents.bucket_tls_only_policy(self.bucket.arn)).apply(
                json.dumps),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.public_access_block, self.ownership,
                                                                 self.encryption, self.versioning, self.lifecycle]))
