"""GpuBurstPlatform: the whole product composed from the components, driven by one typed StackConfig."""
from __future__ import annotations

import re
from collections.abc import Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from .audit import AuditTrail, AuditTrailArgs
from .catalogue import CHARTS
from .catalogue.network import GPU_NODE_MIRRORS, MIRRORED_IMAGES
from .cluster import Cluster, ClusterArgs
from .config import StackConfig, WorkloadConfig, support_advisory
from .consumer import LIVENESS_ENV, GpuConsumer, GpuConsumerArgs
from .deploy_access import DeployAccess
from .deploy_runner import DeployRunner, DeployRunnerArgs
from .device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs
from .existing import ExistingNetwork
from .image import WorkerImage, WorkerImageArgs, lab_image_args
from .karpenter import Karpenter, KarpenterArgs
from .keda import Keda, KedaArgs
from .keys import DataKey, DataKeyArgs
from .model_cache import ModelCache, ModelCacheAdmission, ModelCacheArgs, cache_folder_script
from .network import (
    GPU_NODES_TAG,
    GPU_SUBNETS_TAG,
    GpuNodeSecurity,
    GpuNodeSecurityArgs,
    WorkloadNetwork,
    WorkloadNetworkArgs,
    mirror_copy_commands,
    mirror_image,
)
from .nodeclass import Ec2NodeClass, Ec2NodeClassArgs, instance_store_policy_for
from .nodepool import GpuNodePool, GpuNodePoolArgs
from .planning.chooser import PatternChoice, choose_pattern, require_pattern
from .pod import WorkerPodSettings, default_deny_network_policy, worker_env
from .queue import WorkQueue, WorkQueueArgs
from .scaledjob import GpuScaledJob, GpuScaledJobArgs, settings_for_batch
from .spec.deploy_runner import runner_log_group
from .spec.names import WORKER_IMAGE_CUDA_ANNOTATION, control_plane_log_group
from .spec.validation import ConfigError, names_its_errors
from .spec.worker_pod import ModelMount
from .spec.workload import WorkloadFacts
from .spec.workload_stack_config import WorkloadStackConfig, keda_watch_namespaces, workload_stack_config
from .storage import SlideStorage, SlideStorageArgs
from .verify_runner import VerifyRunner, VerifyRunnerArgs
from .warm_floor import WarmGpuFloor, WarmGpuFloorArgs

WORKLOAD_NAMESPACE = "gpuburst"
"""Namespace of the worker ScaledJobs and Deployments (Pod Security Standard `restricted`, enforced)."""

DEVICE_PLUGIN_IMAGE_SOURCE = "nvcr.io/nvidia/k8s-device-plugin"
"""The device plugin's upstream image (a GPU_NODE_MIRRORS entry): the platform's GPU nodes run its mirrored copy."""
(_PAUSE,) = [i for i in GPU_NODE_MIRRORS if i.repository == "kubernetes/pause"]
PAUSE_SOURCE = _PAUSE.source
PAUSE_TAG_AND_DIGEST = _PAUSE.tag + (f"@{_PAUSE.digest}" if _PAUSE.digest else "")
"""The warm floor's pause image upstream, and the tag (and pinned digest) its mirrored copy keeps."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def workload_facts(w: WorkloadConfig) -> WorkloadFacts:
    """The chooser's facts for one configured workload."""
    return WorkloadFacts(items_independent=w.items_independent, state_across_messages=w.stateful, ordered=w.ordered,
                         model_load_s=w.model_load_s, seconds_per_item=w.seconds_per_item,
                         burst_items=w.burst_items, max_replicas=w.max_replicas)


def check_worker_image_registry(image: str, region: str) -> None:
    """ConfigError naming `gpuburst:workerImage` unless `image` is in an ECR registry of `region`: the platform's own
    GPU subnets have no route out and reach ECR only through the VPC's endpoints (whose policy serves this account's
    repositories; the account is checked there, at pull time)."""
    if not re.match(rf"^\d{{12}}\.dkr\.ecr\.{re.escape(region)}\.amazonaws\.com/", image):
        raise ConfigError("gpuburst:workerImage", image,
                          f"an image in this account's ECR in {region} (ACCOUNT.dkr.ecr.{region}.amazonaws.com/REPO@"
                          "sha256:...): the GPU nodes of the platform's network pull through its VPC endpoints and "
                          "reach no other registry; copy it there (`crane copy SRC DST`) and name the copy")


def worker_model(w: WorkloadConfig, cache_claim: str | None) -> ModelMount | None:
    """The workload's model for its pods (and its role's s3:GetObject), cached on the node under its own name."""
    if w.model is None:
        return None
    return ModelMount(uri=w.model.uri, sha256=w.model.sha256, kms_key_arn=w.model.kms_key_arn,
                      cache_claim=cache_claim, cache_sub_path=w.name, cache_max_bytes=w.model.cache_gib * 2**30)


def choose_patterns(config: StackConfig) -> dict[str, PatternChoice]:
    """Workload name -> chosen pattern; refuses (ConfigError) a forced ScaledJob for ordered or stateful work.

    Pure and run before any resource is declared, so a wrong pattern fails with nothing registered.
    """
    choices = {}
    for w in config.workloads:
        facts = workload_facts(w)
        choices[w.name] = (require_pattern(facts, w.pattern, messages_per_job=w.messages_per_job) if w.pattern
                           else choose_pattern(facts, messages_per_job=w.messages_per_job))
    return choices


@names_its_errors
class GpuBurstPlatform(pulumi.ComponentResource):
    """EKS + Karpenter GPU NodePool + device plugin + KEDA + queues + storage + worker image + workloads."""

    deploy_access: DeployAccess | None
    data_key: DataKey
    bootstrap_only: bool
    cluster: Cluster
    gpu_node_security: GpuNodeSecurity
    karpenter: Karpenter
    nodeclass: Ec2NodeClass
    nodepool: GpuNodePool
    device_plugin: NvidiaDevicePlugin
    keda: Keda
    default_deny: k8s.networking.v1.NetworkPolicy
    model_cache_admission: ModelCacheAdmission
    storage: SlideStorage
    audit: AuditTrail
    kubeconfig_json: pulumi.Output[str]
    queue_urls: dict[str, pulumi.Output[str]]
    dead_letter_queue_urls: dict[str, pulumi.Output[str]]
    slides_bucket: pulumi.Output[str]
    results_bucket: pulumi.Output[str]
    gpu_nodepool_name: str
    results_prefix: str
    workload_patterns: dict[str, dict[str, str]]
    worker_role_arns: dict[str, pulumi.Output[str]]
    workload_stack_config: WorkloadStackConfig

    def __init__(self, name: str, config: StackConfig, opts: pulumi.ResourceOptions | None = None, *,
                 network: ExistingNetwork | None = None, namespace: str = WORKLOAD_NAMESPACE,
                 create_namespace: bool = True, s3_vpc_endpoint_ids: Sequence[pulumi.Input[str]] | None = None,
                 break_glass_role_arns: Sequence[str] | None = None, keda_extra_watch_namespaces: Sequence[str] = (),
                 control_plane_log_retention_days: int = 90,
                 verify_image: pulumi.Input[str] | None = None) -> None:
        """`network`: an existing VPC, its subnets and CIDR for the cluster (default None: the platform creates a
        WorkloadNetwork from `config.vpc_cidr`: GPU subnets with no route out, VPC endpoints).
        `namespace`: the workloads' namespace (default `gpuburst`); `create_namespace` False when it exists already
        (then it must enforce Pod Security `restricted` itself; default True). `s3_vpc_endpoint_ids`: the S3 VPC
        endpoints the slides and results buckets may be reached through; every other request is refused except from
        `break_glass_role_arns` (`SlideStorageArgs`). Default None: the platform's own network's S3 endpoints
        (interface and gateway), none with an existing `network`. KEDA watches only `namespace`, the config's
        `keda_extra_watch_namespaces` (`gpuburst:kedaExtraWatchNamespaces`) and `keda_extra_watch_namespaces`
        (other teams' namespaces with ScaledJobs; default none); `workload_stack_config` lists them, and every other
        value a workload stack on this cluster reads (spec.workload_stack_config).
        `control_plane_log_retention_days`: retention of the EKS control-plane log group (default 90).
        `verify_image`: an image with gpuburst installed, pinned by digest: the platform then declares a
        VerifyRunner (verify's RBAC and IAM, and a hook Job per set of guarded versions). Default None: none (the
        worker image ships worker/ only and cannot run verify)."""
        choices = choose_patterns(config)  # before super().__init__: a refusal registers nothing
        if config.worker_image is not None and network is None:
            check_worker_image_registry(config.worker_image, config.region)
        if network is not None and not isinstance(network, ExistingNetwork):
            raise ConfigError("GpuBurstPlatform network", network, "an ExistingNetwork(vpc_id, private_subnet_ids)")
        cluster_network = network.cluster_args() if network is not None else {}
        # The worker's and the GPU nodes' only HTTPS destination: the VPC (its interface endpoints).
        vpc_cidr = network.egress_cidr() if network is not None else config.vpc_cidr
        existing_gpu_subnets = network.gpu_subnets() if network is not None else None
        if not (isinstance(namespace, str) and _DNS_LABEL.fullmatch(namespace)):
            raise ConfigError("GpuBurstPlatform namespace", namespace, "a DNS label (lower-case letters, digits, "
                                                                       "'-', at most 63 characters)")
        deploy = config.deploy
        if deploy is None and network is None and s3_vpc_endpoint_ids is None:
            raise ConfigError("gpuburst:deploy", None,
                              "a DeployModel (StackConfig.deploy): the platform's clinical buckets refuse every "
                              "request from outside its VPC but the roles the model names, the deployer's too")
        if deploy is not None and break_glass_role_arns is not None:
            raise ConfigError("GpuBurstPlatform break_glass_role_arns", list(break_glass_role_arns),
                              "None with StackConfig.deploy (its breakGlassRoleArns are the ones exempt)")
        super().__init__("gpuburst:index:GpuBurstPlatform", name, None, opts)
        support = support_advisory(config)  # a mandatory finding was refused by parse_config already
        if support is not None:
            pulumi.log.warn(f"gpuburst:kubernetesVersion {config.kubernetes_version!r}: {support.message}", self)
        prefix = config.name_prefix
        tags = {"Project": "gpuburst", "Environment": config.environment}
        models = [w for w in config.workloads if w.model is not None]
        child = pulumi.ResourceOptions(parent=self)
        # Who deploys and from where, as facts in the plan: the pack and `gpuburst rehearse` judge the policies by it.
        self.deploy_access = DeployAccess(f"{name}-deploy-access", deploy, opts=child) if deploy else None
        # One customer-managed key for the stack's data at rest; the workers' roles share an IAM path it names.
        worker_role_path = f"/{prefix}/workers/"
        self.data_key = DataKey(f"{name}-data-key", DataKeyArgs(
            alias=f"alias/{prefix}-data", worker_role_path=worker_role_path, region=config.region,
            log_group_names=[control_plane_log_group(prefix),
                             *([runner_log_group(prefix)] if deploy and deploy.runner else [])],
            tags=tags, deploy_model=deploy), opts=child)
        data_key_arn = self.data_key.key_arn

        # The network boundary (components/network.py): a VPC whose GPU subnets have no route out, unless given one.
        self.network: WorkloadNetwork | None = None
        if network is None:
            self.network = WorkloadNetwork(f"{name}-network", WorkloadNetworkArgs(
                name=prefix, region=config.region, cluster_name=prefix, vpc_cidr=vpc_cidr, tags=tags), opts=child)
            cluster_network = self.network.cluster_args()

        # The in-VPC deploy runner (components/deploy_runner.py): a CodeBuild project in the system subnets whose
        # builds run `pulumi up` as the deployer, so the API endpoint need not be public.
        self.deploy_runner: DeployRunner | None = None
        if deploy is not None and deploy.runner is not None:
            self.deploy_runner = DeployRunner(f"{name}-deploy-runner", DeployRunnerArgs(
                name_prefix=prefix, vpc_id=cluster_network["vpc_id"], subnet_ids=cluster_network["private_subnet_ids"],
                vpc_cidr=vpc_cidr, runner=deploy.runner, stack=pulumi.get_stack(), kms_key_arn=data_key_arn,
                region=config.region, tags=tags), opts=child)
        # The first `up` of a stack whose API endpoint stays private (`deploy.bootstrap`): the key, the network and
        # the in-VPC deploy runner only; every later `up` runs in the runner (README "Deploying for real").
        self.bootstrap_only = deploy is not None and deploy.bootstrap
        if self.bootstrap_only:
            self.register_outputs({"bootstrap": True})
            return

        self.cluster = Cluster(f"{name}-cluster", ClusterArgs(
            name=prefix, kubernetes_version=config.kubernetes_version,
            support_type=config.upgrade_support_type, endpoint_public_access=config.endpoint_public_access,
            public_access_cidrs=list(config.public_access_cidrs) or None,
            system_instance_types=[config.system_node_instance_type],
            system_desired_size=config.system_node_count,
            system_max_size=max(config.system_node_count, config.system_node_count + 1),
            secrets_kms_key_arn=data_key_arn, log_kms_key_arn=data_key_arn,
            log_retention_days=control_plane_log_retention_days,
            api_client_security_group_ids=[self.deploy_runner.security_group_id] if self.deploy_runner else [],
            **cluster_network,
            tags=tags), opts=child)
        # Everything in the cluster goes through the cluster's own provider, after the system nodes exist.
        in_cluster = pulumi.ResourceOptions(parent=self, providers={"kubernetes": self.cluster.k8s_provider})
        # GPU nodes get a security group of their own (HTTPS and DNS into the VPC only), which Karpenter selects.
        self.gpu_node_security = GpuNodeSecurity(f"{name}-gpu-node-security", GpuNodeSecurityArgs(
            vpc_id=self.network.vpc_id if self.network is not None else cluster_network["vpc_id"], vpc_cidr=vpc_cidr,
            cluster_security_group_id=self.cluster.cluster_security_group_id, cluster_name=prefix,
            tag_subnet_ids=existing_gpu_subnets, tags=tags), opts=child)

        self.karpenter = Karpenter(f"{name}-karpenter", KarpenterArgs(
            cluster_name=prefix, version=config.karpenter_version, kubernetes_version=config.kubernetes_version,
            wait_for=[*self.cluster.ready, self.gpu_node_security], tags=tags,
            batch_idle_s=config.karpenter_batch_idle_s, batch_max_s=config.karpenter_batch_max_s,
            node_ssm=config.gpu_node_ssm), opts=in_cluster)
        nodeclass_args = Ec2NodeClassArgs(
            node_role=self.karpenter.node_role_name, cluster_name=prefix, crd_chart=self.karpenter.crd_chart,
            ami_alias=config.ami_alias, tags=tags,
            instance_store_policy=(instance_store_policy_for(config.gpu_instance_types)
                                   if config.gpu_instance_store_policy == "RAID0" else None),
            fast_image_pull=config.fast_image_pull, subnet_selector_tags={GPU_SUBNETS_TAG: prefix},
            security_group_selector_tags={GPU_NODES_TAG: prefix},
            # The model cache's node folder (components/model_cache.py), made before kubelet starts: always, so a
            # lab's workload stack on this cluster may declare a cache of its own (workloadStackConfig says so).
            boot_scripts=[cache_folder_script()])
        self.nodeclass = Ec2NodeClass(f"{name}-gpu-nodeclass", nodeclass_args, opts=in_cluster)
        self.nodepool = GpuNodePool(f"{name}-gpu-nodepool", GpuNodePoolArgs(
            nodeclass_name=self.nodeclass.nodeclass_name, crd_chart=self.karpenter.crd_chart,
            gpu_limit=config.gpu_limit, instance_types=config.gpu_instance_types,
            capacity_types=config.gpu_capacity_types), opts=in_cluster)
        # GPU subnets of the platform's own network have no route out: GPU nodes run the mirrored copies (the
        # one-time `crane copy` lines: network.mirror_copy_commands, docs/platform.md "Network boundary").
        mirrored: dict[str, pulumi.Output[str]] = {}
        if self.network is not None:
            account = aws.get_caller_identity_output().account_id
            mirrored = {image.source: account.apply(lambda a, s=image.source: mirror_image(
                s, account_id=a, region=config.region, name=prefix)) for image in MIRRORED_IMAGES}
        self.mirror_copy_commands: pulumi.Output[list[str]] | list[str] = (
            pulumi.Output.all(**self.network.mirror_repository_urls).apply(mirror_copy_commands)
            if self.network is not None else [])
        self.device_plugin = NvidiaDevicePlugin(f"{name}-nvidia-device-plugin", NvidiaDevicePluginArgs(
            cdi_feature_flags=config.device_plugin_cdi_feature_flags,
            image_repository=mirrored.get(DEVICE_PLUGIN_IMAGE_SOURCE)), opts=in_cluster)
        # the stack's gpuburst:kedaExtraWatchNamespaces, then those a program passes itself
        watched = keda_watch_namespaces(namespace, [*config.keda_extra_watch_namespaces, *keda_extra_watch_namespaces])
        self.keda = Keda(f"{name}-keda", KedaArgs(
            cluster_name=prefix, version=config.keda_version, image_repositories=mirrored,
            watch_namespaces=watched), opts=in_cluster)

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
        # Nothing in the workloads' namespace talks unless a policy of its own allows it (the worker's does).
        deny = default_deny_network_policy(namespace)
        self.default_deny = k8s.networking.v1.NetworkPolicy(
            f"{name}-default-deny", metadata=deny["metadata"], spec=deny["spec"],
            opts=pulumi.ResourceOptions.merge(in_cluster, pulumi.ResourceOptions(depends_on=namespace_dependency)))

        # The clinical buckets answer only through the VPC's S3 endpoints: the interface endpoint the GPU subnets
        # use and the gateway the system subnets route to (a deploy from there stays in), or those given.
        s3_endpoints = (list(s3_vpc_endpoint_ids) if s3_vpc_endpoint_ids is not None
                        else [e.id for k, e in self.network.endpoints.items() if k in ("s3", "s3-gateway")]
                        if self.network is not None else None)
        self.storage = SlideStorage(f"{name}-storage", SlideStorageArgs(
            tags=tags, kms_key_arn=data_key_arn, vpc_endpoint_ids=s3_endpoints or None, deploy_model=deploy,
            break_glass_role_arns=list(break_glass_role_arns) if break_glass_role_arns is not None else None),
            opts=child)
        # Who touched a slide, changed a bucket or key policy, or broke glass: a CloudTrail trail with the clinical
        # buckets' object-level events into an Object-Locked bucket, and alarms (components/audit.py).
        buckets = [self.storage.slides_bucket_arn, self.storage.results_bucket_arn,
                   *([self.storage.access_log_bucket_arn] if self.storage.access_log_bucket_arn else [])]
        self.audit = AuditTrail(f"{name}-audit", AuditTrailArgs(
            name_prefix=prefix, region=config.region, bucket_arns=buckets, key_arns=[data_key_arn],
            break_glass_role_arns=list(deploy.break_glass_role_arns if deploy else break_glass_role_arns or []),
            alarm_emails=list(config.alarm_emails), tags=tags), opts=child)
        # The workers' image: a prebuilt one by digest (nothing built), the lab's build (on top of the built-in image
        # unless it declares its own CUDA), or the built-in image.
        self.image: WorkerImage | None = None
        self.lab_image: WorkerImage | None = None
        if config.worker_image is None and (config.worker_build is None or config.worker_image_cuda is None):
            self.image = WorkerImage(f"{name}-worker-image", WorkerImageArgs(tags=tags), opts=child)
        if config.worker_build is not None:
            self.lab_image = WorkerImage(f"{name}-lab-image", lab_image_args(
                config.worker_build.context, config.worker_build.dockerfile, base=self.image, tags=tags), opts=child)
        built = self.lab_image or self.image
        worker_image: pulumi.Input[str] = config.worker_image if built is None else built.image_ref
        image_annotations = ({WORKER_IMAGE_CUDA_ANNOTATION: config.worker_image_cuda}
                             if config.worker_image_cuda is not None else {})
        # Each namespace's pods mount the model cache only under `<namespace>/` (spec/model_cache_admission.py): always
        # declared, since a workload stack on this cluster may declare a cache of its own.
        self.model_cache_admission = ModelCacheAdmission(f"{name}-model-cache-admission", opts=in_cluster)
        self.model_cache: ModelCache | None = None
        if models:
            self.model_cache = ModelCache(f"{name}-model-cache", ModelCacheArgs(
                namespace=namespace, volume_name=f"{prefix}-{namespace}-model-cache",
                capacity_gib=sum(w.model.cache_gib for w in models if w.model is not None),
                depends_on=namespace_dependency), opts=in_cluster)

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
                pod=WorkerPodSettings(image=worker_image), nodepool=self.nodepool.nodepool_name,
                **({"pause_image": mirrored[PAUSE_SOURCE].apply(lambda r: f"{r}:{PAUSE_TAG_AND_DIGEST}")}
                   if PAUSE_SOURCE in mirrored else {})), opts=in_cluster)
            workload_priority = [self.warm_floor.workload_priority_class]

        self.queues: dict[str, WorkQueue] = {}
        self.workloads: dict[str, GpuScaledJob | GpuConsumer] = {}
        workload_env_names: set[str] = set()  # what verify's identity probe copies (its admission rule's params)
        self.choices = choices
        for w in config.workloads:
            queue = WorkQueue(f"{name}-{w.name}-queue", WorkQueueArgs(
                name=f"{prefix}-{w.name}", expected_processing_s=w.expected_processing_s, fifo=w.ordered,
                max_receive_count=config.max_receive_count, alarm_emails=list(config.alarm_emails),
                oldest_message_alarm_s=max(config.oldest_message_alarm_s, 2 * w.expected_processing_s),
                kms_key_id=data_key_arn, tags=tags), opts=child)
            self.queues[w.name] = queue
            model = worker_model(w, self.model_cache.claim_name if self.model_cache is not None else None)
            pod = WorkerPodSettings(image=worker_image, visibility_timeout_s=queue.visibility_timeout_s,
                                    region=config.region,
                                    priority_class_name=self.warm_floor.priority_class_name if self.warm_floor
                                    else None, model=model, precision=w.precision, annotations=image_annotations)
            workload_env_names.update(e["name"] for e in worker_env(pod, ""))
            cache_dependency = ([self.model_cache, self.model_cache_admission.binding]
                                if model is not None and self.model_cache is not None else [])
            workload_opts = pulumi.ResourceOptions.merge(
                in_cluster, pulumi.ResourceOptions(depends_on=[*namespace_dependency, self.nodepool.resource,
                                                               self.device_plugin.chart, *workload_priority,
                                                               *cache_dependency]))
            common = dict(cluster_name=prefix, namespace=namespace, queue_url=queue.queue_url,
                          queue_visibility_timeout_s=queue.visibility_timeout_s,
                          queue_arn=queue.queue_arn, dead_letter_queue_arn=queue.dlq_arn,
                          bucket_arn=self.storage.results_bucket_arn,
                          slides_bucket_arn=self.storage.slides_bucket_arn, pod=pod,
                          slides_prefix=self.storage.slides_prefix, results_prefix=self.storage.results_prefix,
                          queue_kms_key_arn=data_key_arn, bucket_kms_key_arn=data_key_arn,
                          slides_bucket_kms_key_arn=data_key_arn, role_path=worker_role_path,
                          egress_cidrs=(vpc_cidr,), nodepool=self.nodepool)
            if choices[w.name].pattern == "scaledjob":
                self.workloads[w.name] = GpuScaledJob(f"{w.name}", GpuScaledJobArgs(
                    keda=self.keda, facts=workload_facts(w), scaler_identity_owner=config.keda_identity_owner,
                    settings=settings_for_batch(w.messages_per_job, model_load_s=w.model_load_s,
                                                expected_processing_s=w.expected_processing_s,
                                                max_replica_count=w.max_replicas,
                                                polling_interval_s=config.polling_interval_s),
                    **common), opts=workload_opts)
            else:
                self.workloads[w.name] = GpuConsumer(f"{w.name}", GpuConsumerArgs(facts=workload_facts(w), **common),
                                                     opts=workload_opts)
                workload_env_names.add(LIVENESS_ENV)

        # verify as code: the rights `python -m gpuburst verify` needs, and a hook Job that runs it again whenever a
        # version it guards changes (components/verify_runner.py).
        self.verify_runner: VerifyRunner | None = None
        if verify_image is not None:
            self.verify_runner = VerifyRunner(f"{name}-verify", VerifyRunnerArgs(
                image=verify_image, cluster_name=prefix, region=config.region, namespace=namespace,
                nodepool=self.nodepool.nodepool_name, worker_image=worker_image,
                queue_urls=[q.queue_url for q in self.queues.values()],
                queue_arns=[q.queue_arn for q in self.queues.values()],
                results_bucket=self.storage.results_bucket_name, results_bucket_arn=self.storage.results_bucket_arn,
                results_prefix=self.storage.results_prefix, kms_key_arn=data_key_arn, role_path=worker_role_path,
                egress_cidrs=(vpc_cidr,),
                probe_service_accounts=[getattr(wl, "service_account_name") for wl in self.workloads.values()],
                probe_env_names=sorted(workload_env_names),
                inspected_role_arns=[*(wl.role_arn for wl in self.workloads.values()),
                                     *(wl.scaler.role_arn for wl in self.workloads.values()
                                       if isinstance(wl, GpuScaledJob) and wl.scaler.role_arn is not None),
                                     self.keda.operator_role_arn],
                guarded_versions={"kubernetes": config.kubernetes_version, "karpenter": config.karpenter_version,
                                  "keda": config.keda_version,
                                  "nvidia-device-plugin": CHARTS["nvidia-device-plugin"].version,
                                  "ami-alias": config.ami_alias},
                depends_on=[*namespace_dependency, self.default_deny, self.karpenter.chart, self.keda.chart,
                            self.device_plugin.chart, self.nodepool.resource, *self.workloads.values()]),
                opts=in_cluster)

        self.cluster_name = prefix
        self.kubeconfig_json = self.cluster.kubeconfig_json
        self.queue_urls = {n: q.queue_url for n, q in self.queues.items()}
        self.dead_letter_queue_urls = {n: q.dlq_url for n, q in self.queues.items()}
        self.image_ref = worker_image
        self.slides_bucket = self.storage.slides_bucket_name
        self.results_bucket = self.storage.results_bucket_name
        self.workload_patterns = {n: {"pattern": c.pattern, "reason": c.reason} for n, c in choices.items()}
        self.worker_role_arns = {n: wl.role_arn for n, wl in self.workloads.items()}
        self.gpu_nodepool_name = self.nodepool.nodepool_name
        self.results_prefix = self.storage.results_prefix
        # What a workload stack attached to this cluster reads from its own stack file (docs/workload-stack.md §2).
        self.workload_stack_config = workload_stack_config(
            region=config.region, cluster_name=prefix, vpc_cidr=vpc_cidr, keda_version=self.keda.version,
            keda_operator_role_arn=self.keda.operator_role_arn, keda_watch_namespaces=watched,
            karpenter_version=config.karpenter_version, node_class=self.nodeclass.nodeclass_name,
            node_class_root_volume_gib=nodeclass_args.root_volume_gib, node_class_model_cache_folder=True,
            network_policy_enforced=True,  # Cluster sets the VPC CNI's enable_network_policy (components/cluster.py)
            slides_bucket_arn=self.storage.slides_bucket_arn, results_bucket_arn=self.storage.results_bucket_arn,
            image=worker_image, worker_image=config.worker_image, worker_image_cuda=config.worker_image_cuda)
        self.register_outputs({
            "clusterName": self.cluster_name, "queueUrls": self.queue_urls, "imageRef": self.image_ref,
            "workloads": self.workload_patterns})
