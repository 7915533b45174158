"""Tests for the network readers: worker pods, label selection, default-deny, and the egress rules that reach the
internet."""
from __future__ import annotations

from policies import netpol
from policies.plan import Res
from policies.unknowns import UNKNOWN
from tests.policies import fragments as F


def policy(spec: dict) -> netpol.NetPol:
    props = {"metadata": {"name": "p", "namespace": "gpu"}, "spec": spec}
    return netpol.network_policies([Res(F.T_NETPOL, "urn:p", "p", None, props)])[0]


def test_selection():
    labels = {"app.kubernetes.io/name": "gpuburst-worker", "tier": "gpu"}
    assert netpol.selects({}, labels) is True
    assert netpol.selects({"matchLabels": {"tier": "gpu"}}, labels) is True
    assert netpol.selects({"matchLabels": {"tier": "cpu"}}, labels) is False
    assert netpol.selects({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]}, labels)
    assert netpol.selects({"matchExpressions": [{"key": "x", "operator": "Exists"}]}, labels) is False
    assert netpol.selects({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}, labels) is True
    assert netpol.selects(UNKNOWN, labels) is None and netpol.selects({}, UNKNOWN) is None
    assert netpol.requires_worker_label({"matchLabels": {"app.kubernetes.io/name": "gpuburst-worker"}})
    assert not netpol.requires_worker_label({})


def test_policy_types_default_as_kubernetes_does():
    assert policy({"podSelector": {}}).types == {"Ingress"}
    assert policy({"podSelector": {}, "egress": []}).types == {"Ingress", "Egress"}
    assert policy({"policyTypes": ["Egress"]}).types == {"Egress"}
    assert policy({"policyTypes": UNKNOWN}).types is None


def test_default_deny():
    assert netpol.is_default_deny(policy(F.default_deny()["spec"]))
    assert not netpol.is_default_deny(policy({"podSelector": {}, "policyTypes": ["Ingress"]}))
    assert not netpol.is_default_deny(policy({**F.default_deny()["spec"], "egress": [{}]}))


def test_wide_blocks():
    assert netpol.wide_cidr("0.0.0.0/0") == netpol.wide_cidr("::/0") == "is every address, the internet included"
    assert "wider than any private range" in netpol.wide_cidr("0.0.0.0/1")
    assert "wider than any private range (/7)" in netpol.wide_cidr("::/1")
    assert netpol.wide_cidr("10.0.0.0/8") is None and netpol.wide_cidr("fc00::/7") is None
    assert netpol.wide_cidr("169.254.170.23/32") is None and netpol.wide_cidr("203.0.113.0/24") is None
    assert netpol.wide_cidr("nope") == "is not a CIDR"


def test_egress_openings():
    open_ = policy({"policyTypes": ["Egress"], "egress": [
        {"ports": [{"port": 53, "protocol": "UDP"}]}, {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}, {}]})
    assert [o.path for o in netpol.egress_openings(open_)] == ["spec.egress[1].to[0].ipBlock.cidr", "spec.egress[2]"]
    assert netpol.egress_openings(policy({"policyTypes": ["Ingress"], "egress": [{}]})) == []
    (unknown,) = netpol.egress_openings(policy({"policyTypes": ["Egress"], "egress": UNKNOWN}))
    assert unknown.unknown and unknown.path == "spec.egress"


def test_worker_pods_by_label_or_gpu():
    job = Res(F.T_SCALEDJOB, "urn:j", "slides", None, F.scaled_job())
    (found,) = netpol.worker_pods([job])
    assert found.namespace == "gpu" and found.labels == F.WORKER_LABELS
    assert found.labels_path == "spec.jobTargetRef.template.metadata.labels"
    cpu = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    assert netpol.worker_pods([Res(F.T_DEPLOYMENT, "urn:d", "web", None, cpu)]) == []
