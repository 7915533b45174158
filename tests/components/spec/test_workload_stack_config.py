"""The `workloadStackConfig` output's builder: its keys, the region, the image's CUDA rules, KEDA's watch list, the
cache flag."""
from __future__ import annotations

from typing import Any

import pytest

from components.catalogue import TORCH_CUDA
from components.spec.workload_stack_config import (
    WorkloadStackConfig,
    image_cuda,
    keda_watch_namespaces,
    workload_stack_config,
)

PREBUILT = "123456789012.dkr.ecr.us-east-1.amazonaws.com/lab-worker@sha256:" + "ab" * 32
KEYS = {"region", "clusterName", "vpcCidr", "kedaVersion", "kedaOperatorRoleArn", "kedaWatchNamespaces",
        "karpenterVersion", "nodeClass", "nodeClassRootVolumeGiB", "nodeClassModelCacheFolder", "networkPolicyEnforced",
        "slidesBucketArn", "resultsBucketArn", "image"}
"""The keys every output has (imageCuda aside): the config keys examples/lab-scaledjob reads from the platform
(`region` as `aws:region`)."""


def build(**over: Any) -> WorkloadStackConfig:
    args: dict[str, Any] = dict(
        region="eu-west-1", cluster_name="gpuburst-dev", vpc_cidr="10.64.0.0/16", keda_version="2.20.2",
        keda_operator_role_arn="arn:aws:iam::123456789012:role/gpuburst-dev-keda-operator",
        keda_watch_namespaces=["gpuburst", "cyto-slides"], karpenter_version="1.14.1", node_class="gpu",
        node_class_root_volume_gib=100, node_class_model_cache_folder=False, network_policy_enforced=True,
        slides_bucket_arn="arn:aws:s3:::gpuburst-dev-slides", results_bucket_arn="arn:aws:s3:::gpuburst-dev-results",
        image=PREBUILT, worker_image=None, worker_image_cuda=None)
    return workload_stack_config(**{**args, **over})


def test_each_value_lands_under_the_key_a_lab_reads():
    out = build()
    assert set(out) == KEYS | {"imageCuda"}
    assert out["region"] == "eu-west-1"
    assert (out["clusterName"], out["vpcCidr"], out["kedaVersion"], out["karpenterVersion"]) == (
        "gpuburst-dev", "10.64.0.0/16", "2.20.2", "1.14.1")
    assert out["kedaOperatorRoleArn"] == "arn:aws:iam::123456789012:role/gpuburst-dev-keda-operator"
    assert out["kedaWatchNamespaces"] == ["gpuburst", "cyto-slides"]
    assert (out["nodeClass"], out["nodeClassRootVolumeGiB"]) == ("gpu", 100)
    assert out["networkPolicyEnforced"] is True and out["nodeClassModelCacheFolder"] is False
    assert out["slidesBucketArn"].endswith("-slides") and out["resultsBucketArn"].endswith("-results")
    assert out["image"] == PREBUILT


def test_the_model_cache_flag_is_passed_through():
    assert build(node_class_model_cache_folder=True)["nodeClassModelCacheFolder"] is True


def test_the_watch_list_is_a_plain_list_of_its_own():
    given = ("gpuburst", "lab-tils")
    out = build(keda_watch_namespaces=given)
    assert out["kedaWatchNamespaces"] == ["gpuburst", "lab-tils"] and isinstance(out["kedaWatchNamespaces"], list)


@pytest.mark.parametrize("worker_image,declared,expected", [
    (None, None, TORCH_CUDA["cuda"]),  # the built-in image (or a workerBuild on it)
    (None, "12.8", "12.8"),            # a workerBuild on another base says its CUDA
    (PREBUILT, "12.6", "12.6"),        # a prebuilt image with its CUDA declared
])
def test_image_cuda_is_the_declared_one_else_the_built_in_images(worker_image, declared, expected):
    assert image_cuda(worker_image, declared) == expected
    assert build(worker_image=worker_image, worker_image_cuda=declared)["imageCuda"] == expected


def test_a_prebuilt_image_without_its_cuda_gives_no_image_cuda():
    assert image_cuda(PREBUILT, None) is None
    out = build(worker_image=PREBUILT, worker_image_cuda=None)
    assert "imageCuda" not in out and set(out) == KEYS


def test_keda_watches_the_platform_namespace_first_then_each_extra_once():
    assert keda_watch_namespaces("gpuburst") == ["gpuburst"]
    assert keda_watch_namespaces("gpuburst", ["cyto-slides", "lab-tils"]) == ["gpuburst", "cyto-slides", "lab-tils"]
    assert keda_watch_namespaces("gpuburst", ("lab-tils", "gpuburst", "lab-tils")) == ["gpuburst", "lab-tils"]
