"""Tests for `model-cache-folder`: a pod that mounts the model cache runs only where the node class makes its folder,
judged on the node class of this plan (its user data) or on ExistingNodeClass.model_cache_folder (a workload stack)."""
from __future__ import annotations

import copy

import pulumi_aws as aws
import pytest
from pulumi_policy import EnforcementLevel

from components import catalogue
from components.consumer import GpuConsumer, GpuConsumerArgs
from components.existing import (
    ExistingCluster,
    ExistingClusterArgs,
    ExistingKarpenter,
    ExistingKarpenterArgs,
    ExistingNodeClass,
)
from components.model_cache import (
    ModelCache,
    ModelCacheAdmission,
    ModelCacheArgs,
    cache_folder_script,
    model_cache_manifests,
)
from components.nodeclass import ec2_nodeclass_manifest
from components.nodepool import GpuNodePool, GpuNodePoolArgs
from components.spec.names import MODEL_CACHE_HOST_PATH, model_cache_folder_commands
from components.spec.worker_pod import ModelMount, WorkerPodSettings
from components.spec.workload import WorkloadFacts
from components.synth.mocks import run_under_mocks
from components.synth.synth import plan_document
from policies import boundary, pack
from policies import model_cache as rule
from policies.facts import scope_of
from policies.outside import Outside, violations
from tests.policies import fragments as F

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/tils-worker@sha256:" + "ab" * 32
T_PV = "kubernetes:core/v1:PersistentVolume"
T_NODECLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
U = F.harness.UNKNOWN_STRING


# -- a workload stack declared with the components, as the user trial did ---------------------------------------------

def workload_stack(model_cache_folder: bool | None, cache: bool = True, *, node_class: bool | None = None,
                   workloads: tuple[str, ...] = ("studies",), admission: bool = False, capacity_gib: int = 20) -> dict:
    """ExistingCluster (node class 'gpu' with the fact; `node_class` False: no ExistingNodeClass, default: one unless
    `model_cache_folder` is None), a NodePool booting it, a ModelCache and a GpuConsumer per name in `workloads`
    whose ModelMount mounts it; `admission`: the stack declares ModelCacheAdmission itself."""
    declared = model_cache_folder is not None if node_class is None else node_class

    def program():
        classes = {"gpu": ExistingNodeClass(root_volume_gib=100, model_cache_folder=model_cache_folder)} \
            if declared else {}
        cluster = ExistingCluster("platform", ExistingClusterArgs(cluster_name="platform", node_classes=classes))
        karpenter = ExistingKarpenter("karpenter", ExistingKarpenterArgs(version=catalogue.KARPENTER_VERSION))
        pool = GpuNodePool("lab", GpuNodePoolArgs(nodeclass_name="gpu", nodepool_name="tils-lab", gpu_limit=4,
                                                  instance_types=["g5.xlarge", "g5.2xlarge"], karpenter=karpenter))
        claim = ModelCache("lab-cache", ModelCacheArgs(namespace="lab", volume_name="lab-model-cache",
                                                       capacity_gib=capacity_gib)).claim_name if cache else None
        if admission:
            ModelCacheAdmission("cache-admission")
        for name in workloads:
            queue = aws.sqs.Queue(f"{name}-queue", name=f"lab-{name}", visibility_timeout_seconds=600)
            GpuConsumer(name, GpuConsumerArgs(
                cluster_name=cluster.cluster_name, namespace="lab", queue_url=queue.url, queue_arn=queue.arn,
                bucket_arn="arn:aws:s3:::lab-results", egress_cidrs=["10.64.0.0/16"], nodepool=pool,
                facts=WorkloadFacts(items_independent=False, state_across_messages=True, ordered=True,
                                    model_load_s=10, seconds_per_item=6, burst_items=40, max_replicas=1),
                pod=WorkerPodSettings(image=IMAGE, model=ModelMount(
                    uri=f"s3://lab-models/{name}/v1.pt2", sha256="cd" * 32, cache_claim=claim,
                    cache_sub_path=f"lab-{name}" if cache else None))))

    return plan_document("lab", run_under_mocks(program, project="tils-lab", stack="lab"))


def findings(plan: dict) -> list:
    resources = F.as_res(plan)
    return rule.cache_folder_findings(resources, scope_of(resources))


def test_a_node_class_of_another_stack_not_said_to_make_the_folder_is_refused_in_one_line():
    found = findings(workload_stack(model_cache_folder=False))
    (message,) = [m for _urn, m in violations(found)]
    assert "\n" not in message
    assert "Deployment lab/studies" in message and "NodePool 'tils-lab'" in message
    assert "model_cache_folder = False" in message and "ExistingCluster 'platform' nodeClasses['gpu']" in message
    assert MODEL_CACHE_HOST_PATH in message and "ContainerCreating" in message
    assert "ask the platform team" in message and "ExistingNodeClass(model_cache_folder=True)" in message


def test_a_node_class_said_to_make_the_folder_passes():
    assert findings(workload_stack(model_cache_folder=True)) == []


@pytest.mark.parametrize(("node_class", "said"), [
    (False, "no ExistingNodeClass 'gpu' describes it"),
    (True, "ExistingNodeClass 'gpu' model_cache_folder is None: not known"),  # the default: not registered as False
])
def test_a_node_class_no_fact_describes_is_said_once_outside_this_stack(node_class, said):
    plan = workload_stack(model_cache_folder=None, node_class=node_class, workloads=("studies", "slides"))
    found = findings(plan)
    assert len(found) == 2 and all(isinstance(end, Outside) and end.keys == (rule.FACT,) for end in found)
    assert "EC2NodeClass 'gpu'" in found[0].message and "is not in this plan" in found[0].message
    assert said in found[0].message and violations(found) == []
    lines = [m for _urn, m in boundary.boundary_findings(F.as_res(plan)) if "makes the model cache folder" in m]
    assert len(lines) == 1, lines  # two pods on the node class: one line
    assert rule.NAME in lines[0] and "nodeClasses[name].modelCacheFolder" in lines[0] and said in lines[0]


def test_a_pod_without_the_cache_is_not_judged():
    assert findings(workload_stack(model_cache_folder=False, cache=False)) == []


# -- the node class in this plan: its user data ---------------------------------------------------------------------

def platform_like(boot_scripts: list[str], claim: str = "gpuburst-model-cache") -> dict:
    """A NodePool and its EC2NodeClass (user data from `boot_scripts`), the cache's PersistentVolume, and a ScaledJob
    mounting `claim`."""
    nc = ec2_nodeclass_manifest("gpu", node_role="node-role", cluster_name="dev", boot_scripts=boot_scripts)
    pv, _pvc = model_cache_manifests(namespace="gpu", volume_name="gpu-model-cache", capacity_gib=20, claim_name=claim)
    job = F.scaled_job()
    job["spec"]["jobTargetRef"]["template"]["spec"]["volumes"] = [
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": claim}}]
    return F.doc(F.entry(F.T_NODEPOOL, "gpu-nodepool", F.gpu_nodepool()), F.entry(T_NODECLASS, "gpu-nodeclass", nc),
                 F.entry(T_PV, "cache-volume", pv), F.entry(F.T_SCALEDJOB, "slides", job))


def test_the_folder_script_in_the_node_class_user_data_passes():
    assert findings(platform_like([cache_folder_script()])) == []


@pytest.mark.parametrize("scripts", [[], ["#!/bin/bash\necho other\n"]])
def test_a_node_class_of_this_plan_without_the_folder_script_is_refused(scripts):
    (finding,) = findings(platform_like(scripts))
    assert not isinstance(finding, Outside)
    urn, message = finding
    assert urn == F.urn(F.T_SCALEDJOB, "slides")
    assert "ScaledJob gpu/slides" in message and "EC2NodeClass 'gpu' spec.userData has no line" in message
    assert all(repr(c) in message for c in model_cache_folder_commands())
    assert "add cache_folder_script()'s text/x-shellscript part to spec.userData" in message  # a manifest's fix


def test_the_fix_is_said_for_the_stack_that_declared_the_node_class():
    plan = platform_like([])
    nc = next(r for r in plan["resources"] if r["type"] == T_NODECLASS)
    chain = f"gpuburst:index:Ec2NodeClass${T_NODECLASS}"
    nc["urn"] = f"urn:pulumi:dev::gpuburst::{chain}::gpu-nodeclass"
    (finding,) = findings(plan)
    assert "pass Ec2NodeClassArgs(boot_scripts=[cache_folder_script()])" in finding[1]
    nc["urn"] = f"urn:pulumi:dev::gpuburst::gpuburst:index:GpuBurstPlatform${chain}::gpu-nodeclass"
    (finding,) = findings(plan)
    assert "gpuburst:workloads.<name>.model" in finding[1] and "Ec2NodeClassArgs" not in finding[1]


def test_one_missing_line_is_named():
    script = cache_folder_script().replace(f"chmod 2770 {MODEL_CACHE_HOST_PATH}\n", "")
    (finding,) = findings(platform_like([script]))
    assert f"has no line 'chmod 2770 {MODEL_CACHE_HOST_PATH}'" in finding[1] and "mkdir" not in finding[1]


def test_a_claim_bound_to_the_folder_under_another_name_is_the_cache_too():
    (finding,) = findings(platform_like([], claim="lab-cache"))
    assert "spec.userData" in finding[1]
    plan = platform_like([], claim="lab-cache")
    no_pv = F.doc(*[r for r in plan["resources"] if r["type"] != T_PV])
    assert findings(no_pv) == []  # a claim of another name, bound to no cache folder of this plan: not the cache


def test_a_pod_that_lands_on_no_pool_of_the_node_class_is_not_judged_by_it():
    plan = platform_like([])
    job = next(r for r in plan["resources"] if r["type"] == F.T_SCALEDJOB)
    job["properties"]["spec"]["jobTargetRef"]["template"]["spec"]["tolerations"] = []  # the GPU taint keeps it off
    # A whole plan: the pod's Pending state is gpu-pod-schedulable's; this rule has no node class to judge.
    resources = F.as_res(F.doc(*plan["resources"], F.entry(F.T_PLATFORM, "gpuburst", {})))
    assert rule.cache_folder_findings(resources, scope_of(resources)) == []


def test_unknown_inputs_are_named_not_passed():
    plan = platform_like([])
    nc = next(r for r in plan["resources"] if r["type"] == T_NODECLASS)
    nc["properties"]["spec"]["userData"] = U
    (finding,) = findings(F.doc(*plan["resources"]))
    assert "spec.userData is unknown during preview" in finding[1]
    worker = copy.deepcopy(F.scaled_job())
    worker["spec"]["jobTargetRef"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] = "gpuburst-worker"
    worker["spec"]["jobTargetRef"]["template"]["spec"]["volumes"] = [
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": U}}]
    (finding,) = findings(F.doc(F.entry(F.T_SCALEDJOB, "slides", worker)))
    assert "claimName is unknown during preview" in finding[1] and "mounts the model cache" in finding[1]


# -- in the pack ------------------------------------------------------------------------------------------------------

def test_it_is_mandatory_in_the_pack_and_reads_the_fact_from_the_reference():
    levels = {p.name: p.enforcement_level for p in pack.all_policies()}
    assert levels[rule.NAME] == EnforcementLevel.MANDATORY
    assert rule in boundary.SOURCES


def test_over_grpc_the_refused_workload_stack_fails(analyze):
    report = analyze(workload_stack(model_cache_folder=False))
    (found,) = report.by_policy(rule.NAME)
    assert found.level == "MANDATORY" and "model_cache_folder = False" in found.message
    assert analyze(workload_stack(model_cache_folder=True)).by_policy(rule.NAME) == []


def test_the_caches_declared_capacity_is_informational_no_rule_reads_it(analyze):
    """ModelCacheArgs.capacity_gib says so: the pack says the same of a 1 GiB and a 1000 GiB cache."""
    small, large = (workload_stack(model_cache_folder=True, capacity_gib=gib) for gib in (1, 1000))
    capacity = [next(r for r in p["resources"] if r["type"] == T_PV)["properties"]["spec"]["capacity"]
                for p in (small, large)]
    assert capacity == [{"storage": "1Gi"}, {"storage": "1000Gi"}]
    said = [sorted(d.line() for d in analyze(p).diagnostics) for p in (small, large)]
    assert said[0] and said[0] == said[1]


# -- model-cache-isolation: each namespace in its own folder of the cache ----------------------------------------------

T_VAP = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
T_VAP_BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"


def isolation(plan: dict) -> list:
    """The rule's violations, the plan judged as the pack judges it (whole when it declares a GpuBurstPlatform)."""
    res = F.as_res(plan)
    return violations(rule.isolation_findings(res, scope_of(res)))


def mounting(sub_path: dict | None, *, field: str = "containers", volume: str = "model-cache") -> dict:
    """A ScaledJob in namespace `gpu` whose pod has a volume claiming the cache and a `field` container mounting it
    with `sub_path` (the mount's subPath/subPathExpr keys)."""
    job = copy.deepcopy(F.scaled_job())
    pod = job["spec"]["jobTargetRef"]["template"]["spec"]
    pod["volumes"] = [{"name": volume, "persistentVolumeClaim": {"claimName": rule.CLAIM}}]
    mount = {"name": volume, "mountPath": "/model-cache", **(sub_path or {})}
    if field == "containers":
        pod["containers"][0]["volumeMounts"] = [mount]
    else:
        pod[field] = [{"name": "other", "image": IMAGE, "volumeMounts": [mount]}]
    return F.doc(F.entry(F.T_SCALEDJOB, "slides", job))


def test_a_cache_mount_under_its_own_namespace_passes_and_the_components_build_one():
    assert isolation(mounting({"subPath": "gpu/slides"})) == []
    assert isolation(workload_stack(model_cache_folder=True)) == []  # GpuConsumer in 'lab': 'lab/lab-studies'


@pytest.mark.parametrize(("mount", "said"), [
    ({"subPath": "other-team/slides"}, "subPath 'other-team/slides', not a folder under 'gpu/'"),
    ({"subPath": "slides"}, "subPath 'slides', not a folder under 'gpu/'"),
    ({}, "no subPath (the whole cache"),
    ({"subPathExpr": "$(NS)/slides"}, "subPathExpr '$(NS)/slides'"),
])
def test_a_cache_mount_outside_its_namespace_is_refused_before_the_cluster_would(mount, said):
    (finding,) = isolation(mounting(mount))
    urn, message = finding
    assert urn == F.urn(F.T_SCALEDJOB, "slides") and "\n" not in message
    assert "ScaledJob gpu/slides" in message and said in message and "'gpuburst-model-cache-sub-path'" in message


@pytest.mark.parametrize("field", ["initContainers", "ephemeralContainers"])
def test_init_and_ephemeral_containers_are_judged_too(field):
    (finding,) = isolation(mounting({"subPath": "x/y"}, field=field))
    assert f"{field}[0].volumeMounts[0]" in finding[1]


def test_a_volume_of_another_name_on_the_cache_claim_is_the_cache():
    (finding,) = isolation(mounting({}, volume="everything"))
    assert "no subPath" in finding[1]


def test_unknown_sub_paths_are_named_not_passed():
    (finding,) = isolation(mounting({"subPath": U}))
    assert "is unknown during preview" in finding[1] and "which folder of the model cache" in finding[1]


def platform_plan(*extra: dict) -> dict:
    return F.doc(F.entry(F.T_PLATFORM, "gpuburst", {}), *extra)


def admission_entries(policy: dict | None = None, binding: dict | None = None) -> list[dict]:
    from components.spec import model_cache_admission as mca

    return [F.entry(T_VAP, "cache-admission-policy", policy or mca.admission_policy_manifest()),
            F.entry(T_VAP_BINDING, "cache-admission-binding", binding or mca.admission_binding_manifest())]


def test_a_platform_plan_holds_the_admission_rule_unchanged():
    from components.spec import model_cache_admission as mca

    assert isolation(platform_plan(*admission_entries())) == []
    assert isolation(F.doc(*admission_entries()[:1])) == []  # a workload stack need not declare it
    missing = isolation(platform_plan())
    assert len(missing) == 2 and all(mca.ADMISSION_NAME in m and "ModelCacheAdmission" in m for _u, m in missing)
    weaker = mca.admission_policy_manifest()
    weaker["spec"]["failurePolicy"] = "Ignore"
    (changed,) = isolation(platform_plan(*admission_entries(policy=weaker)))
    assert changed[0] == F.urn(T_VAP, "cache-admission-policy") and "differs" in changed[1]
    assert "failurePolicy" in changed[1] and "'Ignore'" in changed[1]
    audit = mca.admission_binding_manifest()
    audit["spec"]["validationActions"] = ["Audit"]
    (changed,) = isolation(platform_plan(*admission_entries(binding=audit)))
    assert "validationActions" in changed[1]
    unknown = mca.admission_policy_manifest()
    unknown["spec"]["validations"][0]["expression"] = U
    (found,) = isolation(platform_plan(*admission_entries(policy=unknown)))
    assert "is unknown during preview" in found[1]


ADMISSION_OUTSIDE = "the cluster's admission rule for the model cache is not in this plan"


def partial_isolation(plan: dict) -> list:
    res = F.as_res(plan)
    return rule.isolation_findings(res, scope_of(res))


def test_a_workload_stack_mounting_the_cache_says_once_that_the_clusters_admission_rule_was_not_checked():
    plan = workload_stack(model_cache_folder=True, workloads=("studies", "slides"))
    (end,) = partial_isolation(plan)
    assert isinstance(end, Outside) and end.keys == () and end.urn is not None
    assert end.message.startswith(ADMISSION_OUTSIDE) and "\n" not in end.message
    assert ("(no ValidatingAdmissionPolicy nor ValidatingAdmissionPolicyBinding 'gpuburst-model-cache-sub-path')"
            in end.message)
    assert "in their own folder of the cache, which Deployment lab/slides, Deployment lab/studies mount here" \
        in end.message
    assert "the platform declares it" in end.message and "must declare ModelCacheAdmission" in end.message
    (line,) = [m for _u, m in boundary.boundary_findings(F.as_res(plan)) if ADMISSION_OUTSIDE in m]
    assert line.endswith("(not checked by model-cache-isolation: the plan declares no gpuburst:index:GpuBurstPlatform)")
    assert isolation(plan) == []  # not a violation: the cluster's rule is not this stack's
    whole = rule.isolation_findings(F.as_res(plan), scope_of(F.as_res(plan), {"wholePlatform": True}))
    assert len(whole) == 2 and all("judged as the whole platform but declares no" in m for _u, m in whole)


def test_a_workload_stack_that_declares_half_the_rule_is_told_which_half_is_not_there():
    plan = workload_stack(model_cache_folder=True)
    (end,) = partial_isolation(F.doc(*plan["resources"], *admission_entries()[:1]))
    assert "(no ValidatingAdmissionPolicyBinding 'gpuburst-model-cache-sub-path')" in end.message


@pytest.mark.parametrize("plan", [
    pytest.param(lambda: workload_stack(model_cache_folder=True, cache=False), id="no-cache-mount"),
    pytest.param(lambda: workload_stack(model_cache_folder=True, admission=True), id="declares-ModelCacheAdmission"),
])
def test_no_admission_line_without_a_cache_mount_or_where_the_stack_declares_the_rule(plan):
    built = plan()
    assert partial_isolation(built) == []
    assert not [m for _u, m in boundary.boundary_findings(F.as_res(built)) if ADMISSION_OUTSIDE in m]


def test_the_dev_plan_passes_isolation(dev_plan):
    assert isolation(dev_plan) == []


def test_isolation_is_mandatory_in_the_pack_and_fails_over_grpc(analyze):
    levels = {p.name: p.enforcement_level for p in pack.all_policies()}
    assert levels[rule.ISOLATION] == EnforcementLevel.MANDATORY
    (found,) = analyze(mounting({"subPath": "other-team/slides"})).by_policy(rule.ISOLATION)
    assert found.level == "MANDATORY" and "other-team/slides" in found.message
    report = analyze(workload_stack(model_cache_folder=True))
    assert report.by_policy(rule.ISOLATION) == []  # not a violation of the rule: the advisory below
    (line,) = [d for d in report.by_policy(boundary.NAME) if ADMISSION_OUTSIDE in d.message]
    assert line.level == "ADVISORY"
