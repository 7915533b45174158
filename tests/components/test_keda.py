"""Tests of the Keda component and the per-queue scaler identity, under mocks: pinned chart, operator Pod Identity on
the system nodes, TriggerAuthentication with provider aws and roleArn (checked against the upstream CRD)."""
from __future__ import annotations

import json

import kubernetes_validate
import pulumi
import pytest

from components import catalogue
from components.keda import (
    OPERATOR_SERVICE_ACCOUNT,
    Keda,
    KedaArgs,
    KedaScalerAuth,
    KedaScalerAuthArgs,
    TriggerAuthSpec,
    operator_assume_policy,
    trigger_authentication_manifest,
)
from components.spec.policy_documents import allow_wildcard_actions
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks
from tests.components.crd_oracle import validate_against_crd

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:slides"
ROLE = "arn:aws:iam::123456789012:role/gpuburst/keda-scaler/slides"
TA = "kubernetes:keda.sh/v1alpha1:TriggerAuthentication"


def run(scaler_owner=None, **keda_kw):
    def program():
        keda = Keda("keda", KedaArgs(cluster_name="gpuburst-dev", **keda_kw))
        KedaScalerAuth("slides-scaler", KedaScalerAuthArgs(keda=keda, namespace="gpuburst", queue_arn=QUEUE_ARN,
                                                           auth_name="slides-sqs-auth", identity_owner=scaler_owner))
    return run_under_mocks(program)


@pytest.fixture(scope="module")
def res():
    return run()


def by_name(res, type_, name):
    (r,) = [r for r in res.monitor.by_type(type_) if r.name == name]
    return r


def policies(res) -> dict[str, dict]:
    return {r.name: json.loads(r.properties["policy"]) for r in res.monitor.by_type("aws:iam/rolePolicy:RolePolicy")}


def test_chart_is_pinned_from_the_catalogue(res):
    (chart,) = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    p = chart.properties
    pin = catalogue.CHARTS["keda"]
    assert (p["chart"], p["version"], p["namespace"]) == (pin.chart, pin.version, "keda")
    assert p["repositoryOpts"]["repo"] == pin.repository
    assert p["values"]["serviceAccount"]["operator"]["name"] == OPERATOR_SERVICE_ACCOUNT
    assert p["values"]["nodeSelector"] == {"gpuburst.io/pool": "system"}  # the cluster's system node group label
    assert p["values"]["podIdentity"]["aws"]["irsa"]["enabled"] is False


def test_operator_identity_is_pod_identity_for_keda_operator(res):
    (assoc,) = [r for r in res.monitor.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
                if r.properties["namespace"] == "keda"]
    assert assoc.properties["serviceAccount"] == "keda-operator"
    assert assoc.properties["clusterName"] == "gpuburst-dev"
    # The operator starts after its association exists (credentials are injected at pod admission).
    (chart,) = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    assert assoc.urn in chart.dependencies
    ns = by_name(res, "kubernetes:core/v1:Namespace", "keda-namespace")
    assert ns.properties["metadata"]["name"] == "keda" and ns.urn in chart.dependencies


def test_operator_may_only_assume_scaler_roles(res):
    doc = policies(res)["keda-operator-assume-scalers"]
    (st,) = doc["Statement"]
    assert st["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    assert st["Resource"] == "arn:aws:iam::123456789012:role/gpuburst/keda-scaler/*"
    assert operator_assume_policy("arn:aws-us-gov:iam::111122223333:role/k")["Statement"][0]["Resource"] == \
        "arn:aws-us-gov:iam::111122223333:role/gpuburst/keda-scaler/*"


def test_scaler_role_reads_queue_attributes_only_and_trusts_the_operator(res):
    doc = policies(res)["slides-scaler-queue-metrics"]
    assert doc["Statement"] == [{"Effect": "Allow", "Action": ["sqs:GetQueueAttributes"], "Resource": QUEUE_ARN}]
    role = by_name(res, "aws:iam/role:Role", "slides-scaler-role")
    assert role.properties["path"] == "/gpuburst/keda-scaler/"
    trust = json.loads(role.properties["assumeRolePolicy"])
    (st,) = trust["Statement"]
    assert st["Principal"] == {"AWS": "arn:aws:iam::123456789012:role/keda-operator-role"}
    assert st["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    for name, doc in policies(res).items():
        assert allow_wildcard_actions(doc["Statement"]) == [], name


def test_trigger_authentication_provider_aws_with_scaler_role(res, upstream_crds):
    (ta,) = res.monitor.by_type(TA)
    p = ta.properties
    assert p["metadata"] == {"name": "slides-sqs-auth", "namespace": "gpuburst"}
    role = "arn:aws:iam::123456789012:role/gpuburst/keda-scaler/slides-scaler-role"
    assert p["spec"] == {"podIdentity": {"provider": "aws", "roleArn": role}}
    (chart,) = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    assert chart.urn in ta.dependencies  # the CRD comes from the chart
    crd = upstream_crds / f"keda-v{catalogue.KEDA_VERSION}-triggerauthentications.yaml"
    assert validate_against_crd(p, crd) == []


def test_identity_owner_keda_puts_queue_read_on_the_operator_role():
    res = run(scaler_owner="keda")
    (ta,) = res.monitor.by_type(TA)
    assert ta.properties["spec"]["podIdentity"] == {"provider": "aws", "identityOwner": "keda"}
    assert not [r for r in res.monitor.by_type("aws:iam/role:Role") if r.name == "slides-scaler-role"]
    doc = policies(res)["slides-scaler-operator-queue-metrics"]
    assert doc["Statement"][0]["Action"] == ["sqs:GetQueueAttributes"]


def test_identity_owner_workload_refused():
    with pytest.raises(ConfigError, match="identity_owner: 'workload' is not valid: .*Pod Identity"):
        run(scaler_owner="workload")


@pytest.mark.parametrize("version", ["2.18.3", "2.13.0", "2.9"])
def test_keda_older_than_minimum_refused(version):
    with pytest.raises(ConfigError) as e:
        run(version=version)
    assert e.value.detail.startswith(f"KedaArgs.version: {version!r} is not valid: keda {version} is older than the "
                                   f"minimum {catalogue.KEDA_MINIMUM}")


def test_extra_trigger_authentications_are_checked_at_construction():
    with pytest.raises(ConfigError) as e:
        run(trigger_authentications=[TriggerAuthSpec("old", "gpuburst", provider="aws-eks")])
    assert e.value.detail.startswith("TriggerAuthentication gpuburst/old spec.podIdentity.provider: 'aws-eks'")
    res = run(trigger_authentications=[TriggerAuthSpec("shared", None, identity_owner="keda",
                                                       kind="ClusterTriggerAuthentication")])
    kinds = sorted(r.type for r in res.registrations if r.type.startswith("kubernetes:keda.sh"))
    assert kinds == ["kubernetes:keda.sh/v1alpha1:ClusterTriggerAuthentication", TA]


def test_trigger_authentication_builder(upstream_crds):
    m = trigger_authentication_manifest(TriggerAuthSpec("sqs-auth", "gpuburst", role_arn=ROLE))
    assert m["spec"]["podIdentity"] == {"provider": "aws", "roleArn": ROLE}
    assert validate_against_crd(m, upstream_crds / "keda-v2.20.2-triggerauthentications.yaml") == []
    with pytest.raises(ConfigError, match="mutually exclusive"):
        trigger_authentication_manifest(TriggerAuthSpec("a", "gpuburst", role_arn=ROLE, identity_owner="keda"))
    with pytest.raises(ConfigError, match="TriggerAuthSpec.namespace"):
        trigger_authentication_manifest(TriggerAuthSpec("a", None, role_arn=ROLE))


def test_namespace_validates_strictly(res):
    ns = by_name(res, "kubernetes:core/v1:Namespace", "keda-namespace")
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": ns.properties["metadata"]}
    kubernetes_validate.validate(obj, catalogue.KUBERNETES_VERSION, strict=True)
    assert ns.properties["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


def test_role_arn_output_is_passed_through():
    # The scaler role ARN is an Output when the TriggerAuthentication is built: checked only once known.
    m = trigger_authentication_manifest(TriggerAuthSpec("a", "gpuburst", role_arn=pulumi.Output.from_input(ROLE)))
    assert isinstance(m["spec"]["podIdentity"]["roleArn"], pulumi.Output)
