"""Tests for `verify-probe-admission`: the dev plan lets the verify identity create Jobs and pins them, so it passes;
a plan that drops or weakens the admission rule, or lets the identity create another workload kind, fails naming the
binding and the gap."""
from __future__ import annotations

import copy

import pytest

from components.spec import verify_admission as va
from policies import verify_admission as rule
from policies.unknowns import UNKNOWN
from tests.policies import fragments as F

VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
VAP_BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
WORKLOAD_BINDING = "RoleBinding gpuburst/gpuburst-verify lets the verify identity"


def findings(plan: dict) -> list[str]:
    return [m for _urn, m in rule.admission_findings(F.as_res(plan))]


def props(plan: dict, type_: str, namespace: str | None = None) -> dict:
    """The one resource of `type_` (verify's own, by name, in `namespace` when given)."""
    (found,) = [r["properties"] for r in plan["resources"] if r["type"] == type_
                and "gpuburst:index:ModelCacheAdmission" not in r["urn"]  # the model cache's rule is another
                and (namespace is None or (r["properties"]["metadata"].get("namespace") == namespace
                                           and r["properties"]["metadata"]["name"] == va.VERIFY_SERVICE_ACCOUNT))]
    return found


def without(plan: dict, type_: str) -> dict:
    plan = copy.deepcopy(plan)
    plan["resources"] = [r for r in plan["resources"] if r["type"] != type_]
    return plan


def test_the_dev_plan_pins_what_verify_may_create(dev_plan):
    assert findings(dev_plan) == []
    assert any(r["type"] == VAP for r in dev_plan["resources"])


def test_without_the_policy_the_verify_role_fails(dev_plan):
    (line,) = findings(without(dev_plan, VAP))
    assert line.startswith(WORKLOAD_BINDING) and "create jobs (Role gpuburst/gpuburst-verify)" in line
    assert "Group gpuburst:verify" in line and "ServiceAccount gpuburst/gpuburst-verify" in line
    assert "no ValidatingAdmissionPolicy" in line and "VerifyRunner" in line


def test_without_the_binding_the_policy_does_nothing(dev_plan):
    (line,) = findings(without(dev_plan, VAP_BINDING))
    assert "no ValidatingAdmissionPolicyBinding binds ValidatingAdmissionPolicy 'gpuburst-verify-probes'" in line


def _tamper(dev_plan, type_, change):
    plan = copy.deepcopy(dev_plan)
    change(props(plan, type_))
    return findings(plan)


@pytest.mark.parametrize("change,expected", [
    (lambda p: p["spec"]["validations"].pop(3), "lacks 1 of verify's probe rules (a verify probe runs only the "
                                                 "worker image"),
    (lambda p: p["spec"].update(failurePolicy="Ignore"), "failurePolicy 'Ignore'"),
    (lambda p: p["spec"].update(matchConditions=[{"name": "x", "expression": "request.userInfo.username == 'bob'"}]),
     "do not select exactly the verify identity"),
    (lambda p: p["spec"]["matchConstraints"]["resourceRules"][0].update(operations=["UPDATE"]),
     "do not match CREATE of batch jobs"),
    (lambda p: p["spec"]["matchConstraints"].update(namespaceSelector={"matchLabels": {"x": "y"}}),
     "matchConstraints.namespaceSelector narrows"),
    (lambda p: p["spec"].update(variables=[]), "variables lack pod = object.spec.template.spec"),
    (lambda p: p["spec"].pop("paramKind"), "paramKind is not a v1 ConfigMap"),
], ids=["rule-dropped", "fail-open", "other-identity", "update-only", "namespace-selector", "no-variable",
        "no-params"])
def test_a_weakened_policy_fails(dev_plan, change, expected):
    lines = _tamper(dev_plan, VAP, change)
    assert len(lines) == 1 and lines[0].startswith(WORKLOAD_BINDING), lines
    assert expected in lines[0], lines


@pytest.mark.parametrize("change,expected", [
    (lambda p: p["spec"].update(validationActions=["Warn", "Audit"]), "does not deny"),
    (lambda p: p["spec"].update(matchResources={"objectSelector": {"matchLabels": {"a": "b"}}}),
     "matchResources.objectSelector narrows"),
    (lambda p: p["spec"]["paramRef"].update(parameterNotFoundAction="Allow"), "parameterNotFoundAction Deny"),
], ids=["warn-only", "object-selector", "params-optional"])
def test_a_weakened_binding_fails(dev_plan, change, expected):
    lines = _tamper(dev_plan, VAP_BINDING, change)
    assert len(lines) == 1 and expected in lines[0], lines


def test_the_verify_identity_may_create_no_other_workload_kind(dev_plan):
    plan = copy.deepcopy(dev_plan)
    props(plan, ROLE, "gpuburst")["rules"].append({"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]})
    (line,) = findings(plan)
    assert line.startswith(WORKLOAD_BINDING) and "create pods (Role gpuburst/gpuburst-verify)" in line
    assert "pins Jobs only" in line


def test_a_wildcard_or_a_builtin_role_counts(dev_plan):
    plan = copy.deepcopy(dev_plan)
    props(plan, ROLE, "gpuburst")["rules"] = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    (line,) = findings(plan)
    assert "create cronjobs, daemonsets, deployments, pods, replicasets, replicationcontrollers, statefulsets" in line
    plan = without(dev_plan, VAP)
    props(plan, ROLE_BINDING, "gpuburst")["roleRef"] = {"apiGroup": "rbac.authorization.k8s.io",
                                                        "kind": "ClusterRole", "name": "edit"}
    lines = findings(plan)
    assert len(lines) == 2 and any("no ValidatingAdmissionPolicy" in m for m in lines), lines


def test_a_role_outside_the_plan_cannot_be_judged(dev_plan):
    plan = copy.deepcopy(dev_plan)
    props(plan, ROLE_BINDING, "gpuburst")["roleRef"]["name"] = "someone-elses"
    (line,) = findings(plan)
    assert "which is not in this plan: cannot tell what it lets verify create" in line


def test_other_subjects_may_create_jobs_without_it(dev_plan):
    plan = without(dev_plan, VAP)
    props(plan, ROLE_BINDING, "gpuburst")["subjects"] = [
        {"kind": "ServiceAccount", "name": "keda-operator", "namespace": "keda"}]
    assert findings(plan) == []


def test_unknown_subjects_are_reported(dev_plan):
    plan = copy.deepcopy(dev_plan)
    props(plan, ROLE_BINDING, "gpuburst")["subjects"] = UNKNOWN
    lines = [m for m in findings(plan) if "subjects" in m]
    assert len(lines) == 1 and "is unknown during preview" in lines[0]


def test_the_rule_reads_the_components_own_expressions():
    assert rule.va is va and len(va.PROBE_VALIDATIONS) >= 10
