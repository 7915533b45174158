"""The Karpenter EC2NodeClass for GPU nodes: AL2023 AMI alias, IMDSv2 with hop limit 1, encrypted gp3 root volume,
the local NVMe as a RAID0 for kubelet and containerd, and nodeadm's FastImagePull in the node's NodeConfig."""
from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s

from . import catalogue
from .spec.selector_terms import find_empty_terms, why_empty
from .spec.validation import ConfigError, Rule, names_its_errors, validate

if TYPE_CHECKING:
    from .existing import ExistingKarpenter
    from .karpenter import Karpenter

NODECLASS_API_VERSION = "karpenter.k8s.aws/v1"
"""apiVersion of EC2NodeClass (served by every Karpenter the catalogue accepts, >= 1.0.3)."""

DISCOVERY_TAG = "karpenter.sh/discovery"
"""Tag key on subnets and security groups that the node class selects by (value: the cluster name)."""

ROOT_DEVICE = "/dev/xvda"
"""Root block device of the AL2023 AMIs (the NVIDIA variant included)."""

RESTRICTED_TAG_KEYS = ("eks:eks-cluster-name", "karpenter.sh/nodepool", "karpenter.sh/nodeclaim",
                       "karpenter.k8s.aws/ec2nodeclass")
"""Tag keys Karpenter sets itself; the EC2NodeClass CRD refuses them (as well as any `kubernetes.io/cluster*`)."""

INSTANCE_STORE_POLICIES = ("RAID0", None)
"""`instance_store_policy` values: RAID0 (Karpenter's only policy) or None (instance store ignored)."""

NODECONFIG_API_VERSION = "node.eks.aws/v1alpha1"
"""apiVersion of nodeadm's NodeConfig (the AL2023 node bootstrap document Karpenter merges user data into)."""

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
    Rule("instance_store_policy", lambda v: v in INSTANCE_STORE_POLICIES,
         "'RAID0' (kubelet, containerd and SOCI state on a RAID0 of the local NVMe) or None (the root volume)"),
    Rule("fast_image_pull", lambda v: isinstance(v, bool), "True or False (nodeadm's FastImagePull feature gate)"),
)
"""What `ec2_nodeclass_manifest` accepts."""


def instance_store_policy_for(instance_types: Iterable[str]) -> str | None:
    """`RAID0` when any of these instance types has local NVMe (catalogue `local_nvme_gb`), else None.

    Karpenter applies the policy per instance: a type without instance store keeps the root volume, so one NVMe type
    in the family is reason enough to ask for it."""
    return "RAID0" if any((t := catalogue.instance_type(n)) is not None and t.local_nvme_gb > 0
                          for n in instance_types) else None


def node_config_user_data(*, fast_image_pull: bool) -> str | None:
    """The EC2NodeClass `userData`: a nodeadm NodeConfig (YAML) turning on FastImagePull, or None when off.

    Karpenter merges it with the NodeConfig it generates (cluster, kubelet, labels: its values win), so only the
    feature gate is set here. nodeadm ignores the gate on nodes under 4 vCPU or 7 GiB (every catalogued GPU type is
    above both)."""
    if not fast_image_pull:
        return None
    return (f"apiVersion: {NODECONFIG_API_VERSION}\n"
            "kind: NodeConfig\n"
            "spec:\n"
            "  featureGates:\n"
            "    FastImagePull: true\n")


USER_DATA_BOUNDARY = "GPUBURST-USER-DATA"
"""The MIME boundary of a multi-part user data (never a line of a part: the parts are ours)."""


def node_user_data(*, fast_image_pull: bool, boot_scripts: Iterable[str] = ()) -> str | None:
    """The EC2NodeClass `userData`: the NodeConfig of `node_config_user_data` alone, or, with `boot_scripts`, a MIME
    multi-part document of it (`application/node.eks.aws`) and each script (`text/x-shellscript`), as AL2023 nodeadm
    reads it and Karpenter merges its own NodeConfig into. cloud-init runs the scripts as root before nodeadm starts
    kubelet (`nodeadm-run.service` comes after `cloud-final.service`). None when there is nothing to say."""
    node_config = node_config_user_data(fast_image_pull=fast_image_pull)
    scripts = list(boot_scripts)
    for script in scripts:
        if not (isinstance(script, str) and script.startswith("#!") and USER_DATA_BOUNDARY not in script):
            raise ConfigError("boot_scripts", script, "a shell script starting with '#!' (e.g. '#!/bin/bash')")
    if not scripts:
        return node_config
    parts = ([("application/node.eks.aws", node_config)] if node_config else []) + [
        ('text/x-shellscript; charset="us-ascii"', script) for script in scripts]
    body = "".join(f"--{USER_DATA_BOUNDARY}\nContent-Type: {kind}\n\n{text.rstrip(chr(10))}\n\n"
                   for kind, text in parts)
    return (f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{USER_DATA_BOUNDARY}"\n\n'
            f"{body}--{USER_DATA_BOUNDARY}--\n")


def ec2_nodeclass_manifest(name: str, *, node_role: str, cluster_name: str, ami_alias: str = "al2023@latest",
                           root_volume_gib: int = 100, root_volume_iops: int = 3000,
                           root_volume_throughput_mibps: int = 125, kms_key_id: str | None = None,
                           tags: Mapping[str, str] | None = None, instance_store_policy: str | None = "RAID0",
                           fast_image_pull: bool = True, subnet_selector_tags: Mapping[str, str] | None = None,
                           security_group_selector_tags: Mapping[str, str] | None = None,
                           boot_scripts: Iterable[str] = ()) -> dict[str, Any]:
    """The EC2NodeClass manifest for GPU nodes (a plain dict; raises ConfigError on a bad value).

    Subnets and security groups are selected by `subnet_selector_tags` / `security_group_selector_tags` (the
    platform's GPU subnets and the GPU nodes' own group: `network.GPU_SUBNETS_TAG`, `network.GPU_NODES_TAG`), by
    default the `karpenter.sh/discovery: <cluster_name>` tag that the Cluster component sets. `node_role` is the node
    role's name; Karpenter makes the instance profile itself.
    `instance_store_policy` RAID0 (default) moves kubelet, containerd and SOCI state onto the local NVMe (images
    unpack at NVMe speed, ephemeral storage is the NVMe's size); `fast_image_pull` (default True) adds the NodeConfig
    user data that turns on parallel pull, refused when the images would land on a root volume under 600 MiB/s.
    `boot_scripts` (shell scripts run as root at boot, before kubelet: the model cache's folder) make the user data a
    MIME multi-part document (`node_user_data`).
    """
    tags = dict(tags or {})
    validate({"name": name, "ami_alias": ami_alias, "node_role": node_role, "cluster_name": cluster_name,
              "root_volume_gib": root_volume_gib, "root_volume_iops": root_volume_iops,
              "root_volume_throughput_mibps": root_volume_throughput_mibps,
              "instance_store_policy": instance_store_policy, "fast_image_pull": fast_image_pull}, NODECLASS_RULES)
    _check_tags(tags)
    for field_name, term_list, selector in (
            ("subnet_selector_tags", "subnetSelectorTerms", subnet_selector_tags),
            ("security_group_selector_tags", "securityGroupSelectorTerms", security_group_selector_tags)):
        if isinstance(selector, Mapping) and not selector:
            raise ConfigError(field_name, dict(selector), f"None or a non-empty mapping: spec.{term_list}[0] would be "
                                                          f"{{tags: {{}}}}, {why_empty(['tags'])}")
        if selector is not None and not (isinstance(selector, Mapping) and all(
                isinstance(k, str) and k and isinstance(v, str) and v for k, v in selector.items())):
            raise ConfigError(field_name, selector, "None or a non-empty mapping of tag keys to values, as plain "
                                                    "strings")
    if fast_image_pull and instance_store_policy is None \
            and root_volume_throughput_mibps < catalogue.FAST_IMAGE_PULL_MIN_EBS_MIBPS:
        raise ConfigError("root_volume_throughput_mibps", root_volume_throughput_mibps,
                          f"at least {catalogue.FAST_IMAGE_PULL_MIN_EBS_MIBPS} MiB/s with fast_image_pull and no "
                          "instance-store RAID0 (nodeadm: parallel pulls onto a slower volume are slower, not faster)")
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
    manifest = {
        "apiVersion": NODECLASS_API_VERSION,
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": node_role,
            "amiSelectorTerms": [{"alias": ami_alias}],
            "subnetSelectorTerms": [{"tags": dict(subnet_selector_tags or discovery)}],
            "securityGroupSelectorTerms": [{"tags": dict(security_group_selector_tags or discovery)}],
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
            # Instance-store NVMe is encrypted at rest by the Nitro hardware (XTS-AES-256) and erased when the
            # instance stops, so slide scratch data on the RAID0 is as protected as on the encrypted root volume.
            **({"instanceStorePolicy": instance_store_policy} if instance_store_policy else {}),
            **({"userData": user_data} if (user_data := node_user_data(fast_image_pull=fast_image_pull,
                                                                        boot_scripts=boot_scripts)) else {}),
            **({"tags": tags} if tags else {}),
        },
    }
    # The same rule the pack and verify apply, on the terms as built (whatever fed them).
    empty = find_empty_terms(manifest["spec"])
    if empty:
        path, term, fields = empty[0]
        raise ConfigError(path, dict(term), f"a selector term that selects something: {why_empty(fields)}")
    return manifest


@dataclass
class Ec2NodeClassArgs:
    """Inputs of an Ec2NodeClass (see `ec2_nodeclass_manifest` for the rules)."""

    node_role: str
    """Name (not ARN) of the Karpenter node IAM role, as a plain string (Karpenter.node_role_name)."""
    cluster_name: str
    """EKS cluster name, plain string; also the value of the discovery tag."""
    crd_chart: pulumi.Resource | None = None
    """The `karpenter-crd` chart (Karpenter.crd_chart) the EC2NodeClass waits for. Default None: Karpenter (and its
    CRDs) is installed elsewhere, e.g. by a platform stack this one attaches to."""
    karpenter: Karpenter | ExistingKarpenter | None = None
    """The Karpenter this stack installs, or an ExistingKarpenter another stack runs (its version was checked
    against the catalogue's guards when it was made); the EC2NodeClass waits for its CRD chart, if any. Default None."""
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
    instance_store_policy: str | None = "RAID0"
    """`RAID0` (default): kubelet, containerd and SOCI state on a RAID0 of the local NVMe (types without NVMe keep the
    root volume); None: the instance store is ignored. `instance_store_policy_for(types)` picks it for a family."""
    fast_image_pull: bool = True
    """nodeadm's FastImagePull feature gate (SOCI parallel pull) in the NodeConfig user data. Default True."""
    subnet_selector_tags: dict[str, str] | None = None
    """Tags selecting the GPU nodes' subnets (`subnetSelectorTerms`). Default None: `karpenter.sh/discovery:
    <cluster_name>`; the platform passes `{network.GPU_SUBNETS_TAG: <cluster_name>}` (the subnets with no route out)."""
    security_group_selector_tags: dict[str, str] | None = None
    """Tags selecting the GPU nodes' security groups (`securityGroupSelectorTerms`). Default None:
    `karpenter.sh/discovery: <cluster_name>` (the cluster's group); the platform passes
    `{network.GPU_NODES_TAG: <cluster_name>}` (GpuNodeSecurity's group)."""
    boot_scripts: list[str] = field(default_factory=list)
    """Shell scripts (`#!...`) cloud-init runs as root on every GPU node at boot, before kubelet starts (user data
    `text/x-shellscript` parts; see `node_user_data`). Default none; the platform adds the model cache's folder
    (`model_cache.cache_folder_script`) when a workload has a model. Changing them replaces the GPU nodes (drift)."""


@names_its_errors
class Ec2NodeClass(pulumi.ComponentResource):
    """The EC2NodeClass custom resource (`kubernetes:karpenter.k8s.aws/v1:EC2NodeClass`)."""

    resource: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: Ec2NodeClassArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        manifest = ec2_nodeclass_manifest(
            args.nodeclass_name, node_role=args.node_role, cluster_name=args.cluster_name, ami_alias=args.ami_alias,
            root_volume_gib=args.root_volume_gib, root_volume_iops=args.root_volume_iops,
            root_volume_throughput_mibps=args.root_volume_throughput_mibps, kms_key_id=args.kms_key_id,
            tags=args.tags, instance_store_policy=args.instance_store_policy, fast_image_pull=args.fast_image_pull,
            subnet_selector_tags=args.subnet_selector_tags,
            security_group_selector_tags=args.security_group_selector_tags, boot_scripts=args.boot_scripts)
        super().__init__("gpuburst:index:Ec2NodeClass", name, None, opts)
        self.nodeclass_name: str = args.nodeclass_name
        self.resource = k8s.apiextensions.CustomResource(
            f"{name}-nodeclass", api_version=manifest["apiVersion"], kind=manifest["kind"],
            metadata=manifest["metadata"], spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=crd_charts(args)))
        self.register_outputs({"nodeclassName": self.nodeclass_name})


def crd_charts(args: Any) -> list[pulumi.Resource]:
    """What a Karpenter custom resource (EC2NodeClass, NodePool) waits for: the CRD chart given directly or through
    `karpenter` (args with `crd_chart` and `karpenter` fields)."""
    charts = [args.crd_chart, getattr(args.karpenter, "crd_chart", None)]
    return list(dict.fromkeys(c for c in charts if c is not None))
