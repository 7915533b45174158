"""Stack rule `model-cache-folder`: a pod that mounts the node-local model cache runs only on NodePools whose
EC2NodeClass makes the cache's folder at boot.

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
  registered by ExistingCluster as `nodeClasses[name].modelCacheFolder`) must be true; false is a violation, no fact
  an `Outside` (reported by `outside-this-stack`).
"""
from __future__ import annotations

from typing import Any

from ._components import names
from .declare import scoped_policy
from .facts import WHOLE, Scope
from .fit import match
from .fixes import fix_for
from .outside import Finding, Outside
from .plan import Res, describe_res, meta_name, meta_namespace
from .resources import NODEPOOL_NODECLASS, POD_TEMPLATE_PATHS, dig, enumerate_at, is_kind, join_path, k8s_kind
from .shapes import Shape, nodeclass_index, nodepool_shapes
from .unknowns import UNKNOWN, unknown_message
from .workloads import is_worker

NAME = "model-cache-folder"
FACT = "nodeClassModelCacheFolder"
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


def cache_volume(res: Res, pod: Any, path: str, bound: set[tuple[Any, Any]]) -> tuple[str | None, str | None]:
    """(path of the pod's volume that mounts the cache, or None; path of an unknown value that could, or None). An
    unknown volume counts only in a worker pod's spec (as `worker-host-path` reads them)."""
    volumes = dig(pod, "volumes", base=path)
    worker = is_worker(res, k8s_kind(res.type) or ("", ""))
    if volumes.unknown:
        return None, volumes.path if worker else None
    namespace = meta_namespace(res.props)
    unknown = None
    for vpath, volume in enumerate_at(volumes):
        claim = dig(volume, "persistentVolumeClaim", "claimName", base=vpath) if volume is not UNKNOWN else None
        if claim is None or claim.unknown:
            unknown = unknown or (vpath if claim is None else claim.path)
            continue
        if claim.value == CLAIM or (namespace, claim.value) in bound or (None, claim.value) in bound:
            return vpath, None
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
        return Outside(res.urn, f"{shape.what} boots EC2NodeClass {nc_name!r} (spec.template.spec.nodeClassRef."
                                      f"name), which is not in this plan: could not check that its user data makes "
                                      f"the model cache folder {HOST_PATH} that {who} mounts "
                                      f"(ExistingNodeClass(model_cache_folder=True) says it does)", (FACT,))
    if fact.value is True:
        return None
    return (res.urn, f"{who} runs on {shape.what}, which boots EC2NodeClass {nc_name!r} of another stack: "
                           f"ExistingNodeClass {nc_name!r} model_cache_folder = {fact.value!r} ({fact.source}), so "
                           f"its user data is not known to make {HOST_PATH}, and {CAUSE}; ask the platform team to "
                           "run cache_folder_script() in that node class (GpuBurstPlatform does when its config has "
                           "a workload model), then set ExistingNodeClass(model_cache_folder=True)")


def cache_folder_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """A violation per (pod mounting the cache, EC2NodeClass of a NodePool it runs on) whose node class does not make
    the cache's folder; an `Outside` where that node class, or the NodePool, is another stack's and no fact says."""
    bound = bound_claims(resources)
    shapes: list[Shape] | None = None
    nodeclasses = nodeclass_index(resources)
    out: list[Finding | Outside] = []
    for res in resources:
        kind = k8s_kind(res.type)
        if kind not in POD_TEMPLATE_PATHS:
            continue
        pod = dig(res.props, *POD_TEMPLATE_PATHS[kind])
        if not isinstance(pod.value, dict):
            continue
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

POLICIES = [POLICY]
