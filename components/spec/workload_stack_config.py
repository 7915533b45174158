"""The platform stack's `workloadStackConfig` output: every value a workload stack attached to its cluster reads from
its own `Pulumi.<stack>.yaml`, under the config key names the examples (examples/lab-scaledjob, ...) read."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NotRequired, TypedDict

from ..catalogue import TORCH_CUDA

if TYPE_CHECKING:
    import pulumi


class WorkloadStackConfig(TypedDict):
    """What the platform team hands a lab (`pulumi stack output workloadStackConfig --json`): each key is a config key
    of the lab's project (`<project>:<key>` in its stack file), `region` aside (`aws:region`), each value what the
    platform runs."""

    region: str
    """The platform's AWS region (its `aws:region`, `StackConfig.region`): it goes to the lab's stack file as
    `aws:region` itself, not under the project prefix, since the AWS provider reads it there (the examples read
    `pulumi.Config("aws").require("region")`); the lab's queue, key and roles must be in the cluster's region."""
    clusterName: str
    """The EKS cluster's name (`ExistingClusterArgs.cluster_name`; the Pod Identity associations name it)."""
    vpcCidr: str
    """The platform VPC's CIDR: the worker's only HTTPS destination, its VPC endpoints (`egress_cidrs`)."""
    kedaVersion: str
    """The KEDA release the platform installs (`ExistingKedaArgs.version`): ScaledJobs are checked against it."""
    kedaOperatorRoleArn: pulumi.Input[str]
    """The KEDA operator's IAM role ARN (`ExistingKedaArgs.operator_role_arn`): the scaler roles trust it."""
    kedaWatchNamespaces: list[str]
    """The namespaces the platform's KEDA watches, in the order its chart is given them: the platform's workload
    namespace, then `gpuburst:kedaExtraWatchNamespaces` (`ExistingKedaArgs.watch_namespaces`)."""
    karpenterVersion: str
    """The Karpenter release the platform installs (`ExistingKarpenterArgs.version`): NodePools are checked against
    it."""
    nodeClass: str
    """The name of the platform's GPU EC2NodeClass, which a lab's GpuNodePool boots (`nodeclass_name`)."""
    nodeClassRootVolumeGiB: int
    """That node class's root volume in GiB (`ExistingNodeClass.root_volume_gib`)."""
    nodeClassModelCacheFolder: bool
    """Whether that node class's user data makes the model cache's node folder, i.e. runs `cache_folder_script()`:
    always True for GpuBurstPlatform's GPU node class (`ExistingNodeClass.model_cache_folder`)."""
    networkPolicyEnforced: bool
    """Whether the cluster's VPC CNI enforces NetworkPolicies (`ExistingClusterArgs.network_policy_enforced`); the
    platform's Cluster turns `enableNetworkPolicy` on."""
    slidesBucketArn: pulumi.Input[str]
    """The platform's slides bucket ARN (`slides_bucket_arn`); the lab reads only under its own slides prefix."""
    resultsBucketArn: pulumi.Input[str]
    """The platform's results bucket ARN (`bucket_arn`); the lab writes only under its own results prefix."""
    image: pulumi.Input[str]
    """The worker image the platform's workloads run, by digest (`WorkerPodSettings.image`)."""
    imageCuda: NotRequired[str]
    """The CUDA version that image is built for (the `gpuburst.io/worker-image-cuda` pod annotation): the stack's
    `gpuburst:workerImageCuda`, else the built-in image's (`catalogue.TORCH_CUDA`). Absent when not known: a
    prebuilt `gpuburst:workerImage` without `gpuburst:workerImageCuda`."""


def keda_watch_namespaces(namespace: str, extra: Sequence[str] = ()) -> list[str]:
    """The namespaces the platform's KEDA watches: `namespace` (the platform's workloads'), then `extra` (other teams'),
    each once, in that order."""
    return list(dict.fromkeys([namespace, *extra]))


def image_cuda(worker_image: str | None, worker_image_cuda: str | None) -> str | None:
    """The CUDA version the platform's worker image is built for: `worker_image_cuda` when the stack declares it, the
    built-in image's (`TORCH_CUDA`, also the base of a `workerBuild`) when no prebuilt `worker_image` is named, None
    for a prebuilt image whose CUDA is not declared."""
    if worker_image_cuda is not None:
        return worker_image_cuda
    return str(TORCH_CUDA["cuda"]) if worker_image is None else None


def workload_stack_config(*, region: str, cluster_name: str, vpc_cidr: str, keda_version: str,
                          keda_operator_role_arn: pulumi.Input[str], keda_watch_namespaces: Sequence[str],
                          karpenter_version: str, node_class: str, node_class_root_volume_gib: int,
                          node_class_model_cache_folder: bool, network_policy_enforced: bool,
                          slides_bucket_arn: pulumi.Input[str], results_bucket_arn: pulumi.Input[str],
                          image: pulumi.Input[str], worker_image: str | None,
                          worker_image_cuda: str | None) -> WorkloadStackConfig:
    """The `workloadStackConfig` output of a platform stack (see WorkloadStackConfig for each key; `region` is the
    platform's `aws:region`). `worker_image` and `worker_image_cuda` are the stack's `gpuburst:workerImage` and
    `gpuburst:workerImageCuda` (None when unset): they decide `imageCuda` (`image_cuda`); `image` is the image ref the
    workloads really run."""
    out = WorkloadStackConfig(
        region=region, clusterName=cluster_name, vpcCidr=vpc_cidr, kedaVersion=keda_version,
        kedaOperatorRoleArn=keda_operator_role_arn, kedaWatchNamespaces=list(keda_watch_namespaces),
        karpenterVersion=karpenter_version, nodeClass=node_class, nodeClassRootVolumeGiB=node_class_root_volume_gib,
        nodeClassModelCacheFolder=node_class_model_cache_folder, networkPolicyEnforced=network_policy_enforced,
        slidesBucketArn=slides_bucket_arn, resultsBucketArn=results_bucket_arn, image=image)
    cuda = image_cuda(worker_image, worker_image_cuda)
    if cuda is not None:
        out["imageCuda"] = cuda
    return out
