"""The node-local model cache: a hostPath PersistentVolume on every GPU node's kubelet disk, claimed in the workloads'
namespace, and the node user data that makes its folder; the worker pods mount it with `<namespace>/<workload folder>`
as subPath, and an admission rule (`ModelCacheAdmission`) refuses any other.

Why a PersistentVolume and not a hostPath volume in the pod: the workloads' namespace enforces the Pod Security
Standard `restricted`, which refuses a pod whose `spec.volumes` holds a hostPath (so does `baseline`). A pod that
mounts a claim passes; the claim is bound to this one PersistentVolume, which only the stack (a cluster
administrator) can create, and which names one folder. A hostPath volume has no node affinity: each pod mounts the
folder of the node it runs on, which is the point of the cache (the second Job on a node reads the model from local
disk). `ReadWriteMany` says that many nodes use it at once; a hostPath is not attachable, so nothing arbitrates it.

Why that folder (`names.MODEL_CACHE_HOST_PATH`, in kubelet's root): it is on the local NVMe wherever
`instanceStorePolicy: RAID0` put kubelet there, and on the root volume elsewhere, whichever order nodeadm sets up the
disks and runs the user data in. The user data makes it `root:10001` with mode 2770 (`hostPath.type: Directory`: a
node that lacks it fails the mount visibly instead of caching as root); kubelet makes each workload's subPath folders
with the same mode, and the setgid bit gives them the worker's group, so uid 10001 writes there and no one else but
root. The worker verifies every model's digest when it reads it from the cache, and keeps the cache under
MODEL_CACHE_MAX_BYTES.

The layout inside the folder is `<namespace>/<cache_sub_path>` (`spec.model_cache_admission.cache_sub_path`): one
folder per namespace, one per workload in it. Every namespace's claim reaches the same node folder, and the subPath is
written by whoever writes the pod spec, so the cluster holds a ValidatingAdmissionPolicy (`ModelCacheAdmission`,
declared by GpuBurstPlatform; the argument and the exact rules are in spec/model_cache_admission.py) that refuses a pod
mounting the cache claim with a subPath outside its own namespace's folder, none, or a subPathExpr.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .spec.model_cache_admission import admission_binding_manifest, admission_policy_manifest
from .spec.names import (
    MODEL_CACHE_CLAIM,
    MODEL_CACHE_DIR_MODE,
    MODEL_CACHE_HOST_PATH,
    model_cache_folder_commands,
)
from .spec.validation import ConfigError, names_its_errors

CACHE_DIR_MODE = MODEL_CACHE_DIR_MODE
"""Mode of the cache's node folder: setgid, read-write-search for its owner (root) and group (the worker's)."""


def cache_folder_script(host_path: str = MODEL_CACHE_HOST_PATH) -> str:
    """The shell script (a `text/x-shellscript` user data part) that makes the cache's node folder: `host_path`
    (default `names.MODEL_CACHE_HOST_PATH`, `/var/lib/kubelet/gpuburst-model-cache`, the one folder every ModelCache
    mounts), owned root:10001 with mode 2770.

    Every GPU node class whose nodes run pods that mount a ModelCache must run it at boot: GpuBurstPlatform adds it to
    its GPU EC2NodeClass when a workload has a model; a platform team declaring its own passes
    `Ec2NodeClassArgs(boot_scripts=[cache_folder_script()])`, and a workload stack attaching to that node class says
    so with `ExistingNodeClass(model_cache_folder=True)`. Without the folder the cache's mount (hostPath type
    Directory) fails and the pods stay ContainerCreating; the pack's `model-cache-folder` rule refuses that plan."""
    return ("#!/bin/bash\n"
            "# gpuburst: the node-local model cache (components/model_cache.py); kubelet's root is on the NVMe RAID0.\n"
            "set -euo pipefail\n"
            + "".join(f"{command}\n" for command in model_cache_folder_commands(host_path)))


def model_cache_manifests(*, namespace: str, volume_name: str, capacity_gib: int,
                          host_path: str = MODEL_CACHE_HOST_PATH,
                          claim_name: str = MODEL_CACHE_CLAIM) -> tuple[dict[str, Any], dict[str, Any]]:
    """(PersistentVolume, PersistentVolumeClaim) of the cache, bound to each other (`claimRef` and `volumeName`, empty
    storage class: no provisioner, no default class). `capacity_gib` is the capacity both declare, informational: a
    hostPath's size is not enforced, and each worker limits its own folder to MODEL_CACHE_MAX_BYTES."""
    if not (isinstance(capacity_gib, int) and not isinstance(capacity_gib, bool) and capacity_gib > 0):
        raise ConfigError("capacity_gib", capacity_gib, "a positive int of GiB")
    labels = {"app.kubernetes.io/name": "gpuburst-model-cache", "app.kubernetes.io/part-of": "gpuburst"}
    storage = {"storage": f"{capacity_gib}Gi"}
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": volume_name, "labels": labels},
          "spec": {"capacity": storage, "accessModes": ["ReadWriteMany"],
                   "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "", "volumeMode": "Filesystem",
                   "claimRef": {"namespace": namespace, "name": claim_name},
                   "hostPath": {"path": host_path, "type": "Directory"}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": claim_name, "namespace": namespace, "labels": labels},
           "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": volume_name,
                    "volumeMode": "Filesystem", "resources": {"requests": storage}}}
    return pv, pvc


@dataclass
class ModelCacheArgs:
    """Inputs of a ModelCache: the node-local model cache of one namespace's workloads.

    The cache is one folder on each GPU node, always `names.MODEL_CACHE_HOST_PATH`
    (`/var/lib/kubelet/gpuburst-model-cache`; not an input: the worker-host-path rule allows no other hostPath). The
    EC2NodeClass of every NodePool the pods run on must make that folder at boot by running `cache_folder_script()`
    (GpuBurstPlatform's GPU node class always does); a workload stack attaching to
    another stack's node class says so with `ExistingNodeClass(model_cache_folder=True)`, which the pack's
    `model-cache-folder` rule requires. The pods mount the claim (`ModelCache.claim_name`, always
    `names.MODEL_CACHE_CLAIM`, so one ModelCache per namespace) with `ModelMount(cache_claim=cache.claim_name,
    cache_sub_path=...)`: the pods' subPath is `<namespace>/<cache_sub_path>`, so a sub path is unique in its
    namespace (the workload's name) and the cluster's `ModelCacheAdmission` keeps each namespace in its folder."""

    namespace: str
    """The workloads' namespace (the claim lives there; it must exist). Required."""
    volume_name: str
    """Name of the cluster-scoped PersistentVolume, unique in the cluster: by convention `<namespace>-model-cache` in a
    workload stack (GpuBurstPlatform names its own `gpuburst-<environment>-<namespace>-model-cache`). Required."""
    capacity_gib: int
    """The capacity the PersistentVolume and its claim declare, GiB (`spec.capacity.storage`,
    `spec.resources.requests.storage`): informational. Kubernetes does not enforce a hostPath volume's size, and
    nothing in gpuburst checks this figure (neither against the workloads nor against the node's disk); each worker
    limits its own folder to its `ModelMount.cache_max_bytes` (env MODEL_CACHE_MAX_BYTES). GpuBurstPlatform declares
    the sum of its workloads' `model.cacheGiB`; the same sum of `cache_max_bytes` is a fair figure here. A positive
    int; required."""
    depends_on: list[pulumi.Resource] | None = None
    """What the claim waits for (the namespace). Default none."""


@names_its_errors
class ModelCache(pulumi.ComponentResource):
    """The cache's PersistentVolume and its claim (`model_cache_manifests`)."""

    claim_name: str

    def __init__(self, name: str, args: ModelCacheArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        pv, pvc = model_cache_manifests(namespace=args.namespace, volume_name=args.volume_name,
                                        capacity_gib=args.capacity_gib)
        super().__init__("gpuburst:index:ModelCache", name, None, opts)
        volume = k8s.core.v1.PersistentVolume(f"{name}-volume", metadata=pv["metadata"], spec=pv["spec"],
                                              opts=pulumi.ResourceOptions(parent=self))
        k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim", metadata=pvc["metadata"], spec=pvc["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[volume, *(args.depends_on or [])]))
        self.claim_name = pvc["metadata"]["name"]
        self.register_outputs({"claimName": self.claim_name, "volumeName": args.volume_name})


@names_its_errors
class ModelCacheAdmission(pulumi.ComponentResource):
    """The cluster's rule that a pod mounts the model cache's claim only under its own namespace's folder: the
    ValidatingAdmissionPolicy and its binding of `spec/model_cache_admission.py` (cluster-scoped, one per cluster;
    GpuBurstPlatform declares it always, since a workload stack on its cluster may declare a cache of its own)."""

    policy: k8s.admissionregistration.v1.ValidatingAdmissionPolicy
    """The ValidatingAdmissionPolicy (`model_cache_admission.admission_policy_manifest()`)."""
    binding: k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding
    """Its binding: every namespace, Deny."""

    def __init__(self, name: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuburst:index:ModelCacheAdmission", name, None, opts)
        vap, vapb = admission_policy_manifest(), admission_binding_manifest()
        self.policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-policy", metadata=vap["metadata"], spec=vap["spec"], opts=pulumi.ResourceOptions(parent=self))
        self.binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-binding", metadata=vapb["metadata"], spec=vapb["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.policy]))
        self.register_outputs({"policyName": vap["metadata"]["name"]})
