"""Rules `keda-pod-identity-provider` and `keda-sqs-identity-owner`: KEDA authenticates to AWS the supported way.

Why: `podIdentity.provider: aws-eks` (IRSA through the KEDA operator) is deprecated and disappears in KEDA v3, and a
provider the pinned KEDA's CRD does not list fails at apply time, after the rest of the stack has changed. The
accepted providers per KEDA version and the deprecations are read from `components.catalogue`. Advisory: under
provider `aws`, an `identityOwner` written in an `aws-sqs-queue` trigger's metadata is ignored (the
TriggerAuthentication's `podIdentity` decides), so it only misleads the reader.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

from pulumi_policy import (EnforcementLevel, ResourceValidationArgs, ResourceValidationPolicy, StackValidationArgs,
                           StackValidationPolicy)

from components import catalogue

from .resources import (CLUSTER_TRIGGER_AUTHENTICATION, SCALED_JOB, SCALED_OBJECT, SQS_TRIGGER_TYPE,
                        TRIGGER_AUTHENTICATION, dig, fmt, is_kind, triggers)
from .unknowns import UNKNOWN, guard, guard_stack, plain, unknown_message

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


def _check(args: ResourceValidationArgs) -> Iterable[str]:
    if not (is_kind(args.resource_type, TRIGGER_AUTHENTICATION)
            or is_kind(args.resource_type, CLUSTER_TRIGGER_AUTHENTICATION)):
        return []
    return problems(plain(args.props))


def _auth_index(resources: list[tuple[str, str, Any]]) -> dict[tuple[str, str], list[tuple[Optional[str], Any]]]:
    """(kind, metadata.name) -> [(namespace, provider)] for every (Cluster)TriggerAuthentication in the stack."""
    index: dict[tuple[str, str], list[tuple[Optional[str], Any]]] = {}
    for rtype, _urn, props in resources:
        for kind in (TRIGGER_AUTHENTICATION, CLUSTER_TRIGGER_AUTHENTICATION):
            if is_kind(rtype, kind):
                name = dig(props, "metadata", "name").value
                if isinstance(name, str):
                    ns = dig(props, "metadata", "namespace").value
                    provider = dig(props, "spec", "podIdentity", "provider").value
                    index.setdefault((kind[1], name), []).append((ns if isinstance(ns, str) else None, provider))
    return index


def identity_owner_findings(resources: list[tuple[str, str, Any]]) -> list[tuple[str, str]]:
    """(urn, message) for every aws-sqs-queue trigger whose metadata.identityOwner is ignored under provider aws.

    `resources` is [(type, urn, plain props)]. The trigger's authenticationRef is resolved against the stack's
    TriggerAuthentications by kind, name (and namespace when both are known); when it cannot be resolved the advice
    is still given, since provider `aws` is the only provider this stack accepts.
    """
    index = _auth_index(resources)
    out: list[tuple[str, str]] = []
    for rtype, urn, props in resources:
        if not (is_kind(rtype, SCALED_JOB) or is_kind(rtype, SCALED_OBJECT)):
            continue
        namespace = dig(props, "metadata", "namespace").value
        found, _unknown = triggers(props)
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
            out.append((urn, f"{owner.path} = {fmt(owner.value)} is ignored: {where} the TriggerAuthentication's "
                             f"podIdentity decides whose identity is used; remove it from the trigger metadata and "
                             f"set podIdentity.roleArn (or identityOwner "
                             f"{' | '.join(repr(o) for o in catalogue.KEDA_IDENTITY_OWNERS)}) on the "
                             f"TriggerAuthentication"))
    return out


def _check_identity_owner(args: StackValidationArgs) -> Iterable[tuple[Optional[str], str]]:
    return identity_owner_findings([(r.resource_type, r.urn, plain(r.props)) for r in args.resources])


POLICY = ResourceValidationPolicy(
    name=NAME,
    description="A KEDA (Cluster)TriggerAuthentication must use a podIdentity.provider that the pinned KEDA accepts "
                "and that is not deprecated (never aws-eks).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=guard(_check),
)

IDENTITY_OWNER_POLICY = StackValidationPolicy(
    name=IDENTITY_OWNER_NAME,
    description="identityOwner in an aws-sqs-queue trigger's metadata is ignored under podIdentity provider 'aws'.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=guard_stack(_check_identity_owner),
)

POLICIES = [POLICY, IDENTITY_OWNER_POLICY]
