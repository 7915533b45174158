"""Tests for policies/fixes.py: a finding's fix is the one of the stack that declared the resource (the platform's
config key, a component's argument, the manifest's field), read from the URN's chain of parent types."""
from __future__ import annotations

import pytest

from policies import fixes

PLATFORM = ("urn:pulumi:dev::gpuburst::gpuburst:index:GpuBurstPlatform$gpuburst:index:GpuScaledJob"
            "$kubernetes:keda.sh/v1alpha1:ScaledJob::slides-scaledjob")
COMPONENT = ("urn:pulumi:lab::tils-lab::gpuburst:index:GpuScaledJob$kubernetes:keda.sh/v1alpha1:ScaledJob"
             "::tils-scaledjob")
MANIFEST = "urn:pulumi:dev::gpuburst::kubernetes:keda.sh/v1alpha1:ScaledJob::slides"


@pytest.mark.parametrize("urn, kind", [(PLATFORM, fixes.PLATFORM_KIND), (COMPONENT, fixes.COMPONENT_KIND),
                                       (MANIFEST, fixes.MANIFEST_KIND), (None, fixes.MANIFEST_KIND),
                                       ("not-a-urn", fixes.MANIFEST_KIND)])
def test_the_kind_comes_from_the_urn(urn, kind):
    assert fixes.stack_kind(urn) == kind


def test_each_kind_gets_its_own_fix_and_a_manifest_defaults_to_the_component_one():
    said = {urn: fixes.fix_for(urn, platform="p", component="c", manifest="m")
            for urn in (PLATFORM, COMPONENT, MANIFEST)}
    assert said == {PLATFORM: "p", COMPONENT: "c", MANIFEST: "m"}
    assert fixes.fix_for(MANIFEST, platform="p", component="c") == "c"


def test_worker_image_unchecked_tells_a_component_stack_the_pod_annotation_not_a_config_key():
    from policies import hardware
    from policies.plan import Res

    pod = {"metadata": {"labels": {"app.kubernetes.io/name": "gpuburst-worker"}},
           "spec": {"containers": [{"name": "worker", "image": "r/w@sha256:" + "a" * 64}]}}
    props = {"metadata": {"name": "tils", "namespace": "lab"}, "spec": {"jobTargetRef": {"template": pod}}}
    t = "kubernetes:keda.sh/v1alpha1:ScaledJob"
    for urn, says, never in ((COMPONENT, "WorkerPodSettings(annotations=", "gpuburst:workerImageCuda"),
                             (PLATFORM, "gpuburst:workerImageCuda", "WorkerPodSettings"),
                             (MANIFEST, "pod template annotation gpuburst.io/worker-image-cuda", "gpuburst:")):
        (_urn, message), = hardware.unchecked_findings([Res(t, urn, "tils", None, props)])
        assert says in message and never not in message, message


def test_the_batch_rule_names_the_component_settings_in_a_component_stack():
    from policies import workloads

    props = {"spec": {"jobTargetRef": {"template": {"spec": {"containers": [
        {"name": "w", "command": ["python", "-m", "worker", "consume", "--max-messages", "5"]}]}}},
        "triggers": [{"type": "aws-sqs-queue", "metadata": {"queueLength": "1"}}]}}
    (component,) = workloads.batch_problems(props, COMPONENT)
    (platform,) = workloads.batch_problems(props, PLATFORM)
    assert "ScaledJobSettings" in component and "gpuburst:" not in component
    assert "gpuburst:workloads.<name>.messagesPerJob" in platform


def test_the_rehearsal_advisory_names_deploy_access_outside_a_platform():
    import json

    from policies import rehearsal
    from policies.plan import Res

    deny = json.dumps({"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "*"}]})
    t = "aws:s3/bucketPolicy:BucketPolicy"
    for urn, says in ((COMPONENT.replace("GpuScaledJob$kubernetes:keda.sh/v1alpha1:ScaledJob", f"SlideStorage${t}"),
                       "declare a gpuburst DeployAccess"),
                      (PLATFORM.replace("GpuScaledJob$kubernetes:keda.sh/v1alpha1:ScaledJob", f"SlideStorage${t}"),
                       "set gpuburst:deploy")):
        found = rehearsal.unjudged_findings([Res(t, urn, "p", None, {"policy": deny})])
        assert found and says in found[0][1], found
