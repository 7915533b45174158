"""Tests for policies/identity.py: what the identity rules read from a plan (role names, owned namespaces, the KEDA
operator's identity with and without the facts of an ExistingKeda)."""
from __future__ import annotations

from policies import identity
from policies.facts import scope_of
from tests.policies import fragments as F


def test_roles_named_finds_a_role_whatever_the_arn_path():
    plan = F.as_res(F.workload())
    assert [r.name for r in identity.roles_named(plan, f"arn:aws:iam::{F.ACCOUNT}:role/other/slides-scaler")] == \
        ["slides-scaler"]
    assert identity.find_role(plan, f"arn:aws:iam::{F.ACCOUNT}:role/other/slides-scaler") is None
    assert identity.roles_named(plan, "not-an-arn") == [] and identity.roles_named(plan, F.OUTSIDE_ROLE_ARN) == []


def test_the_namespaces_a_plan_owns():
    plan = F.as_res(F.workload())
    assert identity.service_account_namespaces(plan) == {"gpu"}
    assert identity.association_namespaces(plan) == {"gpu"}
    namespace = F.entry("kubernetes:core/v1:Namespace", "lab", {"apiVersion": "v1", "kind": "Namespace",
                                                                "metadata": {"name": "lab"}})
    assert identity.service_account_namespaces(F.as_res(F.doc(namespace))) == {"lab"}


def test_the_keda_operator_is_found_from_the_chart_or_from_the_facts_of_a_partial_plan():
    chart = F.as_res(F.chart_fragment("keda"))
    assert identity.keda_operator_identity(chart) == (("keda", "keda-operator"), None)
    assert identity.keda_in_plan(chart)
    plan = F.as_res(F.doc(*F.workload()["resources"], F.entry(F.T_ASSOCIATION, "operator", F.association(
        "keda-operator", "keda"))))
    assert identity.keda_operator_identity(plan) == (None, None)  # whole: only the plan counts
    sa, association = identity.keda_operator_identity(plan, scope_of(plan))
    assert sa == ("keda", "keda-operator") and association.name == "operator"
    assert not identity.keda_in_plan(plan)


def test_the_pause_image_and_its_mirror_at_the_same_digest_are_placeholders():
    from policies._components import catalogue
    from policies.identity import is_pause_image, is_placeholder

    _, _, digest = catalogue.PAUSE_IMAGE.partition("@")
    mirror = f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/gpuburst-prod/mirror/kubernetes/pause:3.10@{digest}"
    assert is_pause_image(catalogue.PAUSE_IMAGE) and is_pause_image(mirror)
    assert not is_pause_image(mirror.replace(digest, "sha256:" + "0" * 64))  # another image under the name
    assert not is_pause_image(mirror.replace("/pause:", "/worker:"))
    assert is_placeholder({"containers": [{"image": mirror}]})
    assert not is_placeholder({"containers": [{"image": mirror}, {"image": "worker@sha256:" + "a" * 64}]})
