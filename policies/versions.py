"""Rules on versions: chart versions, the Karpenter chart pair, KEDA scaling strategies and the Kubernetes version.

Every fact here is read from `components.catalogue` (broken Karpenter releases, the KEDA minimum, the strategies
KEDA 2.20.0-2.20.1 reject, the Kubernetes range each Karpenter/KEDA line supports, the pins); this module only finds
the versions in the plan and asks the catalogue. Why each rule exists:

- `chart-versions`: Karpenter 1.0.0-1.0.2 boot GPU nodes on the Neuron AMI (pods Pending forever while everything
  reports Ready), 1.8.4 carries a do-not-upgrade notice, KEDA below the minimum lacks the provider and schema this
  stack uses; an unpinned chart floats to whatever is newest on the next deploy.
- `karpenter-chart-pair` (stack): `karpenter-crd` at another version than `karpenter` installs CRDs the controller
  does not match.
- `keda-scaling-strategy` (stack): KEDA 2.20.0-2.20.1 reject `scalingStrategy.strategy: default` on a ScaledJob;
  judged against the KEDA chart in the same stack (the pin when the stack installs none).
- `kubernetes-version-range` (stack): a control plane outside the range the stack's Karpenter or KEDA supports.
- `chart-newer-patch` (advisory): a Karpenter or KEDA chart at a release its line has newer patches of (or whose
  line is superseded or out of support) is told the newest patch and what each newer one fixes or requires
  (`catalogue.upgrade_note`: Karpenter 1.14.4's Action Required on empty selector terms, for one).
- `kubernetes-support-window` (advisory) and `kubernetes-support-ended` (mandatory): the EKS support calendar
  (`catalogue.kubernetes_support_finding`): within 90 days of the end of standard support, or past it on extended
  support, the stack is told the date and what extended support costs; past it with `upgradePolicy.supportType`
  STANDARD (EKS auto-upgrades the control plane under the stack), or past extended support, it is refused. An unset
  supportType is EKS's default, EXTENDED. Judged today (UTC), or on the policy config's `today` (ISO date), or on
  $GPUBURST_TODAY.
In a partial plan (no GpuBurstPlatform) without a Karpenter or KEDA chart, the version that runs is another
stack's: the rules judge against the fact (ExistingKarpenter/ExistingKeda `version`, policy config
`karpenterVersion`/`kedaVersion`; a fact the catalogue refuses is a violation) or, without one, against the pin, and
say so once through `outside-this-stack`.
Charts are recognised by the last path segment of `chart` (`oci://public.ecr.aws/karpenter/karpenter`,
`kedacore/keda`, `keda`, `.../keda-2.20.2.tgz`) on `kubernetes:helm.sh/v4:Chart` and `kubernetes:helm.sh/v3:Release`
(`policies.plan.chart_ref`).
"""
from __future__ import annotations

from datetime import date
from itertools import product
from typing import Any

from pulumi_policy import EnforcementLevel, Policy, PolicyConfigSchema

from ._components import catalogue
from .declare import plan_policy, resource_policy, scoped_policy
from .facts import WHOLE, Scope
from .outside import Finding, Outside
from .plan import Res, chart_ref
from .resources import CLUSTER_TYPES, EC2NODECLASS, HELM_CHART_TYPES, NODEPOOL, SCALED_JOB, Found, dig, fmt, is_kind
from .unknowns import UNKNOWN, unknown_message

CHART_NAME = "chart-versions"
PAIR_NAME = "karpenter-chart-pair"
STRATEGY_NAME = "keda-scaling-strategy"
KUBERNETES_NAME = "kubernetes-version-range"
NEWER_PATCH_NAME = "chart-newer-patch"
SUPPORT_WINDOW_NAME = "kubernetes-support-window"
SUPPORT_ENDED_NAME = "kubernetes-support-ended"
EKS_DEFAULT_SUPPORT_TYPE = "EXTENDED"
"""What EKS applies when a cluster sets no upgradePolicy.supportType."""

KARPENTER: str = catalogue.CHARTS["karpenter"].chart
"""The controller chart."""
KARPENTER_CRD: str = next(n for n in catalogue.KARPENTER_CHARTS if n != KARPENTER)
"""The CRD chart: the other chart of `catalogue.KARPENTER_CHARTS`, which must be at the controller's version."""
KEDA: str = catalogue.CHARTS["keda"].chart
RUNNING: dict[str, tuple[str, str]] = {KARPENTER: ("Karpenter", "karpenterVersion"), KEDA: ("KEDA", "kedaVersion")}
"""Chart -> (what runs it, the fact giving its version when another stack installs it)."""


def chart_problems(props: Any) -> list[str]:
    """Why this chart's version must not be deployed (only charts the catalogue pins are judged)."""
    ref = chart_ref(props)
    if ref.name is UNKNOWN:
        return [unknown_message("chart", "which chart this is (and so its version rules)")]
    if ref.name not in catalogue.CHARTS:
        return []
    pin = catalogue.CHARTS[ref.name].version
    if ref.version.unknown:
        return [unknown_message(ref.version.path, f"the {ref.name} chart version")]
    if not isinstance(ref.version.value, str) or not ref.version.value.strip():
        got = "is missing" if ref.version.missing else f"is {fmt(ref.version.value)}"
        return [f"{ref.version.path} of chart {ref.name!r} {got}: an unpinned chart floats to the newest release on "
                f"the next deploy; pin version: {pin!r} (the catalogue's pin)"]
    problem = catalogue.chart_version_problem(ref.name, ref.version.value)
    if problem is None:
        return []
    return [f"{ref.version.path} of chart {ref.name!r} = {fmt(ref.version.value)}: {problem}; use {pin!r} (the "
            "catalogue's pin)"]


def newer_patch_notes(props: Any, on: date | None = None) -> list[str]:
    """What the catalogue's release lines say of this chart's release (Karpenter and KEDA only): the newest patch of
    its line and what the newer ones fix or require, the line's support, the newer lines. Advisory: the charts of
    those patches cannot be pulled offline, so moving the pin is docs/upgrading.md's procedure, not this preview's."""
    ref = chart_ref(props)
    if ref.name not in (KARPENTER, KEDA) or ref.version.unknown or not isinstance(ref.version.value, str):
        return []
    try:
        catalogue.parse_version(ref.version.value)
    except ValueError:
        return []  # chart-versions reports it
    note = catalogue.upgrade_note(ref.name, ref.version.value, on)
    return [f"{ref.version.path} of chart {ref.name!r}: {note} (docs/upgrading.md moves the pin)"] if note else []


def stack_charts(resources: list[Res]) -> dict[str, list[tuple[str, Found]]]:
    """chart name -> [(urn, version)] for every helm chart in the stack whose name is known."""
    out: dict[str, list[tuple[str, Found]]] = {}
    for r in resources:
        if r.type in HELM_CHART_TYPES:
            ref = chart_ref(r.props)
            if isinstance(ref.name, str):
                out.setdefault(ref.name, []).append((r.urn, ref.version))
    return out


def _same_version(a: str, b: str) -> bool:
    try:
        return catalogue.parse_version(a) == catalogue.parse_version(b)
    except ValueError:
        return a.strip() == b.strip()


def running_versions(resources: list[Res], name: str, scope: Scope, urn: str | None
                     ) -> tuple[list[str], list[Found], list[Finding | Outside]]:
    """(versions of `name` (keda, karpenter) the stack's rules judge against, its unknown chart versions, what to
    report about them at `urn`): the stack's charts' versions, or the pin when it has none; in a partial plan
    without a chart, the fact's version (a violation when the catalogue refuses it), else the pin and an `Outside`
    (one wording for every rule, so it is said once)."""
    charts = stack_charts(resources)
    if scope.whole or charts.get(name):
        known, unknown = _versions_in_stack(charts, name)
        return known, unknown, []
    label, key = RUNNING[name]
    pin = catalogue.CHARTS[name].version
    value = scope.value(key)
    if isinstance(value, str):
        refuse = catalogue.keda_version_problem if name == KEDA else catalogue.karpenter_version_problem
        problem = refuse(value)
        if problem is None:
            return [value], [], []
        return [], [], [(urn, f"{key} = {fmt(value)} ({scope.source(key)}): {problem}; the {label} this stack runs "
                              f"on must be one the catalogue accepts (it pins {pin!r})")]
    return [pin], [], [Outside(urn, f"{label} is not in this plan (no {name} chart): its version is not known here, "
                                    f"so the rules judge against the catalogue's pin {label} {pin}", (key,))]


def pair_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) when karpenter-crd and karpenter are both in the stack at different versions; in a partial
    plan without the karpenter chart, when karpenter-crd is not at the version of the Karpenter that runs, or that
    version is one the catalogue refuses (the NodePools' AMI guard)."""
    charts = stack_charts(resources)
    crd_name = KARPENTER_CRD
    out: list[Finding | Outside] = []
    if not scope.whole and not charts.get(KARPENTER):
        # Another stack runs Karpenter. With its version known, this plan's NodePools run under it (the AMI guard)
        # and a karpenter-crd chart here must match it; unknown, only a karpenter-crd chart here is left unchecked
        # (a NodePool alone says nothing: the components check the version they are given).
        crds = charts.get(crd_name, [])
        given = isinstance(scope.value(RUNNING[KARPENTER][1]), str)
        objects = [r.urn for r in resources if is_kind(r.type, NODEPOOL) or is_kind(r.type, EC2NODECLASS)]
        if not (crds or (given and objects)):
            return []
        versions, _unknown, said = running_versions(resources, KARPENTER, scope, (objects or [crds[0][0]])[0])
        out += said
        if not given:
            return out
        charts = {**charts, KARPENTER: [(None, Found(v, scope.source(RUNNING[KARPENTER][1]))) for v in versions]}
    for (crd_urn, crd), (ctl_urn, ctl) in product(charts.get(crd_name, []), charts.get(KARPENTER, [])):
        for urn, v in ((crd_urn, crd), (ctl_urn, ctl)):
            if v.unknown:
                out.append((urn, unknown_message(v.path, f"whether {crd_name} and {KARPENTER} are at one version")))
        if crd.unknown or ctl.unknown:
            continue
        if isinstance(crd.value, str) and isinstance(ctl.value, str) and _same_version(crd.value, ctl.value):
            continue
        at = f"{fmt(ctl.value)} ({ctl.path})" if ctl_urn is None else fmt(ctl.value)
        out.append((crd_urn, f"{crd.path} of {crd_name} = {fmt(crd.value)} but {KARPENTER} is at {at}: "
                             f"the CRDs are coupled to the controller; install {crd_name} and {KARPENTER} at the same "
                             f"version (the catalogue pins both at {catalogue.CHARTS[KARPENTER].version!r})"))
    return out


def _versions_in_stack(charts: dict[str, list[tuple[str, Found]]], name: str) -> tuple[list[str], list[Found]]:
    """(parseable versions of chart `name` in the stack, or [the pin] when there are none; unknown versions)."""
    known, unknown = [], []
    for _urn, v in charts.get(name, []):
        if v.unknown:
            unknown.append(v)
        elif isinstance(v.value, str):
            try:
                catalogue.parse_version(v.value)
            except ValueError:
                continue  # chart-versions reports it
            known.append(v.value)
    return (known or ([] if unknown else [catalogue.CHARTS[name].version])), unknown


def strategy_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every ScaledJob whose scalingStrategy.strategy the stack's KEDA rejects."""
    judged = [r for r in resources if is_kind(r.type, SCALED_JOB)
              and not dig(r.props, "spec", "scalingStrategy", "strategy").missing]
    if not judged:
        return []
    keda_versions, keda_unknown, out = running_versions(resources, KEDA, scope, judged[0].urn)
    for r in judged:
        strategy = dig(r.props, "spec", "scalingStrategy", "strategy")
        if strategy.unknown:
            out.append((r.urn, unknown_message(strategy.path, "whether KEDA accepts the scaling strategy")))
            continue
        if keda_unknown:
            out.append((r.urn, unknown_message(keda_unknown[0].path + " (KEDA chart)",
                                               f"whether KEDA accepts scalingStrategy {fmt(strategy.value)}")))
        for version in keda_versions:
            problem = catalogue.keda_scaling_strategy_problem(str(strategy.value), version)
            if problem:
                out.append((r.urn, f"{strategy.path} = {fmt(strategy.value)}: {problem}"))
    return out


def kubernetes_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every EKS cluster whose version is unpinned or outside the stack's Karpenter/KEDA range."""
    clusters = [r for r in resources if r.type in CLUSTER_TYPES]
    if not clusters:
        return []
    karpenters, k_unknown, out = running_versions(resources, KARPENTER, scope, clusters[0].urn)
    kedas, e_unknown, said = running_versions(resources, KEDA, scope, clusters[0].urn)
    out += said
    karpenters = karpenters or [catalogue.CHARTS[KARPENTER].version]
    kedas = kedas or [catalogue.CHARTS[KEDA].version]
    for r in clusters:
        version = dig(r.props, "version")
        if version.unknown:
            out.append((r.urn, unknown_message(version.path, "the Kubernetes version against Karpenter and KEDA")))
            continue
        if not isinstance(version.value, str) or not version.value.strip():
            got = "is missing (EKS then picks its default)" if version.missing else f"is {fmt(version.value)}"
            out.append((r.urn, f"{version.path} {got}: pin the control plane's Kubernetes version (the catalogue "
                               f"pins {catalogue.KUBERNETES_VERSION!r})"))
            continue
        for v in k_unknown + e_unknown:
            out.append((r.urn, unknown_message(v.path + " (chart)", "which Kubernetes versions the stack supports")))
        seen: set[str] = set()
        for karpenter, keda in product(karpenters, kedas):
            for problem in catalogue.kubernetes_problems(version.value, karpenter, keda):
                if problem not in seen:
                    seen.add(problem)
                    out.append((r.urn, f"{version.path} = {fmt(version.value)}: {problem}; use a version inside "
                                       f"that range (the catalogue pins {catalogue.KUBERNETES_VERSION!r})"))
    return out


def support_findings(resources: list[Res], on: date | None = None) -> list[tuple[str, str, str]]:
    """(urn, level, message) of the EKS support rule for every EKS cluster whose Kubernetes version is known."""
    out: list[tuple[str, str, str]] = []
    for r in resources:
        if r.type not in CLUSTER_TYPES:
            continue
        version = dig(r.props, "version")
        if version.unknown:
            out.append((r.urn, catalogue.MANDATORY, unknown_message(version.path, "the cluster's EKS support rule")))
            continue
        if not isinstance(version.value, str) or not version.value.strip():
            continue  # kubernetes-version-range reports a missing version
        support = dig(r.props, "upgradePolicy", "supportType")
        if support.unknown:
            out.append((r.urn, catalogue.MANDATORY, unknown_message(support.path, "the cluster's EKS support rule")))
            continue
        unset = support.missing or support.value is None
        support_type = EKS_DEFAULT_SUPPORT_TYPE if unset else str(support.value)
        finding = catalogue.kubernetes_support_finding(version.value, support_type, on)
        if finding is None:
            continue
        how = (f"{support.path} is unset (EKS's default {EKS_DEFAULT_SUPPORT_TYPE}; set it explicitly)" if unset
               else f"{support.path} = {fmt(support.value)}")
        out.append((r.urn, finding.level, f"{version.path} = {fmt(version.value)}, {how}: {finding.message}"))
    return out


def _judged_on(config: dict) -> date | None:
    raw = config.get("today")
    if raw in (None, ""):
        return None
    try:
        return date.fromisoformat(str(raw))
    except ValueError:
        raise ValueError(f"policy config today: {raw!r} is not valid: an ISO date such as 2026-11-15") from None


def _support(level: str):
    def findings(resources: list[Res], config: dict) -> list[tuple[str, str]]:
        return [(urn, message) for urn, lvl, message in support_findings(resources, _judged_on(config))
                if lvl == level]
    findings.__name__ = f"support_{level}"
    return findings


_TODAY_SCHEMA = PolicyConfigSchema(properties={"today": {
    "type": "string", "description": "ISO date to judge the EKS support calendar on (default: today in UTC)"}})


CHART_POLICY = resource_policy(
    CHART_NAME, "Karpenter, karpenter-crd and KEDA charts must be pinned to a version the catalogue accepts (no "
                "Karpenter 1.0.0-1.0.2 or 1.8.4, no KEDA below the minimum).",
    HELM_CHART_TYPES, lambda r: chart_problems(r.props))

NEWER_PATCH_POLICY = resource_policy(
    NEWER_PATCH_NAME, "Tells a stack whose Karpenter or KEDA chart is behind the newest patch of its release line (or "
                      "on a superseded or unsupported line) what the newer patches fix or require.",
    HELM_CHART_TYPES, lambda r: newer_patch_notes(r.props), level=EnforcementLevel.ADVISORY)

PAIR_POLICY = scoped_policy(
    PAIR_NAME, "The karpenter-crd chart must be at the same version as the karpenter chart (in a partial plan: as the "
               "Karpenter that runs, which must be one the catalogue accepts).", pair_findings, ("karpenterVersion",))

STRATEGY_POLICY = scoped_policy(
    STRATEGY_NAME, "A ScaledJob's scalingStrategy.strategy must be one the stack's KEDA accepts (KEDA 2.20.0-2.20.1 "
                   "reject 'default').", strategy_findings, ("kedaVersion",))

KUBERNETES_POLICY = scoped_policy(
    KUBERNETES_NAME, "The EKS cluster's Kubernetes version must be pinned and inside what the stack's Karpenter and "
                     "KEDA support.", kubernetes_findings, ("karpenterVersion", "kedaVersion"))

SUPPORT_WINDOW_POLICY = plan_policy(
    SUPPORT_WINDOW_NAME, "Tells a stack whose EKS Kubernetes version leaves standard support within 90 days, or runs "
                         "on extended support (6x the control-plane price), the date and the cost.",
    _support(catalogue.ADVISORY), level=EnforcementLevel.ADVISORY, config_schema=_TODAY_SCHEMA)

SUPPORT_ENDED_POLICY = plan_policy(
    SUPPORT_ENDED_NAME, "An EKS cluster past its version's end of standard support must have chosen upgradePolicy."
                        "supportType EXTENDED (else EKS auto-upgrades its control plane); past extended support it is "
                        "refused.",
    _support(catalogue.MANDATORY), config_schema=_TODAY_SCHEMA)

POLICIES: list[Policy] = [CHART_POLICY, NEWER_PATCH_POLICY, PAIR_POLICY, STRATEGY_POLICY, KUBERNETES_POLICY,
                          SUPPORT_WINDOW_POLICY, SUPPORT_ENDED_POLICY]
