"""The tils-lab workload stack: its namespace, one queue, one GPU NodePool and one ScaledJob attached to the
platform's cluster, side by side with other teams' (its pods run only on its own pool, its namespace has a quota).

KEDA, Karpenter, the device plugin and the EC2NodeClass belong to the platform stack; this one references them
(`Existing*`: nothing is installed twice) so that every manifest is checked against what really runs there, and so
that the policy pack, run on this stack's plan alone, judges the wiring inside it and says in advisories what lives
outside it.
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
    WorkerPodSettings,
    WorkloadFacts,
    WorkloadNamespace,
    WorkloadNamespaceArgs,
    WorkQueue,
    WorkQueueArgs,
)

cfg = pulumi.Config()
namespace = cfg.require("namespace")
node_class = cfg.require("nodeClass")
worker_role_path = "/tils-lab/workers/"

cluster = ExistingCluster("platform", ExistingClusterArgs(
    cluster_name=cfg.require("clusterName"), network_policy_enforced=cfg.require_bool("networkPolicyEnforced"),
    node_classes={node_class: ExistingNodeClass(root_volume_gib=cfg.require_int("nodeClassRootVolumeGiB"),
                                                model_cache_folder=cfg.require_bool("nodeClassModelCacheFolder"))}))
# KEDA scales only the namespaces it watches: the platform lists ours (keda_extra_watch_namespaces), and the pack
# refuses a ScaledJob in a namespace this list does not hold.
keda = ExistingKeda("keda", ExistingKedaArgs(version=cfg.require("kedaVersion"),
                                            operator_role_arn=cfg.require("kedaOperatorRoleArn"),
                                            watch_namespaces=cfg.require_object("kedaWatchNamespaces")))
karpenter = ExistingKarpenter("karpenter", ExistingKarpenterArgs(version=cfg.require("karpenterVersion")))

# Who deploys this stack and from where (the same facts as the platform's gpuburst:deploy): the pack and
# `gpuburst rehearse --project-dir examples/another-team --stack lab` judge the key and queue policies by them.
access = DeployAccess("deploy", cfg.require_object("deploy"))
# The lab's own key for its queue's messages (slide references and study ids): rotation on, usable by the lab's
# worker roles only through SQS.
key = DataKey("tils", DataKeyArgs(alias="alias/tils-lab-data", worker_role_path=worker_role_path,
                                  deploy_model=access.model))
queue = WorkQueue("tils", WorkQueueArgs(name="tils-lab-slides", expected_processing_s=300, kms_key_id=key.key_arn,
                                        alarm_emails=cfg.require_object("alarmEmails")))
# The lab's own namespace (Pod Security restricted, default-deny, a quota of the lab's 4 GPUs) and its own pool.
team = WorkloadNamespace("tils", WorkloadNamespaceArgs(name=namespace, gpus=4))
pool = GpuNodePool("tils", GpuNodePoolArgs(nodeclass_name=node_class, nodepool_name="tils-lab", gpu_limit=4,
                                           instance_types=["g5.xlarge", "g5.2xlarge", "g6.xlarge", "g6.2xlarge"],
                                           karpenter=karpenter))
job = GpuScaledJob("tils", GpuScaledJobArgs(
    cluster_name=cluster.cluster_name, keda=keda, namespace=namespace,
    facts=WorkloadFacts(items_independent=True, state_across_messages=False, ordered=False, model_load_s=30,
                        seconds_per_item=6, burst_items=120, max_replicas=4),
    queue_url=queue.queue_url, queue_arn=queue.queue_arn, dead_letter_queue_arn=queue.dlq_arn,
    queue_visibility_timeout_s=queue.visibility_timeout_s, role_path=worker_role_path,
    # HTTPS only into the platform's VPC (its endpoints for SQS, S3, STS, ECR): never the internet.
    egress_cidrs=[cfg.require("vpcCidr")],
    # The pods select karpenter.sh/nodepool: tils-lab, so they never take another team's GPUs.
    nodepool=pool,
    bucket_arn=cfg.require("resultsBucketArn"), slides_bucket_arn=cfg.require("slidesBucketArn"),
    # The platform's buckets are shared: the lab's worker reads and writes only under the lab's own prefixes.
    slides_prefix="slides/tils/", results_prefix="results/tils/",
    pod=WorkerPodSettings(image=cfg.require("image"), visibility_timeout_s=queue.visibility_timeout_s,
                          region=pulumi.Config("aws").require("region"))),
    opts=pulumi.ResourceOptions(depends_on=[team]))

pulumi.export("queueUrl", queue.queue_url)
pulumi.export("workerRoleArn", job.role_arn)
