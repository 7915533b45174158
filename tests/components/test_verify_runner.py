"""VerifyRunner: verify's RBAC as one table that covers what docs/verify.md says it needs, no `*` anywhere, an IAM
policy without wildcard actions, a hook Job renamed by exactly the versions it guards, a hardened pod, a
NetworkPolicy that never opens the internet."""
from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path

import pytest

from components.spec.names import WORKER_UID
from components.spec.validation import ConfigError
from components.synth.mocks import FAKE_ACCOUNT, run_under_mocks
from components.verify.checks import CHECK_NAMES
from components.verify.cli import build_parser
from components.verify_runner import (
    DESCRIBE_ONLY_ACTIONS,
    HOOK_SKIPPED_CHECKS,
    KARPENTER_NAMESPACE,
    KEDA_NAMESPACE,
    RBAC_RULES,
    RUNNER_NAME,
    VERIFY_GROUP,
    VerifyRunner,
    VerifyRunnerArgs,
    cluster_role_manifest,
    guarded_versions_hash,
    iam_policy,
    role_manifests,
    runner_network_policy,
    runner_pod_spec,
    verify_command,
)

ROOT = Path(__file__).resolve().parents[2]
IMAGE = f"{FAKE_ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/gpuburst-verify@sha256:{'a' * 64}"
WORKER_IMAGE = f"{FAKE_ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker@sha256:{'b' * 64}"
CLUSTER_ARN = f"arn:aws:eks:us-east-1:{FAKE_ACCOUNT}:cluster/gpuburst-dev"
VERSIONS = {"karpenter": "1.14.1", "keda": "2.20.2", "nvidia-device-plugin": "0.20.0", "ami-alias": "al2023@latest"}

# What docs/verify.md listed as the caller's Kubernetes permissions before the table replaced the prose:
# (scope, api group, resource, verb). The table must grant each one.
DOC_NEEDS = [
    *[("cluster", g, r, v) for g, r in [("", "nodes"), ("", "pods"), ("", "events"), ("apps", "deployments"),
                                        ("apps", "daemonsets"), ("apiextensions.k8s.io", "customresourcedefinitions"),
                                        ("karpenter.sh", "nodepools"), ("karpenter.sh", "nodeclaims"),
                                        ("karpenter.k8s.aws", "ec2nodeclasses"), ("keda.sh", "triggerauthentications"),
                                        ("keda.sh", "clustertriggerauthentications"), ("keda.sh", "scaledjobs")]
      for v in ("get", "list", "watch")],
    ("keda", "", "pods/log", "get"),
    ("karpenter", "", "pods/log", "get"),
    *[("workload", "batch", "jobs", v) for v in ("create", "get", "list", "delete")],
    *[("workload", "coordination.k8s.io", "leases", v) for v in ("get", "create", "update", "delete")],
]


def granted(scope: str, group: str, resource: str, verb: str) -> bool:
    return any(r.scope == scope and r.api_group == group and resource in r.resources and verb in r.verbs
               for r in RBAC_RULES)


@pytest.mark.parametrize("need", DOC_NEEDS, ids=lambda n: "/".join(x or "core" for x in n))
def test_the_table_grants_what_verify_needs(need):
    assert granted(*need), need


def test_the_doc_points_at_the_table_and_names_no_resource_it_lacks():
    text = (ROOT / "docs" / "verify.md").read_text()
    section = text.split("## Permissions verify needs", 1)[1].split("\n## ", 1)[0]
    assert "RBAC_RULES" in section and "components/verify_runner.py" in section
    resources = {res for r in RBAC_RULES for res in r.resources}
    not_resources = {r.api_group for r in RBAC_RULES} | set(CHECK_NAMES)
    # Every backticked lower-case word (or pods/log) the section mentions that is not an API group or a check: a
    # resource, which the table must hold.
    mentioned = set(re.findall(r"`([a-z]+(?:/[a-z]+)?)`", section)) - not_resources
    assert mentioned <= resources, mentioned - resources


def test_no_wildcard_verb_resource_or_group():
    for r in RBAC_RULES:
        assert "*" not in r.verbs and "*" not in r.resources and r.api_group != "*", r
        assert r.scope in ("cluster", "workload", "keda", "karpenter")
    assert all(v in ("get", "list", "watch") for r in RBAC_RULES if r.scope == "cluster" for v in r.verbs), \
        "the ClusterRole only reads"


def test_roles_land_in_their_namespaces_and_bind_the_service_account_and_the_group():
    pairs = role_manifests("gpuburst")
    assert {role["metadata"]["namespace"] for role, _ in pairs} == {"gpuburst", KEDA_NAMESPACE, KARPENTER_NAMESPACE}
    for role, binding in pairs:
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert {"kind": "ServiceAccount", "name": RUNNER_NAME, "namespace": "gpuburst"} in binding["subjects"]
        assert any(s["kind"] == "Group" and s["name"] == VERIFY_GROUP for s in binding["subjects"])
    (workload_role,) = [role for role, _ in pairs if role["metadata"]["namespace"] == "gpuburst"]
    assert {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "list", "watch", "delete"]} \
        in workload_role["rules"]
    assert cluster_role_manifest()["kind"] == "ClusterRole"


def _policy(**kw):
    return iam_policy(region="us-east-1", cluster_arn=CLUSTER_ARN,
                      queue_arns=[f"arn:aws:sqs:us-east-1:{FAKE_ACCOUNT}:gpuburst-dev-slides"],
                      results_bucket_arn="arn:aws:s3:::gpuburst-dev-results", results_prefix="results/", **kw)


def test_iam_policy_has_no_wildcard_action_and_scopes_what_can_be_scoped():
    doc = _policy(worker_role_arns=[f"arn:aws:iam::{FAKE_ACCOUNT}:role/w"],
                  inspected_role_arns=[f"arn:aws:iam::{FAKE_ACCOUNT}:role/w"],
                  kms_key_arn=f"arn:aws:kms:us-east-1:{FAKE_ACCOUNT}:key/k")
    actions = [a for st in doc["Statement"] for a in st["Action"]]
    assert all("*" not in a for a in actions), actions
    for need in ("eks:DescribeCluster", "eks:DescribeClusterVersions", "ec2:DescribeImages", "ec2:DescribeInstances",
                 "ec2:DescribeInstanceTypes", "sqs:SendMessage", "sqs:GetQueueAttributes", "s3:PutObject",
                 "s3:GetObject", "s3:DeleteObject", "sts:AssumeRole"):
        assert need in actions, need
    # The KEDA probe sends and looks, never receives: SQS cannot limit a receive, delete or visibility change to the
    # probe's own message, so the role may make none of them on a work queue.
    for never in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:PurgeQueue"):
        assert never not in actions, never
    for st in doc["Statement"]:
        assert st["Effect"] == "Allow"
        if st["Resource"] == "*":
            assert set(st["Action"]) <= set(DESCRIBE_ONLY_ACTIONS), st
            assert st["Condition"] == {"StringEquals": {"aws:RequestedRegion": "us-east-1"}}
    (objects,) = [st for st in doc["Statement"] if "s3:PutObject" in st["Action"]]
    # Only the probe objects (`.txt`): a work message verify sends cannot have the worker write a slide's overlay or
    # preview (`.overlay.ome.tif`, `.preview.png`, `.json`) anywhere verify may read.
    assert objects["Resource"] == ["arn:aws:s3:::gpuburst-dev-results/results/gpuburst-verify/*.txt"]


def test_no_assume_role_without_worker_roles():
    actions = [a for st in _policy()["Statement"] for a in st["Action"]]
    assert "sts:AssumeRole" not in actions and "iam:GetRole" not in actions and "iam:GetPolicy" not in actions


def test_attached_policies_are_read_only_when_named():
    doc = _policy(inspected_policy_arns=[f"arn:aws:iam::{FAKE_ACCOUNT}:policy/p"])
    (st,) = [st for st in doc["Statement"] if "iam:GetPolicy" in st["Action"]]
    assert st["Resource"] == [f"arn:aws:iam::{FAKE_ACCOUNT}:policy/p"]


def test_job_name_changes_with_each_guarded_version_and_only_then():
    base = guarded_versions_hash(VERSIONS)
    assert re.fullmatch(r"[0-9a-f]{8}", base)
    assert guarded_versions_hash(dict(reversed(list(VERSIONS.items())))) == base, "order does not matter"
    assert guarded_versions_hash(dict(VERSIONS)) == base
    for key in VERSIONS:
        changed = dict(VERSIONS, **{key: VERSIONS[key] + "-next"})
        assert guarded_versions_hash(changed) != base, key


def test_the_command_is_one_verify_accepts():
    cmd = verify_command(namespace="gpuburst", nodepool="gpu", cluster_name="gpuburst-dev", region="us-east-1",
                         queue_urls=["https://q1", "https://q2"], results_bucket="b", results_prefix="results/",
                         worker_image=WORKER_IMAGE)
    assert cmd[:4] == ["python", "-m", "gpuburst", "verify"]
    args = build_parser().parse_args(cmd[4:])
    assert args.json == "-" and args.strict and args.queue_url == ["https://q1", "https://q2"]
    assert args.worker_image == WORKER_IMAGE and args.cluster_name == "gpuburst-dev" and args.stack is None
    skipping = verify_command(namespace="gpuburst", nodepool="gpu", cluster_name="c", region="us-east-1",
                              queue_urls=[], results_bucket="b", results_prefix="results/", worker_image=WORKER_IMAGE,
                              skip_checks=HOOK_SKIPPED_CHECKS)
    assert build_parser().parse_args(skipping[4:]).skip == [",".join(HOOK_SKIPPED_CHECKS)]


def test_the_hook_skips_only_real_checks():
    assert set(HOOK_SKIPPED_CHECKS) <= set(CHECK_NAMES), "verify would exit 2 on an unknown --skip name"


def test_pod_is_hardened():
    pod = runner_pod_spec(IMAGE, ["python"], region="us-east-1")
    (c,) = pod["containers"]
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] and sc["runAsUser"] == WORKER_UID and sc["readOnlyRootFilesystem"]
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["resources"]["requests"] == c["resources"]["limits"] and "memory" in c["resources"]["limits"]
    assert not (pod["hostNetwork"] or pod["hostPID"] or pod["hostIPC"])
    assert "nvidia.com/gpu" not in c["resources"]["limits"], "verify itself needs no GPU"


def test_pod_refuses_an_unpinned_image():
    with pytest.raises(ConfigError):
        runner_pod_spec("python:3.11", ["python"], region="us-east-1")


def test_network_policy_never_allows_the_internet():
    pol = runner_network_policy("gpuburst", ("10.64.0.0/16",))
    assert pol["spec"]["ingress"] == [] and set(pol["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    for rule in pol["spec"]["egress"]:
        for peer in rule["to"]:
            if "ipBlock" in peer:
                net = ipaddress.ip_network(peer["ipBlock"]["cidr"])
                assert net.prefixlen > 0 and not net.is_global, net
    https = [r for r in pol["spec"]["egress"] if {"protocol": "TCP", "port": 443} in r["ports"]]
    assert https == [{"to": [{"ipBlock": {"cidr": "10.64.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 443}]}]
    for bad in (("0.0.0.0/0",), ("8.8.8.0/24",), (), None):
        with pytest.raises(ConfigError):
            runner_network_policy("gpuburst", bad)


def _args(**kw):
    return VerifyRunnerArgs(**{**dict(
        image=IMAGE, cluster_name="gpuburst-dev", cluster_arn=CLUSTER_ARN, region="us-east-1", namespace="gpuburst",
        nodepool="gpu", worker_image=WORKER_IMAGE, queue_urls=["https://q"],
        queue_arns=[f"arn:aws:sqs:us-east-1:{FAKE_ACCOUNT}:q"], results_bucket="b",
        results_bucket_arn="arn:aws:s3:::b", egress_cidrs=("10.64.0.0/16",), guarded_versions=dict(VERSIONS)), **kw})


def test_component_declares_rbac_identity_netpol_and_the_named_job():
    res = run_under_mocks(lambda: VerifyRunner("v", _args()))
    types = [r.type for r in res.registrations]
    for t in ("kubernetes:core/v1:ServiceAccount", "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
              "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
              "kubernetes:networking.k8s.io/v1:NetworkPolicy", "aws:eks/podIdentityAssociation:PodIdentityAssociation",
              "aws:iam/rolePolicy:RolePolicy", "kubernetes:batch/v1:Job"):
        assert t in types, t
    assert types.count("kubernetes:rbac.authorization.k8s.io/v1:Role") == 3
    assert "kubernetes:batch/v1:CronJob" not in types and "aws:eks/accessEntry:AccessEntry" not in types
    (job,) = res.monitor.by_type("kubernetes:batch/v1:Job")
    assert job.properties["metadata"]["name"] == f"{RUNNER_NAME}-{guarded_versions_hash(VERSIONS)}"
    spec = job.properties["spec"]
    assert spec["backoffLimit"] == 0 and spec["ttlSecondsAfterFinished"] > 0
    (policy,) = res.monitor.by_type("aws:iam/rolePolicy:RolePolicy")
    doc = json.loads(policy.properties["policy"])
    assert all("*" not in a for st in doc["Statement"] for a in st["Action"])


def test_optional_cron_job_and_ci_access_entry():
    res = run_under_mocks(lambda: VerifyRunner("v", _args(
        schedule="0 6 * * *", ci_principal_arn=f"arn:aws:iam::{FAKE_ACCOUNT}:role/ci")))
    (cron,) = res.monitor.by_type("kubernetes:batch/v1:CronJob")
    assert cron.properties["spec"]["schedule"] == "0 6 * * *"
    assert cron.properties["spec"]["concurrencyPolicy"] == "Forbid"
    (job,) = res.monitor.by_type("kubernetes:batch/v1:Job")
    assert cron.properties["spec"]["jobTemplate"]["spec"]["template"] == job.properties["spec"]["template"]
    (entry,) = res.monitor.by_type("aws:eks/accessEntry:AccessEntry")
    assert entry.properties["kubernetesGroups"] == [VERIFY_GROUP]
    assert not res.monitor.by_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")


def test_component_refuses_no_guarded_versions_and_open_egress():
    with pytest.raises(ConfigError):
        run_under_mocks(lambda: VerifyRunner("v", _args(guarded_versions={})))
    with pytest.raises(ConfigError):
        run_under_mocks(lambda: VerifyRunner("v", _args(egress_cidrs=("0.0.0.0/0",))))


def test_component_declares_the_admission_rule_before_any_right_to_create_jobs():
    from components.spec import verify_admission as va

    res = run_under_mocks(lambda: VerifyRunner("v", _args(
        probe_service_accounts=["slides-worker"], probe_env_names=["QUEUE_URL"],
        ci_principal_arn=f"arn:aws:iam::{FAKE_ACCOUNT}:role/ci")))
    (vap,) = res.monitor.by_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
    (vapb,) = res.monitor.by_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
    (params,) = [r for r in res.monitor.by_type("kubernetes:core/v1:ConfigMap")
                 if r.properties["metadata"]["name"] == va.ADMISSION_NAME]
    assert vap.properties["spec"] == va.admission_policy_manifest("gpuburst")["spec"]
    assert vapb.properties["spec"] == va.admission_binding_manifest("gpuburst")["spec"]
    assert params.properties["metadata"]["namespace"] == "gpuburst"
    data = params.properties["data"]
    assert data["image"] == WORKER_IMAGE and data["resultsBucket"] == "b"
    assert {"serviceAccount.slides-worker", "env.QUEUE_URL", "env.HOME"} <= set(data)
    urn = {r.name: r.urn for r in res.registrations}
    admission_binding = urn["v-admission-binding"]
    assert set(next(r for r in res.registrations if r.name == "v-admission-binding").dependencies) >= {
        urn["v-admission"], urn["v-admission-params"]}
    gated = [r for r in res.registrations if r.type in (
        "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding",
        "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding", "aws:eks/accessEntry:AccessEntry")]
    assert len(gated) == 5
    for r in gated:
        assert admission_binding in r.dependencies, r.name
