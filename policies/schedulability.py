"""Stack rules on where pods can run: GPU pods match a NodePool and fit its instance types, the device plugin reaches
every GPU pool, and the controllers stay on the system node group."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple, Optional

from pulumi_policy import EnforcementLevel, StackValidationArgs, StackValidationPolicy

from components import catalogue

from .gpu_nodepool import GPU_RESOURCE, gpu_evidence
from .resources import (EC2NODECLASS, HELM_CHART_TYPES, NODEPOOL, POD_TEMPLATE_PATHS, dig, fmt, is_kind, join_path,
                        k8s_kind)
from .selection import (CATEGORY_KEY, DIMENSIONS, FAMILY_KEY, GENERATION_KEY, INSTANCE_TYPE_KEYS, SIZE_KEY,
                        family_parts, normalise, split_type)
from .unknowns import UNKNOWN, guard_stack, plain, unknown_message

SCHEDULABLE_NAME = "gpu-pod-schedulable"
DIVERSITY_NAME = "gpu-pod-effective-diversity"
DEVICE_PLUGIN_NAME = "device-plugin-placement"
CONTROLLER_NAME = "controller-placement"

NODEGROUP = "aws:eks/nodeGroup:NodeGroup"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
"""Label Karpenter puts on every node it launches (value: the NodePool's name); nodes it does not manage lack it."""
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
DEFAULT_ROOT_VOLUME_GIB = float(getattr(catalogue, "DEFAULT_ROOT_VOLUME_GIB", 20))
"""Root volume of an AL2023 node when the EC2NodeClass sets no blockDeviceMappings (Karpenter's default); the
facts' `allocatable_ephemeral_gib` is for this size."""
EVICTION_FRACTION = float(getattr(catalogue, "EVICTION_HARD_NODEFS_AVAILABLE", 0.10))
"""kubelet's `nodefs.available` hard eviction: the part of a larger root volume a pod cannot request."""

GPU_COUNT_KEY = "karpenter.k8s.aws/instance-gpu-count"
GPU_NAME_KEY = "karpenter.k8s.aws/instance-gpu-name"
GPU_MANUFACTURER_KEY = "karpenter.k8s.aws/instance-gpu-manufacturer"
GPU_MEMORY_KEY = "karpenter.k8s.aws/instance-gpu-memory"
CPU_KEY = "karpenter.k8s.aws/instance-cpu"
MEMORY_KEY = "karpenter.k8s.aws/instance-memory"
TYPE_KEYS = set(DIMENSIONS) | {GPU_COUNT_KEY, GPU_NAME_KEY, GPU_MANUFACTURER_KEY, GPU_MEMORY_KEY, CPU_KEY, MEMORY_KEY}
"""Labels whose value follows from the instance type (judged per type against the facts)."""
WELL_KNOWN_KEYS = {"kubernetes.io/arch", "kubernetes.io/os", "topology.kubernetes.io/zone",
                   "topology.kubernetes.io/region", "karpenter.sh/capacity-type", "kubernetes.io/hostname",
                   "topology.k8s.aws/zone-id", "karpenter.k8s.aws/instance-hypervisor",
                   "karpenter.k8s.aws/instance-network-bandwidth",
                   "karpenter.k8s.aws/instance-encryption-in-transit-supported",
                   "karpenter.k8s.aws/instance-local-nvme", "karpenter.k8s.aws/instance-ebs-bandwidth"}
"""Labels every node carries with some value even when the NodePool does not constrain them."""


# --------------------------------------------------------------------------------------------------------------------
# The plan as plain resources.
# --------------------------------------------------------------------------------------------------------------------

class Res(NamedTuple):
    """One plan resource with plain props."""

    type: str
    urn: str
    name: str
    parent: Optional[str]
    """The parent's URN (None at the top or when the parent is not in the stack)."""
    props: Any
    dependencies: tuple[str, ...] = ()
    """URNs of the resources it depends on (an Output's source is one: how an unknown reference is resolved)."""


def stack_resources(args: StackValidationArgs) -> list[Res]:
    """The stack's resources as `Res` (unknowns become `UNKNOWN`)."""
    out = []
    for r in args.resources:
        parent = getattr(r, "parent", None)
        deps = tuple(d.urn for d in (getattr(r, "dependencies", None) or []) if getattr(d, "urn", None))
        out.append(Res(r.resource_type, r.urn, r.name, getattr(parent, "urn", None), plain(r.props), deps))
    return out


def meta_name(props: Any) -> Any:
    return dig(props, "metadata", "name").value


def meta_namespace(props: Any) -> Any:
    return dig(props, "metadata", "namespace").value


def describe_res(res: Res) -> str:
    """`ScaledJob gpuburst/slides` / `NodePool 'gpu'` / the resource name: how a message names one end."""
    kind = k8s_kind(res.type)
    name = meta_name(res.props)
    if kind and isinstance(name, str):
        ns = meta_namespace(res.props)
        return f"{kind[1]} {ns + '/' if isinstance(ns, str) else ''}{name}"
    return f"{res.type.rsplit(':', 1)[-1]} {res.name}"


def chart_of(res: Res, by_urn: dict[str, Res]) -> Optional[str]:
    """The name of the Helm chart (`karpenter`, `keda`...) that rendered this resource, walking up its parents."""
    from .versions import chart_ref  # versions imports nothing from here; imported late to keep module load light
    seen = 0
    urn = res.parent
    while urn and seen < 50:
        parent = by_urn.get(urn)
        if parent is None:
            return None
        if parent.type in HELM_CHART_TYPES:
            name = chart_ref(parent.props).name
            return name if isinstance(name, str) else None
        urn, seen = parent.parent, seen + 1
    return None


def charts(resources: list[Res], name: str) -> list[Res]:
    """The Helm chart resources of chart `name`."""
    from .versions import chart_ref
    return [r for r in resources if r.type in HELM_CHART_TYPES and chart_ref(r.props).name == name]


def rendered(resources: list[Res], chart: Res) -> list[Res]:
    """The objects rendered from `chart` (its descendants) in the plan."""
    by_parent: dict[str, list[Res]] = {}
    for r in resources:
        if r.parent:
            by_parent.setdefault(r.parent, []).append(r)
    out, todo = [], [chart.urn]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            out.append(child)
            todo.append(child.urn)
    return out


# --------------------------------------------------------------------------------------------------------------------
# Quantities and pod requests.
# --------------------------------------------------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_SUFFIX = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
MI = 2 ** 20
GI = 2 ** 30


def quantity(value: Any) -> Optional[float]:
    """A Kubernetes quantity (`4`, `100m`, `24Gi`, `1.5G`, 2.0) in base units; None when it does not parse."""
    if isinstance(value, bool) or value is None or value is UNKNOWN:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    m = _QUANTITY.match(str(value).strip())
    if not m:
        return None
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def fmt_mem(n: float) -> str:
    """Bytes as Kubernetes writes them: 24Gi, 14162Mi."""
    if n % GI == 0:
        return f"{int(n // GI)}Gi"
    return f"{int(round(n / MI))}Mi"


def fmt_cpu(n: float) -> str:
    return f"{int(n)}" if float(n).is_integer() else f"{int(round(n * 1000))}m"


RESOURCES = ("cpu", "memory", "ephemeral-storage", GPU_RESOURCE)
"""What a pod's requests are judged on."""


def fmt_amount(resource: str, n: float) -> str:
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
                            amounts[res] = quantity(v) or 0.0
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


# --------------------------------------------------------------------------------------------------------------------
# Node shapes: what labels, taints and instance types a NodePool or node group gives its nodes.
# --------------------------------------------------------------------------------------------------------------------

@dataclass
class Space:
    """The values one label may take on a node of a shape: `allowed` None means any value; `present` False means
    the label is absent."""

    allowed: Optional[set[str]] = None
    excluded: set[str] = field(default_factory=set)
    present: bool = True

    def values_left(self) -> Optional[set[str]]:
        return None if self.allowed is None else self.allowed - self.excluded


def _numeric_ok(op: str, value: str, bound: str) -> bool:
    try:
        n, b = float(value), float(bound)
    except ValueError:
        return False
    return {"Gt": n > b, "Lt": n < b, "Gte": n >= b, "Lte": n <= b}.get(op, False)


def satisfiable(space: Optional[Space], op: str, values: list[str]) -> bool:
    """Whether some node of the shape can satisfy `key op values` given the label's `space` (None: absent)."""
    present = space is not None and space.present
    left = space.values_left() if present else set()
    if op == "In":
        return present and (left is None or bool(left & set(values)))
    if op == "NotIn":
        return not present or left is None or bool(left - set(values))
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt", "Gte", "Lte"):
        return present and (left is None or any(_numeric_ok(op, v, values[0] if values else "") for v in left))
    return False


def type_labels(t: Any) -> dict[str, str]:
    """The labels Karpenter gives a node of instance type `t` (facts from the catalogue)."""
    family, size = (split_type(t.name) or (t.family, ""))
    cat_gen = family_parts(t.family) or ("", "")
    labels = {k: t.name for k in INSTANCE_TYPE_KEYS}
    labels.update({FAMILY_KEY: t.family, SIZE_KEY: size, CATEGORY_KEY: cat_gen[0], GENERATION_KEY: cat_gen[1],
                   CPU_KEY: str(t.vcpu), MEMORY_KEY: str(t.memory_mib)})
    if t.gpus:
        labels.update({GPU_COUNT_KEY: str(t.gpus), GPU_NAME_KEY: normalise(t.gpu_name),
                       GPU_MANUFACTURER_KEY: "nvidia", GPU_MEMORY_KEY: str(t.gpu_memory_mib)})
    return labels


@dataclass
class Shape:
    """One kind of node a pod could land on: a NodePool (with its candidate instance types) or a node group."""

    res: Res
    what: str
    """How messages name it: `NodePool 'gpu'`, `NodeGroup gpuburst-cluster-system`."""
    spaces: dict[str, Space]
    """Label spaces for labels that do not follow from the instance type."""
    taints: list[dict]
    types: list[Any]
    """Instance types (catalogue facts) its nodes may have; empty for a node group without facts."""
    type_reqs: list[tuple[str, str, list[str]]] = field(default_factory=list)
    missing_facts: list[str] = field(default_factory=list)
    """Instance types it names that the facts do not describe."""
    unknown: list[str] = field(default_factory=list)
    root_volume_gib: float = DEFAULT_ROOT_VOLUME_GIB
    instance_store: bool = False
    karpenter: bool = True

    def space(self, key: str, t: Any = None) -> Optional[Space]:
        if key in TYPE_KEYS:
            if t is None:
                if key in INSTANCE_TYPE_KEYS and key in self.spaces:
                    return self.spaces[key]  # a node group's instanceTypes
                # A node group's nodes carry these labels with values the facts do not describe here.
                return Space() if (self.types or not self.karpenter) else None
            value = type_labels(t).get(key)
            return Space({value}) if value is not None else None
        if key in self.spaces:
            return self.spaces[key]
        if key in WELL_KNOWN_KEYS or (not self.karpenter and key == NODEGROUP_LABEL):
            return Space()
        return None


def _req_items(items: Any, path: str, unknown: list[str]) -> list[tuple[str, str, list[str], str]]:
    out = []
    if items is UNKNOWN:
        unknown.append(path)
        return out
    for i, item in enumerate(items if isinstance(items, list) else []):
        ipath = join_path(path, i)
        if item is UNKNOWN or (isinstance(item, dict) and (UNKNOWN in (item.get("key"), item.get("operator"))
                                                           or item.get("values") is UNKNOWN
                                                           or UNKNOWN in (item.get("values") or []))):
            unknown.append(ipath)
            continue
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            continue
        values = [normalise(v) if item["key"] in TYPE_KEYS else str(v) for v in (item.get("values") or [])]
        out.append((item["key"].strip(), str(item.get("operator")), values, ipath))
    return out


def _type_admits(t: Any, reqs: Iterable[tuple[str, str, list[str]]]) -> bool:
    labels = type_labels(t)
    for key, op, values in reqs:
        value = labels.get(key)
        if not satisfiable(Space({value}) if value is not None else None, op, values):
            return False
    return True


def _facts(facts: Optional[dict]) -> dict:
    if facts is not None:
        return facts
    return getattr(catalogue, "INSTANCE_TYPES", {}) or {}


def nodepool_shape(res: Res, nodeclasses: dict[str, Res], facts: Optional[dict] = None) -> Shape:
    """The node shape of a NodePool: template labels, requirements, taints, the facts of the types it admits, and
    the root volume of its EC2NodeClass."""
    facts = _facts(facts)
    props = res.props
    name = meta_name(props)
    unknown: list[str] = []
    spaces: dict[str, Space] = {NODEPOOL_LABEL: Space({name} if isinstance(name, str) else None)}
    type_reqs: list[tuple[str, str, list[str]]] = []
    labels = dig(props, "spec", "template", "metadata", "labels")
    if labels.unknown:
        unknown.append(labels.path)
    for key, value in (labels.value.items() if isinstance(labels.value, dict) else []):
        if value is UNKNOWN:
            unknown.append(join_path(labels.path, key))
        elif key in TYPE_KEYS:
            type_reqs.append((key, "In", [normalise(value)]))
        else:
            spaces[key] = Space({str(value)})
    reqs = dig(props, "spec", "template", "spec", "requirements")
    for key, op, values, _path in _req_items(reqs.value, reqs.path, unknown):
        if key in TYPE_KEYS:
            type_reqs.append((key, op, values))
            continue
        space = spaces.setdefault(key, Space())
        if op == "In":
            space.allowed = set(values) if space.allowed is None else space.allowed & set(values)
        elif op == "NotIn":
            space.excluded |= set(values)
        elif op == "DoesNotExist":
            space.present = False
    taints_found = dig(props, "spec", "template", "spec", "taints")
    if taints_found.unknown:
        unknown.append(taints_found.path)
    taints = [t for t in (taints_found.value if isinstance(taints_found.value, list) else []) if isinstance(t, dict)]
    types = [t for t in facts.values() if _type_admits(t, type_reqs)]
    named = {v for key, op, values in type_reqs if key in INSTANCE_TYPE_KEYS and op == "In" for v in values}
    missing = sorted(n for n in named if n not in facts and _type_admits_name(n, type_reqs))
    shape = Shape(res, f"NodePool {name!r}" if isinstance(name, str) else f"NodePool {res.name}", spaces, taints,
                  sorted(types, key=lambda t: t.name), type_reqs, missing, unknown)
    nc_name = dig(props, "spec", "template", "spec", "nodeClassRef", "name").value
    nodeclass = nodeclasses.get(nc_name) if isinstance(nc_name, str) else None
    if nodeclass is not None:
        shape.root_volume_gib, shape.instance_store, more = root_volume(nodeclass.props)
        shape.unknown += more
    return shape


def _type_admits_name(name: str, reqs: list[tuple[str, str, list[str]]]) -> bool:
    for key, op, values in reqs:
        if key in INSTANCE_TYPE_KEYS and not satisfiable(Space({name}), op, values):
            return False
    return True


def root_volume(nodeclass_props: Any) -> tuple[float, bool, list[str]]:
    """(root volume GiB, whether ephemeral storage is the local NVMe RAID0, unknown paths) of an EC2NodeClass."""
    found = dig(nodeclass_props, "spec", "blockDeviceMappings")
    store = dig(nodeclass_props, "spec", "instanceStorePolicy").value == "RAID0"
    if found.unknown:
        return DEFAULT_ROOT_VOLUME_GIB, store, [found.path]
    items = [m for m in (found.value if isinstance(found.value, list) else []) if isinstance(m, dict)]
    root = next((m for m in items if m.get("rootVolume") is True), None) or \
        next((m for m in items if m.get("deviceName") == "/dev/xvda"), None)
    if root is None:
        return DEFAULT_ROOT_VOLUME_GIB, store, []
    size = dig(root, "ebs", "volumeSize")
    if size.unknown:
        return DEFAULT_ROOT_VOLUME_GIB, store, [f"{found.path} root volumeSize"]
    n = quantity(size.value)
    return (n / GI if n is not None else DEFAULT_ROOT_VOLUME_GIB), store, []


def nodegroup_shape(res: Res) -> Shape:
    """The node shape of an EKS managed node group: its labels and taints (no Karpenter label)."""
    props = res.props
    spaces = {k: Space({str(v)}) for k, v in (props.get("labels") or {}).items()} if isinstance(
        props.get("labels"), dict) else {}
    effects = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}
    taints = [{"key": t.get("key"), "value": t.get("value"), "effect": effects.get(t.get("effect"), t.get("effect"))}
              for t in (props.get("taints") or []) if isinstance(t, dict)]
    unknown = [k for k in ("labels", "taints") if props.get(k) is UNKNOWN]
    types = props.get("instanceTypes")
    if isinstance(types, list) and types and all(isinstance(x, str) for x in types):
        for key in INSTANCE_TYPE_KEYS:
            spaces[key] = Space({normalise(x) for x in types})
    return Shape(res, f"NodeGroup {res.name}", spaces, taints, [], unknown=unknown, karpenter=False)


def nodeclass_index(resources: list[Res]) -> dict[str, Res]:
    return {meta_name(r.props): r for r in resources
            if is_kind(r.type, EC2NODECLASS) and isinstance(meta_name(r.props), str)}


def nodepool_shapes(resources: list[Res], facts: Optional[dict] = None) -> list[Shape]:
    nodeclasses = nodeclass_index(resources)
    return [nodepool_shape(r, nodeclasses, facts) for r in resources if is_kind(r.type, NODEPOOL)]


# --------------------------------------------------------------------------------------------------------------------
# Pods against shapes.
# --------------------------------------------------------------------------------------------------------------------

def tolerates(tolerations: list, taint: dict) -> bool:
    """Whether one of the tolerations tolerates the taint (Kubernetes' matching rules)."""
    for tol in tolerations:
        if not isinstance(tol, dict):
            continue
        key, op = tol.get("key") or "", tol.get("operator") or "Equal"
        effect = tol.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        if op == "Exists" and (key == "" or key == taint.get("key")):
            return True
        if op == "Equal" and key == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def pod_terms(pod: Any, path: str, unknown: list[str]) -> list[list[tuple[str, str, list[str], str]]]:
    """The pod's required node selection as ORed terms of ANDed (key, op, values, path)."""
    selector = dig(pod, "nodeSelector", base=path)
    base: list[tuple[str, str, list[str], str]] = []
    if selector.unknown:
        unknown.append(selector.path)
    for key, value in (selector.value.items() if isinstance(selector.value, dict) else []):
        if value is UNKNOWN:
            unknown.append(join_path(selector.path, key))
            continue
        base.append((key, "In", [normalise(value) if key in TYPE_KEYS else str(value)], join_path(selector.path, key)))
    terms = dig(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                "nodeSelectorTerms", base=path)
    if terms.unknown:
        unknown.append(terms.path)
    items = terms.value if isinstance(terms.value, list) and terms.value else None
    if not items:
        return [base]
    out = []
    for i, term in enumerate(items):
        tpath = join_path(terms.path, i)
        exprs = dig(term, "matchExpressions", base=tpath) if isinstance(term, dict) else None
        if term is UNKNOWN:
            unknown.append(tpath)
            continue
        out.append(base + (_req_items(exprs.value, exprs.path, unknown) if exprs else []))
    return out


def _term_fails(term, shape: Shape, t: Any) -> Optional[str]:
    for key, op, values, path in term:
        if not satisfiable(shape.space(key, t), op, values):
            vals = "" if op in ("Exists", "DoesNotExist") else f" {fmt(values)}"
            return f"{path} ({key} {op}{vals})"
    return None


def match(pod: Any, path: str, shape: Shape) -> tuple[Optional[str], list[Any], list[str]]:
    """(why the pod cannot land on the shape or None, the shape's instance types it can land on, unknown paths)."""
    unknown: list[str] = []
    terms = pod_terms(pod, path, unknown)
    tol = dig(pod, "tolerations", base=path)
    if tol.unknown or (isinstance(tol.value, list) and UNKNOWN in tol.value):
        unknown.append(tol.path)
        return f"{tol.path} is unknown", [], unknown  # no verdict either way: callers report the unknown
    tolerations = tol.value if isinstance(tol.value, list) else []
    for taint in shape.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            value = f"={taint.get('value')}" if taint.get("value") else ""
            return (f"{tol.path} does not tolerate {shape.what}'s taint {taint.get('key')}{value}:"
                    f"{taint.get('effect')}"), [], unknown
    reasons = []
    fitting: list[Any] = []
    for term in terms:
        if shape.types:
            ok = [t for t in shape.types if _term_fails(term, shape, t) is None]
            if ok:
                fitting += [t for t in ok if t not in fitting]
                continue
            reasons.append(_term_fails(term, shape, shape.types[0]) or "no instance type")
        else:
            why = _term_fails(term, shape, None)
            if why is None:
                return None, [], unknown
            reasons.append(why)
    if fitting:
        return None, fitting, unknown
    if not shape.types and not shape.karpenter:
        return f"{' / '.join(reasons)} matches no label of {shape.what}", [], unknown
    if not shape.types:
        return f"{shape.what} admits no instance type the facts describe", [], unknown
    return f"{' / '.join(reasons)} matches no node of {shape.what}", [], unknown


# --------------------------------------------------------------------------------------------------------------------
# Allocatable and fitting.
# --------------------------------------------------------------------------------------------------------------------

def allocatable(t: Any, shape: Shape) -> dict[str, float]:
    """What a pod may request on a node of type `t` in `shape` (base units): Karpenter's allocatable CPU and
    memory, the GPUs, and ephemeral storage from the root volume (the facts' figure for 20 GiB, plus 90 % of the
    rest: kubelet keeps 10 % back for eviction) or the instance-store RAID0 when the EC2NodeClass asks for it."""
    if shape.instance_store and getattr(t, "local_nvme_gb", 0):
        # RAID0 over the instance store: the same kubelet reservations, applied to the NVMe capacity.
        disk = t.local_nvme_gb * 1e9 / GI
    else:
        disk = shape.root_volume_gib
    eph = t.allocatable_ephemeral_gib + (1 - EVICTION_FRACTION) * (disk - DEFAULT_ROOT_VOLUME_GIB)
    return {"cpu": t.allocatable_cpu_m / 1000, "memory": t.allocatable_memory_mib * MI,
            "ephemeral-storage": max(eph, 0.0) * GI, GPU_RESOURCE: float(t.gpus)}


def daemonset_pods(resources: list[Res]) -> list[tuple[Res, Any, str]]:
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


@dataclass
class PodVerdict:
    """Where one GPU pod can run."""

    res: Res
    path: str
    requests: dict[str, float]
    matched: list[Shape] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    """Why each non-matching NodePool is out."""
    fitting: list[tuple[Shape, Any]] = field(default_factory=list)
    too_small: list[tuple[Shape, Any, dict[str, float], list[str]]] = field(default_factory=list)
    """(shape, type, what is free there, DaemonSets counted) for each type the pod does not fit."""
    unknown: list[str] = field(default_factory=list)
    daemonsets: list = field(default_factory=list)


def gpu_pods(resources: list[Res]) -> list[tuple[Res, Any, str]]:
    """(resource, plain pod spec, path) for every pod-bearing resource whose pod requests nvidia.com/gpu."""
    from .workloads import requests_gpu
    out = []
    for r in resources:
        kind = k8s_kind(r.type)
        if kind not in POD_TEMPLATE_PATHS:
            continue
        pod = dig(r.props, *POD_TEMPLATE_PATHS[kind])
        if isinstance(pod.value, dict) and requests_gpu(pod.value, pod.path)[0] is not False:
            out.append((r, pod.value, pod.path))
    return out


def judge_pod(res: Res, pod: Any, path: str, shapes: list[Shape],
              daemonsets: list[tuple[Res, Any, str]]) -> PodVerdict:
    requests, unknown = pod_requests(pod, path)
    verdict = PodVerdict(res, path, requests, unknown=unknown, daemonsets=daemonsets)
    for shape in shapes:
        why, types, more = match(pod, path, shape)
        verdict.unknown += more + shape.unknown
        if why is not None:
            verdict.rejected.append(why)
            continue
        verdict.matched.append(shape)
        for t in types:
            free, names = free_on(t, shape, daemonsets)
            if short_of(requests, free):
                verdict.too_small.append((shape, t, free, names))
            else:
                verdict.fitting.append((shape, t))
    verdict.unknown = sorted(set(verdict.unknown))
    return verdict


def _pending_message(v: PodVerdict) -> str:
    pod = describe_res(v.res)
    if not v.matched:
        pools = "; ".join(v.rejected) or "the plan has no NodePool"
        return (f"Pending forever: pod {pod} ({v.path}) matches no NodePool: {pools}; give the pod the pool's "
                "labels and tolerations (nodeSelector nvidia.com/gpu.present: \"true\", toleration nvidia.com/gpu)")
    if not v.too_small:
        missing = sorted({m for s in v.matched for m in s.missing_facts})
        what = (f"the facts (catalogue.INSTANCE_TYPES) describe none of {', '.join(missing)}" if missing
                else "its nodeSelector/affinity admits none of their instance types")
        pools = ", ".join(s.what for s in v.matched)
        return f"Pending forever: pod {pod} matches {pools} but {what}; add the instance facts or widen the pool"
    names = ", ".join(sorted({t.name for _s, t, _f, _d in v.too_small}))
    pools = ", ".join(sorted({s.what for s, _t, _f, _d in v.too_small}))
    parts = []
    for r in RESOURCES:
        best = max(free[r] for _s, _t, free, _d in v.too_small)
        if v.requests.get(r, 0) > best + 1e-9:
            where = sorted({t.name for _s, t, free, _d in v.too_small if abs(free[r] - best) < 1e-9})
            parts.append((f"{fmt_amount(r, v.requests[r])} {r}", f"{fmt_amount(r, best)} {r} ({', '.join(where)})"))
    daemons = sorted({n for _s, _t, _f, d in v.too_small for n in d})
    less = f", less the requests of DaemonSets {', '.join(daemons)}" if daemons else ""
    if not parts:  # every type lacks something, but no one resource is short everywhere
        per_type = "; ".join(f"{t.name} lacks {', '.join(short_of(v.requests, free))}"
                             for _s, t, free, _d in v.too_small)
        return (f"Pending forever: pod {pod} fits no instance type of {pools}: {per_type}{less}; lower the requests "
                "or admit larger instance types in the NodePool")
    return (f"Pending forever: pod {pod} requests {' and '.join(p[0] for p in parts)}; the largest allocatable among "
            f"{names} is {' and '.join(p[1] for p in parts)}{less} in {pools}; lower the request or admit larger "
            "instance types in the NodePool")


def _judged_gpu_pods(resources: list[Res], facts: Optional[dict], question: str
                     ) -> tuple[list[tuple[str, str]], list[tuple[Res, Any]]]:
    """(findings for pods with an unknown input, (resource, verdict) of every other GPU pod). `question` completes
    "cannot tell ..." with `{pod}` standing for the pod's description."""
    shapes = nodepool_shapes(resources, facts)
    daemonsets = daemonset_pods(resources)
    unknown, judged = [], []
    for res, pod, path in gpu_pods(resources):
        v = judge_pod(res, pod, path, shapes, daemonsets)
        if v.unknown:
            # An unknown requirement, label, taint or request could each turn a fit into none: no verdict.
            unknown += [(res.urn, unknown_message(p, question.format(pod=describe_res(res)))) for p in v.unknown]
        else:
            judged.append((res, v))
    return unknown, judged


def schedulable_findings(resources: list[Res], facts: Optional[dict] = None) -> list[tuple[str, str]]:
    """(urn, message) for every GPU pod that matches no NodePool or fits none of its instance types."""
    out, judged = _judged_gpu_pods(resources, facts, "whether pod {pod} fits a NodePool")
    return out + [(res.urn, _pending_message(v)) for res, v in judged if not v.fitting]


def diversity_findings(resources: list[Res], facts: Optional[dict] = None) -> list[tuple[str, str]]:
    """(urn, message) for every GPU pod that exactly one admitted instance type can host."""
    out, judged = _judged_gpu_pods(resources, facts, "how many instance types can host pod {pod}")
    for res, v in judged:
        types = sorted({t.name for _s, t in v.fitting})
        if len(types) != 1:
            continue
        pools = ", ".join(sorted({s.what for s, _t in v.fitting}))
        others = sorted({t.name for _s, t, _f, _d in v.too_small})
        rest = f" ({', '.join(others)} cannot host it)" if others else ""
        out.append((res.urn, f"single-instance trap: pod {describe_res(res)} fits only {types[0]!r} of {pools}"
                             f"{rest}: when {types[0]} capacity runs out the pod stays Pending whatever the pool's "
                             "list says; admit at least two instance types large enough for its requests"))
    return out


# --------------------------------------------------------------------------------------------------------------------
# device-plugin-placement
# --------------------------------------------------------------------------------------------------------------------

DEVICE_PLUGIN_CHART = "nvidia-device-plugin"


def chart_values_pod(chart: Res) -> tuple[Any, str]:
    """The placement a chart's values give its pods (nodeSelector, affinity, tolerations), as a pod spec."""
    values = dig(chart.props, "values")
    if values.unknown:
        return UNKNOWN, values.path
    v = values.value if isinstance(values.value, dict) else {}
    return {k: v[k] for k in ("nodeSelector", "affinity", "tolerations") if k in v}, values.path


PLUGIN_BINARY = "nvidia-device-plugin"
"""The binary that advertises nvidia.com/gpu; the chart's other DaemonSets (the MPS control daemon, GFD) only run
on nodes labelled for them and are not the plugin."""


def _runs_plugin(container: dict) -> bool:
    command = container.get("command") if isinstance(container.get("command"), list) else []
    first = str(command[0]).rsplit("/", 1)[-1] if command else ""
    return first == PLUGIN_BINARY or (not command and str(container.get("name", "")).startswith(PLUGIN_BINARY))


def device_plugins(resources: list[Res]) -> list[tuple[Res, Any, str]]:
    """(resource, pod spec, path) of the device plugin: its rendered DaemonSets, or the chart's values when the
    plan holds the chart without its rendered objects."""
    by_urn = {r.urn: r for r in resources}
    out = []
    for res, pod, path in daemonset_pods(resources):
        containers = [c for c in pod.get("containers") or [] if isinstance(c, dict)]
        images = " ".join(str(c.get("image")) for c in containers)
        if (chart_of(res, by_urn) == DEVICE_PLUGIN_CHART or "k8s-device-plugin" in images) and \
                any(_runs_plugin(c) for c in containers):
            out.append((res, pod, path))
    for chart in charts(resources, DEVICE_PLUGIN_CHART):
        if not any(k8s_kind(r.type) == ("apps", "DaemonSet") for r in rendered(resources, chart)):
            pod, path = chart_values_pod(chart)
            out.append((chart, pod, path))
    return out


def device_plugin_findings(resources: list[Res], facts: Optional[dict] = None) -> list[tuple[str, str]]:
    """(urn, message) for every GPU NodePool the device plugin DaemonSet does not reach."""
    gpu_pools = [s for s in nodepool_shapes(resources, facts) if gpu_evidence(s.res.props)[0]]
    if not gpu_pools:
        return []
    plugins = device_plugins(resources)
    if not plugins:
        # Only when something asks for a GPU: a NodePool judged on its own (no workloads in the plan) is not wrong.
        pods = gpu_pods(resources)
        if not pods:
            return []
        return [(s.res.urn, f"{s.what} is a GPU NodePool but the plan has no NVIDIA device plugin DaemonSet: "
                            f"{GPU_RESOURCE} is never allocatable there and pod {describe_res(pods[0][0])} stays "
                            "Pending; install the nvidia-device-plugin chart") for s in gpu_pools]
    out = []
    for res, pod, path in plugins:
        if pod is UNKNOWN:
            out.append((res.urn, unknown_message(path, "where the device plugin runs")))
            continue
        for shape in gpu_pools:
            why, _types, unknown = match(pod, path, shape)
            if unknown and why is not None:
                out += [(res.urn, unknown_message(p, f"whether the device plugin reaches {shape.what}"))
                        for p in unknown]
            elif why is not None:
                out.append((res.urn, f"device plugin {describe_res(res)} never runs on {shape.what}: {why}; "
                                     f"{GPU_RESOURCE} is never allocatable there and GPU pods stay Pending; select "
                                     "the label every GPU NodePool sets and tolerate their taints"))
    return out


# --------------------------------------------------------------------------------------------------------------------
# controller-placement
# --------------------------------------------------------------------------------------------------------------------

CONTROLLER_CHARTS = ("karpenter", "keda")
"""Charts whose Deployments must run on the system node group (and, for Karpenter, never on a Karpenter node)."""


def controller_pods(resources: list[Res], chart_name: str) -> list[tuple[Res, Any, str]]:
    """(resource, pod spec, path) of the chart's rendered Deployments, or the chart's values when unrendered."""
    out = []
    for chart in charts(resources, chart_name):
        deployments = [r for r in rendered(resources, chart) if k8s_kind(r.type) == ("apps", "Deployment")]
        for d in deployments:
            pod = dig(d.props, *POD_TEMPLATE_PATHS[("apps", "Deployment")])
            out.append((d, pod.value, pod.path))
        if not deployments:
            pod, path = chart_values_pod(chart)
            out.append((chart, pod, path))
    return out


def controller_findings(resources: list[Res], facts: Optional[dict] = None) -> list[tuple[str, str]]:
    """(urn, message) when the Karpenter controller can land on a Karpenter node, or a Karpenter/KEDA pod cannot
    land on the system node group."""
    pools = nodepool_shapes(resources, facts)
    groups = [nodegroup_shape(r) for r in resources if r.type == NODEGROUP]
    out = []
    for chart_name in CONTROLLER_CHARTS:
        for res, pod, path in controller_pods(resources, chart_name):
            who = describe_res(res)
            if pod is UNKNOWN or pod is None:
                out.append((res.urn, unknown_message(path, f"where {who} runs")))
                continue
            if chart_name == "karpenter":
                for shape in pools:
                    why, _t, unknown = match(pod, path, shape)
                    if unknown:
                        out += [(res.urn, unknown_message(p, f"whether {who} can land on {shape.what}"))
                                for p in unknown]
                    elif why is None:
                        out.append((res.urn, f"Karpenter controller {who} can land on {shape.what}, a node Karpenter "
                                             "manages (it could consolidate away the node it runs on); require "
                                             f"{NODEPOOL_LABEL} DoesNotExist in its required node affinity"))
            if not groups:
                out.append((res.urn, f"{who} has no system node group to run on: the plan has no {NODEGROUP}"))
                continue
            reasons, unknowns = [], []
            for g in groups:
                why, _t, unknown = match(pod, path, g)
                if why is None:
                    reasons, unknowns = [], []
                    break
                reasons.append(why)
                unknowns += unknown
            if unknowns:
                out += [(res.urn, unknown_message(p, f"whether {who} runs on the system node group"))
                        for p in sorted(set(unknowns))]
            elif reasons:
                out.append((res.urn, f"{who} cannot run on the system node group: {'; '.join(reasons)}; select the "
                                     "node group's labels (gpuburst.io/pool: system) and tolerate its taints"))
    return out


def plan_policy(name: str, description: str, findings) -> StackValidationPolicy:
    """A mandatory stack policy reporting `findings(resources)` -> [(urn, message)] over the whole plan (the wiring,
    schedulability and hardware rules all take this shape)."""
    return StackValidationPolicy(name=name, description=description, enforcement_level=EnforcementLevel.MANDATORY,
                                 validate=guard_stack(lambda args: findings(stack_resources(args))))


SCHEDULABLE_POLICY = plan_policy(
    SCHEDULABLE_NAME, "Every pod requesting nvidia.com/gpu must match a NodePool (labels, requirements, taints) and "
                      "fit the allocatable CPU, memory, ephemeral storage and GPUs of one of its instance types, "
                      "less the DaemonSets on those nodes.", schedulable_findings)
DIVERSITY_POLICY = plan_policy(
    DIVERSITY_NAME, "A GPU pod must fit at least two admitted instance types, whatever the NodePool's list says.",
    diversity_findings)
DEVICE_PLUGIN_POLICY = plan_policy(
    DEVICE_PLUGIN_NAME, "The NVIDIA device plugin DaemonSet's nodeSelector, affinity and tolerations must admit "
                        "every GPU NodePool's labels and taints.", device_plugin_findings)
CONTROLLER_POLICY = plan_policy(
    CONTROLLER_NAME, "The Karpenter controller must not be able to land on a Karpenter node; it and KEDA must run on "
                     "the system node group.", controller_findings)

POLICIES = [SCHEDULABLE_POLICY, DIVERSITY_POLICY, DEVICE_PLUGIN_POLICY, CONTROLLER_POLICY]
