"""The command line: --help, the one-line refusals, stack outputs through a stand-in pulumi, and end to end runs
against a local Kubernetes API (FakeApiServer) plus SQS/S3/EC2/STS on a real moto_server."""
from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
from verify_fakes import (
    DRILL_CLUSTER,
    DRILL_IMAGE,
    DRILL_ROLE,
    FakeApiServer,
    FakeClock,
    FakeKube,
    drill_aws_world,
    drill_cluster,
    load,
    pinned,
    write_kubeconfig,
)

from components import catalogue
from components.verify import cli
from components.verify.checks import CHECKS

ROOT = Path(__file__).resolve().parents[2]
IMAGE = DRILL_IMAGE
ROLE = DRILL_ROLE
CLUSTER = DRILL_CLUSTER


def _run(args: list[str], env: dict | None = None, module: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "components", "verify", *args] if module else [
        sys.executable, "-c",
        "import sys; from components.verify.cli import main; raise SystemExit(main(sys.argv[1:]))",
        *args]
    full_env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    full_env.update(env or {})
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60, env=full_env)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_help_lists_every_check_and_what_it_proves():
    out = io.StringIO()
    with pytest.raises(SystemExit) as e:
        sys_stdout, sys.stdout = sys.stdout, out
        try:
            cli.main(["--help"])
        finally:
            sys.stdout = sys_stdout
    assert e.value.code == 0
    text = " ".join(out.getvalue().split())
    for check in CHECKS:
        assert f" {check.name} " in text
        assert " ".join(check.proves.split()[:8]) in text
    for flag in ("--stack", "--kubeconfig", "--queue-url", "--json", "--skip", "--nodepool", "--namespace",
                 "--results-bucket", "--results-prefix", "--worker-role-arn", "--grace-s", "--timeout-s",
                 "--cluster-name"):
        assert flag in text


@pytest.mark.parametrize("module", [False, True])
def test_unreachable_api_exits_at_once_with_one_line(tmp_path, module):
    port = _closed_port()
    kubeconfig = write_kubeconfig(tmp_path, f"https://127.0.0.1:{port}")
    start = time.monotonic()
    done = _run(["--kubeconfig", str(kubeconfig)], module=module)
    elapsed = time.monotonic() - start
    assert done.returncode != 0
    assert elapsed < 10
    lines = done.stderr.strip().splitlines()
    assert lines == [f"verify: cannot reach the Kubernetes API at https://127.0.0.1:{port}: connection refused — is "
                     "the kubeconfig for the right cluster?"], done.stderr
    assert done.stdout == ""


def test_no_kubeconfig_at_all_is_one_line(tmp_path):
    done = _run([], env={"HOME": str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "verify: no kubeconfig found ($KUBECONFIG unset, no ~/.kube/config, not in a pod) — pass --kubeconfig PATH "
        "or --stack NAME"]


def test_stack_without_the_pulumi_cli_is_one_line(tmp_path):
    done = _run(["--stack", "dev"], env={"PATH": str(tmp_path)})
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verify: the pulumi CLI is not installed")
    assert "--kubeconfig" in lines[0]


def _fake_pulumi(folder: Path, outputs: dict | None, exit_code: int = 0, stderr: str = "") -> str:
    """A stand-in `pulumi` on PATH that prints the given outputs (checking the arguments verify passes)."""
    (folder / "outputs.json").write_text(json.dumps(outputs or {}))
    script = folder / "pulumi"
    script.write_text(f"""#!/bin/sh
[ "$1 $2 $3 $4 $5 $6" = "stack output --json --show-secrets --stack dev" ] || {{ echo "bad args: $*" >&2; exit 3; }}
[ -n "{stderr}" ] && echo "{stderr}" >&2
[ {exit_code} -ne 0 ] && exit {exit_code}
cat "{folder / 'outputs.json'}"
""")
    script.chmod(0o755)
    return f"{folder}:{os.environ.get('PATH', '')}"


def test_stack_outputs_feed_the_run(tmp_path):
    port = _closed_port()
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                  "users": [{"name": "u", "user": {"token": "t"}}]}
    path = _fake_pulumi(tmp_path, {"kubeconfig": json.dumps(kubeconfig), "queueUrls": {"slides": "https://q"},
                                   "imageRef": IMAGE})
    done = _run(["--stack", "dev"], env={"PATH": path})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"verify: cannot reach the Kubernetes API at https://127.0.0.1:{port}: connection refused — is the "
        "kubeconfig for the right cluster?"]


def test_failing_pulumi_is_one_line(tmp_path):
    path = _fake_pulumi(tmp_path, None, exit_code=255, stderr="error: no stack named 'dev' found")
    done = _run(["--stack", "dev"], env={"PATH": path})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "verify: `pulumi stack output --stack dev` failed (exit 255): error: no stack named 'dev' found"]


def test_settings_from_stack_outputs_and_flags(tmp_path):
    args = cli.build_parser().parse_args(["--namespace", "override", "--skip", "gpu-job,hardware-ami"])
    outputs = {"kubeconfig": {"apiVersion": "v1"}, "queueUrls": {"studies": "https://q/2", "slides": "https://q/1"},
               "workerRoleArns": {"slides": "arn:aws:iam::1:role/s", "studies": "arn:aws:iam::1:role/t"},
               "imageRef": IMAGE, "resultsBucket": "b", "gpuNodePool": "gpu-a10g", "namespace": "from-stack"}
    s = cli.settings_from(args, outputs, str(tmp_path))
    assert [(w.name, w.queue_url, w.worker_role_arn) for w in s.workloads] == [
        ("slides", "https://q/1", "arn:aws:iam::1:role/s"), ("studies", "https://q/2", "arn:aws:iam::1:role/t")]
    assert (s.nodepool, s.namespace, s.worker_image, s.results_bucket) == ("gpu-a10g", "override", IMAGE, "b")
    assert s.skip == ("gpu-job", "hardware-ami")
    assert json.loads(Path(s.kubeconfig).read_text()) == {"apiVersion": "v1"}
    assert oct(Path(s.kubeconfig).stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("argv,outputs,cluster_name", [
    ([], {}, None),
    ([], {"clusterName": "gpuburst-dev-eks"}, "gpuburst-dev-eks"),
    ([], {"clusterName": ""}, None),
    (["--cluster-name", "gpuburst-other"], {}, "gpuburst-other"),
    (["--cluster-name", "gpuburst-other"], {"clusterName": "gpuburst-dev-eks"}, "gpuburst-other"),
])
def test_cluster_name_from_the_flag_or_the_stack_output(tmp_path, argv, outputs, cluster_name):
    s = cli.settings_from(cli.build_parser().parse_args(argv), outputs, str(tmp_path))
    assert s.cluster_name == cluster_name
    assert cli.STACK_OUTPUTS["cluster_name"] == "clusterName"


@pytest.mark.parametrize("argv,message", [
    (["--skip", "gpu"], "verify: --skip 'gpu' is not a check (checks: ami-canary, versions, karpenter-health, "
                        "worker-iam, workload-identity, scaler-iam, keda, gpu-job, gpu-allocatable, hardware-ami, "
                        "burst)"),
    (["--check", "nope"], "verify: --check 'nope' is not a check (checks: ami-canary, versions, karpenter-health, "
                          "worker-iam, workload-identity, scaler-iam, keda, gpu-job, gpu-allocatable, hardware-ami, "
                        "burst)"),
    (["--check", "keda,nope"], "verify: --check 'nope' is not a check (checks: ami-canary, versions, "
                               "karpenter-health, worker-iam, workload-identity, scaler-iam, keda, gpu-job, "
                               "gpu-allocatable, hardware-ami, burst)"),
    (["--check", "burst", "--burst-probes", "0"], "verify: --burst-probes 0 is not valid: an integer from 1 to 50"),
    (["--burst-last-result-s", "-1"], "verify: --burst-last-result-s -1 is not valid: seconds > 0"),
    (["--queue-url", "a", "--queue-url", "b", "--queue-url", "c", "--worker-role-arn", "x", "--worker-role-arn", "y"],
     "verify: --worker-role-arn given 2 times for 3 --queue-url: give one for all queues or one per queue"),
])
def test_bad_flags_are_one_line(argv, message):
    err = io.StringIO()
    assert cli.main(argv, stderr=err) == 2
    assert err.getvalue().strip().splitlines() == [message]


def test_aws_only_run_needs_no_cluster(aws, monkeypatch):
    """With every cluster check skipped, no kubeconfig is needed (worker-iam talks to AWS only)."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    boto3.client("s3").create_bucket(Bucket="gpuburst-dev-results")
    url = boto3.client("sqs").create_queue(QueueName="gpuburst-dev-slides")["QueueUrl"]
    out = io.StringIO()
    rc = cli.main(["--skip", "ami-canary,versions,karpenter-health,workload-identity,scaler-iam,keda,gpu-job,"
                           "gpu-allocatable,hardware-ami",
                   "--queue-url", url,
                   "--worker-role-arn", ROLE, "--results-bucket", "gpuburst-dev-results", "--json"], stdout=out)
    assert rc == 0, out.getvalue()
    results = json.loads(out.getvalue())["results"]
    assert [(r["name"], r["status"]) for r in results] == [
        ("ami-canary", "skipped"), ("versions", "skipped"), ("karpenter-health", "skipped"), ("worker-iam", "pass"),
        ("workload-identity", "skipped"), ("scaler-iam", "skipped"), ("keda", "skipped"), ("gpu-job", "skipped"),
        ("gpu-allocatable", "skipped"), ("hardware-ami", "skipped")]


# --- end to end: the official client over HTTP to a FakeApiServer, AWS on moto_server ------------------------------

def _argv(kubeconfig: Path, url: str) -> list[str]:
    return ["--kubeconfig", str(kubeconfig), "--queue-url", url, "--worker-role-arn", ROLE,
            "--results-bucket", "gpuburst-dev-results", "--image", IMAGE, "--nodepool", "gpu",
            "--namespace", "gpuburst", "--timeout-s", "120", "--grace-s", "60", "--connect-timeout-s", "2"]


def test_end_to_end_healthy_cluster_passes_every_check(aws, upstream_crds, tmp_path):
    url, ids = drill_aws_world()
    kube = drill_cluster(upstream_crds, url, ids)
    with FakeApiServer(kube) as server:
        out = io.StringIO()
        rc = cli.main(_argv(server.kubeconfig(tmp_path), url) + ["--json", "--cluster-name", CLUSTER],
                      clock=FakeClock(), stdout=out)
    results = json.loads(out.getvalue())["results"]
    assert [(r["name"], r["status"]) for r in results] == [(c.name, "pass") for c in CHECKS if not c.opt_in], \
        out.getvalue()
    assert rc == 0
    assert any(e.startswith(f"EKS cluster {CLUSTER}: version {catalogue.KUBERNETES_VERSION}, platform eks.4, "
                            "upgradePolicy.supportType EXTENDED") for e in results[1]["evidence"]), results[1]
    assert any("NVIDIA A10G" in r["summary"] for r in results)
    assert kube.jobs == [] or all(j["metadata"]["name"] != kube.created[0]["metadata"]["name"] for j in kube.jobs)
    assert any(r.startswith("DELETE /apis/batch/v1/namespaces/gpuburst/jobs/gpuburst-verify-gpu-")
               for r in server.requests)
    assert any(r.startswith("DELETE /apis/batch/v1/namespaces/gpuburst/jobs/gpuburst-verify-id-")
               for r in server.requests)


def test_end_to_end_green_statuses_but_no_gpu_fails_and_exits_1(aws, upstream_crds, tmp_path):
    url, ids = drill_aws_world()
    kube = drill_cluster(upstream_crds, url, ids, trap=True)
    with FakeApiServer(kube) as server:
        out = io.StringIO()
        rc = cli.main(_argv(server.kubeconfig(tmp_path), url), clock=FakeClock(), stdout=out)
    text = out.getvalue()
    assert rc == 1
    rows = {line.split()[0]: line.split()[1] for line in text.splitlines()
            if line and not line.startswith((" ", "CHECK", "verify:"))}
    assert rows == {"ami-canary": "FAIL", "versions": "pass", "karpenter-health": "FAIL", "worker-iam": "pass",
                    "workload-identity": "pass", "scaler-iam": "pass", "keda": "FAIL", "gpu-job": "skipped",
                    "gpu-allocatable": "FAIL", "hardware-ami": "pass"}, text
    assert "nvidia.com/gpu not allocatable on 1 of 1 node(s) of NodePool gpu: ip-10-0-12-34.ec2.internal " \
           "(g5.xlarge, up" in text
    assert "while the NodePool reports Ready=True" in text
    assert "created no Job within 90 s" in text
    # the gpu-job does not wait out its timeout for a cause ami-canary already named
    assert "gpu-job            skipped  not run: ami-canary failed: 4 of NodePool gpu's 4 GPU type(s) get the al2023 " \
           "neuron image" in text
    assert text.strip().splitlines()[-1] == "verify: 4 failed (ami-canary, karpenter-health, keda, gpu-allocatable)"
    assert "karpenter-health   FAIL     15 ERROR line(s) since its start: 'resolving AMIs: no amis exist' x15 on " \
           "EC2NodeClass gpu (controller nodeclass.status); Karpenter pod kube-system/karpenter-7d8f9c6b5-x2k9d" in text


# --- statuses, exit codes, --strict, the JSON document, the lease -----------------------------------------------------

class _RefusingKube(FakeKube):
    """A cluster where verify's own identity may not list ScaledJobs (RBAC 403)."""

    def list_scaled_jobs(self, namespace):
        from components.verify.kube import KubeError

        raise KubeError(f"list ScaledJobs in {namespace}: 403 Forbidden: scaledjobs.keda.sh is forbidden")


class _InterruptedKube(FakeKube):
    """Ctrl-C (or SIGTERM, which verify turns into KeyboardInterrupt) arrives while keda reads the ScaledJobs."""

    def list_scaled_jobs(self, namespace):
        raise KeyboardInterrupt


def _json_doc(path: Path) -> dict:
    doc = json.loads(path.read_text())
    assert doc["schema"] == "gpuburst.verify/v1"
    assert set(doc["run"]) >= {"started", "finished", "stack", "cluster", "gpuburst_version", "argv", "interrupted"}
    assert all(set(r) == {"name", "status", "summary", "evidence"} for r in doc["results"])
    return doc


def test_a_403_on_the_checks_own_call_is_error_not_fail_and_exits_2(tmp_path):
    out = io.StringIO()
    rc = cli.main(["--check", "keda", "--json", str(tmp_path / "v.json")], kube=_RefusingKube(), clock=FakeClock(),
                  stdout=out)
    doc = _json_doc(tmp_path / "v.json")
    assert rc == 2 and doc["run"]["exit_status"] == 2
    assert [(r["name"], r["status"]) for r in doc["results"]] == [("keda", "error")]
    assert "403 Forbidden" in doc["results"][0]["summary"]
    assert out.getvalue().strip().splitlines()[-1] == "verify: 1 could not run (keda)"


def test_strict_fails_an_empty_gpu_pool_that_is_otherwise_skipped():
    kube = FakeKube(nodepools=[load("nodepool_gpu.json")])
    out = io.StringIO()
    assert cli.main(["--check", "gpu-allocatable", "--json"], kube=kube, clock=FakeClock(), stdout=out) == 0
    assert json.loads(out.getvalue())["results"][0]["status"] == "skipped"
    out = io.StringIO()
    assert cli.main(["--check", "gpu-allocatable", "--strict", "--json"], kube=kube, clock=FakeClock(),
                    stdout=out) == 1
    doc = json.loads(out.getvalue())
    assert doc["run"]["strict"] is True
    assert doc["results"][0]["status"] == "fail" and "--strict" in doc["results"][0]["summary"]


def test_strict_leaves_an_explicit_skip_skipped():
    out = io.StringIO()
    assert cli.main(["--check", "gpu-allocatable,keda", "--skip", "keda", "--strict", "--json"],
                    kube=FakeKube(nodepools=[load("nodepool_gpu.json")]), clock=FakeClock(), stdout=out) == 1
    statuses = {r["name"]: r["status"] for r in json.loads(out.getvalue())["results"]}
    assert statuses == {"keda": "skipped", "gpu-allocatable": "fail"}


def test_interrupt_mid_run_still_writes_the_json_with_what_finished(tmp_path):
    kube = _InterruptedKube(nodepools=[load("nodepool_gpu.json")])
    path = tmp_path / "verify.json"
    path.write_text("old")
    err = io.StringIO()
    rc = cli.main(["--check", "keda,gpu-allocatable", "--json", str(path)], kube=kube, clock=FakeClock(),
                  stdout=io.StringIO(), stderr=err)
    assert rc == 130 and "interrupted" in err.getvalue()
    doc = _json_doc(path)
    assert doc["run"]["interrupted"] is True and doc["run"]["exit_status"] == 130
    assert doc["results"] == []  # keda was interrupted; gpu-allocatable never ran
    assert kube.leases == {} and any("deleted" in n for n in doc["run"]["lock"])
    assert [p.name for p in tmp_path.iterdir()] == ["verify.json"]  # no temporary file left behind


def test_interrupt_after_a_check_keeps_its_result(tmp_path):
    kube = _InterruptedKube(nodepools=[load("nodepool_gpu.json")], deployments=[pinned("keda")])
    path = tmp_path / "verify.json"
    rc = cli.main(["--check", "versions,keda", "--json", str(path)], kube=kube, clock=FakeClock(),
                  stdout=io.StringIO(), stderr=io.StringIO())
    doc = _json_doc(path)
    assert rc == 130 and doc["run"]["interrupted"] is True
    assert [r["name"] for r in doc["results"]] == ["versions"]


def test_json_path_is_written_atomically_and_the_table_still_printed(tmp_path, monkeypatch):
    from components.verify import report

    path = tmp_path / "verify.json"
    path.write_text('{"schema": "previous run"}')
    out = io.StringIO()

    def broken_replace(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(report.os, "replace", broken_replace)
    with pytest.raises(OSError):
        cli.main(["--check", "gpu-allocatable", "--json", str(path)], kube=FakeKube(
            nodepools=[load("nodepool_gpu.json")]), clock=FakeClock(), stdout=out)
    assert path.read_text() == '{"schema": "previous run"}'  # a failed write never leaves half a document
    assert [p.name for p in tmp_path.iterdir()] == ["verify.json"]
    monkeypatch.undo()
    rc = cli.main(["--check", "gpu-allocatable", "--json", str(path)], kube=FakeKube(
        nodepools=[load("nodepool_gpu.json")]), clock=FakeClock(), stdout=out)
    assert rc == 0 and _json_doc(path)["results"][0]["name"] == "gpu-allocatable"
    assert "gpu-allocatable  skipped" in out.getvalue()


def test_a_second_verify_exits_2_naming_the_holder_over_the_wire(tmp_path):
    from components.verify.lease import lease_body

    kube = FakeKube(nodepools=[load("nodepool_gpu.json")])
    kube.create_lease("gpuburst", lease_body("gpuburst", "runner-7/4242/f00d", 60, FakeClock().now()))
    with FakeApiServer(kube) as server:
        err = io.StringIO()
        rc = cli.main(["--kubeconfig", str(server.kubeconfig(tmp_path)), "--check", "gpu-allocatable",
                       "--json", str(tmp_path / "v.json")], clock=FakeClock(), stdout=io.StringIO(), stderr=err)
    assert rc == 2
    assert "another verify holds the lease gpuburst/gpuburst-verify (holder 'runner-7/4242/f00d'" in err.getvalue()
    doc = _json_doc(tmp_path / "v.json")
    assert doc["results"] == [] and "runner-7/4242/f00d" in doc["run"]["error"]
    assert not any("/nodes" in r for r in server.requests)  # no check ran
    assert kube.leases[("gpuburst", "gpuburst-verify")]["spec"]["holderIdentity"] == "runner-7/4242/f00d"


def test_the_lease_is_taken_and_removed_over_the_wire(tmp_path):
    kube = FakeKube(nodepools=[load("nodepool_gpu.json")])
    with FakeApiServer(kube) as server:
        rc = cli.main(["--kubeconfig", str(server.kubeconfig(tmp_path)), "--check", "gpu-allocatable"],
                      clock=FakeClock(), stdout=io.StringIO())
    assert rc == 0 and kube.leases == {}
    lease_calls = [r for r in server.requests if "/leases" in r]
    assert lease_calls[:2] == ["GET /apis/coordination.k8s.io/v1/namespaces/gpuburst/leases/gpuburst-verify",
                               "POST /apis/coordination.k8s.io/v1/namespaces/gpuburst/leases"]
    assert lease_calls[-1] == "DELETE /apis/coordination.k8s.io/v1/namespaces/gpuburst/leases/gpuburst-verify"
    assert kube.lease_writes[0].startswith("create gpuburst/gpuburst-verify ")


def test_no_lock_skips_the_lease_and_missing_rbac_is_one_line(tmp_path):
    class NoLeaseRbac(FakeKube):
        def get_lease(self, namespace, name):
            from components.verify.kube import KubeError

            raise KubeError(f"get lease {namespace}/{name}: 403 Forbidden")
    kube = NoLeaseRbac(nodepools=[load("nodepool_gpu.json")])
    err = io.StringIO()
    assert cli.main(["--check", "gpu-allocatable"], kube=kube, clock=FakeClock(), stdout=io.StringIO(),
                    stderr=err) == 2
    assert "verify needs get, create, update and delete on leases.coordination.k8s.io" in err.getvalue()
    assert cli.main(["--check", "gpu-allocatable", "--no-lock"], kube=kube, clock=FakeClock(),
                    stdout=io.StringIO()) == 0


def test_sigterm_mid_run_is_an_interrupt_with_the_json_written(tmp_path):
    import signal

    class Cancelled(FakeKube):
        def list_scaled_jobs(self, namespace):
            os.kill(os.getpid(), signal.SIGTERM)  # a cancelled CI job
            time.sleep(1)  # the handler raises here
            raise AssertionError("SIGTERM did not interrupt the run")

    before = signal.getsignal(signal.SIGTERM)
    kube = Cancelled(nodepools=[load("nodepool_gpu.json")])
    rc = cli.main(["--check", "keda,gpu-allocatable", "--json", str(tmp_path / "v.json")], kube=kube,
                  clock=FakeClock(), stdout=io.StringIO(), stderr=io.StringIO())
    assert rc == 130
    doc = _json_doc(tmp_path / "v.json")
    assert doc["run"]["interrupted"] is True and doc["results"] == [] and kube.leases == {}
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back


def test_lock_wait_s_bounds_the_wait_for_another_holder():
    from components.verify.lease import lease_body

    clock = FakeClock()
    kube = FakeKube(nodepools=[load("nodepool_gpu.json")])
    kube.create_lease("gpuburst", lease_body("gpuburst", "runner-7/4242/f00d", 3600, clock.now()))
    err = io.StringIO()
    rc = cli.main(["--check", "gpu-allocatable", "--lock-wait-s", "30"], kube=kube, clock=clock,
                  stdout=io.StringIO(), stderr=err)
    assert rc == 2 and "waited 30 s (--lock-wait-s 30)" in err.getvalue() and "runner-7/4242/f00d" in err.getvalue()
    assert sum(clock.sleeps) == pytest.approx(30)
