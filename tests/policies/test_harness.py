"""End-to-end tests: `python -m policies check` drives the real pack subprocess over gRPC; the harness's edges."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from components import catalogue
from policies import harness

ROOT = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 120


def run_check(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "policies", "check", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(ROOT)})


def write(tmp_path: Path, name: str, doc) -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


def pinned_nodepool(samples) -> dict:
    props = samples.gpu_nodepool()  # otherwise compliant: only the pin is wrong
    props["spec"]["template"]["spec"]["requirements"] = [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["g5.xlarge"]}]
    return props


# -- the acceptance cases ------------------------------------------------------------------------------------------

def test_nodepool_pinned_to_g5_xlarge_exits_1_naming_it(tmp_path, samples):
    result = run_check(str(write(tmp_path, "plan.json", samples.plan((samples.T_NODEPOOL, pinned_nodepool(samples))))))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("MANDATORY nodepool-instance-diversity nodepool-0: ")
    assert lines[0].endswith(" [urn:pulumi:dev::gpuburst::kubernetes:karpenter.sh/v1:NodePool::nodepool-0]")
    assert "g5.xlarge" in lines[0]
    assert lines[-1].startswith("policy check FAILED: 1 mandatory, 0 advisory")
    assert len(lines) == 2


def test_trigger_authentication_with_aws_eks_exits_1(tmp_path, samples):
    ta = samples.trigger_auth()
    ta["spec"]["podIdentity"] = {"provider": "aws-eks"}
    result = run_check(str(write(tmp_path, "plan.json", samples.plan((samples.T_TA, ta)))))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MANDATORY keda-pod-identity-provider" in result.stdout and "'aws-eks'" in result.stdout


def test_karpenter_chart_at_1_0_1_exits_1(tmp_path, samples):
    assert "1.0.1" in catalogue.KARPENTER_BROKEN_RELEASES  # the example is one of the catalogue's facts
    result = run_check(str(write(tmp_path, "plan.json", samples.plan((samples.T_CHART, samples.chart("karpenter",
                                                                                                      "1.0.1"))))))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "MANDATORY chart-versions" in result.stdout and "'1.0.1'" in result.stdout


def test_compliant_hand_written_plan_exits_0(tmp_path, samples):
    result = run_check(str(write(tmp_path, "plan.json", samples.plan(*samples.compliant_resources()))))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    # The pinned Karpenter and KEDA are behind their lines' newest patches (catalogue/lines.py): said, not failed.
    advisories = [x for x in lines[:-1] if x.startswith("ADVISORY chart-newer-patch ")]
    assert advisories == lines[:-1] and len(advisories) == 2, lines
    assert re.fullmatch(
        re.escape(f"policy check passed: 0 mandatory, 2 advisory violation(s) in {len(samples.compliant_resources())} "
                  f"resource(s) (pack gpuburst-guardrails, {len(harness_policy_names())} policies) in ") + r"\d+\.\d s",
        lines[-1]), lines


def harness_policy_names() -> list[str]:
    from policies.pack import all_policies

    return [p.name for p in all_policies()]


# -- config file end to end ----------------------------------------------------------------------------------------

def test_config_file_overrides_levels_end_to_end(tmp_path, samples):
    plan = write(tmp_path, "plan.json", samples.plan((samples.T_NODEPOOL, pinned_nodepool(samples))))
    advisory = run_check(str(plan), "--config", str(write(tmp_path, "a.json", {"nodepool-instance-diversity":
                                                                                "advisory"})))
    assert advisory.returncode == 0, advisory.stdout + advisory.stderr
    assert advisory.stdout.startswith("ADVISORY nodepool-instance-diversity ") and "g5.xlarge" in advisory.stdout
    disabled = run_check(str(plan), "--config", str(write(tmp_path, "d.json", {
        "nodepool-instance-diversity": {"enforcementLevel": "disabled"}})))
    assert disabled.returncode == 0 and "nodepool-instance-diversity" not in disabled.stdout
    assert "1 disabled" in disabled.stdout
    everything = run_check(str(plan), "--config", str(write(tmp_path, "all.json", {"all": "advisory"})))
    assert everything.returncode == 0 and "ADVISORY nodepool-instance-diversity" in everything.stdout
    raised = run_check(str(write(tmp_path, "p2.json", samples.plan((samples.T_TA, {"spec": {"podIdentity": {
        "provider": "aws"}}}), (samples.T_SCALEDJOB, _with_identity_owner(samples))))),
        "--config", str(write(tmp_path, "m.json", {"keda-sqs-identity-owner": "mandatory"})))
    assert raised.returncode == 1 and "MANDATORY keda-sqs-identity-owner" in raised.stdout


def _with_identity_owner(samples) -> dict:
    sj = samples.scaled_job()
    sj["spec"]["triggers"][0]["metadata"]["identityOwner"] = "operator"
    return sj


# -- unreadable input: exit 2 with one line -------------------------------------------------------------------------

@pytest.mark.parametrize("content,expected", [
    (None, "cannot read plan"),
    ("{not json", "is not valid JSON"),
    ([], "expected an object with a 'resources' list"),
    ({"resources": {"a": 1}}, "expected an object with a 'resources' list"),
    ({"resources": [{"properties": {}}]}, "resources[0]: 'type' must be a non-empty string"),
    ({"resources": [{"type": "aws:sqs/queue:Queue"}]}, "'properties' must be an object"),
    ({"resources": [{"type": "x:y:Z", "properties": {}, "urn": "u"}, {"type": "x:y:Z", "properties": {},
                                                                      "urn": "u"}]}, "share the URN"),
])
def test_unreadable_plans_exit_2(tmp_path, content, expected):
    path = tmp_path / "plan.json" if content is None else write(tmp_path, "plan.json", content)
    result = run_check(str(path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    err = result.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("policies check: ") and expected in err[0], err


@pytest.mark.parametrize("config,expected", [
    ({"nodepool-diversity": "advisory"}, "config names unknown policies: nodepool-diversity"),
    ({"nodepool-instance-diversity": "warn"}, "has enforcement level 'warn'"),
    ({"nodepool-instance-diversity": 3}, "must be a level string or an object"),
    ("[1, 2]", "expected an object mapping policy names"),
])
def test_bad_config_exits_2(tmp_path, samples, config, expected):
    plan = write(tmp_path, "plan.json", samples.plan((samples.T_QUEUE, samples.work_queue())))
    result = run_check(str(plan), "--config", str(write(tmp_path, "c.json", config)))
    assert result.returncode == 2 and expected in result.stderr, result.stderr


def test_usage_errors_exit_2_and_help_exits_0():
    assert run_check().returncode == 2
    helped = subprocess.run([sys.executable, "-m", "policies", "--help"], cwd=ROOT, capture_output=True, text=True,
                            timeout=CLI_TIMEOUT_S)
    assert helped.returncode == 0 and "python -m policies check PLAN.json" in helped.stdout


# -- the harness's process handling ---------------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone once reaped, which Popen.wait did.
    return True


def test_pack_is_stopped_after_use_and_answers_like_the_engine_expects(samples):
    with harness.Pack() as pack:
        pid = pack.pid
        assert pack.running and pack.port
        info = pack.info()
        assert info.name == "gpuburst-guardrails" and info.supportsConfig
        assert {p.name for p in info.policies} == set(harness_policy_names())
    assert not pack.running and not _alive(pid)


@pytest.mark.parametrize("script,expected", [
    ("import time; time.sleep(60)", "printed no port within"),
    ("print('hello', flush=True); import time; time.sleep(60)", "printed 'hello' instead of its port"),
    ("import sys; sys.stderr.write('boom\\n'); sys.exit(3)", "exited (code 3) instead of its port | stderr: boom"),
    ("print(1, flush=True); import time; time.sleep(60)", "did not accept a connection"),
])
def test_failed_starts_raise_one_line_and_stop_the_process(script, expected):
    pack = harness.Pack(command=[sys.executable, "-c", script], start_timeout_s=1.5, stop_timeout_s=2)
    with pytest.raises(harness.PackError) as raised:
        with pack:
            pass
    assert expected in str(raised.value) and "\n" not in str(raised.value)
    assert pack.pid is not None and not _alive(pack.pid)


def test_a_pack_that_ignores_terminate_is_killed():
    script = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('hello', flush=True); "
              "time.sleep(60)")
    pack = harness.Pack(command=[sys.executable, "-c", script], start_timeout_s=5, stop_timeout_s=0.5)
    with pytest.raises(harness.PackError):
        pack.__enter__()
    assert not _alive(pack.pid)


def test_wire_conversion_and_config_reconciliation(pack):
    from components.synth.mocks import UNKNOWN as PLAN_UNKNOWN

    struct = harness.to_struct({"a": PLAN_UNKNOWN, "b": [1, {"c": harness.UNKNOWN_STRING}], "d": None})
    assert struct["a"] == harness.UNKNOWN_STRING and struct["b"][1]["c"] == harness.UNKNOWN_STRING
    info = pack.info()
    reconciled = harness.reconcile_config(info, harness.parse_config({
        "all": "advisory", "sqs-work-queue": {"enforcementLevel": "disabled", "note": "x"}}))
    assert set(reconciled) == {p.name for p in info.policies}
    levels = {name: harness.LEVEL_NAMES[c.enforcementLevel] for name, c in reconciled.items()}
    assert levels.pop("sqs-work-queue") == "DISABLED" and set(levels.values()) == {"ADVISORY"}
    assert reconciled["sqs-work-queue"].properties["note"] == "x"
    defaults = harness.reconcile_config(info, {})
    assert {n: harness.LEVEL_NAMES[c.enforcementLevel] for n, c in defaults.items()} == \
        {p.name: harness.LEVEL_NAMES[p.enforcementLevel] for p in info.policies}


def test_plan_normalisation_makes_up_names_and_urns():
    plan = harness.normalise_plan({"stack": "prod", "resources": [{"type": "aws:sqs/queue:Queue", "properties": {}}]})
    res = plan["resources"][0]
    assert res["name"] == "queue-0" and res["urn"] == "urn:pulumi:prod::gpuburst::aws:sqs/queue:Queue::queue-0"
    assert res["parent"] == "" and res["dependencies"] == []


def test_hand_written_compliant_samples_are_valid_against_the_upstream_crds(samples, upstream_crds):
    from tests.components.crd_oracle import validate_against_crd

    for props, crd in ((samples.gpu_nodepool(), "karpenter-v1.14.1-nodepools.yaml"),
                       (samples.cpu_nodepool(), "karpenter-v1.14.1-nodepools.yaml"),
                       (pinned_nodepool(samples), "karpenter-v1.14.1-nodepools.yaml"),
                       (samples.nodeclass(), "karpenter-v1.14.1-ec2nodeclasses.yaml"),
                       (samples.trigger_auth(), "keda-v2.20.2-triggerauthentications.yaml"),
                       (samples.scaled_job(), "keda-v2.20.2-scaledjobs.yaml")):
        assert validate_against_crd(props, upstream_crds / crd) == [], (props["kind"], crd)
    # The pinned pool is valid to the API server: only the policy stops it.
