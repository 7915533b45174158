"""Stack rules on the node-local model cache: `model-cache-folder` (a pod that mounts it runs only on NodePools whose
EC2NodeClass makes the cache's folder at boot) and `model-cache-isolation` (each namespace mounts only its own folder
of it, and a platform plan holds the cluster's admission rule that says so).

The cache is a hostPath PersistentVolume of one folder, `names.MODEL_CACHE_HOST_PATH`, of `type: Directory`
(components/model_cache.py): kubelet mounts it only where the folder exists, and the node class's user data makes it
(`cache_folder_script()`, whose lines are `names.model_cache_folder_commands()`). A node without it fails the mount,
and the pods stay ContainerCreating with nothing failing at apply time.

A pod mounts the cache when one of its volumes claims `names.MODEL_CACHE_CLAIM`, or the claim that a PersistentVolume
of this plan with that hostPath is bound to. The NodePools it runs on are those its nodeSelector, required node
affinity and tolerations match (`fit.match`, as `gpu-pod-schedulable` finds them). For each, the EC2NodeClass it
boots:

- declared in this plan (the platform's own): its `spec.userData` must hold each line of
  `model_cache_folder_commands()` (the user data is read line by line, so a script that makes the folder some other
  way, or a base64-encoded MIME part, is not recognised);
- another stack's, in a partial plan: the fact `nodeClassModelCacheFolder` (`ExistingNodeClass.model_cache_folder`,
  registered by ExistingCluster as `nodeClasses[name].modelCacheFolder`, absent when None) must be true; false is a
  violation, no fact (not known) an `Outside` naming only the node class, so `outside-this-stack` says it once.

`model-cache-isolation` (components/spec/model_cache_admission.py argues why): every volumeMount of the cache in a
pod template's `containers`, `initContainers` and `ephemeralContainers` has a literal `subPath` under
`<the resource's namespace>/` (`model_cache_admission.sub_path_problem`, the admission rule's test in Python), so the
plan shows what the cluster would refuse at pod creation; and a whole plan (one that declares a GpuBurstPlatform, or
policy config `wholePlatform: true`) holds the ValidatingAdmissionPolicy and binding named
`model_cache_admission.ADMISSION_NAME` with exactly the specs of `admission_policy_manifest()` and
`admission_binding_manifest()` (missing or changed: the rule would not hold); a partial plan (a workload stack) whose
pods mount the cache and that does not declare that pair itself yields one `Outside`: the cluster's rule is the
platform's, and `outside-this-stack` says it could not be checked.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._components import model_cache_admission as mca
from ._components import names
from .declare import scoped_policy
from .facts import WHOLE, Scope
from .fit import match
from .fixes import fix_for
from .outside import Finding, Outside
from .plan import Res, describe_res, meta_name, meta_namespace
from .resources import NODEPOOL_NODECLASS, POD_TEMPLATE_PATHS, dig, enumerate_at, fmt, is_kind, join_path, k8s_kind
from .shapes import Shape, nodeclass_index, nodepool_shapes
from .unknowns import UNKNOWN, unknown_message
from .workloads import is_worker

NAME = "model-cache-folder"
FACT = "nodeClassModelCacheFolder"
AMI_ALIAS = "nodeClassAmiAlias"
"""A fact every ExistingNodeClass registers: with it, the node class is described but its cache folder not known."""
PERSISTENT_VOLUME = ("core", "PersistentVolume")
HOST_PATH: str = names.MODEL_CACHE_HOST_PATH
CLAIM: str = names.MODEL_CACHE_CLAIM
CAUSE = ("without that folder kubelet cannot mount the cache (hostPath type Directory) and the pods stay "
         "ContainerCreating")


def bound_claims(resources: list[Res]) -> set[tuple[Any, Any]]:
    """(namespace, claim name) of each claim a PersistentVolume of the plan binds to the cache's folder."""
    out = set()
    for r in resources:
        if is_kind(r.type, PERSISTENT_VOLUME) and dig(r.props, "spec", "hostPath", "path").value == HOST_PATH:
            ref = dig(r.props, "spec", "claimRef").value
            if isinstance(ref, dict):
                out.add((ref.get("namespace"), ref.get("name")))
    return out


def _claims(res: Res, volumes: Any, bound: set[tuple[Any, Any]]) -> Iterator[tuple[str, Any, str | None]]:
    """(path, volume, None) for each of the pod's volumes (`volumes`: the pod's `volumes` as `dig` found it, known) that
    claims the cache, and (path, volume, path of the unknown value) for each whose claim could: in volume order."""
    namespace = meta_namespace(res.props)
    for vpath, volume in enumerate_at(volumes):
        claim = dig(volume, "persistentVolumeClaim", "claimName", base=vpath) if volume is not UNKNOWN else None
        if claim is None or claim.unknown:
            yield vpath, volume, vpath if claim is None else claim.path
        elif claim.value == CLAIM or (namespace, claim.value) in bound or (None, claim.value) in bound:
            yield vpath, volume, None


def cache_volume(res: Res, pod: Any, path: str, bound: set[tuple[Any, Any]]) -> tuple[str | None, str | None]:
    """(path of the pod's volume that mounts the cache, or None; path of an unknown value that could, or None). An
    unknown volume counts only in a worker pod's spec (as `worker-host-path` reads them)."""
    volumes = dig(pod, "volumes", base=path)
    worker = is_worker(res, k8s_kind(res.type) or ("", ""))
    if volumes.unknown:
        return None, volumes.path if worker else None
    unknown = None
    for vpath, _volume, unknown_at in _claims(res, volumes, bound):
        if unknown_at is None:
            return vpath, None
        unknown = unknown or unknown_at
    return None, unknown if worker else None


def _pools(pod: Any, path: str, shapes: list[Shape]) -> tuple[list[Shape], list[str]]:
    """(the NodePools the pod matches, the paths of unknown values that could change which)."""
    matched, unknown = [], []
    for shape in shapes:
        why, _types, more = match(pod, path, shape)
        unknown += more + shape.unknown
        if why is None:
            matched.append(shape)
    return matched, sorted(set(unknown))


def _lacks(user_data: Any) -> list[str]:
    """The lines of `model_cache_folder_commands()` the user data does not hold."""
    lines = {line.strip() for line in user_data.splitlines()} if isinstance(user_data, str) else set()
    return [command for command in names.model_cache_folder_commands() if command not in lines]


def _in_plan(res: Res, who: str, shape: Shape, nodeclass: Res) -> Finding | None:
    nc_name = meta_name(nodeclass.props)
    user_data = dig(nodeclass.props, "spec", "userData")
    if user_data.unknown:
        return res.urn, unknown_message(f"EC2NodeClass {nc_name!r} {user_data.path}",
                                              f"whether it makes the model cache folder {HOST_PATH} that {who} mounts")
    missing = _lacks(user_data.value)
    if not missing:
        return None
    lacks = (f"has no line {', '.join(repr(m) for m in missing)}" if isinstance(user_data.value, str)
             else "is not set")
    fix = fix_for(nodeclass.urn,
                  platform="the platform adds cache_folder_script() to its GPU node class when a workload has a model "
                           "(gpuburst:workloads.<name>.model); declare the model there",
                  component="pass Ec2NodeClassArgs(boot_scripts=[cache_folder_script()])",
                  manifest="add cache_folder_script()'s text/x-shellscript part to spec.userData (a MIME multi-part, "
                           "as components/nodeclass.node_user_data writes it)")
    return (res.urn, f"{who} runs on {shape.what}, whose EC2NodeClass {nc_name!r} {user_data.path} {lacks} "
                           f"(names.model_cache_folder_commands): {CAUSE}; {fix}")


def _outside(res: Res, who: str, shape: Shape, nc_name: str, scope: Scope) -> Finding | Outside | None:
    fact = scope.entry(FACT, nc_name)
    if fact is None:
        # One line per node class (it names no pod or pool), however many pods mount the cache on its nodes.
        said = (f"ExistingNodeClass {nc_name!r} model_cache_folder is None: not known"
                if scope.entry(AMI_ALIAS, nc_name) is not None else f"no ExistingNodeClass {nc_name!r} describes it")
        return Outside(res.urn, f"EC2NodeClass {nc_name!r}, which a NodePool of this plan boots for pods that mount "
                                f"the model cache, is not in this plan ({said}): could not check that its user data "
                                f"makes the model cache folder {HOST_PATH} (ExistingNodeClass(model_cache_folder=True)"
                                " says it does: the platform's workloadStackConfig nodeClassModelCacheFolder)",
                       (FACT,))
    if fact.value is True:
        return None
    return (res.urn, f"{who} runs on {shape.what}, which boots EC2NodeClass {nc_name!r} of another stack: "
                           f"ExistingNodeClass {nc_name!r} model_cache_folder = {fact.value!r} ({fact.source}), so "
                           f"its user data is not known to make {HOST_PATH}, and {CAUSE}; ask the platform team to "
                           "run cache_folder_script() in that node class (GpuBurstPlatform does when its config has "
                           "a workload model), then set ExistingNodeClass(model_cache_folder=True)")


def _pod_specs(resources: list[Res]) -> list[tuple[Res, Any]]:
    """(resource, its pod spec as `dig` found it: `.value` a dict, `.path` where) of every pod-bearing resource."""
    out = []
    for res in resources:
        kind = k8s_kind(res.type)
        pod = dig(res.props, *POD_TEMPLATE_PATHS[kind]) if kind in POD_TEMPLATE_PATHS else None
        if pod is not None and isinstance(pod.value, dict):
            out.append((res, pod))
    return out

def cache_folder_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """A violation per (pod mounting the cache, EC2NodeClass of a NodePool it runs on) whose node class does not make
    the cache's folder; an `Outside` where that node class, or the NodePool, is another stack's and no fact says."""
    bound = bound_claims(resources)
    shapes: list[Shape] | None = None
    nodeclasses = nodeclass_index(resources)
    out: list[Finding | Outside] = []
    for res, pod in _pod_specs(resources):
        volume, unknown = cache_volume(res, pod.value, pod.path, bound)
        who = f"pod {describe_res(res)}"
        if volume is None:
            if unknown:
                out.append((res.urn, unknown_message(unknown, f"whether {who} mounts the model cache")))
            continue
        who = f"{who} (mounting the model cache at {join_path(volume, 'persistentVolumeClaim')})"
        shapes = nodepool_shapes(resources, scope=scope) if shapes is None else shapes
        matched, unknown_paths = _pools(pod.value, pod.path, shapes)
        if unknown_paths:
            out += [(res.urn, unknown_message(p, f"which NodePools {who} runs on")) for p in unknown_paths]
            continue
        if not matched and not scope.whole:
            out.append(Outside(res.urn, f"{who} matches no NodePool of this plan: could not check that the "
                                        f"EC2NodeClass of the one it runs on makes the model cache folder {HOST_PATH}"))
        seen: set[str] = set()
        for shape in matched:
            nc_name = dig(shape.res.props, *NODEPOOL_NODECLASS)
            if nc_name.unknown:
                out.append((res.urn, unknown_message(f"{shape.what} {nc_name.path}",
                                                     f"which EC2NodeClass the nodes of {who} boot")))
                continue
            if not isinstance(nc_name.value, str) or nc_name.value in seen:
                continue
            seen.add(nc_name.value)
            nodeclass = nodeclasses.get(nc_name.value)
            if nodeclass is not None:
                found = _in_plan(res, who, shape, nodeclass)
            elif scope.whole:
                continue  # a whole plan that lacks the node class: its NodePool's own rules say so
            else:
                found = _outside(res, who, shape, nc_name.value, scope)
            if found is not None:
                out.append(found)
    return out


POLICY = scoped_policy(
    NAME, "A pod that mounts the node-local model cache runs only on NodePools whose EC2NodeClass makes the cache's "
          "folder at boot (its user data runs cache_folder_script(); another stack's: ExistingNodeClass("
          "model_cache_folder=True)): without it the hostPath mount fails and the pods stay ContainerCreating.",
    cache_folder_findings, (FACT,))

ISOLATION = "model-cache-isolation"
ADMISSION = "admissionregistration.k8s.io"
VAP, VAP_BINDING = (ADMISSION, "ValidatingAdmissionPolicy"), (ADMISSION, "ValidatingAdmissionPolicyBinding")


def _cache_volume_names(res: Res, volumes: Any, bound: set[tuple[Any, Any]]) -> tuple[set[Any], str | None]:
    """(names of the pod's volumes that claim the cache, path of an unknown value that could; unknowns count only in
    a worker pod, as `cache_volume` reads them)."""
    worker = is_worker(res, k8s_kind(res.type) or ("", ""))
    if volumes.unknown:
        return set(), volumes.path if worker else None
    out: set[Any] = set()
    unknown = None
    for vpath, volume, unknown_at in _claims(res, volumes, bound):
        name = dig(volume, "name", base=vpath) if unknown_at is None else None
        if name is None or name.unknown:
            unknown = unknown or (unknown_at if name is None else name.path)
        else:
            out.add(name.value)
    return out, unknown if worker else None


def _mount_problems(res: Res, pod: Any, path: str, names_: set[Any], namespace: Any) -> list[str]:
    """One message per volumeMount of the cache (a volume in `names_`) not under `<namespace>/`."""
    out: list[str] = []
    for field in mca.CONTAINER_FIELDS:
        containers = dig(pod, field, base=path)
        if containers.unknown:
            out.append(unknown_message(containers.path, f"whether {describe_res(res)} mounts the model cache"))
            continue
        for cpath, container in enumerate_at(containers):
            mounts = dig(container, "volumeMounts", base=cpath)
            if mounts.unknown:
                out.append(unknown_message(mounts.path, f"whether {describe_res(res)} mounts the model cache"))
                continue
            for mpath, mount in enumerate_at(mounts):
                name = dig(mount, "name", base=mpath)
                if name.unknown or (name.value in names_ and any(
                        dig(mount, key).unknown for key in ("subPath", "subPathExpr"))):
                    out.append(unknown_message(mpath, f"which folder of the model cache {describe_res(res)} mounts"))
                    continue
                if name.value not in names_:
                    continue
                if namespace is UNKNOWN or not isinstance(namespace, str):
                    out.append(unknown_message("metadata.namespace", f"which folder of the model cache "
                                               f"{describe_res(res)} may mount") if namespace is UNKNOWN else
                               f"{describe_res(res)} mounts the model cache ({mpath}) but sets no metadata.namespace: "
                               "its subPath must be under '<namespace>/', so name the namespace")
                    continue
                problem = mca.sub_path_problem(namespace, mount)
                if problem:
                    out.append(f"{describe_res(res)} mounts the model cache claim at {mpath} with {problem}: the "
                               f"cluster's admission rule {mca.ADMISSION_NAME!r} refuses the pod; a namespace's "
                               f"folder is '{namespace}/<workload>' (ModelMount.cache_sub_path, which GpuScaledJob "
                               "and GpuConsumer put under the namespace)")
    return out


def _admission_problems(resources: list[Res]) -> list[tuple[str | None, str]]:
    """Why the whole plan's admission rule is missing or not the one of spec/model_cache_admission.py."""
    out: list[tuple[str | None, str]] = []
    for kind, want in ((VAP, mca.admission_policy_manifest()), (VAP_BINDING, mca.admission_binding_manifest())):
        mine = [r for r in resources if is_kind(r.type, kind) and meta_name(r.props) in (mca.ADMISSION_NAME, UNKNOWN)]
        if not mine:
            out.append((None, f"the plan is judged as the whole platform but declares no {kind[1]} "
                              f"{mca.ADMISSION_NAME!r}: nothing in the cluster keeps each namespace's pods in their "
                              "own folder of the model cache; GpuBurstPlatform declares it (ModelCacheAdmission), so "
                              "keep it"))
            continue
        for r in mine:
            spec = dig(r.props, "spec")
            if meta_name(r.props) is UNKNOWN or _has_unknown(spec.value):
                out.append((r.urn, unknown_message(spec.path if meta_name(r.props) is not UNKNOWN else
                                                   "metadata.name", f"whether {describe_res(r)} is the model cache's "
                                                                    "admission rule")))
            elif spec.value != want["spec"]:
                changed = sorted(k for k in set(want["spec"]) | set(spec.value or {})
                                 if (spec.value or {}).get(k) != want["spec"].get(k))
                out.append((r.urn, f"{describe_res(r)} spec differs from model_cache_admission's in "
                                   f"{', '.join(changed)} ({fmt([(spec.value or {}).get(k) for k in changed])[:300]}): "
                                   "the rule that keeps each namespace in its folder of the model cache must be "
                                   "exactly that one; declare it with ModelCacheAdmission"))
    return out


def _has_unknown(value: Any) -> bool:
    if value is UNKNOWN:
        return True
    if isinstance(value, dict):
        return any(_has_unknown(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_unknown(v) for v in value)
    return False


def _admission_outside(resources: list[Res], mounting: list[Res]) -> Outside | None:
    """In a partial plan whose pods mount the cache: an `Outside` unless the plan declares the admission rule (the
    ValidatingAdmissionPolicy and its binding `mca.ADMISSION_NAME`) itself; the cluster's is the platform's."""
    missing = [kind[1] for kind in (VAP, VAP_BINDING)
               if not any(is_kind(r.type, kind) and meta_name(r.props) == mca.ADMISSION_NAME for r in resources)]
    if not (mounting and missing):
        return None
    pods = ", ".join(describe_res(r) for r in mounting[:3]) + (f" and {len(mounting) - 3} more"
                                                              if len(mounting) > 3 else "")
    return Outside(mounting[0].urn,
                   f"the cluster's admission rule for the model cache is not in this plan (no {' nor '.join(missing)} "
                   f"{mca.ADMISSION_NAME!r}): could not check that the cluster keeps each namespace's pods in their "
                   f"own folder of the cache, which {pods} {'mounts' if len(mounting) == 1 else 'mount'} here; the "
                   "platform declares it (GpuBurstPlatform always does; a platform team's own cluster must declare "
                   "ModelCacheAdmission)")


def isolation_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) per cache mount outside its namespace's folder, and, in a whole plan (`scope`: one that declares
    a GpuBurstPlatform, or policy config wholePlatform), per missing or changed admission object; in a partial plan
    that mounts the cache and does not declare the admission rule, one `Outside` (`outside-this-stack` says the
    cluster's could not be checked)."""
    bound = bound_claims(resources)
    out: list[Finding | Outside] = []
    mounting: list[Res] = []
    for res, pod in _pod_specs(resources):
        names_, unknown = _cache_volume_names(res, dig(pod.value, "volumes", base=pod.path), bound)
        if unknown:
            out.append((res.urn, unknown_message(unknown, f"whether {describe_res(res)} mounts the model cache")))
        if names_:
            mounting.append(res)
            out += [(res.urn, m) for m in _mount_problems(res, pod.value, pod.path, names_,
                                                          meta_namespace(res.props))]
    if scope.whole:
        out += _admission_problems(resources)
    else:
        outside = _admission_outside(resources, mounting)
        out += [outside] if outside is not None else []
    return out


ISOLATION_POLICY = scoped_policy(
    ISOLATION, "Each namespace mounts only its own folder of the node-local model cache: every volumeMount of the "
               "cache claim has subPath '<namespace>/<folder>' (no subPathExpr), as the cluster's admission rule "
               "(model_cache_admission) requires; a whole platform plan holds that ValidatingAdmissionPolicy "
               "and binding unchanged (a workload stack's cluster's is another stack's: outside-this-stack says so).",
    isolation_findings)

POLICIES = [POLICY, ISOLATION_POLICY]
