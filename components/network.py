"""WorkloadNetwork (the VPC whose GPU subnets have no route out, with its VPC endpoints) and GpuNodeSecurity (the GPU
nodes' own security group): the network boundary around the slide parser.

The threat is an exploited slide parser (slides are untrusted files) copying slides out. From the inside out:

- GPU subnets (one per zone) share a route table holding the VPC's local route only: no internet gateway, no NAT, no
  gateway-endpoint prefix list. GPU nodes and the worker reach AWS through the interface endpoints in those subnets
  (`catalogue.VPC_ENDPOINTS`, private DNS on, a security group admitting HTTPS from the VPC CIDR only).
- System subnets (the managed node group: Karpenter, KEDA, CoreDNS) route 0.0.0.0/0 to one NAT gateway in the one
  public subnet, because what runs there needs it: Karpenter's image (public.ecr.aws, by digest), and
  Karpenter calls IAM (instance profiles for `EC2NodeClass.spec.role`) and the Price List API, which have no VPC
  endpoint (Karpenter docs, "Private Clusters"); so Karpenter keeps `settings.isolatedVPC` false.
- Images on GPU nodes: the worker image (the stack's ECR) and the EKS add-ons (VPC CNI with its network policy agent,
  kube-proxy, the Pod Identity agent: AWS's ECR) come through the ECR and S3 endpoints. The images outside ECR that
  GPU-node pods run, the NVIDIA device plugin (nvcr.io, which no ECR pull-through cache rule accepts:
  `catalogue.PULL_THROUGH_UPSTREAMS`) and the warm floor's pause image, are mirrored: `<prefix>/mirror/<repository>`
  ECR repositories (immutable tags, scanned on push) and a one-time copy (`mirror_copy_commands`: `crane copy` keeps
  the digest). A mirror, not pull-through: it covers nvcr.io too, GPU nodes pull only what someone copied
  deliberately, and the node role needs no `ecr:BatchImportUpstreamImage` or `ecr:CreateRepository`.
- S3: an interface endpoint with private DNS for all resolvers, so S3 names resolve into the VPC CIDR, the only HTTPS
  destination the worker NetworkPolicy allows (a NetworkPolicy cannot name a prefix list, and traffic through a
  gateway endpoint goes to S3's public addresses, which the policy would have to allow wholesale). The free gateway
  endpoint serves the system subnets. In us-east-1 the SDKs' default S3 host is the global `s3.amazonaws.com`, which
  private DNS does not cover: the worker pod sets AWS_S3_US_EAST_1_REGIONAL_ENDPOINT=regional.
- Endpoint policies (`catalogue.ENDPOINT_SCOPES`): S3, SQS and Logs serve only this account's callers on this
  account's resources (and ECR's layer bucket), so no credentials, stolen or brought along, copy slides into another
  account through them; ECR, EC2, SSM, EKS and eks-auth serve only this account's callers; STS stays open.
- GpuNodeSecurity: GPU nodes (and so their pods) get a security group of their own: ingress only the kubelet port from
  the cluster security group (the control plane); egress HTTPS and DNS to the VPC CIDR only; the cluster security
  group (the API server's ENIs and the system nodes) admits HTTPS and DNS from it. Karpenter finds it and the GPU
  subnets by tags naming the cluster (GPU_NODES_TAG, GPU_SUBNETS_TAG); system nodes keep the cluster's group.
"""
from __future__ import annotations

import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from .catalogue.network import (
    DEFAULT_VPC_CIDR,
    ECR_LAYER_BUCKET,
    MIRRORED_IMAGES,
    PRIVATE_IPV4_RANGES,
    VPC_ENDPOINTS,
    endpoint_service_name,
)
from .spec.validation import ConfigError, names_its_errors

GPU_SUBNETS_TAG = "gpuburst.io/gpu-subnets"
"""Tag key on the GPU subnets (value: the cluster name); the GPU EC2NodeClass's subnetSelectorTerms select it."""

GPU_NODES_TAG = "gpuburst.io/gpu-nodes"
"""Tag key on the GPU nodes' security group (value: the cluster name); securityGroupSelectorTerms select it."""

TIER_TAG = "gpuburst.io/network-tier"
"""Tag key naming a subnet's tier (`gpu`, `system`, `public`), for people and the policy pack."""

_PRIVATE = tuple(ipaddress.ip_network(c) for c in PRIVATE_IPV4_RANGES)

KUBELET_PORT = 10250
"""The kubelet's port: the control plane's `exec`, `logs` and `port-forward` reach it."""

MIRROR_PREFIX = "mirror"
"""Path segment of the mirrored images' ECR repositories: `<name>/mirror/<repository>`."""


# ----------------------------------------------------------------------------------------------------------------------
# Pure builders
# ----------------------------------------------------------------------------------------------------------------------

def private_cidr_problem(value: Any, *, prefixes: tuple[int, int] = (8, 28)) -> str | None:
    """Why `value` is not a private IPv4 CIDR with a prefix length in `prefixes` (inclusive), or None.

    The world (`0.0.0.0/0`, `::/0`) is named as such: it is the one value a boundary must never hold."""
    text = str(value)
    if text in ("0.0.0.0/0", "::/0"):
        return "never the whole internet"
    try:
        net = ipaddress.ip_network(text, strict=True)
    except ValueError:
        return "a CIDR such as '10.64.0.0/16' (no host bits set)"
    if net.version != 4:
        return "an IPv4 CIDR (the platform's VPC is IPv4 only)"
    if not any(net.subnet_of(r) for r in _PRIVATE):
        return "a private range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10)"
    low, high = prefixes
    if not low <= net.prefixlen <= high:
        return f"a prefix length from /{low} to /{high}"
    return None


def subnet_plan(vpc_cidr: str, zones: Sequence[str]) -> dict[str, list[str]]:
    """The subnets' CIDRs by tier: the VPC's first quarter holds the GPU subnets, the second the system subnets, the
    third the public subnet (one, for the NAT gateway); each zone gets a sixteenth of the VPC per tier."""
    quarters = list(ipaddress.ip_network(vpc_cidr).subnets(prefixlen_diff=2))
    per_zone = [list(q.subnets(prefixlen_diff=2)) for q in quarters]
    return {"gpu": [str(n) for n in per_zone[0][:len(zones)]],
            "system": [str(n) for n in per_zone[1][:len(zones)]],
            "public": [str(per_zone[2][0])]}


def endpoint_policy(scope: str, *, account_id: str, region: str, service: str,
                    partition: str = "aws") -> dict[str, Any] | None:
    """The VPC endpoint policy for `scope` (`catalogue.ENDPOINT_SCOPES`); None for `open` (the default full access).

    `account`: callers of this account on resources of this account, plus (S3) reading ECR's layer bucket (as the
    ECR User Guide's S3 endpoint policy does);
    `principal`: callers of this account on any resource (the EKS add-on images live in AWS's accounts)."""
    if scope == "open":
        return None
    caller = {"aws:PrincipalAccount": account_id}
    if scope == "principal":
        statements = [{"Sid": "ThisAccountsCallers", "Effect": "Allow", "Principal": "*", "Action": "*",
                       "Resource": "*", "Condition": {"StringEquals": caller}}]
    elif scope == "account":
        statements = [{"Sid": "ThisAccountsCallersOnThisAccountsResources", "Effect": "Allow", "Principal": "*",
                       "Action": "*", "Resource": "*",
                       "Condition": {"StringEquals": {**caller, "aws:ResourceAccount": account_id}}}]
        if service == "s3":
            # No caller condition: a node fetches layers through URLs ECR presigned, so ECR is the caller. Reading
            # ECR's own bucket moves nothing out of this account.
            statements.append({"Sid": "EcrImageLayers", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                               "Resource": f"arn:{partition}:s3:::{ECR_LAYER_BUCKET.format(region=region)}/*"})
    else:
        raise ConfigError("endpoint scope", scope, "account, principal or open")
    return {"Version": "2012-10-17", "Statement": statements}


def gpu_node_security_rules(vpc_cidr: str, cluster_security_group_id: Any) -> dict[str, list[dict[str, Any]]]:
    """Inline rules of the GPU nodes' security group: ingress only the kubelet from the cluster security group;
    egress only HTTPS (the API server, the interface endpoints) and DNS (CoreDNS, the VPC resolver) to the VPC CIDR.

    Nothing else comes in: the worker serves nothing, and GPU nodes never talk to each other. IMDS, the Pod Identity
    agent and Amazon Time Sync are link-local, which security groups do not filter."""
    in_vpc = {"cidr_blocks": [vpc_cidr]}
    return {
        "ingress": [{"description": "kubelet from the control plane (exec, logs, port-forward)", "protocol": "tcp",
                     "from_port": KUBELET_PORT, "to_port": KUBELET_PORT,
                     "security_groups": [cluster_security_group_id]}],
        "egress": [
            {"description": "HTTPS to the VPC only: the API server and the interface endpoints", "protocol": "tcp",
             "from_port": 443, "to_port": 443, **in_vpc},
            {"description": "DNS to CoreDNS and the VPC resolver", "protocol": "udp", "from_port": 53, "to_port": 53,
             **in_vpc},
            {"description": "DNS over TCP to CoreDNS and the VPC resolver", "protocol": "tcp", "from_port": 53,
             "to_port": 53, **in_vpc},
        ],
    }


CLUSTER_GROUP_INGRESS = (("tcp", 443, "the API server's private endpoint, from the GPU nodes"),
                         ("udp", 53, "CoreDNS on the system nodes, from the GPU nodes"),
                         ("tcp", 53, "CoreDNS over TCP on the system nodes, from the GPU nodes"))
"""What the cluster security group admits from the GPU nodes' group (protocol, port, why)."""


OPEN_POLICY_NAME = "gpuburst-allow-all"
"""metadata.name of `open_network_policy`'s policy."""


def open_network_policy(namespace: str, name: str = OPEN_POLICY_NAME) -> dict[str, Any]:
    """A NetworkPolicy selecting every pod of `namespace` and allowing all traffic in and out.

    The cluster's VPC CNI runs its network policy agent in strict mode (cluster.VPC_CNI_CONFIGURATION): a pod starts
    denied everything until the policies selecting it are programmed, and a pod no policy selects stays denied (EKS
    User Guide, "Restrict Pod network traffic with Kubernetes network policies": "you must have a network policy for
    every endpoint that your pods need to access ... this requirement applies to the CoreDNS pods"). The system
    namespaces (kube-system: CoreDNS, Karpenter; KEDA's; the device plugin's) get this one, which keeps their pods as
    open as they were in standard mode; the workloads' namespace keeps its default-deny and the worker's own policy.
    """
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}], "egress": [{}]}}


def mirror_copy_commands(repository_urls: dict[str, str]) -> list[str]:
    """The one-time copies into the mirror, each from the catalogue's digest (`crane copy` moves the manifest as is,
    so the digest the workloads pull stays valid) to the upstream tag, given the mirror repositories' URLs by upstream
    repository. An image the catalogue has no digest for is copied by tag (the pack then names its pods)."""
    commands = []
    for image in MIRRORED_IMAGES:
        source = f"{image.source}@{image.digest}" if image.digest else f"{image.source}:{image.tag}"
        commands.append(f"crane copy {source} {repository_urls[image.source]}:{image.tag}")
    return commands


def mirror_image(source: str, *, account_id: str, region: str, name: str, dns_suffix: str = "amazonaws.com") -> str:
    """The repository nodes pull the mirrored upstream image `source` (a MIRRORED_IMAGES entry) from: the copy in
    this stack's ECR, `<account>.dkr.ecr.<region>.<suffix>/<name>/mirror/<repository>` (the caller adds the tag and
    digest). A plain string from the account and region, so it is known during a preview (a new repository's URL is
    not, and a Chart with unknown values renders nothing)."""
    (image,) = [i for i in MIRRORED_IMAGES if i.source == source] or [None]
    if image is None:
        raise ConfigError("mirror_image source", source, "one of " + ", ".join(i.source for i in MIRRORED_IMAGES))
    repository = f"{account_id}.dkr.ecr.{region}.{dns_suffix}/{name}/{MIRROR_PREFIX}/{image.repository}"
    return repository


# ----------------------------------------------------------------------------------------------------------------------
# Components
# ----------------------------------------------------------------------------------------------------------------------

@dataclass
class WorkloadNetworkArgs:
    """Inputs of WorkloadNetwork."""

    name: str
    """Name prefix of the network's resources and its mirror repositories (the platform's `gpuburst-<env>`)."""
    region: str
    """AWS region, plain string: the endpoints' service names are `com.amazonaws.<region>.<service>`. Required."""
    cluster_name: str | None = None
    """Value of the GPU subnets' GPU_SUBNETS_TAG (the EKS cluster's name). Default None: `name`."""
    vpc_cidr: str = DEFAULT_VPC_CIDR
    """The VPC's IPv4 CIDR, private, /16 to /20. Default 10.64.0.0/16."""
    zone_count: int = 3
    """Availability zones the GPU and system subnets span (2 or 3). Default 3 (more zones, more GPU capacity)."""
    availability_zones: list[str] | None = None
    """The zones, by name; None (default) takes the region's first `zone_count` opt-in-free zones."""
    account_id: str | None = None
    """12-digit account id in the endpoint policies; None (default) asks AWS who the stack runs as."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags on every resource. Default none."""


@names_its_errors
class WorkloadNetwork(pulumi.ComponentResource):
    """VPC, GPU subnets with no route out, system subnets behind one NAT gateway, VPC endpoints, image mirror."""

    vpc_id: pulumi.Output[str]
    vpc_cidr: str
    gpu_subnet_ids: list[pulumi.Output[str]]
    system_subnet_ids: list[pulumi.Output[str]]
    mirror_repository_urls: dict[str, pulumi.Output[str]]
    gpu_route_table: aws.ec2.RouteTable
    endpoints_security_group: aws.ec2.SecurityGroup
    mirror_repositories: dict[str, aws.ecr.Repository]
    s3_endpoint_ids: list[pulumi.Output[str]]
    public_subnet_ids: list[pulumi.Output[str]]

    def __init__(self, name: str, args: WorkloadNetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        problem = private_cidr_problem(args.vpc_cidr, prefixes=(16, 20))
        if problem:
            raise ConfigError("WorkloadNetworkArgs.vpc_cidr", args.vpc_cidr, problem)
        if args.zone_count not in (2, 3):
            raise ConfigError("WorkloadNetworkArgs.zone_count", args.zone_count, "2 or 3")
        super().__init__("gpuburst:index:WorkloadNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        invoke = pulumi.InvokeOptions(parent=self)
        zones = list(args.availability_zones or aws.get_availability_zones(
            state="available", filters=[{"name": "opt-in-status", "values": ["opt-in-not-required"]}],
            opts=invoke).names or [])[:args.zone_count]
        if len(zones) < args.zone_count:
            raise ConfigError("WorkloadNetworkArgs.availability_zones", zones,
                              f"{args.zone_count} availability zones (the region offers fewer)")
        account_id = args.account_id or aws.get_caller_identity(opts=invoke).account_id
        cluster_name = args.cluster_name or args.name
        tags = dict(args.tags)
        plan = subnet_plan(args.vpc_cidr, zones)
        self.vpc_cidr = args.vpc_cidr

        vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=args.vpc_cidr, enable_dns_support=True,
                          enable_dns_hostnames=True,  # both required by private DNS on interface endpoints
                          tags={**tags, "Name": args.name}, opts=child)
        self.vpc = vpc
        self.vpc_id = vpc.id
        # The VPC's default security group, emptied: anything launched without a group gets no traffic at all.
        aws.ec2.DefaultSecurityGroup(f"{name}-default-sg", vpc_id=vpc.id, ingress=[], egress=[],
                                     tags={**tags, "Name": f"{args.name}-default-closed"}, opts=child)

        def subnet(tier: str, i: int, cidr: str, zone: str, extra: dict[str, str]) -> aws.ec2.Subnet:
            return aws.ec2.Subnet(f"{name}-{tier}-{i}", vpc_id=vpc.id, cidr_block=cidr, availability_zone=zone,
                                  map_public_ip_on_launch=False,
                                  tags={**tags, "Name": f"{args.name}-{tier}-{zone}", TIER_TAG: tier, **extra},
                                  opts=child)

        gpu = [subnet("gpu", i, c, zones[i], {GPU_SUBNETS_TAG: cluster_name}) for i, c in enumerate(plan["gpu"])]
        system = [subnet("system", i, c, zones[i], {}) for i, c in enumerate(plan["system"])]
        public = subnet("public", 0, plan["public"][0], zones[0], {})

        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags={**tags, "Name": args.name}, opts=child)
        nat_ip = aws.ec2.Eip(f"{name}-nat-ip", domain="vpc", tags={**tags, "Name": f"{args.name}-nat"}, opts=child)
        nat = aws.ec2.NatGateway(f"{name}-nat", subnet_id=public.id, allocation_id=nat_ip.id,
                                 tags={**tags, "Name": args.name},
                                 opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]))
        # Routes inline, so a route added by hand is removed by the next `pulumi up` (the table is authoritative).
        public_rt = aws.ec2.RouteTable(f"{name}-public-rt", vpc_id=vpc.id,
                                       routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
                                       tags={**tags, "Name": f"{args.name}-public", TIER_TAG: "public"}, opts=child)
        system_rt = aws.ec2.RouteTable(f"{name}-system-rt", vpc_id=vpc.id,
                                       routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
                                       tags={**tags, "Name": f"{args.name}-system", TIER_TAG: "system"}, opts=child)
        self.gpu_route_table = aws.ec2.RouteTable(
            f"{name}-gpu-rt", vpc_id=vpc.id, routes=[],  # the local route only: nothing leaves the VPC from here
            tags={**tags, "Name": f"{args.name}-gpu", TIER_TAG: "gpu"}, opts=child)
        for tier, subnets, table in (("gpu", gpu, self.gpu_route_table), ("system", system, system_rt),
                                     ("public", [public], public_rt)):
            for i, s in enumerate(subnets):
                aws.ec2.RouteTableAssociation(f"{name}-{tier}-rta-{i}", subnet_id=s.id, route_table_id=table.id,
                                              opts=child)

        self.endpoints_security_group = aws.ec2.SecurityGroup(
            f"{name}-endpoints-sg", vpc_id=vpc.id, description="VPC endpoints: HTTPS from inside the VPC only",
            ingress=[{"description": "HTTPS from the VPC", "protocol": "tcp", "from_port": 443, "to_port": 443,
                      "cidr_blocks": [args.vpc_cidr]}],
            egress=[], tags={**tags, "Name": f"{args.name}-endpoints"}, opts=child)
        self.endpoints: dict[str, aws.ec2.VpcEndpoint] = {}
        gateway: list[pulumi.Resource] = []
        for svc in VPC_ENDPOINTS:
            policy = endpoint_policy(svc.scope, account_id=account_id, region=args.region, service=svc.service)
            common: dict[str, Any] = dict(vpc_id=vpc.id, service_name=endpoint_service_name(args.region, svc.service),
                                          vpc_endpoint_type=svc.kind, policy=json.dumps(policy) if policy else None,
                                          tags={**tags, "Name": f"{args.name}-{svc.service}"})
            key = svc.service if svc.kind == "Interface" else f"{svc.service}-gateway"
            if svc.kind == "Gateway":
                endpoint = aws.ec2.VpcEndpoint(f"{name}-vpce-{key.replace('.', '-')}",
                                               route_table_ids=[system_rt.id], **common, opts=child)
                gateway.append(endpoint)
            else:
                dns = {"dns_record_ip_type": "ipv4"}
                if svc.service == "s3":  # in-VPC requests to the interface endpoint, not the gateway
                    dns["private_dns_only_for_inbound_resolver_endpoint"] = False
                endpoint = aws.ec2.VpcEndpoint(
                    f"{name}-vpce-{key.replace('.', '-')}", subnet_ids=[s.id for s in gpu],
                    security_group_ids=[self.endpoints_security_group.id], private_dns_enabled=True,
                    ip_address_type="ipv4", dns_options=dns, **common,
                    opts=pulumi.ResourceOptions(parent=self, depends_on=gateway if svc.service == "s3" else []))
            self.endpoints[key] = endpoint

        self.mirror_repositories = {image.source: aws.ecr.Repository(
            f"{name}-mirror-{image.repository.replace('/', '-')}",
            name=f"{args.name}/{MIRROR_PREFIX}/{image.repository}", image_tag_mutability="IMMUTABLE",
            image_scanning_configuration={"scan_on_push": True}, encryption_configurations=[{"encryption_type": "KMS"}],
            force_delete=False, tags={**tags, "gpuburst.io/mirror-of": image.source}, opts=child)
            for image in MIRRORED_IMAGES}
        self.mirror_repository_urls = {src: r.repository_url for src, r in self.mirror_repositories.items()}

        # The S3 endpoints' ids: what a bucket policy names to refuse S3 requests from anywhere else
        # (GpuBurstPlatform's `s3_vpc_endpoint_ids`, SlideStorageArgs.vpc_endpoint_ids).
        self.s3_endpoint_ids = [self.endpoints["s3"].id, self.endpoints["s3-gateway"].id]
        self.gpu_subnet_ids = [s.id for s in gpu]
        self.system_subnet_ids = [s.id for s in system]
        self.public_subnet_ids = [public.id]
        self.register_outputs({"vpcId": vpc.id, "vpcCidr": args.vpc_cidr, "gpuSubnetIds": self.gpu_subnet_ids,
                               "systemSubnetIds": self.system_subnet_ids,
                               "endpointsSecurityGroupId": self.endpoints_security_group.id,
                               "mirrorRepositoryUrls": self.mirror_repository_urls})

    def cluster_args(self) -> dict[str, Any]:
        """The ClusterArgs fields this network sets: the cluster and its system nodes in the system subnets, whose
        tags this network owns (a second owner of a tag would fight it on every update)."""
        return {"vpc_id": self.vpc_id, "private_subnet_ids": list(self.system_subnet_ids), "tag_node_subnets": False}


@dataclass
class GpuNodeSecurityArgs:
    """Inputs of GpuNodeSecurity."""

    vpc_id: pulumi.Input[str]
    """The cluster's VPC. Required."""
    vpc_cidr: str
    """The VPC's IPv4 CIDR, plain string: the only destination of the GPU nodes' HTTPS and DNS. Required."""
    cluster_security_group_id: pulumi.Input[str]
    """The security group EKS made for the cluster (`Cluster.cluster_security_group_id`). Required."""
    cluster_name: str
    """EKS cluster name: the value of GPU_NODES_TAG (and GPU_SUBNETS_TAG on `tag_subnet_ids`). Required."""
    tag_subnet_ids: Sequence[pulumi.Input[str]] | None = None
    """Subnets another stack owns to tag as GPU subnets (an ExistingNetwork's); None (default): none, a
    WorkloadNetwork tags its own."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags on the security group. Default none."""


@names_its_errors
class GpuNodeSecurity(pulumi.ComponentResource):
    """The GPU nodes' own security group, the cluster security group's rules admitting it, and GPU subnet tags."""

    security_group_id: pulumi.Output[str]
    security_group: aws.ec2.SecurityGroup
    cluster_ingress: list[aws.vpc.SecurityGroupIngressRule]
    subnet_tags: list[aws.ec2.Tag]

    def __init__(self, name: str, args: GpuNodeSecurityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        problem = private_cidr_problem(args.vpc_cidr)
        if problem:
            raise ConfigError("GpuNodeSecurityArgs.vpc_cidr", args.vpc_cidr, problem)
        if not (isinstance(args.cluster_name, str) and args.cluster_name):
            raise ConfigError("GpuNodeSecurityArgs.cluster_name", args.cluster_name, "the EKS cluster name")
        super().__init__("gpuburst:index:GpuNodeSecurity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        rules = gpu_node_security_rules(args.vpc_cidr, args.cluster_security_group_id)
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg", vpc_id=args.vpc_id, description="GPU nodes: kubelet in from the control plane; HTTPS and "
                                                          "DNS out to the VPC only",
            ingress=rules["ingress"], egress=rules["egress"],
            tags={**args.tags, "Name": f"{args.cluster_name}-gpu-nodes", GPU_NODES_TAG: args.cluster_name},
            opts=child)
        self.security_group_id = self.security_group.id
        self.cluster_ingress = [aws.vpc.SecurityGroupIngressRule(
            f"{name}-cluster-{proto}-{port}", security_group_id=args.cluster_security_group_id,
            referenced_security_group_id=self.security_group.id, ip_protocol=proto, from_port=port, to_port=port,
            description=why, opts=child) for proto, port, why in CLUSTER_GROUP_INGRESS]
        self.subnet_tags = [aws.ec2.Tag(f"{name}-gpu-subnet-{i}", resource_id=s, key=GPU_SUBNETS_TAG,
                                        value=args.cluster_name, opts=child)
                            for i, s in enumerate(args.tag_subnet_ids or [])]
        self.register_outputs({"securityGroupId": self.security_group.id})
