"""What a pod asks for and what a node has room for: a pod's effective requests, a node type's allocatable, and the
requests of the DaemonSets that run on it."""
from __future__ import annotations

import math
from typing import Any

from ._components import GI, GPU_RESOURCE, MI, catalogue, fmt_cpu, fmt_mem, parse_quantity
from .fit import match
from .plan import Res, describe_res
from .resources import POD_TEMPLATE_PATHS, dig, join_path, k8s_kind
from .shapes import DEFAULT_ROOT_VOLUME_GIB, Shape
from .unknowns import UNKNOWN

EVICTION_FRACTION = float(getattr(catalogue, "EVICTION_HARD_NODEFS_AVAILABLE", 0.10))
"""kubelet's `nodefs.available` hard eviction: the part of a larger root volume a pod cannot request."""

RESOURCES: tuple[str, ...] = ("cpu", "memory", "ephemeral-storage", GPU_RESOURCE)
"""What a pod's requests are judged on."""


def fmt_amount(resource: str, n: float) -> str:
    """An amount of `resource` (base units) as a message writes it: `3920m`, `14162Mi`, `1`."""
    if resource == "cpu":
        return fmt_cpu(n)
    if resource == GPU_RESOURCE:
        return f"{int(n)}"
    return fmt_mem(n)


def pod_requests(pod: Any, path: str) -> tuple[dict[str, float], list[str]]:
    """(effective requests of a plain pod spec — containers summed, the largest init container if larger; a limit
    stands for a missing request as Kubernetes defaults it — , paths of unknown amounts)."""
    unknown: list[str] = []

    def container_requests(field_name: str) -> list[dict[str, float]]:
        found = dig(pod, field_name, base=path)
        if found.unknown:
            unknown.append(found.path)
            return []
        out = []
        for i, c in enumerate(found.value if isinstance(found.value, list) else []):
            cpath = join_path(found.path, i)
            if not isinstance(c, dict):
                if c is UNKNOWN:
                    unknown.append(cpath)
                continue
            reqs = dig(c, "resources", "requests", base=cpath)
            lims = dig(c, "resources", "limits", base=cpath)
            amounts: dict[str, float] = {}
            for res in RESOURCES:
                for found_section in (reqs, lims):
                    section = found_section.value
                    if section is UNKNOWN:
                        unknown.append(found_section.path)
                        break
                    if isinstance(section, dict) and res in section:
                        v = section[res]
                        if v is UNKNOWN:
                            unknown.append(join_path(found_section.path, res))
                        else:
                            amounts[res] = parse_quantity(v) or 0.0
                        break
            out.append(amounts)
        return out

    total = {r: 0.0 for r in RESOURCES}
    for amounts in container_requests("containers"):
        for r, v in amounts.items():
            total[r] += v
    for amounts in container_requests("initContainers"):
        for r, v in amounts.items():
            total[r] = max(total[r], v)
    return total, sorted(set(unknown))


def allocatable(t: Any, shape: Shape) -> dict[str, float]:
    """What a pod may request on a node of type `t` in `shape` (base units): Karpenter's allocatable CPU and
    memory, the GPUs, and ephemeral storage from the root volume (the facts' figure for 20 GiB, plus 90 % of the
    rest: kubelet keeps 10 % back for eviction) or the instance-store RAID0 when the EC2NodeClass asks for it;
    unbounded when the EC2NodeClass is another stack's and no fact gives its volume."""
    if shape.instance_store and getattr(t, "local_nvme_gb", 0):
        # RAID0 over the instance store: the same kubelet reservations, applied to the NVMe capacity.
        disk = t.local_nvme_gb * 1e9 / GI
    elif shape.root_volume_gib is None:
        disk = math.inf  # another stack's EC2NodeClass: its volume is not known here (outside-this-stack says so)
    else:
        disk = shape.root_volume_gib
    eph = t.allocatable_ephemeral_gib + (1 - EVICTION_FRACTION) * (disk - DEFAULT_ROOT_VOLUME_GIB)
    return {"cpu": t.allocatable_cpu_m / 1000, "memory": t.allocatable_memory_mib * MI,
            "ephemeral-storage": max(eph, 0.0) * GI, GPU_RESOURCE: float(t.gpus)}


def daemonset_pods(resources: list[Res]) -> list[tuple[Res, Any, str]]:
    """(resource, plain pod spec, path) of every DaemonSet in the plan."""
    out = []
    for r in resources:
        if k8s_kind(r.type) == ("apps", "DaemonSet"):
            pod = dig(r.props, *POD_TEMPLATE_PATHS[("apps", "DaemonSet")])
            if isinstance(pod.value, dict):
                out.append((r, pod.value, pod.path))
    return out


def overhead(daemonsets: list[tuple[Res, Any, str]], shape: Shape, t: Any) -> tuple[dict[str, float], list[str]]:
    """Requests of the DaemonSets that run on a node of type `t` in `shape`, and their names."""
    total = {r: 0.0 for r in RESOURCES}
    names = []
    single = Shape(shape.res, shape.what, shape.spaces, shape.taints, [t], shape.type_reqs, karpenter=shape.karpenter)
    for res, pod, path in daemonsets:
        why, types, _u = match(pod, path, single)
        if why is None and types:
            reqs, _ = pod_requests(pod, path)
            for k, v in reqs.items():
                total[k] += v
            names.append(describe_res(res))
    return total, names


def free_on(t: Any, shape: Shape, daemonsets: list[tuple[Res, Any, str]]) -> tuple[dict[str, float], list[str]]:
    """What a pod may still request on a node of type `t` in `shape` once the DaemonSets there have theirs."""
    alloc = allocatable(t, shape)
    used, names = overhead(daemonsets, shape, t)
    return {r: alloc[r] - used[r] for r in RESOURCES}, names


def short_of(requests: dict[str, float], free: dict[str, float]) -> list[str]:
    """The resources the pod asks more of than is free."""
    return [r for r in RESOURCES if requests.get(r, 0) > free[r] + 1e-9]
