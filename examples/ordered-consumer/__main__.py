"""The cyto-studies workload stack: one persistent GPU consumer reading a FIFO queue, on the platform's cluster.

Pattern: a GpuConsumer (ordered work with per-study state: the slides of one study must be read in sequence by the
process that holds that study's running totals). The queue is FIFO; producers send each slide with
MessageGroupId = its study, so one study's slides come in order while studies interleave. One pod loads the model
once and stays up on an on-demand node. Karpenter, the device plugin and the EC2NodeClass belong to the platform
stack: this one references them (`Existing*`). Walk-through: docs/workload-stack.md.
"""
import pulumi

from gpuburst import (
    DataKey,
    DataKeyArgs,
    DeployAccess,
    ExistingCluster,
    ExistingClusterArgs,
    ExistingKarpenter,
    ExistingKarpenterArgs,
    ExistingNodeClass,
    GpuConsumer,
    GpuConsumerArgs,
    GpuNodePool,
    GpuNodePoolArgs,
    WorkerPodSettings,
    WorkloadFacts,
    WorkloadNamespace,
    WorkloadNamespaceArgs,
    WorkQueue,
    WorkQueueArgs,
    require_pattern,
)

cfg = pulumi.Config()
region = pulumi.Config("aws").require("region")
namespace = cfg.require("namespace")
node_class = cfg.require("nodeClass")
worker_role_path = "/cyto-studies/workers/"

cluster = ExistingCluster("platform", ExistingClusterArgs(
    cluster_name=cfg.require("clusterName"), network_policy_enforced=cfg.require_bool("networkPolicyEnforced"),
    node_classes={node_class: ExistingNodeClass(root_volume_gib=cfg.require_int("nodeClassRootVolumeGiB"),
                                                model_cache_folder=cfg.require_bool("nodeClassModelCacheFolder"))}))
karpenter = ExistingKarpenter("karpenter", ExistingKarpenterArgs(version=cfg.require("karpenterVersion")))

# The facts decide the pattern: ordered, stateful work runs as one consumer. require_pattern refuses the other
# pattern in one line; here it states the choice and its estimate before anything is declared.
facts = WorkloadFacts(items_independent=False, state_across_messages=True, ordered=True, model_load_s=45,
                      seconds_per_item=8, burst_items=20, max_replicas=1)
choice = require_pattern(facts, "consumer")
pulumi.log.info(f"cyto-studies: {choice.pattern}: {choice.reason}")

# The lab's namespace: Pod Security `restricted`, default-deny NetworkPolicy, and a quota of 1 GPU at once.
ns = WorkloadNamespace("studies", WorkloadNamespaceArgs(name=namespace, gpus=1))

access = DeployAccess("deploy", cfg.require_object("deploy"))
key = DataKey("studies", DataKeyArgs(alias="alias/cyto-studies-data", worker_role_path=worker_role_path,
                                     deploy_model=access.model))
# fifo=True: `<name>.fifo` queues with content-based deduplication; one message group per study.
# expected_processing_s: one slide end to end with the model loaded (download, ~8 s on the GPU, upload); the
# queue hides a received message for 2 x 120 = 240 s (queue.visibility_timeout_s).
queue = WorkQueue("studies", WorkQueueArgs(name="cyto-studies", fifo=True, expected_processing_s=120,
                                           kms_key_id=key.key_arn, alarm_emails=cfg.require_object("alarmEmails")))

# The consumer's pod selects on-demand nodes (a spot reclaim would take its model and per-study state): the pool
# must allow on-demand. One GPU is all it needs; a second size keeps it schedulable when one type runs short.
pool = GpuNodePool("studies", GpuNodePoolArgs(nodeclass_name=node_class, nodepool_name="cyto-studies", gpu_limit=2,
                                              instance_types=["g5.2xlarge", "g6.2xlarge"],
                                              capacity_types=["on-demand"], karpenter=karpenter))

consumer = GpuConsumer("studies", GpuConsumerArgs(
    cluster_name=cluster.cluster_name, namespace=ns.name, facts=facts,
    nodepool=pool,  # the pod runs on this pool's nodes only (and is created after it)
    queue_url=queue.queue_url, queue_arn=queue.queue_arn, dead_letter_queue_arn=queue.dlq_arn,
    queue_kms_key_arn=key.key_arn, queue_visibility_timeout_s=queue.visibility_timeout_s,
    role_path=worker_role_path, egress_cidrs=(cfg.require("vpcCidr"),),
    # The platform's buckets are shared by every team: read only this lab's slides, write only its results.
    bucket_arn=cfg.require("resultsBucketArn"), slides_bucket_arn=cfg.require("slidesBucketArn"),
    slides_prefix="slides/studies/", results_prefix="results/studies/",
    pod=WorkerPodSettings(image=cfg.require("image"), visibility_timeout_s=queue.visibility_timeout_s,
                          region=region, annotations={"gpuburst.io/worker-image-cuda": cfg.require("imageCuda")})),
    opts=pulumi.ResourceOptions(depends_on=[ns]))

pulumi.export("queueUrl", queue.queue_url)
pulumi.export("workerRoleArn", consumer.role_arn)
