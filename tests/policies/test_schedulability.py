"""Tests for the schedulability rules: GPU pods match and fit a NodePool, effective diversity, and where the device
plugin and the controllers run."""
from __future__ import annotations

import copy

from policies import schedulability as rule
from policies.plan import Res
from policies.resources import NODEGROUP
from tests.policies.fact_table import FACTS

IT = "node.kubernetes.io/instance-type"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def res(rtype: str, name: str, props: dict, parent: str | None = None) -> Res:
    return Res(rtype, f"urn:pulumi:dev::gpuburst::{rtype}::{name}", name, parent, props)


def nodepool(types=("g4dn.xlarge", "g4dn.2xlarge", "g5.xlarge", "g5.2xlarge"), name="gpu", requirements=None) -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": {
        "template": {"metadata": {"labels": {"nvidia.com/gpu.present": "true", "gpuburst.io/pool": name}},
                     "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                              "requirements": requirements if requirements is not None else
                              [{"key": IT, "operator": "In", "values": list(types)},
                               {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                              "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}},
        "limits": {"nvidia.com/gpu": 8}}}


def nodeclass(volume="100Gi") -> dict:
    return {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "gpu"},
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "blockDeviceMappings": [
                {"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {"volumeSize": volume}}]}}


def pod(cpu="4", memory="24Gi", eph="52Gi", sa="slides-worker") -> dict:
    res_ = {"cpu": cpu, "memory": memory, "ephemeral-storage": eph, "nvidia.com/gpu": "1"}
    return {"serviceAccountName": sa, "containers": [{"name": "worker", "image": "w",
                                                      "resources": {"requests": dict(res_), "limits": dict(res_)}}],
            "nodeSelector": {"nvidia.com/gpu.present": "true"}, "tolerations": [dict(GPU_TOLERATION)]}


def scaled_job(spec: dict | None = None) -> dict:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob", "metadata": {"name": "slides", "namespace": "gb"},
            "spec": {"jobTargetRef": {"template": {"spec": spec or pod()}}}}


def daemonset(name: str, spec: dict) -> dict:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "nvidia"},
            "spec": {"template": {"spec": spec}}}


def plugin_spec(**over) -> dict:
    spec = {"nodeSelector": {"nvidia.com/gpu.present": "true"}, "tolerations": [dict(GPU_TOLERATION)],
            "containers": [{"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.18.0",
                            "command": ["nvidia-device-plugin"]}]}
    spec.update(over)
    return spec


def controller_spec(karpenter: bool = True) -> dict:
    terms = [{"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"},
                                   {"key": "gpuburst.io/pool", "operator": "In", "values": ["system"]}]}]
    spec = {"nodeSelector": {"gpuburst.io/pool": "system"}, "serviceAccountName": "karpenter",
            "containers": [{"name": "controller", "image": "k"}]}
    if karpenter:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": terms}}}
    return spec


def world(pool: dict | None = None, job_pod: dict | None = None, plugin: dict | None = None,
          karpenter_pod: dict | None = None, keda_pod: dict | None = None, group_labels=None) -> list[Res]:
    """A correctly wired stack: GPU NodePool + EC2NodeClass, system node group, device plugin, controllers, a
    ScaledJob; each argument replaces one part."""
    dp_chart = res("kubernetes:helm.sh/v4:Chart", "dp", {"chart": "nvidia-device-plugin", "namespace": "nvidia"})
    k_chart = res("kubernetes:helm.sh/v4:Chart", "karpenter", {"chart": "oci://public.ecr.aws/karpenter/karpenter",
                                                                "namespace": "kube-system"})
    e_chart = res("kubernetes:helm.sh/v4:Chart", "keda", {"chart": "keda", "namespace": "keda"})

    def deployment(name, ns, spec):
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
                "spec": {"template": {"spec": spec}}}

    keda_spec = keda_pod or {"nodeSelector": {"gpuburst.io/pool": "system"}, "serviceAccountName": "keda-operator",
                             "containers": [{"name": "keda-operator", "image": "k"}]}
    return [
        res("kubernetes:karpenter.sh/v1:NodePool", "gpu-pool", pool or nodepool()),
        res("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass", "gpu-class", nodeclass()),
        res(NODEGROUP, "system", {"labels": group_labels if group_labels is not None else
                                       {"gpuburst.io/pool": "system"}, "instanceTypes": ["m6i.large"]}),
        dp_chart, k_chart, e_chart,
        res("kubernetes:apps/v1:DaemonSet", "dp:nvidia/plugin", daemonset("plugin", plugin or plugin_spec()),
            dp_chart.urn),
        res("kubernetes:apps/v1:Deployment", "karpenter:kube-system/karpenter",
            deployment("karpenter", "kube-system", karpenter_pod or controller_spec()), k_chart.urn),
        res("kubernetes:apps/v1:Deployment", "keda:keda/keda-operator", deployment("keda-operator", "keda", keda_spec),
            e_chart.urn),
        res("kubernetes:keda.sh/v1alpha1:ScaledJob", "slides", scaled_job(job_pod)),
    ]


def all_findings(resources: list[Res]) -> list[tuple[str, str]]:
    return (rule.schedulable_findings(resources, FACTS) + rule.diversity_findings(resources, FACTS)
            + rule.device_plugin_findings(resources, FACTS) + rule.controller_findings(resources, FACTS))


# -- a correct wiring passes -----------------------------------------------------------------------------------------

def test_the_correct_world_passes_every_rule():
    assert all_findings(world()) == []


def test_ephemeral_storage_follows_the_root_volume():
    resources = world()
    resources[1] = res(resources[1].type, "gpu-class", nodeclass("20Gi"))  # 17Gi allocatable on a 20 GiB root
    found = rule.schedulable_findings(resources, FACTS)
    assert len(found) == 1 and "requests 52Gi ephemeral-storage" in found[0][1] and "17Gi ephemeral-storage" in \
        found[0][1], found


# -- gpu-pod-schedulable ----------------------------------------------------------------------------------------------

def test_pod_larger_than_every_admitted_type_is_pending_forever_naming_both_ends():
    resources = world(pool=nodepool(("g4dn.xlarge", "g5.xlarge")))
    found = rule.schedulable_findings(resources, FACTS)
    assert len(found) == 1, found
    urn, message = found[0]
    assert urn.endswith("ScaledJob::slides")
    assert message.startswith("Pending forever: pod ScaledJob gb/slides requests 4 cpu and 24Gi memory; the largest "
                              "allocatable among g4dn.xlarge, g5.xlarge is 3920m cpu (g4dn.xlarge, g5.xlarge) and "
                              "14481Mi memory (g4dn.xlarge)"), message
    assert "NodePool 'gpu'" in message


def test_memory_alone_too_large():
    resources = world(pool=nodepool(("g4dn.xlarge", "g5.xlarge")), job_pod=pod(cpu="3"))
    (_, message), = rule.schedulable_findings(resources, FACTS)
    assert "requests 24Gi memory; the largest allocatable among g4dn.xlarge, g5.xlarge is 14481Mi memory " \
           "(g4dn.xlarge)" in message


def test_daemonset_requests_are_subtracted():
    plugin = plugin_spec()
    plugin["containers"][0]["resources"] = {"requests": {"cpu": "4"}}  # leaves 3910m on a 2xlarge
    found = rule.schedulable_findings(world(plugin=plugin), FACTS)
    assert len(found) == 1 and "less the requests of DaemonSets DaemonSet nvidia/plugin" in found[0][1], found


def test_pod_without_the_toleration_or_with_a_label_no_pool_sets_matches_no_nodepool():
    no_tol = pod()
    no_tol["tolerations"] = []
    (_, message), = rule.schedulable_findings(world(job_pod=no_tol), FACTS)
    assert "matches no NodePool" in message and "does not tolerate NodePool 'gpu''s taint nvidia.com/gpu:NoSchedule" \
        in message
    wrong = pod()
    wrong["nodeSelector"] = {"gpuburst.io/pool": "inference"}
    (_, message), = rule.schedulable_findings(world(job_pod=wrong), FACTS)
    assert 'spec.jobTargetRef.template.spec.nodeSelector."gpuburst.io/pool"' in message and "NodePool 'gpu'" in \
        message


def test_pod_selecting_an_instance_type_narrows_the_types_it_can_use():
    narrowed = pod()
    narrowed["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": IT, "operator": "In", "values": ["g5.xlarge", "g4dn.xlarge"]}]}]}}}
    (_, message), = rule.schedulable_findings(world(job_pod=narrowed), FACTS)
    assert "Pending forever" in message and "among g4dn.xlarge, g5.xlarge" in message


def test_a_pool_naming_types_without_facts_says_so():
    (_, message), = rule.schedulable_findings(world(pool=nodepool(("x9.large", "x9.xlarge"))), FACTS)
    assert "describe none of x9.large, x9.xlarge" in message


def test_the_verify_gpu_job_fits_the_pool():
    from components.verify.gpujob import build_gpu_job
    job = build_gpu_job("probe", "gb", "img", nodepool="gpu", deadline_s=600)
    resources = world() + [res("kubernetes:batch/v1:Job", "probe", job)]
    assert rule.schedulable_findings(resources, FACTS) == []
    elsewhere = build_gpu_job("probe", "gb", "img", nodepool="other", deadline_s=600)
    (_, message), = rule.schedulable_findings(world() + [res("kubernetes:batch/v1:Job", "probe", elsewhere)], FACTS)
    assert "Job gb/probe" in message and '"karpenter.sh/nodepool"' in message


# -- gpu-pod-effective-diversity --------------------------------------------------------------------------------------

def test_one_fitting_type_is_the_single_instance_trap_whatever_the_list_says():
    resources = world(pool=nodepool(("g4dn.xlarge", "g5.xlarge", "g5.2xlarge")))
    assert rule.schedulable_findings(resources, FACTS) == []
    (urn, message), = rule.diversity_findings(resources, FACTS)
    assert urn.endswith("ScaledJob::slides")
    assert message.startswith("single-instance trap: pod ScaledJob gb/slides fits only 'g5.2xlarge' of NodePool "
                              "'gpu' (g4dn.xlarge, g5.xlarge cannot host it)"), message


def test_family_and_size_pool_with_one_type_large_enough():
    pool = nodepool(requirements=[{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["g5"]},
                                  {"key": "karpenter.k8s.aws/instance-size", "operator": "In",
                                   "values": ["xlarge", "2xlarge"]}])
    (_, message), = rule.diversity_findings(world(pool=pool), FACTS)
    assert "fits only 'g5.2xlarge'" in message


# -- device-plugin-placement -----------------------------------------------------------------------------------------

def test_device_plugin_selecting_a_label_no_pool_sets_names_both():
    (urn, message), = rule.device_plugin_findings(world(plugin=plugin_spec(nodeSelector={"nvidia.com/gpu.deploy":
                                                                                         "true"})), FACTS)
    assert urn.endswith("DaemonSet::dp:nvidia/plugin")
    assert "device plugin DaemonSet nvidia/plugin never runs on NodePool 'gpu'" in message
    assert '"nvidia.com/gpu.deploy"' in message


def test_device_plugin_without_the_gpu_toleration_or_with_affinity_elsewhere():
    (_, message), = rule.device_plugin_findings(world(plugin=plugin_spec(tolerations=[])), FACTS)
    assert "does not tolerate NodePool 'gpu''s taint nvidia.com/gpu:NoSchedule" in message
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In",
                               "values": ["true"]}]}]}}}
    (_, message), = rule.device_plugin_findings(world(plugin=plugin_spec(affinity=affinity)), FACTS)
    assert "pci-10de.present" in message


def test_other_daemonsets_of_the_chart_are_not_the_plugin():
    resources = world()
    mps = plugin_spec(nodeSelector={"nvidia.com/mps.capable": "true"})
    mps["containers"][0]["command"] = ["mps-control-daemon"]
    resources.append(res("kubernetes:apps/v1:DaemonSet", "dp:nvidia/mps", daemonset("mps", mps), resources[3].urn))
    assert rule.device_plugin_findings(resources, FACTS) == []


def test_no_device_plugin_at_all_with_gpu_pods():
    resources = [r for r in world() if r.name != "dp:nvidia/plugin" and r.name != "dp"]
    (urn, message), = rule.device_plugin_findings(resources, FACTS)
    assert urn.endswith("NodePool::gpu-pool") and "no NVIDIA device plugin DaemonSet" in message and \
        "ScaledJob gb/slides" in message


# -- controller-placement --------------------------------------------------------------------------------------------

def cpu_pool() -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"}, "spec": {
        "template": {"spec": {"requirements": [{"key": "karpenter.k8s.aws/instance-category", "operator": "In",
                                                "values": ["m"]}]}}}}


def test_karpenter_controller_that_can_land_on_a_karpenter_node_names_both():
    resources = world() + [res("kubernetes:karpenter.sh/v1:NodePool", "general", cpu_pool())]
    assert rule.controller_findings(resources, FACTS) == []  # the DoesNotExist term keeps it off 'general'
    loose = controller_spec(karpenter=False)
    loose["nodeSelector"] = {}
    resources = world(karpenter_pod=loose) + [res("kubernetes:karpenter.sh/v1:NodePool", "general", cpu_pool())]
    (urn, message), = rule.controller_findings(resources, FACTS)
    assert urn.endswith("Deployment::karpenter:kube-system/karpenter")
    assert "Karpenter controller Deployment kube-system/karpenter can land on NodePool 'general'" in message


def test_controllers_that_cannot_reach_the_system_node_group():
    keda = {"nodeSelector": {"gpuburst.io/pool": "gpu"}, "containers": [{"name": "keda-operator", "image": "k"}]}
    (urn, message), = rule.controller_findings(world(keda_pod=keda), FACTS)
    assert urn.endswith("Deployment::keda:keda/keda-operator")
    assert "Deployment keda/keda-operator cannot run on the system node group" in message
    assert "NodeGroup system" in message
    found = rule.controller_findings(world(group_labels={}), FACTS)
    assert len(found) == 2 and all("cannot run on the system node group" in m for _u, m in found)


def test_node_group_taints_must_be_tolerated():
    resources = world()
    resources[2] = res(NODEGROUP, "system", {"labels": {"gpuburst.io/pool": "system"}, "taints": [
        {"key": "CriticalAddonsOnly", "value": "true", "effect": "NO_SCHEDULE"}]})
    found = rule.controller_findings(resources, FACTS)
    assert len(found) == 2 and "taint CriticalAddonsOnly=true:NoSchedule" in found[0][1]


# -- unknowns and gRPC -----------------------------------------------------------------------------------------------

def as_stack(resources: list[Res]) -> list[tuple]:
    return [(r.type, r.name, copy.deepcopy(r.props)) for r in resources]


def test_unknown_requests_are_a_violation_naming_the_field(run_stack, samples):
    job = scaled_job()
    job["spec"]["jobTargetRef"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] = samples.U
    job["spec"]["jobTargetRef"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = samples.U
    resources = world(pool=nodepool(("g4dn.xlarge", "g5.xlarge")))
    resources[-1] = res(resources[-1].type, "slides", job)
    found = run_stack(rule.SCHEDULABLE_POLICY, as_stack(resources))
    assert found and all("is unknown during preview" in m for _u, m in found)
    assert any("resources.requests.memory" in m for _u, m in found), found


def test_over_grpc(analyze, samples):
    resources = world(pool=nodepool(("g4dn.xlarge", "g5.xlarge")))
    doc = {"stack": "dev", "resources": [{"type": r.type, "name": r.name, "urn": r.urn, "parent": r.parent or "",
                                          "properties": r.props} for r in resources]}
    report = analyze(doc)
    found = report.by_policy(rule.SCHEDULABLE_NAME)
    assert found and found[0].level == "MANDATORY" and "Pending forever" in found[0].message
    assert report.by_policy(rule.DEVICE_PLUGIN_NAME) == [] and report.by_policy(rule.CONTROLLER_NAME) == []
    report = analyze(doc, {rule.SCHEDULABLE_NAME: "advisory"})
    assert [d.level for d in report.by_policy(rule.SCHEDULABLE_NAME)] == ["ADVISORY"]


def test_node_group_instance_types_are_labels_the_controllers_may_select():
    keda = {"nodeSelector": {"gpuburst.io/pool": "system", IT: "m6i.large", "kubernetes.io/os": "linux"},
            "containers": [{"name": "keda-operator", "image": "k"}]}
    assert rule.controller_findings(world(keda_pod=keda), FACTS) == []
    keda["nodeSelector"][IT] = "c7i.large"
    (_u, message), = rule.controller_findings(world(keda_pod=keda), FACTS)
    assert "node.kubernetes.io/instance-type In ['c7i.large']" in message


def test_an_unknown_nodepool_requirement_leaves_no_verdict(run_stack, samples):
    pool = nodepool()
    pool["spec"]["template"]["spec"]["requirements"].append(
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": samples.U})
    resources = world(pool=pool)
    for policy in (rule.SCHEDULABLE_POLICY, rule.DIVERSITY_POLICY):
        found = run_stack(policy, as_stack(resources))
        assert found and all("is unknown during preview" in m for _u, m in found), (policy.name, found)


# -- partial plans: the pool, the node class, the device plugin and the system nodes of another stack ----------------

def partial(**facts):
    from policies.facts import Fact, Scope

    def fact(key, value):
        if key == "nodeClassRootVolumeGiB":
            return Fact({n: Fact(v, f"policy config {key}[{n!r}]") for n, v in value.items()}, f"policy config {key}")
        return Fact(value, f"policy config {key}")

    return Scope(False, "the plan declares no gpuburst:index:GpuBurstPlatform",
                 {k: fact(k, v) for k, v in facts.items()})


def ends(found) -> list[str]:
    from policies.outside import Outside

    return [f.message for f in found if isinstance(f, Outside)]


def violations(found) -> list[tuple[str, str]]:
    from policies.outside import Outside

    return [f for f in found if not isinstance(f, Outside)]


def test_in_a_partial_plan_a_missing_device_plugin_is_said_once_or_judged_by_the_fact():
    resources = [r for r in world() if r.name not in ("dp:nvidia/plugin", "dp")]
    resources.append(res("kubernetes:karpenter.sh/v1:NodePool", "gpu2-pool", {**nodepool(name="gpu2")}))
    found = rule.device_plugin_findings(resources, FACTS, partial())
    assert violations(found) == []
    assert ends(found) == ["the NVIDIA device plugin is not in this plan: could not check that it runs on NodePool "
                           "'gpu', NodePool 'gpu2', where pod ScaledJob gb/slides needs nvidia.com/gpu allocatable"]
    assert violations(rule.device_plugin_findings(resources, FACTS, partial(devicePlugin=True))) == []
    found = rule.device_plugin_findings(resources, FACTS, partial(devicePlugin=False))
    assert len(found) == 2 and all("and the cluster runs none (policy config devicePlugin: false)" in m
                                   for _u, m in found)


def test_in_a_partial_plan_the_system_node_group_is_said_once_or_judged_by_its_labels():
    resources = [r for r in world() if r.type != NODEGROUP]
    found = rule.controller_findings(resources, FACTS, partial())
    assert violations(found) == [] and ends(found) == [
        "the system node group is not in this plan (aws:eks/nodeGroup:NodeGroup): could not check that Deployment "
        "kube-system/karpenter, Deployment keda/keda-operator can run on it"]
    assert rule.controller_findings(resources, FACTS, partial(systemNodeLabels={"gpuburst.io/pool": "system"})) == []
    found = rule.controller_findings(resources, FACTS, partial(systemNodeLabels={"role": "controllers"}))
    assert len(found) == 2 and all("cannot run on the system node group" in m and "the system nodes (policy config "
                                   "systemNodeLabels {role: 'controllers'})" in m for _u, m in found), found


def test_in_a_partial_plan_a_pod_for_another_stacks_pool_is_an_outside():
    from components.verify.gpujob import build_gpu_job

    elsewhere = build_gpu_job("probe", "gb", "img", nodepool="other", deadline_s=600)
    resources = world() + [res("kubernetes:batch/v1:Job", "probe", elsewhere)]
    found = rule.schedulable_findings(resources, FACTS, partial())
    assert violations(found) == [] and ends(found) == [
        "pod Job gb/probe (spec.template.spec) selects karpenter.sh/nodepool ['other'], which is not in this plan: "
        "could not check that it matches and fits the pod"]
    no_pools = [r for r in world() if r.type != "kubernetes:karpenter.sh/v1:NodePool"]
    (message,) = ends(rule.schedulable_findings(no_pools, FACTS, partial()))
    assert message.startswith("pod ScaledJob gb/slides (spec.jobTargetRef.template.spec) requests nvidia.com/gpu but "
                              "no NodePool is in this plan")
    wrong = pod()
    wrong["tolerations"] = []
    found = rule.schedulable_findings(world(job_pod=wrong), FACTS, partial())  # the plan's only pool: a mismatch
    assert ends(found) == [] and "matches no NodePool" in found[0][1]


def test_in_a_partial_plan_another_stacks_node_class_gives_its_root_volume_or_is_said():
    resources = [r for r in world() if r.name != "gpu-class"]
    found = rule.schedulable_findings(resources, FACTS, partial())
    assert violations(found) == [] and ends(found) == [
        "NodePool 'gpu' boots EC2NodeClass 'gpu' (spec.template.spec.nodeClassRef.name), which is not in this plan: "
        "could not check that its root volume holds the ephemeral storage of pod ScaledJob gb/slides 52Gi"]
    assert rule.schedulable_findings(resources, FACTS, partial(nodeClassRootVolumeGiB={"gpu": 100})) == []
    (_u, message), = rule.schedulable_findings(resources, FACTS, partial(nodeClassRootVolumeGiB={"gpu": 20}))
    assert "requests 52Gi ephemeral-storage" in message and "17Gi ephemeral-storage" in message
    assert rule.schedulable_findings(resources, FACTS)[0][1].startswith("Pending forever")  # whole: 20 GiB assumed
