"""The admission rule that keeps each namespace in its own folder of the node-local model cache: a
ValidatingAdmissionPolicy and its binding (admissionregistration.k8s.io/v1) under which a pod may mount the cache's
claim only with a `subPath` inside `<its namespace>/`.

Why: the cache is one hostPath folder per node (`names.MODEL_CACHE_HOST_PATH`, components/model_cache.py), reached in
every namespace through a claim of the same name (`names.MODEL_CACHE_CLAIM`); a workload's folder in it is
`<namespace>/<cache_sub_path>` (`cache_sub_path`). The `subPath` is written by whoever writes the pod spec, so without
a rule a team that may create pods in its own namespace could mount its claim with another team's folder, or with
none, and read every lab's cached models on that node. Neither RBAC nor Pod Security can say what a volumeMount's
subPath may be; a ValidatingAdmissionPolicy can (CEL on the pod, with `request.namespace`). What it admits, for a pod
of which a volume claims `MODEL_CACHE_CLAIM` (every other pod is not matched: `matchConditions`), each rule one
`validations` entry (`SUB_PATH_VALIDATIONS`):

- every volumeMount of such a volume in `containers`, `initContainers` and `ephemeralContainers` has a literal
  `subPath` that starts with `request.namespace + '/'`, has something after it and no `..` path element, and no
  `subPathExpr` (expanded from the pod's env by kubelet, after admission: it could name any folder).

It matches pods on CREATE, and the `pods/ephemeralcontainers` subresource on UPDATE: an ephemeral container is added
to a running pod through that subresource, whose request carries the whole Pod (kubernetes/kubernetes#101034), and may
mount the pod's volumes. The API refuses a subPath on an ephemeral container ("Subpath mounts are not allowed for
ephemeral containers", the EphemeralContainer API reference), so an ephemeral mount of the cache would see the whole
volume: this rule refuses it. A pod's containers and volumes cannot change after creation (Pod update validation), so
plain Pod UPDATE is not matched; matching it would refuse even finalizer removal on a pod created before the rule.

An expression error refuses the pod (`failurePolicy: Fail`); the binding denies (`validationActions: [Deny]`) in every
namespace (no selector, no params). The rule is cluster-wide and namespace-independent, so GpuBurstPlatform declares
it always (components/model_cache.py `ModelCacheAdmission`), and the pack's `model-cache-isolation` rule compares a
platform plan's pair with these manifests.

What it does not do: a process that escapes its container reads the node's whole folder, and every namespace's worker
runs as the same uid (`names.WORKER_UID`) with the same group; the rule separates what a pod spec can mount, not
what a compromised node can read.
"""
from __future__ import annotations

from typing import Any

from .names import MODEL_CACHE_CLAIM
from .verify_admission import cel_string

ADMISSION_NAME = "gpuburst-model-cache-sub-path"
"""Name of the ValidatingAdmissionPolicy and its binding."""

LABELS = {"app.kubernetes.io/name": "gpuburst-model-cache", "app.kubernetes.io/part-of": "gpuburst"}
"""Labels of both objects (the cache's own, components/model_cache.py)."""


def cache_sub_path(namespace: str, folder: str) -> str:
    """The volumeMount `subPath` of a workload's folder in the cache: `<namespace>/<folder>` (`folder` is
    `ModelMount.cache_sub_path`, a DNS label). Kubelet makes both folders when missing, each with the volume root's
    mode, setgid included (pkg/kubelet/kubelet_pods.go makeMounts: `SafeMakeDir(subPath, volumePath,
    GetMode(volumePath))`; pkg/volume/util/subpath/subpath_linux.go doSafeMakeDir fchmods every folder it creates)."""
    return f"{namespace}/{folder}"


CACHE_VOLUMES_VARIABLE = (
    "cacheVolumes",
    "object.spec.volumes.filter(v, has(v.persistentVolumeClaim) && "
    f"v.persistentVolumeClaim.claimName == {cel_string(MODEL_CACHE_CLAIM)}).map(v, v.name)")
"""(name, expression): the names of the pod's volumes that claim the cache. No `has(object.spec.volumes)` guard:
the matchCondition admits only pods that have volumes, and a ternary with an empty-list branch is one type-check
the API server's cel-go would have to unify that cel-python never tries."""

MATCH_CONDITION = (
    "mounts-model-cache",
    "has(object.spec.volumes) && object.spec.volumes.exists(v, has(v.persistentVolumeClaim) && "
    f"v.persistentVolumeClaim.claimName == {cel_string(MODEL_CACHE_CLAIM)})")
"""(name, expression): only pods with a volume claiming the cache are judged (the rest of the cluster's pods never
meet this rule or its failurePolicy)."""

_MOUNT_OK = ("!(m.name in variables.cacheVolumes) || (!has(m.subPathExpr) && has(m.subPath) && "
             "m.subPath.startsWith(request.namespace + '/') && size(m.subPath) > size(request.namespace) + 1 && "
             "!m.subPath.matches('(^|/)[.][.](/|$)'))")
"""A volumeMount `m` of the pod: not of the cache, or under the request's namespace folder."""

CONTAINER_FIELDS = ("containers", "initContainers", "ephemeralContainers")
"""The pod's container lists, one validation each (Container and EphemeralContainer are different types: CEL cannot
concatenate their lists)."""


def _validation(field: str) -> tuple[str, str]:
    return (f"!has(object.spec.{field}) || object.spec.{field}.all(c, !has(c.volumeMounts) || "
            f"c.volumeMounts.all(m, {_MOUNT_OK}))",
            f"a volumeMount of the model cache claim {MODEL_CACHE_CLAIM!r} in spec.{field} must set subPath "
            "'<the pod's namespace>/<folder>' (no subPathExpr): a namespace reads only its own cached models")


SUB_PATH_VALIDATIONS: tuple[tuple[str, str], ...] = tuple(_validation(f) for f in CONTAINER_FIELDS)
"""(CEL expression, message) of every rule the policy applies to a pod that mounts the cache."""


def admission_policy_manifest() -> dict[str, Any]:
    """The ValidatingAdmissionPolicy: pods created (or given an ephemeral container) with a volume claiming the cache
    must pass SUB_PATH_VALIDATIONS."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": ADMISSION_NAME, "labels": dict(LABELS)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]},
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
                 "resources": ["pods/ephemeralcontainers"]}]},
            "matchConditions": [{"name": MATCH_CONDITION[0], "expression": MATCH_CONDITION[1]}],
            "variables": [{"name": CACHE_VOLUMES_VARIABLE[0], "expression": CACHE_VOLUMES_VARIABLE[1]}],
            "validations": [{"expression": e, "message": m, "reason": "Forbidden"} for e, m in SUB_PATH_VALIDATIONS],
        },
    }


def admission_binding_manifest() -> dict[str, Any]:
    """The binding: the policy applies in every namespace (no selector, no params) and denies."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": ADMISSION_NAME, "labels": dict(LABELS)},
        "spec": {"policyName": ADMISSION_NAME, "validationActions": ["Deny"]},
    }


def sub_path_problem(namespace: Any, mount: Any) -> str | None:
    """Why a volumeMount (plain dict) of the cache in a pod of `namespace` breaks SUB_PATH_VALIDATIONS, or None: the
    same test in Python, for the pack to show at plan time what the cluster would refuse."""
    if not isinstance(mount, dict):
        return f"a volumeMount {mount!r} that is not a mapping"
    if mount.get("subPathExpr"):
        return f"subPathExpr {mount['subPathExpr']!r} (expanded by kubelet after admission: it could name any folder)"
    sub_path = mount.get("subPath")
    prefix = f"{namespace}/"
    if not sub_path:
        return "no subPath (the whole cache: every namespace's models)"
    if not (isinstance(sub_path, str) and sub_path.startswith(prefix) and len(sub_path) > len(prefix)
            and ".." not in sub_path.split("/")):
        return f"subPath {sub_path!r}, not a folder under {prefix!r} (another namespace's models)"
    return None
