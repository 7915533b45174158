"""The NVIDIA device plugin chart, scheduled only onto GPU nodes, which advertises `nvidia.com/gpu` to the scheduler."""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from .catalogue import CHARTS
from .nodepool import GPU_PRESENT_LABEL, GPU_TOLERATION
from .validation import ConfigError

CHART = "nvidia-device-plugin"
"""Key of the chart in catalogue.CHARTS."""


def device_plugin_values(*, gpu_label: tuple[str, str] = GPU_PRESENT_LABEL) -> dict:
    """Helm values of the device plugin: only on GPU nodes (label), tolerating their taint, node-critical priority."""
    key, value = gpu_label
    return {
        # The chart's default affinity also matches NFD labels this stack does not install; pin it to the label every
        # GPU NodePool sets, both as a nodeSelector and as the required affinity that replaces the default.
        "nodeSelector": {key: value},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}}},
        "tolerations": [dict(GPU_TOLERATION), {"key": "CriticalAddonsOnly", "operator": "Exists"}],
        # Without the plugin no GPU is allocatable: it must never be the pod evicted under node pressure.
        "priorityClassName": "system-node-critical",
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


class NvidiaDevicePlugin(pulumi.ComponentResource):
    """`helm.v4.Chart` of the NVIDIA k8s-device-plugin at the catalogue's version, on GPU nodes only."""

    def __init__(self, name: str, args: NvidiaDevicePluginArgs | None = None,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        args = args or NvidiaDevicePluginArgs()
        if not isinstance(args.version, str) or not args.version:
            raise ConfigError("nvidia_device_plugin.version", args.version, "a chart version as a plain string")
        super().__init__("gpuburst:index:NvidiaDevicePlugin", name, None, opts)
        pin = CHARTS[CHART]
        depends: list[pulumi.Resource] = []
        if args.create_namespace:
            self.namespace = k8s.core.v1.Namespace(
                f"{name}-ns", metadata={"name": args.namespace}, opts=pulumi.ResourceOptions(parent=self))
            depends.append(self.namespace)
        self.chart = k8s.helm.v4.Chart(
            f"{name}-chart", name=pin.chart, chart=pin.chart, version=args.version, namespace=args.namespace,
            repository_opts={"repo": pin.repository}, values=device_plugin_values(),
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends))
        self.register_outputs({"version": args.version, "namespace": args.namespace})
