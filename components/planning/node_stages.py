"""The image pull and the model fetch as this stack's nodes do them: the stage durations a configured stack
(`StackConfig`) gives, apart from `stages` so that the chooser's warm model (`stages`, `simulation`) never reads the
stack's config."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import catalogue

if TYPE_CHECKING:
    from ..config import StackConfig, WorkloadConfig

__all__ = [
    "parallel_pull",
    "image_pull_seconds",
    "image_pull_note",
    "model_seconds",
]


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
