"""The model cache's admission rule, evaluated: a worker pod as GpuScaledJob/GpuConsumer build it (subPath
`<namespace>/<workload>`) is admitted, and a pod that mounts the cache claim with another namespace's folder, none, a
subPathExpr, a `..`, in an init or ephemeral container, or through a volume of another name is refused (the CEL run
by cel-python through tests/components/admission_oracle.py); pods without the cache are not matched."""
from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from components.catalogue import KUBERNETES_VERSION
from components.pod import hardened_pod_spec
from components.spec import model_cache_admission as mca
from components.spec.names import MODEL_CACHE_CLAIM
from components.spec.worker_pod import ModelMount, WorkerPodSettings
from tests.components.admission_oracle import decide

NS = "lab-a"
IMAGE = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker@sha256:{'b' * 64}"
USER = dict(user="system:serviceaccount:kube-system:job-controller", groups=["system:serviceaccounts"])
MODEL = ModelMount(uri="s3://lab-models/tils/v3.pt2", sha256="ef" * 32, cache_claim=MODEL_CACHE_CLAIM,
                   cache_sub_path="slides")


def worker_pod(namespace: str = NS) -> dict:
    spec = hardened_pod_spec(WorkerPodSettings(image=IMAGE, model=MODEL), command=["python", "-m", "worker"],
                             queue_url="q", service_account_name="slides-worker", restart_policy="Never",
                             namespace=namespace)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slides-x", "namespace": namespace},
            "spec": spec}


def judge(pod: dict, namespace: str = NS, **kw):
    return decide(mca.admission_policy_manifest(), mca.admission_binding_manifest(), None, pod, namespace=namespace,
                  group="", resource=kw.pop("resource", "pods"), **USER, **kw)


def cache_mount(pod: dict) -> dict:
    return next(m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "model-cache")


def test_the_worker_pod_the_components_build_is_admitted_in_its_own_namespace():
    pod = worker_pod()
    assert cache_mount(pod)["subPath"] == mca.cache_sub_path(NS, "slides") == "lab-a/slides"
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    decision = judge(pod)
    assert decision.matched and decision.admitted, decision.denied


def test_the_same_pod_created_in_another_namespace_is_refused():
    """Another team's pod spec names lab-a's folder: its request namespace is lab-b."""
    decision = judge(worker_pod(NS), namespace="lab-b")
    assert decision.matched and decision.denied == [mca.SUB_PATH_VALIDATIONS[0][1]]


def _with_mount(**mount) -> dict:
    pod = worker_pod()
    m = cache_mount(pod)
    m.pop("subPath")
    m.update(mount)
    return pod


@pytest.mark.parametrize("mount", [
    {"subPath": "lab-b/slides"},          # another namespace's folder
    {},                                   # no subPath: the whole cache
    {"subPath": ""},
    {"subPath": "lab-a"},                 # the namespace name without the folder separator
    {"subPath": "lab-a/"},                # nothing after it
    {"subPath": "lab-ab/slides"},         # a namespace whose name starts with this one's
    {"subPath": "lab-a/../lab-b/slides"},
    {"subPathExpr": "$(NAMESPACE)/slides"},
], ids=["other-namespace", "none", "empty", "bare-namespace", "empty-folder", "prefix-namespace", "dot-dot",
        "subPathExpr"])
def test_a_cache_mount_outside_the_namespace_folder_is_refused(mount):
    decision = judge(_with_mount(**mount))
    assert decision.matched and decision.denied == [mca.SUB_PATH_VALIDATIONS[0][1]]


def test_an_init_container_is_judged_too():
    pod = worker_pod()
    init = copy.deepcopy(pod["spec"]["containers"][0])
    init["name"] = "copy"
    cache_mount_of_init = next(m for m in init["volumeMounts"] if m["name"] == "model-cache")
    cache_mount_of_init["subPath"] = "lab-b/slides"
    pod["spec"]["initContainers"] = [init]
    assert judge(pod).denied == [mca.SUB_PATH_VALIDATIONS[1][1]]
    cache_mount_of_init["subPath"] = "lab-a/slides"
    assert judge(pod).admitted


def test_an_ephemeral_container_that_mounts_the_cache_is_refused_on_the_subresource():
    """`kubectl debug` adds an ephemeral container through UPDATE of pods/ephemeralcontainers (the request carries
    the whole Pod); the API allows it no subPath, so a cache mount there would be the whole cache."""
    pod = worker_pod()
    pod["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox",
                                           "volumeMounts": [{"name": "model-cache", "mountPath": "/c"}]}]
    decision = judge(pod, operation="UPDATE", resource="pods/ephemeralcontainers")
    assert decision.matched and decision.denied == [mca.SUB_PATH_VALIDATIONS[2][1]]
    pod["spec"]["ephemeralContainers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/s"}]
    assert judge(pod, operation="UPDATE", resource="pods/ephemeralcontainers").admitted


def test_a_second_volume_of_another_name_on_the_cache_claim_is_judged_by_the_claim():
    pod = worker_pod()
    pod["spec"]["volumes"].append({"name": "all-models", "persistentVolumeClaim": {"claimName": MODEL_CACHE_CLAIM}})
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "all-models", "mountPath": "/all"})
    assert judge(pod).denied == [mca.SUB_PATH_VALIDATIONS[0][1]]
    pod["spec"]["containers"][0]["volumeMounts"][-1]["subPath"] = "lab-b"
    assert judge(pod).denied == [mca.SUB_PATH_VALIDATIONS[0][1]]
    pod["spec"]["containers"][0]["volumeMounts"][-1]["subPath"] = "lab-a/other"
    assert judge(pod).admitted


def test_pods_without_the_cache_claim_are_not_matched():
    pod = worker_pod()
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] != "model-cache"]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "model-cache", "mountPath": "/c"}]  # not the claim
    assert not judge(pod).matched
    del pod["spec"]["volumes"]
    assert not judge(pod).matched
    other_claim = worker_pod()
    other_claim["spec"]["volumes"][-1]["persistentVolumeClaim"]["claimName"] = "scratch-data"
    assert not judge(other_claim).matched


def test_plain_pod_updates_are_not_matched():
    """A pod's containers and volumes cannot change after creation; a finalizer removal on an older pod must pass."""
    pod = _with_mount(subPath="slides")  # the layout before this rule
    assert not judge(pod, operation="UPDATE").matched
    assert judge(pod).denied  # but it could not be created now


def test_the_python_twin_agrees_with_the_cel():
    """`sub_path_problem` (what the pack reports) decides as the policy does on every case above."""
    cases = [{"subPath": "lab-a/slides"}, {"subPath": "lab-a/x/y"}, {"subPath": "lab-b/slides"}, {}, {"subPath": ""},
             {"subPath": "lab-a"}, {"subPath": "lab-a/"}, {"subPath": "lab-ab/s"}, {"subPath": "lab-a/../b"},
             {"subPathExpr": "$(X)"}]
    for mount in cases:
        admitted = judge(_with_mount(**mount)).admitted
        assert (mca.sub_path_problem(NS, {"name": "model-cache", **mount}) is None) == admitted, mount


def test_the_objects_are_valid_admissionregistration_v1_and_fail_closed():
    policy, binding = mca.admission_policy_manifest(), mca.admission_binding_manifest()
    for doc in (policy, binding):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    assert policy["spec"]["failurePolicy"] == "Fail" and binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == mca.ADMISSION_NAME
    assert "paramKind" not in policy["spec"] and "matchResources" not in binding["spec"]
