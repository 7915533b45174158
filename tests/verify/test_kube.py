"""kube.py over the wire: the official client against a local HTTP server speaking Kubernetes API paths."""
from __future__ import annotations

import socket
import time

import pytest
from verify_fakes import FakeApiServer, FakeKube, items, load, policy_denial, write_kubeconfig

from components.spec.verify_admission import ADMISSION_NAME
from components.verify.kube import KubeError, KubeUnreachable, admission_refusal, connect


@pytest.fixture
def served(tmp_path):
    kube = FakeKube(nodes=items("nodes_gpu_healthy.json"), pods=items("pods_device_plugin.json"),
                    nodepools=[load("nodepool_gpu.json")], scaled_jobs=[load("scaledjob_ready.json")],
                    logs={"nvidia-device-plugin-x2k9d": "I1102 09:41:21 main.go:317] Registered device plugin\n"})
    with FakeApiServer(kube) as server:
        yield kube, server, connect(str(server.kubeconfig(tmp_path)), connect_timeout_s=2)


def test_reads_return_the_api_json(served):
    _, server, k = served
    assert k.server_version["gitVersion"].startswith("v1.34")
    nodes = k.list_nodes(label_selector="karpenter.sh/nodepool=gpu")
    assert [n["metadata"]["name"] for n in nodes] == ["ip-10-0-12-34.ec2.internal", "ip-10-0-40-7.ec2.internal"]
    assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "1"  # camelCase JSON, not client models
    pods = k.list_pods(field_selector="spec.nodeName=ip-10-0-40-7.ec2.internal")
    assert [p["metadata"]["name"] for p in pods] == ["nvidia-device-plugin-p7f3q"]
    assert k.get_nodepool("gpu")["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "gpu"
    assert k.get_nodepool("nope") is None
    assert k.get_crd("triggerauthentications.keda.sh") is None
    assert [s["metadata"]["name"] for s in k.list_scaled_jobs("gpuburst")] == ["slides"]
    assert "Registered device plugin" in k.read_pod_log("nvidia-device-plugin", "nvidia-device-plugin-x2k9d")
    assert "GET /api/v1/pods" in server.requests


def test_job_create_get_delete(served):
    kube, _, k = served
    manifest = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gpuburst-verify-gpu-x", "namespace":
                                                                     "gpuburst"},
                "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "c", "image": "busybox"}]}}}}
    created = k.create_job("gpuburst", manifest)
    assert created["metadata"]["uid"]
    assert k.get_job("gpuburst", "gpuburst-verify-gpu-x")["metadata"]["name"] == "gpuburst-verify-gpu-x"
    assert k.delete_job("gpuburst", "gpuburst-verify-gpu-x") is True
    assert k.delete_job("gpuburst", "gpuburst-verify-gpu-x") is False
    assert k.get_job("gpuburst", "gpuburst-verify-gpu-x") is None
    assert kube.deleted == ["gpuburst/gpuburst-verify-gpu-x", "gpuburst/gpuburst-verify-gpu-x"]


def test_a_server_that_goes_away_mid_run_is_a_one_line_kube_error(served):
    _, server, k = served
    server.__exit__(None, None, None)
    with pytest.raises(KubeError) as e:
        k.list_nodes()
    assert "cannot reach the Kubernetes API" in str(e.value) and "\n" not in str(e.value)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_closed_port_is_unreachable_at_once(tmp_path):
    port = _closed_port()
    start = time.monotonic()
    with pytest.raises(KubeUnreachable) as e:
        connect(str(write_kubeconfig(tmp_path, f"https://127.0.0.1:{port}")), connect_timeout_s=2)
    assert time.monotonic() - start < 5
    assert str(e.value) == (f"cannot reach the Kubernetes API at https://127.0.0.1:{port}: connection refused — "
                            "is the kubeconfig for the right cluster?")


def test_missing_kubeconfig_file(tmp_path):
    with pytest.raises(KubeUnreachable, match="no kubeconfig at"):
        connect(str(tmp_path / "nope"))


def test_no_kubeconfig_anywhere(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeUnreachable, match=r"no kubeconfig found .* pass --kubeconfig PATH or --stack NAME"):
        connect(None)


def test_broken_kubeconfig_and_missing_exec_plugin(tmp_path):
    bad = tmp_path / "bad"
    bad.write_text("clusters: [")
    with pytest.raises(KubeUnreachable, match="cannot read the kubeconfig"):
        connect(str(bad))
    exec_cfg = tmp_path / "exec"
    exec_cfg.write_text(write_kubeconfig(tmp_path, "https://127.0.0.1:1").read_text().replace(
        "token: not-a-real-token",
        "exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: aws-cli-not-installed, args: [eks]}"))
    with pytest.raises(KubeUnreachable, match="cannot get credentials .*aws-cli-not-installed"):
        connect(str(exec_cfg))


def test_no_retries_a_server_that_hangs_up_is_tried_once(tmp_path):
    """urllib3 would retry a dropped connection 3 more times; verify must try once and say why."""
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    accepted = []
    stop = threading.Event()

    def hang_up():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            accepted.append(1)
            conn.recv(65536)
            conn.close()

    t = threading.Thread(target=hang_up, daemon=True)
    t.start()
    port = listener.getsockname()[1]
    try:
        with pytest.raises(KubeUnreachable) as e:
            connect(str(write_kubeconfig(tmp_path, f"http://127.0.0.1:{port}")), connect_timeout_s=2)
    finally:
        stop.set()
        t.join(5)
        listener.close()
    assert len(accepted) == 1
    assert str(e.value).startswith(f"cannot reach the Kubernetes API at http://127.0.0.1:{port}: the server closed "
                                   "the connection without an answer")
    assert "\n" not in str(e.value)


def test_nodeclaims_are_listed_cluster_wide(tmp_path):
    kube = FakeKube(nodeclaims=items("burst/nodeclaims.json"))
    with FakeApiServer(kube) as server:
        k = connect(str(server.kubeconfig(tmp_path)), connect_timeout_s=2)
        ncs = k.list_nodeclaims()
    assert [n["metadata"]["name"] for n in ncs] == ["gpu-x8v2c", "gpu-q5t7w", "gpu-warm1"]
    assert ncs[0]["status"]["conditions"][1]["type"] == "Registered"
    assert "GET /apis/karpenter.sh/v1/nodeclaims" in server.requests


def _job(name: str = "gpuburst-verify-gpu-x") -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "gpuburst"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "b"}]}}}}


@pytest.mark.parametrize("code", [403, 422])
def test_a_refusal_by_verifys_admission_rule_says_so_quoting_the_rule(served, code):
    kube, _, k = served
    kube.job_admission = lambda job: policy_denial(job, ADMISSION_NAME, "a verify probe mounts emptyDir volumes only",
                                                   code=code)
    with pytest.raises(KubeError) as e:
        k.create_job("gpuburst", _job())
    assert str(e.value) == (f"verify's admission rule (ValidatingAdmissionPolicy {ADMISSION_NAME}) refused the probe "
                            "Job: a verify probe mounts emptyDir volumes only (give the stack's --image by digest and "
                            "--namespace, or --stack)")
    assert kube.jobs == []


def test_a_missing_params_configmap_is_named():
    text = (f'create job in gpuburst: 403 Forbidden: jobs.batch "x" is forbidden: ValidatingAdmissionPolicy '
            f"'{ADMISSION_NAME}' with binding '{ADMISSION_NAME}' denied request: failed to configure binding: no "
            "params found for policy binding with `Deny` parameterNotFoundAction")
    line = admission_refusal(text, "gpuburst")
    assert line is not None
    assert line.startswith(f"verify's admission rule (ValidatingAdmissionPolicy {ADMISSION_NAME}) refused the probe "
                           f"Job: its params ConfigMap gpuburst/{ADMISSION_NAME} was not found")


def test_other_refusals_stay_as_the_api_said(served):
    kube, _, k = served
    kube.job_admission = lambda job: policy_denial(job, "someone-elses-policy", "no latest tags")
    with pytest.raises(KubeError) as e:
        k.create_job("gpuburst", _job())
    assert str(e.value).startswith("create job in gpuburst: 403 Forbidden: jobs.batch \"gpuburst-verify-gpu-x\" is "
                                   "forbidden: ValidatingAdmissionPolicy 'someone-elses-policy'")
    assert admission_refusal('403 Forbidden: User "ci" cannot create resource "jobs"', "gpuburst") is None
