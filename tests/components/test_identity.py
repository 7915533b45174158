"""WorkloadIdentity and the Pod Identity trust policy: only this account's EKS Pod Identity, for one service account
in one namespace of one cluster, may assume a role; every caller (KEDA, Karpenter, the workers) gets that trust."""
from __future__ import annotations

import json

import pytest

from components.identity import WorkloadIdentity, WorkloadIdentityArgs, cluster_arn
from components.spec.policy_documents import POD_IDENTITY_PRINCIPAL, pod_identity_trust_policy
from components.spec.validation import ConfigError
from components.synth.mocks import FAKE_ACCOUNT, run_under_mocks

CLUSTER = "gpuburst-dev"
ARN = f"arn:aws:eks:us-east-1:{FAKE_ACCOUNT}:cluster/{CLUSTER}"
ASSOCIATIONS = f"arn:aws:eks:us-east-1:{FAKE_ACCOUNT}:podidentityassociation/{CLUSTER}/*"

EXPECTED_CONDITION = {
    "StringEquals": {
        "aws:SourceAccount": FAKE_ACCOUNT,
        "aws:RequestTag/eks-cluster-arn": ARN,
        "aws:RequestTag/kubernetes-namespace": ["gpuburst"],
        "aws:RequestTag/kubernetes-service-account": ["slides-worker"],
    },
    "ArnLike": {"aws:SourceArn": [ARN, ASSOCIATIONS]},
}


def test_trust_is_the_documented_statement_with_every_condition():
    doc = pod_identity_trust_policy(account_id=FAKE_ACCOUNT, cluster_arn=ARN, namespace="gpuburst",
                                    service_account="slides-worker")
    (st,) = doc["Statement"]
    assert st["Principal"] == {"Service": "pods.eks.amazonaws.com"} == {"Service": POD_IDENTITY_PRINCIPAL}
    assert st["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert st["Effect"] == "Allow" and st["Condition"] == EXPECTED_CONDITION


def test_cluster_arn_format():
    assert cluster_arn("aws", "us-east-1", FAKE_ACCOUNT, CLUSTER) == ARN
    assert cluster_arn("aws-us-gov", "us-gov-west-1", FAKE_ACCOUNT, "c").startswith("arn:aws-us-gov:eks:us-gov-west-1:")


@pytest.mark.parametrize("field,kw", [
    ("account_id", {"account_id": "12345"}),
    ("cluster_arn", {"cluster_arn": "arn:aws:eks:us-east-1:999999999999:cluster/x"}),   # another account's cluster
    ("cluster_arn", {"cluster_arn": f"arn:aws:iam::{FAKE_ACCOUNT}:role/x"}),
    ("namespace", {"namespace": "Not_A_Namespace"}),
    ("service_account", {"service_account": ""}),
])
def test_bad_inputs_are_one_line_errors_naming_the_field(field, kw):
    args = dict(account_id=FAKE_ACCOUNT, cluster_arn=ARN, namespace="gpuburst", service_account="slides-worker")
    args.update(kw)
    with pytest.raises(ConfigError) as e:
        pod_identity_trust_policy(**args)
    assert str(e.value).startswith(f"{field}: ") and "\n" not in str(e.value)


def _identity(**kw):
    def program():
        WorkloadIdentity("w", WorkloadIdentityArgs(cluster_name=CLUSTER, namespace="gpuburst",
                                                   service_account="slides-worker", **kw))
    return run_under_mocks(program)


def _trust(res) -> dict:
    (role,) = res.monitor.by_type("aws:iam/role:Role")
    return json.loads(role.properties["assumeRolePolicy"])


def test_cluster_arn_comes_from_the_provider_when_not_given():
    trust = _trust(_identity())
    assert trust["Statement"][0]["Condition"] == EXPECTED_CONDITION


def test_a_given_cluster_arn_is_used_and_its_account_conditions_the_trust():
    other = f"arn:aws:eks:eu-west-1:{FAKE_ACCOUNT}:cluster/other"
    cond = _trust(_identity(cluster_arn=other))["Statement"][0]["Condition"]
    assert cond["StringEquals"]["aws:RequestTag/eks-cluster-arn"] == other
    assert cond["ArnLike"]["aws:SourceArn"][0] == other


def test_extra_trust_statements_follow_the_pod_identity_one():
    extra = {"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{FAKE_ACCOUNT}:role/x"}, "Action": "sts:AssumeRole"}
    sts = _trust(_identity(extra_trust_statements=[extra]))["Statement"]
    assert sts[0]["Principal"] == {"Service": POD_IDENTITY_PRINCIPAL} and sts[1] == extra


def test_role_path_and_association():
    res = _identity(role_path="/gpuburst-dev/workers/")
    (role,) = res.monitor.by_type("aws:iam/role:Role")
    assert role.properties["path"] == "/gpuburst-dev/workers/"
    (assoc,) = res.monitor.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert (assoc.properties["clusterName"], assoc.properties["namespace"], assoc.properties["serviceAccount"]) == (
        CLUSTER, "gpuburst", "slides-worker")


@pytest.mark.parametrize("field,kw", [("WorkloadIdentityArgs.role_path", {"role_path": "workers"}),
                                      ("namespace", {"namespace": "Bad"})])
def test_bad_identity_args_are_refused_before_anything_is_registered(field, kw):
    def program():
        WorkloadIdentity("w", WorkloadIdentityArgs(cluster_name=CLUSTER, **{
            "namespace": "gpuburst", "service_account": "sa", **kw}))
    with pytest.raises(ConfigError, match=f"^WorkloadIdentity 'w': {field}: "):
        run_under_mocks(program)


def _pod_identity_roles(plan: dict) -> dict[str, dict]:
    out = {}
    for r in plan["resources"]:
        if r["type"] != "aws:iam/role:Role":
            continue
        doc = r["properties"].get("assumeRolePolicy")
        doc = json.loads(doc) if isinstance(doc, str) else doc
        for st in doc["Statement"]:
            if (st.get("Principal") or {}).get("Service") == POD_IDENTITY_PRINCIPAL:
                out[r["name"]] = st
    return out


def test_every_pod_identity_role_of_the_dev_plan_is_conditioned(dev):
    roles = _pod_identity_roles(dev["plan"])
    subjects = {(st["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-namespace"][0],
                 st["Condition"]["StringEquals"]["aws:RequestTag/kubernetes-service-account"][0])
                for st in roles.values()}
    # The KEDA operator, the Karpenter controller and both workers: each role Pod Identity may hand out.
    assert subjects >= {("keda", "keda-operator"), ("kube-system", "karpenter"), ("gpuburst", "slides-worker"),
                        ("gpuburst", "studies-worker")}
    associations = {(a["properties"]["namespace"], a["properties"]["serviceAccount"])
                    for a in dev["plan"]["resources"]
                    if a["type"] == "aws:eks/podIdentityAssociation:PodIdentityAssociation"}
    assert associations == subjects and len(roles) == len(subjects)
    for name, st in roles.items():
        cond = st["Condition"]
        assert cond["StringEquals"]["aws:SourceAccount"] == FAKE_ACCOUNT, name
        assert cond["StringEquals"]["aws:RequestTag/eks-cluster-arn"] == ARN, name
        assert ARN in cond["ArnLike"]["aws:SourceArn"], name
