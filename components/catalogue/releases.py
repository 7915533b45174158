"""Release facts and the rules on versions: broken Karpenter, KEDA and device-plugin releases, the KEDA provider
history, the Kubernetes ranges each line supports, and the whole-combination checks shared by config, the pack and
`verify`."""
from __future__ import annotations

import re
from collections.abc import Iterable

from .pins import CHARTS, KARPENTER_CHARTS, KARPENTER_VERSION, KEDA_VERSION, KUBERNETES_VERSION, WORKER_BASE_IMAGE

__all__ = [
    "join",
    "parse_version",
    "minor",
    "KARPENTER_MINIMUM",
    "KARPENTER_BROKEN_RELEASES",
    "KARPENTER_KUBERNETES",
    "KEDA_MINIMUM",
    "KEDA_PROVIDER_HISTORY",
    "KEDA_DEPRECATED_PROVIDERS",
    "KEDA_DEFAULT_POLLING_INTERVAL_S",
    "KEDA_SQS_DEFAULT_QUEUE_LENGTH",
    "KEDA_IDENTITY_OWNERS",
    "KEDA_SCALING_STRATEGIES",
    "KEDA_ROLLOUT_STRATEGIES",
    "KEDA_REJECTED_SCALING_STRATEGIES",
    "KEDA_KUBERNETES",
    "keda_providers",
    "keda_provider_problem",
    "keda_scaling_strategy_problem",
    "DEVICE_PLUGIN_MINIMUM",
    "DEVICE_PLUGIN_BROKEN_RELEASES",
    "DEVICE_PLUGIN_CDI_FEATURE_FLAGS",
    "device_plugin_version_problem",
    "karpenter_kubernetes_range",
    "keda_kubernetes_range",
    "karpenter_version_problem",
    "keda_version_problem",
    "kubernetes_problems",
    "combination_problems",
    "chart_version_problem",
    "describe_pins",
    "all_problems_of_pins",
]

def join(values: Iterable[str]) -> str:
    """`a, b, c` for messages."""
    return ", ".join(values)

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
    "1.0.0": "Karpenter 1.0.0-1.0.2 swapped the AL2023 NVIDIA and Neuron AMI variants: GPU nodes boot on the Neuron "
             "AMI, nvidia.com/gpu is never allocatable and GPU pods stay Pending while every status says READY=True "
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

KEDA_DEFAULT_POLLING_INTERVAL_S = 30
"""KEDA's default ScaledJob/ScaledObject `spec.pollingInterval`, seconds, when a manifest sets none (KEDA docs)."""

KEDA_SQS_DEFAULT_QUEUE_LENGTH = 5
"""The `aws-sqs-queue` trigger's `queueLength` when its metadata sets none: messages per Job (or per replica) in
KEDA's arithmetic (KEDA docs, AWS SQS Queue scaler: "queueLength ... Default: 5")."""

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


