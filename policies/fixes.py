"""How a finding says its fix for the kind of stack that declared the resource: the platform's config key
(`gpuburst:...`), a component's argument (`WorkerPodSettings.annotations`), or the manifest's own field.

A fix that names a key the stack never reads is no fix: a component stack (a workload stack attached to a cluster
another stack runs) reads no `gpuburst:` config, and a hand-written manifest no component argument. The kind is read
from the resource's URN, whose type part is the chain of its parents' types
(`gpuburst:index:GpuBurstPlatform$gpuburst:index:GpuScaledJob$kubernetes:keda.sh/v1alpha1:ScaledJob`), so a stack that
holds both a platform and a workload of its own gets each resource's fix right.
"""
from __future__ import annotations

from .facts import PLATFORM

PLATFORM_KIND = "platform"
"""Declared by a GpuBurstPlatform: fixed through the stack's `gpuburst:` config."""
COMPONENT_KIND = "component"
"""Declared by a gpuburst component outside a platform: fixed through the component's arguments."""
MANIFEST_KIND = "manifest"
"""Declared by neither (a hand-written resource, or a plan without URNs): fixed in the manifest itself."""

COMPONENT_PREFIX = "gpuburst:index:"
"""The type prefix of every gpuburst component (`gpuburst:index:<Name>`)."""


def parent_types(urn: str | None) -> list[str]:
    """The types of the resource's parents and its own, outermost first, from its URN (empty when it has none)."""
    parts = urn.split("::") if isinstance(urn, str) else []
    return parts[2].split("$") if len(parts) >= 4 else []


def stack_kind(urn: str | None) -> str:
    """PLATFORM_KIND, COMPONENT_KIND or MANIFEST_KIND for the resource at `urn` (see the module docstring)."""
    types = parent_types(urn)
    if PLATFORM in types:
        return PLATFORM_KIND
    if any(t.startswith(COMPONENT_PREFIX) for t in types):
        return COMPONENT_KIND
    return MANIFEST_KIND


def fix_for(urn: str | None, *, platform: str, component: str, manifest: str | None = None) -> str:
    """The fix that applies to the stack that declared `urn`: `platform` (a `gpuburst:` config key), `component` (a
    component argument), or `manifest` (the manifest's field; default: `component`'s)."""
    kind = stack_kind(urn)
    if kind == PLATFORM_KIND:
        return platform
    if kind == COMPONENT_KIND:
        return component
    return manifest if manifest is not None else component
