"""The dev stack's real plan (the lead's offline synth) passes the pack, and fails once its NodePool is pinned.

This runs `python -m components synth --stack dev --out TMP` in a subprocess, then the pack over the plan it wrote.
It is not skipped when the synth is missing or broken: the stack is what the pack exists to guard.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IT = "node.kubernetes.io/instance-type"


def test_dev_plan_has_the_resources_the_rules_judge(dev_plan):
    types = {r["type"] for r in dev_plan["resources"]}
    for expected in ("kubernetes:karpenter.sh/v1:NodePool", "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass",
                     "kubernetes:keda.sh/v1alpha1:TriggerAuthentication", "aws:sqs/queue:Queue",
                     "kubernetes:helm.sh/v4:Chart", "eks:index:Cluster"):
        assert expected in types, f"{expected} not in the dev plan (types: {sorted(types)})"


def test_dev_plan_passes_with_no_mandatory_violation(dev_plan, analyze):
    report = analyze(dev_plan)
    assert report.mandatory == [], "\n".join(d.line() for d in report.mandatory)


def test_dev_plan_with_its_nodepool_pinned_to_one_type_fails(dev_plan, analyze):
    plan = copy.deepcopy(dev_plan)
    pools = [r for r in plan["resources"] if r["type"] == "kubernetes:karpenter.sh/v1:NodePool"]
    assert pools, "no NodePool in the dev plan"
    pool = pools[0]
    reqs = pool["properties"]["spec"]["template"]["spec"].setdefault("requirements", [])
    listed = [v for r in reqs if r.get("key") == IT and r.get("operator") == "In" for v in r.get("values", [])]
    only = listed[0] if listed else "g5.xlarge"
    reqs[:] = [r for r in reqs if r.get("key") != IT] + [{"key": IT, "operator": "In", "values": [only]}]
    report = analyze(plan)
    found = [d for d in report.mandatory if d.policy == "nodepool-instance-diversity"]
    assert len(found) == 1 and found[0].urn == pool["urn"] and repr(only) in found[0].message, report.diagnostics


def test_the_cli_on_the_dev_plan_exits_0(dev_plan, tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(dev_plan), encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "policies", "check", str(path)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("policy check passed")


BOUNDARY_POLICIES = ("worker-network-policy", "network-policy-enforced", "pod-identity-trust-conditioned",
                     "slide-bucket-boundary", "customer-managed-keys")
"""The clinical-data boundary's mandatory rules (issue 19 item 6)."""
NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def test_dev_plan_keeps_the_clinical_data_boundary(dev_plan, analyze):
    types = {r["type"] for r in dev_plan["resources"]}
    for expected in (NETPOL, "aws:s3/bucket:Bucket", "aws:s3/bucketPolicy:BucketPolicy", "aws:kms/key:Key",
                     "aws:iam/role:Role", "aws:cloudwatch/logGroup:LogGroup"):
        assert expected in types, f"{expected} not in the dev plan"
    report = analyze(dev_plan)
    found = [d.line() for d in report.mandatory if d.policy in BOUNDARY_POLICIES]
    assert found == [], "\n".join(found)


def test_dev_plan_with_a_worker_policy_open_to_the_internet_fails_naming_it(dev_plan, analyze):
    plan = copy.deepcopy(dev_plan)
    policy = next(r for r in plan["resources"] if r["type"] == NETPOL
                  and r["properties"]["spec"].get("podSelector", {}).get("matchLabels"))
    rules = policy["properties"]["spec"].setdefault("egress", [])
    rules.append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 8443}]})
    report = analyze(plan)
    where = f"spec.egress[{len(rules) - 1}].to[0].ipBlock.cidr = '0.0.0.0/0'"
    found = [d for d in report.by_policy("worker-network-policy") if d.urn == policy["urn"] and where in d.message]
    assert len(found) == 1 and found[0].level == "MANDATORY", [d.line() for d in report.diagnostics]


def test_dev_plan_with_an_unconditioned_worker_trust_policy_fails_naming_the_role(dev_plan, analyze):
    plan = copy.deepcopy(dev_plan)
    role = next(r for r in plan["resources"] if r["type"] == "aws:iam/role:Role"
                and "pods.eks.amazonaws.com" in str(r["properties"].get("assumeRolePolicy")))
    doc = json.loads(role["properties"]["assumeRolePolicy"])
    for statement in doc["Statement"]:
        statement.pop("Condition", None)
    role["properties"]["assumeRolePolicy"] = json.dumps(doc)
    report = analyze(plan)
    found = [d for d in report.by_policy("pod-identity-trust-conditioned") if d.urn == role["urn"]]
    assert {("aws:SourceAccount" in d.message, "aws:SourceArn" in d.message) for d in found} == {
        (True, False), (False, True)}, [d.line() for d in report.diagnostics]
