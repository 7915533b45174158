"""The NVIDIA device plugin chart, scheduled only onto GPU nodes, which advertises `nvidia.com/gpu` to the scheduler."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .catalogue import (
    CHARTS,
    DEVICE_PLUGIN_CDI_FEATURE_FLAGS,
    NVIDIA_DEVICE_PLUGIN_VERSION,
    device_plugin_version_problem,
)
from .catalogue.network import IMAGE_DIGESTS
from .network import open_network_policy
from .spec.names import GPU_PRESENT_LABEL, GPU_TOLERATION
from .spec.validation import ConfigError, is_cdi_feature_flag, names_its_errors

CHART = "nvidia-device-plugin"
"""Key of the chart in catalogue.CHARTS."""

UPSTREAM_IMAGE = "nvcr.io/nvidia/k8s-device-plugin"
"""The chart's default image repository (its `image.repository`)."""

DEVICE_PLUGIN_POD_SECURITY_LABELS = {"pod-security.kubernetes.io/enforce": "privileged",
                                     "pod-security.kubernetes.io/enforce-version": "latest",
                                     "pod-security.kubernetes.io/audit": "restricted",
                                     "pod-security.kubernetes.io/warn": "restricted"}
"""Pod Security admission labels of the plugin's namespace. Enforce `privileged`, stated rather than left to the
cluster's default: the Kubernetes Pod Security Standards' `baseline` forbids hostPath volumes, and the plugin mounts
the kubelet's device-plugins directory (its socket) and /var/run/cdi (the CDI specs it writes), while the chart's MPS
control daemon (scheduled only on MPS-labelled nodes, none here) is privileged with hostPID; nothing less than
`privileged` admits them. Audit and warn stay at `restricted`: no other namespace of the stack admits privileged pods,
so every pod admitted here is named in the API server's audit log and warned about to whoever applies it (the
plugin's own DaemonSet on each upgrade, a known, rare warning; anything else is a pod that should not be there)."""


DEVICE_PLUGIN_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "256Mi"}}
"""Requests and limits of every device-plugin container (the plugin, the MPS control daemon and its init container).
ESTIMATE, not measured here: the plugin is a small Go daemon (tens of MiB resident); the limit leaves 4x headroom so
it is never OOM-killed, since a dead plugin makes every GPU unallocatable. The requests count in the schedulability
rule's DaemonSet overhead on every GPU node."""

DEVICE_PLUGIN_POD_SECURITY = {"seccompProfile": {"type": "RuntimeDefault"}}
"""Pod securityContext: the runtime's default seccomp profile (the chart sets none)."""

DEVICE_PLUGIN_CONTAINER_SECURITY: dict[str, Any] = {"allowPrivilegeEscalation": False,
                                                    "capabilities": {"drop": ["ALL"]},
                                                    "seccompProfile": {"type": "RuntimeDefault"}}
"""Container securityContext of the plugin: the chart's own default (no privilege escalation, every capability
dropped) restated, because setting `securityContext` replaces it, plus RuntimeDefault seccomp. Not read-only root,
not non-root: the plugin writes its socket into the kubelet's root-owned device-plugins directory and CDI specs into
/var/run/cdi, and upstream neither documents nor tests it read-only (see components/catalogue/chart_findings.py)."""


def device_plugin_image_tag(version: str = NVIDIA_DEVICE_PLUGIN_VERSION) -> str:
    """The chart's `image.tag` for the plugin `version`: `v<version>@<digest>` with the digest the catalogue records
    (IMAGE_DIGESTS; the chart writes `<repository>:<tag>` and has no digest value), else `v<version>` alone."""
    tag = f"v{version}"
    digest = IMAGE_DIGESTS.get(f"{UPSTREAM_IMAGE}:{tag}")
    return f"{tag}@{digest}" if digest else tag


def device_plugin_values(*, gpu_label: tuple[str, str] = GPU_PRESENT_LABEL,
                         cdi_feature_flags: tuple[str, ...] = DEVICE_PLUGIN_CDI_FEATURE_FLAGS,
                         image_repository: Any = None, version: str = NVIDIA_DEVICE_PLUGIN_VERSION) -> dict[str, Any]:
    """Helm values of the device plugin: only on GPU nodes (label), tolerating their taint, node-critical priority,
    requests and limits, RuntimeDefault seccomp, the CDI feature flags (`cdi.featureFlags`, comma-joined; none
    when empty), the image by its digest at the chart's own tag (`v` + its appVersion; `device_plugin_image_tag`), and
    with `image_repository` from that repository (the stack's ECR mirror, which holds the pinned version) instead of
    nvcr.io at the chart `version`'s own."""
    key, value = gpu_label
    # The mirror holds the catalogue's pinned plugin (network.mirror_copy_commands); nvcr.io has every version.
    image: dict[str, Any] = {"tag": device_plugin_image_tag(NVIDIA_DEVICE_PLUGIN_VERSION if image_repository is not None
                                                            else version)}
    if image_repository is not None:
        image["repository"] = image_repository
    return {
        "image": image,
        # The chart's default affinity also matches NFD labels this stack does not install; pin it to the label every
        # GPU NodePool sets, both as a nodeSelector and as the required affinity that replaces the default.
        "nodeSelector": {key: value},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}}},
        "tolerations": [dict(GPU_TOLERATION), {"key": "CriticalAddonsOnly", "operator": "Exists"}],
        # Without the plugin no GPU is allocatable: it must never be the pod evicted under node pressure.
        "priorityClassName": "system-node-critical",
        "resources": {k: dict(v) for k, v in DEVICE_PLUGIN_RESOURCES.items()},
        "podSecurityContext": dict(DEVICE_PLUGIN_POD_SECURITY),
        "securityContext": {k: (dict(v) if isinstance(v, dict) else v) for k, v in
                            DEVICE_PLUGIN_CONTAINER_SECURITY.items()},
        # The chart renders CDI_FEATURE_FLAGS only for a string; None leaves the variable out.
        "cdi": {"featureFlags": ",".join(cdi_feature_flags) if cdi_feature_flags else None},
    }


@dataclass
class NvidiaDevicePluginArgs:
    """Inputs of the NvidiaDevicePlugin component."""

    version: str = CHARTS[CHART].version
    """Chart version. Default: catalogue.CHARTS['nvidia-device-plugin'].version."""
    namespace: str = CHARTS[CHART].namespace
    """Namespace created for the plugin. Default: the catalogue's namespace for the chart."""
    create_namespace: bool = True
    """Create the namespace (Helm v4 charts do not). Default True."""
    cdi_feature_flags: tuple[str, ...] = DEVICE_PLUGIN_CDI_FEATURE_FLAGS
    """CDI feature flags (`cdi.featureFlags`). Default catalogue.DEVICE_PLUGIN_CDI_FEATURE_FLAGS
    (`disable-nvsandboxutils`, the AL2023 NVIDIA AMI v20260423 workaround); () sets none."""
    image_repository: pulumi.Input[str] | None = None
    """Repository to pull the plugin's image from instead of nvcr.io: the stack's ECR mirror when GPU nodes have no
    route to the internet (network.WorkloadNetwork, `mirror_copy_commands`). Default None: the chart's nvcr.io."""


@names_its_errors
class NvidiaDevicePlugin(pulumi.ComponentResource):
    """`helm.v4.Chart` of the NVIDIA k8s-device-plugin at the catalogue's version, on GPU nodes only."""

    namespace: k8s.core.v1.Namespace
    network_policy: k8s.networking.v1.NetworkPolicy
    chart: k8s.helm.v4.Chart

    def __init__(self, name: str, args: NvidiaDevicePluginArgs | None = None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        args = args or NvidiaDevicePluginArgs()
        if not isinstance(args.version, str) or not args.version:
            raise ConfigError("nvidia_device_plugin.version", args.version, "a chart version as a plain string")
        problem = device_plugin_version_problem(args.version)
        if problem:
            raise ConfigError("nvidia_device_plugin.version", args.version, problem)
        flags = tuple(args.cdi_feature_flags)
        if not all(is_cdi_feature_flag(f) for f in flags):
            raise ConfigError("nvidia_device_plugin.cdi_feature_flags", list(flags),
                              "CDI feature flags as lower-case words joined by '-', e.g. ('disable-nvsandboxutils',)")
        super().__init__("gpuburst:index:NvidiaDevicePlugin", name, None, opts)
        pin = CHARTS[CHART]
        depends: list[pulumi.Resource] = []
        if args.create_namespace:
            self.namespace = k8s.core.v1.Namespace(
                f"{name}-ns", metadata={"name": args.namespace, "labels": dict(DEVICE_PLUGIN_POD_SECURITY_LABELS)},
                opts=pulumi.ResourceOptions(parent=self))
            depends.append(self.namespace)
        # The cluster's VPC CNI is strict: the plugin's pods (it reads its node from the API server) need a policy
        # selecting them, or they stay denied.
        open_policy = open_network_policy(args.namespace)
        self.network_policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-allow-all", metadata=open_policy["metadata"], spec=open_policy["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(depends)))
        depends.append(self.network_policy)
        self.chart = k8s.helm.v4.Chart(
            f"{name}-chart", name=pin.chart, chart=pin.chart, version=args.version, namespace=args.namespace,
            repository_opts={"repo": pin.repository}, values=device_plugin_values(
                cdi_feature_flags=flags, image_repository=args.image_repository, version=args.version),
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends))
        self.register_outputs({"version": args.version, "namespace": args.namespace})
