"""The cyto-slides workload stack: a KEDA ScaledJob running a lab's own model on the platform's cluster.

Pattern: a GpuScaledJob (independent, stateless slides that arrive in bursts; one Job takes up to 5 messages and
exits, so the 5 slides share one model load). The pods fetch the lab's model from S3, pinned by its SHA-256
(`ModelMount`) and keep it in the node-local model cache (`ModelCache`), so the next Job on a node reads it from
local disk. KEDA, Karpenter, the device plugin and the EC2NodeClass belong to the platform stack: this one
references them (`Existing*`), so every manifest is checked against what really runs there and the policy pack,
run on this plan alone, says in advisories what lives outside it. Walk-through: docs/workload-stack.md.
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
    ExistingKeda,
    ExistingKedaArgs,
    ExistingNodeClass,
    GpuNodePool,
    GpuNodePoolArgs,
    GpuScaledJob,
    GpuScaledJobArgs,
    ModelCache,
    ModelCacheArgs,
    ModelMount,
    ScaledJobSettings,
    WorkerPodSettings,
    WorkloadFacts,
    WorkloadNamespace,
    WorkloadNamespaceArgs,
    WorkQueue,
    WorkQueueArgs,
)

cfg = pulumi.Config()
region = pulumi.Config("aws").require("region")
namespace = cfg.require("namespace")
node_class = cfg.require("nodeClass")
worker_role_path = "/cyto-slides/workers/"  # the lab's key lets roles under this path use it through SQS
messages_per_job = 5

# What the platform stack runs: referenced, never installed a second time.
cluster = ExistingCluster("platform", ExistingClusterArgs(
    cluster_name=cfg.require("clusterName"), network_policy_enforced=cfg.require_bool("networkPolicyEnforced"),
    node_classes={node_class: ExistingNodeClass(root_volume_gib=cfg.require_int("nodeClassRootVolumeGiB"),
                                                model_cache_folder=cfg.require_bool("nodeClassModelCacheFolder"))}))
keda = ExistingKeda("keda", ExistingKedaArgs(version=cfg.require("kedaVersion"),
                                            operator_role_arn=cfg.require("kedaOperatorRoleArn"),
                                            watch_namespaces=cfg.require_object("kedaWatchNamespaces")))
karpenter = ExistingKarpenter("karpenter", ExistingKarpenterArgs(version=cfg.require("karpenterVersion")))

# The lab's namespace: Pod Security `restricted`, default-deny NetworkPolicy, and a quota of 4 GPUs at once.
ns = WorkloadNamespace("cyto", WorkloadNamespaceArgs(name=namespace, gpus=4))

# Who deploys this stack and from where: the pack and `rehearse` judge the key's and the queue's policies by it.
access = DeployAccess("deploy", cfg.require_object("deploy"))
key = DataKey("cyto", DataKeyArgs(alias="alias/cyto-slides-data", worker_role_path=worker_role_path,
                                  deploy_model=access.model))
# expected_processing_s is per message: one slide end to end on a worker whose model is already loaded (the slide's
# download, ~90 s on the GPU, the results' upload), never a whole Job of 5. The queue hides a received message for
# 2 x 240 = 480 s (queue.visibility_timeout_s); the worker renews that every 160 s while it works on the slide.
queue = WorkQueue("cyto", WorkQueueArgs(name="cyto-slides", expected_processing_s=240, kms_key_id=key.key_arn,
                                        alarm_emails=cfg.require_object("alarmEmails")))

# The lab's own GPU pool on the platform's node class: a family of sizes (never one type), capped at 4 GPUs.
pool = GpuNodePool("cyto", GpuNodePoolArgs(nodeclass_name=node_class, nodepool_name="cyto-slides", gpu_limit=4,
                                           instance_types=["g5.2xlarge", "g6.2xlarge", "g6e.2xlarge"],
                                           karpenter=karpenter))

# The node-local model cache: the first Job on a node downloads the model, the next ones there read it from local
# disk. One per namespace (ModelCacheArgs.depends_on, not opts, is what orders its claim after the namespace).
cache = ModelCache("cyto-cache", ModelCacheArgs(namespace=ns.name, volume_name=f"{ns.name}-model-cache",
                                                capacity_gib=20, depends_on=[ns]))

facts = WorkloadFacts(items_independent=True, state_across_messages=False, ordered=False, model_load_s=40,
                      seconds_per_item=90, burst_items=400, max_replicas=4)
model = cfg.require_object("model")
job = GpuScaledJob("cyto", GpuScaledJobArgs(
    cluster_name=cluster.cluster_name, keda=keda, namespace=ns.name, facts=facts,
    nodepool=pool,  # the pods run on this pool's nodes only (and are created after it)
    # KEDA's queueLength and the worker's --max-messages are one number: set both (a mismatch is refused). The
    # Job's deadline, active_deadline_s (default 3,600 s), must exceed model_load_s + 5 x seconds_per_item = 490 s
    # (less is refused) and should cover model_load_s + 5 x expected_processing_s = 1,240 s: 3,600 does both.
    settings=ScaledJobSettings(max_replica_count=facts.max_replicas, queue_length=str(messages_per_job),
                               max_messages_per_job=messages_per_job),
    queue_url=queue.queue_url, queue_arn=queue.queue_arn, dead_letter_queue_arn=queue.dlq_arn,
    queue_kms_key_arn=key.key_arn,
    # The queue's visibility timeout, passed twice: the pod renews on it, and the component checks they agree.
    queue_visibility_timeout_s=queue.visibility_timeout_s, role_path=worker_role_path,
    # HTTPS only into the platform's VPC (its endpoints for SQS, S3, STS, ECR): never the internet.
    egress_cidrs=(cfg.require("vpcCidr"),),
    # The platform's buckets are shared by every team: read only this lab's slides, write only its results.
    bucket_arn=cfg.require("resultsBucketArn"), slides_bucket_arn=cfg.require("slidesBucketArn"),
    slides_prefix="slides/cyto/", results_prefix="results/cyto/",
    pod=WorkerPodSettings(image=cfg.require("image"), visibility_timeout_s=queue.visibility_timeout_s,
                          # the model by digest, kept in the node cache under cyto-slides/cyto
                          region=region, model=ModelMount(uri=model["uri"], sha256=model["sha256"],
                                                           cache_claim=cache.claim_name, cache_sub_path="cyto"),
                          # The image is the platform's, built elsewhere: say which CUDA it needs, so the pack
                          # checks the pool's GPUs and the AMI's driver against it.
                          annotations={"gpuburst.io/worker-image-cuda": cfg.require("imageCuda")})),
    opts=pulumi.ResourceOptions(depends_on=[ns, cache]))

pulumi.export("queueUrl", queue.queue_url)
pulumi.export("workerRoleArn", job.role_arn)
