"""Tests for policies/outside.py: a rule's findings split into violations and ends outside this stack, and an
`Outside` a policy forgot to filter out fails closed instead of passing as a violation."""
from __future__ import annotations

from policies.declare import plan_policy
from policies.outside import Outside, outsides, violations


def test_findings_split_into_violations_and_ends_outside():
    end = Outside("urn:a", "the device plugin is not in this plan: could not check ...", ("devicePlugin",))
    items = [("urn:b", "a mismatch"), end, (None, "a plan-wide mismatch")]
    assert violations(items) == [("urn:b", "a mismatch"), (None, "a plan-wide mismatch")]
    assert outsides(items) == [end]
    assert end.keys == ("devicePlugin",) and Outside(None, "m").keys == ()


def test_an_outside_is_not_a_finding_tuple():
    end = Outside("urn:a", "m")
    assert not isinstance(end, tuple) and end != ("urn:a", "m")


def test_an_unfiltered_outside_fails_closed(run_stack):
    policy = plan_policy("probe", "probe", lambda resources: [Outside(None, "not mine to report")])
    (found,) = run_stack(policy, [])
    assert found[1].startswith("the rule could not read this resource (TypeError")
