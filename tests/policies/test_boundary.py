"""Tests for `outside-this-stack` and partial plans: a sound fragment of the platform passes with advisories only, one
line per end that lives in another stack; a mismatch inside the fragment still fails; a whole plan is judged as
before."""
from __future__ import annotations

import copy

import pytest

from policies import boundary, pack, plan_complete
from policies.declare import SCOPED
from policies.facts import FACTS, WHOLE, scope_of
from policies.outside import outsides, violations
from tests.policies import fragments as F

DEVICE_PLUGIN_LINE = "the NVIDIA device plugin is not in this plan: could not check that it runs on NodePool 'gpu'"
NETPOL_LINE = ("the cluster is not in this plan: could not check that its VPC CNI enforces NetworkPolicies "
               "(NetworkPolicy gpu/default-deny, NetworkPolicy gpu/slides-worker are inert otherwise)")
WATCH_LINE = ("ScaledJob gpu/slides is scaled by the KEDA another stack runs, which is not in this plan: could not "
              "check that it watches this namespace")
ROLE_LINE = (f"TriggerAuthentication gpu/x-auth spec.podIdentity.roleArn = '{F.OUTSIDE_ROLE_ARN}' is a role from "
             "another stack: could not check that it trusts the KEDA operator or may read the queue")


def mandatory(plan: dict, config: dict | None = None) -> dict[str, list[str]]:
    """Policy name -> messages of every stack rule over references (and plan-complete) that reports violations."""
    res = F.as_res(plan)
    scope = scope_of(res, config)
    found = {rule.name: [m for _u, m in violations(rule.findings(res, scope))] for rule in boundary.scoped_rules()}
    found[plan_complete.NAME] = [m for _u, m in plan_complete.shallow_charts(res)]
    return {name: messages for name, messages in found.items() if messages}


def advisories(plan: dict, config: dict | None = None) -> list[str]:
    return [m for _u, m in boundary.boundary_findings(F.as_res(plan), config)]


def one(lines: list[str], text: str) -> str:
    found = [line for line in lines if text in line]
    assert len(found) == 1, (text, lines)
    return found[0]


# -- the sound fragments pass with advisories only -------------------------------------------------------------------

def test_a_trigger_authentication_with_a_role_from_another_stack():
    plan = F.lone_trigger_auth()
    assert mandatory(plan) == {}
    lines = advisories(plan)
    assert one(lines, ROLE_LINE).endswith("(not checked by keda-auth-wiring: the plan declares no "
                                          "gpuburst:index:GpuBurstPlatform)")
    keda = one(lines, "KEDA is not in this plan (no keda chart)")
    assert "judge against the catalogue's pin KEDA" in keda and "set policy config kedaVersion" in keda
    assert len(lines) == 2, lines


@pytest.mark.parametrize("chart", ["karpenter", "keda"])
@pytest.mark.parametrize("release", [False, True], ids=["v4-chart-with-children", "v3-release"])
def test_a_controller_chart_alone(chart, release):
    plan = F.chart_fragment(chart, release=release)
    assert mandatory(plan) == {}
    lines = advisories(plan)
    assert len(lines) == 2, lines
    system = one(lines, "the system node group is not in this plan (aws:eks/nodeGroup:NodeGroup): could not check "
                        "that ")
    assert "set policy config systemNodeLabels on controller-placement and outside-this-stack" in system
    one(lines, "which no PodIdentityAssociation in this plan names: could not check that another stack gives it AWS "
               "credentials")


def test_a_chart_without_its_rendered_objects_is_still_shallow():
    found = mandatory(F.chart_fragment("keda", rendered=False))
    assert list(found) == [plan_complete.NAME] and "has no rendered objects in the plan" in found[plan_complete.NAME][0]


PLACEMENT_LINE = ("the NVIDIA device plugin runs on the cluster (ExistingCluster 'platform-cluster' devicePlugin: "
                  "true) but is not in this plan: could not check that its nodeSelector, affinity and tolerations "
                  "admit NodePool 'gpu', nor count its requests in the GPU pods' fit")


def test_the_workload_fragment_with_references_passes_saying_only_what_no_fact_can_tell():
    plan = F.workload()
    assert mandatory(plan) == {}
    (line,) = advisories(plan)
    assert line.startswith(PLACEMENT_LINE) and "to check it" not in line


def test_the_workload_fragment_without_references_says_each_missing_end_once():
    plan = F.workload(refs=False, scaler_role=False)
    assert mandatory(plan) == {}
    lines = advisories(plan)
    assert len(lines) == 6, lines
    one(lines, DEVICE_PLUGIN_LINE)
    watch = one(lines, WATCH_LINE)
    assert "declare ExistingKeda watchNamespaces or set policy config kedaWatchNamespaces" in watch
    netpol = one(lines, NETPOL_LINE)
    assert "declare ExistingCluster networkPolicyEnforced or set policy config networkPolicyEnforced on " \
           "network-policy-enforced and outside-this-stack" in netpol
    one(lines, "TriggerAuthentication gpu/slides-sqs spec.podIdentity.roleArn = ")
    one(lines, "KEDA is not in this plan")
    nodeclass = one(lines, "NodePool 'gpu' boots EC2NodeClass 'gpu' (spec.template.spec.nodeClassRef.name), which is "
                           "not in this plan: could not check that its root volume holds the ephemeral storage of pod "
                           "ScaledJob gpu/slides 52Gi")
    assert "not checked by gpu-pod-schedulable, gpu-pod-effective-diversity" in nodeclass  # two rules, one line


def test_the_device_plugin_and_the_system_node_group_are_said_once_however_many_ask():
    plan = F.workload(refs=False)
    second = copy.deepcopy(plan["resources"][0])
    second.update(name="gpu2-nodepool", urn=F.urn(F.T_NODEPOOL, "gpu2-nodepool"))
    second["properties"]["metadata"]["name"] = "gpu2"
    keda = F.chart_fragment("keda")["resources"]
    extra = copy.deepcopy(keda[-1])  # a second KEDA Deployment (the chart renders three)
    extra.update(name="keda:keda/keda-webhook", urn=extra["urn"] + "-webhook")
    extra["properties"]["metadata"]["name"] = "keda-webhook"
    lines = advisories(F.doc(*plan["resources"], second, *keda, extra))
    plugin = one(lines, "the NVIDIA device plugin is not in this plan")
    assert "NodePool 'gpu', NodePool 'gpu2'" in plugin
    system = one(lines, "the system node group is not in this plan")
    assert "Deployment keda/keda-operator, Deployment keda/keda-webhook can run on it" in system


# -- a mismatch inside the fragment still fails ----------------------------------------------------------------------

@pytest.mark.parametrize("plan,policy,text", [
    (F.workload(assoc=F.association(sa="slides-wrker")), "pod-identity-wiring",
     "PodIdentityAssociation slides-worker names ServiceAccount gpu/slides-wrker, which no resource creates (the plan "
     "creates slides-worker there)"),
    (F.workload(assoc=F.association(sa="slides-wrker")), "pod-identity-wiring",
     "ScaledJob gpu/slides runs as ServiceAccount gpu/slides-worker (spec.jobTargetRef.template.spec."
     "serviceAccountName) but no PodIdentityAssociation names it"),
    (F.workload(job=F.scaled_job(sa="other")), "pod-identity-wiring",
     "ScaledJob gpu/slides runs as ServiceAccount gpu/other (spec.jobTargetRef.template.spec.serviceAccountName), "
     "which no resource creates"),
    (F.workload(job=F.scaled_job(sa="other")), "pod-identity-wiring",
     "PodIdentityAssociation slides-worker gives ServiceAccount gpu/slides-worker (ServiceAccount gpu/slides-worker) "
     "a role, but no pod in the plan runs as it"),
    (F.workload(job=F.scaled_job(auth="nope")), "keda-auth-wiring",
     "ScaledJob gpu/slides spec.triggers[0].authenticationRef names TriggerAuthentication gpu/nope, which the plan "
     "does not create"),
    (F.workload(assoc=F.association(cluster="other")), "pod-identity-wiring",
     "PodIdentityAssociation slides-worker clusterName = 'other' but the cluster this stack attaches to is "
     "'platform' (ExistingCluster 'platform-cluster' clusterName)"),
], ids=["association-names-another-sa", "pod-without-association", "pod-runs-as-another-sa",
        "association-nobody-uses", "authentication-ref", "cluster-name"])
def test_a_mismatch_between_two_things_in_the_fragment_is_mandatory(plan, policy, text):
    found = mandatory(plan)
    assert any(text in m for m in found.get(policy, [])), found
    assert mandatory(F.without(plan, F.T_KEDA)).get(policy) == found[policy]  # with or without the references


@pytest.mark.parametrize("reference,props,policy,text", [
    ("platform-cluster", F.existing_cluster(devicePlugin=False), "device-plugin-placement",
     "the plan has no NVIDIA device plugin DaemonSet and the cluster runs none (ExistingCluster 'platform-cluster' "
     "devicePlugin: false)"),
    ("platform-cluster", F.existing_cluster(nodeClasses={"gpu": {"rootVolumeGiB": 20, "amiAlias": "al2023@latest"}}),
     "gpu-pod-schedulable", "Pending forever: pod ScaledJob gpu/slides requests 52Gi ephemeral-storage"),
    ("platform-keda", F.existing_keda(operatorRoleArn=f"arn:aws:iam::{F.ACCOUNT}:role/other"), "keda-auth-wiring",
     f"whose trust policy does not trust the KEDA operator's role 'arn:aws:iam::{F.ACCOUNT}:role/other' (ExistingKeda "
     "'platform-keda' operatorRoleArn"),
    ("platform-karpenter", F.existing_karpenter(version="1.0.1"), "karpenter-chart-pair",
     "karpenterVersion = '1.0.1' (ExistingKarpenter 'platform-karpenter' version): karpenter 1.0.1: Karpenter "
     "1.0.0-1.0.2 swapped the AL2023 NVIDIA and Neuron AMI variants"),
    ("platform-keda", F.existing_keda(version="2.10.0"), "keda-pod-identity-provider",
     "kedaVersion = '2.10.0' (ExistingKeda 'platform-keda' version): keda 2.10.0 is older than the minimum"),
], ids=["no-device-plugin", "small-root-volume", "operator-role", "broken-karpenter", "old-keda"])
def test_a_fact_that_disagrees_with_the_fragment_is_mandatory(reference, props, policy, text):
    plan = F.replaced(F.workload(), reference, props)
    found = mandatory(plan)
    assert any(text in m for m in found.get(policy, [])), found


def test_a_role_outside_the_existing_kedas_scaler_path_is_mandatory():
    plan = F.workload(ta=F.trigger_auth(f"arn:aws:iam::{F.ACCOUNT}:role/elsewhere/x"), scaler_role=False)
    (message,) = mandatory(plan)["keda-auth-wiring"]
    assert "spec.podIdentity.roleArn = 'arn:aws:iam::123456789012:role/elsewhere/x' is not under the scaler role " \
           "path '/gpuburst/keda-scaler/' (ExistingKeda 'platform-keda' scalerRolePath)" in message
    plan = F.workload(ta=F.trigger_auth(F.OUTSIDE_ROLE_ARN), scaler_role=False)
    assert mandatory(plan) == {}  # under the path: another stack's role, said once
    one(advisories(plan), "spec.podIdentity.roleArn = 'arn:aws:iam::123456789012:role/gpuburst/keda-scaler/x-scaler' "
                          "is a role from another stack")


def test_a_scaling_strategy_the_existing_keda_rejects_is_mandatory():
    job = F.scaled_job()
    job["spec"]["scalingStrategy"] = {"strategy": "default"}
    plan = F.replaced(F.workload(job=job), "platform-keda", F.existing_keda(version="2.20.0"))
    (message,) = mandatory(plan)["keda-scaling-strategy"]
    assert "spec.scalingStrategy.strategy = 'default'" in message and "KEDA 2.20.0" in message
    assert mandatory(F.workload(job=job)) == {}  # the existing KEDA is the pin: accepted


# -- policy config facts ---------------------------------------------------------------------------------------------

def test_policy_config_facts_stand_for_the_references():
    plan = F.workload(refs=False)
    config = {"devicePlugin": True, "nodeClassRootVolumeGiB": {"gpu": 100}, "kedaVersion": "2.20.2",
              "kedaOperatorRoleArn": F.OPERATOR_ARN, "networkPolicyEnforced": True, "kedaWatchNamespaces": ["gpu"]}
    assert mandatory(plan, config) == {}
    (line,) = advisories(plan, config)
    assert "the NVIDIA device plugin runs on the cluster (policy config devicePlugin: true)" in line
    small = mandatory(plan, {**config, "nodeClassRootVolumeGiB": {"gpu": 20}})
    assert "requests 52Gi ephemeral-storage" in small["gpu-pod-schedulable"][0]
    none = mandatory(plan, {**config, "devicePlugin": False})
    assert "(policy config devicePlugin: false)" in none["device-plugin-placement"][0]


def test_system_node_labels_in_config_judge_the_controllers():
    plan = F.chart_fragment("keda")
    assert mandatory(plan, {"systemNodeLabels": F.SYSTEM}) == {}
    (message,) = mandatory(plan, {"systemNodeLabels": {"gpuburst.io/pool": "controllers"}})["controller-placement"]
    assert message.startswith("Deployment keda/keda-operator cannot run on the system node group: ") and \
        "the system nodes (policy config systemNodeLabels {gpuburst.io/pool: 'controllers'})" in message
    assert not [line for line in advisories(plan, {"systemNodeLabels": F.SYSTEM}) if "system node group" in line]


# -- the whole platform ---------------------------------------------------------------------------------------------

def absent_ends(plan: dict, config: dict | None = None) -> dict[str, list[str]]:
    return {k: v for k, v in mandatory(plan, config).items() if k != plan_complete.NAME}


def test_a_fragment_that_claims_to_be_the_whole_platform_is_judged_as_before():
    plan = F.doc(*F.workload(refs=False, scaler_role=False)["resources"],
                 *F.chart_fragment("keda")["resources"])
    assert absent_ends(plan) == {}
    before = {rule.name: [m for _u, m in rule.findings(F.as_res(plan), WHOLE)] for rule in boundary.scoped_rules()}
    before = {k: v for k, v in before.items() if v}
    whole = absent_ends(plan, {"wholePlatform": True})
    assert whole == before
    assert "NodePool 'gpu' is a GPU NodePool but the plan has no NVIDIA device plugin DaemonSet: nvidia.com/gpu is " \
           "never allocatable there" in whole["device-plugin-placement"][0]
    assert "names no IAM role the plan creates" in whole["keda-auth-wiring"][0]
    assert any("has no system node group to run on: the plan has no aws:eks/nodeGroup:NodeGroup" in m
               for m in whole["controller-placement"])
    assert advisories(plan, {"wholePlatform": True}) == []
    # The platform component in the plan says the same; wholePlatform: false overrides it.
    marked = F.doc(*plan["resources"], F.entry(F.T_PLATFORM, "gpuburst", {}))
    assert absent_ends(marked) == whole and advisories(marked) == []
    assert absent_ends(marked, {"wholePlatform": False}) == {} and advisories(marked, {"wholePlatform": False})
    # Removing the platform again, then claiming it through config, restores the same messages.
    assert absent_ends(F.without(marked, F.T_PLATFORM), {"wholePlatform": True}) == whole


def test_the_dev_plan_declares_the_whole_platform_and_leaves_nothing_outside(dev_plan):
    res = F.as_res(dev_plan)
    scope = scope_of(res)
    assert scope.whole and scope.why == "the plan declares gpuburst:index:GpuBurstPlatform 'gpuburst'"
    assert boundary.boundary_findings(res) == []
    assert mandatory(dev_plan) == {}
    # Without the marker it is a partial plan holding every end: still nothing to report.
    partial = F.without(dev_plan, F.T_PLATFORM)
    assert not scope_of(F.as_res(partial)).whole
    assert mandatory(partial) == {} and advisories(partial) == []


# -- the policy, in the pack and over gRPC ---------------------------------------------------------------------------

def test_the_boundary_collects_every_scoped_policy_of_the_pack():
    names = [p.name for p in pack.all_policies()]
    assert [r.name for r in boundary.scoped_rules()] == [n for n in names if n in SCOPED]
    assert set(SCOPED) <= set(names)
    assert pack.all_policies()[-1] is boundary.POLICY
    schema = boundary.POLICY.config_schema.properties
    assert set(schema) == {"wholePlatform"} | {k for k, f in FACTS.items() if f.schema is not None}


def test_every_scoped_policy_takes_wholePlatform_and_its_facts_in_config():
    for name, rule in SCOPED.items():
        policy = next(p for p in pack.all_policies() if p.name == name)
        assert set(policy.config_schema.properties) == {"wholePlatform"} | {
            k for k in rule.keys if FACTS[k].schema is not None}, name


def test_a_rule_that_crashes_does_not_silence_the_others(monkeypatch):
    from policies.declare import ScopedRule

    def broken(resources, scope):
        raise RuntimeError("boom")

    rules = [ScopedRule("broken", broken, ())] + boundary.scoped_rules()
    monkeypatch.setattr(boundary, "scoped_rules", lambda: rules)
    assert any(ROLE_LINE in line for line in advisories(F.lone_trigger_auth()))


def test_the_issue_fragment_over_grpc_passes_with_advisories_only(analyze):
    report = analyze(F.workload(refs=False, scaler_role=False))
    assert report.mandatory == [], "\n".join(d.line() for d in report.mandatory)
    lines = [d for d in report.advisory if d.policy == boundary.NAME]
    assert len(lines) == 6 and all(d.level == "ADVISORY" for d in lines), [d.line() for d in report.diagnostics]
    plugin = one([d.message for d in lines], DEVICE_PLUGIN_LINE)
    assert plugin and {d.urn for d in lines if d.message == plugin} == {F.urn(F.T_NODEPOOL, "gpu-nodepool")}


def test_over_grpc_whole_platform_config_and_facts(analyze):
    plan = F.workload(refs=False, scaler_role=False)
    every = {rule.name: {"wholePlatform": True} for rule in boundary.scoped_rules()}
    report = analyze(plan, every)
    found = {d.policy for d in report.mandatory}
    assert {"device-plugin-placement", "keda-auth-wiring", "gpu-pod-schedulable"} <= found, found
    assert report.by_policy(boundary.NAME) != []  # the boundary's own config still says partial
    facts = {"devicePlugin": True, "nodeClassRootVolumeGiB": {"gpu": 100}, "kedaVersion": "2.20.2",
             "networkPolicyEnforced": True, "kedaWatchNamespaces": ["gpu"]}
    config = {name: dict(facts) for name in ("device-plugin-placement", "gpu-pod-schedulable",
                                             "gpu-pod-effective-diversity", "keda-pod-identity-provider",
                                             "network-policy-enforced", "keda-watches-namespace", boundary.NAME)}
    report = analyze(plan, config)
    assert report.mandatory == []
    role, plugin = sorted(report.by_policy(boundary.NAME), key=lambda d: d.message)
    assert role.message.startswith("TriggerAuthentication gpu/slides-sqs spec.podIdentity.roleArn")
    assert plugin.message.startswith("the NVIDIA device plugin runs on the cluster (policy config devicePlugin: true)")
    report = analyze(plan, {boundary.NAME: "mandatory"})
    assert {d.level for d in report.by_policy(boundary.NAME)} == {"MANDATORY"}


def test_a_bad_config_value_fails_closed_naming_it(analyze):
    report = analyze(F.lone_trigger_auth(), {"keda-auth-wiring": {"wholePlatform": "yes"}})
    (d,) = report.by_policy("keda-auth-wiring")
    assert d.level == "MANDATORY" and "policy config wholePlatform: 'yes' is not valid: true or false" in d.message


def test_outsides_are_never_reported_by_the_rule_that_found_them():
    plan = F.workload(refs=False, scaler_role=False)
    res = F.as_res(plan)
    scope = scope_of(res)
    found = [o for rule in boundary.scoped_rules() for o in outsides(rule.findings(res, scope))]
    assert len(found) > len(advisories(plan))  # several rules miss the same ends: said once
