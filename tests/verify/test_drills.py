"""The incident drills of issue 28 against the real `verify` command line: a fake API server plays the cluster, a real
moto_server plays AWS. Each drill checks the exit status, that the summary names the object and the cause, and that
every check's summary line is at most SUMMARY_MAX_CHARS."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
from verify_fakes import (
    AMI_ERROR,
    DRILL_IMAGE,
    FakeApiServer,
    FakeClock,
    drill_argv,
    drill_aws_world,
    drill_cluster,
    karpenter_console_log,
    load,
    policy_denial,
    stuck_nodeclaim,
)

from components import catalogue
from components.verify import cli
from components.verify.checks import CHECKS
from components.verify.model import SUMMARY_MAX_CHARS

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CHECKS = [c.name for c in CHECKS if not c.opt_in]


def run_drill(kube, tmp_path: Path, url: str, *extra: str) -> tuple[int, dict[str, dict], str]:
    """The whole verify run over HTTP (the fake clock: waits take no time): (exit status, results by name, table)."""
    with FakeApiServer(kube) as server:
        out = io.StringIO()
        rc = cli.main(drill_argv(server.kubeconfig(tmp_path), url) + ["--json", str(tmp_path / "v.json"), *extra],
                      clock=FakeClock(), stdout=out, stderr=io.StringIO())
    results = json.loads((tmp_path / "v.json").read_text())["results"]
    assert_summaries(results)
    return rc, {r["name"]: r for r in results}, out.getvalue()


def assert_summaries(results: list[dict]) -> None:
    """Every check's summary is one line of at most SUMMARY_MAX_CHARS."""
    for r in results:
        assert len(r["summary"]) <= SUMMARY_MAX_CHARS and "\n" not in r["summary"], (r["name"], r["summary"])


def statuses(results: dict[str, dict]) -> dict[str, str]:
    return {name: r["status"] for name, r in results.items()}


@pytest.mark.parametrize("columns", [(), ("logger",), ("logger", "caller")],
                         ids=["no logger column", "logger", "logger and caller"])
def test_reconcile_errors_in_each_console_layout_fail_the_run_naming_the_nodeclass_and_the_error(
        aws, upstream_crds, tmp_path, columns):
    url, ids = drill_aws_world()
    kube = drill_cluster(upstream_crds, url, ids, karpenter_log=karpenter_console_log(columns))
    rc, results, table = run_drill(kube, tmp_path, url)
    assert rc == 1, table
    assert statuses(results) == {n: "fail" if n == "karpenter-health" else "pass" for n in DEFAULT_CHECKS}, table
    health = results["karpenter-health"]
    assert health["summary"].startswith(f"12 ERROR line(s) since its start: {AMI_ERROR!r} x12 on EC2NodeClass gpu")
    assert any("26 log line(s) read" in e and "26 understood (26 console)" in e for e in health["evidence"])


def test_a_karpenter_log_of_only_unreadable_lines_exits_2(aws, upstream_crds, tmp_path):
    url, ids = drill_aws_world()
    unreadable = "\n".join(f'time=2026-11-02T09:{48 + i}:30Z level=error msg="Reconciler error" EC2NodeClass=gpu'
                           for i in range(12)) + "\n"
    kube = drill_cluster(upstream_crds, url, ids, karpenter_log=unreadable)
    rc, results, table = run_drill(kube, tmp_path, url)
    assert rc == 2, table
    assert results["karpenter-health"]["status"] == "error"
    assert "none of its 12 line(s) is JSON or zap's console layout" in results["karpenter-health"]["summary"]
    assert table.strip().splitlines()[-1] == "verify: 1 could not run (karpenter-health)"


def test_a_stuck_nodeclaim_names_its_instance_reason_and_missing_step(aws, upstream_crds, tmp_path):
    url, ids = drill_aws_world()
    claims = [stuck_nodeclaim(f"gpu-{i:05d}", instance=f"i-0{i:016x}") for i in range(10)]
    kube = drill_cluster(upstream_crds, url, ids, nodeclaims=claims)
    rc, results, table = run_drill(kube, tmp_path, url, "--timeout-s", "900")
    assert rc == 1, table
    health = results["karpenter-health"]
    assert health["status"] == "fail"
    assert health["summary"] == ("10 NodeClaim(s) stuck past 900 s: gpu-00000 (i-00000000000000000, never Registered: "
                                 "NodeNotFound) +9 more")
    for i in range(10):
        line = next(e for e in health["evidence"] if e.startswith(f"NodeClaim gpu-{i:05d} "))
        assert f"instance i-0{i:016x}" in line and "NodeNotFound" in line and "never Registered" in line


def test_the_seed_incident_stops_early_and_keeps_every_summary_short(aws, upstream_crds, tmp_path):
    url, ids = drill_aws_world()
    kube = drill_cluster(upstream_crds, url, ids, trap=True)
    rc, results, table = run_drill(kube, tmp_path, url)
    assert rc == 1, table
    assert results["ami-canary"]["status"] == "fail" and results["gpu-job"]["status"] == "skipped"
    assert results["gpu-job"]["summary"].startswith("not run: ami-canary failed: 4 of NodePool gpu's 4 GPU type(s)")
    assert not any(j["metadata"]["name"].startswith("gpuburst-verify-gpu-") for j in kube.created)  # no Job made


def test_a_stale_queue_arn_in_the_scaler_policy_is_quoted(aws, upstream_crds, tmp_path):
    url, ids = drill_aws_world()
    stale = "arn:aws:sqs:us-east-1:123456789012:gpuburst-dev-slides-v1"
    boto3.client("iam").put_role_policy(RoleName="gpuburst-dev-slides-scaler", PolicyName="queue-metrics",
                                        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [{
                                            "Effect": "Allow", "Action": "sqs:GetQueueAttributes",
                                            "Resource": stale}]}))
    kube = drill_cluster(upstream_crds, url, ids)
    rc, results, table = run_drill(kube, tmp_path, url)
    assert rc == 1 and results["scaler-iam"]["status"] == "fail", table
    assert results["scaler-iam"]["summary"] == (
        "scaler role gpuburst-dev-slides-scaler may not sqs:GetQueueAttributes on queue gpuburst-dev-slides "
        f"(implicit); its policies grant it on {stale}")


def test_a_failed_ami_canary_ends_a_full_run_with_the_default_timeout_within_60_s(aws, upstream_crds, tmp_path):
    """The real command in a child process, on the real clock, with the default --timeout-s (900 s): the gpu-job
    used to wait it out (+30 s) after ami-canary had already shown that no GPU node of the pool can work."""
    url, ids = drill_aws_world()
    # the pool at zero: the gpu-job would have to launch a node; KEDA reacts to the probe so keda is quick
    kube = drill_cluster(upstream_crds, url, ids, trap=True, keda_reacts=True, nodes=[])
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    with FakeApiServer(kube) as server:
        argv = drill_argv(server.kubeconfig(tmp_path), url) + ["--json", str(tmp_path / "v.json")]
        assert "--timeout-s" not in argv
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-c", "import sys; from components.verify.cli import main; "
                               "raise SystemExit(main(sys.argv[1:]))", *argv], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        elapsed = time.monotonic() - start
    doc = json.loads((tmp_path / "v.json").read_text())
    results = {r["name"]: r for r in doc["results"]}
    assert_summaries(doc["results"])
    assert results["ami-canary"]["status"] == "fail", done.stdout
    assert results["gpu-job"]["status"] == "skipped", done.stdout
    assert "the Job would wait out --timeout-s (900 s + 30 s)" in " ".join(results["gpu-job"]["evidence"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert elapsed < 60, f"the run took {elapsed:.0f} s"


def test_versions_names_the_newest_patch_of_the_pinned_lts_line_with_its_support_end_and_action_required(
        aws, upstream_crds, tmp_path):
    """Issue 28: Karpenter 1.14.1 runs (the recorded Deployment, as pinned); `verify --check versions` names 1.14.4 as
    the newest patch of the 1.14 LTS line, its support end and its Action Required, and stays a pass (news for the
    maintainer, not a fault of the cluster)."""
    assert catalogue.CHARTS["karpenter"].version == "1.14.1", "the drill is the 1.14.1 pin of issue 28: rewrite it"
    url, ids = drill_aws_world()
    kube = drill_cluster(upstream_crds, url, ids)
    kube.deployments = [load("deployment_karpenter_1.14.1.json") if "karpenter" in d["metadata"]["name"] else d
                        for d in kube.deployments]
    rc, results, table = run_drill(kube, tmp_path, url, "--check", "versions")
    assert list(results) == ["versions"] and rc == 0, table
    r = results["versions"]
    assert r["status"] == "pass", r
    assert r["summary"] == ("all pass and match the pins; karpenter 1.14.1 is behind 1.14.4, its line's newest patch "
                            "(the karpenter 1.14 LTS line is supported until Jul 2027); ACTION REQUIRED in 1.14.4")
    assert "karpenter 1.14.1: the karpenter 1.14 LTS line is supported until Jul 2027" in r["evidence"]
    action = next(e for e in r["evidence"] if e.startswith("karpenter 1.14.4 ACTION REQUIRED before upgrading: "))
    assert catalogue.KARPENTER_EMPTY_SELECTOR_TERMS in action and "releases/tag/v1.14.4" in action
    note = next(e for e in r["evidence"] if e.startswith("upgrade: karpenter 1.14.1: "))
    for patch in ("1.14.2: ", "1.14.3: classify SpotMaxPriceTooLow", "1.14.4: skip EC2NodeClass selector terms"):
        assert patch in note, patch
    assert "pass     all pass and match the pins; karpenter 1.14.1 is behind 1.14.4" in table.splitlines()[1], table


def test_an_empty_selector_term_fails_ami_canary_in_one_line_naming_the_term(aws, upstream_crds, tmp_path):
    """Issue 28: `subnetSelectorTerms: [{tags: {}}]`, `amiSelectorTerms: [{name: "", owner: amazon}]` — which
    Karpenter 1.14.4 ignores — fail the check that reads the EC2NodeClass, naming the term; nothing else fails."""
    url, ids = drill_aws_world()
    kube = drill_cluster(upstream_crds, url, ids)
    spec = kube.nodeclasses["gpu"]["spec"]
    spec["subnetSelectorTerms"] = [{"tags": {}}]
    spec["amiSelectorTerms"] = [{"name": "", "owner": "amazon"}]
    rc, results, table = run_drill(kube, tmp_path, url)
    assert rc == 1, table
    assert statuses(results) == {n: "fail" if n == "ami-canary" else "pass" for n in DEFAULT_CHECKS}, table
    canary = results["ami-canary"]
    assert canary["summary"].startswith('2 empty selector terms, first: EC2NodeClass gpu spec.amiSelectorTerms[0] = '
                                        '{name: "", owner: amazon}: an empty name; Karpenter 1.14.4 ignores such a '
                                        'term'), canary["summary"]
    assert any(e.startswith("EC2NodeClass gpu spec.subnetSelectorTerms[0] = {tags: {}}: an empty tags map; ")
               for e in canary["evidence"])
    assert [line for line in table.splitlines() if "EC2NodeClass gpu spec.amiSelectorTerms[0]" in line] != []


def _admission_by_the_rule(kube) -> None:
    """The fake API server admits a Job only as verify's admission rule does (the policy, binding and params built by
    spec/verify_admission.py for the drill's stack, evaluated with cel-python), for a member of gpuburst:verify."""
    from components.spec import verify_admission as va
    from components.verify.identity_probe import live_targets
    from tests.components.admission_oracle import decide

    (target,) = live_targets(kube.scaled_jobs, [])
    params = va.admission_params_manifest("gpuburst", va.admission_params_data(
        image=DRILL_IMAGE, results_bucket="gpuburst-dev-results", results_prefix="results/",
        service_accounts=[target.service_account], env_names=[e["name"] for e in target.container.get("env", [])]))
    policy, binding = va.admission_policy_manifest("gpuburst"), va.admission_binding_manifest("gpuburst")

    def admit(job: dict):
        decision = decide(policy, binding, params, job, namespace="gpuburst", user="ci", groups=[va.VERIFY_GROUP])
        kube.admission_decisions.append(decision)
        return policy_denial(job, va.ADMISSION_NAME, decision.denied[0]) if decision.denied else None

    kube.admission_decisions = []
    kube.job_admission = admit


def test_the_probe_jobs_pass_the_admission_rule_over_the_wire(aws, upstream_crds, tmp_path):
    url, ids = drill_aws_world()
    kube = drill_cluster(upstream_crds, url, ids)
    _admission_by_the_rule(kube)
    rc, results, table = run_drill(kube, tmp_path, url, "--check", "workload-identity,gpu-job")
    assert rc == 0 and statuses(results) == {"workload-identity": "pass", "gpu-job": "pass"}, table
    assert len(kube.admission_decisions) == 2 and all(d.matched for d in kube.admission_decisions)


def test_a_probe_the_admission_rule_refuses_is_reported_as_the_rules_refusal(aws, upstream_crds, tmp_path):
    """verify given a tag instead of the stack's digest: the rule refuses both probes; each check says that verify's
    admission rule refused it, quoting the rule's message (an error, exit 2: nothing was judged)."""
    url, ids = drill_aws_world()
    kube = drill_cluster(upstream_crds, url, ids)
    tagged = DRILL_IMAGE.split("@")[0] + ":latest"
    kube.scaled_jobs[0]["spec"]["jobTargetRef"]["template"]["spec"]["containers"][0]["image"] = tagged
    _admission_by_the_rule(kube)
    with FakeApiServer(kube) as server:
        args = [a if a != DRILL_IMAGE else tagged for a in drill_argv(server.kubeconfig(tmp_path), url)]
        assert tagged in args
        rc = cli.main(args + ["--json", str(tmp_path / "v.json"), "--check", "workload-identity,gpu-job"],
                      clock=FakeClock(), stdout=io.StringIO(), stderr=io.StringIO())
    results = {r["name"]: r for r in json.loads((tmp_path / "v.json").read_text())["results"]}
    assert_summaries(list(results.values()))
    assert rc == 2 and statuses(results) == {"workload-identity": "error", "gpu-job": "error"}, results
    refused = ("verify's admission rule (ValidatingAdmissionPolicy gpuburst-verify-probes) refused the probe Job: "
               "a verify probe runs only the worker image named in the admission params, by digest")
    for name in ("workload-identity", "gpu-job"):
        text = " ".join([results[name]["summary"]] + results[name]["evidence"])
        assert refused in text, (name, results[name])
        assert "verify's admission rule" in results[name]["summary"], results[name]["summary"]
    assert kube.created == []  # nothing was admitted
