"""Node shapes: the labels, taints, instance types and root volume a Karpenter NodePool or an EKS managed node group
gives its nodes, and whether a node selector requirement can be met on them."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ._components import CAPACITY_TYPE_LABEL, GI, NODEPOOL_LABEL, catalogue, parse_quantity
from .facts import WHOLE, Scope
from .plan import Res, meta_name
from .resources import (
    EC2NODECLASS,
    NODEPOOL,
    NODEPOOL_LABELS,
    NODEPOOL_NODECLASS,
    NODEPOOL_REQUIREMENTS,
    NODEPOOL_TAINTS,
    as_number,
    dig,
    is_kind,
    join_path,
)
from .selection import (
    CATEGORY_KEY,
    CPU_KEY,
    DIMENSIONS,
    FAMILY_KEY,
    GENERATION_KEY,
    GPU_COUNT_KEY,
    GPU_MANUFACTURER_KEY,
    GPU_MEMORY_KEY,
    GPU_NAME_KEY,
    INSTANCE_TYPE_KEYS,
    MEMORY_KEY,
    SIZE_KEY,
    family_parts,
    normalise,
    split_type,
)
from .unknowns import UNKNOWN

NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
DEFAULT_ROOT_VOLUME_GIB = float(getattr(catalogue, "DEFAULT_ROOT_VOLUME_GIB", 20))
"""Root volume of an AL2023 node when the EC2NodeClass sets no blockDeviceMappings (Karpenter's default); the
facts' `allocatable_ephemeral_gib` is for this size."""

TYPE_KEYS: set[str] = set(DIMENSIONS) | {GPU_COUNT_KEY, GPU_NAME_KEY, GPU_MANUFACTURER_KEY, GPU_MEMORY_KEY, CPU_KEY,
                                         MEMORY_KEY}
"""Labels whose value follows from the instance type (judged per type against the facts)."""
WELL_KNOWN_KEYS: set[str] = {"kubernetes.io/arch", "kubernetes.io/os", "topology.kubernetes.io/zone",
                   "topology.kubernetes.io/region", CAPACITY_TYPE_LABEL, "kubernetes.io/hostname",
                   "topology.k8s.aws/zone-id", "karpenter.k8s.aws/instance-hypervisor",
                   "karpenter.k8s.aws/instance-network-bandwidth",
                   "karpenter.k8s.aws/instance-encryption-in-transit-supported",
                   "karpenter.k8s.aws/instance-local-nvme", "karpenter.k8s.aws/instance-ebs-bandwidth"}
"""Labels every node carries with some value even when the NodePool does not constrain them."""


@dataclass
class Space:
    """The values one label may take on a node of a shape: `allowed` None means any value; `present` False means
    the label is absent."""

    allowed: set[str] | None = None
    excluded: set[str] = field(default_factory=set)
    present: bool = True

    def values_left(self) -> set[str] | None:
        return None if self.allowed is None else self.allowed - self.excluded


def _numeric_ok(op: str, value: str, bound: str) -> bool:
    try:
        n, b = float(value), float(bound)
    except ValueError:
        return False
    return {"Gt": n > b, "Lt": n < b, "Gte": n >= b, "Lte": n <= b}.get(op, False)


def satisfiable(space: Space | None, op: str, values: list[str]) -> bool:
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
    taints: list[dict[str, Any]]
    types: list[Any]
    """Instance types (catalogue facts) its nodes may have; empty for a node group without facts."""
    type_reqs: list[tuple[str, str, list[str]]] = field(default_factory=list)
    missing_facts: list[str] = field(default_factory=list)
    """Instance types it names that the facts do not describe."""
    unknown: list[str] = field(default_factory=list)
    root_volume_gib: float | None = DEFAULT_ROOT_VOLUME_GIB
    """None: the EC2NodeClass is another stack's and no fact gives its root volume (ephemeral storage unbounded
    here; `outside_nodeclass` names it)."""
    instance_store: bool = False
    karpenter: bool = True
    outside_nodeclass: str | None = None
    """The name of the EC2NodeClass it boots when that is not in a partial plan and no fact describes it."""

    def space(self, key: str, t: Any = None) -> Space | None:
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


def req_items(items: Any, path: str, unknown: list[str]) -> list[tuple[str, str, list[str], str]]:
    """(key, operator, values, path) of each `{key, operator, values}` item; unknown items go to `unknown`."""
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


def _facts(facts: dict | None) -> dict:
    if facts is not None:
        return facts
    return getattr(catalogue, "INSTANCE_TYPES", {}) or {}


def nodepool_shape(res: Res, nodeclasses: dict[str, Res], facts: dict[str, Any] | None = None,
                   scope: Scope = WHOLE) -> Shape:
    """The node shape of a NodePool: template labels, requirements, taints, the facts of the types it admits, and
    the root volume of its EC2NodeClass (in a partial plan, of the node class another stack declares: from the
    facts, or unbounded and named in `outside_nodeclass`)."""
    facts = _facts(facts)
    props = res.props
    name = meta_name(props)
    unknown: list[str] = []
    spaces: dict[str, Space] = {NODEPOOL_LABEL: Space({name} if isinstance(name, str) else None)}
    type_reqs: list[tuple[str, str, list[str]]] = []
    labels = dig(props, *NODEPOOL_LABELS)
    if labels.unknown:
        unknown.append(labels.path)
    for key, value in (labels.value.items() if isinstance(labels.value, dict) else []):
        if value is UNKNOWN:
            unknown.append(join_path(labels.path, key))
        elif key in TYPE_KEYS:
            type_reqs.append((key, "In", [normalise(value)]))
        else:
            spaces[key] = Space({str(value)})
    reqs = dig(props, *NODEPOOL_REQUIREMENTS)
    for key, op, values, _path in req_items(reqs.value, reqs.path, unknown):
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
    taints_found = dig(props, *NODEPOOL_TAINTS)
    if taints_found.unknown:
        unknown.append(taints_found.path)
    taints = [t for t in (taints_found.value if isinstance(taints_found.value, list) else []) if isinstance(t, dict)]
    types = [t for t in facts.values() if _type_admits(t, type_reqs)]
    named = {v for key, op, values in type_reqs if key in INSTANCE_TYPE_KEYS and op == "In" for v in values}
    missing = sorted(n for n in named if n not in facts and _type_admits_name(n, type_reqs))
    shape = Shape(res, f"NodePool {name!r}" if isinstance(name, str) else f"NodePool {res.name}", spaces, taints,
                  sorted(types, key=lambda t: t.name), type_reqs, missing, unknown)
    nc_name = dig(props, *NODEPOOL_NODECLASS).value
    nodeclass = nodeclasses.get(nc_name) if isinstance(nc_name, str) else None
    if nodeclass is not None:
        shape.root_volume_gib, shape.instance_store, more = root_volume(nodeclass.props)
        shape.unknown += more
    elif isinstance(nc_name, str) and not scope.whole:
        fact = scope.entry("nodeClassRootVolumeGiB", nc_name)
        gib = as_number(fact.value) if fact is not None else None
        if gib is not None and gib > 0:
            shape.root_volume_gib = gib
        else:
            shape.root_volume_gib, shape.outside_nodeclass = None, nc_name
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
    n = parse_quantity(size.value)
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


def nodepool_shapes(resources: list[Res], facts: dict[str, Any] | None = None, scope: Scope = WHOLE) -> list[Shape]:
    nodeclasses = nodeclass_index(resources)
    return [nodepool_shape(r, nodeclasses, facts, scope) for r in resources if is_kind(r.type, NODEPOOL)]

