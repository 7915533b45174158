"""Tests for policies/declare.py: the two helpers every rule module declares its policies with."""
from __future__ import annotations

from pathlib import Path

import pytest
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policies import pack
from policies.declare import plan_policy, resource_policy
from policies.plan import Res
from policies.resources import NODEPOOL, SQS_QUEUE
from policies.unknowns import UNKNOWN, UNKNOWN_STRING


def test_a_resource_policy_judges_only_the_kinds_and_type_tokens_it_names(run_rule):
    seen: list[Res] = []
    policy = resource_policy("probe", "probe", (NODEPOOL, SQS_QUEUE), lambda r: seen.append(r) or [f"saw {r.name}"])
    assert isinstance(policy, ResourceValidationPolicy) and policy.enforcement_level == EnforcementLevel.MANDATORY
    pool_type = "kubernetes:karpenter.sh/v1beta1:NodePool"  # any API version of the kind
    assert run_rule(policy, pool_type, {"spec": UNKNOWN_STRING}, "pool") == ["saw pool"]
    assert run_rule(policy, SQS_QUEUE, {"name": "q"}, "queue") == ["saw queue"]
    assert run_rule(policy, "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass", {}, "class") == []
    assert run_rule(policy, "aws:sqs/queuePolicy:QueuePolicy", {}, "policy") == []
    pool, queue = seen
    assert pool.type == pool_type and pool.props == {"spec": UNKNOWN}
    assert pool.urn.endswith("::pool") and queue.props == {"name": "q"}


def test_a_resource_policy_keeps_the_level_and_fails_closed(run_rule):
    policy = resource_policy("probe", "probe", (NODEPOOL,), lambda r: [r.props["spec"]["x"]],
                             level=EnforcementLevel.ADVISORY)
    assert policy.enforcement_level == EnforcementLevel.ADVISORY
    (message,) = run_rule(policy, "kubernetes:karpenter.sh/v1:NodePool", {})
    assert message.startswith("the rule could not read this resource (KeyError")


def test_a_bare_kind_is_refused_rather_than_read_as_two_type_tokens():
    with pytest.raises(TypeError, match="applies_to"):
        resource_policy("probe", "probe", NODEPOOL, lambda r: [])


def _stack(config: dict | None = None) -> StackValidationArgs:
    opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], None)
    chart = PolicyResource("kubernetes:helm.sh/v4:Chart", {"chart": "keda"}, "urn:chart", "chart", opts, None, None,
                           [], {})
    child = PolicyResource("kubernetes:apps/v1:Deployment", {"x": UNKNOWN_STRING}, "urn:child", "child", opts, None,
                           chart, [chart], {})
    return StackValidationArgs([chart, child], config)


def _run(policy: StackValidationPolicy, args: StackValidationArgs) -> list[tuple[str | None, str]]:
    found: list[tuple[str | None, str]] = []
    policy.validate(args, lambda message, urn=None: found.append((urn, message)))
    return found


def test_a_plan_policy_reads_the_plan_as_res_with_parents_and_dependencies():
    seen: list[list[Res]] = []
    policy = plan_policy("probe", "probe", lambda resources: seen.append(resources) or [("urn:child", "found")])
    assert isinstance(policy, StackValidationPolicy) and policy.config_schema is None
    assert _run(policy, _stack()) == [("urn:child", "found")]
    (resources,) = seen
    assert resources == [Res("kubernetes:helm.sh/v4:Chart", "urn:chart", "chart", None, {"chart": "keda"}),
                         Res("kubernetes:apps/v1:Deployment", "urn:child", "child", "urn:chart", {"x": UNKNOWN},
                             ("urn:chart",))]


def test_a_plan_policy_with_a_config_schema_gets_its_config():
    schema = PolicyConfigSchema(properties={"today": {"type": "string"}})
    policy = plan_policy("probe", "probe", lambda resources, config: [(None, f"{len(resources)} {config}")],
                         level=EnforcementLevel.ADVISORY, config_schema=schema)
    assert policy.config_schema is schema and policy.enforcement_level == EnforcementLevel.ADVISORY
    assert _run(policy, _stack({"today": "2026-01-01"})) == [(None, "2 {'today': '2026-01-01'}")]


def test_no_rule_module_builds_a_policy_by_hand():
    # One block declares a policy: a rule module that wrote its own would bypass the kind filter and the guards.
    for path in sorted(Path(pack.__file__).parent.glob("*.py")):
        if path.name == "declare.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert "ResourceValidationPolicy(" not in text and "StackValidationPolicy(" not in text, path.name


def test_a_scoped_policy_reports_violations_leaves_outsides_and_takes_its_facts_in_config(run_stack):
    from policies.declare import SCOPED, scoped_policy
    from policies.outside import Outside

    seen = []

    def findings(resources, scope):
        seen.append(scope)
        return [("urn:x", "a mismatch"), Outside("urn:y", "not in this plan")]

    policy = scoped_policy("probe-scoped", "probe", findings, ("devicePlugin", "nodeClassAmiAlias"))
    try:
        assert isinstance(policy, StackValidationPolicy) and policy.enforcement_level == EnforcementLevel.MANDATORY
        assert set(policy.config_schema.properties) == {"wholePlatform", "devicePlugin"}
        assert SCOPED["probe-scoped"].findings is findings
        assert SCOPED["probe-scoped"].keys == ("devicePlugin", "nodeClassAmiAlias")
        assert run_stack(policy, []) == [("urn:x", "a mismatch")]
        assert seen[-1].whole is False
        assert run_stack(policy, [("gpuburst:index:GpuBurstPlatform", {})]) and seen[-1].whole is True
    finally:
        del SCOPED["probe-scoped"]
