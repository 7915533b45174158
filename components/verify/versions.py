"""The `versions` check: what the cluster actually runs (labels and image tags of the controllers, the CRDs' chart
stamps, the API server's version), judged by the same catalogue functions as the policy pack, and compared with the
catalogue's pins (a difference means the upgrade did not roll out, or verify runs from another commit)."""
from __future__ import annotations

from .. import catalogue
from .keda import canonical, workload_versions
from .model import FAIL, PASS, CheckResult, ns_name

NAME = "versions"
KARPENTER_SELECTOR = "app.kubernetes.io/name=karpenter"
KEDA_SELECTOR = "app.kubernetes.io/name=keda-operator"
DEVICE_PLUGIN_SELECTOR = "app.kubernetes.io/name=nvidia-device-plugin"
NODEPOOL_CRD = "nodepools.karpenter.sh"


def server_version(version: dict) -> str | None:
    """`{"gitVersion": "v1.34.2-eks-113cf36"}` -> `1.34.2` (major.minor from the fields when gitVersion is odd)."""
    git = version.get("gitVersion") or ""
    try:
        return canonical(git)
    except ValueError:
        pass
    major = "".join(ch for ch in str(version.get("major", "")) if ch.isdigit())
    minor = "".join(ch for ch in str(version.get("minor", "")) if ch.isdigit())
    return f"{major}.{minor}" if major and minor else None


def _component(chart: str, objects: list[dict], kind: str, evidence: list[str],
               problems: list[str]) -> str | None:
    """The component's version (from its first object that states one); every stated version is judged."""
    if not objects:
        problems.append(f"{chart}: no {kind} found in the cluster")
        return None
    version = None
    pin = catalogue.CHARTS[chart].version if chart in catalogue.CHARTS else None
    for obj in objects:
        found = workload_versions(obj, chart)
        evidence.append(f"{kind} {ns_name(obj)}: " + ("; ".join(f"{k} says {v}" for k, v in found.items())
                                                      or "states no version"))
        distinct = []
        for v in found.values():
            try:
                c = canonical(v)
            except ValueError:
                problems.append(f"{chart} {kind} {ns_name(obj)}: {v!r} is not a version")
                continue
            if c not in distinct:
                distinct.append(c)
        if len(distinct) > 1:
            problems.append(f"{chart} {kind} {ns_name(obj)} states several versions ({', '.join(distinct)}): an "
                            "image override or a half-finished upgrade")
        for c in distinct:
            p = catalogue.chart_version_problem(chart, c)
            if p and p not in problems:
                problems.append(p)
            if pin and c != canonical(pin):
                problems.append(f"{chart} {c} in the cluster ({kind} {ns_name(obj)}) differs from the catalogue pin "
                                f"{pin}: the upgrade did not roll out, or verify runs from another commit")
        if distinct and version is None:
            version = distinct[0]
    if version is None:
        problems.append(f"{chart}: no {kind} states its version (labels helm.sh/chart, app.kubernetes.io/version, "
                        "or an image tag)")
    return version


def judge_versions(karpenter: list[dict], keda: list[dict], device_plugin: list[dict], nodepool_crd: dict | None,
                   server: dict) -> CheckResult:
    """The verdict from the controllers' Deployments/DaemonSets, the NodePool CRD and the /version answer."""
    problems: list[str] = []
    evidence: list[str] = []
    kv = _component("karpenter", karpenter, "Deployment", evidence, problems)
    kedav = _component("keda", keda, "Deployment", evidence, problems)
    _component("nvidia-device-plugin", device_plugin, "DaemonSet", evidence, problems)
    crdv = None
    if nodepool_crd is None:
        problems.append(f"CRD {NODEPOOL_CRD} is not installed (karpenter-crd missing)")
    else:
        stamps = workload_versions(nodepool_crd, "karpenter-crd")
        served = [v.get("name") for v in (nodepool_crd.get("spec") or {}).get("versions") or [] if v.get("served")]
        strategy = ((nodepool_crd.get("spec") or {}).get("conversion") or {}).get("strategy", "None")
        evidence.append(f"CRD {NODEPOOL_CRD}: " + ("; ".join(f"{k} says {v}" for k, v in stamps.items()) or
                                                   "no chart version stamp") +
                        f"; serves {', '.join(served)}; conversion {strategy}")
        if stamps:
            crdv = canonical(next(iter(stamps.values())))
            p = catalogue.chart_version_problem("karpenter-crd", crdv)
            if p and p not in problems:
                problems.append(p)
            pin = catalogue.CHARTS["karpenter-crd"].version
            if crdv != canonical(pin):
                problems.append(f"karpenter-crd {crdv} in the cluster (CRD {NODEPOOL_CRD}) differs from the catalogue "
                                f"pin {pin}")
    k8s = server_version(server)
    evidence.append(f"Kubernetes API server: {server.get('gitVersion', '?')}")
    if k8s is None:
        problems.append(f"cannot read the Kubernetes version from /version: {server}")
    else:
        k_minor = "%d.%d" % catalogue.minor(k8s)
        if k_minor != catalogue.KUBERNETES_VERSION:
            problems.append(f"Kubernetes {k_minor} in the cluster differs from the catalogue pin "
                            f"{catalogue.KUBERNETES_VERSION}")
        if kv and kedav:
            combo = catalogue.combination_problems(kubernetes=k_minor, karpenter=kv, karpenter_crd=crdv, keda=kedav)
            # combination_problems stops before the Kubernetes ranges when a version is already bad: add them.
            combo += catalogue.kubernetes_problems(k_minor, kv, kedav)
            for p in combo:
                if p not in problems:
                    problems.append(p)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        return CheckResult(NAME, FAIL, problems[0] + more, problems + [e for e in evidence if e not in problems])
    return CheckResult(NAME, PASS, f"karpenter {kv}, karpenter-crd {crdv or 'unstamped'}, keda {kedav}, Kubernetes "
                                   f"{k8s}: all pass the catalogue and match its pins", evidence)


def run(ctx) -> CheckResult:
    """Read the controllers, the NodePool CRD and /version, and judge."""
    kube = ctx.kube
    return judge_versions(kube.list_deployments(KARPENTER_SELECTOR), kube.list_deployments(KEDA_SELECTOR),
                          kube.list_daemonsets(DEVICE_PLUGIN_SELECTOR), kube.get_crd(NODEPOOL_CRD),
                          kube.server_version or kube.version())
