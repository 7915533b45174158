"""Tests for policies/plan.py: how the stack rules name resources and find what a Helm chart rendered."""
from __future__ import annotations

import pytest

from policies import plan
from policies.plan import Res

CHART = Res("kubernetes:helm.sh/v4:Chart", "urn:chart", "gpuburst-keda", None, {"chart": "kedacore/keda"})
DEPLOYMENT = Res("kubernetes:apps/v1:Deployment", "urn:deployment", "keda:keda/keda-operator", "urn:chart",
                 {"metadata": {"name": "keda-operator", "namespace": "keda"}})
REPLICA_SET = Res("kubernetes:apps/v1:ReplicaSet", "urn:rs", "rs", "urn:deployment", {"metadata": {"name": "rs"}})
ROLE = Res("aws:iam/role:Role", "urn:role", "slides-scaler-role", None, {})
PLAN = [CHART, DEPLOYMENT, REPLICA_SET, ROLE]


def test_a_resource_is_named_by_kind_namespace_and_name_else_by_its_type_and_resource_name():
    assert plan.describe_res(DEPLOYMENT) == "Deployment keda/keda-operator"
    assert plan.describe_res(REPLICA_SET) == "ReplicaSet rs"
    assert plan.describe_res(ROLE) == "Role slides-scaler-role"


def test_what_a_chart_rendered_and_which_chart_rendered_a_resource():
    by_urn = {r.urn: r for r in PLAN}
    assert plan.charts(PLAN, "keda") == [CHART] and plan.charts(PLAN, "karpenter") == []
    assert plan.rendered(PLAN, CHART) == [DEPLOYMENT, REPLICA_SET]
    assert plan.chart_of(REPLICA_SET, by_urn) == "keda" and plan.chart_of(ROLE, by_urn) is None


@pytest.mark.parametrize("chart,expected", [
    ("oci://public.ecr.aws/karpenter/karpenter", ("karpenter", None)),
    ("kedacore/keda", ("keda", None)),
    ("https://x/keda-2.20.2.tgz", ("keda", "2.20.2")),
    ("oci://r/karpenter:1.14.1", ("karpenter", "1.14.1")),
])
def test_chart_names(chart, expected):
    assert plan.chart_name(chart) == expected
