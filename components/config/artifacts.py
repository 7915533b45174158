"""The rules for what the workers run: a workload's own model (`workloads.<name>.model`), its batch and precision, and
the stack's worker image (`workerImage` by digest, or `workerBuild` from the lab's Dockerfile, and `workerImageCuda`);
each refusal one line naming the key and the value."""
from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import PurePosixPath
from typing import Any

from .. import catalogue
from ..spec.validation import ConfigError, Rule, is_int_between, validate
from ..spec.worker_pod import PRECISIONS, image_digest_problem, kms_key_arn_problem, model_uri_problem, sha256_problem
from ..spec.workload import JOB_DEADLINE_MAX_S, MESSAGES_PER_JOB_MAX, job_deadline_s, parallel_blocker
from .stack import NAMESPACE, ModelSource, WorkerBuild, WorkloadConfig

MODEL_KEYS = {"uri": "uri", "sha256": "sha256", "kmsKeyArn": "kms_key_arn", "cacheGiB": "cache_gib"}
"""`workloads.<name>.model` sub-keys -> ModelSource fields (uri and sha256 required)."""

WORKER_BUILD_KEYS = {"context": "context", "dockerfile": "dockerfile"}
"""`workerBuild` sub-keys -> WorkerBuild fields (context required)."""

_CUDA = re.compile(r"^(\d{1,2})\.(\d{1,2})$")


def check_keys(where: str, value: Any, known: Collection[str], noun: str, expected: str) -> None:
    """Refuse a non-mapping (`expected` says what is wanted) or a sub-key not in `known`, in one line naming it."""
    if not isinstance(value, dict):
        raise ConfigError(where, value, expected)
    for key in value:
        if key not in known:
            raise ConfigError(f"{where}.{key}", value[key], f"unknown {noun} key; known keys: {catalogue.join(known)}")


def artifact_workload_rules() -> list[Rule]:
    """The rules of the workload keys this module adds (`messagesPerJob`, `precision`; `model` is parsed apart)."""
    return [
        Rule("messagesPerJob", is_int_between(1, MESSAGES_PER_JOB_MAX),
             f"an integer from 1 to {MESSAGES_PER_JOB_MAX} (messages one ScaledJob Job takes; KEDA starts one Job "
             "per that many, so a larger batch gives a burst fewer GPUs)"),
        Rule("precision", lambda v: v in PRECISIONS,
             f"one of {catalogue.join(PRECISIONS)} (fp32 for results reproducible bit for bit across machines)"),
    ]


def parse_model(where: str, value: Any) -> ModelSource:
    """`workloads.<name>.model` as a ModelSource; ConfigError naming `<where>.model.<key>` and the value."""
    at = f"{where}.model"
    check_keys(at, value, MODEL_KEYS, "model",
               "a mapping {uri: s3://BUCKET/KEY, sha256: <64 hex>} (kmsKeyArn, cacheGiB optional)")
    for key in ("uri", "sha256"):
        if key not in value:
            raise ConfigError(f"{at}.{key}", None, "required: a model is an S3 object pinned by its digest "
                                                   "({uri: s3://BUCKET/KEY, sha256: <64 hex>})")
    digest = value["sha256"].lower() if isinstance(value["sha256"], str) else value["sha256"]
    problems = {"uri": model_uri_problem(value["uri"]), "sha256": sha256_problem(digest),
                "kmsKeyArn": kms_key_arn_problem(value["kmsKeyArn"]) if "kmsKeyArn" in value else None}
    for key, problem in problems.items():
        if problem:
            raise ConfigError(f"{at}.{key}", value[key], problem)
    validate(value, [Rule("cacheGiB", is_int_between(1, catalogue.MODEL_CACHE_MAX_GIB),
                          f"an integer of GiB from 1 to {catalogue.MODEL_CACHE_MAX_GIB} (the workload's node-local "
                          f"model cache; default {catalogue.MODEL_CACHE_DEFAULT_GIB})")], at + ".")
    return ModelSource(uri=value["uri"], sha256=digest, kms_key_arn=value.get("kmsKeyArn"),
                       cache_gib=value.get("cacheGiB", catalogue.MODEL_CACHE_DEFAULT_GIB))


def check_batch(where: str, workload: WorkloadConfig, written: bool) -> None:
    """Refuse a `messagesPerJob` (written, other than 1) that would do nothing or outlast the Job deadline's limit."""
    n = workload.messages_per_job
    if written and n != 1 and workload.runs_as_consumer:
        blocker = parallel_blocker(workload.facts())
        why = ("pattern: consumer" if workload.pattern == "consumer" else f"{blocker[0]}: {blocker[1]}" if blocker
               else "the chooser picked it for these facts")
        raise ConfigError(f"{where}.messagesPerJob", n,
                          f"1 or unset: workload {workload.name} runs as the persistent consumer ({why}), which takes "
                          "messages until it is stopped; messagesPerJob sizes ScaledJob Jobs only (set pattern: "
                          "scaledjob where the work allows it)")
    deadline = job_deadline_s(workload.model_load_s, n, workload.expected_processing_s)
    if deadline > JOB_DEADLINE_MAX_S:
        most = int((JOB_DEADLINE_MAX_S - workload.model_load_s) // workload.expected_processing_s)
        raise ConfigError(f"{where}.messagesPerJob", n,
                          f"at most {most}: a Job's deadline is modelLoadS + messagesPerJob x expectedProcessingS = "
                          f"{deadline} s, over the {JOB_DEADLINE_MAX_S} s (a week) a Job may run")


def parse_worker_image(value: Any) -> str:
    """`workerImage`: an image reference pinned by digest; a tag is refused in one line naming the value."""
    if image_digest_problem(value) is None:
        return value
    by_tag = isinstance(value, str) and "@" not in value
    raise ConfigError(f"{NAMESPACE}:workerImage", value,
                      ("an image pinned by digest, REGISTRY/REPO@sha256:<64 hex>: pin it by digest (a tag can be moved "
                       "to other bytes; `crane digest REF` prints it)") if by_tag else image_digest_problem(value))


def _relative_path(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip()) and not PurePosixPath(v).is_absolute() and "\\" not in v


def parse_worker_build(value: Any) -> WorkerBuild:
    """`workerBuild: {context, dockerfile?}`: the lab's build context and Dockerfile, relative paths (the context to
    the project folder, the Dockerfile to the context); that they exist is checked where the build is declared."""
    at = f"{NAMESPACE}:workerBuild"
    check_keys(at, value, WORKER_BUILD_KEYS, "workerBuild",
               "a mapping {context: DIR, dockerfile: FILE} (paths relative to the project folder and to the context)")
    if "context" not in value:
        raise ConfigError(f"{at}.context", None, "required: the folder the lab's Dockerfile builds from")
    rule = "a relative path (to the project folder for context, to the context for dockerfile), written with '/'"
    validate(value, [Rule("context", _relative_path, rule), Rule("dockerfile", _relative_path, rule)], at + ".")
    return WorkerBuild(**{WORKER_BUILD_KEYS[k]: v for k, v in value.items()})


def parse_worker_image_cuda(value: Any) -> str:
    """`workerImageCuda`: the CUDA version (MAJOR.MINOR) a lab's own image runs, of a major the catalogue knows."""
    m = _CUDA.match(str(value)) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None
    if m is None or m.group(1) not in catalogue.CUDA_RUNTIME_FLOORS:
        raise ConfigError(f"{NAMESPACE}:workerImageCuda", value,
                          "the CUDA version of the lab's image as a quoted \"MAJOR.MINOR\" of CUDA "
                          f"{' or '.join(m + '.x' for m in sorted(catalogue.CUDA_RUNTIME_FLOORS))} (e.g. \"12.8\"): "
                          "the policy pack checks the GPUs and the driver it needs")
    return f"{int(m.group(1))}.{int(m.group(2))}"


def check_image_keys(values: dict[str, Any]) -> None:
    """workerImage and workerBuild exclude each other; workerImageCuda needs one of them (the built-in image's CUDA is
    the catalogue's)."""
    if "workerImage" in values and "workerBuild" in values:
        raise ConfigError(f"{NAMESPACE}:workerBuild", values["workerBuild"],
                          "unset when workerImage is set: the workers run one image, prebuilt (workerImage) or built "
                          "here from the lab's Dockerfile (workerBuild)")
    if "workerImageCuda" in values and not ({"workerImage", "workerBuild"} & set(values)):
        raise ConfigError(f"{NAMESPACE}:workerImageCuda", values["workerImageCuda"],
                          f"unset unless workerImage or workerBuild is: the built-in image's CUDA is the catalogue's "
                          f"({catalogue.TORCH_CUDA['cuda']})")
