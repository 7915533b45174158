"""Tests for the `nodepool-instance-diversity` rule: every spelling of a single-type pin fails, diversity passes."""
from __future__ import annotations

import pytest

from policies import nodepool_diversity as rule
from policies.selection import CATEGORY_KEY, FAMILY_KEY, SIZE_KEY

IT = "node.kubernetes.io/instance-type"
BETA_IT = "beta.kubernetes.io/instance-type"


def req(key: str, op: str, *values: str) -> dict:
    return {"key": key, "operator": op, "values": list(values)} if values else {"key": key, "operator": op}


def pool(samples, *requirements: dict, labels: dict | None = None) -> dict:
    props = samples.gpu_nodepool()
    props["spec"]["template"]["spec"]["requirements"] = list(requirements)
    if labels is not None:
        props["spec"]["template"]["metadata"]["labels"].update(labels)
    return props


def check(run_rule, samples, props) -> list[str]:
    return run_rule(rule.POLICY, samples.T_NODEPOOL, props)


@pytest.mark.parametrize("requirements", [
    pytest.param([req(IT, "In", "g5.xlarge", "g5.2xlarge")], id="two-types"),
    pytest.param([req(FAMILY_KEY, "In", "g5")], id="family-of-sizes"),
    pytest.param([req(FAMILY_KEY, "In", "g5"), req(SIZE_KEY, "In", "xlarge", "2xlarge")], id="family-two-sizes"),
    pytest.param([req(FAMILY_KEY, "In", "g5", "g6"), req(SIZE_KEY, "In", "xlarge")], id="two-families-one-size"),
    pytest.param([req(CATEGORY_KEY, "In", "g")], id="category"),
    pytest.param([req("karpenter.k8s.aws/instance-gpu-manufacturer", "In", "nvidia")], id="gpu-manufacturer"),
    pytest.param([req(IT, "NotIn", "g5.xlarge")], id="notin-only"),
    pytest.param([req(IT, "Exists")], id="exists"),
    pytest.param([req("topology.kubernetes.io/zone", "In", "us-east-1a")], id="zone-only"),
    pytest.param([], id="no-requirements"),
])
def test_diverse_pools_pass(run_rule, samples, requirements):
    assert check(run_rule, samples, pool(samples, *requirements)) == []


@pytest.mark.parametrize("requirements,labels", [
    pytest.param([req(IT, "In", "g5.xlarge")], None, id="one-type"),
    pytest.param([req(IT, "In", "g5.xlarge", "g5.xlarge")], None, id="duplicates"),
    pytest.param([req(IT, "In", "g5.xlarge", " G5.XLarge ")], None, id="case-and-space"),
    pytest.param([req(BETA_IT, "In", "g5.xlarge")], None, id="beta-label"),
    pytest.param([req(FAMILY_KEY, "In", "g5"), req(SIZE_KEY, "In", "xlarge")], None, id="family-plus-size"),
    pytest.param([req(IT, "In", "g5.xlarge", "g5.2xlarge"), req(IT, "NotIn", "g5.2xlarge")], None,
                 id="notin-excludes-the-rest"),
    pytest.param([req(FAMILY_KEY, "In", "g5", "g6"), req(FAMILY_KEY, "NotIn", "g6"), req(SIZE_KEY, "In", "xlarge")],
                 None, id="family-notin"),
    pytest.param([req(IT, "In", "g5.xlarge", "g6.xlarge"), req(FAMILY_KEY, "In", "g5")], None,
                 id="type-list-cut-by-family"),
    pytest.param([req(IT, "In", "g5.xlarge", "g5.2xlarge"), req(SIZE_KEY, "In", "xlarge")], None,
                 id="type-list-cut-by-size"),
    pytest.param([req(IT, "In", "g5.xlarge", "g5.2xlarge"), req(IT, "In", "g5.xlarge", "g6.xlarge")], None,
                 id="two-in-lists-intersect"),
    pytest.param([], {IT: "g5.xlarge"}, id="template-label"),
    pytest.param([req(FAMILY_KEY, "In", "g5")], {SIZE_KEY: "xlarge"}, id="family-requirement-size-label"),
])
def test_single_type_fails_naming_the_type(run_rule, samples, requirements, labels):
    messages = check(run_rule, samples, pool(samples, *requirements, labels=labels))
    assert len(messages) == 1, messages
    assert "admits only one instance type, 'g5.xlarge'" in messages[0]
    assert "spec.template.spec.requirements" in messages[0]
    assert "instance-family" in messages[0]  # says what to do instead


@pytest.mark.parametrize("requirements", [
    pytest.param([req(IT, "DoesNotExist")], id="does-not-exist"),
    pytest.param([req(IT, "In", "g5.xlarge"), req(IT, "In", "g6.xlarge")], id="disjoint-in-lists"),
    pytest.param([req(IT, "In", "g5.xlarge"), req(IT, "NotIn", "g5.xlarge")], id="in-then-notin"),
])
def test_pool_admitting_nothing_fails(run_rule, samples, requirements):
    messages = check(run_rule, samples, pool(samples, *requirements))
    assert len(messages) == 1 and "admits no instance type" in messages[0]


def test_other_resource_types_are_ignored(run_rule, samples):
    props = pool(samples, req(IT, "In", "g5.xlarge"))
    assert run_rule(rule.POLICY, samples.T_NODECLASS, props) == []


def test_missing_properties_pass(run_rule, samples):
    assert check(run_rule, samples, {}) == []
    assert check(run_rule, samples, {"spec": {"template": {}}}) == []


def test_ill_shaped_requirements_fail_closed(run_rule, samples):
    props = samples.gpu_nodepool()
    props["spec"]["template"]["spec"]["requirements"] = "g5.xlarge"
    messages = check(run_rule, samples, props)
    assert len(messages) == 1 and "must be a list" in messages[0]


def test_unknown_values_that_decide_fail(run_rule, samples):
    U = samples.U
    messages = check(run_rule, samples, pool(samples, req(IT, "In", U)))
    assert len(messages) == 1
    assert "spec.template.spec.requirements[0].values is unknown during preview" in messages[0]
    assert check(run_rule, samples, pool(samples, {"key": U, "operator": "In", "values": ["g5.xlarge"]}))
    whole = samples.gpu_nodepool()
    whole["spec"]["template"]["spec"]["requirements"] = U
    assert "requirements is unknown" in check(run_rule, samples, whole)[0]


def test_unknown_values_that_do_not_decide_pass_or_cannot_hide_a_pin(run_rule, samples):
    U = samples.U
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [U]}
    assert check(run_rule, samples, pool(samples, req(FAMILY_KEY, "In", "g5"), zone)) == []
    # Requirements are ANDed: an unknown one cannot widen a known pin, so the pin itself is reported.
    messages = check(run_rule, samples, pool(samples, req(IT, "In", "g5.xlarge"), req(FAMILY_KEY, "In", U)))
    assert len(messages) == 1 and "'g5.xlarge'" in messages[0]


def test_over_grpc_with_config_overrides(analyze, samples):
    bad = samples.plan((samples.T_NODEPOOL, "pinned", pool(samples, req(IT, "In", "g5.xlarge"))))
    report = analyze(bad)
    found = report.by_policy(rule.NAME)
    assert [d.level for d in found] == ["MANDATORY"] and "g5.xlarge" in found[0].message
    assert found[0].urn.endswith("::pinned")
    assert [d.level for d in analyze(bad, {rule.NAME: "advisory"}).by_policy(rule.NAME)] == ["ADVISORY"]
    assert analyze(bad, {rule.NAME: {"enforcementLevel": "disabled"}}).by_policy(rule.NAME) == []
    assert [d.level for d in analyze(bad, {"all": "advisory"}).by_policy(rule.NAME)] == ["ADVISORY"]


def test_unknown_over_grpc_is_mandatory_not_the_engines_advisory(analyze, samples):
    report = analyze(samples.plan((samples.T_NODEPOOL, pool(samples, req(IT, "In", samples.U)))))
    found = report.by_policy(rule.NAME)
    assert [d.level for d in found] == ["MANDATORY"]
    assert "unknown during preview" in found[0].message and "can't run policy" not in found[0].message
