"""Rule `nodepool-instance-diversity`: a Karpenter NodePool must admit more than one EC2 instance type.

Why: a pool pinned to one type (say `g5.xlarge`) has one capacity pool per zone; when it runs dry (Spot and
On-Demand GPU capacity often do, together) Karpenter has nothing else to launch and every GPU pod stays Pending,
silently. The rule catches a pin however it is spelled: one value (or duplicates of one value, in any case) under
`node.kubernetes.io/instance-type In`, one family with one size, an `In` list cut down to one by `NotIn`, or the same
through template labels, which Karpenter treats as requirements.
"""
from __future__ import annotations

from typing import Any

from .declare import resource_policy
from .resources import NODEPOOL, NODEPOOL_LABELS, NODEPOOL_REQUIREMENTS, dig
from .selection import admitted_types, describe, parse_labels, parse_requirements
from .unknowns import unknown_message

NAME = "nodepool-instance-diversity"

ADVICE = ("allow several instance types, e.g. karpenter.k8s.aws/instance-family In ['g5', 'g6'] (every size of "
          "those families), or karpenter.k8s.aws/instance-category In ['g'] with "
          "karpenter.k8s.aws/instance-gpu-manufacturer In ['nvidia']")


def problems(props: Any) -> list[str]:
    """Why this NodePool (plain props) admits too few instance types; empty when it admits several."""
    reqs = dig(props, *NODEPOOL_REQUIREMENTS)
    labels = dig(props, *NODEPOOL_LABELS)
    parsed = parse_requirements(reqs.value, reqs.path).extend(parse_labels(labels.value, labels.path))
    types = admitted_types(parsed.requirements)
    # Requirements are ANDed: if the known ones already admit at most one type, unknown ones cannot widen that.
    if types is not None and len(types) == 0:
        return [f"{reqs.path} admits no instance type at all ({describe(parsed.requirements)}): the pool can never "
                f"launch a node; {ADVICE}"]
    if types is not None and len(types) == 1:
        (only,) = types
        return [f"{reqs.path} admits only one instance type, {only!r} ({describe(parsed.requirements)}): when "
                f"{only} capacity runs out, GPU pods stay Pending with nothing else to launch; {ADVICE}"]
    return [unknown_message(p, "how many instance types the NodePool admits") for p in parsed.unknown_paths]


POLICY = resource_policy(
    NAME, "A Karpenter NodePool must admit more than one EC2 instance type (a family of sizes, a category, a GPU "
          "manufacturer), never a single pinned type.",
    (NODEPOOL,), lambda r: problems(r.props))

POLICIES = [POLICY]
