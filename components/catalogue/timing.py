"""Burst timing facts: the default stage durations of the burst planner, the image pull model and the prices it
uses, each with its source."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .pins import WORKER_BASE_IMAGE_BYTES, WORKER_CODE_LAYER_BYTES, WORKER_IMAGE_LAYER_BYTES
from .releases import KEDA_DEFAULT_POLLING_INTERVAL_S

# --------------------------------------------------------------------------------------------------------------------
# Burst timing facts: default stage durations of the burst planner (components/planning/), each with its source.
# --------------------------------------------------------------------------------------------------------------------

__all__ = [
    "StageDuration",
    "PULL_ONE_STREAM_BYTES_PER_S",
    "PULL_PARALLEL_BYTES_PER_S",
    "FAST_IMAGE_PULL_MIN_EBS_MIBPS",
    "FAST_IMAGE_PULL_MIN_VCPU",
    "FAST_IMAGE_PULL_MIN_MEMORY_GIB",
    "GP3_BASELINE_THROUGHPUT_MIBPS",
    "NODECONFIG_FEATURE_GATES",
    "worker_image_bytes",
    "image_pull_seconds",
    "STAGE_DURATIONS",
    "FRESH_NODE_POD_TO_SERVING_S",
    "WARM_NODE_POD_TO_SERVING_S",
    "SPOT_PRICE_FRACTION",
    "BILLING_MINIMUM_S",
    "WORKER_EMPTY_RECEIVE_S",
    "MODEL_BYTES_ASSUMED",
    "MODEL_FETCH_BYTES_PER_S",
    "MODEL_HASH_BYTES_PER_S",
    "model_fetch_seconds",
    "model_cache_hit_seconds",
]

@dataclass(frozen=True)
class StageDuration:
    """One stage of a GPU pod's path from a queued message to a result, with its default duration and its source."""

    stage: str
    """Stage name, as `plan-burst --set STAGE=SECONDS` spells it."""
    seconds: float
    """Default duration in seconds (a published measurement, or a stated default of the tool)."""
    source: str
    """Where the figure comes from."""


_DATA_ON_EKS = ("data-on-eks, Ray batch inference on g6e.2xlarge (2026), from Kubernetes event timestamps (~6 min 33 s "
                "pod created to serving on a fresh node, ~2 min 30 s on a warm node with the image cached)")

# The image pull model: how long a node takes to pull the worker image, from its layer sizes.
PULL_ONE_STREAM_BYTES_PER_S = 11.6e9 / 121
"""Bytes per second of a pull that fetches and unpacks one layer stream at a time (containerd's default): data-on-eks'
11.6 GB image in 2 min 01 s, ~96 MB/s. Also the rate of ONE layer under a parallel pull (a layer decompresses on one
core), so a parallel pull can never beat its largest layer at this rate."""

PULL_PARALLEL_BYTES_PER_S = 9.35e9 / 40
"""Bytes per second of a SOCI parallel pull (nodeadm `FastImagePull`) across layers: karpenter-blueprints' 9.35 GB image
in 40 s on AL2023 (from 2 min 11 s without), ~234 MB/s, on storage fast enough for it (see
`FAST_IMAGE_PULL_MIN_EBS_MIBPS`). The same source saw no gain for an image whose largest layer was 4.7 GB."""

FAST_IMAGE_PULL_MIN_EBS_MIBPS = 600
"""Root-volume throughput below which nodeadm's docs warn FastImagePull may make pulls SLOWER (awslabs/amazon-eks-ami
nodeadm/doc/examples.md, "Enabling fast image pull": "at least 600MiB/s")."""

FAST_IMAGE_PULL_MIN_VCPU = 4
"""nodeadm ignores FastImagePull on instances with fewer vCPUs (nodeadm/internal/containerd/config.go
UseSOCISnapshotter: >= 4000 millicores)."""

FAST_IMAGE_PULL_MIN_MEMORY_GIB = 7
"""... or with less memory than this, in GiB (same function: >= 7 GiB online)."""

GP3_BASELINE_THROUGHPUT_MIBPS = 125
"""gp3's baseline throughput, MiB/s: the GPU EC2NodeClass's root volume default (`ec2_nodeclass_manifest`)."""

NODECONFIG_FEATURE_GATES = ("InstanceIdNodeName", "FastImagePull")
"""The feature gates nodeadm's NodeConfig accepts (awslabs/amazon-eks-ami nodeadm/api/v1alpha1/nodeconfig_types.go,
kubebuilder enum of `Feature`); a NodeConfig with another gate is refused by nodeadm at boot."""


def worker_image_bytes() -> tuple[int, ...]:
    """Expected compressed size of every layer of the worker image, in bytes: base, Python layers, the worker's code."""
    return (WORKER_BASE_IMAGE_BYTES, *WORKER_IMAGE_LAYER_BYTES.values(), WORKER_CODE_LAYER_BYTES)


def image_pull_seconds(layer_bytes: Iterable[int], *, parallel: bool) -> float:
    """Seconds to pull an image of these compressed layers onto a node that does not have it.

    One stream: total / `PULL_ONE_STREAM_BYTES_PER_S`. Parallel (FastImagePull on fast enough storage):
    max(total / `PULL_PARALLEL_BYTES_PER_S`, largest layer / `PULL_ONE_STREAM_BYTES_PER_S`): the layers overlap, but
    each still unpacks on one core, so the largest sets the floor.
    """
    sizes = [int(b) for b in layer_bytes]
    if not sizes or any(b < 0 for b in sizes):
        raise ValueError(f"layer_bytes: {sizes!r} is not valid: one or more sizes >= 0")
    total = sum(sizes)
    if not parallel:
        return total / PULL_ONE_STREAM_BYTES_PER_S
    return max(total / PULL_PARALLEL_BYTES_PER_S, max(sizes) / PULL_ONE_STREAM_BYTES_PER_S)


STAGE_DURATIONS: dict[str, StageDuration] = {s.stage: s for s in (
    StageDuration("poll", KEDA_DEFAULT_POLLING_INTERVAL_S,
                  "KEDA ScaledJob spec.pollingInterval default (30 s); a message waits up to one interval (the planner "
                  "takes the worst case); the workload's configured value wins"),
    StageDuration("nodeclaim", 13,
                  f"pod created to NodeClaim created (Karpenter batch window included): {_DATA_ON_EKS}"),
    StageDuration("ec2_ready", 40, f"EC2 launch to node Ready: {_DATA_ON_EKS}"),
    StageDuration("gpu_registered", 36, f"node Ready to nvidia.com/gpu allocatable (device plugin): {_DATA_ON_EKS}"),
    StageDuration("image_pull", round(image_pull_seconds(worker_image_bytes(), parallel=True)),
                  "the worker image (WORKER_IMAGE_LAYER_BYTES: ~2.97 GB compressed, largest layer 0.55 GB) pulled in "
                  "parallel (FastImagePull on the NVMe RAID0, the stack's default) at PULL_PARALLEL_BYTES_PER_S "
                  "(karpenter-blueprints, 9.35 GB in 40 s); without FastImagePull the planner uses one stream at "
                  f"PULL_ONE_STREAM_BYTES_PER_S (11.6 GB in 2 min 01 s: {_DATA_ON_EKS})"),
    StageDuration("model_fetch", 0,
                  "0 s: the model is in the worker image, which the image pull brought; a workload with its own "
                  "`model: {uri, sha256}` pays, on the FIRST Job of each node only, the model's S3 fetch into the "
                  "node-local cache (model_fetch_seconds: MODEL_BYTES_ASSUMED at MODEL_FETCH_BYTES_PER_S, one "
                  "GetObject stream hashed as it arrives: ~31 s for 3 GB)"),
    StageDuration("model_cache_hit", 0,
                  "0 s: the model is in the worker image; with a workload's own `model`, every LATER Job on a node "
                  "reads the cached file and checks its SHA-256 before loading it (model_cache_hit_seconds: "
                  "MODEL_BYTES_ASSUMED at MODEL_HASH_BYTES_PER_S, ~6 s for 3 GB on the NVMe RAID0)"),
)}
"""Default durations of the node and image stages of a cold start, and of the model's fetch (the model load is the
workload's `modelLoadS`, inference its `secondsPerItem`); `plan-burst --set STAGE=SECONDS` overrides any of them."""

FRESH_NODE_POD_TO_SERVING_S = 393
"""Published total, pod created to serving on a fresh node (6 min 33 s; data-on-eks, see `STAGE_DURATIONS`): the node
and image stages (210 s) plus that workload's container start and model load."""

WARM_NODE_POD_TO_SERVING_S = 150
"""Published total, pod created to serving on a warm node with the image cached (~2 min 30 s; data-on-eks)."""

SPOT_PRICE_FRACTION = 0.4
"""ASSUMPTION, not a measurement: spot GPU capacity priced at 40% of on-demand (a 60% discount; AWS advertises "up to
90%" and spot prices move hourly). The planner prices ScaledJob nodes with it when the NodePool allows spot; the
persistent consumer always runs on on-demand."""

BILLING_MINIMUM_S = 60
"""EC2 per-second billing (Linux) with a 60 s minimum per instance launch."""


WORKER_EMPTY_RECEIVE_S = 20
"""Seconds a ScaledJob's worker waits on an empty queue before it exits: its SQS long poll (`--wait-time`, default 20
s, SQS's longest; worker/consumer_settings.py `wait_time_s`, and the queues' ReceiveMessageWaitTimeSeconds). A Job
with messages per Job above 1 that finds the queue drained pays it once, at its end; one that reaches
`--max-messages` exits at once."""

MODEL_BYTES_ASSUMED = 3_000_000_000
"""ASSUMPTION: the size of a lab's own model (`gpuburst:workloads.<name>.model`), which the stack does not state: the
seed's models are 3 GB and load in 45 s (issue 17). `plan-burst --set model_fetch=SECONDS` replaces the fetch it
implies."""

MODEL_FETCH_BYTES_PER_S = PULL_ONE_STREAM_BYTES_PER_S
"""Bytes per second of the first Job's model fetch on a node: the worker streams the object with ONE GetObject into
the node-local cache, hashing it as it writes (worker/models/model_store.py), so the rate of one HTTP stream from S3
to a node applies, the measured one of `PULL_ONE_STREAM_BYTES_PER_S` (~96 MB/s: data-on-eks' image pull, whose
layers ECR serves from S3). S3 allows up to 5 Gbit/s per connection ("Maximizing Amazon S3 transfer throughput to
Amazon EC2 instances", AWS re:Post): the client, not S3, sets the rate. 3 GB: ~31 s."""

MODEL_HASH_BYTES_PER_S = 0.5e9
"""ASSUMPTION: bytes per second at which a later Job re-checks the cached model's SHA-256 before loading it (the
worker trusts no file another pod could have written): hashlib on one core without the x86 SHA extensions (g4dn's
Cascade Lake has none), ~0.5 GB/s; cores with them hash ~3x faster (docs/worker.md: a 3 GB file in ~2 s). 3 GB: 6 s."""


def _model_seconds(model_bytes: float, rate: float, on_nvme: bool) -> float:
    """`model_bytes` at `rate`, or at most the gp3 root volume's baseline when the cache is not on the NVMe RAID0."""
    if isinstance(model_bytes, bool) or not isinstance(model_bytes, (int, float)) or model_bytes < 0:
        raise ValueError(f"model_bytes: {model_bytes!r} is not valid: bytes >= 0")
    return model_bytes / (rate if on_nvme else min(rate, GP3_BASELINE_THROUGHPUT_MIBPS * 1024 * 1024))


def model_fetch_seconds(model_bytes: float = MODEL_BYTES_ASSUMED, *, on_nvme: bool = True) -> float:
    """Seconds for the first Job on a node to fetch a model of `model_bytes` from S3 into the node-local cache,
    hashing it as it streams (MODEL_FETCH_BYTES_PER_S; bounded by the gp3 root volume when the cache is not on the
    NVMe RAID0, `on_nvme` False)."""
    return _model_seconds(model_bytes, MODEL_FETCH_BYTES_PER_S, on_nvme)


def model_cache_hit_seconds(model_bytes: float = MODEL_BYTES_ASSUMED, *, on_nvme: bool = True) -> float:
    """Seconds for a later Job on a node to read the cached model and check its digest (MODEL_HASH_BYTES_PER_S, or
    the gp3 root volume's read rate when lower)."""
    return _model_seconds(model_bytes, MODEL_HASH_BYTES_PER_S, on_nvme)
