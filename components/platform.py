"""GpuBurstPlatform: the whole product composed from the components, driven by one typed StackConfig."""
from __future__ import annotations

import re

import pulumi
import pulumi_kubernetes as k8s

from .cluster import Cluster, ClusterArgs
from .config import StackConfig, WorkloadConfig, support_advisory
from .consumer import GpuConsumer, GpuConsumerArgs
from .device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs
from .existing import ExistingNetwork
from .image import WorkerImage, WorkerImageArgs
from .karpenter import Karpenter, KarpenterArgs
from .keda import Keda, KedaArgs
from .nodeclass import Ec2NodeClass, Ec2NodeClassArgs, instance_store_policy_for
from .nodepool import GpuNodePool, GpuNodePoolArgs
from .planning.chooser import PatternChoice, choose_pattern, require_pattern
from .pod import WorkerPodSettings
from .queue import WorkQueue, WorkQueueArgs
from .scaledjob import GpuScaledJob, GpuScaledJobArgs
from .spec.validation import ConfigError, names_its_errors
from .spec.workload import WorkloadFacts
from .storage import SlideStorage, SlideStorageArgs
from .warm_floor import WarmGpuFloor, WarmGpuFloorArgs

WORKLOAD_NAMESPACE = "gpuburst"
"""Namespace of the worker ScaledJobs and Deployments (Pod Security Standard `restricted`, enforced)."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def workload_facts(w: WorkloadConfig) -> WorkloadFacts:
    """The chooser's facts for one configured workload."""
    return WorkloadFacts(items_independent=w.items_independent, state_across_messages=w.stateful, ordered=w.ordered,
                         model_load_s=w.model_load_s, seconds_per_item=w.seconds_per_item,
                         burst_items=w.burst_items, max_replicas=w.max_replicas)


def choose_patterns(config: StackConfig) -> dict[str, PatternChoice]:
    """Workload name -> chosen pattern; refuses (ConfigError) a forced ScaledJob for ordered or stateful work.

    Pure and run before any resource is declared, so a wrong pattern fails with nothing registered.
    """
    choices = {}
    for w in config.workloads:
        facts = workload_facts(w)
        choices[w.name] = require_pattern(facts, w.pattern) if w.pattern else choose_pattern(facts)
    return choices


@names_its_errors
class GpuBurstPlatform(pulumi.ComponentResource):
    """EKS + Karpenter GPU NodePool + device plugin + KEDA + queues + storage + worker image + workloads."""

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None, *,
                 network: ExistingNetwork | None = None, namespace: str = WORKLOAD_NAMESPACE,
                 create_namespace: bool = True) -> None:
        """`network`: an existing VPC and its subnets for the cluster (default None: the account's default VPC).
        `namespace`: the workloads' namespace (default `gpuburst`); `create_namespace` False when it exists already
        (then it must enforce Pod Security `restricted` itself; default True)."""
        choices = choose_patterns(config)  # before super().__init__: a refusal registers nothing
        if network is not None and not isinstance(network, ExistingNetwork):
            raise ConfigError("GpuBurstPlatform network", network, "an ExistingNetwork(vpc_id, private_subnet_ids)")
        cluster_network = network.cluster_args() if network is not None else {}
        if not (isinstance(namespace, str) and _DNS_LABEL.fullmatch(namespace)):
            raise ConfigError("GpuBurstPlatform namespace", namespace, "a DNS label (lower-case letters, digits, "
                                                                       "'-', at most 63 characters)")
        super().__init__("gpuburst:index:GpuBurstPlatform", name, None, opts)
        support = support_advisory(config)  # a mandatory finding was refused by parse_config already
        if support is not None:
            pulumi.log.warn(f"gpuburst:kubernetesVersion {config.kubernetes_version!r}: {support.message}", self)
        prefix = config.name_prefix
        tags = {"Project": "gpuburst", "Environment": config.environment}
        child = pulumi.ResourceOptions(parent=self)

        self.cluster = Cluster(f"{name}-cluster", ClusterArgs(
            name=prefix, kubernetes_version=config.kubernetes_version,
            support_type=config.upgrade_support_type, endpoint_public_access=config.endpoint_public_access,
            public_access_cidrs=list(config.public_access_cidrs),
            system_instance_types=[config.system_node_instance_type],
            system_desired_size=config.system_node_count,
            system_max_size=max(config.system_node_count, config.system_node_count + 1),
            **cluster_network,
            tags=tags), opts=child)
        # Everything in the cluster goes through the cluster's own provider, after the system nodes exist.
        in_cluster = pulumi.ResourceOptions(parent=self, providers={"kubernetes": self.cluster.k8s_provider})

        self.karpenter = Karpenter(f"{name}-karpenter", KarpenterArgs(
            cluster_name=prefix, version=config.karpenter_version, kubernetes_version=config.kubernetes_version,
            wait_for=list(self.cluster.ready), tags=tags, batch_idle_s=config.karpenter_batch_idle_s,
            batch_max_s=config.karpenter_batch_max_s), opts=in_cluster)
        self.nodeclass = Ec2NodeClass(f"{name}-gpu-nodeclass", Ec2NodeClassArgs(
            node_role=self.karpenter.node_role_name, cluster_name=prefix, crd_chart=self.karpenter.crd_chart,
            ami_alias=config.ami_alias, tags=tags,
            instance_store_policy=(instance_store_policy_for(config.gpu_instance_types)
                                   if config.gpu_instance_store_policy == "RAID0" else None),
            fast_image_pull=config.fast_image_pull), opts=in_cluster)
        self.nodepool = GpuNodePool(f"{name}-gpu-nodepool", GpuNodePoolArgs(
            nodeclass_name=self.nodeclass.nodeclass_name, crd_chart=self.karpenter.crd_chart,
            gpu_limit=config.gpu_limit, instance_types=config.gpu_instance_types,
            capacity_types=config.gpu_capacity_types), opts=in_cluster)
        self.device_plugin = NvidiaDevicePlugin(f"{name}-nvidia-device-plugin", NvidiaDevicePluginArgs(
            cdi_feature_flags=config.device_plugin_cdi_feature_flags),
                                                opts=in_cluster)
        self.keda = Keda(f"{name}-keda", KedaArgs(cluster_name=prefix, version=config.keda_version),
                         opts=in_cluster)

        self.namespace_name = namespace
        self.namespace: k8s.core.v1.Namespace | None = None if not create_namespace else k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": namespace, "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
                "pod-security.kubernetes.io/audit": "restricted",
                "pod-security.kubernetes.io/warn": "restricted"}},
            opts=pulumi.ResourceOptions.merge(in_cluster, pulumi.ResourceOptions(parent=self)))

        namespace_dependency = [self.namespace] if self.namespace is not None else []

        self.storage = SlideStorage(f"{name}-storage", SlideStorageArgs(tags=tags), opts=child)
        self.image = WorkerImage(f"{name}-worker-image", WorkerImageArgs(tags=tags), opts=child)

        # The warm floor's placeholders hold GPU nodes on a schedule; the workloads then run at a higher priority
        # class so a real job preempts a placeholder at once.
        self.warm_floor: WarmGpuFloor | None = None
        workload_priority: list[pulumi.Resource] = []
        if config.warm_gpus is not None:
            warm = config.warm_gpus
            self.warm_floor = WarmGpuFloor(f"{name}-warm-floor", WarmGpuFloorArgs(
                namespace=namespace, count=warm.count, start=warm.start, end=warm.end,
                timezone=warm.timezone, keda_chart=self.keda.chart,
                depends_on=[*namespace_dependency, self.nodepool.resource, self.device_plugin.chart],
                pod=WorkerPodSettings(image=self.image.image_ref)), opts=in_cluster)
            workload_priority = [self.warm_floor.workload_priority_class]

        self.queues: dict[str, WorkQueue] = {}
        self.workloads: dict[str, pulumi.ComponentResource] = {}
        self.choices = choices
        for w in config.workloads:
            queue = WorkQueue(f"{name}-{w.name}-queue", WorkQueueArgs(
                name=f"{prefix}-{w.name}", expected_processing_s=w.expected_processing_s, fifo=w.ordered,
                max_receive_count=config.max_receive_count, alarm_emails=list(config.alarm_emails),
                oldest_message_alarm_s=max(config.oldest_message_alarm_s, 2 * w.expected_processing_s),
                tags=tags), opts=child)
            self.queues[w.name] = queue
            pod = WorkerPodSettings(image=self.image.image_ref, visibility_timeout_s=queue.visibility_timeout_s,
                                    region=config.region,
                                    priority_class_name=self.warm_floor.priority_class_name if self.warm_floor
                                    else None)
            workload_opts = pulumi.ResourceOptions.merge(
                in_cluster, pulumi.ResourceOptions(depends_on=[*namespace_dependency, self.nodepool.resource,
                                                               self.device_plugin.chart, *workload_priority]))
            common = dict(cluster_name=prefix, namespace=namespace, queue_url=queue.queue_url,
                          queue_visibility_timeout_s=queue.visibility_timeout_s,
                          queue_arn=queue.queue_arn, dead_letter_queue_arn=queue.dlq_arn,
                          bucket_arn=self.storage.results_bucket_arn,
                          slides_bucket_arn=self.storage.slides_bucket_arn, pod=pod,
                          slides_prefix=self.storage.slides_prefix, results_prefix=self.storage.results_prefix)
            if choices[w.name].pattern == "scaledjob":
                self.workloads[w.name] = GpuScaledJob(f"{w.name}", GpuScaledJobArgs(
                    keda=self.keda, facts=workload_facts(w), scaler_identity_owner=config.keda_identity_owner,
                    polling_interval_s=config.polling_interval_s, **common), opts=workload_opts)
            else:
                self.workloads[w.name] = GpuConsumer(f"{w.name}", GpuConsumerArgs(facts=workload_facts(w), **common),
                                                     opts=workload_opts)

        self.cluster_name = prefix
        self.kubeconfig_json = self.cluster.kubeconfig_json
        self.queue_urls = {n: q.queue_url for n, q in self.queues.items()}
        self.dead_letter_queue_urls = {n: q.dlq_url for n, q in self.queues.items()}
        self.image_ref = self.image.image_ref
        self.slides_bucket = self.storage.slides_bucket_name
        self.results_bucket = self.storage.results_bucket_name
        self.workload_patterns = {n: {"pattern": c.pattern, "reason": c.reason} for n, c in choices.items()}
        self.worker_role_arns = {n: wl.role_arn for n, wl in self.workloads.items()}
        self.gpu_nodepool_name = self.nodepool.nodepool_name
        self.results_prefix = self.storage.results_prefix
        self.register_outputs({
            "clusterName": self.cluster_name, "queueUrls": self.queue_urls, "imageRef": self.image_ref,
            "workloads": self.workload_patterns})
