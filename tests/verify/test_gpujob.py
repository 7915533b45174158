"""gpu-job: the probe Job's manifest, the verdict from its status and log, and cleanup on every path."""
from __future__ import annotations

import copy

import pytest
from verify_fakes import NOW, FakeKube, items, load

from components import catalogue
from components.verify import gpujob
from components.verify.context import Context
from components.verify.model import VerifySettings

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker@sha256:" + "c" * 64


def manifest():
    return gpujob.build_gpu_job("gpuburst-verify-gpu-0a1b2c3d", "gpuburst", IMAGE, nodepool="gpu", deadline_s=900)


def test_manifest_asks_for_one_gpu_on_the_gpu_pool_with_a_deadline_and_ttl():
    job = manifest()
    spec = job["spec"]
    pod = spec["template"]["spec"]
    c = pod["containers"][0]
    assert spec["activeDeadlineSeconds"] == 900 and spec["ttlSecondsAfterFinished"] > 0
    assert spec["backoffLimit"] == 0 and pod["restartPolicy"] == "Never"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "karpenter.sh/nodepool": "gpu"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert c["command"] == ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    assert c["image"] == IMAGE


def test_manifest_is_hardened():
    pod = manifest()["spec"]["template"]["spec"]
    sc = pod["containers"][0]["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["privileged"] is False
    assert pod["automountServiceAccountToken"] is False


def test_manifest_is_a_valid_batch_v1_job_for_the_pinned_kubernetes():
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(manifest(), catalogue.KUBERNETES_VERSION, strict=True)


def test_parse_nvidia_smi():
    assert gpujob.parse_nvidia_smi(load("nvidia_smi.log")) == [
        {"name": "NVIDIA A10G", "memory": "23028 MiB", "driver": "580.95.05"}]
    failed = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    assert gpujob.parse_nvidia_smi(failed) == []


def test_completed_job_passes_and_reports_the_gpu_model():
    node = items("nodes_gpu_healthy.json")[0]
    r = gpujob.judge_gpu_job(load("job_gpu_complete.json"), [load("pod_gpu_succeeded.json")],
                             load("nvidia_smi.log"), [], waited_s=185, deadline_s=900, node=node)
    assert r.status == "pass"
    assert "NVIDIA A10G" in r.summary and "ip-10-0-12-34.ec2.internal (g5.xlarge)" in r.summary


def test_completed_job_without_gpu_in_log_fails():
    r = gpujob.judge_gpu_job(load("job_gpu_complete.json"), [load("pod_gpu_succeeded.json")], "", [],
                             waited_s=185, deadline_s=900)
    assert r.status == "fail" and "names no GPU" in r.summary


def test_deadline_exceeded_unschedulable_fails_with_the_schedulers_reason():
    r = gpujob.judge_gpu_job(load("job_gpu_deadline_exceeded.json"), [load("pod_gpu_unschedulable.json")], "",
                             items("events_pod_unschedulable.json"), waited_s=900, deadline_s=900)
    assert r.status == "fail"
    assert "DeadlineExceeded" in r.summary and "gpuburst-verify-gpu-0a1b2c3d" in r.summary
    assert any("Insufficient nvidia.com/gpu" in e for e in r.evidence)
    assert any(e.startswith("event FailedScheduling") for e in r.evidence)


def test_bad_image_name_fails_early():
    pod = copy.deepcopy(load("pod_gpu_unschedulable.json"))
    pod["spec"]["nodeName"] = "n1"
    pod["status"]["containerStatuses"] = [{"name": "nvidia-smi", "state": {"waiting": {
        "reason": "InvalidImageName", "message": "couldn't parse image name"}}}]
    job = copy.deepcopy(load("job_gpu_complete.json"))
    job["status"] = {"active": 1}
    r = gpujob.judge_gpu_job(job, [pod], "", [], waited_s=60, deadline_s=900)
    assert r.status == "fail" and "InvalidImageName" in r.summary


def _ctx(kube, clock, **kw):
    return Context(settings=VerifySettings(namespace="gpuburst", nodepool="gpu", worker_image=IMAGE, timeout_s=900,
                                           poll_interval_s=5, **kw), kube=kube, clock=clock)


def _simulate_success(kube, ns, name, after=3):
    """The cluster: the pod lands on the node, runs, and the Job completes after `after` looks."""
    state = {"n": 0}

    def hook(k, ns_, name_):
        state["n"] += 1
        if state["n"] == after:
            job = next(j for j in k.jobs if j["metadata"]["name"] == name_)
            job["status"] = copy.deepcopy(load("job_gpu_complete.json")["status"])
            pod = copy.deepcopy(load("pod_gpu_succeeded.json"))
            pod["metadata"]["name"] = name_ + "-abcde"
            pod["metadata"]["labels"]["job-name"] = name_
            k.pods.append(pod)
            k.logs[name_ + "-abcde"] = load("nvidia_smi.log")
    kube.on_get_job = hook


def test_run_creates_waits_judges_and_deletes(clock):
    kube = FakeKube(nodes=items("nodes_gpu_healthy.json"))
    _simulate_success(kube, "gpuburst", None)
    ctx = _ctx(kube, clock)
    r = gpujob.run(ctx)
    assert r.status == "pass", r
    assert len(kube.created) == 1
    name = kube.created[0]["metadata"]["name"]
    assert kube.deleted == [f"gpuburst/{name}"]
    assert kube.jobs == []
    assert ctx.state["gpu_job_node"] == "ip-10-0-12-34.ec2.internal"
    assert "NVIDIA A10G" in r.summary


def test_run_times_out_and_still_deletes(clock):
    kube = FakeKube()
    r = gpujob.run(_ctx(kube, clock))
    assert r.status == "fail" and "did not finish within 900 s" in r.summary
    assert len(kube.deleted) == 1 and kube.jobs == []
    assert 900 <= clock.t <= 940


def test_run_deletes_the_job_when_interrupted(clock):
    kube = FakeKube()

    def interrupt(*a):
        raise KeyboardInterrupt

    kube.on_get_job = interrupt
    with pytest.raises(KeyboardInterrupt):
        gpujob.run(_ctx(kube, clock))
    assert len(kube.deleted) == 1 and kube.jobs == []


def test_run_without_image_fails_with_the_fix():
    ctx = Context(settings=VerifySettings(worker_image=None), kube=FakeKube())
    r = gpujob.run(ctx)
    assert r.status == "fail" and "--image" in r.summary


def test_completed_job_on_the_wrong_gpu_model_fails_naming_both():
    node = items("nodes_gpu_healthy.json")[0]  # a g5.xlarge: the catalogue says a10g
    r = gpujob.judge_gpu_job(load("job_gpu_complete.json"), [load("pod_gpu_succeeded.json")],
                             "Tesla T4, 15360 MiB, 580.95.05", [], waited_s=185, deadline_s=900, node=node)
    assert r.status == "fail"
    assert "'Tesla T4'" in r.summary and "g5.xlarge has a10g GPUs" in r.summary


@pytest.mark.parametrize("smi,itype,ok", [
    ("NVIDIA L40S", "g6e.xlarge", True),
    ("NVIDIA L40S", "g6.xlarge", False),  # l4 is not a token of 'NVIDIA L40S'
    ("NVIDIA A100-SXM4-40GB", "p4d.24xlarge", True),
    ("NVIDIA H100 80GB HBM3", "p5.48xlarge", True),
    ("Tesla T4", "g4dn.xlarge", True),
    ("Anything", "x9.mystery", True),  # not in the catalogue: not compared
])
def test_model_problem(smi, itype, ok):
    gpus = [{"name": smi, "memory": "1 MiB", "driver": "580"}]
    assert (gpujob.model_problem(gpus, itype) is None) is ok


def _unscheduled_pod(name):
    pod = copy.deepcopy(load("pod_gpu_unschedulable.json"))
    pod["metadata"]["name"] = name + "-abcde"
    pod["metadata"]["labels"]["job-name"] = name
    return pod


def test_run_fails_early_when_its_target_node_has_no_gpu_allocatable(clock):
    nodes = items("nodes_gpu_not_allocatable.json")  # Ready, 20 min old, nvidia.com/gpu 0
    target = nodes[0]["metadata"]["name"]
    kube = FakeKube(nodes=nodes, nodeclaims=[{"metadata": {"name": "gpu-x7k2p"},
                                              "status": {"nodeName": target}}])

    def hook(k, ns, name):
        if not k.pods:
            pod = _unscheduled_pod(name)
            k.pods.append(pod)
            k.events.append({"metadata": {"namespace": ns}, "type": "Normal", "reason": "Nominated",
                             "message": "Pod should schedule on: nodeclaim/gpu-x7k2p",
                             "involvedObject": {"kind": "Pod", "name": pod["metadata"]["name"]}})
    kube.on_get_job = hook
    r = gpujob.run(_ctx(kube, clock))
    assert r.status == "fail"
    assert f"its target node {target} (g5.xlarge, up 20m00s)" in r.summary
    assert "0 nvidia.com/gpu allocatable" in r.summary and "gave up after 0 s" in r.summary
    assert clock.t < 60 and len(kube.deleted) == 1  # not the 900 s deadline; the Job is still removed


def test_a_young_or_gpu_node_target_is_waited_for():
    pod = _unscheduled_pod("j")
    pod["status"]["nominatedNodeName"] = "ip-10-0-12-34.ec2.internal"
    bad = items("nodes_gpu_not_allocatable.json")
    assert gpujob.target_without_gpu([pod], [], bad, [], NOW, 300) is not None
    assert gpujob.target_without_gpu([pod], [], bad, [], NOW, 3600) is None  # still inside its grace period
    assert gpujob.target_without_gpu([pod], [], items("nodes_gpu_healthy.json"), [], NOW, 300) is None
