"""The EKS support calendar (when each Kubernetes minor leaves standard and extended support, and what that costs)
and the one support rule config, the pack and `verify` apply."""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date, datetime, timezone

from .pins import KUBERNETES_VERSION
from .releases import join, minor

# --------------------------------------------------------------------------------------------------------------------
# EKS support calendar: when each Kubernetes minor leaves standard and extended support, and what that costs.
# --------------------------------------------------------------------------------------------------------------------


__all__ = [
    "EksSupport",
    "EKS_SUPPORT",
    "EKS_STANDARD_USD_PER_CLUSTER_HOUR",
    "EKS_EXTENDED_USD_PER_CLUSTER_HOUR",
    "HOURS_PER_MONTH",
    "SUPPORT_TYPES",
    "DEFAULT_SUPPORT_TYPE",
    "SUPPORT_WARNING_DAYS",
    "TODAY_ENV",
    "ADVISORY",
    "MANDATORY",
    "SupportFinding",
    "today",
    "kubernetes_support_finding",
]

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


