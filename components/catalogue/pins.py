"""The pins: every version and image the stack deploys unless a stack's config overrides it (and the override is
checked against the facts in releases.py)."""
from __future__ import annotations

from dataclasses import dataclass

# --------------------------------------------------------------------------------------------------------------------
# Pins: what the stack deploys unless a stack's config overrides it (and the override is checked against the facts).
# --------------------------------------------------------------------------------------------------------------------

__all__ = [
    "KUBERNETES_VERSION",
    "KARPENTER_VERSION",
    "KEDA_VERSION",
    "NVIDIA_DEVICE_PLUGIN_VERSION",
    "WORKER_BASE_IMAGE",
    "WORKER_BASE_IMAGE_BYTES",
    "WORKER_IMAGE_LAYER_BYTES",
    "WORKER_CODE_LAYER_BYTES",
    "WORKER_PYTHON_REQUIREMENTS",
    "ChartPin",
    "CHARTS",
    "KARPENTER_CHARTS",
    "PAUSE_IMAGE",
    "PULUMI_CLI_VERSION",
    "DEPLOY_RUNNER_IMAGE",
    "DEPLOY_RUNNER_PYTHON_VERSION",
]

KUBERNETES_VERSION = "1.35"
"""EKS control-plane version: inside both the pinned Karpenter's (1.29-1.35) and the pinned KEDA's (1.33-1.35)
supported ranges, within the schemas kubernetes-validate ships (1.25-1.37), and in EKS standard support until
2027-03-27 (see `EKS_SUPPORT`)."""

KARPENTER_VERSION = "1.14.1"
"""Karpenter controller and `karpenter-crd` chart version (always the same; see `KARPENTER_CHARTS`)."""

KEDA_VERSION = "2.20.2"
"""KEDA chart and operator version; TriggerAuthentication and ScaledJob schemas are judged against this one."""

NVIDIA_DEVICE_PLUGIN_VERSION = "0.20.0"
"""NVIDIA k8s-device-plugin chart version (advertises `nvidia.com/gpu` on GPU nodes): 0.20.0 (2026-08-19), which
passes CDI feature flags through (`cdi.featureFlags`, since 0.18.1/0.18.2) and vendors node-feature-discovery 0.19.0
(not installed here: `gfd.enabled` stays false)."""

WORKER_BASE_IMAGE = ("python:3.11.14-slim-bookworm"
                     "@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d")
"""Base image of worker/Dockerfile (the BASE_IMAGE build arg): CPython 3.11 (the version the worker is tested on) on
Debian 12 slim, by its multi-platform index digest. Not a CUDA image: torch 2.13's CUDA 13 wheels bring their own CUDA
libraries and the NVIDIA container toolkit mounts the host's driver, so the smallest base that runs Python and glibc
>= 2.28 (the wheels' manylinux floor) is all the worker needs (the CUDA 12.8 runtime base it replaced carried a second
CUDA nothing loaded)."""

WORKER_BASE_IMAGE_BYTES = 42_000_000
"""ESTIMATE, not measured here (no registry access offline): compressed size of the base image for linux/amd64,
~42 MB (Debian 12 slim ~28 MB + CPython ~14 MB, as Docker Hub lists the 3.11-slim-bookworm tags)."""

WORKER_IMAGE_LAYER_BYTES: dict[str, int] = {
    # Measured build, 2026-12: `make image` (scripts/build_image.py) with podman 4.3 (buildah underneath, --layers,
    # runc) on the offline stand-in base (Debian 12 minbase + CPython 3.11.2; the Python layers do not depend on it).
    # Each figure is the layer's gzip blob as `podman push --compression-format gzip` writes it: what a registry
    # receives and a node pulls. tests/components/test_image_layers.py holds each within x0.98-1.5 of its lock file's
    # wheel sizes, so a re-lock without a re-measure fails. 40-worker is +40 % over its wheels: the .pyc pip compiles
    # at install (3,719 files, 103 MB unpacked, 31 MB gzip), kept on purpose: the root filesystem is read-only at run
    # time, so without them every process start compiles what it imports in memory (the worker's imports measured
    # 7.8 s without any .pyc against 3.5 s with them, for ~0.1 s more of parallel pull).
    "10-cublas.txt": 434_090_604,
    "11-cudnn.txt": 369_951_746,
    "12-cufft-curand.txt": 280_707_437,
    "13-nccl-nvshmem.txt": 268_580_923,
    "14-cusolver.txt": 202_205_596,
    "15-cusparse.txt": 319_440_970,
    "16-cuda-small.txt": 168_094_999,
    "20-triton.txt": 209_219_193,
    "30-torch.txt": 552_431_293,
    "40-worker.txt": 118_601_357,
}
"""Compressed size in bytes of each Python layer of the worker image (one per worker/image lock file), measured on a
real build (the comment above; `make image` prints its own measurement beside these figures). Whole image: these plus
`WORKER_BASE_IMAGE_BYTES` and the worker's own code (~1.1 MB measured): ~2.97 GB compressed, largest layer torch at
0.55 GB."""

WORKER_CODE_LAYER_BYTES = 2_000_000
"""Upper bound of the worker's own layers (worker/ sources, the built-in model, bytecode), in bytes; a test holds the
sources under it uncompressed."""

WORKER_PYTHON_REQUIREMENTS = "worker/requirements.txt"
"""Where the worker image's Python pins live (torch, tifffile, ...): the Dockerfile installs exactly that file."""


@dataclass(frozen=True)
class ChartPin:
    """Where a Helm chart comes from and which version the stack installs."""

    chart: str
    """Chart name, e.g. `karpenter`."""
    repository: str
    """Helm repository URL or OCI registry prefix (without the chart name)."""
    version: str
    """Exact chart version; never a range."""
    namespace: str
    """Namespace the release is installed into."""


CHARTS: dict[str, ChartPin] = {
    "karpenter-crd": ChartPin("karpenter-crd", "oci://public.ecr.aws/karpenter", KARPENTER_VERSION, "kube-system"),
    "karpenter": ChartPin("karpenter", "oci://public.ecr.aws/karpenter", KARPENTER_VERSION, "kube-system"),
    "keda": ChartPin("keda", "https://kedacore.github.io/charts", KEDA_VERSION, "keda"),
    "nvidia-device-plugin": ChartPin(
        "nvidia-device-plugin", "https://nvidia.github.io/k8s-device-plugin", NVIDIA_DEVICE_PLUGIN_VERSION,
        "nvidia-device-plugin"),
}
"""Every Helm chart the stack installs, keyed by chart name."""

KARPENTER_CHARTS = ("karpenter-crd", "karpenter")
"""The two Karpenter charts: they must always be at the same version (the CRDs are coupled to the controller)."""


# --------------------------------------------------------------------------------------------------------------------
# Warm GPU floor: the placeholder pod's image (components/warm_floor.py).
# --------------------------------------------------------------------------------------------------------------------

PAUSE_IMAGE = ("registry.k8s.io/pause:3.10"
               "@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a")
"""The warm-floor placeholder's image: Kubernetes' pause 3.10 (multi-arch index digest), runs as uid 65535 and does
nothing, so the GPU it holds costs only the node."""


# --------------------------------------------------------------------------------------------------------------------
# The in-VPC deploy runner (components/deploy_runner.py, spec/deploy_runner.py): what its CodeBuild builds run on.
# --------------------------------------------------------------------------------------------------------------------

PULUMI_CLI_VERSION = "3.272.0"
"""The Pulumi CLI the deploy runner installs (`curl -fsSL https://get.pulumi.com | sh -s -- --version <pin>`; the
installer's flags are `--version`, `--install-root`, `--no-edit-path`, `--silent`: pulumi/get.pulumi.com
dist/install.sh). The same release as the `pulumi==` SDK pin in requirements.txt (a test holds them equal): the CLI and
the SDK the program runs on move together."""

DEPLOY_RUNNER_IMAGE = "aws/codebuild/amazonlinux-x86_64-standard:5.0"
"""The deploy runner's CodeBuild image: the Amazon Linux 2023 x86-64 standard image 5.0, one of the EC2-compute images
CodeBuild maintains (aws/aws-codebuild-docker-images README, "EC2 Compute"; definition al/x86_64/standard/5.0). It
carries Docker 28 with buildx (the program builds the worker image with docker-build, so the project runs privileged)
and Python 3.11 among its runtime versions (runtimes.yml). `amazonlinux-` is the alias CodeBuild uses since 2024-11-22;
the older `amazonlinux2-x86_64-standard:5.0` names the same AL2023 image. Standard 6.0 exists too (also Python 3.11)."""

DEPLOY_RUNNER_PYTHON_VERSION = "3.11"
"""The Python the runner's builds select (`runtime-versions: python: 3.11` in the buildspec): the version the program
and the worker are tested on (the worker image's base is CPython 3.11)."""
