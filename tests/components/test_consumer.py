"""Tests of GpuConsumer under mocks: one replica, Recreate, visibility env, grace, hardened pod, least privilege,
and the built-in kinds against the Kubernetes schema (strict)."""
from __future__ import annotations

import json

import kubernetes_validate
import pulumi_aws as aws
import pytest

from components.catalogue import KUBERNETES_VERSION
from components.consumer import GpuConsumer, GpuConsumerArgs, consumer_deployment_manifest, disruption_budget_manifest
from components.pod import WorkerPodSettings
from components.queue import WorkQueue, WorkQueueArgs
from components.spec.policy_documents import allow_wildcard_actions
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker@sha256:" + "ef" * 32
VPC_CIDRS = ["10.64.0.0/16"]
"""The VPC's CIDR: the worker NetworkPolicy's only HTTPS destination (required with the policy)."""
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/gpuburst-dev-studies.fifo"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def run(*, disruption_budget=False, **pod_kw):
    pod_kw.setdefault("visibility_timeout_s", 900)

    def program():
        queue = aws.sqs.Queue("studies-queue", name="gpuburst-dev-studies.fifo", fifo_queue=True,
                              visibility_timeout_seconds=pod_kw["visibility_timeout_s"])
        GpuConsumer("studies", GpuConsumerArgs(
            egress_cidrs=VPC_CIDRS,
            cluster_name="gpuburst-dev", namespace="gpuburst", queue_url=queue.url, queue_arn=queue.arn,
            bucket_arn="arn:aws:s3:::gpuburst-dev-results", slides_bucket_arn="arn:aws:s3:::gpuburst-dev-slides",
            pod=WorkerPodSettings(image=IMAGE, **pod_kw),
            disruption_budget=disruption_budget))
    return run_under_mocks(program)


@pytest.fixture(scope="module")
def res():
    return run()


@pytest.fixture(scope="module")
def dep(res) -> dict:
    (d,) = res.monitor.by_type(DEPLOYMENT)
    return {"apiVersion": "apps/v1", "kind": "Deployment", **d.properties}


def test_one_replica_recreate(dep):
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert dep["spec"]["selector"]["matchLabels"] == dep["spec"]["template"]["metadata"]["labels"]


def test_visibility_env_and_grace(dep):
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["VISIBILITY_TIMEOUT"] == "900"
    assert env["VISIBILITY_EXTENSION_INTERVAL"] == "300"
    assert int(env["VISIBILITY_EXTENSION_INTERVAL"]) < int(env["VISIBILITY_TIMEOUT"])
    assert spec["terminationGracePeriodSeconds"] >= int(env["GRACE_PERIOD"]) + 10
    assert c["command"] == ["python", "-m", "worker", "consume", "--mode", "service", "--queue-url", QUEUE_URL]


def test_hardened_pod(dep):
    t = dep["spec"]["template"]
    assert t["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    spec = t["spec"]
    assert spec["restartPolicy"] == "Always" and spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == "studies-worker"
    (c,) = spec["containers"]
    assert c["image"] == IMAGE and c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_identity_least_privilege(res):
    (pol,) = res.monitor.by_type("aws:iam/rolePolicy:RolePolicy")
    doc = json.loads(pol.properties["policy"])
    assert allow_wildcard_actions(doc["Statement"]) == []
    assert all("*" not in a for st in doc["Statement"] for a in st["Action"])
    puts = {r for st in doc["Statement"] if "s3:PutObject" in st["Action"] for r in st["Resource"]}
    assert puts == {"arn:aws:s3:::gpuburst-dev-results/results/*"}
    gets = {r for st in doc["Statement"] if st["Action"] == ["s3:GetObject"] for r in st["Resource"]}
    assert "arn:aws:s3:::gpuburst-dev-slides/slides/*" in gets
    (assoc,) = res.monitor.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert (assoc.properties["namespace"], assoc.properties["serviceAccount"]) == ("gpuburst", "studies-worker")
    (d,) = res.monitor.by_type(DEPLOYMENT)
    assert assoc.urn in d.dependencies


def test_built_in_kinds_validate_strictly(res, dep):
    kubernetes_validate.validate(dep, KUBERNETES_VERSION, strict=True)
    (sa,) = res.monitor.by_type("kubernetes:core/v1:ServiceAccount")
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "ServiceAccount", **sa.properties}, KUBERNETES_VERSION,
                                 strict=True)
    assert sa.properties["automountServiceAccountToken"] is False
    kubernetes_validate.validate(disruption_budget_manifest("studies", "gpuburst"), KUBERNETES_VERSION, strict=True)


def test_network_policy_selects_the_consumer_pods(res, dep):
    (np_,) = res.monitor.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert np_.properties["spec"]["podSelector"]["matchLabels"] == dep["spec"]["template"]["metadata"]["labels"]
    assert np_.properties["metadata"]["namespace"] == "gpuburst"


def test_no_disruption_budget_by_default_and_optional(res):
    assert not res.monitor.by_type("kubernetes:policy/v1:PodDisruptionBudget")
    (pdb,) = run(disruption_budget=True).monitor.by_type("kubernetes:policy/v1:PodDisruptionBudget")
    assert pdb.properties["spec"]["maxUnavailable"] == 0


@pytest.mark.parametrize("kw,field", [
    ({"grace_period_s": 300, "termination_grace_period_s": 300}, "termination_grace_period_s"),
    ({"visibility_timeout_s": 120, "visibility_extension_interval_s": 200}, "visibility_extension_interval_s"),
])
def test_grace_and_visibility_refused(kw, field):
    with pytest.raises(ConfigError) as e:
        run(**kw)
    assert e.value.detail.startswith(f"WorkerPodSettings.{field}: ")


def test_pure_builder():
    m = consumer_deployment_manifest(name="c", namespace="gpuburst", queue_url=QUEUE_URL, service_account_name="c-w",
                                     pod=WorkerPodSettings(image=IMAGE))
    kubernetes_validate.validate(m, KUBERNETES_VERSION, strict=True)
    with pytest.raises(ConfigError, match="WorkerPodSettings.image"):
        consumer_deployment_manifest(name="c", namespace="gpuburst", queue_url=QUEUE_URL, service_account_name="c-w",
                                     pod=WorkerPodSettings(image="worker:1.0"))


def test_liveness_probe_reads_the_workers_liveness_file():
    from components.consumer import LIVENESS_FILE, consumer_deployment_manifest, liveness_probes
    from components.pod import WorkerPodSettings

    pod = WorkerPodSettings(image="r.example/worker@sha256:" + "a" * 64, visibility_timeout_s=600)
    m = consumer_deployment_manifest(name="s", namespace="ns", queue_url="https://q", service_account_name="sa",
                                     pod=pod)
    c = m["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "LIVENESS_FILE", "value": LIVENESS_FILE} in c["env"]
    assert c["livenessProbe"] == liveness_probes(600)["livenessProbe"]
    assert "-lt 600" in c["livenessProbe"]["exec"]["command"][-1]
    assert LIVENESS_FILE in c["startupProbe"]["exec"]["command"]
    # The file lives on a writable volume (the root filesystem is read-only).
    mounts = [vm["mountPath"] for vm in c["volumeMounts"]]
    assert any(LIVENESS_FILE.startswith(mp.rstrip("/") + "/") for mp in mounts), mounts


def _pure(**kw):
    return consumer_deployment_manifest(name="c", namespace="gpuburst", queue_url=QUEUE_URL,
                                        service_account_name="c-w", pod=WorkerPodSettings(image=IMAGE), **kw)


def test_the_consumer_selects_on_demand_nodes_by_default(dep):
    # Karpenter prefers spot whenever the pool allows it, whatever the order; the consumer asks for on-demand itself.
    selector = dep["spec"]["template"]["spec"]["nodeSelector"]
    assert selector["karpenter.sh/capacity-type"] == "on-demand"
    assert selector["nvidia.com/gpu.present"] == "true"


def test_capacity_type_none_leaves_the_choice_to_the_pool_and_bad_values_are_refused():
    selector = _pure(capacity_type=None)["spec"]["template"]["spec"]["nodeSelector"]
    assert "karpenter.sh/capacity-type" not in selector and selector["nvidia.com/gpu.present"] == "true"
    assert _pure(capacity_type="reserved")["spec"]["template"]["spec"]["nodeSelector"][
        "karpenter.sh/capacity-type"] == "reserved"
    kubernetes_validate.validate(_pure(), KUBERNETES_VERSION, strict=True)
    with pytest.raises(ConfigError) as e:
        _pure(capacity_type="preemptible")
    assert e.value.detail.startswith("GpuConsumerArgs.capacity_type: 'preemptible'") and "\n" not in str(e.value)


def test_a_pod_visibility_that_disagrees_with_its_queue_is_refused():
    def program(pod_visibility_s, queue_visibility_s):
        def body():
            queue = WorkQueue("studies-q", WorkQueueArgs(name="gpuburst-dev-studies", fifo=True,
                                                         expected_processing_s=queue_visibility_s // 2,
                                                         alarm_emails=["oncall@example.org"]))
            GpuConsumer("studies", GpuConsumerArgs(
                egress_cidrs=VPC_CIDRS,
                cluster_name="gpuburst-dev", namespace="gpuburst", queue_url=queue.queue_url, queue_arn=queue.queue_arn,
                bucket_arn="arn:aws:s3:::gpuburst-dev-results",
                queue_visibility_timeout_s=queue.visibility_timeout_s,
                pod=WorkerPodSettings(image=IMAGE, visibility_timeout_s=pod_visibility_s)))
        return body

    with pytest.raises(ConfigError) as e:
        run_under_mocks(program(60, 1200))
    assert e.value.field == "WorkerPodSettings.visibility_timeout_s" and "1200 s" in str(e.value)
    with pytest.raises(ConfigError):
        run_under_mocks(program(600, 1200))  # the pod's default (600) against a 600 s-per-slide queue
    assert run_under_mocks(program(1200, 1200)).monitor.by_type("gpuburst:index:GpuConsumer")


def test_a_consumer_for_independent_work_carries_the_chooser_pick_and_its_nodepool():
    from components.spec.workload import WorkloadFacts

    facts = WorkloadFacts(items_independent=True, state_across_messages=False, ordered=False, model_load_s=10,
                          seconds_per_item=6, burst_items=400, max_replicas=8)

    def program():
        queue = aws.sqs.Queue("slides-queue", name="lab-slides", visibility_timeout_seconds=600)
        GpuConsumer("slides", GpuConsumerArgs(
            egress_cidrs=VPC_CIDRS, nodepool="tils-lab", facts=facts,
            cluster_name="gpuburst-dev", namespace="lab", queue_url=queue.url, queue_arn=queue.arn,
            bucket_arn="arn:aws:s3:::lab-results", pod=WorkerPodSettings(image=IMAGE)))

    (dep,) = run_under_mocks(program).monitor.by_type("kubernetes:apps/v1:Deployment")
    annotations = dep.properties["metadata"]["annotations"]
    assert annotations["gpuburst.io/chooser-pattern"] == "scaledjob"  # 400 independent items: jobs win
    assert "400 items on up to 8 parallel jobs" in annotations["gpuburst.io/chooser-reason"]
    selector = dep.properties["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {"nvidia.com/gpu.present": "true", "karpenter.sh/nodepool": "tils-lab",
                        "karpenter.sh/capacity-type": "on-demand"}
