"""The EKS cluster: pinned Kubernetes, access entries, Pod Identity agent, a small system node group, Karpenter tags."""
from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from .catalogue import DEFAULT_SUPPORT_TYPE, KUBERNETES_VERSION, LOG_RETENTION_DAYS, SUPPORT_TYPES, kubernetes_problems
from .karpenter import NODE_MANAGED_POLICIES, node_trust_policy
from .network import open_network_policy
from .nodeclass import DISCOVERY_TAG
from .spec.extras import missing_message
from .spec.names import POOL_LABEL, SYSTEM_POOL, control_plane_log_group
from .spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate

try:  # the `platform` extra (spec/extras.py): a workload stack never imports this module
    import pulumi_eks as eks
except ModuleNotFoundError as _missing:
    if _missing.name != "pulumi_eks":
        raise
    raise ModuleNotFoundError(missing_message("pulumi_eks", "gpuburst.Cluster (the platform's EKS cluster)"),
                              name=_missing.name) from None

_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]*$")
_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[0-9a-z]+$")


def _cidr(v: str) -> bool:
    ipaddress.ip_network(v, strict=True)  # ValueError -> the rule reports it
    return True


def _world(v: str) -> bool:
    return ipaddress.ip_network(v, strict=True).prefixlen == 0  # 0.0.0.0/0 or ::/0: the whole internet


def _subnets(v) -> bool:
    # A list (items may be Outputs), never a whole Output: each subnet gets its own discovery Tag resource, and the
    # number of resources has to be known without waiting for an Output.
    return v is None or (isinstance(v, (list, tuple)) and len(v) > 0)


VPC_CNI_CONFIGURATION = {"env": {"NETWORK_POLICY_ENFORCING_MODE": "strict"}}
"""The vpc-cni add-on's configuration values beside `enableNetworkPolicy`: the network policy agent in strict mode, so a
new pod starts with a default deny until its policies are programmed (standard mode, the default, lets it talk to
anything in that window). Sources: EKS User Guide, "Restrict Pod network traffic with Kubernetes network policies"
(set NETWORK_POLICY_ENFORCING_MODE to strict in the aws-node container); aws/amazon-vpc-cni-k8s README
(`NETWORK_POLICY_ENFORCING_MODE`, v1.17.1+, `standard`|`strict`) and charts/aws-vpc-cni/values.yaml, whose `env` map
(`env.NETWORK_POLICY_ENFORCING_MODE`) is the add-on configuration schema's. pulumi-eks merges this `env` over the
one it computes (nodejs/eks/addons/cni-addon.ts, mergeConfigurationValues). In strict mode a pod no policy selects
stays denied: the system namespaces get `network.open_network_policy`."""

SYSTEM_NAMESPACE = "kube-system"
"""Where CoreDNS (the coredns add-on) and Karpenter run."""

CLUSTER_RULES = (
    Rule("cluster.name", lambda v: isinstance(v, str) and len(v) <= 100 and bool(_CLUSTER_NAME.match(v)),
         "an EKS cluster name: letters, digits, '-', '_', starting with a letter or digit, at most 100 characters"),
    Rule("cluster.public_access_cidrs", lambda v: v is None or (isinstance(v, (list, tuple)) and len(v) > 0
                                                                 and all(_cidr(c) and not _world(c) for c in v)),
         "None (no public endpoint) or a non-empty list of CIDRs like '203.0.113.0/24', never 0.0.0.0/0 or ::/0"),
    Rule("cluster.endpoint_private_access", lambda v: v is True,
         "True: nodes reach the API server inside the VPC"),
    Rule("cluster.system_instance_types", lambda v: isinstance(v, (list, tuple)) and len(v) > 0
         and all(isinstance(t, str) and _INSTANCE_TYPE.match(t) for t in v),
         "a non-empty list of instance types as plain strings, e.g. ['m6i.large']"),
    Rule("cluster.system_desired_size", is_int_between(2, 50),
         "an int between 2 and 50 (two Karpenter replicas need two nodes: they refuse to share one)"),
    Rule("cluster.system_max_size", is_int_between(2, 100), "an int between 2 and 100, at least system_desired_size"),
    Rule("cluster.system_root_volume_gib", is_int_between(20, 16384), "an int of GiB between 20 and 16384"),
    Rule("cluster.support_type", lambda v: v in SUPPORT_TYPES,
         f"one of {', '.join(SUPPORT_TYPES)} (upgradePolicy.supportType; set explicitly, never EKS's silent default)"),
    Rule("cluster.partition", lambda v: v in ("aws", "aws-us-gov", "aws-cn"), "one of aws, aws-us-gov, aws-cn"),
    Rule("cluster.private_subnet_ids", _subnets, "None or a non-empty list of subnet ids (items may be Outputs)"),
    Rule("cluster.public_subnet_ids", _subnets, "None or a non-empty list of subnet ids (items may be Outputs)"),
    Rule("cluster.log_retention_days", lambda v: v in LOG_RETENTION_DAYS,
         f"one of CloudWatch Logs' retention periods in days: {', '.join(map(str, LOG_RETENTION_DAYS))}"),
)


@dataclass
class ClusterArgs:
    """Inputs of the Cluster component."""

    name: str
    """Physical EKS cluster name, plain string (others use it before the cluster exists). Required."""
    kubernetes_version: str = KUBERNETES_VERSION
    """Kubernetes minor of the control plane. Default catalogue.KUBERNETES_VERSION."""
    support_type: str = DEFAULT_SUPPORT_TYPE
    """`upgradePolicy.supportType`: STANDARD (auto-upgraded at the end of standard support, no extended charge) or
    EXTENDED (kept, at 6x the control-plane price, until the end of extended support). Always set explicitly: EKS's
    default when unset is EXTENDED. Default catalogue.DEFAULT_SUPPORT_TYPE (STANDARD)."""
    vpc_id: pulumi.Input[str] | None = None
    """VPC of the cluster; None (default) with no subnets uses the account's default VPC."""
    public_subnet_ids: Sequence[pulumi.Input[str]] | None = None
    """Public subnets (load balancers). Default None."""
    private_subnet_ids: Sequence[pulumi.Input[str]] | None = None
    """Private subnets: the nodes (system and GPU) go here when given. Default None."""
    tag_node_subnets: bool = True
    """Tag the nodes' subnets with `karpenter.sh/discovery` (an aws.ec2.Tag each). False when the subnets are this
    stack's own resources that carry their tags themselves (a WorkloadNetwork's: two owners of a subnet's tags fight
    on every update). Default True."""
    endpoint_public_access: bool = False
    """Expose the API server endpoint publicly, to `public_access_cidrs` only. Default False (the private endpoint
    only: run `pulumi up` from inside the VPC, or list your egress CIDRs)."""
    public_access_cidrs: list[str] | None = None
    """CIDRs allowed to reach the public endpoint, never 0.0.0.0/0 or ::/0; required when endpoint_public_access
    (AWS's own default would be 0.0.0.0/0). Default None."""
    endpoint_private_access: bool = True
    """Private API endpoint inside the VPC (nodes use it). Always True."""
    api_client_security_group_ids: Sequence[pulumi.Input[str]] = ()
    """Security groups (ids, may be Outputs) of in-VPC clients of the API's private endpoint, e.g. the deploy
    runner's: each gets HTTPS in on the cluster security group, and the cluster's Kubernetes provider waits for the
    rules (a `pulumi up` from the runner reaches the API before it installs anything). Default none."""
    system_instance_types: list[str] = field(default_factory=lambda: ["m6i.large"])
    """Instance types of the system node group. Default m6i.large."""
    system_desired_size: int = 2
    """Nodes in the system group (and its minimum). Default 2."""
    system_max_size: int = 3
    """Most nodes in the system group. Default 3."""
    system_root_volume_gib: int = 50
    """Encrypted gp3 root volume of each system node, GiB. Default 50."""
    secrets_kms_key_arn: pulumi.Input[str] | None = None
    """Customer-managed KMS key for envelope encryption of Kubernetes secrets; None (default) keeps EKS's default."""
    log_retention_days: int = 90
    """Days CloudWatch keeps the control-plane logs (the log group `/aws/eks/<name>/cluster`, declared before the
    cluster so EKS writes into it instead of creating one that never expires). Default 90."""
    log_kms_key_arn: pulumi.Input[str] | None = None
    """Customer-managed KMS key of the control-plane log group (its policy must let CloudWatch Logs use it for that
    log group, as `DataKey` does). Default None: CloudWatch Logs' own encryption."""
    enabled_cluster_log_types: list[str] = field(default_factory=lambda: ["api", "audit", "authenticator"])
    """Control-plane logs sent to CloudWatch (who did what, for clinical data). Default api, audit, authenticator."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags on the AWS resources. Default none."""
    partition: str = "aws"
    """AWS partition of the managed-policy ARNs (`aws`, `aws-us-gov`). Default `aws`."""


@names_its_errors
class Cluster(pulumi.ComponentResource):
    """`pulumi_eks.Cluster` plus the system node group, the Pod Identity agent addon and Karpenter discovery tags."""

    name: str
    kubeconfig_json: pulumi.Output[str]
    oidc_provider_arn: pulumi.Output[str]
    oidc_issuer: pulumi.Output[str]
    node_security_group_id: pulumi.Output[str]
    k8s_provider: k8s.Provider
    log_group: aws.cloudwatch.LogGroup
    cluster: eks.Cluster
    system_launch_template: aws.ec2.LaunchTemplate
    system_nodes: aws.eks.NodeGroup
    api_client_ingress: list[aws.vpc.SecurityGroupIngressRule]
    system_network_policy: k8s.networking.v1.NetworkPolicy
    pod_identity_addon: aws.eks.Addon
    coredns_addon: aws.eks.Addon
    cluster_security_group_id: pulumi.Output[str]
    discovery_tags: list[aws.ec2.Tag]

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        validate({"cluster.name": args.name, "cluster.public_access_cidrs": args.public_access_cidrs,
                  "cluster.endpoint_private_access": args.endpoint_private_access,
                  "cluster.system_instance_types": args.system_instance_types,
                  "cluster.system_desired_size": args.system_desired_size,
                  "cluster.system_max_size": args.system_max_size,
                  "cluster.system_root_volume_gib": args.system_root_volume_gib,
                  "cluster.private_subnet_ids": args.private_subnet_ids,
                  "cluster.public_subnet_ids": args.public_subnet_ids, "cluster.partition": args.partition,
                  "cluster.support_type": args.support_type, "cluster.log_retention_days": args.log_retention_days},
                 CLUSTER_RULES)
        if args.system_max_size < args.system_desired_size:
            raise ConfigError("cluster.system_max_size", args.system_max_size,
                              f"at least system_desired_size ({args.system_desired_size})")
        if args.public_access_cidrs is not None and not args.endpoint_public_access:
            raise ConfigError("cluster.public_access_cidrs", args.public_access_cidrs,
                              "None when endpoint_public_access is False (there is no public endpoint to restrict)")
        if args.public_access_cidrs is None and args.endpoint_public_access:
            raise ConfigError("cluster.public_access_cidrs", None,
                              "a non-empty list of CIDRs when endpoint_public_access is True (left unset, AWS opens "
                              "the endpoint to 0.0.0.0/0)")
        problems = kubernetes_problems(args.kubernetes_version)
        if problems:
            raise ConfigError("cluster.kubernetes_version", args.kubernetes_version, problems[0])
        if args.vpc_id is not None and args.private_subnet_ids is None and args.public_subnet_ids is None:
            raise ConfigError("cluster.private_subnet_ids", None, "a list of subnet ids whenever vpc_id is given, so "
                                                                   "the nodes' subnets can be tagged for Karpenter")

        super().__init__("gpuburst:index:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        self.name = args.name
        node_subnets = args.private_subnet_ids or args.public_subnet_ids

        # The control-plane log group exists before the cluster, so EKS writes into it with this retention and key.
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs", name=control_plane_log_group(args.name),
            retention_in_days=args.log_retention_days, kms_key_id=args.log_kms_key_arn, tags=tags or None,
            opts=child)
        self.cluster = eks.Cluster(
            f"{name}-eks", name=args.name, version=args.kubernetes_version,
            upgrade_policy={"support_type": args.support_type},
            # Access entries only (no aws-auth ConfigMap): node roles and people are granted through the EKS API.
            authentication_mode=eks.AuthenticationMode.API,
            create_oidc_provider=True,
            # No self-managed default node group; the system group below is an EKS managed node group.
            skip_default_node_group=True,
            # The system nodes use the security group EKS makes for the cluster (its members may all talk to each other
            # and to the control plane); GPU nodes get their own (network.GpuNodeSecurity), which it admits.
            skip_default_security_groups=True,
            # VPC CNI's network policy agent on, so NetworkPolicies are enforced (it is off by default). pulumi-eks
            # creates the `vpc-cni` aws.eks.Addon itself and writes this as its configurationValues
            # `enableNetworkPolicy: "true"` (pulumi/pulumi-eks nodejs/eks/addons/cni-addon.ts, mergeConfigurationValues;
            # nodejs/eks/cluster/cluster.ts passes vpcCniOptions to VpcCniAddon unless useDefaultVpcCni). Offline the
            # Addon is a remote child and never appears, so the plan shows the option on eks:index:Cluster.
            # NETWORK_POLICY_ENFORCING_MODE strict (VPC_CNI_CONFIGURATION) closes the window in which a new pod talks
            # before its policies are programmed.
            vpc_cni_options={"enable_network_policy": True, "configuration_values": VPC_CNI_CONFIGURATION},
            vpc_id=args.vpc_id, public_subnet_ids=args.public_subnet_ids, private_subnet_ids=args.private_subnet_ids,
            endpoint_public_access=args.endpoint_public_access, public_access_cidrs=args.public_access_cidrs,
            endpoint_private_access=args.endpoint_private_access,
            enabled_cluster_log_types=list(args.enabled_cluster_log_types),
            encryption_config_key_arn=args.secrets_kms_key_arn,
            tags=tags or None, opts=pulumi.ResourceOptions(parent=self, depends_on=[self.log_group]))

        system_role = aws.iam.Role(
            f"{name}-system-node-role", assume_role_policy=json.dumps(node_trust_policy()),
            description=f"System managed node group of {args.name}", tags=tags or None, opts=child)
        system_attachments = [
            aws.iam.RolePolicyAttachment(f"{name}-system-node-{p}", role=system_role.name,
                                         policy_arn=f"arn:{args.partition}:iam::aws:policy/{p}", opts=child)
            for p in NODE_MANAGED_POLICIES]
        # IMDSv2 only with a hop limit of 1 (pods on the system nodes get credentials from Pod Identity, never the node
        # role from IMDS), and an encrypted root volume.
        self.system_launch_template = aws.ec2.LaunchTemplate(
            f"{name}-system-lt", description=f"System nodes of {args.name}",
            metadata_options={"http_endpoint": "enabled", "http_tokens": "required",
                              "http_put_response_hop_limit": 1},
            block_device_mappings=[{"device_name": "/dev/xvda", "ebs": {
                "volume_size": args.system_root_volume_gib, "volume_type": "gp3", "encrypted": "true",
                "delete_on_termination": "true"}}],
            tags=tags or None, opts=child)
        # A plain aws.eks.NodeGroup (an EKS managed node group; EKS creates its role's access entry itself) rather
        # than pulumi_eks.ManagedNodeGroup: that one takes the eks.Cluster as a resource reference, which the offline
        # mocks cannot deserialize, and it adds nothing needed here.
        system_subnets = self._node_subnets(node_subnets)
        self.system_nodes = aws.eks.NodeGroup(
            f"{name}-system", cluster_name=args.name, node_role_arn=system_role.arn, subnet_ids=system_subnets,
            instance_types=list(args.system_instance_types), capacity_type="ON_DEMAND",
            ami_type="AL2023_x86_64_STANDARD",
            scaling_config={"desired_size": args.system_desired_size, "min_size": args.system_desired_size,
                            "max_size": args.system_max_size},
            update_config={"max_unavailable": 1},
            labels={POOL_LABEL: SYSTEM_POOL},
            launch_template={"id": self.system_launch_template.id,
                             "version": self.system_launch_template.latest_version.apply(str)},
            tags=tags or None,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster, *system_attachments]))

        self.kubeconfig_json = pulumi.Output.secret(self.cluster.kubeconfig_json)
        self.api_client_ingress = [aws.vpc.SecurityGroupIngressRule(
            f"{name}-api-client-{i}", security_group_id=self.cluster.cluster_security_group_id,
            referenced_security_group_id=group, ip_protocol="tcp", from_port=443, to_port=443,
            description="the API server's private endpoint, from an in-VPC client (the deploy runner)", opts=child)
            for i, group in enumerate(args.api_client_security_group_ids)]
        self.k8s_provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=self.kubeconfig_json, enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(self.api_client_ingress)))
        # The VPC CNI is strict: CoreDNS and Karpenter (kube-system) would stay denied without a policy selecting them,
        # and CoreDNS cannot become ready (the add-on would never go ACTIVE) until this exists.
        open_policy = open_network_policy(SYSTEM_NAMESPACE)
        self.system_network_policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-kube-system-allow-all", metadata=open_policy["metadata"], spec=open_policy["spec"],
            opts=pulumi.ResourceOptions(parent=self, provider=self.k8s_provider, depends_on=[self.cluster]))

        # Addon versions are left to AWS: EKS installs the addon's default version for the cluster's Kubernetes version.
        after_nodes = pulumi.ResourceOptions(parent=self, depends_on=[self.cluster, self.system_nodes])
        self.pod_identity_addon = aws.eks.Addon(
            f"{name}-pod-identity-agent", cluster_name=args.name, addon_name="eks-pod-identity-agent",
            tags=tags or None, opts=after_nodes)
        # pulumi_eks only manages CoreDNS when it has a default node group; EKS bootstraps a self-managed CoreDNS, which
        # this adopts as a managed addon once there are nodes for it (before that it would sit DEGRADED and time out).
        self.coredns_addon = aws.eks.Addon(
            f"{name}-coredns", cluster_name=args.name, addon_name="coredns", resolve_conflicts_on_create="OVERWRITE",
            tags=tags or None, opts=pulumi.ResourceOptions.merge(after_nodes, pulumi.ResourceOptions(
                depends_on=[self.system_network_policy])))

        # Karpenter discovers the GPU nodes' subnets and security group by these tags (EC2NodeClass selector terms).
        self.node_security_group_id = self.cluster.node_security_group_id
        self.cluster_security_group_id = self.cluster.cluster_security_group_id
        self.discovery_tags = [aws.ec2.Tag(
            f"{name}-sg-discovery", resource_id=self.cluster.cluster_security_group_id, key=DISCOVERY_TAG,
            value=args.name, opts=child)]
        for i, subnet_id in enumerate(system_subnets if args.tag_node_subnets else []):
            self.discovery_tags.append(aws.ec2.Tag(
                f"{name}-subnet-discovery-{i}", resource_id=subnet_id, key=DISCOVERY_TAG, value=args.name,
                opts=child))

        self.oidc_provider_arn = self.cluster.oidc_provider_arn
        self.oidc_issuer = self.cluster.oidc_issuer
        # What workloads on the cluster wait for (KarpenterArgs.wait_for): nodes to run on, Pod Identity, tags.
        self.ready: list[pulumi.Resource] = [self.cluster, self.system_nodes, self.pod_identity_addon,
                                             self.coredns_addon, self.system_network_policy, *self.discovery_tags]
        self.register_outputs({"name": self.name, "kubeconfigJson": self.kubeconfig_json,
                               "oidcProviderArn": self.oidc_provider_arn, "oidcIssuer": self.oidc_issuer,
                               "nodeSecurityGroupId": self.node_security_group_id})

    def _node_subnets(self, node_subnets: Sequence[pulumi.Input[str]] | None) -> list[pulumi.Input[str]]:
        if node_subnets:
            return list(node_subnets)
        # Default VPC: the nodes go into its default subnets (one per zone), looked up here.
        found = aws.ec2.get_subnets(filters=[{"name": "default-for-az", "values": ["true"]}],
                                    opts=pulumi.InvokeOptions(parent=self))
        if found.ids is not None and len(found.ids) == 0:  # None: an offline mock that does not answer the lookup
            raise ConfigError("cluster.private_subnet_ids", None,
                              "a list of subnet ids: this region has no default VPC subnets to put the nodes in")
        return sorted(found.ids or [])
