"""Karpenter on EKS: controller identity (Pod Identity), node role, interruption queue and events, its two charts."""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from .catalogue import CHARTS, KUBERNETES_VERSION, combination_problems, karpenter_version_problem
from .identity import WorkloadIdentity, WorkloadIdentityArgs, cluster_arn
from .queue import TAG_ROLE
from .spec.names import POOL_LABEL
from .spec.validation import ConfigError, Rule, names_its_errors, validate

SERVICE_ACCOUNT = "karpenter"
"""Service account of the Karpenter controller (the Pod Identity association names it)."""

NODE_MANAGED_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryPullOnly",
                         "AmazonSSMManagedInstanceCore")
"""AWS-managed policies of a node role as in the upstream v1.14.1 getting-started (ECR PullOnly, not ReadOnly: a node
only pulls images; it never lists or describes repositories); the system node group's role has all of them."""

NODE_SSM_POLICY = "AmazonSSMManagedInstanceCore"
"""Lets Session Manager open a root shell on a node: off the GPU nodes (they hold slides) unless `node_ssm`."""


def gpu_node_managed_policies(ssm: bool = False) -> tuple[str, ...]:
    """The GPU node role's AWS-managed policies: NODE_MANAGED_POLICIES without NODE_SSM_POLICY unless `ssm`."""
    return tuple(p for p in NODE_MANAGED_POLICIES if ssm or p != NODE_SSM_POLICY)

INTERRUPTION_TARGET_ID = "KarpenterInterruptionQueueTarget"
"""EventBridge target id of the interruption queue on every rule (the upstream name)."""

DEFAULT_CONTROLLER_RESOURCES = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
"""Controller requests/limits (the upstream getting-started's): equal, so the controller is never throttled/OOM-evicted
first on the small system nodes."""


# ----------------------------------------------------------------------------------------------------------------------
# Pure functions: policy documents, event patterns, chart values.
# ----------------------------------------------------------------------------------------------------------------------

def interruption_event_patterns() -> dict[str, dict[str, Any]]:
    """EventBridge patterns of the five event kinds Karpenter's interruption controller acts on, keyed by a short name.

    Exactly the upstream v1.14.1 getting-started CloudFormation rules (tests/components/test_iam_parity.py); the
    capacity-reservation warning is the one EC2 sends before reclaiming an instance from an interruptible capacity
    reservation.
    """
    return {
        "spot-interruption": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
        "rebalance": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
        "instance-state-change": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]},
        "scheduled-change": {"source": ["aws.health"], "detail-type": ["AWS Health Event"]},
        "capacity-reservation-interruption": {
            "source": ["aws.ec2"], "detail-type": ["EC2 Capacity Reservation Instance Interruption Warning"]},
    }


def interruption_queue_policy(queue_arn: str, rule_arns: Sequence[str]) -> dict[str, Any]:
    """Queue policy of the interruption queue: EventBridge (only our rules) and SQS may send; nothing without TLS.

    Upstream allows events.amazonaws.com unconditionally; here the grant is scoped to the rules' ARNs so that no other
    account's EventBridge rule can forge a spot-interruption message (which would make Karpenter drain a GPU node that
    is running a slide).
    """
    return {
        "Version": "2012-10-17",
        "Id": "EC2InterruptionPolicy",
        "Statement": [
            {
                "Sid": "AllowEventBridgeRules",
                "Effect": "Allow",
                "Principal": {"Service": "events.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
                "Condition": {"ArnEquals": {"aws:SourceArn": list(rule_arns)}},
            },
            {
                "Sid": "AllowSQS",
                "Effect": "Allow",
                "Principal": {"Service": "sqs.amazonaws.com"},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
            },
            {
                "Sid": "DenyHTTP",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "sqs:*",
                "Resource": queue_arn,
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            },
        ],
    }


def node_trust_policy(dns_suffix: str = "amazonaws.com") -> dict[str, Any]:
    """Trust policy of the node role: EC2 instances assume it."""
    return {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": f"ec2.{dns_suffix}"}, "Action": "sts:AssumeRole"}]}


def controller_policy(cluster_name: str, region: str, account_id: str | None = None, *, node_role_arn: Any,
                      queue_arn: Any, partition: str = "aws") -> dict[str, Any]:
    """The Karpenter controller's IAM policy, scoped as upstream scopes it (getting-started CloudFormation, v1.14.1).

    Every upstream statement but the opt-in zonal-shift one (tests/components/test_iam_parity.py lists the
    differences and their reasons).

    Launches and tags only with the cluster's ownership tags, terminates and deletes only what carries them, passes only
    the node role to EC2 only, touches only instance profiles tagged for this cluster and region, reads only the AMI
    SSM parameters, and reads only its own interruption queue. `account_id` None writes `*` in its place (the other
    scopes still hold). `node_role_arn` / `queue_arn` may be Outputs.
    """
    p, r = partition, region
    acct = account_id or "*"
    owned = f"kubernetes.io/cluster/{cluster_name}"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AllowScopedEC2InstanceAccessActions",
                "Effect": "Allow",
                "Resource": [f"arn:{p}:ec2:{r}::image/*", f"arn:{p}:ec2:{r}::snapshot/*",
                             f"arn:{p}:ec2:{r}:*:security-group/*", f"arn:{p}:ec2:{r}:*:subnet/*",
                             f"arn:{p}:ec2:{r}:*:capacity-reservation/*",
                             # Launching into the placement group an EC2NodeClass selects (as upstream v1.14.1).
                             f"arn:{p}:ec2:{r}:*:placement-group/*"],
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
            },
            {
                "Sid": "AllowScopedEC2LaunchTemplateAccessActions",
                "Effect": "Allow",
                "Resource": f"arn:{p}:ec2:{r}:*:launch-template/*",
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                "Condition": {"StringEquals": {f"aws:ResourceTag/{owned}": "owned"},
                              "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
            },
            {
                "Sid": "AllowScopedEC2InstanceActionsWithTags",
                "Effect": "Allow",
                "Resource": _taggable_ec2(p, r),
                "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
                "Condition": {"StringEquals": {f"aws:RequestTag/{owned}": "owned",
                                               "aws:RequestTag/eks:eks-cluster-name": cluster_name},
                              "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}},
            },
            {
                "Sid": "AllowScopedResourceCreationTagging",
                "Effect": "Allow",
                "Resource": _taggable_ec2(p, r),
                "Action": "ec2:CreateTags",
                "Condition": {"StringEquals": {f"aws:RequestTag/{owned}": "owned",
                                               "aws:RequestTag/eks:eks-cluster-name": cluster_name,
                                               "ec2:CreateAction": ["RunInstances", "CreateFleet",
                                                                    "CreateLaunchTemplate"]},
                              "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}},
            },
            {
                "Sid": "AllowScopedResourceTagging",
                "Effect": "Allow",
                "Resource": f"arn:{p}:ec2:{r}:*:instance/*",
                "Action": "ec2:CreateTags",
                "Condition": {"StringEquals": {f"aws:ResourceTag/{owned}": "owned"},
                              "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                              "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                              "ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name",
                                                                            "karpenter.sh/nodeclaim", "Name"]}},
            },
            {
                "Sid": "AllowScopedDeletion",
                "Effect": "Allow",
                "Resource": [f"arn:{p}:ec2:{r}:*:instance/*", f"arn:{p}:ec2:{r}:*:launch-template/*"],
                "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
                "Condition": {"StringEquals": {f"aws:ResourceTag/{owned}": "owned"},
                              "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
            },
            {
                "Sid": "AllowRegionalReadActions",
                "Effect": "Allow",
                "Resource": "*",
                # DescribeInstanceStatus: the instance-health controller (required since Karpenter 1.13);
                # DescribePlacementGroups: resolving the EC2NodeClass's placement group selector.
                "Action": ["ec2:DescribeCapacityReservations", "ec2:DescribeImages", "ec2:DescribeInstances",
                           "ec2:DescribeInstanceStatus", "ec2:DescribeInstanceTypeOfferings",
                           "ec2:DescribeInstanceTypes", "ec2:DescribeLaunchTemplates", "ec2:DescribePlacementGroups",
                           "ec2:DescribeSecurityGroups", "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets"],
                "Condition": {"StringEquals": {"aws:RequestedRegion": r}},
            },
            {
                "Sid": "AllowSSMReadActions",
                "Effect": "Allow",
                "Resource": f"arn:{p}:ssm:{r}::parameter/aws/service/*",
                "Action": "ssm:GetParameter",
            },
            {"Sid": "AllowPricingReadActions", "Effect": "Allow", "Resource": "*", "Action": "pricing:GetProducts"},
            {
                "Sid": "AllowInterruptionQueueActions",
                "Effect": "Allow",
                "Resource": queue_arn,
                "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
            },
            {
                "Sid": "AllowPassingInstanceRole",
                "Effect": "Allow",
                "Resource": node_role_arn,
                "Action": "iam:PassRole",
                "Condition": {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}},
            },
            {
                "Sid": "AllowScopedInstanceProfileCreationActions",
                "Effect": "Allow",
                "Resource": f"arn:{p}:iam::{acct}:instance-profile/*",
                "Action": ["iam:CreateInstanceProfile"],
                "Condition": {"StringEquals": {f"aws:RequestTag/{owned}": "owned",
                                               "aws:RequestTag/eks:eks-cluster-name": cluster_name,
                                               "aws:RequestTag/topology.kubernetes.io/region": r},
                              "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}},
            },
            {
                "Sid": "AllowScopedInstanceProfileTagActions",
                "Effect": "Allow",
                "Resource": f"arn:{p}:iam::{acct}:instance-profile/*",
                "Action": ["iam:TagInstanceProfile"],
                "Condition": {"StringEquals": {f"aws:ResourceTag/{owned}": "owned",
                                               "aws:ResourceTag/topology.kubernetes.io/region": r,
                                               f"aws:RequestTag/{owned}": "owned",
                                               "aws:RequestTag/eks:eks-cluster-name": cluster_name,
                                               "aws:RequestTag/topology.kubernetes.io/region": r},
                              "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                                             "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}},
            },
            {
                "Sid": "AllowScopedInstanceProfileActions",
                "Effect": "Allow",
                "Resource": f"arn:{p}:iam::{acct}:instance-profile/*",
                "Action": ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile",
                           "iam:DeleteInstanceProfile"],
                "Condition": {"StringEquals": {f"aws:ResourceTag/{owned}": "owned",
                                               "aws:ResourceTag/topology.kubernetes.io/region": r},
                              "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"}},
            },
            {"Sid": "AllowUnscopedInstanceProfileListAction", "Effect": "Allow", "Resource": "*",
             "Action": "iam:ListInstanceProfiles"},
            {
                "Sid": "AllowInstanceProfileReadActions",
                "Effect": "Allow",
                "Resource": f"arn:{p}:iam::{acct}:instance-profile/*",
                "Action": "iam:GetInstanceProfile",
            },
            {
                "Sid": "AllowAPIServerEndpointDiscovery",
                "Effect": "Allow",
                "Resource": f"arn:{p}:eks:{r}:{acct}:cluster/{cluster_name}",
                "Action": "eks:DescribeCluster",
            },
        ],
    }


def _taggable_ec2(p: str, r: str) -> list[str]:
    return [f"arn:{p}:ec2:{r}:*:{kind}/*" for kind in
            ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")]


def karpenter_values(*, cluster_name: str, queue_name: Any, region: Any, service_account: str = SERVICE_ACCOUNT,
                     replicas: int = 2, controller_resources: Mapping[str, Any] | None = None,
                     system_node_selector: Mapping[str, str] | None = None, batch_idle_s: int = 1,
                     batch_max_s: int = 10) -> dict[str, Any]:
    """Helm values of the `karpenter` chart: settings, service account, and placement on the system node group.

    `batch_idle_s` / `batch_max_s` become `settings.batchIdleDuration` / `settings.batchMaxDuration` (the chart's
    BATCH_IDLE_DURATION / BATCH_MAX_DURATION env), written as Go durations; the defaults are Karpenter's 1s / 10s."""
    selector = dict(system_node_selector if system_node_selector is not None else {POOL_LABEL: "system"})
    return {
        "settings": {"clusterName": cluster_name, "interruptionQueue": queue_name,
                     "batchIdleDuration": f"{int(batch_idle_s)}s", "batchMaxDuration": f"{int(batch_max_s)}s"},
        "serviceAccount": {"create": True, "name": service_account},
        "replicas": replicas,
        # Karpenter must not depend on CoreDNS, which may itself be waiting for capacity Karpenter has to provide.
        "dnsPolicy": "Default",
        "controller": {
            "resources": dict(controller_resources or DEFAULT_CONTROLLER_RESOURCES),
            # The region explicitly: Pod Identity gives credentials, and nothing needs IMDS for the region.
            "env": [{"name": "AWS_REGION", "value": region}],
        },
        # On the managed system node group only, never on a node Karpenter manages (it would be able to remove the node
        # it runs on). The affinity replaces the chart's default, so its two rules are restated here.
        "nodeSelector": {"kubernetes.io/os": "linux", **selector},
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                "matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}] + [
                    {"key": k, "operator": "In", "values": [v]} for k, v in selector.items()]}]}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname"}]},
        },
    }


def version_problem(version: str, crd_version: str, kubernetes_version: str) -> ConfigError | None:
    """The version combination checked through catalogue.combination_problems, as a one-line ConfigError (or None)."""
    problems = combination_problems(kubernetes=kubernetes_version, karpenter=version, karpenter_crd=crd_version)
    if not problems:
        return None
    if karpenter_version_problem(version):
        return ConfigError("karpenter.version", version, problems[0])
    if karpenter_version_problem(crd_version) or crd_version != version:
        return ConfigError("karpenter.crd_version", crd_version, problems[0])
    return ConfigError("karpenter.kubernetes_version", kubernetes_version, problems[0])


# ----------------------------------------------------------------------------------------------------------------------
# Component
# ----------------------------------------------------------------------------------------------------------------------

@dataclass
class KarpenterArgs:
    """Inputs of the Karpenter component."""

    cluster_name: str
    """EKS cluster name as a plain string (Cluster.name)."""
    version: str = CHARTS["karpenter"].version
    """`karpenter` chart/controller version. Default: catalogue.CHARTS['karpenter'].version."""
    crd_version: str | None = None
    """`karpenter-crd` chart version; None (default) means the same as `version` (they must match)."""
    kubernetes_version: str = KUBERNETES_VERSION
    """The cluster's Kubernetes minor, checked against the Karpenter version. Default catalogue.KUBERNETES_VERSION."""
    namespace: str = CHARTS["karpenter"].namespace
    """Namespace of both charts and the controller. Default: the catalogue's (kube-system)."""
    service_account: str = SERVICE_ACCOUNT
    """Controller service account. Default `karpenter`."""
    replicas: int = 2
    """Controller replicas (one per system node, leader-elected). Default 2."""
    controller_resources: dict[str, Any] = field(
        default_factory=lambda: json.loads(json.dumps(DEFAULT_CONTROLLER_RESOURCES)))
    """Controller container resources. Default 1 CPU / 1Gi requests = limits."""
    system_node_selector: dict[str, str] = field(default_factory=lambda: {POOL_LABEL: "system"})
    """Labels of the system managed node group the controller runs on. Default `gpuburst.io/pool: system`."""
    node_role_name: str | None = None
    """Name of the node IAM role; None (default) gives `<cluster_name>-karpenter-node`."""
    queue_name: str | None = None
    """Name of the interruption SQS queue; None (default) gives `<cluster_name>-karpenter`."""
    wait_for: list[pulumi.Resource] = field(default_factory=list)
    """Resources the charts wait for (Cluster.ready: the system node group and the Pod Identity agent). Default none."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags on the AWS resources. Default none."""
    partition: str = "aws"
    """AWS partition of the ARNs (`aws`, `aws-us-gov`, `aws-cn`). Default `aws`."""
    region: str | None = None
    """AWS region of the stack. With account_id, makes the controller policy and chart values plain during preview;
    None (default) reads it from the interruption queue's ARN once the queue exists."""
    account_id: str | None = None
    """12-digit AWS account id (see `region`). Default None."""
    batch_idle_s: int = 1
    """Controller `settings.batchIdleDuration`, seconds (a batch of pending pods ends after this long without a new
    one). Default 1 (Karpenter's)."""
    batch_max_s: int = 10
    """Controller `settings.batchMaxDuration`, seconds (longest batch; >= batch_idle_s). Default 10 (Karpenter's)."""
    node_ssm: bool = False
    """Attach NODE_SSM_POLICY to the GPU node role (`gpuburst:gpuNodeSsm`). Default False (upstream attaches it)."""


KARPENTER_RULES = (
    Rule("karpenter.cluster_name", lambda v: isinstance(v, str) and 0 < len(v) <= 100,
         "the EKS cluster name as a plain string (1-100 characters)"),
    Rule("karpenter.node_role_name", lambda v: isinstance(v, str) and 0 < len(v) <= 64,
         "an IAM role name of at most 64 characters (set node_role_name for a long cluster name)"),
    Rule("karpenter.queue_name", lambda v: isinstance(v, str) and 0 < len(v) <= 80,
         "an SQS queue name of at most 80 characters (set queue_name for a long cluster name)"),
    Rule("karpenter.partition", lambda v: v in ("aws", "aws-us-gov", "aws-cn"), "one of aws, aws-us-gov, aws-cn"),
    Rule("karpenter.region",
         lambda v: v is None or (isinstance(v, str) and bool(re.match(r"^[a-z]{2}(-[a-z]+)+-\d$", v))),
         "None or an AWS region like 'us-east-1'"),
    Rule("karpenter.account_id", lambda v: v is None or (isinstance(v, str) and bool(re.match(r"^\d{12}$", v))),
         "None or a 12-digit AWS account id as a string"),
    Rule("karpenter.replicas", lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 5,
         "an int between 1 and 5"),
    Rule("karpenter.batch_idle_s", lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 600,
         "seconds, an int between 1 and 600"),
    Rule("karpenter.batch_max_s", lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 600,
         "seconds, an int between 1 and 600 (and >= batch_idle_s)"),
)


@names_its_errors
class Karpenter(pulumi.ComponentResource):
    """Karpenter with its AWS side (identity, node role + access entry, interruption queue/rules) and both charts."""

    def __init__(self, name: str, args: KarpenterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        crd_version = args.crd_version or args.version
        node_role_name = args.node_role_name or f"{args.cluster_name}-karpenter-node"
        queue_name = args.queue_name or f"{args.cluster_name}-karpenter"
        validate({"karpenter.cluster_name": args.cluster_name, "karpenter.node_role_name": node_role_name,
                  "karpenter.queue_name": queue_name, "karpenter.replicas": args.replicas,
                  "karpenter.partition": args.partition, "karpenter.region": args.region,
                  "karpenter.account_id": args.account_id, "karpenter.batch_idle_s": args.batch_idle_s,
                  "karpenter.batch_max_s": args.batch_max_s}, KARPENTER_RULES)
        if args.batch_max_s < args.batch_idle_s:
            raise ConfigError("karpenter.batch_max_s", args.batch_max_s,
                              f"seconds >= batch_idle_s = {args.batch_idle_s}")
        problem = version_problem(args.version, crd_version, args.kubernetes_version)
        if problem:
            raise problem
        super().__init__("gpuburst:index:Karpenter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        partition = args.partition

        # Interruption handling: EventBridge -> SQS -> Karpenter cordons and drains before EC2 takes the node.
        self.queue: aws.sqs.Queue = aws.sqs.Queue(
            f"{name}-interruptions", name=queue_name, message_retention_seconds=300, sqs_managed_sse_enabled=True,
            # Not a work queue: EC2 events Karpenter reads within minutes, so no DLQ (the policy pack reads the role).
            tags={**(tags or {}), TAG_ROLE: "events"}, opts=child)
        self.rules: dict[str, aws.cloudwatch.EventRule] = {}
        for key, pattern in interruption_event_patterns().items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{key}", description=f"Karpenter interruption: {pattern['detail-type'][0]}",
                event_pattern=json.dumps(pattern), tags=tags or None, opts=child)
            aws.cloudwatch.EventTarget(f"{name}-{key}-target", rule=rule.name, arn=self.queue.arn,
                                       target_id=INTERRUPTION_TARGET_ID, opts=child)
            self.rules[key] = rule
        self.queue_policy: aws.sqs.QueuePolicy = aws.sqs.QueuePolicy(
            f"{name}-interruptions-policy", queue_url=self.queue.url,
            policy=pulumi.Output.all(self.queue.arn, *[r.arn for r in self.rules.values()]).apply(
                lambda a: json.dumps(interruption_queue_policy(a[0], a[1:]))),
            opts=child)

        # The role of the GPU nodes; Karpenter makes the instance profile from it (EC2NodeClass.spec.role).
        self.node_role: aws.iam.Role = aws.iam.Role(
            f"{name}-node-role", name=node_role_name,
            assume_role_policy=json.dumps(node_trust_policy()),
            description=f"Nodes Karpenter launches in {args.cluster_name}", tags=tags or None, opts=child)
        for policy in gpu_node_managed_policies(args.node_ssm):
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}", role=self.node_role.name,
                policy_arn=f"arn:{partition}:iam::aws:policy/{policy}", opts=child)
        self.node_access_entry: aws.eks.AccessEntry = aws.eks.AccessEntry(
            f"{name}-node-access", cluster_name=args.cluster_name, principal_arn=self.node_role.arn, type="EC2_LINUX",
            tags=tags or None, opts=child)

        if args.region and args.account_id:
            # Known up front: the policy and the chart values are plain values that a policy pack can judge during
            # preview (the ARNs are deterministic: the role has the default path, the queue an explicit name).
            region: Any = args.region
            policy: Any = controller_policy(
                args.cluster_name, args.region, args.account_id, partition=partition,
                node_role_arn=f"arn:{partition}:iam::{args.account_id}:role/{node_role_name}",
                queue_arn=f"arn:{partition}:sqs:{args.region}:{args.account_id}:{queue_name}")
        else:
            # Otherwise read from the queue's ARN rather than from invokes: they are then those of the AWS provider the
            # resources were really created with, even when the platform passes an explicit one.
            arn_parts = self.queue.arn.apply(lambda arn: arn.split(":"))
            region = arn_parts.apply(lambda parts: parts[3])
            policy = pulumi.Output.all(arn_parts, self.node_role.arn, self.queue.arn).apply(
                lambda a: controller_policy(args.cluster_name, a[0][3], a[0][4], node_role_arn=a[1], queue_arn=a[2],
                                            partition=a[0][1]))
        # The trust names the cluster's ARN: plain when region and account are given, else from the provider.
        self.identity: WorkloadIdentity = WorkloadIdentity(f"{name}-controller", WorkloadIdentityArgs(
            cluster_name=args.cluster_name, namespace=args.namespace, service_account=args.service_account,
            policy=policy, cluster_arn=(cluster_arn(partition, args.region, args.account_id, args.cluster_name)
                                        if args.region and args.account_id else None)), opts=child)

        # Both charts are helm.v4.Chart: rendered client-side, each object its own Pulumi resource, no Helm release and
        # so no Helm ownership metadata (meta.helm.sh/release-name) on the CRDs. pulumi-kubernetes #3522 (karpenter-crd
        # and karpenter as helm.v3.Release fighting over the CRDs' ownership, skip_crds not honoured) needs two Helm
        # releases to claim the same CRD; here the CRDs come only from karpenter-crd, and v4 honours skip_crds=True on
        # the controller chart (its crds/ directory is not rendered), so exactly one resource owns each CRD.
        # Release names as upstream installs them (`karpenter`, `karpenter-crd`): the objects keep their usual names.
        crd_pin, pin = CHARTS["karpenter-crd"], CHARTS["karpenter"]
        self.crd_chart: k8s.helm.v4.Chart = k8s.helm.v4.Chart(
            f"{name}-crd", name=crd_pin.chart, chart=f"{crd_pin.repository}/{crd_pin.chart}", version=crd_version,
            namespace=args.namespace, opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.wait_for)))
        self.chart: k8s.helm.v4.Chart = k8s.helm.v4.Chart(
            f"{name}-controller", name=pin.chart, chart=f"{pin.repository}/{pin.chart}", version=args.version,
            namespace=args.namespace, skip_crds=True,
            values=karpenter_values(cluster_name=args.cluster_name, queue_name=queue_name, region=region,
                                    service_account=args.service_account, replicas=args.replicas,
                                    controller_resources=args.controller_resources,
                                    system_node_selector=args.system_node_selector,
                                    batch_idle_s=args.batch_idle_s, batch_max_s=args.batch_max_s),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[
                self.crd_chart, self.identity, self.node_access_entry, self.queue_policy, *args.wait_for]))

        self.node_role_name: str = node_role_name
        self.node_role_arn: pulumi.Output[str] = self.node_role.arn
        self.queue_name: str = queue_name
        self.queue_arn: pulumi.Output[str] = self.queue.arn
        self.queue_url: pulumi.Output[str] = self.queue.url
        self.controller_role_arn: pulumi.Output[str] = self.identity.role_arn
        self.register_outputs({"nodeRoleName": node_role_name, "nodeRoleArn": self.node_role.arn,
                               "queueName": queue_name, "queueArn": self.queue.arn,
                               "controllerRoleArn": self.identity.role_arn})
