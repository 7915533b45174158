"""The dev stack's rendered plan passes every wiring rule, and each broken reference makes `python -m policies check`
exit 1 naming it."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from policies import capacity, hardware, schedulability, shapes, wiring
from policies.plan import Res
from policies.unknowns import plain

ROOT = Path(__file__).resolve().parents[2]
RULES = [wiring.pod_identity_findings, wiring.keda_auth_findings, schedulability.schedulable_findings,
         schedulability.diversity_findings, schedulability.device_plugin_findings, schedulability.controller_findings,
         hardware.hardware_findings]


def as_res(plan: dict) -> list[Res]:
    return [Res(r["type"], r["urn"], r.get("name", ""), r.get("parent") or None, plain(r["properties"]))
            for r in plan["resources"]]


def one(plan: dict, predicate) -> dict:
    found = [r for r in plan["resources"] if predicate(r)]
    assert len(found) == 1, [r["urn"] for r in found]
    return found[0]


def check(plan: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "policies", "check", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})


def mandatory_lines(result: subprocess.CompletedProcess, policy: str) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith(f"MANDATORY {policy} ")]


def test_the_dev_plan_holds_the_rendered_objects_the_rules_judge(dev_plan):
    names = {(r["type"], r["properties"].get("metadata", {}).get("namespace"),
              r["properties"].get("metadata", {}).get("name")) for r in dev_plan["resources"]}
    for expected in (("kubernetes:apps/v1:Deployment", "kube-system", "karpenter"),
                     ("kubernetes:apps/v1:Deployment", "keda", "keda-operator"),
                     ("kubernetes:core/v1:ServiceAccount", "keda", "keda-operator"),
                     ("kubernetes:core/v1:ServiceAccount", "kube-system", "karpenter"),
                     ("kubernetes:apps/v1:DaemonSet", "nvidia-device-plugin", "nvidia-device-plugin")):
        assert expected in names, expected


@pytest.mark.parametrize("findings", RULES, ids=lambda f: f.__name__)
def test_every_wiring_rule_passes_on_the_dev_plan(dev_plan, findings):
    assert findings(as_res(dev_plan)) == []


def test_renaming_the_keda_association_service_account_fails(dev_plan, tmp_path):
    plan = copy.deepcopy(dev_plan)
    association = one(plan, lambda r: r["type"] == wiring.POD_IDENTITY_ASSOCIATION
                      and r["properties"].get("namespace") == "keda")
    association["properties"]["serviceAccount"] = "keda-operator-renamed"
    result = check(plan, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = mandatory_lines(result, wiring.POD_IDENTITY_NAME)
    assert any(association["urn"] in line and "ServiceAccount keda/keda-operator-renamed, which no resource creates"
               in line for line in lines), result.stdout
    assert any("Deployment keda/keda-operator runs as ServiceAccount keda/keda-operator" in line for line in lines)
    assert any("has no PodIdentityAssociation" in line for line in mandatory_lines(result, wiring.KEDA_AUTH_NAME))


def test_device_plugin_selecting_a_label_no_nodepool_sets_fails(dev_plan, tmp_path):
    plan = copy.deepcopy(dev_plan)
    plugin = one(plan, lambda r: r["type"] == "kubernetes:apps/v1:DaemonSet"
                 and r["properties"]["metadata"]["name"] == "nvidia-device-plugin")
    plugin["properties"]["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.deploy": "true"}
    result = check(plan, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = mandatory_lines(result, schedulability.DEVICE_PLUGIN_NAME)
    assert len(lines) == 1 and plugin["urn"] in lines[0], result.stdout
    assert "DaemonSet nvidia-device-plugin/nvidia-device-plugin never runs on NodePool 'gpu'" in lines[0]
    assert '"nvidia.com/gpu.deploy"' in lines[0]


def test_scaledjob_asking_for_more_memory_than_any_admitted_type_fails(dev_plan, tmp_path):
    plan = copy.deepcopy(dev_plan)
    job = one(plan, lambda r: r["type"] == "kubernetes:keda.sh/v1alpha1:ScaledJob")
    for container in job["properties"]["spec"]["jobTargetRef"]["template"]["spec"]["containers"]:
        for section in ("requests", "limits"):
            container["resources"][section]["memory"] = "64Gi"
    result = check(plan, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = mandatory_lines(result, schedulability.SCHEDULABLE_NAME)
    assert len(lines) == 1 and job["urn"] in lines[0], result.stdout
    assert "Pending forever: pod ScaledJob gpuburst/slides requests 64Gi memory; the largest allocatable among " \
           "g4dn.2xlarge, g4dn.xlarge, g5.2xlarge, g5.xlarge is" in lines[0]
    assert "NodePool 'gpu'" in lines[0]


def test_a_nodepool_family_where_one_type_hosts_the_worker_fails(dev_plan, tmp_path):
    plan = copy.deepcopy(dev_plan)
    pool = one(plan, lambda r: r["type"] == "kubernetes:karpenter.sh/v1:NodePool")
    reqs = pool["properties"]["spec"]["template"]["spec"]["requirements"]
    reqs[:] = [r for r in reqs if r["key"] != "node.kubernetes.io/instance-type"] + [
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g5"]},
        {"key": "karpenter.k8s.aws/instance-size", "operator": "In", "values": ["xlarge", "2xlarge"]}]
    result = check(plan, tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert mandatory_lines(result, "nodepool-instance-diversity") == []  # the list has two types...
    lines = mandatory_lines(result, schedulability.DIVERSITY_NAME)  # ...but only one hosts the worker pod
    assert len(lines) == 2, result.stdout
    assert all("fits only 'g5.2xlarge' of NodePool 'gpu' (g5.xlarge cannot host it)" in line for line in lines)
    assert any("pod ScaledJob gpuburst/slides" in line for line in lines)
    assert any("pod Deployment gpuburst/studies" in line for line in lines)


def test_verify_gpu_job_with_its_default_nodepool_fits_the_dev_plan(dev_plan):
    from components.verify.gpujob import build_gpu_job
    from components.verify.model import VerifySettings

    nodepool = VerifySettings.__dataclass_fields__["nodepool"].default
    job = build_gpu_job("gpuburst-verify-gpu-test", "gpuburst", "img", nodepool=nodepool, deadline_s=600)
    resources = as_res(dev_plan) + [Res("kubernetes:batch/v1:Job", "urn:pulumi:dev::gpuburst::verify::job", "job",
                                        None, job)]
    assert schedulability.schedulable_findings(resources) == []
    assert schedulability.diversity_findings(resources) == []


def test_the_device_plugin_requests_count_in_the_gpu_nodes_daemonset_overhead(dev_plan):
    from components import catalogue

    resources = as_res(dev_plan)
    [shape] = shapes.nodepool_shapes(resources)
    t = catalogue.INSTANCE_TYPES["g5.2xlarge"]
    used, names = capacity.overhead(capacity.daemonset_pods(resources), shape, t)
    assert [n for n in names if "nvidia-device-plugin" in n and "mps" not in n], names
    assert not [n for n in names if "mps-control-daemon" in n], names  # never runs without an MPS sharing config
    assert used["cpu"] >= 0.05 and used["memory"] >= 64 * 2 ** 20, used
