"""The Karpenter EC2NodeClass for GPU nodes: AL2023 AMI alias, IMDSv2 with hop limit 1, encrypted gp3 root volume."""
from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import Mapping

import pulumi
import pulumi_kubernetes as k8s

from .validation import ConfigError, Rule, validate

NODECLASS_API_VERSION = "karpenter.k8s.aws/v1"
"""apiVersion of EC2NodeClass (served by every Karpenter the catalogue accepts, >= 1.0.3)."""

DISCOVERY_TAG = "karpenter.sh/discovery"
"""Tag key on subnets and security groups that the node class selects by (value: the cluster name)."""

ROOT_DEVICE = "/dev/xvda"
"""Root block device of the AL2023 AMIs (the NVIDIA variant included)."""

RESTRICTED_TAG_KEYS = ("eks:eks-cluster-name", "karpenter.sh/nodepool", "karpenter.sh/nodeclaim",
                       "karpenter.k8s.aws/ec2nodeclass")
"""Tag keys Karpenter sets itself; the EC2NodeClass CRD refuses them (as well as any `kubernetes.io/cluster*`)."""

_ALIAS = re.compile(r"^al2023@(latest|v(\d{8}))$")


def _alias_ok(alias: str) -> bool:
    m = _ALIAS.match(alias) if isinstance(alias, str) else None
    if not m:
        return False
    if m.group(2):
        _dt.datetime.strptime(m.group(2), "%Y%m%d")  # raises ValueError for v20241399, which the rule turns to False
    return True


def _check_tags(tags: Mapping[str, str]) -> None:
    for key, value in tags.items():
        if not (isinstance(key, str) and key) or key in RESTRICTED_TAG_KEYS or key.startswith("kubernetes.io/cluster"):
            raise ConfigError("tags", key, "a non-empty tag key other than " + ", ".join(RESTRICTED_TAG_KEYS)
                              + " and kubernetes.io/cluster* (Karpenter sets those itself)")
        if not (isinstance(value, str) and value):
            raise ConfigError(f"tags[{key!r}]", value, "a non-empty string")


_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

NODECLASS_RULES = (
    Rule("name", lambda v: isinstance(v, str) and len(v) <= 63 and bool(_NAME.match(v)),
         "a DNS-1123 label (lower-case letters, digits, '-'; at most 63 characters)"),
    Rule("ami_alias", _alias_ok,
         "'al2023@latest' or a pinned 'al2023@vYYYYMMDD' (e.g. 'al2023@v20250505'); Karpenter picks the NVIDIA "
         "variant of the AL2023 AMI for GPU instance types"),
    Rule("node_role", lambda v: isinstance(v, str) and 0 < len(v) <= 64 and "/" not in v and not v.startswith("arn:"),
         "the node IAM role NAME as a plain string (not an ARN, not an Output)"),
    Rule("cluster_name", lambda v: isinstance(v, str) and v != "", "the EKS cluster name as a plain string"),
    Rule("root_volume_gib", lambda v: isinstance(v, int) and not isinstance(v, bool) and 20 <= v <= 16384,
         "an int of GiB between 20 and 16384 (CUDA images need room: 100 by default)"),
    Rule("root_volume_iops", lambda v: isinstance(v, int) and not isinstance(v, bool) and 3000 <= v <= 16000,
         "an int between 3000 and 16000 (gp3)"),
    Rule("root_volume_throughput_mibps", lambda v: isinstance(v, int) and not isinstance(v, bool) and 125 <= v <= 1000,
         "an int of MiB/s between 125 and 1000 (gp3)"),
)
"""What `ec2_nodeclass_manifest` accepts."""


def ec2_nodeclass_manifest(name: str, *, node_role: str, cluster_name: str, ami_alias: str = "al2023@latest",
                           root_volume_gib: int = 100, root_volume_iops: int = 3000,
                           root_volume_throughput_mibps: int = 125, kms_key_id: str | None = None,
                           tags: Mapping[str, str] | None = None) -> dict:
    """The EC2NodeClass manifest for GPU nodes (a plain dict; raises ConfigError on a bad value).

    Subnets and security groups are selected by the `karpenter.sh/discovery: <cluster_name>` tag that the Cluster
    component sets. `node_role` is the node role's name; Karpenter makes the instance profile itself.
    """
    tags = dict(tags or {})
    validate({"name": name, "ami_alias": ami_alias, "node_role": node_role, "cluster_name": cluster_name,
              "root_volume_gib": root_volume_gib, "root_volume_iops": root_volume_iops,
              "root_volume_throughput_mibps": root_volume_throughput_mibps}, NODECLASS_RULES)
    _check_tags(tags)
    if root_volume_throughput_mibps * 4 > root_volume_iops:
        # EC2 would refuse the launch, and Karpenter would fail to make GPU nodes while the queue waits.
        raise ConfigError("root_volume_throughput_mibps", root_volume_throughput_mibps,
                          f"at most root_volume_iops / 4 = {root_volume_iops // 4} (gp3 allows 0.25 MiB/s per IOPS)")
    if kms_key_id is not None and not (isinstance(kms_key_id, str) and kms_key_id):
        raise ConfigError("kms_key_id", kms_key_id,
                          "a KMS key ARN/id as a plain string, or None for the EBS default key")
    ebs = {
        "volumeSize": f"{root_volume_gib}Gi",
        "volumeType": "gp3",
        "iops": root_volume_iops,
        "throughput": root_volume_throughput_mibps,
        # Slides are clinical research data and may reach the local disk (scratch files, container layers): the root
        # volume is always encrypted, with the account's EBS key unless a CMK is given.
        "encrypted": True,
        "deleteOnTermination": True,
    }
    if kms_key_id:
        ebs["kmsKeyID"] = kms_key_id
    discovery = {DISCOVERY_TAG: cluster_name}
    return {
        "apiVersion": NODECLASS_API_VERSION,
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": node_role,
            "amiSelectorTerms": [{"alias": ami_alias}],
            "subnetSelectorTerms": [{"tags": dict(discovery)}],
            "securityGroupSelectorTerms": [{"tags": dict(discovery)}],
            # IMDSv2 only, and a hop limit of 1 so that pods (one hop further, behind the pod network) cannot reach
            # the instance metadata service at all: pods get AWS credentials from EKS Pod Identity, never from the
            # node role. Host-network daemons (the Pod Identity agent, the VPC CNI) still reach it.
            "metadataOptions": {
                "httpEndpoint": "enabled",
                "httpProtocolIPv6": "disabled",
                "httpTokens": "required",
                "httpPutResponseHopLimit": 1,
            },
            "blockDeviceMappings": [{"deviceName": ROOT_DEVICE, "rootVolume": True, "ebs": ebs}],
            **({"tags": tags} if tags else {}),
        },
    }


@dataclass
class Ec2NodeClassArgs:
    """Inputs of an Ec2NodeClass (see `ec2_nodeclass_manifest` for the rules)."""

    node_role: str
    """Name (not ARN) of the Karpenter node IAM role, as a plain string (Karpenter.node_role_name)."""
    cluster_name: str
    """EKS cluster name, plain string; also the value of the discovery tag."""
    crd_chart: pulumi.Resource
    """The `karpenter-crd` chart (Karpenter.crd_chart): the EC2NodeClass CRD must exist first."""
    nodeclass_name: str = "gpu"
    """metadata.name of the EC2NodeClass. Default `gpu`."""
    ami_alias: str = "al2023@latest"
    """AMI alias: `al2023@latest` (default) or a pinned `al2023@vYYYYMMDD`."""
    root_volume_gib: int = 100
    """Root volume size in GiB. Default 100 (CUDA images are large)."""
    root_volume_iops: int = 3000
    """gp3 IOPS. Default 3000 (gp3 baseline)."""
    root_volume_throughput_mibps: int = 125
    """gp3 throughput in MiB/s. Default 125 (gp3 baseline)."""
    kms_key_id: str | None = None
    """KMS key for the root volume; None (default) uses the account's default EBS key."""
    tags: dict[str, str] = field(default_factory=dict)
    """Extra tags on the instances and volumes. Default none."""


class Ec2NodeClass(pulumi.ComponentResource):
    """The EC2NodeClass custom resource (`kubernetes:karpenter.k8s.aws/v1:EC2NodeClass`)."""

    def __init__(self, name: str, args: Ec2NodeClassArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        manifest = ec2_nodeclass_manifest(
            args.nodeclass_name, node_role=args.node_role, cluster_name=args.cluster_name, ami_alias=args.ami_alias,
            root_volume_gib=args.root_volume_gib, root_volume_iops=args.root_volume_iops,
            root_volume_throughput_mibps=args.root_volume_throughput_mibps, kms_key_id=args.kms_key_id,
            tags=args.tags)
        super().__init__("gpuburst:index:Ec2NodeClass", name, None, opts)
        self.nodeclass_name: str = args.nodeclass_name
        self.resource = k8s.apiextensions.CustomResource(
            f"{name}-nodeclass", api_version=manifest["apiVersion"], kind=manifest["kind"],
            metadata=manifest["metadata"], spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[args.crd_chart]))
        self.register_outputs({"nodeclassName": self.nodeclass_name})
