"""Rules on the workloads: KEDA SQS authentication, ScaledJob rollout and fit, and where GPU pods may land.

- `keda-sqs-trigger-auth`: an `aws-sqs-queue` trigger (ScaledJob or ScaledObject) authenticates through
  `authenticationRef`, never with AWS keys written into its metadata (they end up in plain text in etcd, in the
  plan and in every `kubectl get -o yaml`).
- `keda-scaledjob-rollout`: `spec.rollout.strategy: gradual`, so changing the ScaledJob does not delete Jobs that
  are half-way through a slide (KEDA's default `immediate` does).
- `keda-scaledjob-stateless`: a ScaledJob whose workload declares ordered or stateful processing (metadata
  annotations `gpuburst.io/ordered: "true"` / `gpuburst.io/stateful: "true"`) runs every message in a fresh Job with
  no order and no carried state: such work belongs in the persistent consumer (GpuConsumer Deployment).
- `scaledjob-messages-per-job`: a ScaledJob's `aws-sqs-queue` trigger `queueLength` (KEDA's default 5 when unset) equals
  the `--max-messages` its pods' worker runs with, when the command says one: KEDA starts one Job per `queueLength`
  messages and each Job takes `--max-messages`, so a mismatch leaves messages waiting for later polls or starts Jobs
  that find the queue empty (`gpuburst:workloads.<name>.messagesPerJob` sets both).
- `worker-host-path`: no worker pod declares a `hostPath` volume (the workers' namespace is Pod Security `restricted`,
  which refuses it at admission), and the only `hostPath` PersistentVolume is the model cache's: its one folder
  (`names.MODEL_CACHE_HOST_PATH`, `type: Directory`), bound to the cache's claim (`names.MODEL_CACHE_CLAIM`). A
  hostPath volume is how a `restricted` pod would reach a node's disk through a claim; this keeps that to one folder.
- `gpu-pod-placement`: a pod that requests `nvidia.com/gpu` (ScaledJob job template, Deployment, StatefulSet,
  DaemonSet, ReplicaSet, Job, CronJob, Pod) tolerates the GPU nodes' `nvidia.com/gpu` NoSchedule taint (or it never
  schedules) and does not pin one instance type through `nodeSelector` or required node affinity (or it waits
  whenever that one type has no capacity).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._components import GPU_PRESENT_LABEL, GPU_RESOURCE, GPU_TAINT, GPU_TOLERATION, WORKER_LABEL, catalogue, names
from .declare import resource_policy
from .fixes import fix_for
from .plan import Res
from .resources import (
    POD_TEMPLATE_PATHS,
    SCALED_JOB,
    SCALED_OBJECT,
    SQS_TRIGGER_TYPE,
    as_int,
    as_number,
    dig,
    enumerate_at,
    fmt,
    is_true_string,
    join_path,
    k8s_kind,
    triggers,
)
from .selection import admitted_types, describe, parse_labels, parse_requirements
from .unknowns import UNKNOWN, unknown_message

AUTH_NAME = "keda-sqs-trigger-auth"
ROLLOUT_NAME = "keda-scaledjob-rollout"
STATELESS_NAME = "keda-scaledjob-stateless"
PLACEMENT_NAME = "gpu-pod-placement"
BATCH_NAME = "scaledjob-messages-per-job"
HOST_PATH_NAME = "worker-host-path"
PERSISTENT_VOLUME = ("core", "PersistentVolume")
MAX_MESSAGES_FLAG = "--max-messages"
"""The worker's flag for the messages one Job takes (`python -m worker consume --mode job --max-messages N`)."""

INLINE_CREDENTIAL_KEYS = ("awsAccessKeyID", "awsSecretAccessKey", "awsSessionToken",
                          "awsAccessKeyIDFromEnv", "awsSecretAccessKeyFromEnv", "awsSessionTokenFromEnv")
"""Trigger metadata keys that carry static AWS credentials (directly, or from the target container's env)."""
ROLLOUT_STRATEGY = "gradual"
"""The one accepted `spec.rollout.strategy` (a value of `catalogue.KEDA_ROLLOUT_STRATEGIES`; a test keeps it so)."""
STATEFUL_ANNOTATIONS = ("gpuburst.io/ordered", "gpuburst.io/stateful")
"""Annotations the components set on a ScaledJob/Deployment from the workload's declared facts."""
USE_CONSUMER = "use the persistent consumer (GpuConsumer Deployment)"


# --------------------------------------------------------------------------------------------------------------------
# keda-sqs-trigger-auth
# --------------------------------------------------------------------------------------------------------------------

def auth_problems(props: Any) -> list[str]:
    """Why the aws-sqs-queue triggers of this ScaledJob/ScaledObject (plain props) authenticate unsafely."""
    found, unknown = triggers(props)
    out = [unknown_message(p, "whether the trigger authenticates through authenticationRef") for p in unknown]
    for path, trig in found:
        if trig.get("type") != SQS_TRIGGER_TYPE:
            continue
        metadata = dig(trig, "metadata", base=path)
        if metadata.unknown:
            out.append(unknown_message(metadata.path, "whether the trigger carries AWS keys"))
        elif isinstance(metadata.value, dict):
            for key in INLINE_CREDENTIAL_KEYS:
                if key in metadata.value:
                    out.append(f"{join_path(metadata.path, key)} is set: static AWS credentials in trigger metadata "
                               "are stored in plain text; remove them and authenticate through authenticationRef to a "
                               "TriggerAuthentication with podIdentity.provider 'aws'")
        ref = dig(trig, "authenticationRef", base=path)
        name = dig(trig, "authenticationRef", "name", base=path)
        if ref.unknown or name.unknown:
            continue  # present; the name is computed
        if not (isinstance(name.value, str) and name.value.strip()):
            got = "is missing" if ref.missing else f"has no name ({fmt(ref.value)})"
            out.append(f"{ref.path} {got}: an {SQS_TRIGGER_TYPE} trigger must name a TriggerAuthentication "
                       "(podIdentity.provider 'aws') in authenticationRef.name")
    return out


# --------------------------------------------------------------------------------------------------------------------
# keda-scaledjob-rollout and keda-scaledjob-stateless
# --------------------------------------------------------------------------------------------------------------------

def rollout_problems(props: Any) -> list[str]:
    """Why this ScaledJob (plain props) would delete running Jobs on change; empty when it rolls out gradually."""
    strategy = dig(props, "spec", "rollout", "strategy")
    if strategy.unknown:
        return [unknown_message(strategy.path, "how running Jobs are treated on change")]
    if strategy.value == ROLLOUT_STRATEGY:
        return []
    legacy = dig(props, "spec", "rolloutStrategy")
    if strategy.missing and not legacy.missing:
        return [f"{legacy.path} = {fmt(legacy.value)} is deprecated: set spec.rollout.strategy: {ROLLOUT_STRATEGY!r} "
                "instead"]
    got = "is missing (KEDA then uses 'immediate')" if strategy.missing else f"= {fmt(strategy.value)}"
    return [f"{strategy.path} {got}: changing the ScaledJob would delete Jobs in the middle of a slide; set "
            f"spec.rollout.strategy: {ROLLOUT_STRATEGY!r}"]


def stateless_problems(props: Any) -> list[str]:
    """Why this ScaledJob (plain props) must be a consumer Deployment instead; empty for independent work."""
    out = []
    for key in STATEFUL_ANNOTATIONS:
        found = dig(props, "metadata", "annotations", key)
        if found.unknown:
            out.append(unknown_message(found.path, "whether the workload is ordered or stateful"))
        elif is_true_string(found.value) or found.value is True:
            out.append(f"{found.path} = {fmt(found.value)}: a ScaledJob runs each message in a new Job, with no order "
                       f"and no state carried between messages; {USE_CONSUMER}")
    return out


# --------------------------------------------------------------------------------------------------------------------
# scaledjob-messages-per-job
# --------------------------------------------------------------------------------------------------------------------

def max_messages(pod: Any, path: str) -> tuple[list[tuple[str, Any]], list[str]]:
    """((path, value) of each `--max-messages N` / `--max-messages=N` in the pod's containers' command and args,
    paths of the unknowns that could hide one)."""
    found: list[tuple[str, Any]] = []
    unknown: list[str] = []
    containers = dig(pod, "containers", base=path)
    if containers.unknown:
        return [], [containers.path]
    for cpath, container in enumerate_at(containers):
        if container is UNKNOWN:
            unknown.append(cpath)
            continue
        for field in ("command", "args"):
            argv = dig(container, field, base=cpath)
            if argv.unknown:
                unknown.append(argv.path)
                continue
            items = argv.value if isinstance(argv.value, list) else []
            for i, arg in enumerate(items):
                if arg == MAX_MESSAGES_FLAG:
                    nxt = items[i + 1] if i + 1 < len(items) else None
                    if nxt is UNKNOWN:
                        unknown.append(join_path(argv.path, i + 1))
                    else:
                        found.append((join_path(argv.path, i + 1), nxt))
                elif isinstance(arg, str) and arg.startswith(MAX_MESSAGES_FLAG + "="):
                    found.append((join_path(argv.path, i), arg.split("=", 1)[1]))
    return found, unknown


def batch_problems(props: Any, urn: str | None = None) -> list[str]:
    """Why this ScaledJob (plain props; `urn` says which stack declared it, for the fix) starts Jobs for a number of
    messages other than its worker takes."""
    pod = dig(props, *POD_TEMPLATE_PATHS[SCALED_JOB])
    if pod.missing:
        return []
    if pod.unknown:
        return [unknown_message(pod.path, f"the {MAX_MESSAGES_FLAG} its worker runs with")]
    flags, unknown = max_messages(pod.value, pod.path)
    if not flags:
        return [unknown_message(p, f"whether its worker runs with {MAX_MESSAGES_FLAG}") for p in unknown]
    found, unknown_triggers = triggers(props)
    out = [unknown_message(p, "the trigger's queueLength") for p in unknown_triggers]
    default = catalogue.KEDA_SQS_DEFAULT_QUEUE_LENGTH
    for tpath, trig in found:
        if trig.get("type") != SQS_TRIGGER_TYPE:
            continue
        length = dig(trig, "metadata", "queueLength", base=tpath)
        if length.unknown:
            out.append(unknown_message(length.path, f"whether it equals the worker's {MAX_MESSAGES_FLAG}"))
            continue
        per_job = default if length.missing else as_int(length.value)
        said = f"is unset (KEDA's default {default})" if length.missing else f"= {fmt(length.value)}"
        for fpath, value in flags:
            if per_job is None or as_int(value) != per_job:
                out.append(f"{length.path} {said} but {fpath} ({MAX_MESSAGES_FLAG}) = {fmt(value)}: KEDA starts one "
                           f"Job per queueLength messages and each Job takes {MAX_MESSAGES_FLAG}, so a mismatch leaves "
                           "messages waiting for later polls or starts Jobs that find the queue empty; set both to "
                           "the same number " + fix_for(
                               urn, platform="(gpuburst:workloads.<name>.messagesPerJob)",
                               component="(ScaledJobSettings queue_length and max_messages_per_job, or "
                                         "settings_for_batch(N, ...))",
                               manifest=f"(the trigger's queueLength and the worker's {MAX_MESSAGES_FLAG})"))
    return out


# --------------------------------------------------------------------------------------------------------------------
# worker-host-path
# --------------------------------------------------------------------------------------------------------------------

def is_worker(res: Res, kind: tuple[str, str]) -> bool:
    """Whether `res` (a pod-bearing resource of `kind`) or its pods are labelled `app.kubernetes.io/name:
    WORKER_LABEL`."""
    labels = dig(res.props, *POD_TEMPLATE_PATHS[kind][:-1], "metadata", "labels").value
    own = dig(res.props, "metadata", "labels", "app.kubernetes.io/name").value
    return WORKER_LABEL in ((labels or {}).get("app.kubernetes.io/name") if isinstance(labels, dict) else None, own)


def host_path_problems(res: Res) -> list[str]:
    """Why a worker pod (a hostPath volume) or a PersistentVolume (a hostPath other than the model cache's) opens
    the node's disk to the workers."""
    kind = k8s_kind(res.type)
    if kind == PERSISTENT_VOLUME:
        host = dig(res.props, "spec", "hostPath")
        if host.missing:
            return []
        path, kind_of, claim = (dig(host.value, "path", base=host.path), dig(host.value, "type", base=host.path),
                                dig(res.props, "spec", "claimRef", "name"))
        unknown = [f.path for f in (path, kind_of, claim) if f.unknown]
        if unknown:
            return [unknown_message(unknown[0], "whether the hostPath volume is the model cache's folder")]
        want = (names.MODEL_CACHE_HOST_PATH, "Directory", names.MODEL_CACHE_CLAIM)
        if (path.value, kind_of.value, claim.value) == want:
            return []
        return [f"{host.path} = {fmt(host.value)} (claimRef.name {fmt(claim.value)}): a hostPath PersistentVolume lets "
                "any pod of the claim's namespace, `restricted` or not, reach that node folder; the only one allowed "
                f"is the model cache: path {want[0]!r}, type {want[1]!r}, bound to claim {want[2]!r}"]
    if kind not in POD_TEMPLATE_PATHS or not is_worker(res, kind):
        return []
    volumes = dig(res.props, *POD_TEMPLATE_PATHS[kind], "volumes")
    if volumes.unknown:
        return [unknown_message(volumes.path, "whether a worker pod mounts a node folder")]
    return [f"{vpath}.hostPath = {fmt(volume['hostPath'])}: a worker pod may not mount a node folder (the namespace's "
            "Pod Security `restricted` refuses it at admission); the model cache reaches it through its claim"
            for vpath, volume in enumerate_at(volumes) if isinstance(volume, dict) and "hostPath" in volume]


# --------------------------------------------------------------------------------------------------------------------
# gpu-pod-placement
# --------------------------------------------------------------------------------------------------------------------

def requests_gpu(pod: Any, path: str) -> tuple[bool | None, list[str]]:
    """(True / False / None when unknown during preview, paths of the unknowns) for a plain pod spec."""
    unknown: list[str] = []
    if pod is UNKNOWN:
        return None, [path]
    for field in ("containers", "initContainers"):
        containers = dig(pod, field, base=path)
        if containers.unknown:
            unknown.append(containers.path)
            continue
        for cpath, container in enumerate_at(containers):
            if container is UNKNOWN:
                unknown.append(cpath)
                continue
            for section in ("limits", "requests"):
                found = dig(container, "resources", section, GPU_RESOURCE, base=cpath)
                if found.unknown:
                    unknown.append(found.path)
                elif (as_number(found.value) or 0) > 0:
                    return True, []
    return (None if unknown else False), unknown


def _tolerates(pod: Any, path: str) -> tuple[bool | None, str]:
    tolerations = dig(pod, "tolerations", base=path)
    if tolerations.unknown:
        return None, tolerations.path
    unknown_at = ""
    for tpath, tol in enumerate_at(tolerations):
        if tol is UNKNOWN or (isinstance(tol, dict) and UNKNOWN in (tol.get("key"), tol.get("operator"),
                                                                     tol.get("effect"))):
            unknown_at = unknown_at or tpath
            continue
        if not isinstance(tol, dict):
            continue
        key, operator, effect = tol.get("key") or "", tol.get("operator") or "Equal", tol.get("effect") or ""
        key_ok = key == GPU_TAINT["key"] or (key == "" and operator == "Exists")
        if key_ok and effect in ("", GPU_TAINT["effect"]):
            return True, ""
    return (None, unknown_at) if unknown_at else (False, tolerations.path)


def pinned_types(pod: Any, path: str) -> tuple[frozenset[str] | None, str, list[str]]:
    """(the instance types the pod's required node selection admits when that is bounded, a description, unknowns)."""
    selector = dig(pod, "nodeSelector", base=path)
    base = parse_labels(selector.value, selector.path)
    terms = dig(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                "nodeSelectorTerms", base=path)
    term_items = list(enumerate_at(terms)) if not terms.unknown else []
    parsed_terms = []
    unknown = list(base.unknown_paths) + ([terms.path] if terms.unknown else [])
    for tpath, term in term_items or [(selector.path, {})]:
        exprs = dig(term, "matchExpressions", base=tpath) if term is not UNKNOWN else None
        parsed = base.extend(parse_requirements(exprs.value, exprs.path)) if exprs else base
        if term is UNKNOWN:
            unknown.append(tpath)
        unknown += [p for p in parsed.unknown_paths if p not in unknown]
        parsed_terms.append(parsed)
    admitted: set[str] = set()
    for parsed in parsed_terms:
        types = admitted_types(parsed.requirements)
        if types is None:
            return None, "", unknown
        admitted |= types
    return frozenset(admitted), " OR ".join(describe(p.requirements) for p in parsed_terms), unknown


def placement_problems(pod: Any, path: str) -> list[str]:
    """Why a plain pod spec at `path` that requests GPUs cannot (or must not) land on GPU nodes."""
    gpu, unknown_gpu = requests_gpu(pod, path)
    if gpu is False:
        return []
    problems: list[str] = []
    tolerates, where = _tolerates(pod, path)
    if tolerates is None:
        problems.append(unknown_message(where, f"whether the pod tolerates the {GPU_TAINT['key']} taint"))
    elif not tolerates:
        tol = GPU_TOLERATION
        problems.append(f"{where} has no toleration for the {GPU_TAINT['key']}:{GPU_TAINT['effect']} taint GPU nodes "
                        f"carry, so the pod never schedules on one; add {{key: {tol['key']}, operator: "
                        f"{tol['operator']}, effect: {tol['effect']}}}")
    types, described, unknown_sel = pinned_types(pod, path)
    if types is not None and len(types) <= 1:
        what = f"only {next(iter(types))!r}" if types else "no instance type at all"
        problems.append(f"{path}: nodeSelector / required nodeAffinity admit {what} ({described}): a GPU pod pinned "
                        "to one instance type waits whenever that type has no capacity; select on "
                        f"{GPU_PRESENT_LABEL[0]}: \"{GPU_PRESENT_LABEL[1]}\" and let the NodePool choose among "
                        "several types")
    elif unknown_sel:
        problems += [unknown_message(p, "whether the pod pins one instance type") for p in unknown_sel]
    if gpu is None and problems:
        # Whether the pod asks for a GPU is itself unknown: say that first, the rest only matters if it does.
        return [unknown_message(unknown_gpu[0], f"whether the pod requests {GPU_RESOURCE}")] + problems
    return problems


def _placement(res: Res) -> Iterable[str]:
    pod = dig(res.props, *POD_TEMPLATE_PATHS[k8s_kind(res.type)])
    if pod.missing:
        return []
    return placement_problems(pod.value, pod.path)


AUTH_POLICY = resource_policy(
    AUTH_NAME, "An aws-sqs-queue KEDA trigger must authenticate through authenticationRef, with no AWS keys in its "
               "metadata.", (SCALED_JOB, SCALED_OBJECT), lambda r: auth_problems(r.props))
ROLLOUT_POLICY = resource_policy(
    ROLLOUT_NAME, "A KEDA ScaledJob must set spec.rollout.strategy: gradual.", (SCALED_JOB,),
    lambda r: rollout_problems(r.props))
STATELESS_POLICY = resource_policy(
    STATELESS_NAME, "A ScaledJob must not run ordered or stateful work; " + USE_CONSUMER + ".", (SCALED_JOB,),
    lambda r: stateless_problems(r.props))
BATCH_POLICY = resource_policy(
    BATCH_NAME, f"A ScaledJob's aws-sqs-queue queueLength must equal its worker's {MAX_MESSAGES_FLAG}.",
    (SCALED_JOB,), lambda r: batch_problems(r.props, r.urn))
HOST_PATH_POLICY = resource_policy(
    HOST_PATH_NAME, "A worker pod must not declare a hostPath volume; the only hostPath PersistentVolume is the model "
                    "cache's one folder, bound to its claim.", (*POD_TEMPLATE_PATHS, PERSISTENT_VOLUME),
    host_path_problems)
PLACEMENT_POLICY = resource_policy(
    PLACEMENT_NAME, f"A pod requesting {GPU_RESOURCE} must tolerate the {GPU_TAINT['key']} taint and must not pin "
                    "a single instance type.", POD_TEMPLATE_PATHS, _placement)

POLICIES = [AUTH_POLICY, ROLLOUT_POLICY, STATELESS_POLICY, BATCH_POLICY, HOST_PATH_POLICY, PLACEMENT_POLICY]
