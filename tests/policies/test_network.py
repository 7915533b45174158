"""Tests for `worker-network-policy` and `network-policy-enforced`: worker pods have an egress boundary that does not
reach the internet, and the VPC CNI enforces it; partial plans leave the other stack's ends to outside-this-stack."""
from __future__ import annotations

import copy
import json

import pytest

from components import catalogue
from components.spec.names import WORKER_LABEL
from policies import boundary, network
from policies.harness import UNKNOWN_STRING as U
from tests.policies import clinical_fragments as C
from tests.policies import fragments as F

WORKERS = network.worker_policy_findings
ENFORCED = network.enforcement_findings
NP = "NetworkPolicy gpu/slides-worker"
VPC_RULE = {"to": [{"ipBlock": {"cidr": F.VPC_CIDR}}], "ports": [{"protocol": "TCP", "port": 443}]}


def egress(*extra: dict) -> dict:
    """The worker NetworkPolicy with more egress rules."""
    rules = copy.deepcopy(F.worker_network_policy()["spec"]["egress"]) + list(extra)
    return F.entry(F.T_NETPOL, "gpu-slides-worker", F.worker_network_policy(egress=rules))


def swap(resources: list[dict] | tuple[dict, ...], *entries: dict) -> list[dict]:
    """The resources with each of `entries` in place of the one of the same name (or added)."""
    names = {e["name"] for e in entries}
    return [r for r in resources if r["name"] not in names] + list(entries)


def whole(*entries: dict) -> list[dict]:
    """A whole platform plan of the worker's namespace: the platform, the namespace, the cluster, the ScaledJob and
    the namespace's two NetworkPolicies, with `entries` in place of those of their names (or added)."""
    return swap([C.platform(), C.namespace(), C.eks_cluster(), C.worker_job(), *F.network_boundary()], *entries)


# -- sound fragments pass -------------------------------------------------------------------------------------------

def test_the_sound_fragments_pass():
    for findings in (WORKERS, ENFORCED):
        assert C.judge(findings, *whole()) == ([], []), findings
        assert C.judge(findings, *F.workload()["resources"]) == ([], []), findings
        assert C.judge(findings, *C.slide_bucket(), C.key(), *F.queues()) == ([], []), findings


def test_a_fragment_without_workers_or_network_policies_is_not_judged():
    for fragment in (F.lone_trigger_auth(), F.chart_fragment("keda"), F.chart_fragment("karpenter")):
        assert C.judge(WORKERS, *fragment["resources"]) == ([], [])
        assert C.judge(ENFORCED, *fragment["resources"]) == ([], [])


def test_dns_to_every_destination_and_private_blocks_are_no_way_out():
    dns = {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    private = {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}, {"ipBlock": {"cidr": "fc00::/7"}},
                      {"namespaceSelector": {}}]}
    assert C.judge(WORKERS, *whole(egress(dns, private))) == ([], [])


# -- the failures --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule,where,text", [
    ({"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 443}]},
     "spec.egress[3].to[0].ipBlock.cidr", "= '0.0.0.0/0' is every address, the internet included"),
    ({"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}]},
     "spec.egress[3].to[0].ipBlock.cidr", "= '0.0.0.0/0' is every address"),
    ({"to": [{"podSelector": {}}, {"ipBlock": {"cidr": "::/0"}}]},
     "spec.egress[3].to[1].ipBlock.cidr", "= '::/0' is every address"),
    ({"to": [{"ipBlock": {"cidr": "0.0.0.0/1"}}, {"ipBlock": {"cidr": "128.0.0.0/1"}}]},
     "spec.egress[3].to[0].ipBlock.cidr", "= '0.0.0.0/1' is wider than any private range (/8)"),
    ({"ports": [{"protocol": "TCP", "port": 443}]}, "spec.egress[3]",
     "has no `to` (every destination, the internet included) on ports 443/TCP"),
    ({}, "spec.egress[3]", "has no `to` (every destination, the internet included) on every port"),
    ({"ports": [{"protocol": "UDP", "port": 53, "endPort": 65535}]}, "spec.egress[3]",
     "has no `to` (every destination, the internet included) on ports 53-65535/UDP"),
], ids=["ipv4-any", "with-except", "ipv6-any", "two-halves", "no-to-https", "no-to-no-ports", "port-range"])
def test_a_worker_network_policy_allowing_the_internet_is_mandatory(rule, where, text):
    violations, _ = C.judge(WORKERS, *whole(egress(rule)))
    (message,) = [m for m in violations if where in m]
    assert message.startswith(f"{NP} selects worker pods (ScaledJob gpu/slides) and {where} {text}"), message
    assert "an exploited slide parser can copy slides out" in message
    # The same in a partial plan: the policy and the pods it selects are both here.
    partial, outside = C.judge(WORKERS, *swap(F.workload()["resources"], egress(rule)))
    assert any(where in m for m in partial) and outside == []


def test_the_components_worker_policy_as_it_was_fails_on_both_internet_blocks():
    https_anywhere = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
                      "ports": [{"protocol": "TCP", "port": 443}]}
    rules = copy.deepcopy(F.worker_network_policy()["spec"]["egress"])[:2] + [https_anywhere]
    violations, _ = C.judge(WORKERS, *whole(F.entry(F.T_NETPOL, "gpu-slides-worker",
                                                    F.worker_network_policy(egress=rules))))
    assert [m.split(" is every")[0] for m in violations] == [
        f"{NP} selects worker pods (ScaledJob gpu/slides) and spec.egress[2].to[0].ipBlock.cidr = '0.0.0.0/0'",
        f"{NP} selects worker pods (ScaledJob gpu/slides) and spec.egress[2].to[1].ipBlock.cidr = '::/0'"]


def test_any_policy_selecting_the_workers_counts_and_others_do_not():
    open_all = F.worker_network_policy(egress=[{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}], labels={})
    open_all["metadata"]["name"] = "allow-all"
    other = copy.deepcopy(open_all)
    other["metadata"]["name"] = "web"
    other["spec"]["podSelector"] = {"matchLabels": {"app": "web"}}
    violations, _ = C.judge(WORKERS, *whole(), F.entry(F.T_NETPOL, "allow-all", open_all),
                            F.entry(F.T_NETPOL, "web", other))
    assert [m.split(" and ")[0] for m in violations] == [
        "NetworkPolicy gpu/allow-all selects worker pods (ScaledJob gpu/slides)"]


def test_a_worker_no_egress_policy_selects_is_mandatory_naming_it():
    plan = [C.platform(), C.namespace(), C.eks_cluster(), C.worker_job()]
    coverage, deny = C.judge(WORKERS, *plan)[0]
    assert coverage.startswith("ScaledJob gpu/slides runs worker pods (app.kubernetes.io/name = 'gpuburst-worker') "
                               "that no NetworkPolicy with policyTypes Egress in namespace gpu selects: they reach any "
                               "address, the internet included")
    assert deny.startswith("namespace gpu runs worker pods (ScaledJob gpu/slides) but has no default-deny")
    ingress_only = F.worker_network_policy()
    ingress_only["spec"]["policyTypes"] = ["Ingress"]
    found = C.judge(WORKERS, *plan, F.entry(F.T_NETPOL, "ingress-only", ingress_only))[0]
    assert len(found) == 2 and "no NetworkPolicy with policyTypes Egress" in found[0]
    # The default-deny alone bounds them (nothing gets out), so only the policy letting them work is missing.
    assert C.judge(WORKERS, *plan, F.entry(F.T_NETPOL, "deny", F.default_deny())) == ([], [])
    # Mandatory in a partial plan too: the workload is here, so is the place for its policy.
    partial = [r for r in F.workload()["resources"] if r["type"] != F.T_NETPOL]
    violations, outside = C.judge(WORKERS, *partial)
    assert len(violations) == 1 and "no NetworkPolicy with policyTypes Egress" in violations[0]
    assert len(outside) == 1 and "could not check that another stack denies all traffic by default" in outside[0]


def test_a_gpu_pod_without_the_label_is_a_worker_and_the_warm_floor_placeholder_is_not():
    pod = F.pod()
    gpu = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "infer", "namespace": "lab"},
           "spec": {"template": {"metadata": {"labels": {"app": "infer"}}, "spec": pod}}}
    placeholder = copy.deepcopy(gpu)
    placeholder["metadata"]["name"] = "warm"
    placeholder["spec"]["template"]["spec"]["containers"][0]["image"] = catalogue.PAUSE_IMAGE
    violations, _ = C.judge(WORKERS, *whole(), F.entry(C.T_DEPLOYMENT, "infer", gpu),
                            F.entry(C.T_DEPLOYMENT, "warm", placeholder))
    assert [m.split(" that ")[0] for m in violations if "policyTypes Egress" in m] == [
        "Deployment lab/infer runs worker pods (its pods request a GPU)"]
    assert [m for m in violations if "default-deny" in m][0].startswith("namespace lab runs worker pods "
                                                                          "(Deployment lab/infer)")


def test_a_namespace_of_workers_without_default_deny():
    resources = [r for r in whole() if r["name"] != "gpu-default-deny"]
    (message,) = C.judge(WORKERS, *resources)[0]
    assert message.startswith("namespace gpu runs worker pods (ScaledJob gpu/slides) but has no default-deny "
                              "NetworkPolicy (podSelector {}, policyTypes [Ingress, Egress], no rules)")
    leaky = F.default_deny()
    leaky["spec"]["egress"] = [VPC_RULE]
    assert len(C.judge(WORKERS, *resources, F.entry(F.T_NETPOL, "leaky", leaky))[0]) == 1  # rules: no default-deny
    # A partial plan that creates the namespace owns it; one that does not leaves it to another stack.
    partial = [r for r in F.workload()["resources"] if r["name"] != "gpu-default-deny"]
    assert C.judge(WORKERS, *partial, C.namespace())[0][0].startswith("namespace gpu runs worker pods")
    violations, (line,) = C.judge(WORKERS, *partial)
    assert violations == [] and line == (
        "namespace gpu runs worker pods (ScaledJob gpu/slides), and this plan neither creates it nor declares a "
        "default-deny NetworkPolicy there: could not check that another stack denies all traffic by default in gpu")


def test_policies_for_workers_of_another_stack():
    by_label = F.worker_network_policy(egress=[{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}])
    (message,) = C.judge(WORKERS, F.entry(F.T_NETPOL, "by-label", by_label))[0]
    assert message.startswith(f"{NP} selects worker pods (pods labelled as workers) and spec.egress[0].to[0]")
    everyone = F.worker_network_policy(egress=[{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}], labels={})
    violations, (line,) = C.judge(WORKERS, F.entry(F.T_NETPOL, "everyone", everyone))
    assert violations == [] and line.startswith(f"{NP} selects every pod of namespace gpu (podSelector {{}}) and ")
    assert line.endswith("and this plan runs no pod there: could not check that no worker pod of another stack runs "
                         "in gpu")
    assert C.judge(WORKERS, C.platform(), F.entry(F.T_NETPOL, "everyone", everyone)) == ([], [])


def test_unknown_values_are_mandatory_naming_the_field():
    rule = {"to": [{"ipBlock": {"cidr": U}}]}
    (message,) = C.judge(WORKERS, *whole(egress(rule)))[0]
    assert message.startswith(f"{NP} spec.egress[3].to[0].ipBlock.cidr is unknown during preview")
    job = F.scaled_job()
    job["spec"]["jobTargetRef"]["template"]["metadata"]["labels"] = U
    (message,) = C.judge(WORKERS, *whole(F.entry(F.T_SCALEDJOB, "slides", job)))[0]
    assert message.startswith("spec.jobTargetRef.template.metadata.labels is unknown during preview")


def test_the_worker_label_is_the_components_one():
    assert network.worker_pods.__module__ == "policies.netpol"
    assert F.WORKER_LABELS["app.kubernetes.io/name"] == WORKER_LABEL


# -- network-policy-enforced ----------------------------------------------------------------------------------------

ENFORCED_LINE = ("the VPC CNI does not enforce NetworkPolicies, so NetworkPolicy gpu/default-deny, NetworkPolicy "
                 "gpu/slides-worker are inert")


def enforced(*cluster: dict, config: dict | None = None) -> tuple[list[str], list[str]]:
    rest = [r for r in whole() if r["type"] != C.T_EKS]
    return C.judge(ENFORCED, *rest, *cluster, config=config)


def test_either_form_of_enforcement_passes():
    assert enforced(C.eks_cluster()) == ([], [])
    assert enforced(C.eks_cluster(enableNetworkPolicy="true", configurationValues=C.STRICT_ENV)) == ([], [])
    # configurationValues as pulumi-eks also accepts them: a JSON string
    assert enforced(C.eks_cluster(enableNetworkPolicy=True, configurationValues=json.dumps(C.STRICT_ENV))) == ([], [])
    assert enforced(C.eks_cluster(), C.vpc_cni_addon()) == ([], [])
    assert enforced(F.entry(C.T_AWS_EKS, "eks", {"name": C.CLUSTER}), C.vpc_cni_addon()) == ([], [])
    assert enforced(C.vpc_cni_addon({"enableNetworkPolicy": "true", **C.STRICT_ENV})) == ([], [])  # an add-on alone


STANDARD = "in standard mode a new pod starts with a default allow until its policies are programmed"


@pytest.mark.parametrize("cluster,start", [
    ((C.eks_cluster(enableNetworkPolicy=True),),
     "Cluster gpuburst-cluster-eks vpcCniOptions.configurationValues.env.NETWORK_POLICY_ENFORCING_MODE is not set "
     "(the default is 'standard')"),
    ((C.eks_cluster(enableNetworkPolicy=True, configurationValues={"env": {"NETWORK_POLICY_ENFORCING_MODE":
                                                                           "standard"}}),),
     "Cluster gpuburst-cluster-eks vpcCniOptions.configurationValues.env.NETWORK_POLICY_ENFORCING_MODE = 'standard'"),
    ((C.eks_cluster(), C.vpc_cni_addon('{"enableNetworkPolicy": "true"}')),
     "Addon vpc-cni configurationValues env.NETWORK_POLICY_ENFORCING_MODE is not set (the default is 'standard')"),
    ((C.eks_cluster(), C.vpc_cni_addon('{"enableNetworkPolicy": "true", "env": {"NETWORK_POLICY_ENFORCING_MODE": '
                                       '"Strict"}}')),
     "Addon vpc-cni configurationValues env.NETWORK_POLICY_ENFORCING_MODE = 'Strict'"),
], ids=["cluster-mode-unset", "cluster-standard", "addon-mode-unset", "addon-not-exactly-strict"])
def test_enforcement_in_standard_mode_is_mandatory(cluster, start):
    (message,) = enforced(*cluster)[0]
    assert message.startswith(start), message
    assert STANDARD in message and "strict" in message.rsplit(";", 1)[1]


def test_an_unknown_enforcing_mode_is_mandatory_naming_the_field():
    (message,) = enforced(C.eks_cluster(enableNetworkPolicy=True, configurationValues=U))[0]
    assert message.startswith("Cluster gpuburst-cluster-eks vpcCniOptions.configurationValues is unknown during "
                              "preview"), message
    (message,) = enforced(C.eks_cluster(enableNetworkPolicy=True,
                                        configurationValues={"env": {"NETWORK_POLICY_ENFORCING_MODE": U}}))[0]
    assert "NETWORK_POLICY_ENFORCING_MODE is unknown during preview" in message, message


@pytest.mark.parametrize("cluster,start", [
    ((C.eks_cluster(enablePrefixDelegation=True),),
     "Cluster gpuburst-cluster-eks vpcCniOptions.enableNetworkPolicy is not set and no aws:eks/addon:Addon 'vpc-cni' "
     "sets configurationValues enableNetworkPolicy 'true'"),
    ((C.eks_cluster(enableNetworkPolicy=False),), "Cluster gpuburst-cluster-eks vpcCniOptions.enableNetworkPolicy = "
                                                  "False and no"),
    ((F.entry(C.T_AWS_EKS, "eks", {"name": C.CLUSTER}),), "Cluster eks has no aws:eks/addon:Addon 'vpc-cni'"),
    ((C.eks_cluster(), C.vpc_cni_addon('{"enableNetworkPolicy": "false"}')),
     "Addon vpc-cni configurationValues enableNetworkPolicy = 'false': the VPC CNI does not enforce"),
    ((C.eks_cluster(), C.vpc_cni_addon('{"env": {"ENABLE_PREFIX_DELEGATION": "true"}}')),
     "Addon vpc-cni configurationValues enableNetworkPolicy is not set (the add-on's default is 'false')"),
    ((C.eks_cluster(), C.vpc_cni_addon(None)), "Addon vpc-cni configurationValues enableNetworkPolicy is not set"),
    ((C.eks_cluster(), C.vpc_cni_addon("{nope")), "Addon vpc-cni configurationValues is not JSON"),
], ids=["neither-form", "cluster-false", "aws-cluster-no-addon", "addon-false", "addon-without-it", "addon-no-values",
        "addon-bad-json"])
def test_network_policies_nothing_enforces_are_mandatory(cluster, start):
    (message,) = enforced(*cluster)[0]
    assert message.startswith(start), message
    if "Cluster" in start.split(" ")[0]:
        assert ENFORCED_LINE in message


def test_a_whole_plan_without_a_cluster_is_mandatory_and_a_partial_one_asks_for_the_fact():
    (message,) = enforced()[0]
    assert message.startswith("the plan has no cluster (eks:index:Cluster, aws:eks/cluster:Cluster) nor 'vpc-cni' "
                              "add-on: nothing makes the VPC CNI enforce NetworkPolicies")
    plan = F.workload(refs=False)["resources"]
    violations, (line,) = C.judge(ENFORCED, *plan)
    assert violations == [] and line == ("the cluster is not in this plan: could not check that its VPC CNI enforces "
                                         "NetworkPolicies (NetworkPolicy gpu/default-deny, NetworkPolicy "
                                         "gpu/slides-worker are inert otherwise)")
    assert C.judge(ENFORCED, *plan, config={"networkPolicyEnforced": True}) == ([], [])
    (message,), _ = C.judge(ENFORCED, *plan, config={"networkPolicyEnforced": False})
    assert message.startswith("the cluster does not enforce NetworkPolicies (policy config networkPolicyEnforced: "
                              "false)")
    cluster = F.replaced(F.workload(), "platform-cluster", F.existing_cluster(networkPolicyEnforced=False))
    (message,), _ = C.judge(ENFORCED, *cluster["resources"])
    assert "(ExistingCluster 'platform-cluster' networkPolicyEnforced: false)" in message
    missing = {k: v for k, v in F.existing_cluster().items() if k != "networkPolicyEnforced"}
    # ExistingCluster without the property (components/existing.py before it registers it): not a fact, ask for it.
    violations, (line,) = C.judge(ENFORCED, *F.replaced(F.workload(), "platform-cluster", missing)["resources"])
    assert violations == [] and line.startswith("the cluster is not in this plan")


def test_unknown_enforcement_is_mandatory_naming_the_field():
    (message,) = enforced(C.eks_cluster(enableNetworkPolicy=U))[0]
    assert message.startswith("Cluster gpuburst-cluster-eks vpcCniOptions.enableNetworkPolicy is unknown during "
                              "preview")
    (message,) = enforced(C.eks_cluster(), C.vpc_cni_addon(U))[0]
    assert message.startswith("Addon vpc-cni configurationValues is unknown during preview")
    unnamed = C.vpc_cni_addon()
    unnamed["properties"]["addonName"] = U
    for plan in ((C.eks_cluster(enablePrefixDelegation=True), unnamed), (unnamed,)):
        (message,) = enforced(*plan)[0]
        assert message.startswith("Addon vpc-cni addonName is unknown during preview"), message


# -- over gRPC -----------------------------------------------------------------------------------------------------

def test_over_grpc_a_worker_policy_open_to_the_internet_fails_naming_it(analyze):
    report = analyze(F.doc(*whole(egress({"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}))))
    found = report.by_policy(network.WORKER_POLICY_NAME)
    (d,) = found
    assert d.level == "MANDATORY" and d.urn == F.urn(F.T_NETPOL, "gpu-slides-worker")
    assert "spec.egress[3].to[0].ipBlock.cidr = '0.0.0.0/0'" in d.message
    assert report.by_policy(network.ENFORCED_NAME) == []
    report = analyze(F.doc(*whole()), {network.WORKER_POLICY_NAME: "advisory"})
    assert report.by_policy(network.WORKER_POLICY_NAME) == []


def test_over_grpc_the_partial_fragment_asks_for_the_enforcement_fact_once(analyze):
    report = analyze(F.workload(refs=False))
    assert report.by_policy(network.ENFORCED_NAME) == []
    lines = [d for d in report.by_policy(boundary.NAME) if "VPC CNI enforces NetworkPolicies" in d.message]
    assert len(lines) == 1 and lines[0].level == "ADVISORY"
    assert "(not checked by network-policy-enforced: the plan declares no gpuburst:index:GpuBurstPlatform)" in \
        lines[0].message
    report = analyze(F.workload(refs=False), {network.ENFORCED_NAME: {"networkPolicyEnforced": False}})
    (d,) = report.by_policy(network.ENFORCED_NAME)
    assert d.level == "MANDATORY" and "policy config networkPolicyEnforced: false" in d.message
