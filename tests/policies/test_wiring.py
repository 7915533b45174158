"""Tests for the reference rules: Pod Identity associations and the pods that use them, KEDA authenticationRefs and
scaler-role trust."""
from __future__ import annotations

import copy
import json

import pytest

from policies import wiring as rule
from policies.plan import Res

ACCOUNT = "123456789012"
OPERATOR_ARN = f"arn:aws:iam::{ACCOUNT}:role/keda-operator-role"
SCALER_ARN = f"arn:aws:iam::{ACCOUNT}:role/gpuburst/keda-scaler/slides-scaler-role-1a2b3c4"


def res(rtype: str, name: str, props: dict, parent: str | None = None) -> Res:
    return Res(rtype, f"urn:pulumi:dev::gpuburst::{rtype}::{name}", name, parent, props)


def sa(ns: str, name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}


def assoc(ns: str, sa_name: str, role_arn: str) -> dict:
    return {"namespace": ns, "serviceAccount": sa_name, "clusterName": "c", "roleArn": role_arn}


def deployment(ns: str, name: str, sa_name: str, gpu: bool = False) -> dict:
    container = {"name": name, "image": "i"}
    if gpu:
        container["resources"] = {"requests": {"nvidia.com/gpu": "1"}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": {"serviceAccountName": sa_name, "containers": [container]}}}}


def scaled_job(auth: dict | None = None, sa_name: str = "slides-worker") -> dict:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob", "metadata": {"name": "slides", "namespace": "gb"},
            "spec": {"jobTargetRef": {"template": {"spec": {
                "serviceAccountName": sa_name, "containers": [{"name": "w", "image": "i", "resources": {
                    "requests": {"nvidia.com/gpu": "1"}}}]}}},
                "triggers": [{"type": "aws-sqs-queue", "metadata": {"queueURL": "q"},
                              "authenticationRef": auth if auth is not None else {"name": "slides-sqs-auth"}}]}}


def trigger_auth(role_arn=SCALER_ARN, ns="gb", name="slides-sqs-auth") -> dict:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"podIdentity": {"provider": "aws", "roleArn": role_arn}}}


def trust(principal) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": principal},
                                                                "Action": ["sts:AssumeRole", "sts:TagSession"]}]})


def world(**replace) -> list[Res]:
    """A correctly wired stack: the keda and karpenter charts with their rendered Deployments and ServiceAccounts, a
    GPU ScaledJob and consumer Deployment with their ServiceAccounts, one association per ServiceAccount, and a
    scaler role trusting the operator's role."""
    k_chart = res("kubernetes:helm.sh/v4:Chart", "karpenter", {"chart": "oci://public.ecr.aws/karpenter/karpenter",
                                                                "namespace": "kube-system"})
    e_chart = res("kubernetes:helm.sh/v4:Chart", "keda", {"chart": "keda", "namespace": "keda"})
    parts = {
        "charts": [k_chart, e_chart],
        "karpenter": [res("kubernetes:core/v1:ServiceAccount", "karpenter:sa", sa("kube-system", "karpenter"),
                          k_chart.urn),
                      res("kubernetes:apps/v1:Deployment", "karpenter:deploy",
                          deployment("kube-system", "karpenter", "karpenter"), k_chart.urn)],
        "keda": [res("kubernetes:core/v1:ServiceAccount", "keda:sa", sa("keda", "keda-operator"), e_chart.urn),
                 res("kubernetes:apps/v1:Deployment", "keda:operator", deployment("keda", "keda-operator",
                                                                                  "keda-operator"), e_chart.urn)],
        "workers": [res("kubernetes:core/v1:ServiceAccount", "slides-sa", sa("gb", "slides-worker")),
                    res("kubernetes:core/v1:ServiceAccount", "studies-sa", sa("gb", "studies-worker")),
                    res("kubernetes:keda.sh/v1alpha1:ScaledJob", "slides", scaled_job()),
                    res("kubernetes:apps/v1:Deployment", "studies", deployment("gb", "studies", "studies-worker",
                                                                               gpu=True))],
        "associations": [
            res(rule.POD_IDENTITY_ASSOCIATION, "karpenter-assoc", assoc("kube-system", "karpenter", "arn:k")),
            res(rule.POD_IDENTITY_ASSOCIATION, "keda-assoc", assoc("keda", "keda-operator", OPERATOR_ARN)),
            res(rule.POD_IDENTITY_ASSOCIATION, "slides-assoc", assoc("gb", "slides-worker", "arn:s")),
            res(rule.POD_IDENTITY_ASSOCIATION, "studies-assoc", assoc("gb", "studies-worker", "arn:t"))],
        "keda_auth": [res(rule.IAM_ROLE, "slides-scaler-role", {"path": "/gpuburst/keda-scaler/",
                                                                "assumeRolePolicy": trust(OPERATOR_ARN)}),
                      res("kubernetes:keda.sh/v1alpha1:TriggerAuthentication", "slides-ta", trigger_auth())],
    }
    parts.update(replace)
    return [r for group in parts.values() for r in group]


def findings(resources: list[Res]) -> list[tuple[str, str]]:
    return rule.pod_identity_findings(resources) + rule.keda_auth_findings(resources)


def replaced(resources: list[Res], name: str, props: dict) -> list[Res]:
    return [r._replace(props=props) if r.name == name else r for r in resources]


def props_of(resources: list[Res], name: str) -> dict:
    return copy.deepcopy(next(r.props for r in resources if r.name == name))


def test_the_correct_wiring_passes():
    assert findings(world()) == []


# -- pod-identity-wiring ----------------------------------------------------------------------------------------------

def test_association_naming_a_service_account_nobody_creates_names_both_ends():
    resources = world()
    resources = replaced(resources, "keda-assoc", assoc("keda", "keda-operator-x", OPERATOR_ARN))
    found = rule.pod_identity_findings(resources)
    by_urn = {u.rsplit("::", 1)[-1]: m for u, m in found}
    assert "PodIdentityAssociation keda-assoc names ServiceAccount keda/keda-operator-x, which no resource creates " \
           "(the plan creates keda-operator there)" in by_urn["keda-assoc"]
    assert "Deployment keda/keda-operator runs as ServiceAccount keda/keda-operator" in by_urn["keda:operator"] and \
        "no PodIdentityAssociation names it" in by_urn["keda:operator"]
    # and the scaler role can no longer be assumed by anything
    (_u, message), = rule.keda_auth_findings(resources)
    assert "the KEDA operator's ServiceAccount keda/keda-operator has no PodIdentityAssociation" in message


def test_association_in_the_wrong_namespace():
    resources = replaced(world(), "karpenter-assoc", assoc("karpenter", "karpenter", "arn:k"))
    messages = [m for _u, m in rule.pod_identity_findings(resources)]
    assert any("names ServiceAccount karpenter/karpenter, which no resource creates (the plan creates none there)"
               in m for m in messages), messages
    assert any("Deployment kube-system/karpenter runs as ServiceAccount kube-system/karpenter" in m for m in messages)


def test_pod_running_as_another_service_account():
    resources = replaced(world(), "slides", scaled_job(sa_name="slides"))
    messages = [m for _u, m in rule.pod_identity_findings(resources)]
    assert any("ScaledJob gb/slides runs as ServiceAccount gb/slides (spec.jobTargetRef.template.spec."
               "serviceAccountName), which no resource creates" in m for m in messages), messages
    assert any("PodIdentityAssociation slides-assoc gives ServiceAccount gb/slides-worker (ServiceAccount "
               "gb/slides-worker) a role, but no pod in the plan runs as it" in m for m in messages)


def test_a_worker_on_the_default_service_account_gets_no_role():
    resources = replaced(world(), "studies", deployment("gb", "studies", "", gpu=True))
    messages = [m for _u, m in rule.pod_identity_findings(resources)]
    assert any("Deployment gb/studies runs as ServiceAccount gb/default" in m and "no PodIdentityAssociation" in m
               for m in messages), messages


def test_an_unrendered_chart_counts_its_values_service_account():
    resources = world(karpenter=[], keda=[])
    resources = [r._replace(props={**r.props, "values": {"serviceAccount": {"operator": {"name": "keda-operator"}}}})
                 if r.name == "keda" else r for r in resources]
    assert rule.pod_identity_findings(resources) == []


def test_unknown_association_fields_are_violations(run_stack, samples):
    resources = replaced(world(), "keda-assoc", assoc("keda", samples.U, OPERATOR_ARN))
    found = run_stack(rule.POD_IDENTITY_POLICY, [(r.type, r.name, r.props) for r in resources])
    assert any("serviceAccount is unknown during preview" in m for _u, m in found), found


# -- keda-auth-wiring -------------------------------------------------------------------------------------------------

def test_authentication_ref_to_a_missing_or_misplaced_trigger_authentication():
    resources = replaced(world(), "slides", scaled_job({"name": "nope"}))
    (urn, message), = rule.keda_auth_findings(resources)
    assert urn.endswith("ScaledJob::slides")
    assert "ScaledJob gb/slides spec.triggers[0].authenticationRef names TriggerAuthentication gb/nope, which the " \
           "plan does not create" in message
    resources = replaced(world(), "slides-ta", trigger_auth(ns="other"))
    (_u, message), = rule.keda_auth_findings(resources)
    assert "the plan has TriggerAuthentication other/slides-sqs-auth: wrong namespace or kind" in message


def test_cluster_trigger_authentication_resolves_without_namespace():
    cta = trigger_auth()
    cta["kind"] = "ClusterTriggerAuthentication"
    del cta["metadata"]["namespace"]
    resources = world(keda_auth=[world()[-2], res("kubernetes:keda.sh/v1alpha1:ClusterTriggerAuthentication",
                                                  "cta", cta)])
    resources = replaced(resources, "slides", scaled_job({"name": "slides-sqs-auth",
                                                          "kind": "ClusterTriggerAuthentication"}))
    assert rule.keda_auth_findings(resources) == []
    resources = replaced(resources, "slides", scaled_job({"name": "slides-sqs-auth"}))
    (_u, message), = rule.keda_auth_findings(resources)
    assert "names TriggerAuthentication gb/slides-sqs-auth" in message and "ClusterTriggerAuthentication " \
           "slides-sqs-auth" in message


def test_role_arn_naming_no_role_in_the_plan():
    resources = replaced(world(), "slides-ta", trigger_auth(f"arn:aws:iam::{ACCOUNT}:role/gpuburst/keda-scaler/gone"))
    (urn, message), = rule.keda_auth_findings(resources)
    assert urn.endswith("TriggerAuthentication::slides-ta")
    assert "TriggerAuthentication gb/slides-sqs-auth spec.podIdentity.roleArn = " in message and \
        "names no IAM role the plan creates" in message


def test_role_path_must_match_when_the_arn_has_one():
    resources = replaced(world(), "slides-ta", trigger_auth(f"arn:aws:iam::{ACCOUNT}:role/other/slides-scaler-role"))
    assert "names no IAM role" in rule.keda_auth_findings(resources)[0][1]


def test_scaler_role_that_does_not_trust_the_operator_names_both_roles():
    role = props_of(world(), "slides-scaler-role")
    role["assumeRolePolicy"] = trust(f"arn:aws:iam::{ACCOUNT}:role/someone-else")
    (urn, message), = rule.keda_auth_findings(replaced(world(), "slides-scaler-role", role))
    assert urn.endswith("TriggerAuthentication::slides-ta")
    assert "makes KEDA assume role slides-scaler-role, whose trust policy does not trust the KEDA operator's role " \
           f"'{OPERATOR_ARN}' (PodIdentityAssociation keda-assoc" in message
    assert "someone-else" in message


@pytest.mark.parametrize("arn_field", ["roleArn", "assumeRolePolicy"])
def test_unknown_role_arn_or_trust_policy_is_a_violation(run_stack, samples, arn_field):
    resources = world()
    if arn_field == "roleArn":
        resources = replaced(resources, "slides-ta", trigger_auth(samples.U))
    else:
        role = props_of(resources, "slides-scaler-role")
        role["assumeRolePolicy"] = samples.U
        resources = replaced(resources, "slides-scaler-role", role)
    found = run_stack(rule.KEDA_AUTH_POLICY, [(r.type, r.name, r.props) for r in resources])
    assert len(found) == 1 and f"{arn_field} is unknown during preview" in found[0][1], found


def preview_world(scaler_trusts: str = "operator-role") -> list[Res]:
    """The world as a first preview sees it: every ARN and trust policy computed (unknown), the engine's
    dependencies saying where each comes from."""
    from policies.unknowns import UNKNOWN
    resources = world()
    operator = res(rule.IAM_ROLE, "operator-role", {"assumeRolePolicy": UNKNOWN})
    other = res(rule.IAM_ROLE, "other-role", {"assumeRolePolicy": UNKNOWN})
    by = {r.name: r for r in resources + [operator, other]}
    out = []
    for r in resources:
        if r.name == "keda-assoc":
            r = r._replace(props={**r.props, "roleArn": UNKNOWN}, dependencies=(operator.urn,))
        elif r.name == "slides-scaler-role":
            r = r._replace(props={**r.props, "assumeRolePolicy": UNKNOWN}, dependencies=(by[scaler_trusts].urn,))
        elif r.name == "slides-ta":
            r = r._replace(props=trigger_auth(UNKNOWN), dependencies=(by["keda"].urn, by["slides-scaler-role"].urn))
        out.append(r)
    return out + [operator, other]


def test_a_preview_with_computed_arns_is_judged_by_dependencies():
    assert rule.keda_auth_findings(preview_world()) == []
    (urn, message), = rule.keda_auth_findings(preview_world(scaler_trusts="other-role"))
    assert urn.endswith("TriggerAuthentication::slides-ta")
    assert "makes KEDA assume role slides-scaler-role, whose trust policy (assumeRolePolicy, unknown during preview) " \
           "is not computed from the KEDA operator's role operator-role (PodIdentityAssociation keda-assoc)" in message


def test_a_computed_role_arn_with_no_role_dependency_is_unknown():
    resources = [r._replace(dependencies=()) if r.name == "slides-ta" else r for r in preview_world()]
    (_u, message), = rule.keda_auth_findings(resources)
    assert "spec.podIdentity.roleArn is unknown during preview" in message


def test_over_grpc(analyze):
    resources = replaced(world(), "slides", scaled_job({"name": "nope"}))
    doc = {"stack": "dev", "resources": [{"type": r.type, "name": r.name, "urn": r.urn, "parent": r.parent or "",
                                          "properties": r.props} for r in resources]}
    report = analyze(doc)
    found = report.by_policy(rule.KEDA_AUTH_NAME)
    assert [d.level for d in found] == ["MANDATORY"] and "gb/nope" in found[0].message
    assert report.by_policy(rule.POD_IDENTITY_NAME) == []


@pytest.mark.parametrize("trusts,expected", [("operator-role", 0), ("other-role", 1)])
def test_a_preview_plan_over_grpc_uses_the_engine_dependencies(analyze, samples, trusts, expected):
    from policies.unknowns import UNKNOWN

    def wire(value):
        if value is UNKNOWN:
            return samples.U
        if isinstance(value, dict):
            return {k: wire(v) for k, v in value.items()}
        if isinstance(value, list):
            return [wire(v) for v in value]
        return value

    doc = {"stack": "dev", "resources": [
        {"type": r.type, "name": r.name, "urn": r.urn, "parent": r.parent or "", "dependencies": list(r.dependencies),
         "properties": wire(r.props)} for r in preview_world(trusts)]}
    found = analyze(doc).by_policy(rule.KEDA_AUTH_NAME)
    assert len(found) == expected, [d.message for d in found]
    assert all(d.level == "MANDATORY" and "not computed from the KEDA operator's role" in d.message for d in found)


# -- partial plans: an end in another stack is an Outside, a mismatch inside stays a violation ------------------------

def partial(**facts):
    from policies.facts import Fact, Scope

    return Scope(False, "the plan declares no gpuburst:index:GpuBurstPlatform",
                 {k: Fact(v, f"policy config {k}") for k, v in facts.items()})


def split(found):
    from policies.outside import Outside

    return [f for f in found if not isinstance(f, Outside)], [f.message for f in found if isinstance(f, Outside)]


def test_in_a_partial_plan_an_association_for_another_stacks_namespace_is_an_outside():
    resources = world(karpenter=[], charts=[world()[1]])  # Karpenter is not in the plan
    assert any("karpenter" in m for _u, m in rule.pod_identity_findings(resources))  # whole: missing
    violations, ends = split(rule.pod_identity_findings(resources, partial()))
    assert violations == []
    assert ends == ["PodIdentityAssociation karpenter-assoc names ServiceAccount kube-system/karpenter, which is not "
                    "in this plan: could not check that it exists and that a pod runs as it (this plan creates no "
                    "ServiceAccount in namespace kube-system)"]


def test_in_a_partial_plan_a_name_the_plan_owns_the_namespace_of_is_still_a_mismatch():
    resources = replaced(world(), "slides-assoc", assoc("gb", "slides-wrker", "arn:s"))
    violations, ends = split(rule.pod_identity_findings(resources, partial()))
    assert ends == [] and any("names ServiceAccount gb/slides-wrker, which no resource creates (the plan creates "
                              "slides-worker, studies-worker there)" in m for _u, m in violations), violations


def test_in_a_partial_plan_the_scaler_role_is_checked_against_the_existing_operator_role():
    resources = world(keda=[], charts=[world()[0]])
    resources = [r for r in resources if r.name != "keda-assoc"]
    assert "the plan has no KEDA operator" in rule.keda_auth_findings(resources)[0][1]  # whole
    violations, ends = split(rule.keda_auth_findings(resources, partial()))
    assert violations == [] and ends == ["TriggerAuthentication gb/slides-sqs-auth makes KEDA assume role "
                                         "slides-scaler-role, but the KEDA operator is not in this plan: could not "
                                         "check that the role trusts the operator's role"]
    assert rule.keda_auth_findings(resources, partial(kedaOperatorRoleArn=OPERATOR_ARN)) == []
    (urn, message), = rule.keda_auth_findings(resources, partial(kedaOperatorRoleArn=f"arn:aws:iam::{ACCOUNT}:role/x"))
    assert urn.endswith("TriggerAuthentication::slides-ta") and "(policy config kedaOperatorRoleArn; it trusts " \
        f"['{OPERATOR_ARN}'])" in message


def test_in_a_partial_plan_a_trigger_authentication_elsewhere_is_an_outside():
    resources = world(keda_auth=[])
    violations, ends = split(rule.keda_auth_findings(resources, partial()))
    assert violations == [] and ends == ["ScaledJob gb/slides spec.triggers[0].authenticationRef names "
                                         "TriggerAuthentication gb/slides-sqs-auth, which is not in this plan: could "
                                         "not check that it exists or which role it makes KEDA assume"]
