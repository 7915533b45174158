"""What the network rules read from a plan: the worker pods (the worker label, or a GPU request), the NetworkPolicies,
which pods a NetworkPolicy selects, and what its egress rules let out."""
from __future__ import annotations

import ipaddress
from typing import Any, NamedTuple

from ._components import WORKER_LABEL
from .identity import is_placeholder, workload_pods
from .plan import Res, meta_name, meta_namespace
from .resources import POD_TEMPLATE_PATHS, dig, fmt, join_path, k8s_kind
from .schedulability import gpu_pods
from .unknowns import UNKNOWN

NETWORK_POLICY = ("networking.k8s.io", "NetworkPolicy")
NAME_LABEL = "app.kubernetes.io/name"
"""The label whose value WORKER_LABEL marks a worker pod."""
DEFAULT_NAMESPACE = "default"
"""Where a namespaced object without metadata.namespace lands (the Kubernetes provider's default)."""
DNS_PORT = 53
WIDEST_PRIVATE_PREFIX = {4: 8, 6: 7}
"""No private range is wider than 10.0.0.0/8 (IPv4) or fc00::/7 (IPv6): a block wider than that holds public
addresses whatever else it holds."""


class WorkerPod(NamedTuple):
    """A pod-bearing resource whose pods run the worker (parse slides)."""

    res: Res
    namespace: str
    labels: Any
    """The pods' labels (a dict, UNKNOWN when unknown during preview)."""
    labels_path: str
    why: str
    """Why it is a worker: the label, or the GPU request."""


def _labels_path(kind: tuple[str, str]) -> tuple[str, ...]:
    return POD_TEMPLATE_PATHS[kind][:-1] + ("metadata", "labels")


def worker_pods(resources: list[Res]) -> list[WorkerPod]:
    """Every pod-bearing resource labelled `app.kubernetes.io/name: WORKER_LABEL` (its pods or itself) or whose pods
    request a GPU (the warm floor's pause placeholders aside: they run no code of ours)."""
    gpu = {r.urn for r, pod, _path in gpu_pods(resources) if not is_placeholder(pod)}
    out = []
    for r, ns, _sa, _path in workload_pods(resources):
        kind = k8s_kind(r.type)
        if kind not in POD_TEMPLATE_PATHS:
            continue  # an unrendered chart's controller
        labels = dig(r.props, *_labels_path(kind))
        own = dig(r.props, "metadata", "labels", NAME_LABEL).value
        value = labels.value.get(NAME_LABEL) if isinstance(labels.value, dict) else None
        if WORKER_LABEL in (value, own):
            why = f"{NAME_LABEL} = {fmt(WORKER_LABEL)}"
        elif r.urn in gpu:
            why = "its pods request a GPU"
        else:
            continue
        out.append(WorkerPod(r, ns or DEFAULT_NAMESPACE, labels.value if labels.value is not None else {},
                             labels.path, why))
    return out


class NetPol(NamedTuple):
    """A NetworkPolicy of the plan."""

    res: Res
    namespace: str
    name: str

    @property
    def who(self) -> str:
        return f"NetworkPolicy {self.namespace}/{self.name}"

    @property
    def selector(self) -> Any:
        """spec.podSelector ({} when absent: every pod of the namespace)."""
        found = dig(self.res.props, "spec", "podSelector")
        return {} if found.missing else found.value

    @property
    def types(self) -> set[str] | None:
        """The policy types in effect (Kubernetes' defaults when unset); None when unknown during preview."""
        found = dig(self.res.props, "spec", "policyTypes")
        if found.unknown:
            return None
        if found.missing:
            egress = dig(self.res.props, "spec", "egress")
            return None if egress.unknown else {"Ingress"} | ({"Egress"} if not egress.missing else set())
        items = found.value if isinstance(found.value, list) else [found.value]
        return None if UNKNOWN in items else {str(t) for t in items}

    def rules(self, direction: str) -> Any:
        """spec.ingress / spec.egress ([] when absent; UNKNOWN when unknown)."""
        found = dig(self.res.props, "spec", direction)
        return [] if found.missing else found.value


def network_policies(resources: list[Res]) -> list[NetPol]:
    out = []
    for r in resources:
        if k8s_kind(r.type) == NETWORK_POLICY:
            ns, name = meta_namespace(r.props), meta_name(r.props)
            out.append(NetPol(r, ns if isinstance(ns, str) else DEFAULT_NAMESPACE,
                              name if isinstance(name, str) else r.name))
    return out


def selects(selector: Any, labels: Any) -> bool | None:
    """Whether a label selector matches these labels (None when either is unknown during preview)."""
    if selector is UNKNOWN or labels is UNKNOWN:
        return None
    if not isinstance(selector, dict):
        return False
    labels = labels if isinstance(labels, dict) else {}
    match = selector.get("matchLabels") or {}
    if match is UNKNOWN:
        return None
    verdict: bool | None = True
    for key, value in match.items():
        if value is UNKNOWN or labels.get(key) is UNKNOWN:
            verdict = None
        elif labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        if expr is UNKNOWN or not isinstance(expr, dict) or UNKNOWN in (expr.get("key"), expr.get("operator")):
            verdict = None
            continue
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        have = labels.get(key)
        if have is UNKNOWN or values is UNKNOWN:
            verdict = None
            continue
        ok = {"In": have in values, "NotIn": have not in values, "Exists": key in labels,
              "DoesNotExist": key not in labels}.get(op, False)
        if not ok:
            return False
    return verdict


def is_empty_selector(selector: Any) -> bool:
    """podSelector {}: every pod of the namespace."""
    return isinstance(selector, dict) and not selector.get("matchLabels") and not selector.get("matchExpressions")


def requires_worker_label(selector: Any) -> bool:
    """Whether the selector only matches pods labelled as workers (so the policy is a worker policy even when the
    workers are another stack's)."""
    if not isinstance(selector, dict):
        return False
    match = selector.get("matchLabels")
    if isinstance(match, dict) and match.get(NAME_LABEL) == WORKER_LABEL:
        return True
    for expr in selector.get("matchExpressions") or []:
        if isinstance(expr, dict) and expr.get("key") == NAME_LABEL and expr.get("operator") == "In" \
                and expr.get("values") == [WORKER_LABEL]:
            return True
    return False


def is_default_deny(np_: NetPol) -> bool:
    """podSelector {}, policyTypes Ingress and Egress, no rule in either: nothing in, nothing out."""
    types = np_.types
    return is_empty_selector(np_.selector) and types is not None and {"Ingress", "Egress"} <= types \
        and np_.rules("ingress") == [] and np_.rules("egress") == []


def _dns_only(ports: Any) -> bool:
    if not isinstance(ports, list) or not ports:
        return False
    for p in ports:
        if not isinstance(p, dict) or p.get("port") not in (DNS_PORT, float(DNS_PORT), str(DNS_PORT)):
            return False
        if p.get("endPort") not in (None, DNS_PORT, float(DNS_PORT)):
            return False
        if p.get("protocol", "TCP") not in ("TCP", "UDP"):
            return False
    return True


def _fmt_ports(ports: Any) -> str:
    if not isinstance(ports, list) or not ports:
        return "every port"
    shown = []
    for p in ports:
        if isinstance(p, dict):
            port = p.get("port", "any")
            port = int(port) if isinstance(port, float) and port.is_integer() else port
            end = f"-{p['endPort']}" if p.get("endPort") else ""
            shown.append(f"{port}{end}/{p.get('protocol', 'TCP')}")
    return "ports " + ", ".join(shown)


def wide_cidr(cidr: str) -> str | None:
    """Why an ipBlock lets a pod out to the internet (None when it does not): 0.0.0.0/0 and ::/0 are every address;
    a block wider than any private range holds public addresses. `except` does not narrow it enough to matter: the
    rest of the internet stays open."""
    try:
        net = ipaddress.ip_network(cidr.strip(), strict=False)
    except ValueError:
        return "is not a CIDR"
    if net.prefixlen == 0:
        return "is every address, the internet included"
    if net.prefixlen < WIDEST_PRIVATE_PREFIX[net.version]:
        return f"is wider than any private range (/{WIDEST_PRIVATE_PREFIX[net.version]}), so it holds public addresses"
    return None


class Opening(NamedTuple):
    """One way an egress rule lets a pod out to the internet (or a value unknown during preview that may)."""

    path: str
    message: str
    unknown: bool = False


def egress_openings(np_: NetPol) -> list[Opening]:
    """The egress rules of a policy that reach the internet: an ipBlock of 0.0.0.0/0, ::/0 or wider than any private
    range (with or without `except`), or a rule with no `to` (every destination) on ports other than DNS."""
    types = np_.types
    if types is None:
        return [Opening("spec.policyTypes", "", True)]
    if "Egress" not in types:
        return []
    rules = np_.rules("egress")
    if rules is UNKNOWN:
        return [Opening("spec.egress", "", True)]
    out = []
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        path = join_path("spec.egress", i)
        if rule is UNKNOWN or not isinstance(rule, dict):
            out += [Opening(path, "", True)] if rule is UNKNOWN else []
            continue
        to, ports = rule.get("to"), rule.get("ports")
        if to is UNKNOWN or ports is UNKNOWN:
            out.append(Opening(join_path(path, "to" if to is UNKNOWN else "ports"), "", True))
            continue
        if not to:
            if not _dns_only(ports):
                out.append(Opening(path, f"{path} has no `to` (every destination, the internet included) on "
                                         f"{_fmt_ports(ports)}"))
            continue
        for j, peer in enumerate(to if isinstance(to, list) else []):
            cidr = dig(peer, "ipBlock", "cidr", base=join_path(join_path(path, "to"), j))
            if cidr.unknown:
                out.append(Opening(cidr.path, "", True))
            elif isinstance(cidr.value, str) and (why := wide_cidr(cidr.value)):
                out.append(Opening(cidr.path, f"{cidr.path} = {fmt(cidr.value)} {why}"))
    return out
