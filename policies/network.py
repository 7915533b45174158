"""Stack rules `worker-network-policy` and `network-policy-enforced`: the pods that parse untrusted slides cannot reach
the internet, and the VPC CNI really enforces the NetworkPolicies that say so.

The threat: a worker decodes TIFF/SVS/NDPI/DICOM files it did not write (tifffile, OpenSlide, wsidicom, their
codecs). A crafted slide that exploits one of those parsers runs code as the worker, with the worker's credentials
and every clinical slide the worker may read. Without an egress boundary it copies them to any address on the
internet. `worker-network-policy` requires that every namespace running worker pods (labelled
`app.kubernetes.io/name: gpuburst-worker`, or requesting a GPU) has a NetworkPolicy with policyTypes Egress
selecting them and a default-deny NetworkPolicy, and that no egress rule of a policy selecting them opens
`0.0.0.0/0`, `::/0` (or any block wider than a private range, `except` or not) or every destination on ports other
than DNS. `network-policy-enforced` requires that the VPC CNI enforces them at all: a NetworkPolicy is an inert
object unless `eks:index:Cluster` sets `vpcCniOptions.enableNetworkPolicy: true` or an `aws:eks/addon:Addon`
`vpc-cni` has `configurationValues` `{"enableNetworkPolicy": "true"}`, and that its agent runs in strict mode
(`env.NETWORK_POLICY_ENFORCING_MODE: strict` in those configuration values, or in the Cluster's
`vpcCniOptions.configurationValues`): in the default standard mode a new pod starts with a default allow until its
policies are programmed, so a worker talks to any address in that window (EKS User Guide, "Restrict Pod network
traffic with Kubernetes network policies"; aws/amazon-vpc-cni-k8s README, `NETWORK_POLICY_ENFORCING_MODE`).

In a partial plan the cluster (and so the CNI) may be another stack's: the rule then reads the fact
`networkPolicyEnforced` (ExistingCluster or policy config; it does not say the mode, which that stack's own plan
judges) and otherwise yields an `Outside`; a namespace the plan
neither creates nor holds a default-deny policy for is another stack's too.
"""
from __future__ import annotations

import json
from typing import Any

from .declare import scoped_policy
from .facts import WHOLE, Scope
from .identity import NAMESPACE, namespaces_created, workload_pods
from .netpol import (
    DEFAULT_NAMESPACE,
    NetPol,
    WorkerPod,
    egress_openings,
    is_default_deny,
    is_empty_selector,
    network_policies,
    requires_worker_label,
    selects,
    worker_pods,
)
from .outside import Finding, Outside
from .plan import Res, describe_res, meta_name
from .resources import CLUSTER_TYPES, dig, fmt, is_true_string, k8s_kind
from .unknowns import UNKNOWN, unknown_message

WORKER_POLICY_NAME = "worker-network-policy"
ENFORCED_NAME = "network-policy-enforced"
ADDON = "aws:eks/addon:Addon"
VPC_CNI = "vpc-cni"
EKS_COMPONENT_CLUSTER = "eks:index:Cluster"
ENABLE = '{"enableNetworkPolicy": "true", "env": {"NETWORK_POLICY_ENFORCING_MODE": "strict"}}'
"""The vpc-cni add-on's configurationValues that turn its network policy agent on, in strict mode."""
MODE = "NETWORK_POLICY_ENFORCING_MODE"
STRICT = "strict"
STANDARD_WINDOW = ("in standard mode a new pod starts with a default allow until its policies are programmed, so a "
                   "worker reaches any address in that window")
INTERNET = "an exploited slide parser can copy slides out through it"


def _names(items: list[Res]) -> str:
    return ", ".join(describe_res(r) for r in items)


def _coverage(w: WorkerPod, nps: list[NetPol]) -> Finding | None:
    """The worker pod's violation when no policy with policyTypes Egress selects it (unknown: the field)."""
    unknown_at = None
    for np_ in nps:
        if np_.namespace != w.namespace:
            continue
        chosen, types = selects(np_.selector, w.labels), np_.types
        if chosen is None:
            unknown_at = unknown_at or (f"{np_.who} spec.podSelector" if np_.selector is UNKNOWN else w.labels_path)
        elif chosen and types is None:
            unknown_at = unknown_at or f"{np_.who} spec.policyTypes"
        elif chosen and "Egress" in types:
            return None
    if unknown_at:
        return (w.res.urn, unknown_message(unknown_at, f"which NetworkPolicy limits the egress of "
                                                       f"{describe_res(w.res)}'s worker pods"))
    return (w.res.urn, f"{describe_res(w.res)} runs worker pods ({w.why}) that no NetworkPolicy with policyTypes "
                       f"Egress in namespace {w.namespace} selects: they reach any address, the internet included, "
                       "so an exploited slide parser can copy slides out; declare the worker NetworkPolicy (egress "
                       "only to DNS, the Pod Identity agent and the VPC CIDR)")


def _default_deny(resources: list[Res], nps: list[NetPol], ns: str, workers: list[WorkerPod],
                  scope: Scope) -> Finding | Outside | None:
    if any(np_.namespace == ns and is_default_deny(np_) for np_ in nps):
        return None
    names = _names([w.res for w in workers])
    created = next((r for r in resources if k8s_kind(r.type) == NAMESPACE and meta_name(r.props) == ns), None)
    if scope.whole or ns in namespaces_created(resources):
        return ((created or workers[0].res).urn,
                f"namespace {ns} runs worker pods ({names}) but has no default-deny NetworkPolicy (podSelector {{}}, "
                "policyTypes [Ingress, Egress], no rules): a pod there that no other policy selects (a debug pod, a "
                "new workload) reaches any address; declare one")
    return Outside(workers[0].res.urn, f"namespace {ns} runs worker pods ({names}), and this plan neither creates "
                                       "it nor declares a default-deny NetworkPolicy there: could not check that "
                                       f"another stack denies all traffic by default in {ns}")


def worker_policy_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) for every worker pod no egress policy selects, every namespace of worker pods without a
    default-deny policy, and every egress rule of a policy selecting worker pods that reaches the internet."""
    workers = worker_pods(resources)
    nps = network_policies(resources)
    out: list[Finding | Outside] = []
    for w in workers:
        found = _coverage(w, nps)
        if found:
            out.append(found)
    for np_ in nps:
        chosen = [w for w in workers if w.namespace == np_.namespace and selects(np_.selector, w.labels)]
        maybe = [w for w in workers if w.namespace == np_.namespace and selects(np_.selector, w.labels) is None]
        openings = egress_openings(np_)
        if chosen or requires_worker_label(np_.selector):
            whom = _names([w.res for w in chosen]) or "pods labelled as workers"
            for o in openings:
                out.append((np_.res.urn, unknown_message(f"{np_.who} {o.path}", "whether it lets worker pods out to "
                                                                                 "the internet")) if o.unknown else
                           (np_.res.urn, f"{np_.who} selects worker pods ({whom}) and {o.message}: {INTERNET}; allow "
                                         "only DNS, the Pod Identity agent and the VPC CIDR (S3 and SQS through VPC "
                                         "endpoints)"))
        elif maybe and any(not o.unknown for o in openings):
            out.append((np_.res.urn, unknown_message(f"{np_.who} spec.podSelector (or the pods' labels)",
                                                     "whether this policy, which lets pods out to the internet, "
                                                     f"selects worker pods ({_names([w.res for w in maybe])})")))
        elif not scope.whole and is_empty_selector(np_.selector) and not _runs_pods(resources, np_.namespace):
            shown = next((o for o in openings if not o.unknown), None)
            if shown:
                out.append(Outside(np_.res.urn, f"{np_.who} selects every pod of namespace {np_.namespace} "
                                                f"(podSelector {{}}) and {shown.message}, and this plan runs no pod "
                                                "there: could not check that no worker pod of another stack runs in "
                                                f"{np_.namespace}"))
    by_ns: dict[str, list[WorkerPod]] = {}
    for w in workers:
        by_ns.setdefault(w.namespace, []).append(w)
    for ns, ws in by_ns.items():
        found = _default_deny(resources, nps, ns, ws, scope)
        if found:
            out.append(found)
    return out


def _runs_pods(resources: list[Res], ns: str) -> bool:
    return any((p_ns or DEFAULT_NAMESPACE) == ns for p, p_ns, _sa, _path in workload_pods(resources)
               if not p.type.startswith("kubernetes:helm.sh/"))


# --------------------------------------------------------------------------------------------------------------------
# network-policy-enforced
# --------------------------------------------------------------------------------------------------------------------

def _addon_verdict(addon: Res) -> tuple[bool, str | None]:
    """(enforces NetworkPolicy, the violation when it does not) for a vpc-cni Addon."""
    values = addon.props.get("configurationValues")
    field = f"Addon {addon.name} configurationValues"
    if values is UNKNOWN:
        return False, unknown_message(field, "whether the VPC CNI enforces NetworkPolicies")
    if isinstance(values, str):
        try:
            values = json.loads(values) if values.strip() else {}
        except ValueError as e:
            return False, f"{field} is not JSON ({e}): the VPC CNI add-on rejects it; set {ENABLE}"
    flag = values.get("enableNetworkPolicy") if isinstance(values, dict) else None
    if flag is UNKNOWN:
        return False, unknown_message(f"{field} enableNetworkPolicy", "whether the VPC CNI enforces NetworkPolicies")
    if flag is True or is_true_string(flag):
        problem = _mode_problem(values.get("env") if isinstance(values, dict) else None, f"{field} env",
                                f"set configurationValues {ENABLE}")
        return problem is None, problem
    shown = "is not set (the add-on's default is 'false')" if flag is None else f"= {fmt(flag)}"
    return False, (f"{field} enableNetworkPolicy {shown}: the VPC CNI does not enforce NetworkPolicies, so the "
                   f"worker pods' egress policies are inert; set configurationValues {ENABLE}")


def _mode_problem(env: Any, where: str, fix: str) -> str | None:
    """The violation when the VPC CNI's environment `env` (at `where`) does not set the strict enforcing mode."""
    if env is UNKNOWN:
        return unknown_message(where, "the VPC CNI's network policy enforcing mode")
    mode = env.get(MODE) if isinstance(env, dict) else None
    if mode is UNKNOWN:
        return unknown_message(f"{where}.{MODE}", "the VPC CNI's network policy enforcing mode")
    if mode == STRICT:
        return None
    shown = "is not set (the default is 'standard')" if mode is None else f"= {fmt(mode)}"
    return f"{where}.{MODE} {shown}: {STANDARD_WINDOW}; {fix}"


def _cluster_mode_problem(c: Res, who: str) -> str | None:
    """The mode violation of an eks:index:Cluster whose vpcCniOptions turn network policy on."""
    values = dig(c.props, "vpcCniOptions", "configurationValues")
    if values.unknown:
        return unknown_message(f"{who} {values.path}", "the VPC CNI's network policy enforcing mode")
    config = values.value
    if isinstance(config, str):
        try:
            config = json.loads(config) if config.strip() else {}
        except ValueError as e:
            return f"{who} {values.path} is not JSON ({e}): the VPC CNI add-on rejects it"
    env = config.get("env") if isinstance(config, dict) else None
    return _mode_problem(env, f"{who} {values.path}.env",
                         f"set vpcCniOptions.configurationValues {{\"env\": {{\"{MODE}\": \"{STRICT}\"}}}}")


def _cluster_name(c: Res) -> Any:
    name = c.props.get("name")
    return name if name is not None else c.name


def _belongs(addon: Res, cluster: Res, clusters: list[Res]) -> bool:
    return len(clusters) == 1 or cluster.urn in addon.dependencies or addon.props.get("clusterName") == \
        _cluster_name(cluster)


def enforcement_findings(resources: list[Res], scope: Scope = WHOLE) -> list[Finding | Outside]:
    """(urn, message) when the plan has NetworkPolicies or worker pods but nothing makes the VPC CNI enforce them:
    a vpc-cni Addon without enableNetworkPolicy "true", a cluster with neither form; in a partial plan without a
    cluster, the fact networkPolicyEnforced (an `Outside` when no fact says)."""
    nps = network_policies(resources)
    workers = worker_pods(resources)
    if not nps and not workers:
        return []
    what = f"{', '.join(np_.who for np_ in nps)} {'are' if len(nps) > 1 else 'is'}" if nps else \
        f"a NetworkPolicy for {_names([w.res for w in workers])} would be"
    out: list[Finding | Outside] = []
    addons = [r for r in resources if r.type == ADDON and r.props.get("addonName") == VPC_CNI]
    unnamed = [r for r in resources if r.type == ADDON and r.props.get("addonName") is UNKNOWN]
    enabling = []
    for addon in addons:
        ok, problem = _addon_verdict(addon)
        if ok:
            enabling.append(addon)
        elif problem:
            out.append((addon.urn, problem))
    clusters = [r for r in resources if r.type in CLUSTER_TYPES]
    for c in clusters:
        if any(_belongs(a, c, clusters) for a in addons):
            continue  # an enabling add-on, or one whose problem is reported above
        who = f"{c.type.rsplit(':', 1)[-1]} {c.name}"
        flag = dig(c.props, "vpcCniOptions", "enableNetworkPolicy") if c.type == EKS_COMPONENT_CLUSTER else None
        if flag is not None and flag.unknown:
            out.append((c.urn, unknown_message(f"{who} {flag.path}", "whether the VPC CNI enforces NetworkPolicies")))
            continue
        if flag is not None and (flag.value is True or is_true_string(flag.value)):
            problem = _cluster_mode_problem(c, who)
            if problem:
                out.append((c.urn, problem))
            continue
        maybe = next((a for a in unnamed if _belongs(a, c, clusters)), None)
        if maybe is not None:
            out.append((maybe.urn, unknown_message(f"Addon {maybe.name} addonName",
                                                   f"whether it is the {VPC_CNI} add-on enforcing NetworkPolicies")))
            continue
        if flag is None:
            said, fix = "has no", f"add the {VPC_CNI!r} add-on with configurationValues {ENABLE}"
        else:
            shown = "is not set" if flag.missing else f"= {fmt(flag.value)}"
            said, fix = f"{flag.path} {shown} and no", "set vpcCniOptions.enableNetworkPolicy: true"
        out.append((c.urn, f"{who} {said} aws:eks/addon:Addon {VPC_CNI!r} sets configurationValues "
                           f"enableNetworkPolicy 'true': the VPC CNI does not enforce NetworkPolicies, so {what} "
                           f"inert and worker pods reach any address; {fix}"))
    if clusters or addons:
        return out
    if unnamed:
        return [(unnamed[0].urn, unknown_message(f"Addon {unnamed[0].name} addonName",
                                                 f"whether it is the {VPC_CNI} add-on enforcing NetworkPolicies"))]
    if scope.whole:
        return [(nps[0].res.urn if nps else workers[0].res.urn,
                 f"the plan has no cluster ({', '.join(CLUSTER_TYPES)}) nor {VPC_CNI!r} add-on: nothing makes the "
                 f"VPC CNI enforce NetworkPolicies, so {what} inert")]
    fact = scope.value("networkPolicyEnforced")
    if fact is True:
        return []
    urn = nps[0].res.urn if nps else workers[0].res.urn
    if fact is False:
        return [(urn, f"the cluster does not enforce NetworkPolicies ({scope.source('networkPolicyEnforced')}: "
                      f"false), so {what} inert and worker pods reach any address; enable the VPC CNI's network "
                      "policy on that cluster")]
    return [Outside(urn, f"the cluster is not in this plan: could not check that its VPC CNI enforces "
                         f"NetworkPolicies ({what} inert otherwise)", ("networkPolicyEnforced",))]


WORKER_POLICY = scoped_policy(
    WORKER_POLICY_NAME, "Every namespace running worker pods (the worker label, or a GPU request) has a NetworkPolicy "
                        "with policyTypes Egress selecting them and a default-deny NetworkPolicy; no egress rule of a "
                        "policy selecting them reaches 0.0.0.0/0, ::/0 or every destination beyond DNS.",
    worker_policy_findings)
ENFORCED_POLICY = scoped_policy(
    ENFORCED_NAME, "NetworkPolicies are enforced, in strict mode: eks:index:Cluster vpcCniOptions.enableNetworkPolicy "
                   "true with configurationValues env NETWORK_POLICY_ENFORCING_MODE strict, or a vpc-cni "
                   "aws:eks/addon:Addon with configurationValues enableNetworkPolicy \"true\" and that env (in a "
                   "partial plan, the fact networkPolicyEnforced).",
    enforcement_findings, ("networkPolicyEnforced",))

POLICIES = [WORKER_POLICY, ENFORCED_POLICY]
