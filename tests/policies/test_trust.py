"""Tests for `pod-identity-trust-conditioned` and `pod-identity-trust-session-tags`: a role EKS Pod Identity may
assume is bound to the account, the cluster and (advised) the ServiceAccount, and still admits its own associations."""
from __future__ import annotations

import copy

import pytest

from policies import trust
from policies.harness import UNKNOWN_STRING as U
from tests.policies import clinical_fragments as C
from tests.policies import fragments as F

CONDITIONED = trust.conditioned_findings
WHERE = "Role slides-worker-role assumeRolePolicy.Statement[0]"


def session_tags(*entries: dict) -> list[str]:
    return [m for _u, m in trust.session_tag_findings(F.as_res(F.doc(*entries)))]


def role_with(**condition) -> dict:
    return C.worker_role(C.pod_identity_trust(**condition))


def test_the_components_trust_policy_passes_both_rules():
    for as_json in (True, False):
        plan = (C.worker_role(C.pod_identity_trust(), as_json=as_json), C.association())
        assert C.judge(CONDITIONED, *plan) == ([], [])
        assert session_tags(*plan) == []


def test_roles_that_do_not_trust_pod_identity_are_not_judged():
    ec2 = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                                                   "Action": "sts:AssumeRole"}]}
    scaler = F.trust(F.OPERATOR_ARN)
    tag_only = copy.deepcopy(C.unconditioned_trust())
    tag_only["Statement"][0]["Action"] = "sts:TagSession"
    plan = (C.worker_role(ec2, "node"), F.entry(F.T_ROLE, "scaler", {"assumeRolePolicy": scaler}),
            C.worker_role(tag_only, "tags"), C.worker_role(U, "unknown-and-unused"))
    assert C.judge(CONDITIONED, *plan) == ([], []) and session_tags(*plan) == []
    for fragment in (F.workload(), F.lone_trigger_auth(), F.chart_fragment("keda")):
        assert C.judge(CONDITIONED, *fragment["resources"]) == ([], [])


def test_an_unconditioned_pod_identity_trust_policy_is_mandatory_naming_the_role_and_each_key():
    plan = (C.worker_role(C.unconditioned_trust()), C.association())
    violations, outside = C.judge(CONDITIONED, *plan)
    assert outside == [] and len(violations) == 2
    account, arn = violations
    assert account.startswith(f"{WHERE} trusts Service 'pods.eks.amazonaws.com' with no condition on "
                              "aws:SourceAccount: any EKS cluster whose Pod Identity association names the role")
    assert arn.startswith(f"{WHERE} trusts Service 'pods.eks.amazonaws.com' with no condition on aws:SourceArn: ")
    assert 'add "ArnEquals": {"aws:SourceArn": "arn:aws:eks:<region>:<account>:cluster/<name>"}' in arn
    (advice,) = session_tags(*plan)
    assert advice.startswith(f"{WHERE} trusts Service 'pods.eks.amazonaws.com' with no condition on "
                             "aws:RequestTag/kubernetes-namespace, aws:RequestTag/kubernetes-service-account")


@pytest.mark.parametrize("condition,missing,why", [
    ({"StringEquals": {"aws:SourceAccount": C.ACCOUNT}}, "aws:SourceArn", None),
    ({"ArnLike": {"aws:SourceArn": C.CLUSTER_ARN}}, "aws:SourceAccount", None),
    ({"StringEqualsIfExists": {"aws:SourceAccount": C.ACCOUNT}, "ArnEquals": {"aws:SourceArn": C.CLUSTER_ARN}},
     "aws:SourceAccount", "StringEqualsIfExists holds when the key is absent"),
    ({"ForAllValues:StringEquals": {"aws:SourceAccount": C.ACCOUNT}, "ArnEquals": {"aws:SourceArn": C.CLUSTER_ARN}},
     "aws:SourceAccount", "ForAllValues:StringEquals holds when the key is absent"),
    ({"StringLike": {"aws:SourceAccount": "*"}, "ArnEquals": {"aws:SourceArn": C.CLUSTER_ARN}},
     "aws:SourceAccount", "StringLike does not bind it"),
    ({"StringEquals": {"aws:SourceAccount": C.ACCOUNT}, "ArnLike": {"aws:SourceArn": "arn:aws:eks:*:*:cluster/*"}},
     "aws:SourceArn", "ArnLike ['arn:aws:eks:*:*:cluster/*'] admits any value"),
    ({"StringEquals": {"aws:SourceAccount": C.ACCOUNT}, "StringNotEquals": {"aws:SourceArn": C.CLUSTER_ARN}},
     "aws:SourceArn", "StringNotEquals does not bind it"),
], ids=["no-arn", "no-account", "if-exists", "for-all-values", "wrong-operator", "wildcard-arn", "negated"])
def test_a_condition_that_does_not_bind_the_key_is_mandatory(condition, missing, why):
    (message,) = C.judge(CONDITIONED, role_with(**condition))[0]
    expected = f"with no condition on {missing}" + (f" ({why})" if why else "") + ": "
    assert message.startswith(f"{WHERE} (Sid 'AllowEksAuthToAssumeRoleForPodIdentity') trusts Service "
                              f"'pods.eks.amazonaws.com' {expected}"), message


def test_operator_and_key_names_in_any_case_iam_accepts():
    condition = {"stringequals": {"AWS:SOURCEACCOUNT": C.ACCOUNT, "aws:requesttag/kubernetes-namespace": "gpu",
                                  "aws:RequestTag/kubernetes-service-account": "slides-worker"},
                 "ARNLIKE": {"aws:sourcearn": C.CLUSTER_ARN}}
    plan = (role_with(**condition), C.association())
    assert C.judge(CONDITIONED, *plan) == ([], []) and session_tags(*plan) == []


def test_a_single_statement_object_and_a_computed_source_arn_pass():
    doc = C.pod_identity_trust()
    doc["Statement"] = doc["Statement"][0]
    doc["Statement"]["Condition"]["ArnLike"]["aws:SourceArn"] = U
    assert C.judge(CONDITIONED, C.worker_role(doc, as_json=False)) == ([], [])


@pytest.mark.parametrize("association,text", [
    (C.association(ns="other"), "Condition StringEquals aws:RequestTag/kubernetes-namespace = ['gpu'] refuses "
                                "PodIdentityAssociation slides-worker-role-association (namespace = 'other')"),
    (C.association(sa="studies-worker"), "aws:RequestTag/kubernetes-service-account = ['slides-worker'] refuses "
                                         "PodIdentityAssociation slides-worker-role-association (serviceAccount = "
                                         "'studies-worker')"),
    (C.association(cluster="lab"), "Condition ArnLike aws:SourceArn = "),
], ids=["namespace", "service-account", "cluster"])
def test_conditions_refusing_the_plans_own_association_are_mandatory(association, text):
    (message,) = C.judge(CONDITIONED, C.worker_role(C.pod_identity_trust()), association)[0]
    assert message.startswith(f"{WHERE} ") and text in message and "its pods get no credentials" in message


def test_unknown_trust_of_a_role_an_association_grants_is_mandatory():
    (message,) = C.judge(CONDITIONED, C.worker_role(U), C.association())[0]
    assert message.startswith("Role slides-worker-role assumeRolePolicy is unknown during preview")
    assert "PodIdentityAssociation slides-worker-role-association" in message
    doc = C.unconditioned_trust()
    doc["Statement"][0]["Condition"] = U
    messages = C.judge(CONDITIONED, C.worker_role(doc, as_json=False))[0]
    assert len(messages) == 2 and all(m.startswith(f"{WHERE}.Condition is unknown during preview") for m in messages)


def test_a_trust_policy_that_is_not_json_fails_closed_for_a_granted_role():
    (message,) = C.judge(CONDITIONED, C.worker_role("{not json"), C.association())[0]
    assert message.startswith("Role slides-worker-role assumeRolePolicy is not JSON")


def test_over_grpc_an_unconditioned_trust_policy_is_mandatory_and_the_session_tags_advisory(analyze):
    report = analyze(F.doc(C.platform(), C.worker_role(C.unconditioned_trust()), C.association()))
    found = report.by_policy(trust.CONDITIONED_NAME)
    assert {d.level for d in found} == {"MANDATORY"} and len(found) == 2
    assert all(d.urn == F.urn(F.T_ROLE, "slides-worker-role") for d in found)
    (advice,) = report.by_policy(trust.SESSION_TAGS_NAME)
    assert advice.level == "ADVISORY" and "aws:RequestTag/kubernetes-namespace" in advice.message
    report = analyze(F.doc(C.platform(), C.worker_role(C.pod_identity_trust()), C.association()))
    assert report.by_policy(trust.CONDITIONED_NAME) == report.by_policy(trust.SESSION_TAGS_NAME) == []
