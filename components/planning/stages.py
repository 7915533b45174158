"""The stages of a GPU pod's path from a queued message to its result, their default durations (from the catalogue)
and the image pull as this stack's nodes do it."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .. import catalogue
from ..spec.gpu_pool import DEFAULT_CONSOLIDATE_AFTER, duration_s
from ..spec.validation import ConfigError
from ..spec.worker_pod import DEFAULT_CPU_CORES, DEFAULT_GPUS, DEFAULT_MEMORY_GIB

if TYPE_CHECKING:
    from ..config import StackConfig, WorkloadConfig

__all__ = [
    "STAGES",
    "NODE_STAGES",
    "WARM_ZEROED",
    "CONSOLIDATE_AFTER_S",
    "POD_CPU_CORES",
    "POD_MEMORY_GIB",
    "POD_GPUS",
    "SECONDS_PER_DAY",
    "stage_durations",
    "parallel_pull",
    "image_pull_seconds",
    "image_pull_note",
    "model_seconds",
    "parse_set",
]

STAGES = tuple(catalogue.STAGE_DURATIONS)
"""Stages `--set` may override: poll, nodeclaim, ec2_ready, gpu_registered, image_pull, model_fetch,
model_cache_hit."""
NODE_STAGES = ("nodeclaim", "ec2_ready", "gpu_registered", "image_pull")
"""The stages a pod pays only on a node that is not up with the image cached."""
WARM_ZEROED = ("poll",) + NODE_STAGES + ("model_fetch",)
"""What `warm=True` sets to 0 s: KEDA's poll, every node and image stage, and the model's fetch (the node's cache is
warm; a Job still checks the cached file, `model_cache_hit`)."""
CONSOLIDATE_AFTER_S = duration_s(DEFAULT_CONSOLIDATE_AFTER)
"""The GPU NodePool's `consolidateAfter` (GpuNodePoolArgs' default), seconds an empty node is kept."""
POD_CPU_CORES, POD_MEMORY_GIB, POD_GPUS = DEFAULT_CPU_CORES, DEFAULT_MEMORY_GIB, DEFAULT_GPUS
"""The worker pod's requests (WorkerPodSettings' defaults), to find the types that host it."""
SECONDS_PER_DAY = 86_400


def stage_durations(*, warm: bool = False, overrides: Mapping[str, float] | None = None,
                    polling_interval_s: float | None = None, image_pull_s: float | None = None,
                    model_s: tuple[float, float] | None = None) -> dict[str, float]:
    """Stage name -> seconds: the catalogue's defaults, the workload's polling interval, the stack's image pull
    (`image_pull_seconds`) and model fetch and cache hit (`model_seconds`), `warm`'s zeros, then `overrides` (unknown
    stage names or negative values raise a one-line ConfigError)."""
    stages = {name: float(s.seconds) for name, s in catalogue.STAGE_DURATIONS.items()}
    if polling_interval_s is not None:
        stages["poll"] = float(polling_interval_s)
    if image_pull_s is not None:
        stages["image_pull"] = float(image_pull_s)
    if model_s is not None:
        stages["model_fetch"], stages["model_cache_hit"] = float(model_s[0]), float(model_s[1])
    if warm:
        stages.update({name: 0.0 for name in WARM_ZEROED})
    for name, value in (overrides or {}).items():
        if name not in stages:
            raise ConfigError("--set", name, f"a stage, one of {', '.join(STAGES)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
            raise ConfigError(f"--set {name}", value, "seconds >= 0")
        stages[name] = float(value)
    return stages


def parallel_pull(config: StackConfig, instance_type: str) -> bool:
    """Whether nodes of `instance_type` pull in parallel on this stack: FastImagePull on, the image store on fast
    enough storage (the NVMe RAID0 on a type with NVMe; the stack's gp3 root volume is below nodeadm's 600 MiB/s),
    and the node above nodeadm's floor (4 vCPU, 7 GiB), which ignores the gate below it."""
    t = catalogue.instance_type(instance_type)
    if t is None or not config.fast_image_pull:
        return False
    on_nvme = config.gpu_instance_store_policy == "RAID0" and t.local_nvme_gb > 0
    return (on_nvme and t.vcpu >= catalogue.FAST_IMAGE_PULL_MIN_VCPU
            and t.memory_mib >= catalogue.FAST_IMAGE_PULL_MIN_MEMORY_GIB * 1024)


def image_pull_seconds(config: StackConfig, instance_type: str) -> float:
    """The worker image's pull on a fresh node of `instance_type` (catalogue layer sizes and pull rates), in whole
    seconds: in parallel where `parallel_pull` says so, else one layer stream at a time."""
    return float(round(catalogue.image_pull_seconds(catalogue.worker_image_bytes(),
                                                    parallel=parallel_pull(config, instance_type))))


def model_seconds(config: StackConfig, workload: WorkloadConfig, instance_type: str) -> tuple[float, float]:
    """(first Job's fetch, a later Job's cache hit) of `workload`'s own model (`model: {uri, sha256}`) on a node of
    `instance_type`, in whole seconds (`catalogue.model_fetch_seconds` and `model_cache_hit_seconds`, the cache on
    the NVMe RAID0 where the stack puts kubelet there, else on the gp3 root volume); (0, 0) when the model is in the
    worker image."""
    if workload.model is None:
        return 0.0, 0.0
    t = catalogue.instance_type(instance_type)
    on_nvme = config.gpu_instance_store_policy == "RAID0" and t is not None and t.local_nvme_gb > 0
    return (float(round(catalogue.model_fetch_seconds(on_nvme=on_nvme))),
            float(round(catalogue.model_cache_hit_seconds(on_nvme=on_nvme))))


def image_pull_note(config: StackConfig, instance_type: str) -> str:
    """One line for the table: the worker image's size and layers, the pull as modelled, and the other way's time."""
    layers = catalogue.worker_image_bytes()
    one = round(catalogue.image_pull_seconds(layers, parallel=False))
    par = round(catalogue.image_pull_seconds(layers, parallel=True))
    head = f"worker image ~{sum(layers) / 1e9:.2f} GB compressed, largest layer {max(layers) / 1e9:.2f} GB: "
    if parallel_pull(config, instance_type):
        return head + (f"{par} s as a parallel pull (fastImagePull, image store on {instance_type}'s NVMe RAID0); "
                       f"{one} s as one stream")
    why = ("fastImagePull is off" if not config.fast_image_pull
           else f"no NVMe RAID0 for the image store on {instance_type}")
    return head + f"{one} s as one stream ({why}); {par} s with fastImagePull on the NVMe RAID0"


def parse_set(text: str) -> tuple[str, float]:
    """`image_pull=40` -> ("image_pull", 40.0); a bad one raises ConfigError naming --set and the value."""
    name, sep, value = str(text).partition("=")
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not sep or name not in STAGES or not (seconds >= 0 and math.isfinite(seconds)):
        raise ConfigError("--set", text, f"STAGE=SECONDS with STAGE one of {', '.join(STAGES)} and SECONDS >= 0")
    return name, seconds
