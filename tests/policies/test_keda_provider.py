"""Tests for `keda-pod-identity-provider` and the advisory `keda-sqs-identity-owner`."""
from __future__ import annotations

import pytest

from components import catalogue
from policies import keda_provider as rule


@pytest.fixture
def run_rule(run_stack):
    """The provider rule (a stack policy) over a one-resource plan, as the messages it reports."""
    def run(policy, rtype: str, props: dict) -> list[str]:
        return [message for _urn, message in run_stack(policy, [(rtype, props)])]
    return run


def ta(samples, provider, kind: str = "TriggerAuthentication") -> dict:
    props = samples.trigger_auth()
    props["kind"] = kind
    if provider is None:
        props["spec"]["podIdentity"].pop("provider")
    else:
        props["spec"]["podIdentity"]["provider"] = provider
    return props


@pytest.mark.parametrize("type_attr", ["T_TA", "T_CTA"])
def test_aws_provider_passes_and_aws_eks_fails(run_rule, samples, type_attr):
    rtype = getattr(samples, type_attr)
    assert run_rule(rule.POLICY, rtype, ta(samples, "aws")) == []
    messages = run_rule(rule.POLICY, rtype, ta(samples, "aws-eks"))
    assert len(messages) == 1
    assert "spec.podIdentity.provider = 'aws-eks'" in messages[0] and "deprecated" in messages[0]
    assert "use provider 'aws'" in messages[0]


@pytest.mark.parametrize("provider", ["aws-kiam", "azure", "AWS", "", "eks"])
def test_providers_the_pinned_keda_rejects(run_rule, samples, provider):
    assert provider not in catalogue.keda_providers(catalogue.KEDA_VERSION)
    messages = run_rule(rule.POLICY, samples.T_TA, ta(samples, provider))
    assert len(messages) == 1 and f"not accepted by KEDA {catalogue.KEDA_VERSION}" in messages[0]


def test_every_provider_the_catalogue_accepts_and_does_not_deprecate_passes(run_rule, samples):
    for provider in catalogue.keda_providers(catalogue.KEDA_VERSION):
        expected = [] if provider not in catalogue.KEDA_DEPRECATED_PROVIDERS else None
        messages = run_rule(rule.POLICY, samples.T_TA, ta(samples, provider))
        assert (messages == []) == (expected == []), (provider, messages)


def test_judged_against_the_given_keda_version():
    # 'aws' arrived in KEDA 2.13 (catalogue history): an older KEDA does not accept it.
    assert rule.problems({"spec": {"podIdentity": {"provider": "aws"}}}, "2.12.0")
    assert rule.problems({"spec": {"podIdentity": {"provider": "aws"}}}, catalogue.KEDA_VERSION) == []


def test_missing_properties(run_rule, samples):
    assert run_rule(rule.POLICY, samples.T_TA, {}) == []  # no podIdentity: secrets or env, not this rule's concern
    messages = run_rule(rule.POLICY, samples.T_TA, ta(samples, None))
    assert len(messages) == 1 and "spec.podIdentity.provider is missing" in messages[0]


def test_unknown_values(run_rule, samples):
    messages = run_rule(rule.POLICY, samples.T_TA, ta(samples, samples.U))
    assert len(messages) == 1 and "spec.podIdentity.provider is unknown during preview" in messages[0]
    whole = samples.trigger_auth()
    whole["spec"]["podIdentity"] = samples.U
    assert "spec.podIdentity is unknown" in run_rule(rule.POLICY, samples.T_TA, whole)[0]
    role = samples.trigger_auth()
    role["spec"]["podIdentity"]["roleArn"] = samples.U  # computed role ARN: normal, not judged
    assert run_rule(rule.POLICY, samples.T_TA, role) == []


def sj_with_owner(samples, owner="operator", auth_name="slides-sqs", kind=None) -> dict:
    sj = samples.scaled_job()
    trig = sj["spec"]["triggers"][0]
    trig["metadata"]["identityOwner"] = owner
    trig["authenticationRef"] = {"name": auth_name} if kind is None else {"name": auth_name, "kind": kind}
    return sj


def test_identity_owner_advice(run_stack, samples):
    stack = [(samples.T_TA, samples.trigger_auth()), (samples.T_SCALEDJOB, "slides", sj_with_owner(samples))]
    found = run_stack(rule.IDENTITY_OWNER_POLICY, stack)
    assert len(found) == 1
    urn, message = found[0]
    assert urn.endswith("::slides")
    assert "spec.triggers[0].metadata.identityOwner = 'operator' is ignored" in message
    assert "TriggerAuthentication 'slides-sqs' uses provider 'aws'" in message
    # Without identityOwner: nothing to say.
    assert run_stack(rule.IDENTITY_OWNER_POLICY, [(samples.T_TA, samples.trigger_auth()),
                                                  (samples.T_SCALEDJOB, samples.scaled_job())]) == []
    # Resolved to another provider: identityOwner means something there, no advice.
    other = [(samples.T_TA, ta(samples, "aws-eks")), (samples.T_SCALEDJOB, sj_with_owner(samples))]
    assert run_stack(rule.IDENTITY_OWNER_POLICY, other) == []
    # Unresolvable reference: still advised (provider aws is the only one this stack accepts).
    assert len(run_stack(rule.IDENTITY_OWNER_POLICY, [(samples.T_SCALEDJOB, sj_with_owner(samples, "pod"))])) == 1
    # A ClusterTriggerAuthentication is resolved by kind.
    cta = [(samples.T_CTA, ta(samples, "aws", "ClusterTriggerAuthentication")),
           (samples.T_SCALEDJOB, sj_with_owner(samples, kind="ClusterTriggerAuthentication"))]
    assert "ClusterTriggerAuthentication 'slides-sqs'" in run_stack(rule.IDENTITY_OWNER_POLICY, cta)[0][1]


def test_over_grpc_levels_and_overrides(analyze, samples):
    legacy = ta(samples, "aws-eks")
    legacy["metadata"]["name"] = "legacy"
    doc = samples.plan((samples.T_TA, legacy), (samples.T_TA, samples.trigger_auth()),
                       (samples.T_SCALEDJOB, sj_with_owner(samples)))
    report = analyze(doc)
    assert [d.level for d in report.by_policy(rule.NAME)] == ["MANDATORY"]
    assert [d.level for d in report.by_policy(rule.IDENTITY_OWNER_NAME)] == ["ADVISORY"]
    assert not [d for d in report.mandatory if d.policy == rule.IDENTITY_OWNER_NAME]
    report = analyze(doc, {rule.NAME: "advisory", rule.IDENTITY_OWNER_NAME: "mandatory"})
    assert [d.level for d in report.by_policy(rule.NAME)] == ["ADVISORY"]
    assert [d.level for d in report.by_policy(rule.IDENTITY_OWNER_NAME)] == ["MANDATORY"]
    report = analyze(doc, {rule.NAME: {"enforcementLevel": "disabled"}, rule.IDENTITY_OWNER_NAME: "disabled"})
    assert report.by_policy(rule.NAME) == [] and report.by_policy(rule.IDENTITY_OWNER_NAME) == []
    unknown = analyze(samples.plan((samples.T_TA, ta(samples, samples.U)))).by_policy(rule.NAME)
    assert [d.level for d in unknown] == ["MANDATORY"]


def test_providers_follow_the_stacks_keda_and_in_a_partial_plan_the_existing_one(analyze, samples):
    doc = samples.plan((samples.T_TA, samples.trigger_auth()))
    assert analyze(doc).by_policy(rule.NAME) == []  # no KEDA here: the pin (outside-this-stack says so)
    old = analyze(doc, {rule.NAME: {"kedaVersion": "2.18.0"}}).by_policy(rule.NAME)
    assert [d.level for d in old] == ["MANDATORY"] and old[0].message.startswith(
        "kedaVersion = '2.18.0' (policy config kedaVersion): keda 2.18.0 is older than the minimum")
    existing = {"version": "2.18.0", "namespace": "keda", "operatorServiceAccount": "keda-operator"}
    found = analyze(samples.plan((samples.T_TA, samples.trigger_auth()), ("gpuburst:index:ExistingKeda", "keda",
                                                                          existing))).by_policy(rule.NAME)
    assert len(found) == 1 and "(ExistingKeda 'keda' version)" in found[0].message
    whole = analyze(doc, {rule.NAME: {"kedaVersion": "2.18.0", "wholePlatform": True}}).by_policy(rule.NAME)
    assert whole == []  # a whole plan reads no fact: the pin, as before
