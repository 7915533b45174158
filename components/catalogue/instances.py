"""Instance facts: the NVIDIA x86-64 GPU instance types the stack may launch, as Karpenter sees them, and what the
worker's torch build needs of their GPUs and drivers."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# --------------------------------------------------------------------------------------------------------------------
# Instance facts: the NVIDIA x86-64 GPU instance types the stack may launch, as Karpenter sees them.
# --------------------------------------------------------------------------------------------------------------------

__all__ = [
    "INSTANCE_FACTS_SOURCE",
    "DEFAULT_ROOT_VOLUME_GIB",
    "KUBE_RESERVED_EPHEMERAL_GIB",
    "EVICTION_HARD_NODEFS_AVAILABLE",
    "allocatable_ephemeral_gib",
    "COMPUTE_CAPABILITY",
    "InstanceType",
    "INSTANCE_TYPES",
    "INSTANCE_FAMILIES",
    "EXCLUDED_INSTANCE_FAMILIES",
    "instance_type",
    "instance_type_expectation",
    "instance_type_problem",
    "TORCH_CUDA",
    "AL2023_NVIDIA_DRIVER",
    "AL2023_NVIDIA_DRIVERS_BY_RELEASE",
    "CUDA_RUNTIME_FLOORS",
    "CUDA_RUNTIME_FLOORS_SOURCE",
    "MODEL_CACHE_DEFAULT_GIB",
    "MODEL_CACHE_MAX_GIB",
]

INSTANCE_FACTS_SOURCE = (
    "aws/karpenter-provider-aws v1.14.1 (bde00654) website/content/en/docs/reference/instance-types.md and "
    "pkg/providers/pricing/zz_generated.pricing_aws.go (generated 2026-07-06)")
"""Where every figure of `INSTANCE_TYPES` comes from (tests/components/test_instance_facts.py checks them all)."""

DEFAULT_ROOT_VOLUME_GIB = 20
"""Root volume Karpenter gives an AL2023 node when the EC2NodeClass sets no blockDeviceMappings, in GiB."""

KUBE_RESERVED_EPHEMERAL_GIB = 1.0
"""Karpenter's default kubeReserved `ephemeral-storage` (1Gi), in GiB."""

EVICTION_HARD_NODEFS_AVAILABLE = 0.10
"""Karpenter's default evictionHard `nodefs.available` (10%), as a fraction of the root volume."""


def allocatable_ephemeral_gib(root_volume_gib: float) -> float:
    """Allocatable `ephemeral-storage` Karpenter computes for a node whose root volume is `root_volume_gib` GiB.

    Karpenter subtracts kubeReserved ephemeral-storage (1Gi) and the evictionHard `nodefs.available` threshold (10% of
    the volume) from the root volume: `0.9 * root - 1`. The reference's 17Gi for every type is this for the default
    20 GiB (`20 - 1 - 2`). Pass the EC2NodeClass's root `blockDeviceMappings` `ebs.volumeSize` (in GiB). An
    `instanceStorePolicy: RAID0` node uses its local NVMe for ephemeral storage instead; this formula does not apply.
    """
    if isinstance(root_volume_gib, bool) or not isinstance(root_volume_gib, (int, float)) or root_volume_gib <= 0:
        raise ValueError(f"root_volume_gib: {root_volume_gib!r} is not valid: a positive number of GiB")
    return round(root_volume_gib * (1 - EVICTION_HARD_NODEFS_AVAILABLE) - KUBE_RESERVED_EPHEMERAL_GIB, 3)


COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    # NVIDIA's CUDA GPU compute capability table, keyed by Karpenter's instance-gpu-name.
    "t4": (7, 5), "v100": (7, 0), "a10g": (8, 6), "l4": (8, 9), "l40s": (8, 9), "a100": (8, 0),
    "h100": (9, 0), "h200": (9, 0), "b200": (10, 0), "b300": (10, 3),
}
"""CUDA compute capability (major, minor) of each GPU the catalogue's instance types carry."""


@dataclass(frozen=True)
class InstanceType:
    """One EC2 GPU instance type: its Karpenter labels, the allocatable resources Karpenter computes, its price."""

    name: str
    """Instance type, e.g. `g5.xlarge` (label node.kubernetes.io/instance-type)."""
    family: str
    """Family, e.g. `g5` (karpenter.k8s.aws/instance-family)."""
    vcpu: int
    """vCPUs (karpenter.k8s.aws/instance-cpu)."""
    memory_mib: int
    """Instance memory in MiB (karpenter.k8s.aws/instance-memory)."""
    gpus: int
    """Number of GPUs (karpenter.k8s.aws/instance-gpu-count; equals the allocatable `nvidia.com/gpu`)."""
    gpu_name: str
    """GPU model as Karpenter labels it, e.g. `a10g`, `t4`, `v100` (karpenter.k8s.aws/instance-gpu-name)."""
    gpu_memory_mib: int
    """Memory of ONE GPU in MiB (karpenter.k8s.aws/instance-gpu-memory)."""
    compute_capability: tuple[int, int]
    """CUDA compute capability of the GPU, e.g. (8, 6) for A10G (from `COMPUTE_CAPABILITY`)."""
    local_nvme_gb: int
    """Local NVMe instance storage in GB (karpenter.k8s.aws/instance-local-nvme); 0 if none."""
    allocatable_cpu_m: int
    """Allocatable CPU in millicores after kube-reserved and system overhead, e.g. 3920."""
    allocatable_memory_mib: int
    """Allocatable memory in MiB after kube-reserved, eviction threshold and VM overhead, e.g. 14162."""
    allocatable_ephemeral_gib: float
    """Allocatable ephemeral storage in GiB for the default 20 GiB root volume (17); for another root volume use
    `allocatable_ephemeral_gib(volume_size_gib)`."""
    allocatable_pods: int
    """Most pods Karpenter lets the node hold (ENI-limited max pods)."""
    on_demand_usd_per_hour: float
    """On-demand price in us-east-1, USD per hour (Karpenter's built-in price table)."""


# (name, vcpu, memory MiB, GPUs, GPU name, GPU MiB, local NVMe GB, allocatable cpu m, allocatable memory MiB,
#  allocatable pods, us-east-1 on-demand USD/h), from INSTANCE_FACTS_SOURCE; every size of each family listed there.
_INSTANCE_ROWS: tuple[tuple, ...] = (
    ("g4dn.xlarge", 4, 16384, 1, "t4", 16384, 125, 3920, 14481, 29, 0.526),
    ("g4dn.2xlarge", 8, 32768, 1, "t4", 16384, 225, 7910, 29636, 29, 0.752),
    ("g4dn.4xlarge", 16, 65536, 1, "t4", 16384, 225, 15890, 59946, 29, 1.204),
    ("g4dn.8xlarge", 32, 131072, 1, "t4", 16384, 900, 31850, 120248, 58, 2.176),
    ("g4dn.12xlarge", 48, 196608, 4, "t4", 16384, 900, 47810, 178933, 234, 3.912),
    ("g4dn.16xlarge", 64, 262144, 1, "t4", 16384, 900, 63770, 241490, 58, 4.352),
    ("g4dn.metal", 96, 393216, 8, "t4", 16384, 1800, 95690, 355262, 737, 7.824),
    ("g5.xlarge", 4, 16384, 1, "a10g", 22888, 250, 3920, 14162, 58, 1.006),
    ("g5.2xlarge", 8, 32768, 1, "a10g", 22888, 450, 7910, 29317, 58, 1.212),
    ("g5.4xlarge", 16, 65536, 1, "a10g", 22888, 600, 15890, 57691, 234, 1.624),
    ("g5.8xlarge", 32, 131072, 1, "a10g", 22888, 900, 31850, 118312, 234, 2.448),
    ("g5.12xlarge", 48, 196608, 4, "a10g", 22888, 3800, 47810, 173400, 737, 5.672),
    ("g5.16xlarge", 64, 262144, 1, "a10g", 22888, 1900, 63770, 239554, 234, 4.096),
    ("g5.24xlarge", 96, 393216, 4, "a10g", 22888, 3800, 95690, 355262, 737, 8.144),
    ("g5.48xlarge", 192, 786432, 8, "a10g", 22888, 7600, 191450, 723299, 345, 16.288),
    ("g6.xlarge", 4, 16384, 1, "l4", 22888, 250, 3920, 14162, 58, 0.8048),
    ("g6.2xlarge", 8, 32768, 1, "l4", 22888, 450, 7910, 29317, 58, 0.9776),
    ("g6.4xlarge", 16, 65536, 1, "l4", 22888, 600, 15890, 57691, 234, 1.3232),
    ("g6.8xlarge", 32, 131072, 1, "l4", 22888, 900, 31850, 118312, 234, 2.0144),
    ("g6.12xlarge", 48, 196608, 4, "l4", 22888, 3760, 47810, 178933, 234, 4.6016),
    ("g6.16xlarge", 64, 262144, 1, "l4", 22888, 1880, 63770, 234021, 737, 3.3968),
    ("g6.24xlarge", 96, 393216, 4, "l4", 22888, 3760, 95690, 355262, 737, 6.6752),
    ("g6.48xlarge", 192, 786432, 8, "l4", 22888, 7520, 191450, 718987, 737, 13.3504),
    ("g6e.xlarge", 4, 32768, 1, "l40s", 45776, 250, 3920, 29317, 58, 1.861),
    ("g6e.2xlarge", 8, 65536, 1, "l40s", 45776, 450, 7910, 59627, 58, 2.24208),
    ("g6e.4xlarge", 16, 131072, 1, "l40s", 45776, 600, 15890, 118312, 234, 3.00424),
    ("g6e.8xlarge", 32, 262144, 1, "l40s", 45776, 900, 31850, 239554, 234, 4.52856),
    ("g6e.12xlarge", 48, 393216, 4, "l40s", 45776, 3800, 47810, 360157, 292, 10.49264),
    ("g6e.16xlarge", 64, 524288, 1, "l40s", 45776, 1900, 63770, 476504, 737, 7.57719),
    ("g6e.24xlarge", 96, 786432, 4, "l40s", 45776, 3800, 95690, 721682, 492, 15.06559),
    ("g6e.48xlarge", 192, 1572864, 8, "l40s", 45776, 7600, 191450, 1449132, 492, 30.13118),
    ("gr6.4xlarge", 16, 131072, 1, "l4", 22888, 600, 15890, 118312, 234, 1.5392),
    ("gr6.8xlarge", 32, 262144, 1, "l4", 22888, 900, 31850, 239554, 234, 2.4464),
    ("p3dn.24xlarge", 96, 786432, 8, "v100", 32768, 1800, 95690, 718987, 737, 31.212),
    ("p4d.24xlarge", 96, 1179648, 8, "a100", 40960, 8000, 95690, 1082712, 737, 21.957642),
    ("p4de.24xlarge", 96, 1179648, 8, "a100", 81920, 8000, 95690, 1082712, 737, 27.44705),
    ("p5.4xlarge", 16, 262144, 1, "h100", 81920, 3800, 15890, 240830, 118, 6.88),
    ("p5.48xlarge", 192, 2097152, 8, "h100", 81920, 30400, 191450, 1938410, 100, 55.04),
    ("p5en.48xlarge", 192, 2097152, 8, "h200", 144384, 30400, 191450, 1937332, 198, 63.296),
    ("p6-b200.48xlarge", 192, 2097152, 8, "b200", 183359, 30400, 191450, 1937332, 198, 113.9328),
    ("p6-b300.48xlarge", 192, 4194304, 8, "b300", 275040, 30400, 191450, 3877198, 198, 142.416),
)

INSTANCE_TYPES: dict[str, InstanceType] = {
    row[0]: InstanceType(
        name=row[0], family=row[0].split(".", 1)[0], vcpu=row[1], memory_mib=row[2], gpus=row[3], gpu_name=row[4],
        gpu_memory_mib=row[5], compute_capability=COMPUTE_CAPABILITY[row[4]], local_nvme_gb=row[6],
        allocatable_cpu_m=row[7], allocatable_memory_mib=row[8],
        allocatable_ephemeral_gib=allocatable_ephemeral_gib(DEFAULT_ROOT_VOLUME_GIB), allocatable_pods=row[9],
        on_demand_usd_per_hour=row[10])
    for row in _INSTANCE_ROWS
}
"""The NVIDIA x86-64 GPU instance types the stack may launch, keyed by name (see `EXCLUDED_INSTANCE_FAMILIES`)."""

INSTANCE_FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(t.family for t in INSTANCE_TYPES.values()))
"""The families of `INSTANCE_TYPES`, in table order."""

EXCLUDED_INSTANCE_FAMILIES: dict[str, str] = {
    "g4ad": "AMD Radeon GPUs, not NVIDIA (no CUDA)",
    "g5g": "Graviton (arm64): the GPU NodePool and the worker image are amd64 only",
    "g6f": "fractional L4 GPU (instance-gpu-count 0, no nvidia.com/gpu advertised): a GPU pod never schedules",
    "gr6f": "fractional L4 GPU (instance-gpu-count 0, no nvidia.com/gpu advertised): a GPU pod never schedules",
    "g7e": "RTX PRO 6000 Blackwell needs NVIDIA driver >= 595; the EKS AL2023 NVIDIA AMI ships 580",
    "p5e": "not sold on demand in us-east-1 (absent from Karpenter's price table)",
    "p3": "not in Karpenter v1.14.1's instance-type reference (only p3dn.24xlarge of the V100 types is)",
}
"""GPU families the catalogue leaves out on purpose, with the reason (error messages quote it)."""


def instance_type(name: str) -> InstanceType | None:
    """The catalogue's facts for instance type `name`, or None when the stack does not know (or allow) it."""
    return INSTANCE_TYPES.get(name) if isinstance(name, str) else None


def instance_type_expectation(name: object) -> str | None:
    """What is allowed instead of `name`, for a one-line ConfigError (with the reason when its family is excluded on
    purpose), or None when `name` is in `INSTANCE_TYPES`."""
    if instance_type(name) is not None:  # type: ignore[arg-type]
        return None
    family = name.split(".", 1)[0] if isinstance(name, str) else ""
    why = EXCLUDED_INSTANCE_FAMILIES.get(family)
    if why:
        return f"refused: {why}"
    return (f"an NVIDIA x86-64 GPU instance type in the catalogue (families {', '.join(INSTANCE_FAMILIES)}), "
            "e.g. g5.xlarge")


def instance_type_problem(name: object) -> str | None:
    """Why the GPU NodePool must not launch `name` (one line), or None when it is in `INSTANCE_TYPES`."""
    expectation = instance_type_expectation(name)
    return None if expectation is None else f"instance type {name!r}: {expectation}"


# --------------------------------------------------------------------------------------------------------------------
# GPU software facts: what the worker's torch build needs, what the node AMI provides.
# --------------------------------------------------------------------------------------------------------------------

TORCH_CUDA: dict[str, Any] = {"torch": "2.13.0", "cuda": "13.0", "min_compute_capability": (7, 5), "min_driver": "580",
              "sources": "pytorch/pytorch #172352, #190385 (CUDA 13 builds: Turing sm_75 and newer, driver >= 580)"}
"""The worker image's torch build and what it needs of the GPU (compute capability) and of the node's driver."""

AL2023_NVIDIA_DRIVER = "580"
"""NVIDIA driver branch of the EKS-optimised AL2023 NVIDIA AMI that `al2023@latest` resolves to.

Source: awslabs/amazon-eks-ami #2470 (AL2023 NVIDIA 580 upgrade schedule; 1.34 first, backports #2484, #2509) and the
EKS user guide's note that the accelerated AMIs "currently include NVIDIA driver version 580" (quoted in NVIDIA/aicr
#2743). Not checked against a live SSM parameter offline: `verify`'s gpu-job reports the driver a node really runs."""

AL2023_NVIDIA_DRIVERS_BY_RELEASE: dict[str, str] = {}
"""NVIDIA driver branch of pinned EKS AL2023 NVIDIA AMI releases, by the alias's version (`v20261101` for
`al2023@v20261101`): what lets the pack's `worker-image-gpu-support` judge a pinned `gpuburst:amiAlias` (it names a
pinned release missing here in its advisory `worker-image-driver-unchecked` instead). Empty: no release's driver has
been read from its awslabs/amazon-eks-ami release notes (the "NVIDIA driver" line of the release's AL2023 NVIDIA
variant) into this table yet; add `"vYYYYMMDD": "<branch>"` with that release note as the source."""


CUDA_RUNTIME_FLOORS: dict[str, dict[str, Any]] = {
    "12": {"min_driver": "525", "min_compute_capability": (5, 0)},
    "13": {"min_driver": "580", "min_compute_capability": (7, 5)},
}
"""What any build for a CUDA major version needs at least, by major version: the driver branch of its minor-version
compatibility, and the oldest GPU architecture its toolkit still compiles for. The policy pack judges a lab's own
worker image by these when the stack declares its CUDA (`gpuburst:workerImageCuda`); an image's own build list can
only be narrower (the built-in image is judged by `TORCH_CUDA`)."""

CUDA_RUNTIME_FLOORS_SOURCE = (
    "NVIDIA CUDA Toolkit release notes: Table 3, minor version compatibility (CUDA 12.x needs driver >= 525.60.13, "
    "CUDA 13.x >= 580); CUDA 12.0 removed Kepler (sm_3x), CUDA 13.0 removed Maxwell, Pascal and Volta (sm_50-sm_72)")
"""Where `CUDA_RUNTIME_FLOORS` comes from (error messages quote it)."""

# --------------------------------------------------------------------------------------------------------------------
# The node-local model cache (a lab's model fetched from S3 by digest, kept on the GPU node between Jobs).
# --------------------------------------------------------------------------------------------------------------------

MODEL_CACHE_DEFAULT_GIB = 20
"""GiB one workload's model cache may hold on a GPU node unless the workload sets `model.cacheGiB`: a few versions of
a 3 GB model. The cache shares the node's local NVMe (or root volume) with the pods' scratch (50 GiB per worker pod by
default); the smallest NVMe of the catalogued types is 125 GB (g4dn.xlarge, one GPU pod)."""

MODEL_CACHE_MAX_GIB = 1000
"""Most GiB `model.cacheGiB` may set: hundreds of versions of a 3 GB model, already more than most catalogued types'
local NVMe (125-3800 GB); a larger figure is a mistake of units, and a cache that fills the disk makes kubelet evict
the pods that share it."""
