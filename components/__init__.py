"""gpuburst: Pulumi components for bursty, queue-driven GPU inference on AWS EKS (`gpuburst` once installed).

The public surface is listed in `__all__`. Names load lazily, so `components.catalogue` (read by the policy pack and
`verify`) does not pull in the Pulumi providers.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    # The whole product
    "GpuBurstPlatform": "platform",
    "StackConfig": "config", "WorkloadConfig": "config", "parse_config": "config", "current_config": "config",
    "WarmGpus": "config", "BurstBudget": "config", "ModelSource": "config", "WorkerBuild": "config",
    # Cluster and nodes
    "Cluster": "cluster", "ClusterArgs": "cluster",
    "Karpenter": "karpenter", "KarpenterArgs": "karpenter",
    "Ec2NodeClass": "nodeclass", "Ec2NodeClassArgs": "nodeclass", "ec2_nodeclass_manifest": "nodeclass",
    "GpuNodePool": "nodepool", "GpuNodePoolArgs": "nodepool", "gpu_nodepool_manifest": "nodepool",
    "NvidiaDevicePlugin": "device_plugin", "NvidiaDevicePluginArgs": "device_plugin",
    # KEDA and the two workload patterns
    "Keda": "keda", "KedaArgs": "keda", "TriggerAuthSpec": "keda",
    "KedaScalerAuth": "keda", "KedaScalerAuthArgs": "keda",
    "WarmGpuFloor": "warm_floor", "WarmGpuFloorArgs": "warm_floor",
    "GpuScaledJob": "scaledjob", "GpuScaledJobArgs": "scaledjob", "ScaledJobSettings": "scaledjob",
    "GpuConsumer": "consumer", "GpuConsumerArgs": "consumer",
    "WorkerPodSettings": "spec.worker_pod", "WorkerAccessArgs": "pod", "ModelMount": "spec.worker_pod",
    "ModelCache": "model_cache", "ModelCacheArgs": "model_cache", "cache_folder_script": "model_cache",
    "ModelCacheAdmission": "model_cache",
    "WorkloadFacts": "spec.workload", "PatternChoice": "planning.chooser", "choose_pattern": "planning.chooser",
    "require_pattern": "planning.chooser",
    # What another stack already runs: referenced, not re-created
    "ExistingKeda": "existing", "ExistingKedaArgs": "existing",
    "ExistingKarpenter": "existing", "ExistingKarpenterArgs": "existing",
    "ExistingCluster": "existing", "ExistingClusterArgs": "existing", "ExistingNodeClass": "existing",
    "ExistingNetwork": "existing",
    # The network boundary: a VPC whose GPU subnets have no route out, and the GPU nodes' own security group
    "WorkloadNetwork": "network", "WorkloadNetworkArgs": "network",
    # A team's namespace beside other teams': Pod Security restricted, default-deny, a resource quota
    "WorkloadNamespace": "workload_namespace", "WorkloadNamespaceArgs": "workload_namespace",
    "GpuNodeSecurity": "network", "GpuNodeSecurityArgs": "network",
    # Queues, storage, image, identity
    "WorkQueue": "queue", "WorkQueueArgs": "queue",
    "SlideStorage": "storage", "SlideStorageArgs": "storage",
    "WorkerImage": "image", "WorkerImageArgs": "image",
    "WorkloadIdentity": "identity", "WorkloadIdentityArgs": "identity",
    "DataKey": "keys", "DataKeyArgs": "keys",
    # Who deploys and from where; who reaches the clinical buckets from outside (spec.deploy_model)
    "DeployAccess": "deploy_access", "DeployModel": "spec.deploy_model", "parse_deploy_model": "spec.deploy_model",
    "DeployRunner": "deploy_runner", "DeployRunnerArgs": "deploy_runner",
    # The audit layer: a CloudTrail trail with the clinical buckets' data events, locked logs, alarms
    "AuditTrail": "audit", "AuditTrailArgs": "audit",
    # verify as code: its RBAC and IAM, and the hook Job
    "VerifyRunner": "verify_runner", "VerifyRunnerArgs": "verify_runner",
    # Errors and the version catalogue
    "ConfigError": "spec.validation",
    "catalogue": "",
}

# Written out (not computed from `_EXPORTS`) so that type checkers read it: a name listed here is re-exported for
# mypy's --strict and pyright. tests/components/test_public_surface.py holds it equal to `_EXPORTS` and to the
# TYPE_CHECKING imports below.
__all__ = ["AuditTrail", "AuditTrailArgs", "BurstBudget", "Cluster", "ClusterArgs", "ConfigError", "DataKey",
           "DataKeyArgs", "DeployAccess", "DeployModel", "DeployRunner", "DeployRunnerArgs", "Ec2NodeClass",
           "Ec2NodeClassArgs", "ExistingCluster", "ExistingClusterArgs", "ExistingKarpenter", "ExistingKarpenterArgs",
           "ExistingKeda", "ExistingKedaArgs", "ExistingNetwork", "ExistingNodeClass", "GpuBurstPlatform",
           "GpuConsumer", "GpuConsumerArgs", "GpuNodePool", "GpuNodePoolArgs", "GpuNodeSecurity",
           "GpuNodeSecurityArgs", "GpuScaledJob", "GpuScaledJobArgs", "Karpenter", "KarpenterArgs", "Keda", "KedaArgs",
           "KedaScalerAuth", "KedaScalerAuthArgs", "ModelCache", "ModelCacheAdmission", "ModelCacheArgs", "ModelMount",
           "ModelSource",
           "NvidiaDevicePlugin", "NvidiaDevicePluginArgs", "PatternChoice", "ScaledJobSettings", "SlideStorage",
           "SlideStorageArgs", "StackConfig", "TriggerAuthSpec", "VerifyRunner", "VerifyRunnerArgs", "WarmGpuFloor",
           "WarmGpuFloorArgs", "WarmGpus", "WorkQueue", "WorkQueueArgs", "WorkerAccessArgs", "WorkerBuild",
           "WorkerImage", "WorkerImageArgs", "WorkerPodSettings", "WorkloadConfig", "WorkloadFacts",
           "WorkloadIdentity", "WorkloadIdentityArgs", "WorkloadNamespace", "WorkloadNamespaceArgs", "WorkloadNetwork",
           "WorkloadNetworkArgs", "cache_folder_script", "catalogue",
           "choose_pattern", "current_config", "ec2_nodeclass_manifest", "gpu_nodepool_manifest", "parse_config",
           "parse_deploy_model", "require_pattern"]

if TYPE_CHECKING:  # what a type checker sees: the same names, imported eagerly (tests/test_public_surface.py)
    from . import catalogue
    from .audit import AuditTrail, AuditTrailArgs
    from .cluster import Cluster, ClusterArgs
    from .config import (
        BurstBudget,
        ModelSource,
        StackConfig,
        WarmGpus,
        WorkerBuild,
        WorkloadConfig,
        current_config,
        parse_config,
    )
    from .consumer import GpuConsumer, GpuConsumerArgs
    from .deploy_access import DeployAccess
    from .deploy_runner import DeployRunner, DeployRunnerArgs
    from .device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs
    from .existing import (
        ExistingCluster,
        ExistingClusterArgs,
        ExistingKarpenter,
        ExistingKarpenterArgs,
        ExistingKeda,
        ExistingKedaArgs,
        ExistingNetwork,
        ExistingNodeClass,
    )
    from .identity import WorkloadIdentity, WorkloadIdentityArgs
    from .image import WorkerImage, WorkerImageArgs
    from .karpenter import Karpenter, KarpenterArgs
    from .keda import Keda, KedaArgs, KedaScalerAuth, KedaScalerAuthArgs, TriggerAuthSpec
    from .keys import DataKey, DataKeyArgs
    from .model_cache import ModelCache, ModelCacheAdmission, ModelCacheArgs, cache_folder_script
    from .network import GpuNodeSecurity, GpuNodeSecurityArgs, WorkloadNetwork, WorkloadNetworkArgs
    from .nodeclass import Ec2NodeClass, Ec2NodeClassArgs, ec2_nodeclass_manifest
    from .nodepool import GpuNodePool, GpuNodePoolArgs, gpu_nodepool_manifest
    from .planning.chooser import PatternChoice, choose_pattern, require_pattern
    from .platform import GpuBurstPlatform
    from .pod import WorkerAccessArgs
    from .queue import WorkQueue, WorkQueueArgs
    from .scaledjob import GpuScaledJob, GpuScaledJobArgs, ScaledJobSettings
    from .spec.deploy_model import DeployModel, parse_deploy_model
    from .spec.validation import ConfigError
    from .spec.worker_pod import ModelMount, WorkerPodSettings
    from .spec.workload import WorkloadFacts
    from .storage import SlideStorage, SlideStorageArgs
    from .verify_runner import VerifyRunner, VerifyRunnerArgs
    from .warm_floor import WarmGpuFloor, WarmGpuFloorArgs
    from .workload_namespace import WorkloadNamespace, WorkloadNamespaceArgs


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f".{_EXPORTS[name] or name}", __name__)
    value = module if not _EXPORTS[name] else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
