"""Tests for `worker-queue-visibility` and `worker-aws-egress`: a worker pod's visibility timeout is its queue's, and
its NetworkPolicies let it reach the AWS endpoints (HTTPS into the VPC)."""
from __future__ import annotations

import copy

import pytest

from policies import worker_contract as rule
from policies.plan import Res
from policies.unknowns import UNKNOWN

QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/tils-lab-slides"
T_SJ = "kubernetes:keda.sh/v1alpha1:ScaledJob"
T_NP = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
LABELS = {"app.kubernetes.io/name": "gpuburst-worker", "app.kubernetes.io/instance": "tils"}
COMPONENT_URN = "urn:pulumi:lab::tils-lab::gpuburst:index:GpuScaledJob${t}::{n}"
PLATFORM_URN = "urn:pulumi:dev::gpuburst::gpuburst:index:GpuBurstPlatform$gpuburst:index:GpuScaledJob${t}::{n}"


def res(rtype: str, name: str, props: dict, deps: tuple[str, ...] = (), urn: str | None = None) -> Res:
    return Res(rtype, urn or f"urn:pulumi:dev::gpuburst::{rtype}::{name}", name, None, props, deps)


def worker(env: dict | None = None, command: list | None = None, url=QUEUE_URL) -> dict:
    env = {"QUEUE_URL": url, "VISIBILITY_TIMEOUT": "600", **(env or {})}
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob", "metadata": {"name": "tils", "namespace": "lab"},
            "spec": {"jobTargetRef": {"template": {"metadata": {"labels": dict(LABELS)}, "spec": {
                "containers": [{"name": "worker", "image": "i",
                                "command": command or ["python", "-m", "worker", "consume", "--queue-url", url],
                                "env": [{"name": k, "value": v} for k, v in env.items()]}]}}}}}


def queue(visibility=240, name="tils-lab-slides") -> Res:
    props = {"name": name}
    if visibility is not None:
        props["visibilityTimeoutSeconds"] = visibility
    return res("aws:sqs/queue:Queue", f"{name}-queue", props)


# -- worker-queue-visibility -----------------------------------------------------------------------------------------

def test_a_pod_timeout_apart_from_its_queue_is_named_with_both_values_and_which_to_change():
    (urn, message), = rule.visibility_findings([queue(240), res(T_SJ, "tils", worker())])
    assert urn.endswith("::tils")
    assert "600 s" in message and "visibilityTimeoutSeconds 240" in message and "tils-lab-slides" in message
    assert "change the pod's" in message and "VISIBILITY_TIMEOUT to 240" in message  # a hand-written manifest's fix
    assert "\n" not in message


def test_equal_timeouts_or_a_queue_of_another_stack_pass():
    assert rule.visibility_findings([queue(600), res(T_SJ, "tils", worker())]) == []
    assert rule.visibility_findings([res(T_SJ, "tils", worker())]) == []  # the queue is not in the plan
    assert rule.visibility_findings([queue(None), res(T_SJ, "tils", worker())]) == []  # its value is not either


def test_the_worker_flag_wins_over_the_env():
    command = ["python", "-m", "worker", "consume", "--queue-url", QUEUE_URL, "--visibility-timeout=240"]
    assert rule.visibility_findings([queue(240), res(T_SJ, "tils", worker(command=command))]) == []
    command[-1] = "--visibility-timeout=900"
    (_urn, message), = rule.visibility_findings([queue(240), res(T_SJ, "tils", worker(command=command))])
    assert "900 s" in message and "command[6]" in message


def test_an_unknown_url_finds_the_queue_through_the_dependency():
    q = queue(240)
    sj = res(T_SJ, "tils", worker(url=UNKNOWN), deps=(q.urn,))
    (_urn, message), = rule.visibility_findings([q, queue(900, name="other"), sj])
    assert "visibilityTimeoutSeconds 240" in message


def test_an_unknown_queue_timeout_is_said_to_be_unknown():
    q = queue(UNKNOWN)
    (_urn, message), = rule.visibility_findings([q, res(T_SJ, "tils", worker())])
    assert "unknown during preview" in message and "visibilityTimeoutSeconds" in message


@pytest.mark.parametrize("template, says", [
    (COMPONENT_URN, "WorkerPodSettings.visibility_timeout_s=240"),
    (PLATFORM_URN, "gpuburst:workloads.<name>.expectedProcessingS"),
])
def test_the_fix_is_the_one_of_the_stack_kind(template, says):
    sj = res(T_SJ, "tils", worker(), urn=template.format(t=T_SJ, n="tils-scaledjob"))
    (_urn, message), = rule.visibility_findings([queue(240), sj])
    assert says in message and ("gpuburst:" not in message) == (template == COMPONENT_URN)


# -- worker-aws-egress -----------------------------------------------------------------------------------------------

def policy(egress: list, selector: dict | None = None, name="tils-worker") -> Res:
    return res(T_NP, name, {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                            "metadata": {"name": name, "namespace": "lab"},
                            "spec": {"podSelector": {"matchLabels": dict(LABELS)} if selector is None else selector,
                                     "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": egress}})


DNS = {"to": [{"namespaceSelector": {}}], "ports": [{"protocol": "UDP", "port": 53}]}
HTTPS = {"to": [{"ipBlock": {"cidr": "10.64.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 443}]}


def test_a_worker_policy_without_https_is_refused_naming_the_policy():
    (urn, message), = rule.egress_findings([res(T_SJ, "tils", worker()), policy([DNS])])
    assert urn.endswith("::tils") and "NetworkPolicy lab/tils-worker" in message and "TCP 443" in message
    assert "never takes a message" in message


def test_the_default_deny_alone_leaves_the_worker_no_https():
    deny = policy([], selector={}, name="default-deny")
    (_urn, message), = rule.egress_findings([res(T_SJ, "tils", worker()), deny])
    assert "NetworkPolicy lab/default-deny" in message


@pytest.mark.parametrize("egress", [
    [DNS, HTTPS],
    [{"to": [{"ipBlock": {"cidr": "10.64.0.0/16"}}]}],  # every port
    [{"to": [{"ipBlock": {"cidr": "10.64.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 400, "endPort": 500}]}],
])
def test_https_to_the_vpc_passes(egress):
    assert rule.egress_findings([res(T_SJ, "tils", worker()), policy(egress)]) == []


def test_with_the_vpc_in_the_plan_the_block_must_be_in_it():
    vpc = res(rule.VPC, "vpc", {"cidrBlock": "10.64.0.0/16"})
    elsewhere = {"to": [{"ipBlock": {"cidr": "10.99.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 443}]}
    (_urn, message), = rule.egress_findings([vpc, res(T_SJ, "tils", worker()), policy([elsewhere])])
    assert "overlapping the VPC's 10.64.0.0/16" in message
    assert rule.egress_findings([vpc, res(T_SJ, "tils", worker()), policy([HTTPS])]) == []


def test_no_egress_policy_at_all_is_left_to_worker_network_policy():
    assert rule.egress_findings([res(T_SJ, "tils", worker())]) == []


def test_an_unknown_block_is_said_to_be_unknown():
    unknown = {"to": [{"ipBlock": {"cidr": UNKNOWN}}], "ports": [{"protocol": "TCP", "port": 443}]}
    (_urn, message), = rule.egress_findings([res(T_SJ, "tils", worker()), policy([DNS, unknown])])
    assert "unknown during preview" in message and "ipBlock.cidr" in message


def test_the_component_fix_names_its_argument():
    """The blocking policy is the component's own (the same chain of parent types in a plan without parent links):
    its egress_cidrs is what feeds it."""
    sj = res(T_SJ, "tils", worker(), urn=COMPONENT_URN.format(t=T_SJ, n="tils-scaledjob"))
    own = policy([copy.deepcopy(DNS)])._replace(urn=COMPONENT_URN.format(t=T_NP, n="tils-netpol"))
    (_urn, message), = rule.egress_findings([sj, own])
    assert "pass WorkerAccessArgs.egress_cidrs=[" in message and "gpuburst:" not in message
    assert "network_policy=False" not in message


# The trial's stack: a GpuScaledJob with network_policy=False in a WorkloadNamespace whose default-deny selects it.
STACK_URN = "urn:pulumi:prod::cyto-burst::pulumi:pulumi:Stack::cyto-burst-prod"
JOB_URN = "urn:pulumi:prod::cyto-burst::pulumi:pulumi:Stack$gpuburst:index:GpuScaledJob::tils"
NS_URN = "urn:pulumi:prod::cyto-burst::pulumi:pulumi:Stack$gpuburst:index:WorkloadNamespace::lab"


def _child(rtype: str, name: str, props: dict, parent: str) -> Res:
    owner = parent.split("::")[2].rsplit("$", 1)[-1]
    return Res(rtype, f"urn:pulumi:prod::cyto-burst::{owner}${rtype}::{name}", name, parent, props)


def test_with_network_policy_false_the_fix_is_a_policy_of_the_stacks_own_not_egress_cidrs():
    sj = _child(T_SJ, "tils-scaledjob", worker(), JOB_URN)
    deny = policy([], selector={}, name="default-deny")
    deny = _child(T_NP, "lab-default-deny", deny.props, NS_URN)
    (_urn, message), = rule.egress_findings([sj, deny])
    assert "NetworkPolicy lab/default-deny" in message and "gpuburst:" not in message and "\n" not in message
    fix = message.split("never takes a message; ", 1)[1]
    assert fix.startswith("the component declares no NetworkPolicy of its own here (network_policy=False), so "
                          "WorkerAccessArgs.egress_cidrs would change nothing")
    assert "add a NetworkPolicy in namespace lab with podSelector.matchLabels {" in fix
    assert "app.kubernetes.io/instance: 'tils'" in fix and "app.kubernetes.io/name: 'gpuburst-worker'" in fix
    assert "TCP 443" in fix and "or set network_policy=True with WorkerAccessArgs.egress_cidrs=" in fix


def test_with_the_components_own_policy_in_the_plan_the_fix_is_egress_cidrs():
    vpc = Res(rule.VPC, "urn:pulumi:prod::cyto-burst::aws:ec2/vpc:Vpc::vpc", "vpc", STACK_URN,
              {"cidrBlock": "10.64.0.0/16"})
    elsewhere = {"to": [{"ipBlock": {"cidr": "10.99.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 443}]}
    sj = _child(T_SJ, "tils-scaledjob", worker(), JOB_URN)
    own = _child(T_NP, "tils-netpol", policy([DNS, elsewhere]).props, JOB_URN)
    (_urn, message), = rule.egress_findings([vpc, sj, own])
    assert message.endswith("never takes a message; pass WorkerAccessArgs.egress_cidrs=[the cluster's VPC CIDR]")
    # Another GpuScaledJob's policy (another parent) is not this one's own.
    other = _child(T_NP, "other-netpol", policy([DNS, elsewhere]).props, JOB_URN.replace("::tils", "::other"))
    (_urn, message), = rule.egress_findings([vpc, sj, other])
    assert "network_policy=False" in message


def test_the_platform_fix_is_read_from_the_parent_where_the_urn_names_only_the_nearest_type():
    platform_job = "urn:pulumi:dev::gpuburst::gpuburst:index:GpuBurstPlatform$gpuburst:index:GpuScaledJob::tils"
    sj = _child(T_SJ, "tils-scaledjob", worker(), platform_job)
    own = _child(T_NP, "tils-netpol", policy([DNS]).props, platform_job)
    (_urn, message), = rule.egress_findings([sj, own])
    assert "gpuburst:vpcCidr" in message and "WorkerAccessArgs" not in message


def test_both_rules_are_in_the_pack_and_mandatory():
    from pulumi_policy import EnforcementLevel

    from policies import pack

    levels = {p.name: p.enforcement_level for p in pack.all_policies()}
    assert levels[rule.VISIBILITY_NAME] == levels[rule.EGRESS_NAME] == EnforcementLevel.MANDATORY
