"""Stack rules on where pods can run: GPU pods match a NodePool and fit its instance types, the device plugin reaches
every GPU pool, and the controllers stay on the system node group.

In a partial plan (no GpuBurstPlatform) the NodePool a pod selects, the EC2NodeClass a pool boots, the device plugin
and the system node group may be another stack's: the rules then judge against the facts that describe them
(ExistingCluster, policy config) and otherwise yield an `Outside` (reported once by `outside-this-stack`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._components import (
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
    GPU_TOLERATION,
    NODEPOOL_LABEL,
    POOL_LABEL,
    SYSTEM_POOL,
)
from .capacity import (
    RESOURCES,
    daemonset_pods,
    fmt_amount,
    free_on,
    pod_requests,
    short_of,
)
from .declare import scoped_policy
from .facts import EXISTING_CLUSTER, WHOLE, Scope
from .fit import match, pod_terms
from .gpu_nodepool import gpu_evidence
from .outside import Finding, Outside
from .plan import Res, chart_of, charts, describe_res, meta_name, rendered
from .resources import NODEGROUP, NODEPOOL, POD_TEMPLATE_PATHS, dig, fmt, is_kind, k8s_kind
from .shapes import Shape, Space, nodegroup_shape, nodepool_shapes
from .unknowns import UNKNOWN, unknown_message
from .workloads import requests_gpu

SCHEDULABLE_NAME = "gpu-pod-schedulable"
DIVERSITY_NAME = "gpu-pod-effective-diversity"
DEVICE_PLUGIN_NAME = "device-plugin-placement"
CONTROLLER_NAME = "controller-placement"


# --------------------------------------------------------------------------------------------------------------------
# gpu-pod-schedulable and gpu-pod-effective-diversity
# --------------------------------------------------------------------------------------------------------------------

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
    daemonsets: list[Any] = field(default_factory=list)


def gpu_pods(resources: list[Res]) -> list[tuple[Res, Any, str]]:
    """(resource, plain pod spec, path) for every pod-bearing resource whose pod requests nvidia.com/gpu."""
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
                f"labels and tolerations (nodeSelector {GPU_PRESENT_LABEL[0]}: \"{GPU_PRESENT_LABEL[1]}\", toleration "
                f"{GPU_TOLERATION['key']})")
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


def _selected_pools(pod: Any, path: str) -> set[str] | None:
    """The NodePool names the pod's required node selection pins through karpenter.sh/nodepool (None: not pinned)."""
    names: set[str] = set()
    for term in pod_terms(pod, path, []):
        named = [set(values) for key, op, values, _p in term if key == NODEPOOL_LABEL and op == "In"]
        if not named:
            return None
        names |= set.intersection(*named)
    return names


def _outside_pool(res: Res, pod: Any, path: str, resources: list[Res]) -> Outside | None:
    """In a partial plan: the NodePool a pod that matches none of this plan's is another stack's."""
    pools = {meta_name(r.props) for r in resources if is_kind(r.type, NODEPOOL)}
    who = f"pod {describe_res(res)} ({path})"
    if not pools:
        return Outside(res.urn, f"{who} requests {GPU_RESOURCE} but no NodePool is in this plan: could not check that "
                                "a NodePool of another stack matches it and fits its requests")
    named = _selected_pools(pod, path)
    if named and not named & pools:
        return Outside(res.urn, f"{who} selects {NODEPOOL_LABEL} {fmt(sorted(named))}, which is not in this plan: "
                                "could not check that it matches and fits the pod")
    return None


def _outside_nodeclasses(judged: list[tuple[Res, PodVerdict]]) -> list[Outside]:
    """One `Outside` per EC2NodeClass of another stack whose root volume the matched pods' ephemeral storage needs."""
    needs: dict[str, tuple[Shape, list[str]]] = {}
    for res, v in judged:
        amount = v.requests.get("ephemeral-storage", 0)
        for shape in v.matched:
            if shape.outside_nodeclass and amount > 0:
                entry = needs.setdefault(shape.res.urn, (shape, []))
                entry[1].append(f"{describe_res(res)} {fmt_amount('ephemeral-storage', amount)}")
    return [Outside(shape.res.urn, f"{shape.what} boots EC2NodeClass {shape.outside_nodeclass!r} "
                                   "(spec.template.spec.nodeClassRef.name), which is not in this plan: could not check "
                                   f"that its root volume holds the ephemeral storage of pod {', '.join(pods)}",
                    ("nodeClassRootVolumeGiB",)) for shape, pods in needs.values()]


def _judged_gpu_pods(resources: list[Res], facts: dict | None, question: str, scope: Scope
                     ) -> tuple[list[Finding | Outside], list[tuple[Res, Any]]]:
    """(findings for pods with an unknown input and ends outside a partial plan, (resource, verdict) of every other
    GPU pod). `question` completes "cannot tell ..." with `{pod}` standing for the pod's description."""
    shapes = nodepool_shapes(resources, facts, scope)
    daemonsets = daemonset_pods(resources)
    out: list[Finding | Outside] = []
    judged = []
    for res, pod, path in gpu_pods(resources):
        v = judge_pod(res, pod, path, shapes, daemonsets)
        if v.unknown:
            # An unknown requirement, label, taint or request could each turn a fit into none: no verdict.
            out += [(res.urn, unknown_message(p, question.format(pod=describe_res(res)))) for p in v.unknown]
            continue
        elsewhere = _outside_pool(res, pod, path, resources) if not (scope.whole or v.matched) else None
        if elsewhere is not None:
            out.append(elsewhere)
            continue
        judged.append((res, v))
    return out + _outside_nodeclasses(judged), judged


def schedulable_findings(resources: list[Res], facts: dict[str, Any] | None = None,
                         scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every GPU pod that matches no NodePool or fits none of its instance types."""
    out, judged = _judged_gpu_pods(resources, facts, "whether pod {pod} fits a NodePool", scope)
    return out + [(res.urn, _pending_message(v)) for res, v in judged if not v.fitting]


def diversity_findings(resources: list[Res], facts: dict[str, Any] | None = None,
                       scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every GPU pod that exactly one admitted instance type can host."""
    out, judged = _judged_gpu_pods(resources, facts, "how many instance types can host pod {pod}", scope)
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


def _no_plugin(gpu_pools: list[Shape], pod: Res, scope: Scope) -> list[Finding | Outside]:
    """The plan runs no device plugin: missing in a whole plan (or where the facts say the cluster runs none), another
    stack's where the facts say it runs one, unchecked otherwise."""
    given = None if scope.whole else scope.value("devicePlugin")
    pools = ", ".join(s.what for s in gpu_pools)
    if given is True:
        # The fact says it runs; where it runs (its selector and tolerations) no fact says.
        return [Outside(gpu_pools[0].res.urn, f"the NVIDIA device plugin runs on the cluster "
                                              f"({scope.source('devicePlugin')}: true) but is not in this plan: could "
                                              "not check that its nodeSelector, affinity and tolerations admit "
                                              f"{pools}, nor count its requests in the GPU pods' fit")]
    if given is None and not scope.whole:
        return [Outside(gpu_pools[0].res.urn, f"the NVIDIA device plugin is not in this plan: could not check that it "
                                              f"runs on {pools}, where pod {describe_res(pod)} needs "
                                              f"{GPU_RESOURCE} allocatable", ("devicePlugin",))]
    cluster = f" and the cluster runs none ({scope.source('devicePlugin')}: false)" if given is False else ""
    return [(s.res.urn, f"{s.what} is a GPU NodePool but the plan has no NVIDIA device plugin DaemonSet{cluster}: "
                        f"{GPU_RESOURCE} is never allocatable there and pod {describe_res(pod)} stays "
                        "Pending; install the nvidia-device-plugin chart") for s in gpu_pools]


def device_plugin_findings(resources: list[Res], facts: dict[str, Any] | None = None,
                           scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every GPU NodePool the device plugin DaemonSet does not reach."""
    gpu_pools = [s for s in nodepool_shapes(resources, facts, scope) if gpu_evidence(s.res.props)[0]]
    if not gpu_pools:
        return []
    plugins = device_plugins(resources)
    if not plugins:
        # Only when something asks for a GPU: a NodePool judged on its own (no workloads in the plan) is not wrong.
        pods = gpu_pods(resources)
        return _no_plugin(gpu_pools, pods[0][0], scope) if pods else []
    out: list[Finding | Outside] = []
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


def system_nodes(labels: dict[str, Any], source: str) -> Shape:
    """The system node group another stack runs, as far as the facts describe it: its labels (no taints known)."""
    res = Res(EXISTING_CLUSTER, "", "system-nodes", None, {"labels": labels})
    return Shape(res, f"the system nodes ({source} {fmt(labels)})", {k: Space({str(v)}) for k, v in labels.items()},
                 [], [], karpenter=False)


def controller_findings(resources: list[Res], facts: dict[str, Any] | None = None,
                        scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) when the Karpenter controller can land on a Karpenter node, or a Karpenter/KEDA pod cannot
    land on the system node group (in a partial plan: the system nodes the facts describe)."""
    pools = nodepool_shapes(resources, facts, scope)
    groups = [nodegroup_shape(r) for r in resources if r.type == NODEGROUP]
    labels = None if scope.whole or groups else scope.value("systemNodeLabels")
    if isinstance(labels, dict):
        groups = [system_nodes(labels, scope.source("systemNodeLabels"))]
    unplaced: list[tuple[Res, str]] = []
    out: list[Finding | Outside] = []
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
                if scope.whole:
                    out.append((res.urn, f"{who} has no system node group to run on: the plan has no {NODEGROUP}"))
                else:
                    unplaced.append((res, who))
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
                                     f"node group's labels ({POOL_LABEL}: {SYSTEM_POOL}) and tolerate its taints"))
    if unplaced:
        out.append(Outside(unplaced[0][0].urn, f"the system node group is not in this plan ({NODEGROUP}): could not "
                                               f"check that {', '.join(who for _r, who in unplaced)} can run on it",
                           ("systemNodeLabels",)))
    return out


SCHEDULABLE_POLICY = scoped_policy(
    SCHEDULABLE_NAME, f"Every pod requesting {GPU_RESOURCE} must match a NodePool (labels, requirements, taints) and "
                      "fit the allocatable CPU, memory, ephemeral storage and GPUs of one of its instance types, "
                      "less the DaemonSets on those nodes.",
    lambda resources, scope: schedulable_findings(resources, scope=scope), ("nodeClassRootVolumeGiB",))
DIVERSITY_POLICY = scoped_policy(
    DIVERSITY_NAME, "A GPU pod must fit at least two admitted instance types, whatever the NodePool's list says.",
    lambda resources, scope: diversity_findings(resources, scope=scope), ("nodeClassRootVolumeGiB",))
DEVICE_PLUGIN_POLICY = scoped_policy(
    DEVICE_PLUGIN_NAME, "The NVIDIA device plugin DaemonSet's nodeSelector, affinity and tolerations must admit "
                        "every GPU NodePool's labels and taints.",
    lambda resources, scope: device_plugin_findings(resources, scope=scope), ("devicePlugin",))
CONTROLLER_POLICY = scoped_policy(
    CONTROLLER_NAME, "The Karpenter controller must not be able to land on a Karpenter node; it and KEDA must run on "
                     "the system node group.",
    lambda resources, scope: controller_findings(resources, scope=scope), ("systemNodeLabels",))

POLICIES = [SCHEDULABLE_POLICY, DIVERSITY_POLICY, DEVICE_PLUGIN_POLICY, CONTROLLER_POLICY]
