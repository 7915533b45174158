"""What the stack grants and wires for Karpenter, statement by statement against the upstream v1.14.1 CloudFormation."""
import json
import re
from pathlib import Path

import pytest
import yaml

from components.karpenter import (
    INTERRUPTION_TARGET_ID,
    NODE_MANAGED_POLICIES,
    controller_policy,
    gpu_node_managed_policies,
    interruption_event_patterns,
    interruption_queue_policy,
    karpenter_values,
    node_trust_policy,
)

UPSTREAM_IAM = Path(__file__).resolve().parents[2].parent / "shared" / "upstream-iam"
TEMPLATE = UPSTREAM_IAM / "karpenter-v1.14.1-cloudformation.yaml"

PARTITION, REGION, ACCOUNT, CLUSTER = "aws", "us-east-1", "123456789012", "gpuburst-dev"
NODE_ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role/{CLUSTER}-karpenter-node"
QUEUE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{CLUSTER}-karpenter"
RULE_ARNS = [f"arn:aws:events:{REGION}:{ACCOUNT}:rule/karpenter-{k}" for k in interruption_event_patterns()]

CONTROLLER_POLICIES = ("NodeLifecyclePolicy", "IAMIntegrationPolicy", "EKSIntegrationPolicy", "InterruptionPolicy",
                       "ResourceDiscoveryPolicy", "ZonalShiftPolicy")
"""The upstream managed policies that together are the controller's permissions."""

LEFT_OUT_STATEMENTS = {
    "AllowZonalShiftStatusReadOnly":
        "arc-zonal-shift:GetManagedResource serves Karpenter's opt-in ARC zonal-shift awareness (chart value "
        "settings.enableZonalShift, default false), which this stack does not enable; grant it with turning that on",
}
"""Upstream controller statements the stack deliberately does not grant, with the reason."""

EXTRA_EVENT_PATTERNS: dict[str, str] = {}
"""Interruption event patterns the stack adds beyond upstream's rules, with the reason (none at v1.14.1)."""


# --------------------------------------------------------------------------------------------------------------------
# Reading the template: !Sub strings with this test's values, !GetAtt/!Ref as markers.
# --------------------------------------------------------------------------------------------------------------------

SUBSTITUTIONS = {
    "AWS::Partition": PARTITION, "AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::URLSuffix": "amazonaws.com",
    "ClusterName": CLUSTER, "KarpenterNodeRole.Arn": NODE_ROLE_ARN, "KarpenterInterruptionQueue.Arn": QUEUE_ARN,
}


def _sub(text: str) -> str:
    def repl(m: re.Match) -> str:
        assert m.group(1) in SUBSTITUTIONS, f"the template uses ${{{m.group(1)}}}, which this test does not know"
        return SUBSTITUTIONS[m.group(1)]
    return re.sub(r"\$\{([^}]+)\}", repl, text)


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!Sub", lambda loader, node: _sub(loader.construct_scalar(node)))
_Loader.add_constructor("!GetAtt", lambda loader, node: _sub("${" + loader.construct_scalar(node) + "}"))
_Loader.add_constructor("!Ref", lambda loader, node: {"Ref": loader.construct_scalar(node)})


@pytest.fixture(scope="module")
def upstream() -> dict:
    if not TEMPLATE.exists():
        pytest.skip(f"upstream Karpenter CloudFormation not found at {TEMPLATE} (../shared/upstream-iam is absent)")
    return yaml.load(TEMPLATE.read_text(), Loader=_Loader)["Resources"]


def _as_set(value) -> set[str]:
    return {value} if isinstance(value, str) else set(value)


def _normal_condition(condition: dict | None) -> dict:
    """Operator -> key -> sorted values as strings (YAML's `false` and JSON's "false" compare equal)."""
    out = {}
    for op, keys in (condition or {}).items():
        out[op] = {k: sorted(str(x).lower() if isinstance(x, bool) else str(x) for x in
                             ([v] if isinstance(v, (str, bool)) else v)) for k, v in keys.items()}
    return out


def _upstream_controller_statements(upstream: dict) -> dict[str, dict]:
    statements = {}
    for name in CONTROLLER_POLICIES:
        doc = json.loads(upstream[name]["Properties"]["PolicyDocument"])
        for st in doc["Statement"]:
            assert st["Sid"] not in statements, st["Sid"]
            statements[st["Sid"]] = st
    return statements


@pytest.fixture(scope="module")
def ours() -> dict[str, dict]:
    pol = controller_policy(CLUSTER, REGION, ACCOUNT, node_role_arn=NODE_ROLE_ARN, queue_arn=QUEUE_ARN,
                            partition=PARTITION)
    sids = [st["Sid"] for st in pol["Statement"]]
    assert len(sids) == len(set(sids)), "duplicate Sids in the controller policy"
    return {st["Sid"]: st for st in pol["Statement"]}


# --------------------------------------------------------------------------------------------------------------------
# Controller policy.
# --------------------------------------------------------------------------------------------------------------------

def test_the_template_still_has_the_policies_this_test_reads(upstream):
    for name in CONTROLLER_POLICIES:
        assert upstream[name]["Type"] == "AWS::IAM::ManagedPolicy", name
    assert set(LEFT_OUT_STATEMENTS) <= set(_upstream_controller_statements(upstream))


def test_every_upstream_statement_is_granted_exactly_or_left_out_with_a_reason(upstream, ours):
    problems = []
    for sid, up in _upstream_controller_statements(upstream).items():
        if sid in LEFT_OUT_STATEMENTS:
            assert sid not in ours, f"{sid} is listed as left out but is granted"
            continue
        mine = ours.get(sid)
        if mine is None:
            problems.append(f"{sid}: upstream grants {sorted(_as_set(up['Action']))}; the stack does not")
            continue
        if mine["Effect"] != up["Effect"]:
            problems.append(f"{sid}: Effect {mine['Effect']} vs upstream {up['Effect']}")
        missing = _as_set(up["Action"]) - _as_set(mine["Action"])
        broader = _as_set(mine["Action"]) - _as_set(up["Action"])
        if missing:
            problems.append(f"{sid}: missing actions {sorted(missing)}")
        if broader:
            problems.append(f"{sid}: actions upstream does not grant here {sorted(broader)}")
        if _as_set(mine["Resource"]) != _as_set(up["Resource"]):
            problems.append(f"{sid}: resources {sorted(_as_set(mine['Resource']))} vs upstream "
                            f"{sorted(_as_set(up['Resource']))}")
        if _normal_condition(mine.get("Condition")) != _normal_condition(up.get("Condition")):
            problems.append(f"{sid}: condition {mine.get('Condition')} vs upstream {up.get('Condition')}")
    assert not problems, "\n".join(problems)


def test_the_stack_grants_no_statement_upstream_lacks(upstream, ours):
    extra = set(ours) - set(_upstream_controller_statements(upstream))
    assert not extra, f"controller statements with no upstream counterpart: {sorted(extra)}"


@pytest.mark.parametrize("action", ["ec2:DescribeInstanceStatus", "ec2:DescribePlacementGroups"])
def test_the_actions_newer_karpenter_needs_are_granted_in_the_region(ours, action):
    # DescribeInstanceStatus: the instance-health controller (Karpenter >= 1.13); DescribePlacementGroups: placement
    # group selection. Without them the controller logs AccessDenied and those features silently do nothing.
    st = ours["AllowRegionalReadActions"]
    assert action in st["Action"]
    assert st["Condition"] == {"StringEquals": {"aws:RequestedRegion": REGION}}


def test_launching_into_a_placement_group_is_scoped_to_the_region(ours):
    assert f"arn:aws:ec2:{REGION}:*:placement-group/*" in ours["AllowScopedEC2InstanceAccessActions"]["Resource"]


def test_left_out_statements_have_reasons():
    assert all(len(why) > 20 for why in LEFT_OUT_STATEMENTS.values())


def test_zonal_shift_stays_off_while_its_permission_is_left_out():
    values = karpenter_values(cluster_name=CLUSTER, queue_name="q", region=REGION)
    assert not values["settings"].get("enableZonalShift", False), \
        "zonal shift is enabled: grant AllowZonalShiftStatusReadOnly and drop it from LEFT_OUT_STATEMENTS"


# --------------------------------------------------------------------------------------------------------------------
# Node role.
# --------------------------------------------------------------------------------------------------------------------

LEFT_OUT_NODE_POLICIES = {
    "AmazonSSMManagedInstanceCore":
        "SSM Session Manager (a root shell) on the GPU nodes, which hold clinical slides while they run; opt-in with "
        "gpuburst:gpuNodeSsm (KarpenterArgs.node_ssm). The system node group, which holds no slides, keeps it",
}
"""Upstream node-role policies the GPU node role does not get by default, with the reason."""


def test_node_role_has_upstreams_managed_policies_and_trust(upstream):
    props = upstream["KarpenterNodeRole"]["Properties"]
    upstream_arns = set(props["ManagedPolicyArns"])
    assert {f"arn:{PARTITION}:iam::aws:policy/{p}" for p in NODE_MANAGED_POLICIES} == upstream_arns
    # The stated difference: by default the GPU node role is upstream's less LEFT_OUT_NODE_POLICIES, and with
    # node_ssm exactly upstream's.
    assert {f"arn:{PARTITION}:iam::aws:policy/{p}" for p in gpu_node_managed_policies()} == upstream_arns - {
        f"arn:{PARTITION}:iam::aws:policy/{p}" for p in LEFT_OUT_NODE_POLICIES}
    assert {f"arn:{PARTITION}:iam::aws:policy/{p}" for p in gpu_node_managed_policies(ssm=True)} == upstream_arns
    assert all(len(why) > 20 for why in LEFT_OUT_NODE_POLICIES.values())
    up_trust = props["AssumeRolePolicyDocument"]["Statement"]
    mine = node_trust_policy()["Statement"]
    assert [(s["Effect"], _as_set(s["Principal"]["Service"]), _as_set(s["Action"])) for s in mine] == \
        [(s["Effect"], _as_set(s["Principal"]["Service"]), _as_set(s["Action"])) for s in up_trust]


# --------------------------------------------------------------------------------------------------------------------
# Interruption queue: its policy and the EventBridge rules.
# --------------------------------------------------------------------------------------------------------------------

def test_queue_policy_grants_what_upstream_grants_and_no_more(upstream):
    up = upstream["KarpenterInterruptionQueuePolicy"]["Properties"]["PolicyDocument"]
    mine = interruption_queue_policy(QUEUE_ARN, RULE_ARNS)
    assert mine["Id"] == up["Id"]

    def allows(doc):
        return {(svc, action) for st in doc["Statement"] if st["Effect"] == "Allow"
                for svc in _as_set(st["Principal"]["Service"]) for action in _as_set(st["Action"])}

    assert allows(mine) == allows(up) == {("events.amazonaws.com", "sqs:SendMessage"),
                                          ("sqs.amazonaws.com", "sqs:SendMessage")}
    for st in mine["Statement"]:
        assert st["Resource"] == QUEUE_ARN
    # Narrower than upstream, on purpose: EventBridge may send only from this stack's own rules (no other account's
    # rule can forge an interruption that makes Karpenter drain a node running a slide).
    [events] = [st for st in mine["Statement"] if st["Effect"] == "Allow"
                and "events.amazonaws.com" in _as_set(st["Principal"]["Service"])]
    assert events["Condition"] == {"ArnEquals": {"aws:SourceArn": RULE_ARNS}}

    def denies(doc):
        return [(st["Principal"], st["Action"], st["Resource"], _normal_condition(st.get("Condition")))
                for st in doc["Statement"] if st["Effect"] == "Deny"]

    assert denies(mine) == denies(up)


def test_queue_settings_match_upstream(upstream):
    props = upstream["KarpenterInterruptionQueue"]["Properties"]
    # components/karpenter.py creates the queue with these (test_karpenter checks them under mocks).
    assert props["MessageRetentionPeriod"] == 300 and props["SqsManagedSseEnabled"] is True


def test_event_rules_match_upstreams_patterns_and_target_id(upstream):
    rules = [r["Properties"] for r in upstream.values() if r["Type"] == "AWS::Events::Rule"]
    up_patterns = {json.dumps(r["EventPattern"], sort_keys=True) for r in rules}
    mine = {json.dumps(p, sort_keys=True): key for key, p in interruption_event_patterns().items()}
    assert up_patterns - set(mine) == set(), "upstream rules the stack does not create"
    extra = {mine[p] for p in set(mine) - up_patterns}
    assert extra == set(EXTRA_EVENT_PATTERNS), f"patterns beyond upstream without a listed reason: {sorted(extra)}"
    for r in rules:
        [target] = r["Targets"]
        assert target["Id"] == INTERRUPTION_TARGET_ID and target["Arn"] == QUEUE_ARN
