"""The gpuburst CrossGuard policy pack: the list of rules and the function that serves them to the engine."""
from __future__ import annotations

from pulumi_policy import EnforcementLevel, Policy, PolicyPack

from . import (
    ami,
    boundary,
    buckets,
    gpu_nodepool,
    hardware,
    images,
    keda_provider,
    keys,
    model_cache,
    namespaces,
    network,
    nodepool_diversity,
    patterns,
    plan_complete,
    pod_identity,
    queues,
    rehearsal,
    schedulability,
    teams,
    trust,
    verify_admission,
    versions,
    wiring,
    worker_contract,
    workloads,
)

PACK_NAME = "gpuburst-guardrails"
"""The pack's name as the engine reports it (letters, digits, `-`, `_`, `.`)."""

RULE_MODULES = (nodepool_diversity, gpu_nodepool, keda_provider, ami, versions, queues, workloads, wiring,
                schedulability, hardware, network, namespaces, images, trust, buckets, keys, verify_admission,
                worker_contract, pod_identity, patterns, teams, model_cache, plan_complete, rehearsal, boundary)
"""One module per rule area; each exports `POLICIES`."""


def all_policies() -> list[Policy]:
    """Every policy of the pack, in a stable order (rule module order, then the module's own order)."""
    policies = [p for module in RULE_MODULES for p in module.POLICIES]
    names = [p.name for p in policies]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise RuntimeError(f"policy names must be unique; duplicated: {', '.join(duplicates)}")
    return policies


def serve() -> None:
    """Build the PolicyPack. Its constructor serves the analyzer on 127.0.0.1:0, writes the port as the only line
    on stdout, and blocks until the process is stopped: call it only as the pack's entry point."""
    PolicyPack(
        name=PACK_NAME,
        policies=all_policies(),
        # Every policy sets its own level; this default only covers a policy that forgot to.
        enforcement_level=EnforcementLevel.MANDATORY,
        description="gpuburst guardrails: GPU NodePools, KEDA, AMIs, chart and Kubernetes versions, SQS queues, "
                    "GPU workloads and the clinical-data boundary, judged offline over the analyzer protocol.",
    )
