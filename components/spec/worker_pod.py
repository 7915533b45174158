"""The worker pod's settings (WorkerPodSettings: requests, scratch, visibility, grace) and their checks, as plain data:
the components build the pod from them, the planner reads their defaults."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..catalogue import MODEL_CACHE_DEFAULT_GIB
from .validation import ConfigError, Rule, is_int_between, validate

if TYPE_CHECKING:
    import pulumi

DEFAULT_CPU_CORES = 4.0
"""The worker pod's CPU request and limit, cores, unless WorkerPodSettings says otherwise."""
DEFAULT_MEMORY_GIB = 24
"""The worker pod's memory request and limit, GiB, unless WorkerPodSettings says otherwise."""
DEFAULT_GPUS = 1
"""GPUs per worker pod unless WorkerPodSettings says otherwise."""

SCRATCH_PATH = "/scratch"
"""Where downloaded slides and local results live (an emptyDir; the root filesystem is read-only)."""

TMP_PATH = "/tmp"
"""Writable /tmp (an emptyDir) for Python, torch and tifffile temporary files."""

DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}
"""Pod annotation: Karpenter must not consolidate or drift a node away while a slide is being processed."""

MODEL_CACHE_PATH = "/model-cache"
"""Where the workload's node-local model cache is mounted in the worker container (env MODEL_CACHE_DIR)."""

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
"""The worker's compute precisions (env PRECISION): `auto` picks bf16/fp16 where the device computes it natively;
`fp32` is bit-for-bit reproducible across machines."""

_DIGEST_REF = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
_S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<key>[^\s]{1,1024})$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/"
                          r"(mrk-[0-9a-f]{32}|[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12})$")


def model_uri_problem(uri: object) -> str | None:
    """Why `uri` is not the `s3://bucket/key` of one object (a bucket name, a key that is not a folder), or None."""
    m = _S3_URI.match(uri) if isinstance(uri, str) else None
    if m is None or ".." in m.group("bucket") or m.group("key").endswith("/"):
        return ("an S3 object URI, s3://BUCKET/KEY (a bucket name of 3-63 lower-case letters, digits, '.', '-' and a "
                "key that is one object, not a folder ending in '/')")
    return None


def sha256_problem(digest: object) -> str | None:
    """Why `digest` is not a SHA-256 written as 64 lower-case hex digits, or None."""
    if not (isinstance(digest, str) and _SHA256.match(digest)):
        return "a SHA-256 digest: 64 hex digits (`sha256sum model.pt2`)"
    return None


def kms_key_arn_problem(arn: object) -> str | None:
    """Why `arn` is not a KMS key ARN (`arn:aws:kms:REGION:ACCOUNT:key/ID`; an alias cannot be granted Decrypt), or
    None."""
    if not (isinstance(arn, str) and _KMS_KEY_ARN.match(arn)):
        return ("a KMS key ARN, arn:aws:kms:REGION:ACCOUNT:key/KEY-ID (a key id or mrk- id; not an alias, which IAM "
                "cannot grant kms:Decrypt through)")
    return None


def model_object_arn(uri: str) -> str:
    """The IAM resource ARN of the S3 object `uri` names (`s3://b/k` -> `arn:aws:s3:::b/k`)."""
    bucket, _, key = uri[len("s3://"):].partition("/")
    return f"arn:aws:s3:::{bucket}/{key}"


@dataclass(frozen=True)
class ModelMount:
    """A lab's model for the worker: where it is, its digest, and the node-local cache the pod keeps it in."""

    uri: str
    """`s3://bucket/key` of the model file (env MODEL_URI); the worker role may `s3:GetObject` this object only.
    Required."""
    sha256: str
    """Its SHA-256, 64 lower-case hex digits (env MODEL_SHA256): the worker refuses other bytes. Required."""
    kms_key_arn: str | None = None
    """The customer-managed KMS key the object is encrypted with: the worker role gets `kms:Decrypt` on it through
    S3. Default None (SSE-S3 or the AWS-managed key)."""
    cache_claim: str | None = None
    """The PersistentVolumeClaim of the node-local model cache (`names.MODEL_CACHE_CLAIM`), mounted at
    MODEL_CACHE_PATH (env MODEL_CACHE_DIR). Default None: no node cache (the worker keeps the model in /scratch, so
    every pod downloads it)."""
    cache_sub_path: str | None = None
    """The workload's own folder in its namespace's folder of the cache, a DNS label (the workload's name): the pod's
    volumeMount subPath is `<namespace>/<cache_sub_path>` (`model_cache_admission.cache_sub_path`), so a pod sees only
    its workload's models, and the cluster's admission rule refuses a subPath outside the pod's namespace. Required
    with cache_claim."""
    cache_max_bytes: int = MODEL_CACHE_DEFAULT_GIB * 2**30
    """Most bytes the worker keeps in the cache (env MODEL_CACHE_MAX_BYTES; the worker deletes the least recently
    used models beyond it). Default 20 GiB (catalogue.MODEL_CACHE_DEFAULT_GIB)."""


def image_digest_problem(image: str) -> str | None:
    """Why `image` is not an image reference pinned by digest (`repo@sha256:<64 hex>`), or None."""
    if not isinstance(image, str) or not _DIGEST_REF.match(image):
        return ("an image reference pinned by digest, 'REGISTRY/REPO@sha256:<64 hex>' (a tag can be moved to "
                "different bytes; a digest cannot)")
    return None


def checked_image(image: str) -> str:
    """`image` when it is pinned by digest, else ConfigError naming WorkerPodSettings.image."""
    problem = image_digest_problem(image)
    if problem:
        raise ConfigError("WorkerPodSettings.image", image, problem)
    return image


@dataclass
class WorkerPodSettings:
    """The worker container and its pod, shared by GpuScaledJob and GpuConsumer."""

    image: pulumi.Input[str]
    """Worker image pinned by digest (`...@sha256:<64 hex>`), usually the image build's `ref` Output. Required."""
    cpu_cores: float = DEFAULT_CPU_CORES
    """CPU request and limit, cores (equal, for the Guaranteed QoS class: evicted last). Default 4."""
    memory_gib: int = DEFAULT_MEMORY_GIB
    """Memory request and limit, GiB (equal, Guaranteed QoS). Default 24."""
    gpus: int = DEFAULT_GPUS
    """`nvidia.com/gpu` per pod (a whole GPU; extended resources have no overcommit). Default 1."""
    scratch_gib: int = 50
    """Size limit of the /scratch emptyDir, GiB: one whole-slide image plus its outputs. Default 50."""
    tmp_gib: int = 2
    """Size limit of the /tmp emptyDir, GiB. Default 2."""
    visibility_timeout_s: int = 600
    """The work queue's visibility timeout, seconds (env VISIBILITY_TIMEOUT). Default 600 (the worker's default)."""
    visibility_extension_interval_s: int | None = None
    """Seconds between the worker's visibility renewals (env VISIBILITY_EXTENSION_INTERVAL); must be below the
    visibility timeout. Default None = a third of it, so two renewals can fail before the message reappears."""
    grace_period_s: int = 120
    """Seconds the worker may finish the slide in progress after SIGTERM (env GRACE_PERIOD). Default 120."""
    termination_grace_period_s: int = 150
    """Pod terminationGracePeriodSeconds: at least grace_period_s + 10, so the worker can release the message
    and exit before SIGKILL. Default 150."""
    region: str = "us-east-1"
    """AWS region for the SDK (env AWS_REGION; Pod Identity does not set it). Default us-east-1."""
    env: dict[str, pulumi.Input[str]] = field(default_factory=dict)
    """More environment variables for the worker (e.g. MODEL_PATH). Default none; may not override the ones this
    module sets."""
    priority_class_name: str | None = None
    """Pod priorityClassName (the platform sets the workloads' class when a warm GPU floor is configured, so a real
    job preempts a placeholder). Default None (no class: priority 0)."""
    model: ModelMount | None = None
    """A lab's model fetched from S3 by digest (env MODEL_URI, MODEL_SHA256; the cache volume and MODEL_CACHE_DIR,
    MODEL_CACHE_MAX_BYTES). Default None: the model baked into the image."""
    precision: str | None = None
    """The worker's compute precision, one of PRECISIONS (env PRECISION). Default None: unset (the worker's own
    default, `auto`)."""
    annotations: dict[str, str] = field(default_factory=dict)
    """More pod template annotations (e.g. `names.WORKER_IMAGE_CUDA_ANNOTATION`). Default none."""

    @property
    def extension_interval_s(self) -> int:
        """The effective visibility renewal interval, seconds."""
        if self.visibility_extension_interval_s is not None:
            return self.visibility_extension_interval_s
        return max(1, self.visibility_timeout_s // 3)


_RESERVED_ENV = ("QUEUE_URL", "VISIBILITY_TIMEOUT", "VISIBILITY_EXTENSION_INTERVAL", "GRACE_PERIOD", "SCRATCH_DIR",
                 "TMPDIR", "HOME", "XDG_CACHE_HOME", "AWS_REGION", "DEVICE", "MODEL_URI", "MODEL_SHA256",
                 "MODEL_CACHE_DIR", "MODEL_CACHE_MAX_BYTES", "PRECISION")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_SETTINGS_RULES = [
    Rule("cpu_cores", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 192,
         "cores, > 0 and <= 192"),
    Rule("memory_gib", is_int_between(1, 2048), "an int of GiB, 1-2048"),
    Rule("gpus", is_int_between(1, 8), "an int of whole GPUs, 1-8"),
    Rule("scratch_gib", is_int_between(1, 2048), "an int of GiB, 1-2048"),
    Rule("tmp_gib", is_int_between(1, 64), "an int of GiB, 1-64"),
    Rule("visibility_timeout_s", is_int_between(1, 43200), "seconds, 1-43200 (the SQS maximum)"),
    Rule("grace_period_s", is_int_between(0, 3600), "seconds, 0-3600"),
    Rule("region", lambda v: isinstance(v, str) and re.match(r"^[a-z]{2}(-[a-z]+)+-\d$", v) is not None,
         "an AWS region name such as 'us-east-1'"),
]


def check_settings(s: WorkerPodSettings) -> None:
    """Raise ConfigError (one line: field, value, what is allowed) when the settings cannot work."""
    validate({r.field: getattr(s, r.field) for r in _SETTINGS_RULES}, _SETTINGS_RULES, prefix="WorkerPodSettings.")
    if isinstance(s.image, str):
        checked_image(s.image)
    interval = s.extension_interval_s
    if not (isinstance(interval, int) and 0 < interval < s.visibility_timeout_s):
        raise ConfigError("WorkerPodSettings.visibility_extension_interval_s", interval,
                          f"seconds > 0 and < visibility_timeout_s={s.visibility_timeout_s} (a renewal must land "
                          "before the message reappears)")
    if not (isinstance(s.termination_grace_period_s, int) and
            s.termination_grace_period_s >= s.grace_period_s + 10):
        raise ConfigError("WorkerPodSettings.termination_grace_period_s", s.termination_grace_period_s,
                          f">= grace_period_s + 10 = {s.grace_period_s + 10} (the worker needs its grace period plus "
                          "time to release the message before the kubelet's SIGKILL)")
    if s.precision is not None and s.precision not in PRECISIONS:
        raise ConfigError("WorkerPodSettings.precision", s.precision, f"one of {', '.join(PRECISIONS)} (or None)")
    if s.model is not None:
        check_model(s.model)
    for name in s.env:
        if not _ENV_NAME.match(name):
            raise ConfigError(f"WorkerPodSettings.env[{name!r}]", name,
                              "an environment variable name [A-Za-z_][A-Za-z0-9_]*")
        if name in _RESERVED_ENV:
            raise ConfigError(f"WorkerPodSettings.env[{name!r}]", name,
                              f"a name other than {', '.join(_RESERVED_ENV)} (set by the component)")


_SUB_PATH = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def check_model(m: ModelMount) -> None:
    """Raise ConfigError (one line naming the ModelMount field and value) when the model cannot be fetched or cached."""
    for name, problem in (("uri", model_uri_problem(m.uri)), ("sha256", sha256_problem(m.sha256)),
                          ("kms_key_arn", None if m.kms_key_arn is None else kms_key_arn_problem(m.kms_key_arn))):
        if problem:
            raise ConfigError(f"ModelMount.{name}", getattr(m, name), problem)
    if m.cache_claim is not None and not (isinstance(m.cache_sub_path, str) and _SUB_PATH.match(m.cache_sub_path)):
        raise ConfigError("ModelMount.cache_sub_path", m.cache_sub_path,
                          "the workload's folder in the cache: a DNS label such as the workload's name")
    if not (isinstance(m.cache_max_bytes, int) and not isinstance(m.cache_max_bytes, bool) and m.cache_max_bytes > 0):
        raise ConfigError("ModelMount.cache_max_bytes", m.cache_max_bytes, "a positive int of bytes")
