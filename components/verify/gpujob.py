"""The `gpu-job` check: a short Job asks for one `nvidia.com/gpu` and runs `nvidia-smi`; it must finish in time.

It is the end-to-end proof that a GPU pod can be scheduled (NodePool, device plugin, taints), that the NVIDIA
container runtime works on the node (nvidia-smi is injected by it, so the worker image needs nothing extra), and it
reports which GPU model the pod got. The Job is deleted on every path (propagationPolicy Background).
"""
from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

from .. import catalogue
from ..spec.names import (
    GPU_NODE_SELECTOR,
    GPU_RESOURCE,
    GPU_TOLERATION,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
    WORKER_UID,
)
from ..spec.verify_admission import GPU_PROBE_COMMAND, GPU_PROBE_ENV
from .context import Context, blocked_result
from .gpu import allocatable_gpus
from .model import FAIL, PASS, CheckResult, age_s, condition, fmt_age, name_of

NAME = "gpu-job"
MANAGED_BY = "gpuburst-verify"
"""Value of `app.kubernetes.io/managed-by` on everything verify creates (find leftovers with this label)."""
NVIDIA_SMI = list(GPU_PROBE_COMMAND)
"""The probe's command: spec/verify_admission.py owns it (its admission rule admits only that command)."""
_UNRECOVERABLE = ("InvalidImageName", "CreateContainerConfigError", "ErrImageNeverPull", "CreateContainerError")
_NOMINATED = re.compile(r"\b(?P<kind>node|nodeclaim)/(?P<name>[a-z0-9][a-z0-9.-]*)")
"""`Pod should schedule on: nodeclaim/gpu-x7k2p, node/ip-10-0-12-34.ec2.internal` (Karpenter's Nominated event)."""


def job_name() -> str:
    """A fresh Job name: `gpuburst-verify-gpu-<8 hex>`."""
    return f"gpuburst-verify-gpu-{uuid.uuid4().hex[:8]}"


def build_gpu_job(name: str, namespace: str, image: str, *, nodepool: str, deadline_s: int,
                  ttl_s: int = 300) -> dict[str, Any]:
    """The probe Job: one GPU, the GPU node selector and toleration the worker uses, a locked-down container running
    nvidia-smi, no retries, `activeDeadlineSeconds` = deadline_s (node launch and image pull count), and
    `ttlSecondsAfterFinished` so the cluster removes it even if verify is killed before its own cleanup."""
    labels = {"app.kubernetes.io/name": "gpuburst-verify", "app.kubernetes.io/managed-by": MANAGED_BY,
              "app.kubernetes.io/component": NAME}
    node_selector = dict(GPU_NODE_SELECTOR)
    node_selector[NODEPOOL_LABEL] = nodepool
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(deadline_s),
            "ttlSecondsAfterFinished": int(ttl_s),
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "nodeSelector": node_selector,
                    "tolerations": [dict(GPU_TOLERATION)],
                    "securityContext": {
                        "runAsNonRoot": True, "runAsUser": WORKER_UID, "runAsGroup": WORKER_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [{
                        "name": "nvidia-smi",
                        "image": image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": list(NVIDIA_SMI),
                        # The NVIDIA runtime mounts nvidia-smi only when the utility capability is asked for.
                        "env": [{"name": n, "value": v} for n, v in GPU_PROBE_ENV],
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "128Mi", GPU_RESOURCE: "1"},
                            "limits": {"cpu": "500m", "memory": "256Mi", GPU_RESOURCE: "1"},
                        },
                        "securityContext": {
                            "runAsNonRoot": True, "runAsUser": WORKER_UID, "runAsGroup": WORKER_UID,
                            "allowPrivilegeEscalation": False, "privileged": False,
                            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "terminationMessagePolicy": "FallbackToLogsOnError",
                    }],
                },
            },
        },
    }


def parse_nvidia_smi(text: str) -> list[dict[str, str]]:
    """GPUs from `nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader` output."""
    gpus = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0] and "MiB" in parts[1]:
            gpus.append({"name": parts[0], "memory": parts[1], "driver": parts[2]})
    return gpus


def job_finished(job: dict[str, Any] | None) -> str | None:
    """`Complete` or `Failed` once the Job has finished, else None."""
    for t in ("Complete", "Failed"):
        c = condition(job or {}, t)
        if c and c.get("status") == "True":
            return t
    return None


def pod_problem(pod: dict[str, Any]) -> str | None:
    """A container state that will not recover by waiting (bad image name, bad config), or None."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _UNRECOVERABLE:
            return f"{waiting['reason']}: {waiting.get('message', '')}".strip(": ")
    return None


def describe_pod(pod: dict[str, Any], events: list[dict[str, Any]]) -> list[str]:
    """Evidence lines about the probe pod: phase, node, container states, and its Warning events."""
    st = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    lines = [f"pod {name_of(pod)}: phase {st.get('phase', 'Unknown')}" + (f" on node {node}" if node else
                                                                          ", not scheduled")]
    sched = condition(pod, "PodScheduled")
    if sched and sched.get("status") != "True":
        lines.append(f"pod {name_of(pod)} PodScheduled={sched.get('status')} {sched.get('reason', '')}: "
                     f"{sched.get('message', '')}".rstrip(": "))
    for cs in st.get("containerStatuses") or []:
        state = cs.get("state") or {}
        for k in ("waiting", "terminated"):
            if k in state:
                s = state[k]
                extra = f" exit code {s.get('exitCode')}" if k == "terminated" else ""
                lines.append(f"container {cs.get('name')} {k}: {s.get('reason', '')}{extra} "
                             f"{s.get('message', '')}".rstrip())
    for ev in events:
        if ev.get("type") == "Warning":
            lines.append(f"event {ev.get('reason')}: {ev.get('message', '').strip()}")
    return lines


def model_problem(gpus: list[dict[str, str]], itype: str | None) -> str | None:
    """Why the GPU nvidia-smi names is not the catalogue's GPU for the node's instance type (`NVIDIA A10G` on a
    g5 is `a10g`), or None; types the catalogue does not know are not compared."""
    facts = catalogue.instance_type(itype or "")
    if facts is None:
        return None
    for g in gpus:
        tokens = re.split(r"[^a-z0-9]+", g["name"].lower())
        if facts.gpu_name not in tokens:
            return f"nvidia-smi reports {g['name']!r} but the catalogue says a {itype} has {facts.gpu_name} GPUs"
    return None


def target_without_gpu(pods: list[dict[str, Any]], events: list[dict[str, Any]], nodes: list[dict[str, Any]],
                       nodeclaims: list[dict[str, Any]],
                       now: datetime, grace_s: float) -> str | None:
    """The node an unscheduled probe pod waits for (Karpenter's Nominated event, or the pod's nominatedNodeName),
    when it is Ready, older than grace_s and reports 0 `nvidia.com/gpu` allocatable: the pod can never schedule
    there. None while no such node is known."""
    if not pods or any((p.get("spec") or {}).get("nodeName") for p in pods):
        return None
    targets: list[str] = []
    claims = {name_of(c): ((c.get("status") or {}).get("nodeName") or "") for c in nodeclaims}
    for p in pods:
        nominated = (p.get("status") or {}).get("nominatedNodeName")
        if nominated:
            targets.append(nominated)
        for ev in events:
            if ev.get("reason") != "Nominated" or (ev.get("involvedObject") or {}).get("name") != name_of(p):
                continue
            for m in _NOMINATED.finditer(ev.get("message") or ""):
                targets.append(m["name"] if m["kind"] == "node" else claims.get(m["name"], ""))
    by_name = {name_of(n): n for n in nodes}
    for t in dict.fromkeys(t for t in targets if t):
        node = by_name.get(t)
        if node is None:
            continue
        age = age_s(node, now)
        ready = (condition(node, "Ready") or {}).get("status") == "True"
        if ready and age is not None and age >= grace_s and allocatable_gpus(node) == 0:
            itype = ((node.get("metadata") or {}).get("labels") or {}).get(INSTANCE_TYPE_LABEL, "unknown type")
            return (f"its target node {t} ({itype}, up {fmt_age(age)}) is Ready with 0 {GPU_RESOURCE} "
                    f"allocatable past the {int(grace_s)} s grace period")
    return None


def judge_gpu_job(job: dict[str, Any] | None, pods: list[dict[str, Any]], log: str, events: list[dict[str, Any]], *,
                  waited_s: float,
                  deadline_s: float, node: dict[str, Any] | None = None, no_gpu: str | None = None) -> CheckResult:
    """The verdict from the Job's status, its pod(s), the pod's log and its events.

    Pass: the Job completed and its log names at least one GPU. Anything else fails with what the pod went through
    (unscheduled with the scheduler's reason, image pull errors, nvidia-smi's exit code and output).
    """
    name = name_of(job or {}) or "gpu-job"
    evidence: list[str] = []
    for p in pods:
        evidence += describe_pod(p, [e for e in events if (e.get("involvedObject") or {}).get("name") == name_of(p)])
    itype = ((node or {}).get("metadata") or {}).get("labels", {}).get(INSTANCE_TYPE_LABEL)
    where = f" on node {name_of(node)} ({itype})" if node else ""
    finished = job_finished(job)
    gpus = parse_nvidia_smi(log)
    if log:
        evidence.append("log: " + " | ".join(log.strip().splitlines()[-5:])[:400])
    problem = model_problem(gpus, itype) if finished == "Complete" and gpus else None
    if problem:
        return CheckResult(NAME, FAIL, f"wrong GPU: {problem} (Job {name}{where})",
                           [f"{problem}: the node is not the instance type it claims, or the catalogue is wrong"]
                           + evidence)
    if finished == "Complete" and gpus:
        models = ", ".join(f"{g['name']} ({g['memory']}, driver {g['driver']})" for g in gpus)
        return CheckResult(NAME, PASS, f"Job {name} ran nvidia-smi in {int(waited_s)} s{where}: {models}",
                           evidence)
    if finished == "Complete":
        return CheckResult(NAME, FAIL, f"Job {name} completed{where} but its log names no GPU "
                                       "(nvidia-smi printed nothing usable)", evidence)
    if finished == "Failed":
        c = condition(job or {}, "Failed") or {}
        return CheckResult(NAME, FAIL, f"Job {name} failed{where}: {c.get('reason', '')} "
                                       f"{c.get('message', '')}".rstrip(), evidence)
    if job is None:
        return CheckResult(NAME, FAIL, f"Job {name} disappeared before it finished", evidence)
    if no_gpu:
        return CheckResult(NAME, FAIL, f"Job {name} gave up after {int(waited_s)} s: {no_gpu}",
                           evidence + [f"{no_gpu}: the pod can never schedule there (see gpu-allocatable and "
                                       "hardware-ami)"])
    stuck = next((pod_problem(p) for p in pods if pod_problem(p)), None)
    if stuck:
        return CheckResult(NAME, FAIL, f"Job {name}: the pod cannot start: {stuck}", evidence)
    state = "never scheduled" if pods and not any((p.get("spec") or {}).get("nodeName") for p in pods) else \
        "no pod" if not pods else "not finished"
    return CheckResult(NAME, FAIL, f"Job {name} did not finish within {int(deadline_s)} s ({state})", evidence)


def run(ctx: Context) -> CheckResult:
    """Create the probe Job, wait for it (up to its deadline plus 30 s), judge, and delete it on every path."""
    s = ctx.settings
    blocked = ctx.gpu_nodes_blocked()
    if blocked:
        return blocked_result(NAME, blocked, f"the Job would wait out --timeout-s ({int(s.timeout_s)} s + 30 s) for a "
                                             f"GPU node of NodePool {s.nodepool} that cannot work")
    if not s.worker_image:
        return CheckResult(NAME, FAIL, "no worker image to run nvidia-smi in: pass --image or use --stack "
                                       "(output imageRef), or --skip gpu-job", [])
    name = job_name()
    manifest = build_gpu_job(name, s.namespace, s.worker_image, nodepool=s.nodepool, deadline_s=int(s.timeout_s))
    start = ctx.clock.monotonic()
    limit = s.timeout_s + 30
    job: dict | None = None
    pods: list[dict] = []
    stuck_since: float | None = None
    no_gpu: str | None = None
    ctx.state["gpu_job_ran"] = True
    ctx.kube.create_job(s.namespace, manifest)
    cleanup = ""
    try:
        while True:
            job = ctx.kube.get_job(s.namespace, name)
            pods = ctx.kube.list_pods(s.namespace, label_selector=f"job-name={name}")
            for p in pods:
                node_name = (p.get("spec") or {}).get("nodeName")
                if node_name:
                    ctx.state["gpu_job_node"] = node_name
            if job is None or job_finished(job):
                break
            if any(pod_problem(p) for p in pods):
                stuck_since = stuck_since if stuck_since is not None else ctx.clock.monotonic()
                if ctx.clock.monotonic() - stuck_since >= 60:
                    break
            if ctx.clock.monotonic() - start >= limit:
                break
            no_gpu = _target_without_gpu(ctx, pods)
            if no_gpu:
                break
            ctx.clock.sleep(s.poll_interval_s)
        waited = ctx.clock.monotonic() - start
        log = ""
        events: list[dict] = []
        for p in pods:
            if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Running"):
                log = ctx.kube.read_pod_log(s.namespace, name_of(p), tail_lines=50) or log
            events += ctx.kube.list_events(s.namespace, field_selector=f"involvedObject.name={name_of(p)}")
        node = None
        node_name = ctx.state.get("gpu_job_node")
        if node_name:
            node = next((n for n in ctx.kube.list_nodes(label_selector=f"{NODEPOOL_LABEL}={s.nodepool}")
                         if name_of(n) == node_name), None)
        result = judge_gpu_job(job, pods, log, events, waited_s=waited, deadline_s=s.timeout_s, node=node,
                               no_gpu=no_gpu)
    finally:
        # Every path, Ctrl-C and SIGTERM included, removes the Job (and, in the background, its pod).
        try:
            deleted = ctx.kube.delete_job(s.namespace, name)
            cleanup = f"Job {s.namespace}/{name} " + ("deleted (propagationPolicy Background)" if deleted
                                                      else "already gone")
        except Exception as e:  # noqa: BLE001 - the cleanup failure is reported, never hides the verdict
            cleanup = (f"Job {s.namespace}/{name} NOT deleted ({e}): kubectl -n {s.namespace} delete job {name}")
    result.evidence.append(cleanup)
    if cleanup.startswith(f"Job {s.namespace}/{name} NOT"):
        result.status, result.summary = FAIL, result.summary + " (and the Job could not be deleted)"
    ctx.state["gpu_job_notes"] = [f"gpu-job: {result.status}: {result.summary}"]
    return result


def _target_without_gpu(ctx: Context, pods: list[dict]) -> str | None:
    """While the probe pod is unscheduled: its nominated node, if that one has no GPU allocatable for good."""
    s = ctx.settings
    if not pods or any((p.get("spec") or {}).get("nodeName") for p in pods):
        return None
    nodes = ctx.kube.list_nodes(label_selector=f"{NODEPOOL_LABEL}={s.nodepool}")
    if not nodes:
        return None
    events = [e for p in pods for e in ctx.kube.list_events(s.namespace,
                                                            field_selector=f"involvedObject.name={name_of(p)}")]
    claims = ctx.kube.list_nodeclaims() if any(e.get("reason") == "Nominated" for e in events) else []
    return target_without_gpu(pods, events, nodes, claims, ctx.clock.now(), s.grace_s)
