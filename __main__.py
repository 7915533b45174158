"""The gpuburst Pulumi program: typed stack config -> GpuBurstPlatform -> stack outputs."""
import pulumi

from components.config import current_config, parse_config
from components.platform import GpuBurstPlatform

# Parsed before any resource is declared: a bad key or value stops here, in one line, with nothing registered.
config = parse_config(current_config(), stack=pulumi.get_stack())
platform = GpuBurstPlatform("gpuburst", config, verify_image=config.verify_image)

if platform.bootstrap_only:
    # The bootstrap `up` (gpuburst:deploy.bootstrap): nothing below exists yet; the runner deploys the rest.
    pulumi.export("bootstrap", "done: set gpuburst:deploy.bootstrap to false, then `gpuburst deploy --stack "
                                f"{pulumi.get_stack()}` runs every later `pulumi up` in the in-VPC runner")
else:
    pulumi.export("clusterName", platform.cluster_name)
    pulumi.export("kubeconfig", pulumi.Output.secret(platform.kubeconfig_json))
    pulumi.export("queueUrls", platform.queue_urls)
    pulumi.export("deadLetterQueueUrls", platform.dead_letter_queue_urls)
    pulumi.export("imageRef", platform.image_ref)
    pulumi.export("slidesBucket", platform.slides_bucket)
    pulumi.export("resultsBucket", platform.results_bucket)
    pulumi.export("workloads", platform.workload_patterns)
    pulumi.export("workerRoleArns", platform.worker_role_arns)
    pulumi.export("gpuNodePool", platform.gpu_nodepool_name)
    pulumi.export("namespace", platform.namespace_name)
    pulumi.export("resultsPrefix", platform.results_prefix)
    # Every value a workload stack on this cluster reads, under its config key names (docs/workload-stack.md §2):
    # `pulumi stack output workloadStackConfig --json` is what the platform team hands a lab.
    pulumi.export("workloadStackConfig", platform.workload_stack_config)
    # Run once after the first `pulumi up` (GPU nodes pull these images from the stack's ECR mirror, not the internet).
    pulumi.export("mirrorCopyCommands", platform.mirror_copy_commands)
    if platform.verify_runner is not None:
        # The hook Job of this set of guarded versions: `kubectl -n <namespace> logs job/<name>` is its JSON verdict.
        pulumi.export("verifyJobName", platform.verify_runner.job_name)
