"""References to what another stack already runs (KEDA, Karpenter, the cluster): declare against them, create nothing.

A platform team's stack installs KEDA, Karpenter, the device plugin and the system node group; a lab's workload
stack attaches to that cluster. Passing an `ExistingKeda` where a `Keda` is expected (`GpuScaledJobArgs.keda`,
`KedaScalerAuthArgs.keda`) or an `ExistingKarpenter` to `GpuNodePoolArgs.karpenter` / `Ec2NodeClassArgs.karpenter`
checks every manifest against the versions that really run there, without installing a second chart.

Each reference is a ComponentResource with no children: it creates nothing in AWS or the cluster, but its facts (the
versions, the operator's ServiceAccount, the system-node labels, ...) are its registered properties, so the policy
pack reads them from the plan (`gpuburst:index:ExistingKeda`, `...:ExistingKarpenter`, `...:ExistingCluster`) and
judges the stack's own resources against them instead of reporting their absence. Like `Queue.fromQueueArn`: what
exists is referenced, not re-created.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi

from .catalogue import CHARTS, combination_problems, karpenter_version_problem, keda_version_problem
from .spec.keda_identity import OPERATOR_SERVICE_ACCOUNT, SCALER_ROLE_PATH, check_scaler_role_path
from .spec.names import POOL_LABEL, SYSTEM_POOL
from .spec.validation import ConfigError, names_its_errors


@dataclass
class ExistingKedaArgs:
    """What is known of a KEDA another stack installed."""

    version: str
    """The KEDA version running on the cluster (e.g. "2.20.2"): every TriggerAuthentication and ScaledJob schema is
    checked against it. Required."""
    operator_role_arn: pulumi.Input[str] | None = None
    """ARN of the operator's IAM role (e.g. a StackReference output of the platform stack): the scaler roles trust
    it. Required by a GpuScaledJob with a scaler role (the default). Default None."""
    operator_role_name: pulumi.Input[str] | None = None
    """Name of the operator's role; needed only for `scaler_identity_owner='keda'` (a queue-metrics policy is put on
    that role). Default None."""
    namespace: str = "keda"
    """Namespace KEDA runs in. Default `keda`."""
    operator_service_account: str = OPERATOR_SERVICE_ACCOUNT
    """The operator's ServiceAccount name (the one its Pod Identity association names). Default `keda-operator`."""
    scaler_role_path: str = SCALER_ROLE_PATH
    """IAM path the operator may assume roles under; scaler roles are created there. Default /gpuburst/keda-scaler/."""
    watch_namespaces: Sequence[str] | None = None
    """The namespaces that KEDA watches (the platform's `KedaArgs.watch_namespaces`, its chart's `watchNamespace`;
    KEDA's own namespace is always watched): a ScaledJob of this stack in any other namespace is never scaled, and
    the pack's `keda-watches-namespace` refuses it. `["*"]` (WATCH_ALL) when KEDA watches every namespace. Default
    None: not known (the pack's `outside-this-stack` says it could not check)."""


WATCH_ALL = "*"
"""`ExistingKedaArgs.watch_namespaces` entry meaning: KEDA watches every namespace (its chart's `watchNamespace`
left empty)."""
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def check_watch_list(watch_namespaces: Sequence[str] | None) -> list[str] | None:
    """`watch_namespaces` as a list after the check (namespace names, or the one entry WATCH_ALL); ConfigError in one
    line naming `ExistingKedaArgs.watch_namespaces` otherwise."""
    if watch_namespaces is None:
        return None
    names = list(watch_namespaces) if isinstance(watch_namespaces, (list, tuple)) else None
    if not names or not all(isinstance(n, str) and (n == WATCH_ALL or _NAMESPACE.match(n)) for n in names) \
            or (WATCH_ALL in names and len(names) > 1):
        raise ConfigError("ExistingKedaArgs.watch_namespaces", watch_namespaces,
                          f"a non-empty list of namespace names (DNS labels), or [{WATCH_ALL!r}] when KEDA watches "
                          "every namespace, or None when not known")
    return names


@names_its_errors
class ExistingKeda(pulumi.ComponentResource):
    """A KEDA installed by another stack, in place of `Keda` (no chart, no role: only its facts)."""

    version: str
    namespace: str
    operator_service_account: str
    operator_role_arn: pulumi.Input[str] | None
    operator_role_name: pulumi.Input[str] | None
    scaler_role_path: str
    watch_namespaces: list[str] | None
    chart: pulumi.Resource | None
    """Always None: nothing to wait for (KEDA's CRDs already exist)."""

    def __init__(self, name: str, args: ExistingKedaArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        problem = keda_version_problem(args.version)
        if problem:
            raise ConfigError("ExistingKedaArgs.version", args.version, problem)
        check_scaler_role_path("ExistingKedaArgs.scaler_role_path", args.scaler_role_path)
        for field_name in ("namespace", "operator_service_account"):
            value = getattr(args, field_name)
            if not (isinstance(value, str) and value):
                raise ConfigError(f"ExistingKedaArgs.{field_name}", value, "a non-empty name")
        watched = check_watch_list(args.watch_namespaces)
        facts = {"version": args.version, "namespace": args.namespace,
                 "operatorServiceAccount": args.operator_service_account,
                 "operatorRoleArn": args.operator_role_arn, "scalerRolePath": args.scaler_role_path,
                 "watchNamespaces": watched}
        super().__init__("gpuburst:index:ExistingKeda", name, facts, opts)
        self.version = args.version
        self.namespace = args.namespace
        self.operator_service_account = args.operator_service_account
        self.operator_role_arn = args.operator_role_arn
        self.operator_role_name = args.operator_role_name
        self.scaler_role_path = args.scaler_role_path
        self.watch_namespaces = watched
        self.chart = None
        self.register_outputs(facts)  # the same facts as inputs and outputs, whichever a preview shows the pack


@dataclass
class ExistingKarpenterArgs:
    """What is known of a Karpenter another stack installed."""

    version: str
    """The Karpenter controller version running on the cluster: refused when the catalogue says it must not run
    (1.0.0–1.0.2 swapped the NVIDIA and Neuron AL2023 AMIs). Required."""
    node_role_name: str | None = None
    """Name of the node IAM role Karpenter's instance profiles use; the default `node_role` of an Ec2NodeClass
    given this reference. Default None."""
    namespace: str = CHARTS["karpenter"].namespace
    """Namespace Karpenter runs in. Default: the catalogue's (`kube-system`)."""
    kubernetes_version: str | None = None
    """The cluster's Kubernetes minor, to check the combination against the catalogue. Default None (not checked)."""


@names_its_errors
class ExistingKarpenter(pulumi.ComponentResource):
    """A Karpenter installed by another stack, in place of `Karpenter` for GpuNodePool and Ec2NodeClass."""

    version: str
    namespace: str
    node_role_name: str | None
    crd_chart: pulumi.Resource | None
    """Always None: the CRDs already exist."""

    def __init__(self, name: str, args: ExistingKarpenterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        problem = karpenter_version_problem(args.version)
        if problem:
            raise ConfigError("ExistingKarpenterArgs.version", args.version, problem)
        if args.kubernetes_version is not None:
            problems = combination_problems(kubernetes=args.kubernetes_version, karpenter=args.version)
            if problems:
                raise ConfigError("ExistingKarpenterArgs.kubernetes_version", args.kubernetes_version, problems[0])
        facts = {"version": args.version, "namespace": args.namespace, "nodeRoleName": args.node_role_name}
        super().__init__("gpuburst:index:ExistingKarpenter", name, facts, opts)
        self.version = args.version
        self.namespace = args.namespace
        self.node_role_name = args.node_role_name
        self.crd_chart = None
        self.register_outputs(facts)


@dataclass
class ExistingNodeClass:
    """An EC2NodeClass another stack declared, as far as the pack needs it to judge a NodePool that boots it."""

    root_volume_gib: int
    """Its root volume in GiB (the pods' ephemeral storage comes from it). Required."""
    ami_alias: str = "al2023@latest"
    """Its AMI alias. Default `al2023@latest`."""
    model_cache_folder: bool | None = None
    """Whether its user data makes the model cache's node folder (`names.MODEL_CACHE_HOST_PATH`) as
    `cache_folder_script()` does: GpuBurstPlatform's GPU node class always does (its
    `workloadStackConfig` output's `nodeClassModelCacheFolder`); ask the platform team. A pod of this stack that mounts
    a ModelCache and runs on a NodePool booting this node class needs it True: False fails the pack's
    `model-cache-folder` (without the folder the mount fails and the pods stay ContainerCreating). Default None: not
    known (the pack's `outside-this-stack` says once that it could not check)."""


@dataclass
class ExistingClusterArgs:
    """What is known of the cluster another stack runs."""

    cluster_name: pulumi.Input[str]
    """The EKS cluster's name (Pod Identity associations name it). Required."""
    system_node_labels: dict[str, str] = field(default_factory=lambda: {POOL_LABEL: SYSTEM_POOL})
    """Labels of the system node group's nodes (controllers are placed by them). Default {gpuburst.io/pool: system}."""
    device_plugin: bool = True
    """The NVIDIA device plugin runs on the cluster (installed by the other stack). Default True."""
    network_policy_enforced: bool | None = None
    """The cluster's VPC CNI enforces NetworkPolicies (`enableNetworkPolicy`, as the platform's Cluster sets it), so
    this stack's worker NetworkPolicy is more than a declaration. Default None: not known (the pack says so)."""
    node_classes: dict[str, ExistingNodeClass] = field(default_factory=dict)
    """EC2NodeClasses that live in the other stack, by name, for the NodePools of this one. Default none."""


@names_its_errors
class ExistingCluster(pulumi.ComponentResource):
    """The cluster a workload stack attaches to: its name and the facts the pack needs about it (no resource)."""

    cluster_name: pulumi.Input[str]
    system_node_labels: dict[str, str]

    def __init__(self, name: str, args: ExistingClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        for key, value in args.system_node_labels.items():
            if not (isinstance(key, str) and key and isinstance(value, str)):
                raise ConfigError("ExistingClusterArgs.system_node_labels", {key: value}, "string labels")
        node_classes: dict[str, Any] = {}
        for nc_name, nc in args.node_classes.items():
            if not (isinstance(nc, ExistingNodeClass) and isinstance(nc.root_volume_gib, int)
                    and nc.root_volume_gib > 0):
                raise ConfigError(f"ExistingClusterArgs.node_classes[{nc_name!r}]", nc,
                                  "an ExistingNodeClass with a positive root_volume_gib")
            if nc.model_cache_folder is not None and not isinstance(nc.model_cache_folder, bool):
                raise ConfigError(f"ExistingClusterArgs.node_classes[{nc_name!r}].model_cache_folder",
                                  nc.model_cache_folder, "True (its user data runs cache_folder_script()), False or "
                                                         "None (not known)")
            node_classes[nc_name] = {"rootVolumeGiB": nc.root_volume_gib, "amiAlias": nc.ami_alias}
            if nc.model_cache_folder is not None:  # not known: no fact (the pack's outside-this-stack says so)
                node_classes[nc_name]["modelCacheFolder"] = nc.model_cache_folder
        facts = {"clusterName": args.cluster_name, "systemNodeLabels": dict(args.system_node_labels),
                 "devicePlugin": bool(args.device_plugin), "nodeClasses": node_classes}
        if args.network_policy_enforced is not None:
            if not isinstance(args.network_policy_enforced, bool):
                raise ConfigError("ExistingClusterArgs.network_policy_enforced", args.network_policy_enforced,
                                  "True, False or None (not known)")
            facts["networkPolicyEnforced"] = args.network_policy_enforced
        super().__init__("gpuburst:index:ExistingCluster", name, facts, opts)
        self.cluster_name = args.cluster_name
        self.system_node_labels = dict(args.system_node_labels)
        self.register_outputs(facts)


@dataclass
class ExistingNetwork:
    """A VPC and subnets that exist already, for `GpuBurstPlatform(..., network=...)` (the cluster goes there)."""

    vpc_id: pulumi.Input[str]
    """The VPC's id. Required."""
    private_subnet_ids: Sequence[pulumi.Input[str]]
    """Private subnets for the nodes (system and GPU), tagged for Karpenter's discovery. Required, non-empty."""
    public_subnet_ids: Sequence[pulumi.Input[str]] | None = None
    """Public subnets (load balancers). Default None."""
    vpc_cidr: str | None = None
    """The VPC's private IPv4 CIDR, plain string: the only HTTPS destination of the worker NetworkPolicy and the GPU
    nodes' security group (the VPC's interface endpoints, `catalogue.VPC_ENDPOINTS`, must answer there). Required by
    GpuBurstPlatform; default None only so that the field order stays."""
    gpu_subnet_ids: Sequence[pulumi.Input[str]] | None = None
    """Subnets for the GPU nodes (ideally with no route out of the VPC), tagged `network.GPU_SUBNETS_TAG` for
    Karpenter. Default None: the private subnets."""

    def cluster_args(self) -> dict[str, Any]:
        """The ClusterArgs fields this network sets."""
        if not self.private_subnet_ids:
            raise ConfigError("ExistingNetwork.private_subnet_ids", self.private_subnet_ids,
                              "a non-empty list of subnet ids (the nodes go there)")
        return {"vpc_id": self.vpc_id, "private_subnet_ids": list(self.private_subnet_ids),
                "public_subnet_ids": list(self.public_subnet_ids) if self.public_subnet_ids else None}

    def egress_cidr(self) -> str:
        """`vpc_cidr` after the check (a private IPv4 CIDR, never the world): ConfigError in one line otherwise."""
        from .network import private_cidr_problem

        problem = "required: the VPC's CIDR" if self.vpc_cidr is None else private_cidr_problem(self.vpc_cidr)
        if problem:
            raise ConfigError("ExistingNetwork.vpc_cidr", self.vpc_cidr,
                              f"{problem} (e.g. '10.0.0.0/16'): the worker and the GPU nodes send HTTPS only there")
        return self.vpc_cidr

    def gpu_subnets(self) -> list[pulumi.Input[str]]:
        """The GPU nodes' subnets: `gpu_subnet_ids`, else the private subnets."""
        if self.gpu_subnet_ids is not None and not (isinstance(self.gpu_subnet_ids, (list, tuple))
                                                    and self.gpu_subnet_ids):
            raise ConfigError("ExistingNetwork.gpu_subnet_ids", self.gpu_subnet_ids,
                              "None or a non-empty list of subnet ids")
        return list(self.gpu_subnet_ids or self.private_subnet_ids)
