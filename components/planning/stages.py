"""The stages of a GPU pod's path from a queued message to its result and their default durations (from the
catalogue); what this stack's own nodes take for the image pull and the model fetch is in `node_stages`."""
from __future__ import annotations

import math
from collections.abc import Mapping

from .. import catalogue
from ..spec.gpu_pool import DEFAULT_CONSOLIDATE_AFTER, duration_s
from ..spec.validation import ConfigError
from ..spec.worker_pod import DEFAULT_CPU_CORES, DEFAULT_GPUS, DEFAULT_MEMORY_GIB

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
