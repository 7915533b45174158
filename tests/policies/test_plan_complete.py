"""Tests for policies/plan_complete.py: a Helm Chart with no rendered children is a mandatory violation naming it."""
from __future__ import annotations

from pulumi_policy import EnforcementLevel, StackValidationPolicy

from policies import harness, pack, plan_complete
from policies.plan import Res

CHART = "kubernetes:helm.sh/v4:Chart"
KEDA_URN = "urn:pulumi:dev::gpuburst::gpuburst:index:Keda$kubernetes:helm.sh/v4:Chart::gpuburst-keda"
KEDA = {"chart": "keda", "version": "2.20.2", "repositoryOpts": {"repo": "https://kedacore.github.io/charts"}}


def test_a_chart_without_children_is_named():
    found = plan_complete.shallow_charts([Res(CHART, KEDA_URN, "gpuburst-keda", None, KEDA)])
    assert len(found) == 1
    urn, message = found[0]
    assert urn == KEDA_URN and "gpuburst-keda (chart keda 2.20.2)" in message and "shallow" in message


def test_a_chart_with_children_passes_and_other_types_are_ignored():
    child = Res("kubernetes:apps/v1:Deployment", KEDA_URN + "$x::y", "y", KEDA_URN, {})
    assert plan_complete.shallow_charts([Res(CHART, KEDA_URN, "gpuburst-keda", None, KEDA), child]) == []
    assert plan_complete.shallow_charts([Res("kubernetes:helm.sh/v3:Release", "urn:r", "r", None, KEDA)]) == []


def test_a_chart_with_unknown_inputs_says_which(samples):
    props = {**KEDA, "values": {"x": [1, plan_complete.UNKNOWN]}}
    [(_, message)] = plan_complete.shallow_charts([Res(CHART, KEDA_URN, "gpuburst-keda", None, props)])
    assert "values.x[1] is unknown during preview" in message and "chart keda 2.20.2" in message


def test_an_oci_chart_is_named_by_its_last_segment():
    props = {"chart": "oci://public.ecr.aws/karpenter/karpenter", "version": "1.14.1"}
    [(_, message)] = plan_complete.shallow_charts([Res(CHART, "urn:pulumi:dev::p::t::k", "k", None, props)])
    assert "chart karpenter 1.14.1" in message


def test_the_rule_is_a_mandatory_stack_policy_in_the_pack():
    assert plan_complete.POLICY.enforcement_level == EnforcementLevel.MANDATORY
    assert isinstance(plan_complete.POLICY, StackValidationPolicy)
    assert plan_complete in pack.RULE_MODULES


def test_over_the_analyzer_protocol_a_shallow_plan_fails_and_a_rendered_one_passes():
    chart = {"urn": KEDA_URN, "type": CHART, "name": "gpuburst-keda", "properties": KEDA}
    child = {"urn": KEDA_URN.replace("::gpuburst-keda", "$kubernetes:core/v1:ServiceAccount::gpuburst-keda:keda/k"),
             "type": "kubernetes:core/v1:ServiceAccount", "name": "gpuburst-keda:keda/k", "parent": KEDA_URN,
             "properties": {"apiVersion": "v1", "kind": "ServiceAccount",
                            "metadata": {"name": "k", "namespace": "keda"}}}
    with harness.Pack() as running:
        shallow = running.analyze(harness.normalise_plan({"resources": [chart]}))
        whole = running.analyze(harness.normalise_plan({"resources": [chart, child]}))
    assert [d.policy for d in shallow.mandatory if d.policy == plan_complete.NAME] == [plan_complete.NAME]
    assert shallow.by_policy(plan_complete.NAME)[0].urn == KEDA_URN
    assert whole.by_policy(plan_complete.NAME) == []
