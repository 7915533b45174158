"""The catalogue: every pinned version, every fact about versions and the GPU instance facts, in one place.

Components, the policy pack and `verify` all read this module; nothing else restates a version. A fact here is a
table row with its reason, so an error message can quote it and a test can check it against the upstream CRDs.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Iterable

# --------------------------------------------------------------------------------------------------------------------
# Pins: what the stack deploys unless a stack's config overrides it (and the override is checked against the facts).
# --------------------------------------------------------------------------------------------------------------------

KUBERNETES_VERSION = "1.35"
"""EKS control-plane version: inside both the pinned Karpenter's (1.29-1.35) and the pinned KEDA's (1.33-1.35)
supported ranges, within the schemas kubernetes-validate ships (1.25-1.37), and in EKS standard support until
2027-03-27 (see `EKS_SUPPORT`)."""

KARPENTER_VERSION = "1.14.1"
"""Karpenter controller and `karpenter-crd` chart version (always the same; see `KARPENTER_CHARTS`)."""

KEDA_VERSION = "2.20.2"
"""KEDA chart and operator version; TriggerAuthentication and ScaledJob schemas are judged against this one."""

NVIDIA_DEVICE_PLUGIN_VERSION = "0.20.0"
"""NVIDIA k8s-device-plugin chart version (advertises `nvidia.com/gpu` on GPU nodes): 0.20.0 (2026-08-19), which
passes CDI feature flags through (`cdi.featureFlags`, since 0.18.1/0.18.2) and vendors node-feature-discovery 0.19.0
(not installed here: `gfd.enabled` stays false)."""

WORKER_BASE_IMAGE = ("python:3.11.14-slim-bookworm"
                     "@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d")
"""Base image of worker/Dockerfile (the BASE_IMAGE build arg): CPython 3.11 (the version the worker is tested on) on
Debian 12 slim, by its multi-platform index digest. Not a CUDA image: torch 2.13's CUDA 13 wheels bring their own CUDA
libraries and the NVIDIA container toolkit mounts the host's driver, so the smallest base that runs Python and glibc
>= 2.28 (the wheels' manylinux floor) is all the worker needs (the CUDA 12.8 runtime base it replaced carried a second
CUDA nothing loaded)."""

WORKER_BASE_IMAGE_BYTES = 42_000_000
"""ESTIMATE, not measured here (no registry access offline): compressed size of the base image for linux/amd64,
~42 MB (Debian 12 slim ~28 MB + CPython ~14 MB, as Docker Hub lists the 3.11-slim-bookworm tags)."""

WORKER_IMAGE_LAYER_BYTES: dict[str, int] = {
    # Written by scripts/lock_worker_image.py; tests/components/test_image_layers.py re-adds the sizes recorded in
    # worker/image/*.txt and fails when a re-lock was not copied here.
    "10-cublas.txt": 423_138_758,
    "11-cudnn.txt": 366_173_588,
    "12-cufft-curand.txt": 273_629_747,
    "13-nccl-nvshmem.txt": 266_388_546,
    "14-cusolver.txt": 200_941_980,
    "15-cusparse.txt": 316_091_523,
    "16-cuda-small.txt": 159_644_791,
    "20-triton.txt": 197_701_306,
    "30-torch.txt": 526_574_961,
    "40-worker.txt": 85_029_107,
}
"""Expected compressed size in bytes of each Python layer of the worker image (one per worker/image lock file): the
sum of its wheels' sizes on PyPI (the simple index's PEP 700 `size`, read 2026-12-01). A layer is a gzip of the
unpacked wheels, so its size is close to but not exactly this (an estimate). Whole image: these plus
`WORKER_BASE_IMAGE_BYTES` and the worker's own code (< 1 MB): ~2.86 GB compressed, largest layer torch at 0.53 GB."""

WORKER_CODE_LAYER_BYTES = 2_000_000
"""Upper bound of the worker's own layers (worker/ sources, the built-in model, bytecode), in bytes; a test holds the
sources under it uncompressed."""

WORKER_PYTHON_REQUIREMENTS = "worker/requirements.txt"
"""Where the worker image's Python pins live (torch, tifffile, ...): the Dockerfile installs exactly that file."""


@dataclass(frozen=True)
class ChartPin:
    """Where a Helm chart comes from and which version the stack installs."""

    chart: str
    """Chart name, e.g. `karpenter`."""
    repository: str
    """Helm repository URL or OCI registry prefix (without the chart name)."""
    version: str
    """Exact chart version; never a range."""
    namespace: str
    """Namespace the release is installed into."""


CHARTS: dict[str, ChartPin] = {
    "karpenter-crd": ChartPin("karpenter-crd", "oci://public.ecr.aws/karpenter", KARPENTER_VERSION, "kube-system"),
    "karpenter": ChartPin("karpenter", "oci://public.ecr.aws/karpenter", KARPENTER_VERSION, "kube-system"),
    "keda": ChartPin("keda", "https://kedacore.github.io/charts", KEDA_VERSION, "keda"),
    "nvidia-device-plugin": ChartPin(
        "nvidia-device-plugin", "https://nvidia.github.io/k8s-device-plugin", NVIDIA_DEVICE_PLUGIN_VERSION,
        "nvidia-device-plugin"),
}
"""Every Helm chart the stack installs, keyed by chart name."""

KARPENTER_CHARTS = ("karpenter-crd", "karpenter")
"""The two Karpenter charts: they must always be at the same version (the CRDs are coupled to the controller)."""

# --------------------------------------------------------------------------------------------------------------------
# Versions as tuples.
# --------------------------------------------------------------------------------------------------------------------

_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[-+].*)?$")


def parse_version(text: str) -> tuple[int, int, int]:
    """`"v1.0.1"` -> `(1, 0, 1)`; a missing minor or patch counts as 0. Raises ValueError on anything else."""
    m = _VERSION.match(str(text).strip())
    if not m:
        raise ValueError(f"not a version: {text!r} (expected MAJOR.MINOR[.PATCH], e.g. '1.14.1')")
    return tuple(int(g) if g is not None else 0 for g in m.groups())  # type: ignore[return-value]


def minor(text: str) -> tuple[int, int]:
    """`"1.34"` or `"1.34.2"` -> `(1, 34)`."""
    major, min_, _ = parse_version(text)
    return major, min_


def _fmt_minor(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


# --------------------------------------------------------------------------------------------------------------------
# Karpenter facts.
# --------------------------------------------------------------------------------------------------------------------

KARPENTER_MINIMUM = "1.0.3"
"""Oldest Karpenter the stack accepts: v1 APIs, and the AL2023 NVIDIA/Neuron AMI swap fixed."""

KARPENTER_BROKEN_RELEASES: dict[str, str] = {
    "1.0.0": "Karpenter 1.0.0-1.0.2 swapped the AL2023 NVIDIA and Neuron AMI variants: GPU nodes boot on the Neuron AMI, "
             "nvidia.com/gpu is never allocatable and GPU pods stay Pending while every status says READY=True "
             "(fixed in 1.0.3)",
    "1.0.1": "",
    "1.0.2": "",
    "1.8.4": "Karpenter 1.8.4 carries an upstream 'do not upgrade' notice; use a later patch release",
}
"""Releases that must never be deployed, with the reason (1.0.1 and 1.0.2 share 1.0.0's reason)."""
for _v in ("1.0.1", "1.0.2"):
    KARPENTER_BROKEN_RELEASES[_v] = KARPENTER_BROKEN_RELEASES["1.0.0"]

KARPENTER_KUBERNETES: list[tuple[str, str, str]] = [
    # (first Karpenter minor of the row, oldest Kubernetes, newest Kubernetes), from the upstream compatibility matrix.
    ("1.0", "1.25", "1.30"),
    ("1.1", "1.29", "1.31"),
    ("1.2", "1.29", "1.32"),
    ("1.5", "1.29", "1.33"),
    ("1.6", "1.29", "1.34"),
    ("1.9", "1.29", "1.35"),
]
"""Kubernetes minors each Karpenter release line supports; a row holds until the next row's first minor."""

# --------------------------------------------------------------------------------------------------------------------
# KEDA facts.
# --------------------------------------------------------------------------------------------------------------------

KEDA_MINIMUM = "2.19"
"""Oldest KEDA the stack accepts."""

KEDA_PROVIDER_HISTORY: list[tuple[str, str, str, str]] = [
    # (KEDA version, change, provider, why) in order; the provider enum of TriggerAuthentication.spec.podIdentity.
    ("2.0", "add", "azure", "AAD Pod Identity"),
    ("2.0", "add", "gcp", "GCP workload identity"),
    ("2.0", "add", "aws-eks", "IRSA through the operator (deprecated since 2.13, removed in KEDA v3)"),
    ("2.0", "add", "aws-kiam", "kiam (removed in 2.15)"),
    ("2.9", "add", "azure-workload", "Azure workload identity"),
    ("2.13", "add", "aws", "AWS pod identity with roleArn or identityOwner"),
    ("2.14", "add", "none", "explicitly no identity"),
    ("2.15", "remove", "aws-kiam", "kiam support removed"),
    ("2.15", "remove", "azure", "AAD Pod Identity removed"),
]
"""How the accepted `podIdentity.provider` values changed across KEDA releases."""

KEDA_DEPRECATED_PROVIDERS: dict[str, str] = {
    "aws-eks": "deprecated since KEDA 2.13 and removed in KEDA v3; use provider 'aws' with roleArn "
               "(or identityOwner: keda|workload)",
}
"""Providers a version still accepts but that the stack refuses, with what to use instead."""

KEDA_IDENTITY_OWNERS = ("keda", "workload")
"""Values of `podIdentity.identityOwner` (provider `aws`, mutually exclusive with roleArn)."""

KEDA_SCALING_STRATEGIES = ("default", "custom", "accurate", "eager")
"""Values of a ScaledJob's `scalingStrategy.strategy` in the CRD."""

KEDA_ROLLOUT_STRATEGIES = ("gradual", "immediate")
"""Values of a ScaledJob's `rollout.strategy` in the CRD."""

KEDA_REJECTED_SCALING_STRATEGIES: list[tuple[str, str, str, str]] = [
    # (first bad version, last bad version, strategy, why)
    ("2.20.0", "2.20.1", "default",
     "KEDA 2.20.0-2.20.1 reject scalingStrategy.strategy 'default' (fixed in 2.20.2); omit it or use 'accurate'"),
]
"""ScaledJob scaling strategies that particular KEDA releases refuse."""

KEDA_KUBERNETES: list[tuple[str, str, str]] = [
    # (KEDA minor, oldest Kubernetes, newest Kubernetes), from the upstream compatibility matrix.
    ("2.13", "1.27", "1.29"),
    ("2.14", "1.27", "1.29"),
    ("2.15", "1.28", "1.30"),
    ("2.16", "1.29", "1.31"),
    ("2.17", "1.30", "1.32"),
    ("2.18", "1.31", "1.33"),
    ("2.19", "1.32", "1.34"),
    ("2.20", "1.33", "1.35"),
]
"""Kubernetes minors each KEDA minor is tested against."""


_PROVIDER_ORDER = ("azure", "azure-workload", "gcp", "aws", "aws-eks", "aws-kiam", "none")


def keda_providers(keda_version: str) -> tuple[str, ...]:
    """The `podIdentity.provider` values the given KEDA version's CRD accepts, in the CRD enum's order."""
    v = parse_version(keda_version)
    accepted: list[str] = []
    for since, change, provider, _why in KEDA_PROVIDER_HISTORY:
        if parse_version(since) > v:
            continue
        if change == "add" and provider not in accepted:
            accepted.append(provider)
        elif change == "remove" and provider in accepted:
            accepted.remove(provider)
    return tuple(sorted(accepted, key=_PROVIDER_ORDER.index))


def keda_provider_problem(provider: str, keda_version: str = KEDA_VERSION) -> str | None:
    """Why `provider` must not be used with `keda_version`, or None when it is fine."""
    allowed = keda_providers(keda_version)
    if provider not in allowed:
        return (f"podIdentity.provider {provider!r} is not accepted by KEDA {keda_version} "
                f"(allowed: {', '.join(allowed)})")
    if provider in KEDA_DEPRECATED_PROVIDERS:
        return f"podIdentity.provider {provider!r} is {KEDA_DEPRECATED_PROVIDERS[provider]}"
    return None


def keda_scaling_strategy_problem(strategy: str, keda_version: str = KEDA_VERSION) -> str | None:
    """Why a ScaledJob's `scalingStrategy.strategy` fails on `keda_version`, or None."""
    if strategy not in KEDA_SCALING_STRATEGIES:
        return (f"scalingStrategy.strategy {strategy!r} is not a KEDA strategy "
                f"(allowed: {', '.join(KEDA_SCALING_STRATEGIES)})")
    v = parse_version(keda_version)
    for first, last, bad, why in KEDA_REJECTED_SCALING_STRATEGIES:
        if strategy == bad and parse_version(first) <= v <= parse_version(last):
            return f"scalingStrategy.strategy {strategy!r} on KEDA {keda_version}: {why}"
    return None


# --------------------------------------------------------------------------------------------------------------------
# NVIDIA device plugin facts.
# --------------------------------------------------------------------------------------------------------------------

DEVICE_PLUGIN_MINIMUM = "0.18.2"
"""Oldest device plugin the stack accepts: the first that passes `cdi.featureFlags` to the CDI library (0.18.1 added
the value, 0.18.2 made it reach the library; NVIDIA/k8s-device-plugin CHANGELOG), so the AL2023 workaround below can
be set at all."""

DEVICE_PLUGIN_BROKEN_RELEASES: dict[str, str] = {
    v: ("nvidia-device-plugin 0.19.0-0.19.2 changed the defaults of the gds, gdrcopy and mofed flags "
        "(NVIDIA/k8s-device-plugin #1550; reverted in 0.19.3, #1837): a plugin upgrade silently changes what every "
        "GPU container gets mounted; use 0.19.3 or later")
    for v in ("0.19.0", "0.19.1", "0.19.2")
}
"""Device plugin releases that must never be deployed, with the reason."""

DEVICE_PLUGIN_CDI_FEATURE_FLAGS: tuple[str, ...] = ("disable-nvsandboxutils",)
"""CDI feature flags the stack sets on the device plugin by default (`cdi.featureFlags`, comma-joined).
`disable-nvsandboxutils`: the plugin crash-looped on the AL2023 NVIDIA AMI v20260423 (same 580.126.09 driver as
v20260403) because libnvidia-sandboxutils failed its init with ERROR_NVML_LIB_CALL before NVML was called, so no GPU
was allocatable after an `al2023@latest` rollout with no change on the user's side (awslabs/amazon-eks-ami #2706, the
workaround named there). Without sandboxutils the plugin discovers devices the way it did before 0.17."""


def device_plugin_version_problem(version: str) -> str | None:
    """Why this nvidia-device-plugin chart version must not be deployed, or None."""
    try:
        v = parse_version(version)
    except ValueError as e:
        return f"nvidia-device-plugin version {version!r}: {e}"
    canonical = "%d.%d.%d" % v
    if canonical in DEVICE_PLUGIN_BROKEN_RELEASES:
        return DEVICE_PLUGIN_BROKEN_RELEASES[canonical]
    if v < parse_version(DEVICE_PLUGIN_MINIMUM):
        return (f"nvidia-device-plugin {version} is older than the minimum {DEVICE_PLUGIN_MINIMUM} (it ignores "
                "cdi.featureFlags, so the AL2023 nvsandboxutils workaround cannot be set)")
    return None


# --------------------------------------------------------------------------------------------------------------------
# EKS support calendar: when each Kubernetes minor leaves standard and extended support, and what that costs.
# --------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EksSupport:
    """One Kubernetes minor on EKS: its release and end-of-support dates (UTC; billing changes at 00:00 UTC)."""

    minor: str
    """Kubernetes minor, e.g. `1.35`."""
    eks_release: date
    """Day the minor became available on EKS."""
    standard_end: date
    """End of standard support: from this day the control plane bills extended support (upgrade policy EXTENDED) or
    is auto-upgraded (STANDARD)."""
    extended_end: date
    """End of extended support: from this day EKS auto-upgrades the control plane whatever the policy."""
    source: str
    """Where the dates come from."""


_AWS_CALENDAR = ("AWS EKS user guide, 'Amazon EKS Kubernetes release calendar' (awsdocs/amazon-eks-user-guide "
                 "latest/ug/versioning/kubernetes-versions.adoc)")
EKS_SUPPORT: dict[str, EksSupport] = {s.minor: s for s in (
    EksSupport("1.29", date(2024, 1, 23), date(2025, 3, 23), date(2026, 3, 23), _AWS_CALENDAR),
    EksSupport("1.30", date(2024, 5, 23), date(2025, 7, 23), date(2026, 7, 23), _AWS_CALENDAR),
    EksSupport("1.31", date(2024, 9, 26), date(2025, 11, 26), date(2026, 11, 26), _AWS_CALENDAR),
    EksSupport("1.32", date(2025, 1, 23), date(2026, 3, 23), date(2027, 3, 23), _AWS_CALENDAR),
    EksSupport("1.33", date(2025, 5, 29), date(2026, 7, 29), date(2027, 7, 29), _AWS_CALENDAR),
    EksSupport("1.34", date(2025, 10, 2), date(2026, 12, 2), date(2027, 12, 2), _AWS_CALENDAR),
    EksSupport("1.35", date(2026, 1, 27), date(2027, 3, 27), date(2028, 3, 27),
               "the AWS calendar as mirrored by endoflife.date/amazon-eks and aws-samples' EKS operation review "
               "(verified 2026-04-24); 14 + 12 months from the EKS release"),
    EksSupport("1.36", date(2026, 6, 2), date(2027, 8, 2), date(2028, 8, 2),
               "EKS release and end of standard support as reported 2026-08 (devopsdreams, 'Kubernetes 1.36 on "
               "Amazon EKS'); end of extended support by the calendar's 12-month rule, not yet seen published"),
)}
"""The EKS support calendar per Kubernetes minor, 1.29 (the oldest the catalogue's Karpenter lines support) to 1.36.
`verify` compares it with the live `eks:DescribeClusterVersions` answer where it can."""

EKS_STANDARD_USD_PER_CLUSTER_HOUR = 0.10
"""EKS control-plane price per cluster-hour in standard support (aws.amazon.com/eks/pricing)."""

EKS_EXTENDED_USD_PER_CLUSTER_HOUR = 0.60
"""EKS control-plane price per cluster-hour in extended support, 6x standard (aws.amazon.com/eks/pricing; the
'extended support for Kubernetes versions pricing' AWS blog)."""

HOURS_PER_MONTH = 730
"""Hours in an average month, for the monthly figures in messages (8,760 / 12)."""

SUPPORT_TYPES = ("STANDARD", "EXTENDED")
"""Values of an EKS cluster's `upgradePolicy.supportType`: STANDARD auto-upgrades the control plane at the end of
standard support (no extended-support charge); EXTENDED keeps the version, billed at the extended price, until the
end of extended support. EKS's own default, when the field is not set, is EXTENDED."""

DEFAULT_SUPPORT_TYPE = "STANDARD"
"""The stack's `upgradePolicy.supportType` unless a stack sets `gpuburst:upgradeSupportType`: a burst platform would
rather be told early (the rule below) and upgrade on its own schedule than pay 6x for the control plane unnoticed."""

SUPPORT_WARNING_DAYS = 90
"""Days before the end of standard support from which a stack on that version is told (advisory)."""

TODAY_ENV = "GPUBURST_TODAY"
"""Environment variable (ISO date, e.g. 2026-11-15) that the support rule takes as today instead of the UTC date:
for reproducible CI runs and for asking whether a stack will still pass on a later day."""

ADVISORY = "advisory"
MANDATORY = "mandatory"


@dataclass(frozen=True)
class SupportFinding:
    """What the support rule says about one Kubernetes version on one day."""

    level: str
    """`advisory` (tell, do not block) or `mandatory` (block)."""
    message: str
    """One line naming the version, the date and the cost."""


def today() -> date:
    """The day the support rule judges: $GPUBURST_TODAY when set (ISO date), else today in UTC."""
    raw = os.environ.get(TODAY_ENV, "").strip()
    if raw:
        try:
            return date.fromisoformat(raw)
        except ValueError:
            raise ValueError(f"{TODAY_ENV}={raw!r} is not valid: an ISO date such as 2026-11-15") from None
    return datetime.now(timezone.utc).date()


def _extended_cost() -> str:
    extra = (EKS_EXTENDED_USD_PER_CLUSTER_HOUR - EKS_STANDARD_USD_PER_CLUSTER_HOUR) * HOURS_PER_MONTH
    return (f"extended support bills ${EKS_EXTENDED_USD_PER_CLUSTER_HOUR:.2f} per cluster-hour instead of "
            f"${EKS_STANDARD_USD_PER_CLUSTER_HOUR:.2f} (6x; about ${extra:,.0f} more per cluster-month)")


def kubernetes_support_finding(kubernetes_version: str, support_type: str = DEFAULT_SUPPORT_TYPE,
                               on: date | None = None) -> SupportFinding | None:
    """The support rule, shared by config, the policy pack and `verify`: None while the version has more than
    `SUPPORT_WARNING_DAYS` of standard support left; an advisory inside that window (naming the date and what
    extended support costs), or past it with upgrade policy EXTENDED (it is being billed); mandatory past the end of
    standard support with STANDARD (EKS auto-upgrades the control plane under the stack), past the end of extended
    support, or for a minor the calendar does not know."""
    on = on or today()
    try:
        k = "%d.%d" % minor(kubernetes_version)
    except ValueError as e:
        return SupportFinding(MANDATORY, f"kubernetes version {kubernetes_version!r}: {e}")
    row = EKS_SUPPORT.get(k)
    if row is None:
        return SupportFinding(MANDATORY, f"Kubernetes {k} is not in the catalogue's EKS support calendar (known: "
                                         f"{join(EKS_SUPPORT)}): its end of support cannot be judged")
    upgrade = f"upgrade to a minor in standard support (the catalogue pins {KUBERNETES_VERSION})"
    if on >= row.extended_end:
        return SupportFinding(MANDATORY, f"Kubernetes {k} left EKS extended support on {row.extended_end}: EKS "
                                         f"auto-upgrades the control plane at any time; {upgrade}")
    if on >= row.standard_end:
        if support_type == "EXTENDED":
            return SupportFinding(ADVISORY, f"Kubernetes {k} left EKS standard support on {row.standard_end} and "
                                            f"runs on extended support until {row.extended_end}: {_extended_cost()}; "
                                            f"{upgrade}")
        return SupportFinding(MANDATORY, f"Kubernetes {k} left EKS standard support on {row.standard_end}: with "
                                         f"upgradePolicy.supportType {support_type} EKS auto-upgrades the control "
                                         f"plane (nodes, add-ons and charts stay behind); {upgrade}, or choose "
                                         f"EXTENDED knowingly: {_extended_cost()}")
    left = (row.standard_end - on).days
    if left <= SUPPORT_WARNING_DAYS:
        then = (f"EKS then auto-upgrades the control plane (upgradePolicy.supportType {support_type}); staying with "
                f"EXTENDED costs more: {_extended_cost()}" if support_type != "EXTENDED"
                else f"then {_extended_cost()}")
        return SupportFinding(ADVISORY, f"Kubernetes {k}'s EKS standard support ends {row.standard_end} (in {left} "
                                        f"day{'s' if left != 1 else ''}): {then}; {upgrade}")
    return None


# --------------------------------------------------------------------------------------------------------------------
# Whole-combination checks, shared by the stack's config, the policy pack and `verify`.
# --------------------------------------------------------------------------------------------------------------------

def _range_for(table: list[tuple[str, str, str]], version: str) -> tuple[str, str] | None:
    v = minor(version)
    found = None
    for first, lo, hi in table:
        if minor(first) <= v:
            found = (lo, hi)
    return found


def karpenter_kubernetes_range(karpenter_version: str) -> tuple[str, str] | None:
    """(oldest, newest) Kubernetes minor the Karpenter version supports, or None when it predates the table."""
    return _range_for(KARPENTER_KUBERNETES, karpenter_version)


def keda_kubernetes_range(keda_version: str) -> tuple[str, str] | None:
    """(oldest, newest) Kubernetes minor the KEDA version is tested against, or None when unknown."""
    v = minor(keda_version)
    for first, lo, hi in KEDA_KUBERNETES:
        if minor(first) == v:
            return lo, hi
    # A newer KEDA than the table knows keeps the newest row's floor (it only ever moves up).
    if KEDA_KUBERNETES and v > minor(KEDA_KUBERNETES[-1][0]):
        return KEDA_KUBERNETES[-1][1], KEDA_KUBERNETES[-1][2]
    return None


def karpenter_version_problem(version: str) -> str | None:
    """Why this Karpenter chart version must not be deployed, or None."""
    try:
        v = parse_version(version)
    except ValueError as e:
        return f"karpenter version {version!r}: {e}"
    canonical = "%d.%d.%d" % v
    if canonical in KARPENTER_BROKEN_RELEASES:
        return f"karpenter {version}: {KARPENTER_BROKEN_RELEASES[canonical]}"
    if v < parse_version(KARPENTER_MINIMUM):
        return f"karpenter {version} is older than the minimum {KARPENTER_MINIMUM} (v1 APIs and the AL2023 GPU AMI fix)"
    return None


def keda_version_problem(version: str) -> str | None:
    """Why this KEDA version must not be deployed, or None."""
    try:
        v = parse_version(version)
    except ValueError as e:
        return f"keda version {version!r}: {e}"
    if v < parse_version(KEDA_MINIMUM):
        return f"keda {version} is older than the minimum {KEDA_MINIMUM}"
    return None


def kubernetes_problems(kubernetes_version: str, karpenter_version: str = KARPENTER_VERSION,
                        keda_version: str = KEDA_VERSION) -> list[str]:
    """Why this Kubernetes version does not fit the Karpenter and KEDA versions (empty when it fits)."""
    try:
        k = minor(kubernetes_version)
    except ValueError as e:
        return [f"kubernetes version {kubernetes_version!r}: {e}"]
    problems = []
    for name, ver, rng in (("karpenter", karpenter_version, karpenter_kubernetes_range(karpenter_version)),
                           ("keda", keda_version, keda_kubernetes_range(keda_version))):
        if rng is None:
            problems.append(f"kubernetes {kubernetes_version}: no known supported range for {name} {ver}")
        elif not (minor(rng[0]) <= k <= minor(rng[1])):
            problems.append(f"kubernetes {kubernetes_version} is outside what {name} {ver} supports "
                            f"({rng[0]} to {rng[1]})")
    return problems


def combination_problems(*, kubernetes: str = KUBERNETES_VERSION, karpenter: str = KARPENTER_VERSION,
                         karpenter_crd: str | None = None, keda: str = KEDA_VERSION) -> list[str]:
    """Every reason the combination of versions must not be deployed (empty when it is fine)."""
    problems = [p for p in (karpenter_version_problem(karpenter), keda_version_problem(keda)) if p]
    if karpenter_crd is not None and karpenter_crd != karpenter:
        problems.append(f"karpenter-crd {karpenter_crd} differs from karpenter {karpenter}: the CRDs are coupled to "
                        "the controller; install both charts at the same version")
    if not problems:
        problems += kubernetes_problems(kubernetes, karpenter, keda)
    return problems


def chart_version_problem(chart: str, version: str, *, kubernetes: str | None = None) -> str | None:
    """Why a chart found in a plan or a live cluster at `version` is not acceptable, or None (unknown charts pass)."""
    if chart in KARPENTER_CHARTS:
        return karpenter_version_problem(version)
    if chart == "keda":
        return keda_version_problem(version)
    if chart == "nvidia-device-plugin":
        return device_plugin_version_problem(version)
    return None


def describe_pins() -> dict[str, str]:
    """The pins as a flat mapping, for summaries and `verify` output."""
    pins = {"kubernetes": KUBERNETES_VERSION, "worker-base-image": WORKER_BASE_IMAGE}
    pins.update({name: pin.version for name, pin in CHARTS.items()})
    return pins


def all_problems_of_pins() -> list[str]:
    """The catalogue checked against itself: the pins must pass the catalogue's own rules."""
    problems = combination_problems(kubernetes=KUBERNETES_VERSION, karpenter=CHARTS["karpenter"].version,
                                    karpenter_crd=CHARTS["karpenter-crd"].version, keda=KEDA_VERSION)
    plugin = device_plugin_version_problem(CHARTS["nvidia-device-plugin"].version)
    return problems + ([plugin] if plugin else [])


# --------------------------------------------------------------------------------------------------------------------
# Instance facts: the NVIDIA x86-64 GPU instance types the stack may launch, as Karpenter sees them.
# --------------------------------------------------------------------------------------------------------------------

INSTANCE_FACTS_SOURCE = (
    "aws/karpenter-provider-aws v1.14.1 (bde00654) website/content/en/docs/reference/instance-types.md and "
    "pkg/providers/pricing/zz_generated.pricing_aws.go (generated 2026-07-06)")
"""Where every figure of `INSTANCE_TYPES` comes from (tests/components/test_instance_facts.py checks them all)."""

DEFAULT_ROOT_VOLUME_GIB = 20
"""Root volume Karpenter gives an AL2023 node when the EC2NodeClass sets no blockDeviceMappings, in GiB."""

KUBE_RESERVED_EPHEMERAL_GIB = 1.0
"""Karpenter's default kubeReserved `ephemeral-storage` (1Gi), in GiB."""

EVICTION_HARD_NODEFS_AVAILABLE = 0.10
"""Karpenter's default evictionHard `nodefs.available` (10%), as a fraction of the root volume."""


def allocatable_ephemeral_gib(root_volume_gib: float) -> float:
    """Allocatable `ephemeral-storage` Karpenter computes for a node whose root volume is `root_volume_gib` GiB.

    Karpenter subtracts kubeReserved ephemeral-storage (1Gi) and the evictionHard `nodefs.available` threshold (10% of
    the volume) from the root volume: `0.9 * root - 1`. The reference's 17Gi for every type is this for the default
    20 GiB (`20 - 1 - 2`). Pass the EC2NodeClass's root `blockDeviceMappings` `ebs.volumeSize` (in GiB). An
    `instanceStorePolicy: RAID0` node uses its local NVMe for ephemeral storage instead; this formula does not apply.
    """
    if isinstance(root_volume_gib, bool) or not isinstance(root_volume_gib, (int, float)) or root_volume_gib <= 0:
        raise ValueError(f"root_volume_gib: {root_volume_gib!r} is not valid: a positive number of GiB")
    return round(root_volume_gib * (1 - EVICTION_HARD_NODEFS_AVAILABLE) - KUBE_RESERVED_EPHEMERAL_GIB, 3)


COMPUTE_CAPABILITY: dict[str, tuple[int, int]] = {
    # NVIDIA's CUDA GPU compute capability table, keyed by Karpenter's instance-gpu-name.
    "t4": (7, 5), "v100": (7, 0), "a10g": (8, 6), "l4": (8, 9), "l40s": (8, 9), "a100": (8, 0),
    "h100": (9, 0), "h200": (9, 0), "b200": (10, 0), "b300": (10, 3),
}
"""CUDA compute capability (major, minor) of each GPU the catalogue's instance types carry."""


@dataclass(frozen=True)
class InstanceType:
    """One EC2 GPU instance type: its Karpenter labels, the allocatable resources Karpenter computes, its price."""

    name: str
    """Instance type, e.g. `g5.xlarge` (label node.kubernetes.io/instance-type)."""
    family: str
    """Family, e.g. `g5` (karpenter.k8s.aws/instance-family)."""
    vcpu: int
    """vCPUs (karpenter.k8s.aws/instance-cpu)."""
    memory_mib: int
    """Instance memory in MiB (karpenter.k8s.aws/instance-memory)."""
    gpus: int
    """Number of GPUs (karpenter.k8s.aws/instance-gpu-count; equals the allocatable `nvidia.com/gpu`)."""
    gpu_name: str
    """GPU model as Karpenter labels it, e.g. `a10g`, `t4`, `v100` (karpenter.k8s.aws/instance-gpu-name)."""
    gpu_memory_mib: int
    """Memory of ONE GPU in MiB (karpenter.k8s.aws/instance-gpu-memory)."""
    compute_capability: tuple[int, int]
    """CUDA compute capability of the GPU, e.g. (8, 6) for A10G (from `COMPUTE_CAPABILITY`)."""
    local_nvme_gb: int
    """Local NVMe instance storage in GB (karpenter.k8s.aws/instance-local-nvme); 0 if none."""
    allocatable_cpu_m: int
    """Allocatable CPU in millicores after kube-reserved and system overhead, e.g. 3920."""
    allocatable_memory_mib: int
    """Allocatable memory in MiB after kube-reserved, eviction threshold and VM overhead, e.g. 14162."""
    allocatable_ephemeral_gib: float
    """Allocatable ephemeral storage in GiB for the default 20 GiB root volume (17); for another root volume use
    `allocatable_ephemeral_gib(volume_size_gib)`."""
    allocatable_pods: int
    """Most pods Karpenter lets the node hold (ENI-limited max pods)."""
    on_demand_usd_per_hour: float
    """On-demand price in us-east-1, USD per hour (Karpenter's built-in price table)."""


# (name, vcpu, memory MiB, GPUs, GPU name, GPU MiB, local NVMe GB, allocatable cpu m, allocatable memory MiB,
#  allocatable pods, us-east-1 on-demand USD/h), from INSTANCE_FACTS_SOURCE; every size of each family listed there.
_INSTANCE_ROWS: tuple[tuple, ...] = (
    ("g4dn.xlarge", 4, 16384, 1, "t4", 16384, 125, 3920, 14481, 29, 0.526),
    ("g4dn.2xlarge", 8, 32768, 1, "t4", 16384, 225, 7910, 29636, 29, 0.752),
    ("g4dn.4xlarge", 16, 65536, 1, "t4", 16384, 225, 15890, 59946, 29, 1.204),
    ("g4dn.8xlarge", 32, 131072, 1, "t4", 16384, 900, 31850, 120248, 58, 2.176),
    ("g4dn.12xlarge", 48, 196608, 4, "t4", 16384, 900, 47810, 178933, 234, 3.912),
    ("g4dn.16xlarge", 64, 262144, 1, "t4", 16384, 900, 63770, 241490, 58, 4.352),
    ("g4dn.metal", 96, 393216, 8, "t4", 16384, 1800, 95690, 355262, 737, 7.824),
    ("g5.xlarge", 4, 16384, 1, "a10g", 22888, 250, 3920, 14162, 58, 1.006),
    ("g5.2xlarge", 8, 32768, 1, "a10g", 22888, 450, 7910, 29317, 58, 1.212),
    ("g5.4xlarge", 16, 65536, 1, "a10g", 22888, 600, 15890, 57691, 234, 1.624),
    ("g5.8xlarge", 32, 131072, 1, "a10g", 22888, 900, 31850, 118312, 234, 2.448),
    ("g5.12xlarge", 48, 196608, 4, "a10g", 22888, 3800, 47810, 173400, 737, 5.672),
    ("g5.16xlarge", 64, 262144, 1, "a10g", 22888, 1900, 63770, 239554, 234, 4.096),
    ("g5.24xlarge", 96, 393216, 4, "a10g", 22888, 3800, 95690, 355262, 737, 8.144),
    ("g5.48xlarge", 192, 786432, 8, "a10g", 22888, 7600, 191450, 723299, 345, 16.288),
    ("g6.xlarge", 4, 16384, 1, "l4", 22888, 250, 3920, 14162, 58, 0.8048),
    ("g6.2xlarge", 8, 32768, 1, "l4", 22888, 450, 7910, 29317, 58, 0.9776),
    ("g6.4xlarge", 16, 65536, 1, "l4", 22888, 600, 15890, 57691, 234, 1.3232),
    ("g6.8xlarge", 32, 131072, 1, "l4", 22888, 900, 31850, 118312, 234, 2.0144),
    ("g6.12xlarge", 48, 196608, 4, "l4", 22888, 3760, 47810, 178933, 234, 4.6016),
    ("g6.16xlarge", 64, 262144, 1, "l4", 22888, 1880, 63770, 234021, 737, 3.3968),
    ("g6.24xlarge", 96, 393216, 4, "l4", 22888, 3760, 95690, 355262, 737, 6.6752),
    ("g6.48xlarge", 192, 786432, 8, "l4", 22888, 7520, 191450, 718987, 737, 13.3504),
    ("g6e.xlarge", 4, 32768, 1, "l40s", 45776, 250, 3920, 29317, 58, 1.861),
    ("g6e.2xlarge", 8, 65536, 1, "l40s", 45776, 450, 7910, 59627, 58, 2.24208),
    ("g6e.4xlarge", 16, 131072, 1, "l40s", 45776, 600, 15890, 118312, 234, 3.00424),
    ("g6e.8xlarge", 32, 262144, 1, "l40s", 45776, 900, 31850, 239554, 234, 4.52856),
    ("g6e.12xlarge", 48, 393216, 4, "l40s", 45776, 3800, 47810, 360157, 292, 10.49264),
    ("g6e.16xlarge", 64, 524288, 1, "l40s", 45776, 1900, 63770, 476504, 737, 7.57719),
    ("g6e.24xlarge", 96, 786432, 4, "l40s", 45776, 3800, 95690, 721682, 492, 15.06559),
    ("g6e.48xlarge", 192, 1572864, 8, "l40s", 45776, 7600, 191450, 1449132, 492, 30.13118),
    ("gr6.4xlarge", 16, 131072, 1, "l4", 22888, 600, 15890, 118312, 234, 1.5392),
    ("gr6.8xlarge", 32, 262144, 1, "l4", 22888, 900, 31850, 239554, 234, 2.4464),
    ("p3dn.24xlarge", 96, 786432, 8, "v100", 32768, 1800, 95690, 718987, 737, 31.212),
    ("p4d.24xlarge", 96, 1179648, 8, "a100", 40960, 8000, 95690, 1082712, 737, 21.957642),
    ("p4de.24xlarge", 96, 1179648, 8, "a100", 81920, 8000, 95690, 1082712, 737, 27.44705),
    ("p5.4xlarge", 16, 262144, 1, "h100", 81920, 3800, 15890, 240830, 118, 6.88),
    ("p5.48xlarge", 192, 2097152, 8, "h100", 81920, 30400, 191450, 1938410, 100, 55.04),
    ("p5en.48xlarge", 192, 2097152, 8, "h200", 144384, 30400, 191450, 1937332, 198, 63.296),
    ("p6-b200.48xlarge", 192, 2097152, 8, "b200", 183359, 30400, 191450, 1937332, 198, 113.9328),
    ("p6-b300.48xlarge", 192, 4194304, 8, "b300", 275040, 30400, 191450, 3877198, 198, 142.416),
)

INSTANCE_TYPES: dict[str, InstanceType] = {
    row[0]: InstanceType(
        name=row[0], family=row[0].split(".", 1)[0], vcpu=row[1], memory_mib=row[2], gpus=row[3], gpu_name=row[4],
        gpu_memory_mib=row[5], compute_capability=COMPUTE_CAPABILITY[row[4]], local_nvme_gb=row[6],
        allocatable_cpu_m=row[7], allocatable_memory_mib=row[8],
        allocatable_ephemeral_gib=allocatable_ephemeral_gib(DEFAULT_ROOT_VOLUME_GIB), allocatable_pods=row[9],
        on_demand_usd_per_hour=row[10])
    for row in _INSTANCE_ROWS
}
"""The NVIDIA x86-64 GPU instance types the stack may launch, keyed by name (see `EXCLUDED_INSTANCE_FAMILIES`)."""

INSTANCE_FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(t.family for t in INSTANCE_TYPES.values()))
"""The families of `INSTANCE_TYPES`, in table order."""

EXCLUDED_INSTANCE_FAMILIES: dict[str, str] = {
    "g4ad": "AMD Radeon GPUs, not NVIDIA (no CUDA)",
    "g5g": "Graviton (arm64): the GPU NodePool and the worker image are amd64 only",
    "g6f": "fractional L4 GPU (instance-gpu-count 0, no nvidia.com/gpu advertised): a GPU pod never schedules",
    "gr6f": "fractional L4 GPU (instance-gpu-count 0, no nvidia.com/gpu advertised): a GPU pod never schedules",
    "g7e": "RTX PRO 6000 Blackwell needs NVIDIA driver >= 595; the EKS AL2023 NVIDIA AMI ships 580",
    "p5e": "not sold on demand in us-east-1 (absent from Karpenter's price table)",
    "p3": "not in Karpenter v1.14.1's instance-type reference (only p3dn.24xlarge of the V100 types is)",
}
"""GPU families the catalogue leaves out on purpose, with the reason (error messages quote it)."""


def instance_type(name: str) -> InstanceType | None:
    """The catalogue's facts for instance type `name`, or None when the stack does not know (or allow) it."""
    return INSTANCE_TYPES.get(name) if isinstance(name, str) else None


def instance_type_expectation(name: object) -> str | None:
    """What is allowed instead of `name`, for a one-line ConfigError (with the reason when its family is excluded on
    purpose), or None when `name` is in `INSTANCE_TYPES`."""
    if instance_type(name) is not None:  # type: ignore[arg-type]
        return None
    family = name.split(".", 1)[0] if isinstance(name, str) else ""
    why = EXCLUDED_INSTANCE_FAMILIES.get(family)
    if why:
        return f"refused: {why}"
    return (f"an NVIDIA x86-64 GPU instance type in the catalogue (families {', '.join(INSTANCE_FAMILIES)}), "
            "e.g. g5.xlarge")


def instance_type_problem(name: object) -> str | None:
    """Why the GPU NodePool must not launch `name` (one line), or None when it is in `INSTANCE_TYPES`."""
    expectation = instance_type_expectation(name)
    return None if expectation is None else f"instance type {name!r}: {expectation}"


# --------------------------------------------------------------------------------------------------------------------
# GPU software facts: what the worker's torch build needs, what the node AMI provides.
# --------------------------------------------------------------------------------------------------------------------

TORCH_CUDA = {"torch": "2.13.0", "cuda": "13.0", "min_compute_capability": (7, 5), "min_driver": "580",
              "sources": "pytorch/pytorch #172352, #190385 (CUDA 13 builds: Turing sm_75 and newer, driver >= 580)"}
"""The worker image's torch build and what it needs of the GPU (compute capability) and of the node's driver."""

AL2023_NVIDIA_DRIVER = "580"
"""NVIDIA driver branch of the EKS-optimised AL2023 NVIDIA AMI that `al2023@latest` resolves to.

Source: awslabs/amazon-eks-ami #2470 (AL2023 NVIDIA 580 upgrade schedule; 1.34 first, backports #2484, #2509) and the
EKS user guide's note that the accelerated AMIs "currently include NVIDIA driver version 580" (quoted in NVIDIA/aicr
#2743). Not checked against a live SSM parameter offline: `verify`'s gpu-job reports the driver a node really runs."""


def join(values: Iterable[str]) -> str:
    """`a, b, c` for messages."""
    return ", ".join(values)


# --------------------------------------------------------------------------------------------------------------------
# Burst timing facts: default stage durations of the burst planner (components/planner.py), each with its source.
# --------------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StageDuration:
    """One stage of a GPU pod's path from a queued message to a result, with its default duration and its source."""

    stage: str
    """Stage name, as `plan-burst --set STAGE=SECONDS` spells it."""
    seconds: float
    """Default duration in seconds (a published measurement, or a stated default of the tool)."""
    source: str
    """Where the figure comes from."""


_DATA_ON_EKS = ("data-on-eks, Ray batch inference on g6e.2xlarge (2026), from Kubernetes event timestamps "
                "(~6 min 33 s pod created to serving on a fresh node, ~2 min 30 s on a warm node with the image cached)")

# The image pull model: how long a node takes to pull the worker image, from its layer sizes.
PULL_ONE_STREAM_BYTES_PER_S = 11.6e9 / 121
"""Bytes per second of a pull that fetches and unpacks one layer stream at a time (containerd's default): data-on-eks'
11.6 GB image in 2 min 01 s, ~96 MB/s. Also the rate of ONE layer under a parallel pull (a layer decompresses on one
core), so a parallel pull can never beat its largest layer at this rate."""

PULL_PARALLEL_BYTES_PER_S = 9.35e9 / 40
"""Bytes per second of a SOCI parallel pull (nodeadm `FastImagePull`) across layers: karpenter-blueprints' 9.35 GB image
in 40 s on AL2023 (from 2 min 11 s without), ~234 MB/s, on storage fast enough for it (see
`FAST_IMAGE_PULL_MIN_EBS_MIBPS`). The same source saw no gain for an image whose largest layer was 4.7 GB."""

FAST_IMAGE_PULL_MIN_EBS_MIBPS = 600
"""Root-volume throughput below which nodeadm's docs warn FastImagePull may make pulls SLOWER (awslabs/amazon-eks-ami
nodeadm/doc/examples.md, "Enabling fast image pull": "at least 600MiB/s")."""

FAST_IMAGE_PULL_MIN_VCPU = 4
"""nodeadm ignores FastImagePull on instances with fewer vCPUs (nodeadm/internal/containerd/config.go
UseSOCISnapshotter: >= 4000 millicores)."""

FAST_IMAGE_PULL_MIN_MEMORY_GIB = 7
"""... or with less memory than this, in GiB (same function: >= 7 GiB online)."""

GP3_BASELINE_THROUGHPUT_MIBPS = 125
"""gp3's baseline throughput, MiB/s: the GPU EC2NodeClass's root volume default (`ec2_nodeclass_manifest`)."""

NODECONFIG_FEATURE_GATES = ("InstanceIdNodeName", "FastImagePull")
"""The feature gates nodeadm's NodeConfig accepts (awslabs/amazon-eks-ami nodeadm/api/v1alpha1/nodeconfig_types.go,
kubebuilder enum of `Feature`); a NodeConfig with another gate is refused by nodeadm at boot."""


def worker_image_bytes() -> tuple[int, ...]:
    """Expected compressed size of every layer of the worker image, in bytes: base, Python layers, the worker's code."""
    return (WORKER_BASE_IMAGE_BYTES, *WORKER_IMAGE_LAYER_BYTES.values(), WORKER_CODE_LAYER_BYTES)


def image_pull_seconds(layer_bytes: Iterable[int], *, parallel: bool) -> float:
    """Seconds to pull an image of these compressed layers onto a node that does not have it.

    One stream: total / `PULL_ONE_STREAM_BYTES_PER_S`. Parallel (FastImagePull on fast enough storage):
    max(total / `PULL_PARALLEL_BYTES_PER_S`, largest layer / `PULL_ONE_STREAM_BYTES_PER_S`): the layers overlap, but
    each still unpacks on one core, so the largest sets the floor.
    """
    sizes = [int(b) for b in layer_bytes]
    if not sizes or any(b < 0 for b in sizes):
        raise ValueError(f"layer_bytes: {sizes!r} is not valid: one or more sizes >= 0")
    total = sum(sizes)
    if not parallel:
        return total / PULL_ONE_STREAM_BYTES_PER_S
    return max(total / PULL_PARALLEL_BYTES_PER_S, max(sizes) / PULL_ONE_STREAM_BYTES_PER_S)


STAGE_DURATIONS: dict[str, StageDuration] = {s.stage: s for s in (
    StageDuration("poll", 30, "KEDA ScaledJob spec.pollingInterval default (30 s); a message waits up to one interval "
                              "(the planner takes the worst case); the workload's configured value wins"),
    StageDuration("nodeclaim", 13, f"pod created to NodeClaim created (Karpenter batch window included): {_DATA_ON_EKS}"),
    StageDuration("ec2_ready", 40, f"EC2 launch to node Ready: {_DATA_ON_EKS}"),
    StageDuration("gpu_registered", 36, f"node Ready to nvidia.com/gpu allocatable (device plugin): {_DATA_ON_EKS}"),
    StageDuration("image_pull", round(image_pull_seconds(worker_image_bytes(), parallel=True)),
                  "the worker image (WORKER_IMAGE_LAYER_BYTES: ~2.86 GB compressed, largest layer 0.53 GB) pulled in "
                  "parallel (FastImagePull on the NVMe RAID0, the stack's default) at PULL_PARALLEL_BYTES_PER_S "
                  "(karpenter-blueprints, 9.35 GB in 40 s); without FastImagePull the planner uses one stream at "
                  f"PULL_ONE_STREAM_BYTES_PER_S (11.6 GB in 2 min 01 s: {_DATA_ON_EKS})"),
)}
"""Default durations of the node and image stages of a cold start (the model load is the workload's `modelLoadS`,
inference its `secondsPerItem`); `plan-burst --set STAGE=SECONDS` overrides any of them."""

FRESH_NODE_POD_TO_SERVING_S = 393
"""Published total, pod created to serving on a fresh node (6 min 33 s; data-on-eks, see `STAGE_DURATIONS`): the node
and image stages (210 s) plus that workload's container start and model load."""

WARM_NODE_POD_TO_SERVING_S = 150
"""Published total, pod created to serving on a warm node with the image cached (~2 min 30 s; data-on-eks)."""

SPOT_PRICE_FRACTION = 0.4
"""ASSUMPTION, not a measurement: spot GPU capacity priced at 40% of on-demand (a 60% discount; AWS advertises "up to
90%" and spot prices move hourly). The planner prices ScaledJob nodes with it when the NodePool allows spot; the
persistent consumer always runs on on-demand."""

BILLING_MINIMUM_S = 60
"""EC2 per-second billing (Linux) with a 60 s minimum per instance launch."""


# --------------------------------------------------------------------------------------------------------------------
# Warm GPU floor: the placeholder pod's image (components/warm_floor.py).
# --------------------------------------------------------------------------------------------------------------------

PAUSE_IMAGE = ("registry.k8s.io/pause:3.10"
               "@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a")
"""The warm-floor placeholder's image: Kubernetes' pause 3.10 (multi-arch index digest), runs as uid 65535 and does
nothing, so the GPU it holds costs only the node."""
