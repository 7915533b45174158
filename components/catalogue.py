"""The version catalogue: every pinned version and every fact about versions, in one place.

Components, the policy pack and `verify` all read this module; nothing else restates a version. A fact here is a
table row with its reason, so an error message can quote it and a test can check it against the upstream CRDs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

# --------------------------------------------------------------------------------------------------------------------
# Pins: what the stack deploys unless a stack's config overrides it (and the override is checked against the facts).
# --------------------------------------------------------------------------------------------------------------------

KUBERNETES_VERSION = "1.34"
"""EKS control-plane version: inside both the pinned Karpenter's and the pinned KEDA's supported ranges."""

KARPENTER_VERSION = "1.14.1"
"""Karpenter controller and `karpenter-crd` chart version (always the same; see `KARPENTER_CHARTS`)."""

KEDA_VERSION = "2.20.2"
"""KEDA chart and operator version; TriggerAuthentication and ScaledJob schemas are judged against this one."""

NVIDIA_DEVICE_PLUGIN_VERSION = "0.18.0"
"""NVIDIA k8s-device-plugin chart version (advertises `nvidia.com/gpu` on GPU nodes)."""

WORKER_BASE_IMAGE = "nvidia/cuda:12.8.1-runtime-ubuntu24.04"
"""Base image of worker/Dockerfile (passed as the BASE_IMAGE build arg): the CUDA runtime the CUDA torch build needs."""

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
    return None


def describe_pins() -> dict[str, str]:
    """The pins as a flat mapping, for summaries and `verify` output."""
    pins = {"kubernetes": KUBERNETES_VERSION, "worker-base-image": WORKER_BASE_IMAGE}
    pins.update({name: pin.version for name, pin in CHARTS.items()})
    return pins


def all_problems_of_pins() -> list[str]:
    """The catalogue checked against itself: the pins must pass the catalogue's own rules."""
    return combination_problems(kubernetes=KUBERNETES_VERSION, karpenter=CHARTS["karpenter"].version,
                                karpenter_crd=CHARTS["karpenter-crd"].version, keda=KEDA_VERSION)


def join(values: Iterable[str]) -> str:
    """`a, b, c` for messages."""
    return ", ".join(values)
