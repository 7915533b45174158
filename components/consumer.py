"""One long-lived GPU consumer (a Deployment of exactly one replica) for ordered or stateful queue work.

Why one replica and `Recreate`: the consumer loads the model once and keeps per-study state in memory while it
works through a FIFO queue whose message groups are studies. A second consumer would split a study's messages
between two processes (each with half the state), and a RollingUpdate would run the old and the new pod side by
side during every rollout, with two models on two GPUs. `Recreate` stops the old pod (it finishes or releases its
slide within the grace period) before the new one starts.

Why no PodDisruptionBudget by default: a budget that keeps one replica of one available blocks every node drain
(cluster upgrades hang), while the `karpenter.sh/do-not-disrupt` annotation already keeps Karpenter's voluntary
disruptions (consolidation, drift) away and a drain costs nothing: on SIGTERM the worker finishes or releases its
slide, and the message is processed again by the next pod. `disruption_budget=True` adds one for those who want
drains to wait.

Why on-demand nodes: the order of a NodePool's `karpenter.sh/capacity-type` values means nothing to Karpenter, which
prefers spot whenever spot is allowed. A spot reclaim gives two minutes' warning and takes the consumer's loaded model
and per-study state with it, and a pod that lives for days is the one most likely to meet one; so the consumer's pod
selects `karpenter.sh/capacity-type: on-demand` itself (Karpenter then launches an on-demand node of the same pool),
while the ScaledJobs' short, restartable Jobs keep the spot price. The pool must allow on-demand (the stack config
checks that).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .identity import WorkloadIdentity
from .nodepool import CAPACITY_TYPES
from .planning.chooser import choose_pattern
from .pod import (
    WorkerAccessArgs,
    WorkerPodSettings,
    declare_worker_identity,
    hardened_pod_template,
    worker_network_policy,
    workload_nodepool,
)
from .spec.names import CAPACITY_TYPE_LABEL, WORKER_LABEL
from .spec.validation import ConfigError, names_its_errors
from .spec.workload import WorkloadFacts, choice_annotations, fact_annotations

DEFAULT_CAPACITY_TYPE = "on-demand"
"""Capacity type of the node the consumer's pod selects (see the module docstring)."""

def consumer_labels(name: str) -> dict[str, str]:
    """Labels of the consumer's objects (the Deployment's selector uses them, so they never change)."""
    return {"app.kubernetes.io/name": WORKER_LABEL, "app.kubernetes.io/instance": name,
            "app.kubernetes.io/component": "consumer"}


LIVENESS_FILE = "/tmp/gpuburst-alive"
"""File the worker's main loop touches at every poll and slide progress report (on the /tmp emptyDir)."""
LIVENESS_ENV = "LIVENESS_FILE"
"""The env var naming it in the consumer's container (verify's admission rule lists the workloads' env names)."""


def liveness_probes(visibility_timeout_s: int) -> dict[str, Any]:
    """startupProbe + livenessProbe on the worker's liveness file.

    The heartbeat thread keeps extending a message's visibility even when the main thread hangs, so without this a
    hung consumer would hold its message up to SQS's 12 h limit. A main loop silent for a whole visibility timeout is
    hung: the kubelet restarts it, the heartbeat stops with it, and the message returns to the queue. The startup
    probe allows 10 minutes for the first touch (the model loads before the first poll).
    """
    age_check = (f'test $(( $(date +%s) - $(stat -c %Y {LIVENESS_FILE} 2>/dev/null || echo 0) )) '
                 f'-lt {int(visibility_timeout_s)}')
    return {
        "startupProbe": {"exec": {"command": ["test", "-f", LIVENESS_FILE]}, "periodSeconds": 10,
                         "failureThreshold": 60, "timeoutSeconds": 5},
        "livenessProbe": {"exec": {"command": ["sh", "-c", age_check]}, "periodSeconds": 60,
                          "failureThreshold": 3, "timeoutSeconds": 5},
    }


def consumer_deployment_manifest(*, name: str, namespace: str, queue_url: pulumi.Input[str],
                                 service_account_name: str, pod: WorkerPodSettings,
                                 annotations: dict[str, str] | None = None,
                                 capacity_type: str | None = DEFAULT_CAPACITY_TYPE,
                                 nodepool: str | None = None) -> dict[str, Any]:
    """The apps/v1 Deployment (plain dict; queue URL and image may be Outputs): one replica, Recreate.

    `annotations` (e.g. `chooser.fact_annotations(facts)`) go on the Deployment's metadata. `capacity_type` goes in
    the pod's nodeSelector as `karpenter.sh/capacity-type` (default on-demand); None leaves the choice to the
    NodePool (spot whenever it allows spot). `nodepool` ties the pod to that NodePool (`pod.worker_node_selector`)."""
    if capacity_type is not None and capacity_type not in CAPACITY_TYPES:
        raise ConfigError("GpuConsumerArgs.capacity_type", capacity_type,
                          f"one of {', '.join(CAPACITY_TYPES)}, or None to let the NodePool choose (spot first)")
    labels = consumer_labels(name)
    command = ["python", "-m", "worker", "consume", "--mode", "service", "--queue-url", queue_url]
    template = hardened_pod_template(pod, command=command, queue_url=queue_url,
                                     service_account_name=service_account_name, restart_policy="Always",
                                     labels=labels, nodepool=nodepool, namespace=namespace)
    if capacity_type is not None:
        template["spec"]["nodeSelector"] = {**template["spec"].get("nodeSelector", {}),
                                            CAPACITY_TYPE_LABEL: capacity_type}
    container = template["spec"]["containers"][0]
    container["env"] = [*container.get("env", []), {"name": LIVENESS_ENV, "value": LIVENESS_FILE}]
    container.update(liveness_probes(pod.visibility_timeout_s))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
                     **({"annotations": dict(annotations)} if annotations else {})},
        "spec": {
            # Exactly one: one model in GPU memory, one holder of per-study state (see the module docstring).
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": labels},
            "template": template,
        },
    }


def disruption_budget_manifest(name: str, namespace: str) -> dict[str, Any]:
    """A PodDisruptionBudget that makes voluntary evictions of the consumer wait (maxUnavailable 0)."""
    labels = consumer_labels(name)
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": labels}}}


@dataclass(kw_only=True)
class GpuConsumerArgs(WorkerAccessArgs):
    """Inputs of GpuConsumer."""

    disruption_budget: bool = False
    """Add a PodDisruptionBudget (maxUnavailable 0) so drains wait for the consumer. Default False (see module)."""
    facts: WorkloadFacts | None = None
    """The workload's declared facts, written as `gpuburst.io/ordered`/`stateful`/`items-independent` annotations for
    the policy pack, with the chooser's pick and estimate for them (`gpuburst.io/chooser-pattern`/`-reason`): the
    pack's `consumer-for-independent-work` advisory names a consumer the chooser would run as a ScaledJob. Default
    None (no annotations, nothing judged)."""
    capacity_type: str | None = DEFAULT_CAPACITY_TYPE
    """Karpenter capacity type the consumer's node must have (pod nodeSelector `karpenter.sh/capacity-type`): the
    NodePool must allow it. Default `on-demand` (see the module docstring); None lets the NodePool choose."""


@names_its_errors
class GpuConsumer(pulumi.ComponentResource):
    """Deployment (1 replica, Recreate) + its service account and least-privilege Pod Identity role."""

    deployment: k8s.apps.v1.Deployment
    role_arn: pulumi.Output[str]
    service_account_name: str
    identity: WorkloadIdentity

    def __init__(self, name: str, args: GpuConsumerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuburst:index:GpuConsumer", name, None, opts)
        self.service_account_name = f"{name}-worker"
        annotations = None
        if args.facts is not None:
            pick = choose_pattern(args.facts)  # what the chooser would run this work as (the consumer carries any)
            annotations = {**fact_annotations(args.facts), **choice_annotations(pick.pattern, pick.reason)}
        nodepool, pool_dependency = workload_nodepool(args.nodepool)
        manifest = consumer_deployment_manifest(name=name, namespace=args.namespace, queue_url=args.queue_url,
                                                service_account_name=self.service_account_name, pod=args.pod,
                                                annotations=annotations, capacity_type=args.capacity_type,
                                                nodepool=nodepool)
        child = pulumi.ResourceOptions(parent=self)
        service_account, self.identity = declare_worker_identity(
            name, args, self.service_account_name, manifest["metadata"]["labels"], child)
        self.role_arn = self.identity.role_arn
        # After the Pod Identity association: EKS injects the credentials when the pod is admitted.
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment", metadata=manifest["metadata"], spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[service_account, self.identity, *pool_dependency]))
        if args.disruption_budget:
            pdb = disruption_budget_manifest(name, args.namespace)
            k8s.policy.v1.PodDisruptionBudget(f"{name}-pdb", metadata=pdb["metadata"], spec=pdb["spec"], opts=child)
        if args.network_policy:
            np_ = worker_network_policy(name, args.namespace, manifest["metadata"]["labels"],
                                        egress_cidrs=args.egress_cidrs)
            k8s.networking.v1.NetworkPolicy(f"{name}-netpol", metadata=np_["metadata"], spec=np_["spec"], opts=child)
        self.register_outputs({"roleArn": self.role_arn, "serviceAccountName": self.service_account_name})
