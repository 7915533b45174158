"""Rules `keda-pod-identity-provider` and `keda-sqs-identity-owner`: KEDA authenticates to AWS the supported way.

Why: `podIdentity.provider: aws-eks` (IRSA through the KEDA operator) is deprecated and disappears in KEDA v3, and a
provider the pinned KEDA's CRD does not list fails at apply time, after the rest of the stack has changed. The
accepted providers per KEDA version and the deprecations are read from `components.catalogue`. Advisory: under
provider `aws`, an `identityOwner` written in an `aws-sqs-queue` trigger's metadata is ignored (the
TriggerAuthentication's `podIdentity` decides), so it only misleads the reader.

The providers are those of the KEDA the stack runs: its keda chart's version, the pin when it installs none, and in a
partial plan (no GpuBurstPlatform) the version of the KEDA another stack runs (ExistingKeda `version`, policy config
`kedaVersion`), or the pin with a line from `outside-this-stack` saying so.
"""
from __future__ import annotations

from typing import Any

from pulumi_policy import EnforcementLevel

from ._components import catalogue
from .declare import plan_policy, scoped_policy
from .facts import WHOLE, Scope
from .outside import Finding, Outside
from .plan import Res
from .resources import (
    CLUSTER_TRIGGER_AUTHENTICATION,
    SCALED_JOB,
    SCALED_OBJECT,
    SQS_TRIGGER_TYPE,
    TRIGGER_AUTHENTICATION,
    dig,
    fmt,
    is_kind,
    triggers,
)
from .unknowns import UNKNOWN, unknown_message
from .versions import KEDA, running_versions

NAME = "keda-pod-identity-provider"
IDENTITY_OWNER_NAME = "keda-sqs-identity-owner"
RECOMMENDED = ("use podIdentity.provider 'aws' with roleArn (EKS Pod Identity), or identityOwner "
               + " | ".join(repr(o) for o in catalogue.KEDA_IDENTITY_OWNERS))


def problems(props: Any, keda_version: str = catalogue.KEDA_VERSION) -> list[str]:
    """Why this TriggerAuthentication / ClusterTriggerAuthentication (plain props) has a bad provider."""
    pod_identity = dig(props, "spec", "podIdentity")
    if pod_identity.unknown:
        return [unknown_message(pod_identity.path, "which identity provider KEDA uses")]
    if pod_identity.missing:
        return []
    if not isinstance(pod_identity.value, dict):
        return [f"{pod_identity.path} is {fmt(pod_identity.value)}: it must be a mapping with a provider; "
                f"{RECOMMENDED}"]
    provider = dig(pod_identity.value, "provider", base=pod_identity.path)
    if provider.unknown:
        return [unknown_message(provider.path, "which identity provider KEDA uses")]
    if not isinstance(provider.value, str):
        got = "is missing (KEDA's CRD requires it)" if provider.missing else f"is {fmt(provider.value)}"
        return [f"{provider.path} {got}; {RECOMMENDED}"]
    problem = catalogue.keda_provider_problem(provider.value, keda_version)
    if problem is None:
        return []
    advice = "" if "; use " in problem else f"; {RECOMMENDED}"  # the catalogue's reason may already say what to use
    return [f"{provider.path} = {fmt(provider.value)}: {problem}{advice}"]


def provider_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every (Cluster)TriggerAuthentication whose provider the KEDA the stack runs rejects or
    deprecates (see the module docstring for which KEDA)."""
    judged = [r for r in resources
              if is_kind(r.type, TRIGGER_AUTHENTICATION) or is_kind(r.type, CLUSTER_TRIGGER_AUTHENTICATION)]
    if not judged:
        return []
    versions, _unknown, out = running_versions(resources, KEDA, scope, judged[0].urn)
    # An unknown or refused chart version is chart-versions' finding; the providers are then the pin's.
    versions = versions or [catalogue.KEDA_VERSION]
    for r in judged:
        messages = [m for version in versions for m in problems(r.props, version)]
        out += [(r.urn, m) for i, m in enumerate(messages) if m not in messages[:i]]
    return out


def _auth_index(resources: list[Res]) -> dict[tuple[str, str], list[tuple[str | None, Any]]]:
    """(kind, metadata.name) -> [(namespace, provider)] for every (Cluster)TriggerAuthentication in the stack."""
    index: dict[tuple[str, str], list[tuple[str | None, Any]]] = {}
    for r in resources:
        for kind in (TRIGGER_AUTHENTICATION, CLUSTER_TRIGGER_AUTHENTICATION):
            if is_kind(r.type, kind):
                name = dig(r.props, "metadata", "name").value
                if isinstance(name, str):
                    ns = dig(r.props, "metadata", "namespace").value
                    provider = dig(r.props, "spec", "podIdentity", "provider").value
                    index.setdefault((kind[1], name), []).append((ns if isinstance(ns, str) else None, provider))
    return index


def identity_owner_findings(resources: list[Res]) -> list[tuple[str, str]]:
    """(urn, message) for every aws-sqs-queue trigger whose metadata.identityOwner is ignored under provider aws.

    The trigger's authenticationRef is resolved against the stack's TriggerAuthentications by kind, name (and
    namespace when both are known); when it cannot be resolved the advice is still given, since provider `aws` is the
    only provider this stack accepts.
    """
    index = _auth_index(resources)
    out: list[tuple[str, str]] = []
    for r in resources:
        if not (is_kind(r.type, SCALED_JOB) or is_kind(r.type, SCALED_OBJECT)):
            continue
        namespace = dig(r.props, "metadata", "namespace").value
        found, _unknown = triggers(r.props)
        for path, trig in found:
            if trig.get("type") != SQS_TRIGGER_TYPE:
                continue
            owner = dig(trig, "metadata", "identityOwner", base=path)
            if owner.missing:
                continue
            ref = trig.get("authenticationRef") if isinstance(trig.get("authenticationRef"), dict) else {}
            kind = ref.get("kind") if isinstance(ref.get("kind"), str) else TRIGGER_AUTHENTICATION[1]
            name = ref.get("name")
            providers = []
            if isinstance(name, str):
                for ns, provider in index.get((kind, name), []):
                    cluster_scoped = kind == CLUSTER_TRIGGER_AUTHENTICATION[1]
                    if cluster_scoped or ns is None or not isinstance(namespace, str) or ns == namespace:
                        providers.append(provider)
            if providers and all(p not in ("aws", UNKNOWN) for p in providers):
                continue  # resolved to another provider: identityOwner means something there
            where = (f"{kind} {name!r} uses provider 'aws'" if providers and "aws" in providers
                     else "under provider 'aws'")
            out.append((r.urn, f"{owner.path} = {fmt(owner.value)} is ignored: {where} the TriggerAuthentication's "
                               f"podIdentity decides whose identity is used; remove it from the trigger metadata and "
                               f"set podIdentity.roleArn (or identityOwner "
                               f"{' | '.join(repr(o) for o in catalogue.KEDA_IDENTITY_OWNERS)}) on the "
                               f"TriggerAuthentication"))
    return out


POLICY = scoped_policy(
    NAME, "A KEDA (Cluster)TriggerAuthentication must use a podIdentity.provider that the stack's KEDA accepts and "
          "that is not deprecated (never aws-eks).", provider_findings, ("kedaVersion",))

IDENTITY_OWNER_POLICY = plan_policy(
    IDENTITY_OWNER_NAME, "identityOwner in an aws-sqs-queue trigger's metadata is ignored under podIdentity provider "
                         "'aws'.", identity_owner_findings, level=EnforcementLevel.ADVISORY)

POLICIES = [POLICY, IDENTITY_OWNER_POLICY]
