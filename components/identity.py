"""An IAM role for one Kubernetes service account through EKS Pod Identity, with an inline least-privilege policy."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from .spec.validation import names_its_errors


def pod_identity_trust_policy() -> dict:
    """The trust policy EKS Pod Identity needs: the pods.eks.amazonaws.com service assumes and tags the session."""
    return {
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
        }],
    }


@dataclass
class WorkloadIdentityArgs:
    """Inputs of a WorkloadIdentity."""

    cluster_name: pulumi.Input[str]
    """EKS cluster the association is made in."""
    namespace: str
    """Namespace of the service account."""
    service_account: str
    """Name of the Kubernetes service account whose pods get the role."""
    policy: pulumi.Input[dict] | None = None
    """Inline IAM policy document (a dict, may hold Outputs); None attaches no inline policy."""
    managed_policy_arns: list[pulumi.Input[str]] = field(default_factory=list)
    """AWS-managed or customer-managed policy ARNs to attach as well. Default: none."""
    extra_trust_statements: list[dict] = field(default_factory=list)
    """More trust-policy statements (e.g. to let the KEDA operator role assume this one). Default: none."""


@names_its_errors
class WorkloadIdentity(pulumi.ComponentResource):
    """IAM role + inline policy + `aws.eks.PodIdentityAssociation` for one service account."""

    role: aws.iam.Role
    role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: WorkloadIdentityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuburst:index:WorkloadIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        trust = pod_identity_trust_policy()
        trust["Statement"].extend(args.extra_trust_statements)
        self.role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=pulumi.Output.from_input(trust).apply(json.dumps),
            description=f"Pod Identity role of {args.namespace}/{args.service_account}",
            opts=child)
        if args.policy is not None:
            aws.iam.RolePolicy(
                f"{name}-policy", role=self.role.name,
                policy=pulumi.Output.from_input(args.policy).apply(json.dumps), opts=child)
        for i, arn in enumerate(args.managed_policy_arns):
            aws.iam.RolePolicyAttachment(f"{name}-managed-{i}", role=self.role.name, policy_arn=arn, opts=child)
        self.association = aws.eks.PodIdentityAssociation(
            f"{name}-association", cluster_name=args.cluster_name, namespace=args.namespace,
            service_account=args.service_account, role_arn=self.role.arn, opts=child)
        self.role_arn = self.role.arn
        self.register_outputs({"roleArn": self.role.arn})
