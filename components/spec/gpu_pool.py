"""The GPU NodePool's facts as plain data: its API version, default instance types and capacity types, disruption
budgets and consolidation delay, so the planner and the pack read the same defaults the component renders."""
from __future__ import annotations

import re
from typing import Any

from .names import CAPACITY_TYPE_LABEL

NODEPOOL_API_VERSION = "karpenter.sh/v1"
"""apiVersion of NodePool (served by every Karpenter the catalogue accepts, >= 1.0.3)."""

DEFAULT_GPU_INSTANCE_TYPES = ("g4dn.xlarge", "g4dn.2xlarge", "g5.xlarge", "g5.2xlarge")
"""Single-GPU NVIDIA x86-64 sizes across two families, so that spot shortage in one type does not stall the queue."""

CAPACITY_TYPES = ("spot", "on-demand", "reserved")
"""Values of the `karpenter.sh/capacity-type` requirement. Their ORDER means nothing to Karpenter: with both spot and
on-demand allowed it always prefers spot (price-capacity-optimized) and falls back to on-demand only when spot is
short. A workload that must not run on spot asks for it itself: `ON_DEMAND_NODE_SELECTOR`."""

ON_DEMAND_NODE_SELECTOR = {CAPACITY_TYPE_LABEL: "on-demand"}
"""Pod nodeSelector that makes Karpenter launch (and the scheduler use) only on-demand nodes of a pool that allows
both: Karpenter intersects the pod's requirements with the NodePool's, so the pod never lands on spot. The pool must
allow on-demand, or the pod stays Pending."""

DEFAULT_BUDGETS: tuple[dict[str, Any], ...] = (
    {"nodes": "100%", "reasons": ["Empty"]},
    {"nodes": "0", "reasons": ["Drifted", "Underutilized"]},
)
"""Disruption budgets: empty nodes may all go at once (that is the point of bursting), but Karpenter never voluntarily
replaces a node that is still running work (drift, underuse); a drifted node is removed once it is empty."""

DEFAULT_CONSOLIDATE_AFTER = "5m"
"""How long a GPU node stays empty before Karpenter removes it (`disruption.consolidateAfter`). Default of
GpuNodePoolArgs."""

_DURATION_PART = re.compile(r"([0-9]+)(h|m|s)")


def duration_s(text: str) -> int:
    """A Karpenter duration (`5m`, `1h30m`, `90s`) in seconds; ValueError for anything else."""
    if not isinstance(text, str) or not re.fullmatch(r"([0-9]+(h|m|s))+", text):
        raise ValueError(f"not a duration: {text!r} (expected e.g. '5m' or '1h30m')")
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in _DURATION_PART.findall(text))
