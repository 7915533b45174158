"""Rules for teams side by side on one cluster: `keda-watches-namespace` (KEDA watches the namespace of every
ScaledJob) and the advisory `worker-nodepool` (a worker pod is tied to the NodePool its workload names).

- `keda-watches-namespace`: KEDA's operator reconciles ScaledJobs and ScaledObjects only in the namespaces its chart's
  `watchNamespace` lists (comma-separated; empty: every namespace; its own namespace always, the chart adds it to its
  RBAC). A ScaledJob elsewhere is accepted by the API server and never scaled: no Job ever starts and nothing says
  why. The watched list comes from the KEDA chart in the plan (`values.watchNamespace`), else, in a partial plan,
  from the fact `kedaWatchNamespaces` (`ExistingKedaArgs.watch_namespaces` or policy config; `["*"]`: every
  namespace); with neither the rule yields an `Outside`.
- `worker-nodepool` (advisory): a worker pod (`app.kubernetes.io/name: gpuburst-worker`) whose nodeSelector or
  required node affinity names no `karpenter.sh/nodepool` may run on any GPU NodePool of the cluster, another team's
  included, and no pool's `gpu_limit` caps it. GpuBurstPlatform ties its workloads to its pool; a component stack
  passes `WorkerAccessArgs.nodepool`.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pulumi_policy import EnforcementLevel, Policy

from ._components import NODEPOOL_LABEL, WORKER_LABEL
from .declare import resource_policy, scoped_policy
from .facts import Scope
from .fixes import fix_for
from .outside import Finding, Outside
from .plan import Res, charts, describe_res, meta_namespace
from .resources import POD_TEMPLATE_PATHS, SCALED_JOB, SCALED_OBJECT, dig, is_kind, k8s_kind
from .unknowns import UNKNOWN, unknown_message
from .workloads import is_worker

WATCH_NAME = "keda-watches-namespace"
NODEPOOL_NAME = "worker-nodepool"
WATCH_ALL = "*"
"""The `kedaWatchNamespaces` entry meaning every namespace (components.existing.WATCH_ALL)."""


def chart_watch(chart: Res) -> tuple[set[str] | None, str, str | None]:
    """(the namespaces a KEDA chart watches, None for every one; how a message names them; the path of an unknown
    value)."""
    values = dig(chart.props, "values")
    watch = dig(chart.props, "values", "watchNamespace")
    own = dig(chart.props, "namespace")
    where = f"Chart {chart.name} values.watchNamespace"
    if values.unknown or watch.unknown or own.unknown:
        return None, where, (watch if watch.unknown else own if own.unknown else values).path
    if not isinstance(watch.value, str) or not watch.value.strip():
        return None, where, None
    names = {n.strip() for n in watch.value.split(",") if n.strip()}
    if isinstance(own.value, str):
        names.add(own.value)  # the chart adds its own namespace (its templates: uniq (append ... .Release.Namespace))
    return names, f"{where} {watch.value!r}", None


def watch_findings(resources: list[Res], scope: Scope) -> list[Finding | Outside]:
    """(urn, message) for every ScaledJob/ScaledObject in a namespace KEDA does not watch; an `Outside` per one whose
    KEDA is another stack's and whose watched namespaces no fact gives."""
    scalers = [r for r in resources if is_kind(r.type, SCALED_JOB) or is_kind(r.type, SCALED_OBJECT)]
    if not scalers:
        return []
    keda = charts(resources, "keda")
    watched: set[str] | None
    if keda:
        watched, said, unknown = chart_watch(keda[0])
        if unknown:
            return [(r.urn, unknown_message(unknown, "which namespaces KEDA watches")) for r in scalers]
    elif scope.whole:
        return []  # no KEDA at all: the KEDA rules say so
    else:
        fact = scope.value("kedaWatchNamespaces")
        if not isinstance(fact, list):
            return [Outside(r.urn, f"{describe_res(r)} is scaled by the KEDA another stack runs, which is not in this "
                                   "plan: could not check that it watches this namespace (otherwise KEDA never "
                                   "scales it)", ("kedaWatchNamespaces",)) for r in scalers]
        watched = None if WATCH_ALL in fact else {n for n in fact if isinstance(n, str)}
        own = scope.value("kedaNamespace")
        if watched is not None and isinstance(own, str):
            watched.add(own)
        said = f"{scope.source('kedaWatchNamespaces')}: {', '.join(str(n) for n in fact)}"
    if watched is None:
        return []
    out: list[Finding | Outside] = []
    for r in scalers:
        ns = meta_namespace(r.props)
        if ns is UNKNOWN:
            out.append((r.urn, unknown_message(f"{describe_res(r)} metadata.namespace",
                                               "whether KEDA watches its namespace")))
            continue
        ns = ns if isinstance(ns, str) else "default"
        if ns in watched:
            continue
        elsewhere = (f"ask the platform team to add {ns!r} to its KEDA's watched namespaces "
                     "(gpuburst:kedaExtraWatchNamespaces), then take kedaWatchNamespaces from its "
                     "workloadStackConfig output into ExistingKedaArgs.watch_namespaces")
        fix = fix_for(r.urn, platform=f"add {ns!r} to gpuburst:kedaExtraWatchNamespaces",
                      component=f"add {ns!r} to KedaArgs.watch_namespaces" if keda else elsewhere,
                      manifest=f"add {ns!r} to the KEDA chart's watchNamespace" if keda else elsewhere)
        out.append((r.urn, f"{describe_res(r)} is in namespace {ns}, which KEDA does not watch ({said}; watched: "
                           f"{', '.join(sorted(watched))}): KEDA never scales it and no Job ever starts; {fix}"))
    return out


# --------------------------------------------------------------------------------------------------------------------
# worker-nodepool
# --------------------------------------------------------------------------------------------------------------------

def names_nodepool(pod: Any, path: str) -> bool | None:
    """Whether the pod's required node selection names a `karpenter.sh/nodepool` (nodeSelector, or every required
    affinity term an `In` on it); None when unknown."""
    selector = dig(pod, "nodeSelector", base=path)
    if selector.unknown:
        return None
    if isinstance(selector.value, dict) and NODEPOOL_LABEL in selector.value:
        return True
    terms = dig(pod, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                "nodeSelectorTerms", base=path)
    if terms.unknown:
        return None
    items = terms.value if isinstance(terms.value, list) else []
    if not items:
        return False
    for term in items:
        exprs = term.get("matchExpressions") if isinstance(term, dict) else None
        if term is UNKNOWN or exprs is UNKNOWN:
            return None
        if not any(isinstance(e, dict) and e.get("key") == NODEPOOL_LABEL and e.get("operator") == "In"
                   for e in exprs or []):
            return False
    return True


def nodepool_findings(res: Res) -> Iterable[str]:
    """The advisory for a worker pod-bearing resource whose pods select no NodePool."""
    kind = k8s_kind(res.type)
    if kind not in POD_TEMPLATE_PATHS or not is_worker(res, kind):
        return []
    pod = dig(res.props, *POD_TEMPLATE_PATHS[kind])
    if not isinstance(pod.value, dict) or names_nodepool(pod.value, pod.path) is not False:
        return []
    fix = fix_for(res.urn, platform="GpuBurstPlatform ties its workloads to its GPU NodePool: report this",
                  component="pass WorkerAccessArgs.nodepool=<the team's GpuNodePool> (or its name)",
                  manifest=f"add nodeSelector {NODEPOOL_LABEL}: <the team's NodePool>")
    return [f"{describe_res(res)} runs worker pods ({WORKER_LABEL}) whose {pod.path} names no NodePool (no "
            f"{NODEPOOL_LABEL} in nodeSelector or required node affinity): they may run on any GPU NodePool of the "
            f"cluster, another team's included, and no pool's gpu_limit caps them; {fix}"]


WATCH_POLICY = scoped_policy(
    WATCH_NAME, "Every ScaledJob and ScaledObject is in a namespace KEDA watches (its chart's watchNamespace; in a "
                "partial plan, the fact kedaWatchNamespaces), or KEDA never scales it.", watch_findings,
    ("kedaWatchNamespaces", "kedaNamespace"))
NODEPOOL_POLICY = resource_policy(
    NODEPOOL_NAME, "Names a worker pod that selects no Karpenter NodePool (karpenter.sh/nodepool), so it may run on "
                   "another team's GPUs.", tuple(POD_TEMPLATE_PATHS), nodepool_findings,
    level=EnforcementLevel.ADVISORY)

POLICIES: list[Policy] = [WATCH_POLICY, NODEPOOL_POLICY]
