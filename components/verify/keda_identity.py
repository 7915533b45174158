"""The keda check's identityOwner rule on the live objects: a ScaledJob trigger's `identityOwner` against the
identity its TriggerAuthentication really makes the running KEDA use."""
from __future__ import annotations

from typing import Any

from .. import catalogue
from .model import name_of, ns_name

# The pack's advisory (policies/keda_provider.py identity_owner_findings) says the same at preview; verify may not
# import policies/ (docs/CONVENTIONS.md), so the rule is restated here from the catalogue's facts (KEDA_IDENTITY_OWNERS,
# the provider history). Under podIdentity provider `aws` (KEDA >= 2.13) KEDA ignores the trigger metadata
# identityOwner: the TriggerAuthentication's podIdentity decides (roleArn, else its own identityOwner, default `keda`).
# A trigger naming another owner than the one in force is a wrong belief about whose IAM identity reads the queue: it
# fails, naming both objects.

LEGACY_OWNERS = {"operator": "keda", "pod": "workload"}
"""The aws-sqs-queue trigger's pre-2.13 identityOwner values, as the podIdentity owner they meant."""

DEFAULT_OWNER = catalogue.KEDA_IDENTITY_OWNERS[0]
"""podIdentity.identityOwner when a provider-`aws` TriggerAuthentication sets neither it nor roleArn (`keda`)."""


def identity_in_force(ta: dict[str, Any]) -> str | None:
    """Whose identity a provider-`aws` TriggerAuthentication makes KEDA use: `role <arn>`, `keda` or `workload`;
    None for any other provider (the trigger's identityOwner may still mean something there)."""
    pod_identity = (ta.get("spec") or {}).get("podIdentity") or {}
    if pod_identity.get("provider") != "aws":
        return None
    if pod_identity.get("roleArn"):
        return f"role {pod_identity['roleArn']}"
    return str(pod_identity.get("identityOwner") or DEFAULT_OWNER)


def identity_owner_problems(scaled_jobs: list[dict[str, Any]], tas: list[dict[str, Any]], ctas: list[dict[str, Any]],
                            keda_version: str) -> tuple[dict[str, list[str]], list[str]]:
    """(problems per ScaledJob name, evidence): each aws-sqs-queue trigger with metadata.identityOwner, judged
    against the (Cluster)TriggerAuthentication its authenticationRef names, when KEDA `keda_version` has provider
    `aws` (before it, the trigger's identityOwner is what KEDA reads)."""
    problems: dict[str, list[str]] = {}
    evidence: list[str] = []
    if "aws" not in catalogue.keda_providers(keda_version):
        return problems, evidence
    by_ref = {("TriggerAuthentication", ns_name(t)): t for t in tas}
    by_ref.update({("ClusterTriggerAuthentication", name_of(t)): t for t in ctas})
    for sj in scaled_jobs:
        who = f"ScaledJob {ns_name(sj)}"
        ns = (sj.get("metadata") or {}).get("namespace") or ""
        for i, trig in enumerate((sj.get("spec") or {}).get("triggers") or []):
            owner = ((trig.get("metadata") or {}) if trig.get("type") == "aws-sqs-queue" else {}).get("identityOwner")
            if owner is None:
                continue
            ref = trig.get("authenticationRef") or {}
            kind = ref.get("kind") or "TriggerAuthentication"
            key = ref.get("name") if kind == "ClusterTriggerAuthentication" else f"{ns}/{ref.get('name')}"
            ta = by_ref.get((kind, key))
            if ta is None:
                continue  # a missing authenticationRef is already a problem of scaledjob_problems
            in_force = identity_in_force(ta)
            if in_force is None:
                evidence.append(f"{who}: trigger {i} identityOwner {owner!r} with {kind} {key} (provider "
                                f"{((ta.get('spec') or {}).get('podIdentity') or {}).get('provider')!r}): not judged")
                continue
            meant = LEGACY_OWNERS.get(str(owner), str(owner))
            line = (f"{who}: trigger {i} metadata.identityOwner {owner!r} is ignored by KEDA {keda_version}: {kind} "
                    f"{key} (provider 'aws') decides, and it uses {in_force}")
            if meant != in_force:
                problems.setdefault(name_of(sj), []).append(
                    f"{line} — not {meant!r}; remove identityOwner from the trigger and set podIdentity.roleArn (or "
                    f"identityOwner {' | '.join(repr(o) for o in catalogue.KEDA_IDENTITY_OWNERS)}) on the "
                    f"TriggerAuthentication")
            else:
                evidence.append(f"{line} (the same; the trigger key is deprecated since KEDA 2.13: remove it)")
    return problems, evidence
