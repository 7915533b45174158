"""An IAM role for one Kubernetes service account through EKS Pod Identity, with an inline least-privilege policy."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from .spec.policy_documents import check_pod_identity_subject, pod_identity_trust_policy
from .spec.validation import ConfigError, names_its_errors

_ROLE_PATH = re.compile(r"^/([\x21-\x7e]{0,510}/)?$")


def cluster_arn(partition: str, region: str, account_id: str, cluster_name: str) -> str:
    """An EKS cluster's ARN, `arn:<partition>:eks:<region>:<account>:cluster/<name>` (EKS User Guide, "Cross-service
    confused deputy prevention": source ARN format)."""
    return f"arn:{partition}:eks:{region}:{account_id}:cluster/{cluster_name}"


@dataclass
class WorkloadIdentityArgs:
    """Inputs of a WorkloadIdentity."""

    cluster_name: pulumi.Input[str]
    """EKS cluster the association is made in."""
    namespace: str
    """Namespace of the service account."""
    service_account: str
    """Name of the Kubernetes service account whose pods get the role."""
    policy: pulumi.Input[dict[str, Any]] | None = None
    """Inline IAM policy document (a dict, may hold Outputs); None attaches no inline policy."""
    managed_policy_arns: list[pulumi.Input[str]] = field(default_factory=list)
    """AWS-managed or customer-managed policy ARNs to attach as well. Default: none."""
    extra_trust_statements: list[dict[str, Any]] = field(default_factory=list)
    """More trust-policy statements (e.g. to let the KEDA operator role assume this one). Default: none."""
    cluster_arn: pulumi.Input[str] | None = None
    """The cluster's ARN, which the trust policy is conditioned on (and its account, on `aws:SourceAccount`).
    Default None: `arn:<partition>:eks:<region>:<account>:cluster/<cluster_name>` with the partition, region and
    account of the AWS provider this component is created with (its caller identity)."""
    role_path: str = "/"
    """IAM path of the role (`/` or `/a/b/`): a key or bucket policy can name a group of roles by it
    (`arn:aws:iam::ACCOUNT:role/a/b/*`). Default `/`."""


@names_its_errors
class WorkloadIdentity(pulumi.ComponentResource):
    """IAM role + inline policy + `aws.eks.PodIdentityAssociation` for one service account, trusted only by EKS Pod
    Identity for that service account in that namespace of that cluster (`pod_identity_trust_policy`)."""

    role: aws.iam.Role
    role_arn: pulumi.Output[str]
    association: aws.eks.PodIdentityAssociation

    def __init__(self, name: str, args: WorkloadIdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        if not isinstance(args.role_path, str) or not _ROLE_PATH.match(args.role_path):
            raise ConfigError("WorkloadIdentityArgs.role_path", args.role_path,
                              "an IAM path: '/' or '/name/.../' of printable ASCII, at most 512 characters")
        check_pod_identity_subject(args.namespace, args.service_account)
        super().__init__("gpuburst:index:WorkloadIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        arn = args.cluster_arn if args.cluster_arn is not None else self._cluster_arn(args.cluster_name)

        def trust(arn: str, extra: list[dict]) -> str:
            account = arn.split(":")[4] if arn.count(":") >= 5 else ""
            doc = pod_identity_trust_policy(account_id=account, cluster_arn=arn, namespace=args.namespace,
                                            service_account=args.service_account)
            doc["Statement"].extend(extra)
            return json.dumps(doc)

        trust_json = pulumi.Output.all(arn, list(args.extra_trust_statements)).apply(lambda a: trust(a[0], a[1]))
        self.role = aws.iam.Role(
            f"{name}-role", assume_role_policy=trust_json, path=args.role_path,
            description=f"Pod Identity role of {args.namespace}/{args.service_account}",
            opts=child)
        if args.policy is not None:
            aws.iam.RolePolicy(
                f"{name}-policy", role=self.role.name,
                policy=pulumi.Output.from_input(args.policy).apply(json.dumps), opts=child)
        for i, managed in enumerate(args.managed_policy_arns):
            aws.iam.RolePolicyAttachment(f"{name}-managed-{i}", role=self.role.name, policy_arn=managed, opts=child)
        self.association = aws.eks.PodIdentityAssociation(
            f"{name}-association", cluster_name=args.cluster_name, namespace=args.namespace,
            service_account=args.service_account, role_arn=self.role.arn, opts=child)
        self.role_arn = self.role.arn
        self.register_outputs({"roleArn": self.role.arn})

    def _cluster_arn(self, cluster_name: pulumi.Input[str]) -> pulumi.Output[str]:
        """The cluster's ARN from the AWS provider's partition, region and caller identity (known during preview)."""
        invoke = pulumi.InvokeOutputOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        region = aws.get_region_output(opts=invoke).region
        account = aws.get_caller_identity_output(opts=invoke).account_id
        return pulumi.Output.all(partition, region, account, cluster_name).apply(lambda a: cluster_arn(*a))
