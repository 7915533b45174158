"""Stack rules on what a worker pod needs from the rest of the plan to take a message at all: `worker-queue-visibility`
(its visibility timeout is its queue's) and `worker-aws-egress` (its NetworkPolicies let it reach the AWS APIs).

- `worker-queue-visibility`: a worker pod (labelled `app.kubernetes.io/name: gpuburst-worker`) renews the message it
  holds on its own clock, `VISIBILITY_TIMEOUT` (env, or the worker's `--visibility-timeout` flag, which wins): it
  extends the message by that much a third of it after receiving it. When its queue (found by the pod's queue URL,
  `--queue-url` or env `QUEUE_URL`, else by the one queue the pod depends on) says otherwise in
  `visibilityTimeoutSeconds`, the two disagree: a queue timeout below a third of the pod's lets a slow slide reappear
  before the first renewal and be processed twice, and a dead worker's message comes back on the queue's clock, not
  the one the pod's liveness and grace were sized for. The queue's value is the one to keep (WorkQueue sets it to
  twice the work's expected processing time); the pod's is the one to change. Judged only when both values are in the
  plan (a queue of another stack is not).
- `worker-aws-egress`: the NetworkPolicies selecting a worker pod with policyTypes Egress must allow TCP 443 to an
  ipBlock (the VPC's CIDR, where the interface endpoints for SQS, S3 and STS answer): without it the worker reaches no
  AWS API where NetworkPolicy is enforced and never takes a message. When the plan declares the VPC
  (`aws:ec2/vpc:Vpc` with a known `cidrBlock`), the block must overlap it. A pod no Egress policy selects may go
  anywhere (`worker-network-policy` refuses that). The fix depends on whose NetworkPolicy blocks: the component's own
  worker policy (same parent in the plan) is fed by `WorkerAccessArgs.egress_cidrs`; without one
  (`network_policy=False`, the block being e.g. a WorkloadNamespace's default-deny) that argument changes nothing, so
  the fix is a policy of the stack's own for the worker pods' labels, or `network_policy=True`.
"""
from __future__ import annotations

import ipaddress
from typing import Any

from ._components import WORKER_LABEL
from .declare import plan_policy
from .fixes import COMPONENT_PREFIX, MANIFEST_KIND, fix_for, parent_types, stack_kind
from .netpol import NAME_LABEL, NetPol, WorkerPod, network_policies, selects, worker_pods
from .outside import Finding
from .plan import Res, describe_res
from .resources import POD_TEMPLATE_PATHS, SQS_QUEUE, as_int, dig, enumerate_at, fmt, join_path, k8s_kind
from .unknowns import UNKNOWN, unknown_message

VISIBILITY_NAME = "worker-queue-visibility"
EGRESS_NAME = "worker-aws-egress"
VPC = "aws:ec2/vpc:Vpc"
HTTPS_PORT = 443
VISIBILITY_ENV = "VISIBILITY_TIMEOUT"
VISIBILITY_FLAG = "--visibility-timeout"
QUEUE_URL_ENV = "QUEUE_URL"
QUEUE_URL_FLAG = "--queue-url"


def labelled_workers(resources: list[Res]) -> list[tuple[Res, Any, str]]:
    """(resource, plain pod spec, its path) of every pod-bearing resource whose pods carry the worker label."""
    out = []
    for w in worker_pods(resources):
        if not (isinstance(w.labels, dict) and w.labels.get(NAME_LABEL) == WORKER_LABEL):
            own = dig(w.res.props, "metadata", "labels", NAME_LABEL).value
            if own != WORKER_LABEL:
                continue
        pod = dig(w.res.props, *POD_TEMPLATE_PATHS[k8s_kind(w.res.type)])
        if isinstance(pod.value, dict):
            out.append((w.res, pod.value, pod.path))
    return out


# --------------------------------------------------------------------------------------------------------------------
# worker-queue-visibility
# --------------------------------------------------------------------------------------------------------------------

def setting(pod: Any, path: str, flag: str, env: str) -> tuple[Any, str] | None:
    """(value, path) of a worker setting in the pod's containers: the flag (`--x V` or `--x=V`) in command or args
    wins over the env var; None when neither is there."""
    containers = dig(pod, "containers", base=path)
    if containers.unknown:
        return UNKNOWN, containers.path
    from_env = None
    for cpath, container in enumerate_at(containers):
        if not isinstance(container, dict):
            continue
        for field in ("command", "args"):
            argv = dig(container, field, base=cpath)
            if argv.unknown:
                return UNKNOWN, argv.path
            items = argv.value if isinstance(argv.value, list) else []
            for i, arg in enumerate(items):
                if arg == flag and i + 1 < len(items):
                    return items[i + 1], join_path(argv.path, i + 1)
                if isinstance(arg, str) and arg.startswith(flag + "="):
                    return arg.split("=", 1)[1], join_path(argv.path, i)
        envs = dig(container, "env", base=cpath)
        if envs.unknown:
            return UNKNOWN, envs.path
        for epath, var in enumerate_at(envs):
            if isinstance(var, dict) and var.get("name") == env and from_env is None:
                from_env = (var.get("value"), join_path(epath, "value"))
    return from_env


def queue_of(res: Res, url: Any, resources: list[Res]) -> Res | None:
    """The work queue a worker pod consumes: the queue whose `name` is the last part of its URL, else the one queue
    the pod's resource depends on (its URL is then computed from that queue's output)."""
    queues = [r for r in resources if r.type == SQS_QUEUE]
    if isinstance(url, str) and "/" in url:
        named = [q for q in queues if q.props.get("name") == url.rstrip("/").rsplit("/", 1)[-1]]
        if len(named) == 1:
            return named[0]
    mine = [q for q in queues if q.urn in res.dependencies]
    return mine[0] if len(mine) == 1 else None


def visibility_findings(resources: list[Res]) -> list[Finding]:
    """(urn, message) for every worker pod whose visibility timeout differs from its queue's visibilityTimeoutSeconds
    (both in the plan)."""
    out: list[Finding] = []
    for res, pod, path in labelled_workers(resources):
        mine = setting(pod, path, VISIBILITY_FLAG, VISIBILITY_ENV)
        if mine is None:
            continue
        url = setting(pod, path, QUEUE_URL_FLAG, QUEUE_URL_ENV)
        queue = queue_of(res, url[0] if url else None, resources)
        if queue is None:
            continue  # the queue is another stack's: only one of the two values is in the plan
        theirs = dig(queue.props, "visibilityTimeoutSeconds")
        if theirs.missing:
            continue
        value, where = mine
        if value is UNKNOWN or theirs.unknown:
            unknown = where if value is UNKNOWN else f"Queue {queue.name} {theirs.path}"
            out.append((res.urn, unknown_message(unknown, "whether the worker's visibility timeout is its queue's")))
            continue
        pod_s, queue_s = as_int(value), as_int(theirs.value)
        if pod_s is None or queue_s is None or pod_s == queue_s:
            continue
        name = queue.props.get("name") if isinstance(queue.props.get("name"), str) else queue.name
        fix = fix_for(res.urn,
                      platform=f"the platform sets both from gpuburst:workloads.<name>.expectedProcessingS; set the "
                               f"pod's to {queue_s}",
                      component=f"set WorkerPodSettings.visibility_timeout_s={queue_s} (queue.visibility_timeout_s) "
                                "and pass queue_visibility_timeout_s=queue.visibility_timeout_s so synth checks it",
                      manifest=f"set {VISIBILITY_ENV} to {queue_s}")
        out.append((res.urn, f"{describe_res(res)}: the worker's visibility timeout is {fmt(value)} s ({where}) but "
                             f"its queue {name} has visibilityTimeoutSeconds {queue_s}: the worker renews its message "
                             f"on its own clock (first a third of {pod_s} s after receiving it), so a queue timeout "
                             "below that lets a slow slide reappear and be processed twice, and a dead worker's "
                             "message returns on a clock its pod was not sized for; keep the queue's (twice the "
                             f"expected processing time) and change the pod's: {fix}"))
    return out


# --------------------------------------------------------------------------------------------------------------------
# worker-aws-egress
# --------------------------------------------------------------------------------------------------------------------

def _allows_https(ports: Any) -> bool | None:
    """Whether a rule's ports admit TCP 443 (no ports: every port); None when unknown."""
    if ports is UNKNOWN:
        return None
    if not ports:
        return True
    verdict: bool | None = False
    for p in ports if isinstance(ports, list) else []:
        if p is UNKNOWN:
            verdict = None
            continue
        if not isinstance(p, dict) or p.get("protocol", "TCP") not in ("TCP", UNKNOWN):
            continue
        port, end = p.get("port"), p.get("endPort")
        if UNKNOWN in (port, end, p.get("protocol")):
            verdict = None
            continue
        if port is None:
            return True
        low, high = as_int(port), as_int(end) if end is not None else as_int(port)
        if low is not None and high is not None and low <= HTTPS_PORT <= high:
            return True
    return verdict


def _overlaps(cidr: str, vpcs: list[str]) -> bool:
    try:
        net = ipaddress.ip_network(cidr.strip(), strict=False)
        return not vpcs or any(net.overlaps(ipaddress.ip_network(v, strict=False)) for v in vpcs)
    except ValueError:
        return False


def _https_blocks(np_: NetPol, vpcs: list[str]) -> tuple[bool, str | None]:
    """(some egress rule of the policy lets TCP 443 out to an ipBlock overlapping the VPC, or to every destination;
    the path of an unknown value that could)."""
    rules = np_.rules("egress")
    if rules is UNKNOWN:
        return False, f"{np_.who} spec.egress"
    unknown = None
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        path = f"{np_.who} {join_path('spec.egress', i)}"
        if rule is UNKNOWN or not isinstance(rule, dict):
            unknown = unknown or (path if rule is UNKNOWN else None)
            continue
        https = _allows_https(rule.get("ports"))
        if https is None:
            unknown = unknown or f"{path}.ports"
            continue
        if not https:
            continue
        to = rule.get("to")
        if to is UNKNOWN:
            unknown = unknown or f"{path}.to"
            continue
        if not to:
            return True, None  # every destination (worker-network-policy judges that)
        for j, peer in enumerate(to if isinstance(to, list) else []):
            cidr = dig(peer, "ipBlock", "cidr")
            if cidr.unknown:
                unknown = unknown or f"{path}.to[{j}].ipBlock.cidr"
            elif isinstance(cidr.value, str) and _overlaps(cidr.value, vpcs):
                return True, None
    return False, unknown


def egress_findings(resources: list[Res]) -> list[Finding]:
    """(urn, message) for every worker pod whose Egress NetworkPolicies let no HTTPS out to the VPC's endpoints."""
    vpcs = [r.props.get("cidrBlock") for r in resources if r.type == VPC]
    known_vpcs = [v for v in vpcs if isinstance(v, str)]
    nps = network_policies(resources)
    out: list[Finding] = []
    for w in worker_pods(resources):
        if not isinstance(w.labels, dict) or w.labels.get(NAME_LABEL) != WORKER_LABEL:
            continue
        chosen, unknown = [], None
        for np_ in nps:
            if np_.namespace != w.namespace:
                continue
            hit, types = selects(np_.selector, w.labels), np_.types
            if hit is None or (hit and types is None):
                unknown = unknown or f"{np_.who} spec.podSelector / spec.policyTypes"
            elif hit and "Egress" in types:
                chosen.append(np_)
        if not chosen:
            continue  # unrestricted egress: worker-network-policy refuses that
        verdicts = [_https_blocks(np_, known_vpcs) for np_ in chosen]
        if any(ok for ok, _u in verdicts):
            continue
        unknown = unknown or next((u for _ok, u in verdicts if u), None)
        if unknown:
            out.append((w.res.urn, unknown_message(unknown, "whether the worker may send HTTPS to the AWS endpoints")))
            continue
        where = f" overlapping the VPC's {', '.join(known_vpcs)}" if known_vpcs else ""
        out.append((w.res.urn, f"{describe_res(w.res)}'s worker pods ({w.why}) are selected by "
                               f"{', '.join(np_.who for np_ in chosen)}, and no egress rule there allows TCP "
                               f"{HTTPS_PORT} to an ipBlock{where}: the worker reaches none of the VPC endpoints for "
                               f"SQS, S3 and STS, so it never takes a message; {egress_fix(w, nps)}"))
    return out


def own_policies(w: WorkerPod, nps: list[NetPol]) -> list[NetPol]:
    """The NetworkPolicies the worker's own component declared (its worker policy, `network_policy=True`): those
    with the same parent as the pod-bearing resource, a gpuburst component (`GpuScaledJob`, `GpuConsumer`). A plan
    without parent links (a test's, an older plan.json) is read from the URNs: the same chain of parent types."""
    if w.res.parent:
        owner = parent_types(w.res.parent)[-1:]
        if not (owner and owner[0].startswith(COMPONENT_PREFIX)):
            return []
        return [np_ for np_ in nps if np_.res.parent == w.res.parent]
    chain = parent_types(w.res.urn)[:-1]
    if not (chain and chain[-1].startswith(COMPONENT_PREFIX)):
        return []
    return [np_ for np_ in nps if np_.res.parent is None and parent_types(np_.res.urn)[:-1] == chain]


def egress_fix(w: WorkerPod, nps: list[NetPol]) -> str:
    """The fix for a worker with no HTTPS to the VPC, for the stack that declared it and for whose NetworkPolicy
    blocks it: `WorkerAccessArgs.egress_cidrs` feeds only the component's own worker policy, so when the component
    declared none (`network_policy=False`: the blocking one is another's, e.g. a WorkloadNamespace's default-deny)
    the fix is a policy of the stack's own for the worker pods, or the component's policy turned on."""
    labels = w.labels if isinstance(w.labels, dict) else {}
    selector = ", ".join(f"{k}: {fmt(v)}" for k, v in sorted(labels.items())) or "the worker pods' labels"
    own_policy_fix = "pass WorkerAccessArgs.egress_cidrs=[the cluster's VPC CIDR]"
    if not own_policies(w, nps):
        own_policy_fix = (
            "the component declares no NetworkPolicy of its own here (network_policy=False), so "
            "WorkerAccessArgs.egress_cidrs would change nothing: add a NetworkPolicy in namespace "
            f"{w.namespace} with podSelector.matchLabels {{{selector}}} and policyTypes [Egress] that allows TCP "
            f"{HTTPS_PORT} to an ipBlock of the cluster's VPC CIDR (the platform's VPC CIDR), beside DNS and the "
            "Pod Identity agent as the component's own worker policy does, or set network_policy=True with "
            "WorkerAccessArgs.egress_cidrs=[the cluster's VPC CIDR]")
    # The pod-bearing resource's parent, when a gpuburst component, says the stack kind even where the plan's URNs
    # name only the nearest parent's type (a plan.json written before the synth's URNs carried the whole chain).
    kind_urn = w.res.parent if w.res.parent and stack_kind(w.res.parent) != MANIFEST_KIND else w.res.urn
    return fix_for(kind_urn,
                   platform="the platform passes its VPC's CIDR (gpuburst:vpcCidr, or ExistingNetwork.vpc_cidr)",
                   component=own_policy_fix,
                   manifest=f"add an egress rule to an ipBlock of the VPC's CIDR on TCP {HTTPS_PORT}")


VISIBILITY_POLICY = plan_policy(
    VISIBILITY_NAME, "A worker pod's visibility timeout (VISIBILITY_TIMEOUT, --visibility-timeout) equals its queue's "
                     "visibilityTimeoutSeconds when both are in the plan.", visibility_findings)
EGRESS_POLICY = plan_policy(
    EGRESS_NAME, "The NetworkPolicies limiting a worker pod's egress allow TCP 443 to the VPC's CIDR (the endpoints "
                 "for SQS, S3 and STS).", egress_findings)

POLICIES = [VISIBILITY_POLICY, EGRESS_POLICY]
