"""Tests of GpuScaledJob under mocks: the recorded ScaledJob (trigger, auth, scaling knobs, hardened GPU pod), its
identities (no `*` actions), refusal of ordered/stateful work, and the manifests against the upstream CRD and the
Kubernetes schemas."""
from __future__ import annotations

import json

import kubernetes_validate
import pulumi_aws as aws
import pytest

from components import catalogue
from components.keda import Keda, KedaArgs
from components.pod import WorkerPodSettings
from components.scaledjob import (
    GpuScaledJob,
    GpuScaledJobArgs,
    ScaledJobSettings,
    scaled_job_manifest,
    settings_for_batch,
)
from components.spec.policy_documents import allow_wildcard_actions
from components.spec.validation import ConfigError
from components.spec.workload import WorkloadFacts
from components.synth.mocks import run_under_mocks
from tests.components.crd_oracle import validate_against_crd

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker@sha256:" + "cd" * 32
VPC_CIDRS = ["10.64.0.0/16"]
"""The VPC's CIDR: the worker NetworkPolicy's only HTTPS destination (required with the policy)."""
SJ = "kubernetes:keda.sh/v1alpha1:ScaledJob"
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/gpuburst-dev-slides"


def facts(**kw) -> WorkloadFacts:
    base = dict(items_independent=True, state_across_messages=False, ordered=False, model_load_s=45,
                seconds_per_item=8, burst_items=200)
    base.update(kw)
    return WorkloadFacts(**base)


def run(*, facts_=None, settings=None, image=IMAGE, keda_version=catalogue.KEDA_VERSION, **pod_kw):
    def program():
        queue = aws.sqs.Queue("slides-queue", name="gpuburst-dev-slides")
        bucket = aws.s3.Bucket("data", bucket="gpuburst-dev-data")
        keda = Keda("keda", KedaArgs(cluster_name="gpuburst-dev", version=keda_version))
        GpuScaledJob("slides", GpuScaledJobArgs(
            egress_cidrs=VPC_CIDRS,
            cluster_name="gpuburst-dev", keda=keda, facts=facts_ or facts(), namespace="gpuburst",
            queue_url=queue.url, queue_arn=queue.arn, bucket_arn=bucket.arn,
            pod=WorkerPodSettings(image=image, **pod_kw), settings=settings))
    return run_under_mocks(program)


@pytest.fixture(scope="module")
def res():
    return run()


@pytest.fixture(scope="module")
def sj(res) -> dict:
    (r,) = res.monitor.by_type(SJ)
    return r.properties


def pod_spec(sj: dict) -> dict:
    return sj["spec"]["jobTargetRef"]["template"]["spec"]


def test_trigger_and_authentication_ref(res, sj):
    (trigger,) = sj["spec"]["triggers"]
    assert trigger["type"] == "aws-sqs-queue"
    assert trigger["metadata"] == {"queueURL": QUEUE_URL, "queueLength": "1", "awsRegion": "us-east-1",
                                   "scaleOnInFlight": "true"}
    (ta,) = res.monitor.by_type("kubernetes:keda.sh/v1alpha1:TriggerAuthentication")
    assert trigger["authenticationRef"] == {"name": ta.properties["metadata"]["name"], "kind": "TriggerAuthentication"}
    assert ta.properties["metadata"]["namespace"] == sj["metadata"]["namespace"] == "gpuburst"
    assert ta.properties["spec"]["podIdentity"]["provider"] == "aws"
    assert ta.properties["spec"]["podIdentity"]["roleArn"].startswith("arn:aws:iam::123456789012:role/")


def test_scaling_knobs(sj):
    spec = sj["spec"]
    assert spec["pollingInterval"] == 30
    assert spec["successfulJobsHistoryLimit"] == 3
    assert spec["failedJobsHistoryLimit"] == 5
    assert spec["maxReplicaCount"] == 8
    assert spec["rollout"] == {"strategy": "gradual"}
    # Omitted: KEDA's default strategy pairs with in-flight counting; an explicit 'default' breaks 2.20.0-2.20.1.
    assert "scalingStrategy" not in spec
    job = spec["jobTargetRef"]
    assert job["backoffLimit"] == 0 and job["activeDeadlineSeconds"] == 3600
    assert job["podFailurePolicy"]["rules"][0]["action"] == "Ignore"


def test_hardened_gpu_pod(sj):
    t = sj["spec"]["jobTargetRef"]["template"]
    assert t["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    spec = pod_spec(sj)
    assert spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == "slides-worker"
    assert spec["automountServiceAccountToken"] is False
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (c,) = spec["containers"]
    assert c["image"] == IMAGE and "@sha256:" in c["image"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["command"] == ["python", "-m", "worker", "consume", "--mode", "job", "--queue-url", QUEUE_URL,
                            "--max-messages", "1"]
    assert "livenessProbe" not in c and "readinessProbe" not in c


def test_identities_least_privilege(res):
    docs = {r.name: json.loads(r.properties["policy"]) for r in res.monitor.by_type("aws:iam/rolePolicy:RolePolicy")}
    assert set(docs) == {"keda-operator-assume-scalers", "slides-worker-policy", "slides-scaler-queue-metrics"}
    for name, doc in docs.items():
        assert allow_wildcard_actions(doc["Statement"]) == [], name
        for st in doc["Statement"]:
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            assert all("*" not in a for a in actions), (name, st)
    worker = docs["slides-worker-policy"]["Statement"]
    queue_arn = "arn:aws:sqs:us-east-1:123456789012:gpuburst-dev-slides"
    assert any("sqs:ReceiveMessage" in st["Action"] and st["Resource"] == queue_arn for st in worker)
    assert docs["slides-scaler-queue-metrics"]["Statement"] == [
        {"Effect": "Allow", "Action": ["sqs:GetQueueAttributes"], "Resource": queue_arn}]
    (assoc,) = [r for r in res.monitor.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
                if r.properties["namespace"] == "gpuburst"]
    assert assoc.properties["serviceAccount"] == "slides-worker"


def test_service_account_and_dependencies(res):
    (sa,) = [r for r in res.monitor.by_type("kubernetes:core/v1:ServiceAccount")]
    assert sa.properties["metadata"]["name"] == "slides-worker"
    assert sa.properties["automountServiceAccountToken"] is False
    (sj,) = res.monitor.by_type(SJ)
    deps = set(sj.dependencies)
    (chart,) = res.monitor.by_type("kubernetes:helm.sh/v4:Chart")
    (ta,) = res.monitor.by_type("kubernetes:keda.sh/v1alpha1:TriggerAuthentication")
    (assoc,) = [r for r in res.monitor.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
                if r.properties["namespace"] == "gpuburst"]
    assert {chart.urn, ta.urn, sa.urn, assoc.urn} <= deps
    comp = [r for r in res.registrations if r.type == "gpuburst:index:GpuScaledJob"]
    assert comp and sj.parent == comp[0].urn


def test_network_policy_selects_the_job_pods(res, sj):
    # Keda's own namespace holds an allow-all policy too (the VPC CNI's strict mode); the worker's is the one here.
    (np_,) = [p for p in res.monitor.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
              if p.properties["metadata"].get("namespace") == sj["metadata"]["namespace"]]
    labels = sj["spec"]["jobTargetRef"]["template"]["metadata"]["labels"]
    assert np_.properties["spec"]["podSelector"]["matchLabels"] == labels
    assert np_.properties["spec"]["policyTypes"] == ["Ingress", "Egress"]


@pytest.mark.parametrize("version", ["2.20.2", "2.19.0"])
def test_rendered_scaled_job_valid_against_upstream_crd(sj, upstream_crds, version):
    assert validate_against_crd(sj, upstream_crds / f"keda-v{version}-scaledjobs.yaml") == []


def test_built_in_kinds_validate_strictly(res, sj):
    (sa,) = res.monitor.by_type("kubernetes:core/v1:ServiceAccount")
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "ServiceAccount", **{
        k: v for k, v in sa.properties.items() if k in ("metadata", "automountServiceAccountToken")}},
        catalogue.KUBERNETES_VERSION, strict=True)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "slides-x", "namespace": "gpuburst"},
           "spec": sj["spec"]["jobTargetRef"]}
    kubernetes_validate.validate(job, catalogue.KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("kw,fact", [({"ordered": True}, "ordered"),
                                     ({"state_across_messages": True}, "state_across_messages"),
                                     ({"items_independent": False}, "items_independent")])
def test_ordered_or_stateful_work_refused(kw, fact):
    with pytest.raises(ConfigError) as e:
        run(facts_=facts(**kw))
    assert e.value.detail.startswith(f"WorkloadFacts.{fact}: True" if fact != "items_independent"
                                   else "WorkloadFacts.items_independent: False")
    assert "ScaledJob cannot carry this work" in str(e.value)


def test_image_without_digest_refused():
    with pytest.raises(ConfigError, match="WorkerPodSettings.image: 'repo/worker:latest' is not valid"):
        run(image="repo/worker:latest")


def test_accurate_strategy_turns_off_in_flight_counting(upstream_crds):
    res = run(settings=ScaledJobSettings(scaling_strategy="accurate"))
    (sj,) = res.monitor.by_type(SJ)
    assert sj.properties["spec"]["scalingStrategy"] == {"strategy": "accurate"}
    assert sj.properties["spec"]["triggers"][0]["metadata"]["scaleOnInFlight"] == "false"
    assert validate_against_crd(sj.properties, upstream_crds / "keda-v2.20.2-scaledjobs.yaml") == []


@pytest.mark.parametrize("settings,field", [
    (ScaledJobSettings(scaling_strategy="default"), "scaling_strategy"),
    (ScaledJobSettings(queue_length="2"), "queue_length"),
    (ScaledJobSettings(active_deadline_s=59), "active_deadline_s"),
    (ScaledJobSettings(max_replica_count=0), "max_replica_count"),
    (ScaledJobSettings(polling_interval_s=1), "polling_interval_s"),
])
def test_bad_settings_refused(settings, field):
    with pytest.raises(ConfigError) as e:
        run(settings=settings)
    assert e.value.detail.startswith(f"ScaledJobSettings.{field}: ")


def test_active_deadline_must_cover_load_and_work():
    with pytest.raises(ConfigError) as e:
        run(facts_=facts(model_load_s=120, seconds_per_item=600), settings=ScaledJobSettings(active_deadline_s=700))
    assert e.value.detail == ("ScaledJobSettings.active_deadline_s: 700 is not valid: more than model_load_s + "
                            "max_messages_per_job x seconds_per_item = 720 s")


def test_max_replica_count_defaults_to_the_facts():
    res = run(facts_=facts(max_replicas=3))
    (sj,) = res.monitor.by_type(SJ)
    assert sj.properties["spec"]["maxReplicaCount"] == 3


def test_pure_builder_is_checked_against_the_given_keda_version():
    m = scaled_job_manifest(name="s", namespace="gpuburst", queue_url=QUEUE_URL, region="us-east-1",
                            auth_name="s-sqs-auth", service_account_name="s-worker",
                            pod=WorkerPodSettings(image=IMAGE), settings=ScaledJobSettings(),
                            keda_version="2.20.1")
    assert "scalingStrategy" not in m["spec"]


def test_preview_with_unknown_outputs_still_declares_everything():
    def program():
        queue = aws.sqs.Queue("slides-queue", name="gpuburst-dev-slides")
        keda = Keda("keda", KedaArgs(cluster_name="gpuburst-dev"))
        GpuScaledJob("slides", GpuScaledJobArgs(
            egress_cidrs=VPC_CIDRS,
            cluster_name="gpuburst-dev", keda=keda, facts=facts(), namespace="gpuburst", queue_url=queue.url,
            queue_arn=queue.arn, bucket_arn="arn:aws:s3:::gpuburst-dev-data",
            pod=WorkerPodSettings(image=queue.arn.apply(lambda _: IMAGE))))
    res = run_under_mocks(program, preview=True)
    (sj,) = res.monitor.by_type(SJ)
    assert sj.properties["spec"]["rollout"] == {"strategy": "gradual"}
    assert sj.properties["spec"]["triggers"][0]["metadata"]["queueLength"] == "1"


def run_with_polling(polling_interval_s):
    def program():
        queue = aws.sqs.Queue("slides-queue", name="gpuburst-dev-slides")
        bucket = aws.s3.Bucket("data", bucket="gpuburst-dev-data")
        keda = Keda("keda", KedaArgs(cluster_name="gpuburst-dev"))
        GpuScaledJob("slides", GpuScaledJobArgs(
            egress_cidrs=VPC_CIDRS,
            cluster_name="gpuburst-dev", keda=keda, facts=facts(), namespace="gpuburst", queue_url=queue.url,
            queue_arn=queue.arn, bucket_arn=bucket.arn, pod=WorkerPodSettings(image=IMAGE),
            polling_interval_s=polling_interval_s))
    return run_under_mocks(program)


def test_polling_interval_from_the_stack_config_reaches_the_scaledjob():
    (r,) = run_with_polling(12).monitor.by_type(SJ)
    assert r.properties["spec"]["pollingInterval"] == 12
    assert r.properties["spec"]["maxReplicaCount"] == facts().max_replicas  # the other defaults are kept


def test_polling_interval_from_the_stack_config_is_checked():
    with pytest.raises(ConfigError, match=r"^GpuScaledJob '[^']+': ScaledJobSettings.polling_interval_s: 2 is not "
                                          r"valid"):
        run_with_polling(2)


def test_a_batch_sets_queue_length_and_max_messages_together_and_grows_the_deadline():
    settings = settings_for_batch(25, model_load_s=45, expected_processing_s=300, max_replica_count=8,
                                  polling_interval_s=15)
    assert (settings.queue_length, settings.max_messages_per_job, settings.polling_interval_s) == ("25", 25, 15)
    assert settings.active_deadline_s == 45 + 25 * 300  # the whole Job: its model load and 25 messages
    res = run(settings=settings)
    (r,) = res.monitor.by_type(SJ)
    spec = r.properties["spec"]
    assert spec["triggers"][0]["metadata"]["queueLength"] == "25"
    command = spec["jobTargetRef"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--max-messages") + 1] == "25"
    assert spec["jobTargetRef"]["activeDeadlineSeconds"] == 7545


def test_a_batch_of_one_keeps_the_deadline_floor():
    assert settings_for_batch(1, model_load_s=45, expected_processing_s=300, max_replica_count=8).active_deadline_s \
        == 3600


def test_a_scaledjob_names_its_nodepool_and_the_chooser_pick_in_the_plan():
    from components.nodepool import GpuNodePool, GpuNodePoolArgs

    def program():
        queue = aws.sqs.Queue("slides-queue", name="gpuburst-dev-slides")
        keda = Keda("keda", KedaArgs(cluster_name="gpuburst-dev"))
        pool = GpuNodePool("tils", GpuNodePoolArgs(nodeclass_name="gpu", gpu_limit=4, nodepool_name="tils-lab"))
        GpuScaledJob("slides", GpuScaledJobArgs(
            egress_cidrs=VPC_CIDRS, nodepool=pool,
            cluster_name="gpuburst-dev", keda=keda, facts=facts(), namespace="gpuburst", queue_url=queue.url,
            queue_arn=queue.arn, bucket_arn="arn:aws:s3:::gpuburst-dev-data", pod=WorkerPodSettings(image=IMAGE)))

    res = run_under_mocks(program)
    (sj,) = res.monitor.by_type(SJ)
    pod = sj.properties["spec"]["jobTargetRef"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true", "karpenter.sh/nodepool": "tils-lab"}
    (pool,) = res.monitor.by_type("kubernetes:karpenter.sh/v1:NodePool")
    assert pool.urn in sj.dependencies  # the pool exists before the first job asks for a node of it
    annotations = sj.properties["metadata"]["annotations"]
    assert annotations["gpuburst.io/chooser-pattern"] == "scaledjob"
    assert annotations["gpuburst.io/items-independent"] == "true"
    assert "parallel jobs" in annotations["gpuburst.io/chooser-reason"]
