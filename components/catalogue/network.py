"""Network facts: the VPC endpoints a cluster whose GPU subnets have no route out needs, the images GPU nodes run
that live outside ECR, and what the boundary's parts cost, each with its source."""
from __future__ import annotations

from dataclasses import dataclass

from .pins import KEDA_VERSION, NVIDIA_DEVICE_PLUGIN_VERSION, PAUSE_IMAGE

__all__ = [
    "DEFAULT_VPC_CIDR",
    "PRIVATE_IPV4_RANGES",
    "ENDPOINT_SCOPES",
    "EndpointService",
    "VPC_ENDPOINTS",
    "endpoint_service_name",
    "ECR_LAYER_BUCKET",
    "PULL_THROUGH_UPSTREAMS",
    "IMAGE_DIGESTS",
    "MirroredImage",
    "GPU_NODE_MIRRORS",
    "KEDA_IMAGES",
    "SYSTEM_NODE_MIRRORS",
    "MIRRORED_IMAGES",
    "INTERFACE_ENDPOINT_USD_PER_AZ_HOUR",
    "NAT_GATEWAY_USD_PER_HOUR",
]

DEFAULT_VPC_CIDR = "10.64.0.0/16"
"""The VPC the platform creates when the stack sets no `vpcCidr`: /16, so each of up to three zones gets a /20 per
tier (GPU, system) and the GPU pool never runs out of pod IPs."""

PRIVATE_IPV4_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
"""Where a VPC's IPv4 CIDR may lie: RFC 1918 and the RFC 6598 shared range (Amazon VPC User Guide, "IP addressing
for your VPCs and subnets": AWS accepts both for a VPC)."""

ENDPOINT_SCOPES = ("account", "principal", "open")
"""What an endpoint's policy lets through: `account` (caller and resource both in this stack's account, so no one's
own credentials can write to their own bucket or queue through it), `principal` (callers of this account only: the
resources are AWS's, e.g. the EKS add-on images in AWS's ECR), `open` (the endpoint's default full access)."""


@dataclass(frozen=True)
class EndpointService:
    """One VPC endpoint the platform's VPC holds."""

    service: str
    """The service name after `com.amazonaws.<region>.`, e.g. `sqs`."""
    kind: str
    """`Interface` (ENIs in the GPU subnets, private DNS on) or `Gateway` (a route in the system route table)."""
    scope: str
    """Its policy, one of ENDPOINT_SCOPES."""
    needed_by: str
    """Who calls the service from inside the VPC."""


VPC_ENDPOINTS: tuple[EndpointService, ...] = (
    EndpointService("s3", "Gateway", "account",
                    "system nodes' S3 traffic that does not go through the VPC resolver (kept off the NAT)"),
    EndpointService("s3", "Interface", "account",
                    "the worker's slides and results, and ECR's image layers: with private DNS for all resolvers S3 "
                    "resolves into the VPC CIDR, the only HTTPS destination the worker NetworkPolicy names"),
    EndpointService("sqs", "Interface", "account",
                    "the worker's queue, KEDA's queue-length polls, Karpenter's interruption queue"),
    EndpointService("sts", "Interface", "open",
                    "web-identity role sessions (the cluster's OIDC provider): AssumeRoleWithWebIdentity is not "
                    "signed, so a caller-account condition would refuse it"),
    EndpointService("ecr.api", "Interface", "principal", "image pulls by every node (the worker image, EKS add-ons)"),
    EndpointService("ecr.dkr", "Interface", "principal", "image pulls by every node (the registry API)"),
    EndpointService("eks-auth", "Interface", "principal", "the EKS Pod Identity agent (AssumeRoleForPodIdentity)"),
    EndpointService("logs", "Interface", "account", "CloudWatch Logs from the nodes and pods"),
    EndpointService("ec2", "Interface", "principal", "the VPC CNI's ENI and IP management; Karpenter's launches"),
    EndpointService("ssm", "Interface", "principal", "Karpenter's AMI alias lookups (SSM public parameters); the "
                                                     "nodes' SSM agent"),
    EndpointService("eks", "Interface", "principal", "Karpenter's cluster endpoint discovery (eks:DescribeCluster)"),
)
"""The endpoints of the VPC the platform creates, in one place. Sources: Amazon EKS User Guide, "Deploy private
clusters with limited internet access" (https://docs.aws.amazon.com/eks/latest/userguide/private-clusters.html: ec2,
ecr.api, ecr.dkr, s3, logs, sts, eks-auth for Pod Identity); Karpenter v1.14 docs, "Private Clusters" (aws/karpenter-
provider-aws website/content/en/v1.14/getting-started/getting-started-with-karpenter/_index.md: ec2, ecr.api, ecr.dkr,
s3, sts, ssm, sqs, eks; no endpoint exists for IAM or the Price List API, which is why the system subnets keep a NAT
route); S3 User Guide, "AWS PrivateLink for Amazon S3" (private DNS for an S3 interface endpoint;
`privateDnsOnlyForInboundResolverEndpoint` false sends in-VPC requests to the interface endpoint, not the gateway)."""


def endpoint_service_name(region: str, service: str) -> str:
    """`com.amazonaws.<region>.<service>`, the endpoint service name of an AWS service in `region`."""
    return f"com.amazonaws.{region}.{service}"


ECR_LAYER_BUCKET = "prod-{region}-starport-layer-bucket"
"""The AWS-owned S3 bucket ECR serves image layers from; an S3 endpoint policy must let nodes read it. Source:
Amazon ECR User Guide, "Amazon ECR interface VPC endpoints (AWS PrivateLink)", minimum Amazon S3 bucket permissions
(`arn:aws:s3:::prod-region-starport-layer-bucket/*`)."""

PULL_THROUGH_UPSTREAMS = ("public.ecr.aws", "registry.k8s.io", "quay.io", "registry-1.docker.io", "ghcr.io",
                          "registry.gitlab.com", "<registry>.azurecr.io", "<account>.dkr.ecr.<region>.amazonaws.com")
"""Upstream registries an ECR pull-through cache rule accepts (Amazon ECR User Guide, "Sync an upstream registry with
an Amazon ECR private registry"; Docker Hub, GHCR, GitLab and Azure need a Secrets Manager credential). nvcr.io, where
the NVIDIA device plugin lives, is not among them: its image is mirrored instead (GPU_NODE_MIRRORS)."""


IMAGE_DIGESTS: dict[str, str] = {
    # The KEDA 2.20.2 images (ghcr.io, OCI indexes for amd64 and arm64). Two independent public pins agree on all
    # three: GlueOps/platform-helm-chart-platform README.md (chart 0.79.2, `container_images.app_keda.*.image.tag`
    # = `2.20.2@sha256:...`), and a public book's pins table (KEDA v2.20.2 row, read 2026-09-19, which also lists
    # the per-architecture manifests, e.g. keda amd64 sha256:6c2ded1a...).
    "ghcr.io/kedacore/keda:2.20.2":
        "sha256:fe74c7b8849586a67ad2201bcb89e7f5ac221ff90399ecaa8fd28427f1ef11e6",
    "ghcr.io/kedacore/keda-metrics-apiserver:2.20.2":
        "sha256:27286536a8a775aeeee37a7e343f8ecebb27ebf680ee1181a4f99e82eefb253b",
    "ghcr.io/kedacore/keda-admission-webhooks:2.20.2":
        "sha256:41f74102aba7959c6e8d08b433ab8a5fd6cae7c5646c78f7fe3de40a52df3439",
    # The device plugin v0.20.0 (nvcr.io OCI index). Three public sources agree: a manifest that resolved it with
    # `curl -sI -H 'Accept: application/vnd.oci.image.index.v1+json' https://nvcr.io/v2/nvidia/k8s-device-plugin/
    # manifests/v0.20.0` (Docker-Content-Digest), a running pod's `Image ID` (nvcr.io/nvidia/k8s-device-plugin@
    # sha256:a61ba9fd...), and NVIDIA's gpu-operator-certified v26.7.0 OLM bundle (k8s-device-plugin:v0.20.0@
    # sha256:a61ba9fd...). No public pin of v0.18.x was found; the catalogue refuses it anyway (DEVICE_PLUGIN_MINIMUM).
    "nvcr.io/nvidia/k8s-device-plugin:v0.20.0":
        "sha256:a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312",
}
"""Manifest-list (index) digests of the images outside ECR the stack runs, by `<repository>:<tag>`, each from public
material as noted above (never invented: an image missing here runs by tag, and the pack's `image-pinned-by-digest`
names it). `crane digest <repository>:<tag>` re-checks one when online."""


@dataclass(frozen=True)
class MirroredImage:
    """An image the stack runs that lives outside ECR, copied once into the stack's ECR mirror."""

    source: str
    """Upstream repository, e.g. `nvcr.io/nvidia/k8s-device-plugin`."""
    tag: str
    """The tag the stack runs (copied unchanged)."""
    digest: str | None
    """The pinned digest (IMAGE_DIGESTS): the copy is made from it (`crane copy` moves the manifest as is, so the
    digest stays valid in the mirror) and the workloads pull it by digest."""
    repository: str
    """The repository under the stack's mirror prefix, e.g. `nvidia/k8s-device-plugin`."""
    runs: str
    """What runs it, and on which nodes."""


def _pause() -> MirroredImage:
    name, _, digest = PAUSE_IMAGE.partition("@")
    source, _, tag = name.rpartition(":")
    return MirroredImage(source, tag, digest or None, "kubernetes/pause", "the warm floor's placeholder pods")


def _mirror(source: str, tag: str, repository: str, runs: str) -> MirroredImage:
    return MirroredImage(source, tag, IMAGE_DIGESTS.get(f"{source}:{tag}"), repository, runs)


GPU_NODE_MIRRORS: tuple[MirroredImage, ...] = (
    _mirror("nvcr.io/nvidia/k8s-device-plugin", f"v{NVIDIA_DEVICE_PLUGIN_VERSION}", "nvidia/k8s-device-plugin",
            "the NVIDIA device plugin DaemonSet on GPU nodes (the chart's image, `v` + its appVersion)"),
    _pause(),
)
"""Images outside ECR that pods on GPU nodes run. GPU subnets have no route out, so each is copied into the stack's
ECR (`<prefix>/mirror/<repository>`, immutable tags) and the workloads name the copy. Everything else on a GPU node
comes from ECR already: the worker image (the stack's repository) and the EKS add-ons (VPC CNI with its network
policy agent, kube-proxy, the Pod Identity agent: AWS's regional ECR)."""

KEDA_IMAGES: dict[str, str] = {
    "keda": "ghcr.io/kedacore/keda",
    "metricsApiServer": "ghcr.io/kedacore/keda-metrics-apiserver",
    "webhooks": "ghcr.io/kedacore/keda-admission-webhooks",
}
"""KEDA's three images by the chart's `image.<key>` value (the chart's defaults: registry ghcr.io, tag its
appVersion)."""

SYSTEM_NODE_MIRRORS: tuple[MirroredImage, ...] = tuple(
    _mirror(source, KEDA_VERSION, source.split("/", 1)[1], f"KEDA (chart image `{key}`) on the system nodes")
    for key, source in KEDA_IMAGES.items())
"""Images outside ECR that the system nodes run, mirrored as well: the system subnets could reach ghcr.io over the
NAT, but a copy in the stack's ECR is pulled by digest through the ECR endpoints, from a repository this account
controls, and does not depend on ghcr.io being up when a node is replaced."""

MIRRORED_IMAGES: tuple[MirroredImage, ...] = GPU_NODE_MIRRORS + SYSTEM_NODE_MIRRORS
"""Every image the stack's ECR mirror holds: one repository and one copy command each."""

INTERFACE_ENDPOINT_USD_PER_AZ_HOUR = 0.01
"""ESTIMATE (list price, us-east-1, AWS PrivateLink pricing page, read 2026-12): one interface endpoint in one zone,
per hour, plus $0.01 per GB processed. Ten interface endpoints in three zones: ~$0.30/h, ~$219 a month."""

NAT_GATEWAY_USD_PER_HOUR = 0.045
"""ESTIMATE (list price, us-east-1, Amazon VPC pricing page, read 2026-12): one NAT gateway per hour (~$33 a month),
plus $0.045 per GB processed; the platform's VPC has one, for the system subnets only."""
