"""Tests for `ec2nodeclass-al2023-ami`: one al2023@ alias term, nothing else."""
from __future__ import annotations

import pytest

from policies import ami as rule


def nc(samples, terms=None, family=None) -> dict:
    props = samples.nodeclass()
    if terms is not None:
        props["spec"]["amiSelectorTerms"] = terms
    if family is not None:
        props["spec"]["amiFamily"] = family
    return props


def check(run_rule, samples, props) -> list[str]:
    return run_rule(rule.POLICY, samples.T_NODECLASS, props)


@pytest.mark.parametrize("terms,family", [
    ([{"alias": "al2023@latest"}], None),
    ([{"alias": "al2023@v20250715"}], None),
    ([{"alias": "al2023@latest"}], "AL2023"),
], ids=["latest", "pinned", "explicit-family"])
def test_al2023_alias_passes(run_rule, samples, terms, family):
    assert check(run_rule, samples, nc(samples, terms, family)) == []


@pytest.mark.parametrize("terms,family,expected", [
    ([{"alias": "al2@latest"}], None, "alias = 'al2@latest': AL2 is end of life"),
    ([{"alias": "al2023@latest"}], "AL2", "spec.amiFamily = 'AL2'"),
    ([{"alias": "bottlerocket@latest"}], None, "alias = 'bottlerocket@latest'"),
    ([{"alias": "windows2022@latest"}], None, "alias = 'windows2022@latest'"),
    ([{"alias": "al2023@2025-07-15"}], None, "alias = 'al2023@2025-07-15'"),
    ([{"id": "ami-0123456789abcdef0"}], "AL2023", "a raw AMI id cannot be checked"),
    ([{"name": "my-ami-*", "owner": "self"}], "AL2023", "selecting by name, owner"),
    ([{"ssmParameter": "/aws/service/eks/optimized-ami/1.34/amazon-linux-2023/x86_64/nvidia/recommended/image_id"}],
     "AL2023", "selecting by ssmParameter"),
    ([{"alias": "al2023@latest"}, {"alias": "al2023@v20250715"}], None, "has 2 terms"),
    ([{"alias": "al2023@latest", "tags": {"x": "y"}}], None, "also sets tags"),
    ([{"alias": "al2023@latest"}], "Custom", "spec.amiFamily = 'Custom'"),
], ids=["al2-alias", "al2-family", "bottlerocket", "windows", "bad-pin", "raw-id", "name", "ssm", "two-terms",
        "alias-plus-tags", "custom-family"])
def test_everything_else_fails_naming_field_and_value(run_rule, samples, terms, family, expected):
    messages = check(run_rule, samples, nc(samples, terms, family))
    assert messages, (terms, family)
    assert any(expected in m for m in messages), messages
    assert all("al2023@latest" in m for m in messages)  # says what to do instead


def test_missing_properties(run_rule, samples):
    messages = check(run_rule, samples, {"spec": {"role": "r"}})
    assert len(messages) == 1 and "spec.amiSelectorTerms is missing" in messages[0]
    assert check(run_rule, samples, nc(samples, terms=[])) != []
    assert run_rule(rule.POLICY, samples.T_NODEPOOL, {}) == []


def test_unknown_values(run_rule, samples):
    U = samples.U
    for props, expected in ((nc(samples, [{"alias": U}]), "amiSelectorTerms[0].alias is unknown"),
                            (nc(samples, U), "spec.amiSelectorTerms is unknown"),
                            (nc(samples, [U]), "spec.amiSelectorTerms[0] is unknown"),
                            (nc(samples, family=U), "spec.amiFamily is unknown")):
        messages = check(run_rule, samples, props)
        assert len(messages) == 1 and expected in messages[0], messages
    computed_role = nc(samples)
    computed_role["spec"]["role"] = U  # the node role's name is usually an Output: not this rule's concern
    assert check(run_rule, samples, computed_role) == []


def test_over_grpc_with_config_overrides(analyze, samples):
    doc = samples.plan((samples.T_NODECLASS, nc(samples, [{"alias": "al2@latest"}])))
    assert [d.level for d in analyze(doc).by_policy(rule.NAME)] == ["MANDATORY"]
    assert [d.level for d in analyze(doc, {rule.NAME: "advisory"}).by_policy(rule.NAME)] == ["ADVISORY"]
    assert analyze(doc, {rule.NAME: {"enforcementLevel": "disabled"}}).by_policy(rule.NAME) == []
    unknown = analyze(samples.plan((samples.T_NODECLASS, nc(samples, [{"alias": samples.U}]))))
    assert [d.level for d in unknown.by_policy(rule.NAME)] == ["MANDATORY"]


# -- ec2nodeclass-selector-terms: no empty term (Karpenter 1.14.4 ignores it) -----------------------------------------

def selector(run_rule, samples, props) -> list[str]:
    return run_rule(rule.SELECTOR_POLICY, samples.T_NODECLASS, props)


@pytest.mark.parametrize("field,terms,expected", [
    ("subnetSelectorTerms", [{"tags": {}}], "spec.subnetSelectorTerms[0] = {tags: {}}: an empty tags map"),
    ("amiSelectorTerms", [{"name": "", "owner": "amazon"}],
     'spec.amiSelectorTerms[0] = {name: "", owner: amazon}: an empty name'),
    ("securityGroupSelectorTerms", [{"tags": {"karpenter.sh/discovery": "dev"}}, {"name": " "}],
     'spec.securityGroupSelectorTerms[1] = {name: ""}: an empty name'),
    ("amiSelectorTerms", [{"ssmParameter": ""}],
     'spec.amiSelectorTerms[0] = {ssmParameter: ""}: an empty ssmParameter'),
    ("capacityReservationSelectorTerms", [{"tags": {}, "ownerID": "123456789012"}],
     "spec.capacityReservationSelectorTerms[0] = {tags: {}, ownerID: 123456789012}: an empty tags map"),
], ids=["empty-subnet-tags", "empty-ami-name", "one-empty-sg-name", "empty-ssm", "empty-reservation-tags"])
def test_an_empty_selector_term_fails_in_one_line_naming_the_term(run_rule, samples, field, terms, expected):
    props = samples.nodeclass()
    props["spec"][field] = terms
    (message,) = selector(run_rule, samples, props)
    assert message.startswith(expected) and "Karpenter 1.14.4 ignores such a term" in message
    assert "\n" not in message


def test_the_stack_s_terms_pass_the_selector_rule(run_rule, samples, dev_plan):
    assert selector(run_rule, samples, samples.nodeclass()) == []
    (nodeclass,) = [r["properties"] for r in dev_plan["resources"] if r["type"] == samples.T_NODECLASS]
    assert selector(run_rule, samples, nodeclass) == []


def test_unknown_selector_values_are_reported(run_rule, samples):
    props = samples.nodeclass()
    props["spec"]["subnetSelectorTerms"] = [{"tags": samples.U}]
    (message,) = selector(run_rule, samples, props)
    assert "spec.subnetSelectorTerms[0].tags is unknown" in message
