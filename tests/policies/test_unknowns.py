"""Tests for the preview backstop: unknowns become markers, escaped unknowns and crashes become violations."""
from __future__ import annotations

import json

import pytest
from pulumi_policy import EnforcementLevel, ResourceValidationPolicy
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.proxy import UNKNOWN_NUMBER_VALUE, UnknownValueError, unknown_checking_proxy

from policies import pack, rehearsal, unknowns
from policies.unknowns import UNKNOWN, guard, plain


def test_plain_replaces_every_unknown_and_keeps_the_rest():
    U = unknowns.UNKNOWN_STRING
    raw = {"a": U, "b": [1, U, {"c": U, "d": "x"}], "e": {"f": UNKNOWN_NUMBER_VALUE}, "g": True, "h": None}
    proxied = unknown_checking_proxy(deserialize_properties(raw))
    with pytest.raises(UnknownValueError):
        proxied["a"]  # what a policy that reads the proxy directly runs into
    out = plain(proxied)
    assert out == {"a": UNKNOWN, "b": [1, UNKNOWN, {"c": UNKNOWN, "d": "x"}], "e": {"f": UNKNOWN}, "g": True,
                   "h": None}
    assert plain(raw) == out  # raw sentinels (no proxy) are recognised too
    assert isinstance(out["b"], list) and isinstance(out["e"], dict)
    assert unknowns.is_unknown(U) and unknowns.is_unknown(UNKNOWN) and not unknowns.is_unknown("x")
    assert not UNKNOWN  # never mistaken for a present, truthy value


def _policy(check) -> ResourceValidationPolicy:
    return ResourceValidationPolicy(name="probe", description="probe", validate=guard(check),
                                    enforcement_level=EnforcementLevel.MANDATORY)


def test_guard_turns_an_escaped_unknown_into_a_violation(run_rule):
    policy = _policy(lambda args: [f"spec is {args.props['spec']}"])  # reads the proxy directly: raises
    messages = run_rule(policy, "kubernetes:karpenter.sh/v1:NodePool", {"spec": unknowns.UNKNOWN_STRING})
    assert len(messages) == 1
    assert "value at .spec can't be known during preview" in messages[0]
    assert "must not pass silently" in messages[0]


def test_guard_fails_closed_on_a_crash(run_rule):
    def crash(args):
        raise KeyError("requirements")

    messages = run_rule(_policy(crash), "t", {})
    assert len(messages) == 1 and "could not read this resource (KeyError" in messages[0]


def test_guard_lets_not_applicable_through(run_rule):
    policy = _policy(lambda args: args.not_applicable("not a NodePool"))
    with pytest.raises(Exception) as raised:
        run_rule(policy, "t", {})
    assert type(raised.value).__name__ == "_NotApplicableError"


def test_unknown_message_names_the_field():
    message = unknowns.unknown_message("spec.x", "the thing")
    assert message.startswith("spec.x is unknown during preview") and "not an Output" in message


def unknown_everywhere(samples) -> dict:
    """A plan where each mandatory rule's deciding field is unknown (the engine's string sentinel)."""
    U = samples.U
    nodepool = samples.gpu_nodepool()
    nodepool["spec"]["template"]["spec"]["requirements"][0]["values"] = U
    nodepool["spec"]["limits"] = U
    nc = samples.nodeclass()
    nc["spec"]["amiSelectorTerms"][0]["alias"] = U
    nc["spec"]["subnetSelectorTerms"] = [{"tags": U}]   # whether the term is empty is unknown
    ta = samples.trigger_auth()
    ta["spec"]["podIdentity"]["provider"] = U
    sj = samples.scaled_job()
    sj["spec"]["maxReplicaCount"] = U
    sj["spec"]["rollout"]["strategy"] = U
    sj["spec"]["scalingStrategy"] = {"strategy": U}
    sj["metadata"]["annotations"]["gpuburst.io/stateful"] = U
    sj["spec"]["triggers"][0]["metadata"] = U
    sj["spec"]["jobTargetRef"]["template"]["spec"]["tolerations"] = U
    sj["spec"]["jobTargetRef"]["template"]["spec"]["containers"][0]["command"] = [
        "python", "-m", "worker", "consume", "--mode", "job", "--max-messages", "1"]  # against the unknown queueLength
    cache = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "model-cache"},
             "spec": {"hostPath": {"path": U, "type": "Directory"}, "claimRef": {"name": "gpuburst-model-cache"}}}
    queue = samples.work_queue()
    queue["visibilityTimeoutSeconds"] = U
    crd = samples.chart("karpenter-crd")
    crd["version"] = U
    ta["spec"]["podIdentity"]["roleArn"] = U
    karpenter = samples.chart("karpenter")
    karpenter["values"] = U
    association = {"namespace": "gpu", "serviceAccount": U, "roleArn": U}
    plugin = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin"},
              "spec": {"template": {"spec": {"tolerations": U, "containers": [
                  {"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin:v0",
                   "command": ["nvidia-device-plugin"]}]}}}}
    image = {"dockerfile": {"location": "worker/Dockerfile"}, "context": {"location": "."}}
    cluster = samples.cluster(U)
    cluster["vpcCniOptions"]["enableNetworkPolicy"] = U
    queue["kmsMasterKeyId"] = U
    egress = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "workers", "namespace": "gpu"},
              "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": U}}]}]}}
    trust = {"Statement": [{"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
                            "Action": "sts:AssumeRole", "Condition": U}]}
    labelled = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "unlabelled", "labels": U}}
    restricted = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "locked", "labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}}
    locked_app = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app", "namespace": "locked"},
                  "spec": {"template": {"spec": {"securityContext": U, "containers": [
                      {"name": "app", "image": U, "securityContext": U}]}}}}
    # A worker whose queue's visibility timeout and whose one HTTPS block (the `workers` policy above) are unknown,
    # two associations for one ServiceAccount on an unknown cluster, a KEDA whose watched namespaces are unknown.
    worker = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "w", "namespace": "gpu"},
              "spec": {"template": {"metadata": {"labels": {"app.kubernetes.io/name": "gpuburst-worker"}},
                                    "spec": {"containers": [{"name": "worker", "image": "i", "env": [
                                        {"name": "QUEUE_URL", "value": "https://sqs.us-east-1.amazonaws.com/"
                                                                       "123456789012/slides"},
                                        {"name": "VISIBILITY_TIMEOUT", "value": "600"}]}],
                                             # does it mount the model cache (model-cache-folder)?
                                             "volumes": [{"name": "cache", "persistentVolumeClaim": {
                                                 "claimName": U}}]}}}}
    twins = [{"namespace": "gpu", "serviceAccount": "w", "clusterName": U, "roleArn": "r"} for _ in range(2)]
    keda = samples.chart("keda")
    keda["values"] = {"watchNamespace": U}
    namespace = "kubernetes:core/v1:Namespace"
    return samples.plan((samples.T_DEPLOYMENT, worker), (samples.T_CHART, keda),
                        *(("aws:eks/podIdentityAssociation:PodIdentityAssociation", t) for t in twins),
                        (namespace, labelled), (namespace, restricted),
                        (samples.T_DEPLOYMENT, locked_app),
                        (samples.T_NODEPOOL, nodepool), (samples.T_NODECLASS, nc), (samples.T_TA, ta),
                        (samples.T_SCALEDJOB, sj), (samples.T_QUEUE, queue), (samples.T_CHART, crd),
                        (samples.T_CHART, karpenter), (samples.T_EKS, cluster),
                        ("aws:eks/podIdentityAssociation:PodIdentityAssociation", association),
                        ("kubernetes:apps/v1:DaemonSet", plugin), ("docker-build:index:Image", image),
                        ("kubernetes:networking.k8s.io/v1:NetworkPolicy", egress),
                        ("aws:cloudwatch/logGroup:LogGroup", {"name": U, "retentionInDays": 30}),
                        ("aws:iam/role:Role", {"assumeRolePolicy": trust}),
                        ("aws:s3/bucket:Bucket", {"tags": {"gpuburst.io/data-class": U}}),
                        ("kubernetes:core/v1:PersistentVolume", cache),
                        # A binding whose subjects are unknown: does it let the verify identity create Jobs?
                        ("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding", {
                            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                            "metadata": {"name": "who", "namespace": "gpu"}, "subjects": U,
                            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "x"}}))


def test_over_grpc_every_mandatory_rule_flags_its_unknown_as_mandatory(analyze, samples):
    report = analyze(unknown_everywhere(samples))
    assert not [d for d in report.diagnostics if "can't run policy" in d.message], report.diagnostics
    mandatory_policies = {p.name for p in pack.all_policies() if p.enforcement_level == EnforcementLevel.MANDATORY}
    # deploy-rehearsal judges resource-policy documents, which are computed by design (ARNs, endpoint ids): an
    # unknown one is said by its advisory `deploy-rehearsal-unjudged` and judged by `gpuburst rehearse` on the
    # synth's plan, never failed (a first preview of any stack would otherwise be blocked).
    mandatory_policies.discard(rehearsal.NAME)
    flagged = {d.policy for d in report.mandatory if "unknown during preview" in d.message}
    assert flagged == mandatory_policies, sorted(mandatory_policies - flagged)


def test_over_grpc_the_same_plan_with_plan_markers(analyze, samples):
    # The synth writes unknowns as components.synth.mocks.UNKNOWN; the harness sends them as the engine's sentinel.
    from components.synth.mocks import UNKNOWN as PLAN_UNKNOWN

    doc = unknown_everywhere(samples)
    text = json.dumps(doc).replace(samples.U, PLAN_UNKNOWN)
    report = analyze(json.loads(text))
    assert {d.policy for d in report.mandatory} == {d.policy for d in analyze(doc).mandatory}
