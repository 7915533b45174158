"""Tests for `image-pinned-by-digest`: every container image of every pod template, chart-rendered objects included,
is named by digest; on fragments, over gRPC and on the dev plan (where KEDA and the device plugin used to run by
tag)."""
from __future__ import annotations

import copy

import pytest

from policies import images as rule
from policies.harness import UNKNOWN_STRING as U
from tests.policies import fragments as F

D = "@sha256:" + "a" * 64
T_DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def pod_owner(*images: object, init: tuple = (), kind: str = T_DEPLOYMENT) -> dict:
    pod = {"containers": [{"name": f"c{i}", "image": im} for i, im in enumerate(images)]}
    if init:
        pod["initContainers"] = [{"name": f"i{i}", "image": im} for i, im in enumerate(init)]
    spec = {"template": {"spec": pod}} if kind != "kubernetes:core/v1:Pod" else pod
    return F.entry(kind, "app", {"apiVersion": "v1", "kind": kind.rsplit(":", 1)[1],
                                 "metadata": {"name": "app", "namespace": "a"}, "spec": spec})


def found(*entries: dict) -> list[str]:
    return [m for _u, m in rule.image_findings(F.as_res(F.doc(*entries)))]


@pytest.mark.parametrize("image", [f"ghcr.io/kedacore/keda:2.20.2{D}", f"registry.k8s.io/pause{D}",
                                   f"123456789012.dkr.ecr.eu-west-1.amazonaws.com/x/y:1{D}"])
def test_images_by_digest_pass(image):
    assert found(pod_owner(image, init=(image,))) == []


@pytest.mark.parametrize("image", ["ghcr.io/kedacore/keda:2.20.2", "busybox", "nvcr.io/x@sha256:abc",
                                   f"r/x:1@sha256:{'A' * 64}", f"r/x@sha512:{'a' * 128}"],
                         ids=["tag", "bare", "short-digest", "upper-case", "sha512"])
def test_images_by_tag_or_a_malformed_digest_are_refused_naming_the_field(image):
    (message,) = found(pod_owner(f"ok{D}", image))
    assert message.startswith(f"Deployment a/app: spec.template.spec.containers[1].image = {image!r}: by tag only")
    assert "IMAGE_DIGESTS" in message


def test_init_containers_and_every_pod_bearing_kind_are_judged():
    (message,) = found(pod_owner(f"ok{D}", init=("busybox:1",)))
    assert "spec.template.spec.initContainers[0].image = 'busybox:1'" in message
    for kind in ("kubernetes:apps/v1:DaemonSet", "kubernetes:batch/v1:Job", "kubernetes:core/v1:Pod",
                 "kubernetes:keda.sh/v1alpha1:ScaledJob"):
        entry = pod_owner("busybox:1", kind=kind)
        if kind.endswith("ScaledJob"):
            entry["properties"]["spec"] = {"jobTargetRef": {"template": {"spec": {
                "containers": [{"name": "w", "image": "busybox:1"}]}}}}
        assert len(found(entry)) == 1, kind


def test_an_unknown_image_passes_only_when_the_plan_builds_it():
    (message,) = found(pod_owner(U))
    assert message.startswith("Deployment a/app spec.template.spec.containers[0].image is unknown during preview")
    build = F.entry("docker-build:index:Image", "worker-image", {"push": True})
    owner = pod_owner(U)
    owner["dependencies"] = [F.doc(build)["resources"][0]["urn"]]
    assert found(build, owner) == []  # the stack's own build: <repository>@<pushed digest>
    (message,) = found(build, pod_owner(f"ok{D}", "busybox:1"))  # a build elsewhere excuses nothing by tag
    assert "containers[1].image = 'busybox:1'" in message


def test_over_grpc_it_is_mandatory(analyze):
    report = analyze(F.doc(pod_owner("ghcr.io/kedacore/keda:2.20.2")))
    (d,) = report.by_policy(rule.NAME)
    assert d.level == "MANDATORY" and "'ghcr.io/kedacore/keda:2.20.2'" in d.message


def test_the_dev_plan_runs_every_image_by_digest_and_fails_once_one_is_by_tag(dev_plan):
    res = F.as_res(dev_plan)
    assert rule.image_findings(res) == []
    charted = [r for r in res if r.type in (T_DEPLOYMENT, "kubernetes:apps/v1:DaemonSet")
               and any(n in r.name for n in ("keda", "nvidia-device-plugin"))]
    assert len(charted) >= 4  # KEDA's three Deployments and the plugin's DaemonSet(s) are judged
    plan = copy.deepcopy(dev_plan)
    (operator,) = [r for r in plan["resources"] if r["type"] == T_DEPLOYMENT
                   and r["properties"]["metadata"]["name"] == "keda-operator"]
    container = operator["properties"]["spec"]["template"]["spec"]["containers"][0]
    container["image"] = container["image"].split("@", 1)[0]
    (message,) = found(*plan["resources"])
    assert message.startswith("Deployment keda/keda-operator: ")
