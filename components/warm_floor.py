"""A warm GPU floor: placeholder pods a KEDA cron ScaledObject keeps up on a schedule, preempted at once by real work.

How it works: a Deployment of pause pods, each requesting one `nvidia.com/gpu` and placed exactly like the worker pods
(GPU node selector and toleration), declared with 0 replicas. A KEDA `ScaledObject` with a `cron` trigger sets it to
`count` replicas inside the schedule and back to 0 outside it, so Karpenter keeps `count` GPU nodes up inside the
window and empties the pool outside it. The placeholders run at `PLACEHOLDER_PRIORITY` (below 0), the workloads at
`WORKLOAD_PRIORITY` with `PreemptLowerPriority`: a real Job that needs a GPU evicts a placeholder at once and takes its
node, without waiting for a new one; the evicted placeholder goes Pending and Karpenter starts a replacement node, so
the floor is headroom that refills itself while the window is open.

The placeholder pre-pulls the worker image: an init container of the worker image that only runs `python -c pass`, so
each floor node has the multi-GB image cached before a real job lands on it (a pause pod alone would hold the GPU but
leave the job to pay the whole image pull).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .catalogue import PAUSE_IMAGE
from .pod import worker_node_selector
from .spec.keda_schema import API_VERSION as KEDA_API_VERSION
from .spec.names import GPU_RESOURCE, GPU_TOLERATION
from .spec.quantity import fmt_cpu
from .spec.validation import ConfigError, names_its_errors
from .spec.worker_pod import WorkerPodSettings

PLACEHOLDER_NAME = "gpuburst-warm-floor"
"""Name of the placeholder Deployment, its ScaledObject and its PriorityClass."""

PLACEHOLDER_PRIORITY_CLASS = "gpuburst-warm-floor"
"""PriorityClass of the placeholder pods."""

PLACEHOLDER_PRIORITY = -10
"""Priority of the placeholder pods: below every workload's and below 0 (pods without a class), so anything preempts
them."""

WORKLOAD_PRIORITY_CLASS = "gpuburst-workload"
"""PriorityClass of the GPU worker pods (ScaledJob jobs and consumers) when a warm floor exists."""

WORKLOAD_PRIORITY = 1000
"""Priority of the GPU worker pods: above the placeholders, with PreemptLowerPriority so a real job evicts one."""

PLACEHOLDER_UID = 65535
"""User and group the pause image runs as (its own default, stated so the restricted Pod Security Standard holds)."""

PLACEHOLDER_LABELS = {"app.kubernetes.io/name": PLACEHOLDER_NAME, "app.kubernetes.io/component": "warm-floor"}
"""Labels of the placeholder Deployment and its pods (not the worker label: no worker NetworkPolicy, IAM or queue)."""


def priority_class_manifest(name: str, value: int, description: str) -> dict[str, Any]:
    """A scheduling.k8s.io/v1 PriorityClass that preempts lower priorities (never globalDefault)."""
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name, "labels": dict(PLACEHOLDER_LABELS, **{"app.kubernetes.io/name": name})},
            "value": value, "globalDefault": False, "preemptionPolicy": "PreemptLowerPriority",
            "description": description}


def priority_class_manifests() -> list[dict[str, Any]]:
    """The workloads' PriorityClass and the placeholders' (below it)."""
    return [
        priority_class_manifest(WORKLOAD_PRIORITY_CLASS, WORKLOAD_PRIORITY,
                                "gpuburst GPU workers: preempt the warm-floor placeholders at once"),
        priority_class_manifest(PLACEHOLDER_PRIORITY_CLASS, PLACEHOLDER_PRIORITY,
                                "gpuburst warm-floor placeholders: hold GPU nodes until real work needs them"),
    ]


def placeholder_resources(pod: WorkerPodSettings | None = None) -> dict[str, str]:
    """What one placeholder requests: one GPU and the worker pod's CPU, memory and ephemeral storage.

    The worker's size, not a token amount: Karpenter picks the cheapest type that fits the pending pod, and a node
    sized for a pause container (e.g. a g6.xlarge) cannot host the worker, so no real job could ever preempt onto it.
    """
    s = pod or WorkerPodSettings(image="")
    return {"cpu": fmt_cpu(s.cpu_cores), "memory": f"{s.memory_gib}Gi",
            "ephemeral-storage": f"{s.scratch_gib + s.tmp_gib}Gi", GPU_RESOURCE: "1"}


PREPULL_RESOURCES = {"cpu": "100m", "memory": "128Mi"}
"""Requests and limits of the pre-pull init container (it starts Python and exits; equal, so the pod stays
Guaranteed)."""

WORKER_UID = 10001
"""The worker image's numeric user (worker/Dockerfile `USER 10001:10001`), which the pre-pull container runs as."""


def prepull_init_container(image: Any) -> dict[str, Any]:
    """An init container that pulls the worker `image` onto the node and exits at once (`python -c pass`)."""
    return {
        "name": "pull-worker-image",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-c", "pass"],
        "resources": {"requests": dict(PREPULL_RESOURCES), "limits": dict(PREPULL_RESOURCES)},
        "securityContext": {"runAsNonRoot": True, "runAsUser": WORKER_UID, "runAsGroup": WORKER_UID,
                            "allowPrivilegeEscalation": False, "privileged": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }


def placeholder_deployment_manifest(namespace: str, *, name: str = PLACEHOLDER_NAME,
                                    pod: WorkerPodSettings | None = None,
                                    pause_image: Any = PAUSE_IMAGE, nodepool: str | None = None) -> dict[str, Any]:
    """The placeholder apps/v1 Deployment: 0 replicas (KEDA sets them), pause pods (`pause_image`, default the
    catalogue's) the worker's size with one GPU each, placed like the workers (on NodePool `nodepool` when given, the
    workers' own, so the node it holds is one they can use); with `pod.image` set, each first pre-pulls the worker
    image (init container)."""
    resources = placeholder_resources(pod)
    image = pod.image if pod is not None else ""
    pod_spec = {
        "priorityClassName": PLACEHOLDER_PRIORITY_CLASS,
        "automountServiceAccountToken": False,
        # Nothing to finish: a preempted placeholder should free its GPU at once.
        "terminationGracePeriodSeconds": 0,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": PLACEHOLDER_UID, "runAsGroup": PLACEHOLDER_UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "nodeSelector": worker_node_selector(nodepool),
        "tolerations": [dict(GPU_TOLERATION)],
        **({"initContainers": [prepull_init_container(image)]} if image else {}),
        "containers": [{
            "name": "pause",
            "image": pause_image,
            "imagePullPolicy": "IfNotPresent",
            "resources": {"requests": dict(resources), "limits": dict(resources)},
            "securityContext": {"runAsNonRoot": True, "runAsUser": PLACEHOLDER_UID, "runAsGroup": PLACEHOLDER_UID,
                                "allowPrivilegeEscalation": False, "privileged": False,
                                "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
                                "seccompProfile": {"type": "RuntimeDefault"}},
        }],
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(PLACEHOLDER_LABELS)},
        "spec": {
            "replicas": 0,
            "revisionHistoryLimit": 1,
            "selector": {"matchLabels": dict(PLACEHOLDER_LABELS)},
            "template": {"metadata": {"labels": dict(PLACEHOLDER_LABELS)}, "spec": pod_spec},
        },
    }


def warm_floor_scaled_object_manifest(namespace: str, *, count: int, start: str, end: str, timezone: str,
                                      name: str = PLACEHOLDER_NAME) -> dict[str, Any]:
    """The keda.sh/v1alpha1 ScaledObject: `count` placeholder replicas between the `start` and `end` crons
    (in `timezone`), 0 outside them."""
    if not (isinstance(count, int) and not isinstance(count, bool) and count >= 1):
        raise ConfigError("warmGpus.count", count, "an integer >= 1")
    return {
        "apiVersion": KEDA_API_VERSION, "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(PLACEHOLDER_LABELS)},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicaCount": 0,
            "maxReplicaCount": count,
            "triggers": [{"type": "cron", "metadata": {
                "timezone": timezone, "start": start, "end": end, "desiredReplicas": str(count)}}],
        },
    }


@dataclass
class WarmGpuFloorArgs:
    """Inputs of WarmGpuFloor."""

    namespace: str
    """Namespace of the placeholder Deployment and its ScaledObject (the workloads'). Required."""
    count: int
    """GPUs (placeholder pods) kept up inside the schedule. Required."""
    start: str
    """Cron expression (KEDA cron `start`) at which the floor comes up. Required."""
    end: str
    """Cron expression (KEDA cron `end`) at which it goes back to zero. Required."""
    timezone: str
    """IANA time zone of the crons. Required."""
    keda_chart: pulumi.Resource | None = None
    """The KEDA chart the ScaledObject waits for (its CRD comes from it). Default None: KEDA is installed elsewhere
    (ExistingKeda)."""
    depends_on: list[pulumi.Resource] | None = None
    """What the Deployment waits for (namespace, GPU NodePool, device plugin). Default none."""
    pod: WorkerPodSettings | None = None
    """The worker pod whose CPU, memory and ephemeral storage each placeholder reserves (with one GPU), and whose
    image it pre-pulls. Default None: WorkerPodSettings' defaults and no pre-pull (the node is held, the image is
    not cached)."""
    pause_image: pulumi.Input[str] = PAUSE_IMAGE
    """The placeholders' pause image. Default: the catalogue's PAUSE_IMAGE (registry.k8s.io, by digest); the stack's
    ECR mirror of it when GPU nodes have no route to the internet (network.WorkloadNetwork)."""
    nodepool: str | None = None
    """The NodePool the workers run on (`WorkerAccessArgs.nodepool`): the placeholders hold nodes of it. Default
    None: any GPU NodePool."""


@names_its_errors
class WarmGpuFloor(pulumi.ComponentResource):
    """Both PriorityClasses, the placeholder Deployment and the cron ScaledObject that keeps it up on a schedule."""

    deployment: k8s.apps.v1.Deployment
    scaled_object: k8s.apiextensions.CustomResource

    def __init__(self, name: str, args: WarmGpuFloorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        scaled_object = warm_floor_scaled_object_manifest(args.namespace, count=args.count, start=args.start,
                                                          end=args.end, timezone=args.timezone)
        deployment = placeholder_deployment_manifest(args.namespace, pod=args.pod, pause_image=args.pause_image,
                                                     nodepool=args.nodepool)
        super().__init__("gpuburst:index:WarmGpuFloor", name, None, opts)
        self.priority_classes: dict[str, k8s.scheduling.v1.PriorityClass] = {}
        for m in priority_class_manifests():
            self.priority_classes[m["metadata"]["name"]] = k8s.scheduling.v1.PriorityClass(
                f"{name}-{m['metadata']['name']}", metadata=m["metadata"], value=m["value"],
                global_default=m["globalDefault"], preemption_policy=m["preemptionPolicy"],
                description=m["description"], opts=pulumi.ResourceOptions(parent=self))
        self.workload_priority_class: k8s.scheduling.v1.PriorityClass = self.priority_classes[WORKLOAD_PRIORITY_CLASS]
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-placeholder", metadata=deployment["metadata"], spec=deployment["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[
                *(args.depends_on or []), self.priority_classes[PLACEHOLDER_PRIORITY_CLASS]]))
        self.scaled_object = k8s.apiextensions.CustomResource(
            f"{name}-scaledobject", api_version=scaled_object["apiVersion"], kind=scaled_object["kind"],
            metadata=scaled_object["metadata"], spec=scaled_object["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[
                *([args.keda_chart] if args.keda_chart is not None else []), self.deployment]))
        self.priority_class_name = WORKLOAD_PRIORITY_CLASS
        self.register_outputs({"deploymentName": PLACEHOLDER_NAME, "count": args.count,
                               "workloadPriorityClass": WORKLOAD_PRIORITY_CLASS})
