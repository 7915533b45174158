"""Tests for `pod-identity-unique`: a second Pod Identity association for one cluster, namespace and ServiceAccount
is refused before EKS refuses it at apply time."""
from __future__ import annotations

from policies import pod_identity as rule
from policies.plan import Res
from policies.unknowns import UNKNOWN

T = "aws:eks/podIdentityAssociation:PodIdentityAssociation"


def assoc(name: str, ns="lab-tils", sa="tils-worker", cluster="gpuburst-dev",
          role="arn:aws:iam::123456789012:role/tils-worker") -> Res:
    return Res(T, f"urn:pulumi:lab::tils-lab::{T}::{name}", name, None,
               {"clusterName": cluster, "namespace": ns, "serviceAccount": sa, "roleArn": role})


def test_a_second_association_for_one_service_account_is_refused_naming_both():
    first, second = assoc("tils-worker-association"), assoc("extra", role="arn:aws:iam::123456789012:role/extra")
    (urn, message), = rule.unique_findings([first, second])
    assert urn == second.urn
    assert "lab-tils/tils-worker" in message and "'gpuburst-dev'" in message
    assert "tils-worker-association" in message and "role/extra" in message and "ResourceInUseException" in message
    assert "\n" not in message


def test_other_service_accounts_namespaces_or_clusters_pass():
    assert rule.unique_findings([assoc("a"), assoc("b", sa="other"), assoc("c", ns="other"),
                                 assoc("d", cluster="other")]) == []


def test_an_unknown_cluster_with_the_same_service_account_is_said_to_be_unknown():
    (_urn, message), = rule.unique_findings([assoc("a"), assoc("b", cluster=UNKNOWN)])
    assert "unknown during preview" in message and "lab-tils/tils-worker" in message


def test_three_are_two_findings():
    assert len(rule.unique_findings([assoc("a"), assoc("b"), assoc("c")])) == 2
