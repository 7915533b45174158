"""Tests for the pack: its policy list, and that the Pulumi CLI's way of starting it serves the analyzer."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pulumi_policy import EnforcementLevel, ResourceValidationPolicy, StackValidationPolicy

from policies import (
    ami,
    boundary,
    buckets,
    gpu_nodepool,
    hardware,
    harness,
    images,
    keda_provider,
    keys,
    model_cache,
    namespaces,
    network,
    nodepool_diversity,
    pack,
    patterns,
    plan_complete,
    pod_identity,
    queues,
    rehearsal,
    schedulability,
    teams,
    trust,
    verify_admission,
    versions,
    wiring,
    worker_contract,
    workloads,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_rule_module_is_in_the_pack_with_unique_names():
    assert set(pack.RULE_MODULES) == {nodepool_diversity, gpu_nodepool, keda_provider, ami, versions, queues,
                                      workloads, wiring, schedulability, hardware, network, namespaces, images,
                                      trust, buckets, keys, verify_admission, worker_contract, pod_identity, patterns,
                                      teams, model_cache, plan_complete, rehearsal, boundary}
    policies = pack.all_policies()
    names = [p.name for p in policies]
    assert len(names) == len(set(names)) == sum(len(m.POLICIES) for m in pack.RULE_MODULES)
    for policy in policies:
        assert isinstance(policy, (ResourceValidationPolicy, StackValidationPolicy))
        assert policy.enforcement_level is not None, policy.name


def test_only_the_tell_dont_block_rules_are_advisory():
    advisory = {p.name for p in pack.all_policies() if p.enforcement_level == EnforcementLevel.ADVISORY}
    assert advisory == {keda_provider.IDENTITY_OWNER_NAME, versions.SUPPORT_WINDOW_NAME, versions.NEWER_PATCH_NAME,
                        trust.SESSION_TAGS_NAME, boundary.NAME, hardware.UNCHECKED_NAME,
                        hardware.DRIVER_UNCHECKED_NAME, rehearsal.UNJUDGED, patterns.NAME, teams.NODEPOOL_NAME}
    assert {verify_admission.NAME, ami.SELECTOR_NAME, worker_contract.VISIBILITY_NAME, worker_contract.EGRESS_NAME,
            pod_identity.NAME, teams.WATCH_NAME} <= {
        p.name for p in pack.all_policies() if p.enforcement_level == EnforcementLevel.MANDATORY}


def test_importing_the_package_builds_no_pack():
    # PolicyPack's constructor serves and blocks: an import that built one would never return.
    result = subprocess.run(
        [sys.executable, "-c", "import policies, policies.pack, policies.cli, policies.harness, policies.__main__; "
                               "print(len(policies.pack.all_policies()))"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(len(pack.all_policies()))


def test_the_pulumi_cli_way_of_running_the_pack_serves_the_analyzer(tmp_path):
    # The CLI runs `python -u -m pulumi.policy ENGINE_ADDRESS PACK_DIR` (runpy on policies/__main__.py), from the
    # project directory and without our PYTHONPATH: __main__ must find `policies` and `components` by itself.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:1", str(ROOT / "policies")]
    with harness.Pack(command=command, cwd=tmp_path, env=env, start_timeout_s=30) as running:
        info = running.info()
        assert info.name == pack.PACK_NAME
        assert [p.name for p in info.policies] == [p.name for p in pack.all_policies()]
        assert {p.name: harness.LEVEL_NAMES[p.enforcementLevel] for p in info.policies}[
            nodepool_diversity.NAME] == "MANDATORY"


def test_pulumi_policy_yaml_uses_the_python_runtime_and_the_repo_venv():
    import yaml

    doc = yaml.safe_load((ROOT / "policies" / "PulumiPolicy.yaml").read_text())
    assert doc["runtime"]["name"] == "python"
    assert (ROOT / "policies" / doc["runtime"]["options"]["virtualenv"]).resolve() == (ROOT / ".venv").resolve()
    requirements = (ROOT / "policies" / "requirements.txt").read_text()
    assert "pulumi-policy==" in requirements and "pulumi==" in requirements
