"""Names every room shares: Kubernetes resource names, the labels and taints the GPU NodePool and the worker pods
agree on, the system node group's label. One definition each; the components, the pack and `verify` import them."""
from __future__ import annotations

GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource the NVIDIA device plugin advertises and every GPU pod requests."""

GPU_PRESENT_LABEL = ("nvidia.com/gpu.present", "true")
"""(key, value) of the node label every GPU NodePool sets and the NVIDIA device plugin's DaemonSet selects: without
it the plugin schedules nowhere and `nvidia.com/gpu` is never allocatable."""

GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
"""The taint of every GPU node: only pods that tolerate it (GPU work, the device plugin) land there."""

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
"""The toleration of GPU_TAINT."""

GPU_NODE_SELECTOR = {GPU_PRESENT_LABEL[0]: GPU_PRESENT_LABEL[1]}
"""nodeSelector of a GPU pod: any node with an NVIDIA GPU, never a single instance type, so Karpenter may pick any
GPU type the NodePool allows (the NodePool's node template carries the label, so Karpenter knows before launch)."""

POOL_LABEL = "gpuburst.io/pool"
"""Label naming which pool a node belongs to (the system node group sets `system`)."""

SYSTEM_POOL = "system"
"""Value of POOL_LABEL on the system managed node group (controllers: Karpenter, KEDA, CoreDNS)."""

NODEPOOL_LABEL = "karpenter.sh/nodepool"
"""Label Karpenter sets on every node it launches: the NodePool's name."""

CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
"""Karpenter's well-known label of a node's capacity type (spot, on-demand, reserved)."""

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
"""The well-known label of a node's EC2 instance type."""

WORKER_UID = 10001
"""Numeric user and group id of the worker process (outside the range most base images use for real users)."""

WORKER_LABEL = "gpuburst-worker"
"""Value of `app.kubernetes.io/name` on every worker pod."""

DATA_CLASS_TAG = "gpuburst.io/data-class"
"""Tag key naming what class of data a bucket holds, set by SlideStorage and reserved there (a caller's tags may not
set it): a bucket policy, an SCP or a Macie job can select the clinical buckets by it."""

CLINICAL_SLIDES = "clinical-slides"
"""Value of DATA_CLASS_TAG on the slides and results buckets: whole-slide images of patients' tissue and what was
derived from them."""

ACCESS_LOGS = "access-logs"
"""Value of DATA_CLASS_TAG on the server-access-log bucket: who read or wrote which key (a key can carry a case or
accession number, so the logs are as private as the slides)."""


def control_plane_log_group(cluster_name: str) -> str:
    """The CloudWatch log group EKS writes a cluster's control-plane logs to (`/aws/eks/<cluster>/cluster`, EKS User
    Guide, "Send control plane logs to CloudWatch Logs"); declared before the cluster, EKS writes into it."""
    return f"/aws/eks/{cluster_name}/cluster"


MODEL_CACHE_HOST_PATH = "/var/lib/kubelet/gpuburst-model-cache"
"""The GPU node's folder for the workloads' model cache (`<namespace>/<workload>` inside): inside kubelet's root folder,
which an `instanceStorePolicy: RAID0` node bind-mounts from its local NVMe (AL2023 `setup-local-disks` copies the
folder's contents with `cp -a` before the bind mount, so its owner and mode survive whichever runs first), and which
is on the root volume of a node without one. The GPU node class's user data makes it (root:WORKER_UID, mode 2770:
kubelet makes each workload's subPath folders with that mode, and the setgid bit gives them the worker's group)."""

MODEL_CACHE_CLAIM = "gpuburst-model-cache"
"""Name of the PersistentVolumeClaim (in the workloads' namespace) the worker pods mount the model cache through."""

MODEL_CACHE_DIR_MODE = "2770"
"""Mode of the model cache's node folder: setgid, read-write-search for its owner (root) and group (the worker's)."""


def model_cache_folder_commands(host_path: str = MODEL_CACHE_HOST_PATH) -> tuple[str, str, str]:
    """The shell commands that make the model cache's node folder (root:WORKER_UID, mode MODEL_CACHE_DIR_MODE), one a
    line: `model_cache.cache_folder_script` runs them at boot, and the pack's `model-cache-folder` rule looks for
    each in the user data of an EC2NodeClass whose nodes mount the cache."""
    return (f"mkdir -p {host_path}", f"chown root:{WORKER_UID} {host_path}",
            f"chmod {MODEL_CACHE_DIR_MODE} {host_path}")

WORKER_IMAGE_CUDA_ANNOTATION = "gpuburst.io/worker-image-cuda"
"""Worker pod template annotation carrying the CUDA version (MAJOR.MINOR) of a lab's own worker image
(`gpuburst:workerImageCuda`), so the policy pack can judge the GPUs and the driver it needs."""
