"""Tests of the warm GPU floor: the pure builders against the pinned KEDA CRD and the Kubernetes schemas, the
component under mocks, and a synth of a stack that sets warmGpus (plus the polling and Karpenter batch keys)."""
from __future__ import annotations

import json

import kubernetes_validate
import pulumi
import pytest
import yaml
from synth_run import ROOT, run_synth

from components import catalogue
from components.pod import WorkerPodSettings, hardened_pod_spec
from components.spec.names import GPU_NODE_SELECTOR, GPU_TOLERATION
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks
from components.warm_floor import (
    PLACEHOLDER_PRIORITY,
    PLACEHOLDER_PRIORITY_CLASS,
    WORKLOAD_PRIORITY,
    WORKLOAD_PRIORITY_CLASS,
    WarmGpuFloor,
    WarmGpuFloorArgs,
    placeholder_deployment_manifest,
    priority_class_manifests,
    warm_floor_scaled_object_manifest,
)
from tests.components.crd_oracle import check_against_crd

FLOOR = dict(count=2, start="0 8 * * 1-5", end="0 13 * * 1-5", timezone="Europe/London")
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker@sha256:" + "cd" * 32


def strict(obj):
    try:
        kubernetes_validate.validate(obj, catalogue.KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        pytest.fail(f"{obj['kind']}: {e.message} at {'.'.join(map(str, e.path))}")


def test_scaled_object_is_a_cron_trigger_on_the_placeholder():
    so = warm_floor_scaled_object_manifest("gpuburst", **FLOOR)
    assert (so["apiVersion"], so["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    spec = so["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gpuburst-warm-floor"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 2)
    assert spec["triggers"] == [{"type": "cron", "metadata": {
        "timezone": "Europe/London", "start": "0 8 * * 1-5", "end": "0 13 * * 1-5", "desiredReplicas": "2"}}]


def test_scaled_object_validates_against_the_pinned_keda_crd(upstream_crds):
    crd = upstream_crds / f"keda-v{catalogue.KEDA_VERSION}-scaledobjects.yaml"
    report = check_against_crd(warm_floor_scaled_object_manifest("gpuburst", **FLOOR), crd)
    assert report.errors == []
    # The oracle can fail: an unknown field in the spec is caught.
    bad = warm_floor_scaled_object_manifest("gpuburst", **FLOOR)
    bad["spec"]["desiredReplicas"] = 2
    assert check_against_crd(bad, crd).errors


def test_count_below_one_is_refused():
    with pytest.raises(ConfigError, match=r"^warmGpus.count: 0 is not valid"):
        warm_floor_scaled_object_manifest("gpuburst", **{**FLOOR, "count": 0})


def test_placeholder_holds_one_gpu_placed_like_the_workers_at_zero_replicas():
    d = placeholder_deployment_manifest("gpuburst")
    assert d["metadata"]["namespace"] == "gpuburst" and d["spec"]["replicas"] == 0
    pod = d["spec"]["template"]["spec"]
    worker = hardened_pod_spec(WorkerPodSettings(image=IMAGE), command=["x"], queue_url="q",
                               service_account_name="sa", restart_policy="Never")
    assert pod["nodeSelector"] == worker["nodeSelector"] == GPU_NODE_SELECTOR
    assert pod["tolerations"] == worker["tolerations"] == [GPU_TOLERATION]
    (c,) = pod["containers"]
    assert c["resources"]["requests"]["nvidia.com/gpu"] == c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["image"] == catalogue.PAUSE_IMAGE and "@sha256:" in c["image"]
    assert pod["priorityClassName"] == PLACEHOLDER_PRIORITY_CLASS
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and pod["securityContext"]["runAsNonRoot"] is True


def test_placeholder_and_priority_classes_validate_strictly():
    strict(placeholder_deployment_manifest("gpuburst"))
    for pc in priority_class_manifests():
        strict(pc)
    bad = placeholder_deployment_manifest("gpuburst")
    bad["spec"]["template"]["spec"]["priorityClass"] = "typo"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, catalogue.KUBERNETES_VERSION, strict=True)


def test_workloads_outrank_and_preempt_the_placeholders():
    classes = {pc["metadata"]["name"]: pc for pc in priority_class_manifests()}
    work, floor = classes[WORKLOAD_PRIORITY_CLASS], classes[PLACEHOLDER_PRIORITY_CLASS]
    assert work["value"] == WORKLOAD_PRIORITY > 0 > floor["value"] == PLACEHOLDER_PRIORITY
    assert work["preemptionPolicy"] == "PreemptLowerPriority"  # never Never: a real job evicts a placeholder at once
    assert not work["globalDefault"] and not floor["globalDefault"]


def test_worker_pod_carries_the_priority_class_only_when_asked():
    kw = dict(command=["x"], queue_url="q", service_account_name="sa", restart_policy="Never")
    assert "priorityClassName" not in hardened_pod_spec(WorkerPodSettings(image=IMAGE), **kw)
    spec = hardened_pod_spec(WorkerPodSettings(image=IMAGE, priority_class_name=WORKLOAD_PRIORITY_CLASS), **kw)
    assert spec["priorityClassName"] == WORKLOAD_PRIORITY_CLASS


def test_component_under_mocks_depends_on_the_keda_chart():
    def program():
        chart = pulumi.CustomResource("test:index:KedaChart", "keda-chart", {})
        WarmGpuFloor("floor", WarmGpuFloorArgs(namespace="gpuburst", keda_chart=chart, **FLOOR))
    res = run_under_mocks(program)
    [component] = res.monitor.by_type("gpuburst:index:WarmGpuFloor")
    [chart] = res.monitor.by_type("test:index:KedaChart")
    [so] = res.monitor.by_type("kubernetes:keda.sh/v1alpha1:ScaledObject")
    [dep] = res.monitor.by_type("kubernetes:apps/v1:Deployment")
    pcs = res.monitor.by_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")
    assert chart.urn in so.dependencies and dep.urn in so.dependencies
    assert {r.parent for r in [so, dep, *pcs]} == {component.urn}
    assert sorted(p.properties["value"] for p in pcs) == [PLACEHOLDER_PRIORITY, WORKLOAD_PRIORITY]
    floor_pc = next(p for p in pcs if p.properties["value"] == PLACEHOLDER_PRIORITY)
    assert floor_pc.urn in dep.dependencies
    assert so.properties["spec"]["triggers"][0]["metadata"]["desiredReplicas"] == "2"


# -- the stack with warmGpus, synthesised --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("synth-warm")
    config = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]
    config.update({"gpuburst:warmGpus": {"count": 1, "start": "0 8 * * 1-5", "end": "0 13 * * 1-5",
                                         "timezone": "Europe/London"},
                   "gpuburst:pollingIntervalS": 15, "gpuburst:karpenterBatchIdleS": 2,
                   "gpuburst:karpenterBatchMaxS": 20})
    stack = tmp / "Pulumi.warm.yaml"
    stack.write_text(yaml.safe_dump({"config": config}))
    proc = run_synth(tmp / "out", "--stack", "warm", "--stack-file", str(stack))
    assert proc.returncode == 0, proc.stderr
    return json.loads((tmp / "out" / "plan.json").read_text())


def of_type(plan, t):
    return [r for r in plan["resources"] if r["type"] == t]


def test_plan_holds_the_floor(warm, upstream_crds):
    [so] = of_type(warm, "kubernetes:keda.sh/v1alpha1:ScaledObject")
    trigger = so["properties"]["spec"]["triggers"][0]
    assert trigger["type"] == "cron" and trigger["metadata"]["timezone"] == "Europe/London"
    assert trigger["metadata"]["desiredReplicas"] == "1"
    crd = upstream_crds / f"keda-v{catalogue.KEDA_VERSION}-scaledobjects.yaml"
    assert check_against_crd(so["properties"], crd).errors == []
    [keda_chart] = [c for c in of_type(warm, "kubernetes:helm.sh/v4:Chart") if c["properties"]["name"] == "keda"]
    assert keda_chart["urn"] in so["dependencies"]
    placeholder = [d for d in of_type(warm, "kubernetes:apps/v1:Deployment")
                   if d["properties"]["metadata"]["name"] == "gpuburst-warm-floor"]
    assert len(placeholder) == 1 and placeholder[0]["properties"]["spec"]["replicas"] == 0
    strict(placeholder[0]["properties"])
    # Each floor node pulls the worker image before any job needs it: the same image, by digest, as the ScaledJob's.
    [init] = placeholder[0]["properties"]["spec"]["template"]["spec"]["initContainers"]
    [sj] = of_type(warm, "kubernetes:keda.sh/v1alpha1:ScaledJob")
    [worker] = sj["properties"]["spec"]["jobTargetRef"]["template"]["spec"]["containers"]
    assert init["image"] == worker["image"] and "@sha256:" in init["image"]
    names = {p["properties"]["metadata"]["name"] for p in
             of_type(warm, "kubernetes:scheduling.k8s.io/v1:PriorityClass") if not p.get("source")}
    assert names == {WORKLOAD_PRIORITY_CLASS, PLACEHOLDER_PRIORITY_CLASS}


def test_workloads_run_at_the_workload_priority(warm):
    [sj] = of_type(warm, "kubernetes:keda.sh/v1alpha1:ScaledJob")
    assert sj["properties"]["spec"]["jobTargetRef"]["template"]["spec"]["priorityClassName"] == WORKLOAD_PRIORITY_CLASS
    consumers = [d for d in of_type(warm, "kubernetes:apps/v1:Deployment")
                 if d["properties"]["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "consumer"]
    assert consumers and all(d["properties"]["spec"]["template"]["spec"]["priorityClassName"]
                             == WORKLOAD_PRIORITY_CLASS for d in consumers)


def test_polling_and_batch_settings_reach_the_scaledjob_and_the_rendered_controller(warm):
    [sj] = of_type(warm, "kubernetes:keda.sh/v1alpha1:ScaledJob")
    assert sj["properties"]["spec"]["pollingInterval"] == 15
    [ctl] = [c for c in of_type(warm, "kubernetes:helm.sh/v4:Chart") if c["properties"]["name"] == "karpenter"]
    settings = ctl["properties"]["values"]["settings"]
    assert (settings["batchIdleDuration"], settings["batchMaxDuration"]) == ("2s", "20s")
    rendered = [d for d in of_type(warm, "kubernetes:apps/v1:Deployment")
                if d.get("source") and d["properties"]["metadata"]["name"] == "karpenter"]
    if not rendered:
        pytest.skip("the karpenter chart was not rendered (no chart archives)")
    env = {e["name"]: e.get("value") for c in rendered[0]["properties"]["spec"]["template"]["spec"]["containers"]
           for e in c.get("env", [])}
    assert (env["BATCH_IDLE_DURATION"], env["BATCH_MAX_DURATION"]) == ("2s", "20s")


def test_dev_stack_has_no_floor_and_no_priority_classes(dev):
    assert not of_type(dev["plan"], "kubernetes:keda.sh/v1alpha1:ScaledObject")
    [sj] = of_type(dev["plan"], "kubernetes:keda.sh/v1alpha1:ScaledJob")
    assert "priorityClassName" not in sj["properties"]["spec"]["jobTargetRef"]["template"]["spec"]
    assert sj["properties"]["spec"]["pollingInterval"] == 30


def test_placeholder_reserves_a_worker_sized_node():
    # A token-sized placeholder would make Karpenter buy a node the worker cannot use (e.g. g6.xlarge).
    worker = hardened_pod_spec(WorkerPodSettings(image=IMAGE), command=["x"], queue_url="q",
                               service_account_name="sa", restart_policy="Never")["containers"][0]["resources"]
    (c,) = placeholder_deployment_manifest("gpuburst")["spec"]["template"]["spec"]["containers"]
    assert c["resources"] == worker
    bigger = placeholder_deployment_manifest("gpuburst", pod=WorkerPodSettings(image=IMAGE, cpu_cores=6,
                                                                               memory_gib=28))
    assert bigger["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "6"


def test_the_warm_stack_passes_the_policy_pack(warm, tmp_path):
    """The placeholder holds a GPU node and calls no AWS API: the wiring rules must not ask it for a Pod Identity."""
    import subprocess
    import sys

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(warm))
    r = subprocess.run([sys.executable, "-m", "policies", "check", str(plan)], cwd=ROOT, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("policy check passed")


def test_placeholder_pre_pulls_the_worker_image_as_a_restricted_init_container():
    d = placeholder_deployment_manifest("gpuburst", pod=WorkerPodSettings(image=IMAGE))
    pod = d["spec"]["template"]["spec"]
    [init] = pod["initContainers"]
    assert init["image"] == IMAGE and init["command"] == ["python", "-c", "pass"]
    assert init["resources"]["requests"] == init["resources"]["limits"]  # Guaranteed QoS, as the pause container
    assert "nvidia.com/gpu" not in init["resources"]["requests"]
    sc = init["securityContext"]
    assert sc["runAsNonRoot"] and sc["runAsUser"] == 10001 and sc["readOnlyRootFilesystem"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["allowPrivilegeEscalation"] is False
    strict(d)
    # It is still a placeholder for the wiring rule (it calls no AWS API), and without an image nothing is pulled.
    from policies.identity import is_placeholder
    assert is_placeholder(pod)
    assert "initContainers" not in placeholder_deployment_manifest("gpuburst")["spec"]["template"]["spec"]


def test_the_pause_image_can_be_the_stacks_mirror():
    from components.warm_floor import placeholder_deployment_manifest

    mirror = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-dev/mirror/kubernetes/pause:3.10@sha256:" + "e" * 64
    pod = placeholder_deployment_manifest("gpuburst", pause_image=mirror)["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["containers"]] == [mirror]


def test_placeholders_hold_nodes_of_the_workers_own_nodepool():
    d = placeholder_deployment_manifest("gpuburst", nodepool="gpu")
    worker = hardened_pod_spec(WorkerPodSettings(image=IMAGE), command=["x"], queue_url="q",
                               service_account_name="sa", restart_policy="Never", nodepool="gpu")
    assert d["spec"]["template"]["spec"]["nodeSelector"] == worker["nodeSelector"] == {
        **GPU_NODE_SELECTOR, "karpenter.sh/nodepool": "gpu"}
