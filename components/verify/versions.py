"""The `versions` check: what the cluster actually runs (labels and image tags of the controllers, the CRDs' chart
stamps, the API server's version), judged by the same catalogue functions as the policy pack, and compared with the
catalogue's pins (a difference means the upgrade did not roll out, or verify runs from another commit); and the
Kubernetes minor judged by the catalogue's EKS support rule with the cluster's own upgrade policy (eks:DescribeCluster),
and the catalogue's calendar compared with EKS's (eks:DescribeClusterVersions); and, for information (the check still
passes), what the catalogue's release lines say of the live Karpenter and KEDA: the line's support window, the newer
patches of that line with what each fixes, and any "Action Required" (catalogue/lines.py)."""
from __future__ import annotations

from datetime import date, datetime, timezone
from typing import Any

from .. import catalogue
from .ami_canary import OBSERVED_AMIS, observed_images
from .context import Context, one_line
from .keda import canonical, workload_versions
from .model import FAIL, PASS, CheckResult, CouldNotRun, headline, ns_name, parse_time

NAME = "versions"
KARPENTER_SELECTOR = "app.kubernetes.io/name=karpenter"
KEDA_SELECTOR = "app.kubernetes.io/name=keda-operator"
DEVICE_PLUGIN_SELECTOR = "app.kubernetes.io/name=nvidia-device-plugin"
NODEPOOL_CRD = "nodepools.karpenter.sh"
EKS_DEFAULT_SUPPORT_TYPE = "EXTENDED"
"""What EKS applies when a cluster's `upgradePolicy.supportType` is not set (catalogue.SUPPORT_TYPES)."""


def server_version(version: dict[str, Any]) -> str | None:
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


def refused_karpenter(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(version, the catalogue's reason) for every Karpenter version the given Deployments (or the NodePool CRD)
    state that the catalogue refuses outright (a broken release, older than the minimum), in first-seen order."""
    out: dict[str, str] = {}
    for obj in objects:
        for v in workload_versions(obj, "karpenter").values():
            try:
                c = canonical(v)
            except ValueError:
                continue
            reason = catalogue.chart_version_problem("karpenter", c)
            if reason and c not in out:
                out[c] = reason
    return list(out.items())


def live_image_line(version: str, live_amis: tuple[str | None, list[str]] | None) -> str:
    """The summary line for a refused Karpenter: what this cluster's GPU types resolve to, observed live (the
    catalogue's reason is a fact about the release, not about this cluster, and goes to the evidence)."""
    head = f"karpenter {version} is a refused release"
    if live_amis is None:
        return head + " (the catalogue's reason in the evidence; the live image was not read)"
    nodeclass, observed = live_amis
    if not observed:
        return head + f"; live, EC2NodeClass {nodeclass or '?'} status.amis resolves no image for the GPU types"
    more = f" (+{len(observed) - 1} more image(s))" if len(observed) > 1 else ""
    return head + f"; live, EC2NodeClass {nodeclass} gives the GPU types {observed[0]}{more}"


def judge_versions(karpenter: list[dict[str, Any]], keda: list[dict[str, Any]], device_plugin: list[dict[str, Any]],
                   nodepool_crd: dict[str, Any] | None,
                   server: dict[str, Any], *, today: date, cluster_name: str | None = None,
                   eks_cluster: dict[str, Any] | None = None,
                   eks_cluster_error: str | None = None, eks_versions: list[dict[str, Any]] | None = None,
                   eks_versions_error: str | None = None,
                   live_amis: tuple[str | None, list[str]] | None = None) -> CheckResult:
    """The verdict from the controllers' Deployments/DaemonSets, the NodePool CRD, the /version answer and, when a
    cluster name was given, EKS's answers: `eks_cluster` (eks:DescribeCluster's `cluster`, None when not read;
    `eks_cluster_error` says why) and `eks_versions` (eks:DescribeClusterVersions' `clusterVersions`, None when not
    read; `eks_versions_error` says why). The EKS support rule judges the API server's minor on `today`.

    `live_amis` is (EC2NodeClass name, ami_canary.observed_images) as read live, None when not read: a refused
    Karpenter's line then says what this cluster's GPU types really resolve to, never the release's general claim
    (Karpenter 1.0.x's note says the Neuron image; a cluster may show the standard one)."""
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
    warning = None
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
        warning = _judge_support(k_minor, today, cluster_name, eks_cluster, eks_cluster_error, eks_versions,
                                 eks_versions_error, evidence, problems)
    refused = dict((reason, v) for v, reason in refused_karpenter(karpenter + ([nodepool_crd] if nodepool_crd
                                                                                 else [])))
    if refused:
        problems = list(dict.fromkeys(live_image_line(refused[p], live_amis) if p in refused else p
                                      for p in problems))
        evidence = [f"why the catalogue refuses karpenter {v} (a fact about the release, not an observation of this "
                    f"cluster): {reason}" for reason, v in refused.items()] + evidence
    upgrades = release_line_news((("karpenter", kv), ("keda", kedav)), today, evidence)
    if problems:
        return CheckResult(NAME, FAIL, headline(problems), problems + [e for e in evidence if e not in problems])
    seen = (f"karpenter {kv}, karpenter-crd {crdv or 'unstamped'}, keda {kedav}, Kubernetes {k8s}: all pass the "
            "catalogue and match its pins")
    if warning:
        # The warning is what the person on call must act on: it leads; the versions stay in the evidence.
        return CheckResult(NAME, PASS, f"all pass, with a warning: {warning}", [seen] + evidence)
    if upgrades:
        # Informational: the pins hold; a newer patch of a pinned line is news for the maintainer (docs/upgrading.md
        # moves a pin), so the check passes and says so first.
        more = f" (+{len(upgrades) - 1} more in the evidence)" if len(upgrades) > 1 else ""
        return CheckResult(NAME, PASS, f"all pass and match the pins; {upgrades[0]}{more}", [seen] + evidence)
    return CheckResult(NAME, PASS, seen, evidence)


def release_line_news(live: tuple[tuple[str, str | None], ...], today: date, evidence: list[str]) -> list[str]:
    """What the catalogue's release lines (catalogue/lines.py) say of each live (chart, version): its line's support
    and the newer patches of that line with what each fixes or requires go to `evidence`; returns one short phrase per
    chart behind its line's newest patch (or on a line out of support), for the summary."""
    out = []
    for chart, version in live:
        if not version:
            continue
        support = catalogue.line_support(chart, version, today)
        evidence.append(f"{chart} {version}: {support}")
        note = catalogue.upgrade_note(chart, version, today)
        if note:
            evidence.append(f"upgrade: {note}")
        newer = catalogue.newer_patches(chart, version)
        actions = [p for p in newer if p.action_required]
        for p in actions:
            evidence.append(f"{chart} {p.version} ACTION REQUIRED before upgrading: {p.action_required} "
                            f"(source: {p.source})")
        if newer:
            out.append(f"{chart} {version} is behind {newer[-1].version}, its line's newest patch ({support})"
                       + (f"; ACTION REQUIRED in {', '.join(p.version for p in actions)}" if actions else ""))
        elif "left support" in support or "out of support" in support:
            out.append(f"{chart} {version}: {support}")
    return out


def utc_date(value: Any) -> date | None:
    """An EKS API date (a datetime from boto3, possibly in local time, or an ISO string) as its UTC day, or None."""
    if isinstance(value, str):
        value = parse_time(value) or _iso_date(value)
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(timezone.utc).date()
    return value if isinstance(value, date) else None


def _iso_date(text: str) -> date | None:
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        return None


def _judge_support(k_minor: str, today: date, cluster_name: str | None, eks_cluster: dict | None,
                   eks_cluster_error: str | None, eks_versions: list[dict] | None, eks_versions_error: str | None,
                   evidence: list[str], problems: list[str]) -> str | None:
    """The EKS part of the verdict: the cluster's own version and upgrade policy, the catalogue's support rule on
    `today`, and the catalogue's calendar against EKS's. Appends to evidence/problems; returns an advisory or None."""
    if eks_cluster is not None:
        name = eks_cluster.get("name") or cluster_name
        policy = (eks_cluster.get("upgradePolicy") or {}).get("supportType")
        support_type = policy or EKS_DEFAULT_SUPPORT_TYPE
        evidence.append(f"EKS cluster {name}: version {eks_cluster.get('version', '?')}, platform "
                        f"{eks_cluster.get('platformVersion', '?')}, upgradePolicy.supportType {support_type}" +
                        ("" if policy else f" (not set: EKS's default {EKS_DEFAULT_SUPPORT_TYPE})"))
        if support_type not in catalogue.SUPPORT_TYPES:
            evidence.append(f"EKS cluster {name}: upgradePolicy.supportType {support_type!r} is not one of "
                            f"{catalogue.join(catalogue.SUPPORT_TYPES)}; judged as not EXTENDED")
        try:
            eks_minor = "%d.%d" % catalogue.minor(str(eks_cluster.get("version", "")))
        except ValueError:
            problems.append(f"EKS cluster {name}: version {eks_cluster.get('version')!r} is not a Kubernetes version")
        else:
            if eks_minor != k_minor:
                problems.append(f"EKS cluster {name} reports version {eks_minor} but the API server reports "
                                f"{k_minor}: a control-plane upgrade in progress, or the kubeconfig points at "
                                "another cluster than --cluster-name")
        source = "as eks:DescribeCluster reports it"
    else:
        support_type = catalogue.DEFAULT_SUPPORT_TYPE
        if eks_cluster_error:
            evidence.append(f"{eks_cluster_error}: the EKS upgrade policy was not read; judged as without a "
                            "cluster name")
        else:
            evidence.append("EKS upgrade policy not read (no cluster name: pass --cluster-name or --stack)")
        source = "unknown: the stack's default assumed"
    evidence.append(f"EKS support rule on {today}: Kubernetes {k_minor} with upgradePolicy.supportType "
                    f"{support_type} ({source})")
    warning = None
    finding = catalogue.kubernetes_support_finding(k_minor, support_type, today)
    row = catalogue.EKS_SUPPORT.get(k_minor)
    if finding is None:
        evidence.append(f"Kubernetes {k_minor} is in EKS standard support until {row.standard_end} (extended "
                        f"support until {row.extended_end})" if row else f"Kubernetes {k_minor}: no finding")
    elif finding.level == catalogue.MANDATORY:
        problems.append(finding.message)
    else:
        warning = finding.message
        evidence.append(f"warning: {finding.message}")
    if eks_versions_error:
        evidence.append(f"{eks_versions_error}: the catalogue's EKS calendar was not compared with EKS's")
    elif eks_versions is not None:
        _compare_calendar(k_minor, row, eks_versions, evidence, problems)
    return warning


def _compare_calendar(k_minor: str, row: catalogue.EksSupport | None, eks_versions: list[dict], evidence: list[str],
                      problems: list[str]) -> None:
    """catalogue.EKS_SUPPORT's row against eks:DescribeClusterVersions' answer for the same minor (UTC days)."""
    live = next((v for v in eks_versions if str(v.get("clusterVersion", "")) == k_minor), None)
    if live is None:
        answered = catalogue.join(str(v.get("clusterVersion")) for v in eks_versions) or "nothing"
        evidence.append(f"eks:DescribeClusterVersions answered no entry for Kubernetes {k_minor} ({answered})")
        return
    fields = (("endOfStandardSupportDate", "standard_end"), ("endOfExtendedSupportDate", "extended_end"))
    dates = {api: utc_date(live.get(api)) for api, _ in fields}
    evidence.append(f"eks:DescribeClusterVersions for Kubernetes {k_minor}: " + ", ".join(
        f"{api} {dates[api] or live.get(api, 'not stated')}" for api, _ in fields) +
        (f", versionStatus {live['versionStatus']}" if live.get("versionStatus") else ""))
    if row is None:
        return
    for api, attr in fields:
        mine = getattr(row, attr)
        if dates[api] is not None and dates[api] != mine:
            problems.append(f"EKS reports Kubernetes {k_minor} {api} {dates[api]} but catalogue.EKS_SUPPORT"
                            f"['{k_minor}'].{attr} is {mine}: the catalogue's calendar is stale (update it in "
                            "components/catalogue/support.py)")

def run(ctx: Context) -> CheckResult:
    """Read the controllers, the NodePool CRD and /version, then (with a cluster name) the EKS cluster and EKS's
    support calendar for its minor, and judge on the clock's day (UTC)."""
    kube, s = ctx.kube, ctx.settings
    server = kube.server_version or kube.version()
    eks: dict[str, Any] = {}
    if s.cluster_name:
        from .aws import AwsError, region_from_eks_endpoint  # boto3 loads only when a check talks to AWS

        aws = ctx.aws(s.region or region_from_eks_endpoint(getattr(kube, "host", "") or ""))
        try:
            eks["eks_cluster"] = aws.describe_cluster(s.cluster_name)
        except AwsError as e:
            eks["eks_cluster_error"] = str(e)
        k8s = server_version(server)
        if k8s is not None:
            try:
                eks["eks_versions"] = aws.describe_cluster_versions(["%d.%d" % catalogue.minor(k8s)])
            except AwsError as e:
                eks["eks_versions_error"] = str(e)
    karpenter = kube.list_deployments(KARPENTER_SELECTOR)
    crd = kube.get_crd(NODEPOOL_CRD)
    refused = refused_karpenter(karpenter + ([crd] if crd else []))
    live, live_error = (_live_amis(ctx) if refused else (None, None))
    result = judge_versions(karpenter, kube.list_deployments(KEDA_SELECTOR),
                            kube.list_daemonsets(DEVICE_PLUGIN_SELECTOR), crd, server,
                            today=ctx.clock.now().astimezone(timezone.utc).date(), cluster_name=s.cluster_name,
                            live_amis=live, **eks)
    if live_error:
        result.evidence.append(live_error)
    if refused:
        # The cause is known: the controller that launches GPU nodes is a release the catalogue refuses.
        ctx.block_gpu_nodes(NAME, live_image_line(refused[0][0], live))
    return result


def _live_amis(ctx: Context) -> tuple[tuple[str | None, list[str]] | None, str | None]:
    """(EC2NodeClass name, what status.amis gives the GPU types) as ami-canary read it in this run, else read here
    from the NodePool and its EC2NodeClass (status.amis names, no EC2 call); (None, why) when it cannot be read."""
    if OBSERVED_AMIS in ctx.state:
        return ctx.state[OBSERVED_AMIS], None
    try:
        nodepool = ctx.kube.get_nodepool(ctx.settings.nodepool)
        ref = ((((nodepool or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef")
        name = (ref or {}).get("name")
        nodeclass = ctx.kube.get_ec2nodeclass(name) if name else None
    except CouldNotRun as e:
        return None, f"live status.amis not read: {one_line(e)}"
    if nodeclass is None:
        return None, f"live status.amis not read: NodePool {ctx.settings.nodepool} or its EC2NodeClass not found"
    return (name, observed_images(nodeclass, nodepool, {})), None
