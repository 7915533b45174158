"""The `gpu-allocatable` check: every node of the GPU NodePool advertises `nvidia.com/gpu` in status.allocatable.

Karpenter 1.0.0-1.0.2 booted GPU instances on the Neuron AMI while the NodePool, the EC2NodeClass and the node all
said Ready=True: only `status.allocatable` (what the scheduler uses) told the truth. So this check reads nothing but
allocatable and whether the NVIDIA device plugin's pod runs on the node; conditions are quoted as evidence only.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .. import catalogue
from ..spec.names import GPU_RESOURCE, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL
from .context import Context
from .model import FAIL, PASS, SKIPPED, CheckResult, age_s, condition, fmt_age, labels_of, name_of

NAME = "gpu-allocatable"
DEVICE_PLUGIN_NAME = "nvidia-device-plugin"


@dataclass(frozen=True)
class NodeVerdict:
    """What gpu-allocatable concluded about one node."""

    node: str
    """Node name."""
    state: str
    """`ok`, `pending` (younger than the grace period, not yet allocatable) or `bad`."""
    line: str
    """The evidence line: node, instance type, age, allocatable, device-plugin pod."""
    short: str = ""
    """The node as the summary names it: `name (type, up age)`, plus `: 1 of 4 GPUs allocatable` on a count
    that differs from the catalogue's."""


def allocatable_gpus(node: dict[str, Any]) -> int:
    """`status.allocatable["nvidia.com/gpu"]` as an int (0 when absent or not a whole number)."""
    raw = ((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE)
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return 0


def capacity_gpus(node: dict[str, Any]) -> int:
    """`status.capacity["nvidia.com/gpu"]` as an int (quoted as evidence only)."""
    raw = ((node.get("status") or {}).get("capacity") or {}).get(GPU_RESOURCE)
    try:
        return int(str(raw))
    except (TypeError, ValueError):
        return 0


def is_device_plugin_pod(pod: dict[str, Any]) -> bool:
    """A pod of the NVIDIA device plugin DaemonSet (by its chart's name label, else by its name)."""
    labels = labels_of(pod)
    if labels.get("app.kubernetes.io/name") == DEVICE_PLUGIN_NAME:
        return True
    return name_of(pod).startswith(DEVICE_PLUGIN_NAME)


def device_plugin_on(node_name: str, pods: list[dict[str, Any]]) -> tuple[bool, str]:
    """(running and ready, description) of the device-plugin pod scheduled on the node."""
    mine = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node_name and is_device_plugin_pod(p)]
    if not mine:
        return False, "no device-plugin pod"
    for p in mine:
        st = p.get("status") or {}
        ready = all(c.get("ready") for c in st.get("containerStatuses") or []) and bool(st.get("containerStatuses"))
        if st.get("phase") == "Running" and ready:
            return True, f"device-plugin pod {name_of(p)} Running"
    p = mine[0]
    st = p.get("status") or {}
    waiting = [((c.get("state") or {}).get("waiting") or {}).get("reason") for c in st.get("containerStatuses") or []]
    waiting = [w for w in waiting if w]
    return False, f"device-plugin pod {name_of(p)} {st.get('phase', 'Unknown')}" + (
        f" ({', '.join(waiting)})" if waiting else ", not ready")


def judge_node(node: dict[str, Any], pods: list[dict[str, Any]], now: datetime, grace_s: float) -> NodeVerdict:
    """ok when allocatable GPUs equal the catalogue's count for the instance type (> 0 for a type it does not know)
    and the device-plugin pod runs; else pending while younger than grace_s."""
    name = name_of(node)
    itype = labels_of(node).get(INSTANCE_TYPE_LABEL, "unknown instance type")
    age = age_s(node, now)
    gpus = allocatable_gpus(node)
    plugin_ok, plugin = device_plugin_on(name, pods)
    ready = condition(node, "Ready")
    facts = catalogue.instance_type(itype)
    expected = facts.gpus if facts is not None else None
    line = (f"node {name} ({itype}, up {fmt_age(age)}): allocatable {GPU_RESOURCE}={gpus} "
            f"(capacity {capacity_gpus(node)}" + (f", catalogue {expected}" if expected is not None else
                                                  ", not in the catalogue: count not compared") +
            f"), {plugin}, node Ready={ready.get('status') if ready else 'absent'}")
    short = f"{name} ({itype}, up {fmt_age(age)})"
    miscounted = gpus > 0 and expected is not None and gpus != expected
    if miscounted:
        short += f": {gpus} of {expected} GPUs allocatable"
        line += f" — {gpus} of the {expected} GPUs a {itype} has" + (
            " (time-slicing or MIG configured?)" if gpus > expected else "")
    if gpus > 0 and plugin_ok and not miscounted:
        return NodeVerdict(name, "ok", line, short)
    if age is not None and age < grace_s:
        return NodeVerdict(name, "pending", line + f" — younger than the {int(grace_s)} s grace period", short)
    return NodeVerdict(name, "bad", line, short)


def judge_gpu_allocatable(nodepool_name: str, nodepool: dict[str, Any] | None, nodes: list[dict[str, Any]],
                          pods: list[dict[str, Any]],
                          now: datetime, grace_s: float, *, final: bool = True,
                          notes: list[str] | None = None) -> tuple[CheckResult, list[NodeVerdict]]:
    """The check's verdict over the NodePool's nodes and the cluster's pods.

    `final=False` is a look while waiting: nodes younger than the grace period stay `pending`, and the caller looks
    again; with `final=True` a node still pending fails (it had its grace period, or the wait ran out).
    """
    evidence = list(notes or [])
    if nodepool is None:
        evidence.insert(0, f"NodePool {nodepool_name} not found")
    else:
        ready = condition(nodepool, "Ready")
        evidence.insert(0, f"NodePool {nodepool_name} reports Ready={ready.get('status') if ready else 'absent'}"
                           " (status only; judged by allocatable below)")
    mine = [n for n in nodes if labels_of(n).get(NODEPOOL_LABEL) == nodepool_name
            and not (n.get("metadata") or {}).get("deletionTimestamp")]
    terminating = [name_of(n) for n in nodes if labels_of(n).get(NODEPOOL_LABEL) == nodepool_name
                   and (n.get("metadata") or {}).get("deletionTimestamp")]
    if terminating:
        evidence.append(f"ignored, terminating: {', '.join(terminating)}")
    if not mine:
        evidence.append(f"no node carries {NODEPOOL_LABEL}={nodepool_name} (the pool is scaled to zero)")
        if nodepool is None:
            return CheckResult(NAME, FAIL, f"NodePool {nodepool_name} does not exist (wrong --nodepool?)",
                               evidence), []
        return CheckResult(NAME, SKIPPED, f"no GPU node in NodePool {nodepool_name} to judge (scale-to-zero)",
                           evidence), []
    verdicts = [judge_node(n, pods, now, grace_s) for n in mine]
    evidence += [v.line for v in verdicts]
    bad = [v for v in verdicts if v.state == "bad" or (final and v.state == "pending")]
    pending = [v for v in verdicts if v.state == "pending"]
    if bad:
        green = nodepool is not None and (condition(nodepool, "Ready") or {}).get("status") == "True"
        # The first node names the case; every node is in the evidence (the summary stays one short line).
        names = bad[0].short + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else "")
        partly = any(" GPUs allocatable" in v.short for v in bad)
        summary = (f"{GPU_RESOURCE} not {'all ' if partly else ''}allocatable on {len(bad)} of {len(verdicts)} "
                   f"node(s) of NodePool {nodepool_name}: {names}")
        if green:
            summary += " — while the NodePool reports Ready=True"
        return CheckResult(NAME, FAIL, summary, evidence), verdicts
    if pending:
        return CheckResult(NAME, FAIL, f"{len(pending)} node(s) of NodePool {nodepool_name} not yet allocatable "
                                       "(pending)", evidence), verdicts
    return CheckResult(NAME, PASS, f"{GPU_RESOURCE} allocatable on all {len(verdicts)} node(s) of NodePool "
                                   f"{nodepool_name} (the catalogue's GPU count of each known instance type)",
                       evidence), verdicts


def run(ctx: Context) -> CheckResult:
    """Look at the NodePool's nodes; while some are younger than the grace period and not yet allocatable, look
    again every poll interval (at most the grace period), then judge for good."""
    s = ctx.settings
    notes = list(ctx.state.get("gpu_job_notes", []))
    start = ctx.clock.monotonic()
    nodepool = ctx.kube.get_nodepool(s.nodepool)
    while True:
        nodes = ctx.kube.list_nodes(label_selector=f"{NODEPOOL_LABEL}={s.nodepool}")
        # Pods per node (GPU pools are small): the device plugin is found by what runs there, not by a label guess.
        pods = [p for n in nodes for p in ctx.kube.list_pods(field_selector=f"spec.nodeName={name_of(n)}")]
        result, verdicts = judge_gpu_allocatable(s.nodepool, nodepool, nodes, pods, ctx.clock.now(), s.grace_s,
                                                 final=False, notes=notes)
        pending = [v for v in verdicts if v.state == "pending"]
        waited = ctx.clock.monotonic() - start
        if not pending or any(v.state == "bad" for v in verdicts) or waited >= s.grace_s:
            break
        ctx.clock.sleep(s.poll_interval_s)
    result, _ = judge_gpu_allocatable(s.nodepool, nodepool, nodes, pods, ctx.clock.now(), s.grace_s, final=True,
                                      notes=notes)
    return result
