"""Tests for `worker-image-gpu-support`: the worker image's torch build (or a lab image's declared CUDA) against the
GPUs a NodePool may launch and the AMI's driver; and `worker-image-unchecked`, a lab image that declares nothing."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from components import catalogue
from components.catalogue import InstanceType
from policies import hardware as rule
from policies.plan import Res

ROOT = Path(__file__).resolve().parents[2]
TORCH = {"torch": "2.13.0", "cuda": "13.0", "min_compute_capability": (7, 5), "min_driver": "580",
         "sources": "pytorch/pytorch #172352"}


def it(name: str, gpu: str, cc: tuple[int, int]) -> InstanceType:
    return InstanceType(name=name, family=name.split(".")[0], vcpu=8, memory_mib=32768, gpus=1, gpu_name=gpu,
                        gpu_memory_mib=16384, compute_capability=cc, local_nvme_gb=0, allocatable_cpu_m=7910,
                        allocatable_memory_mib=29317, allocatable_ephemeral_gib=17.0, allocatable_pods=29,
                        on_demand_usd_per_hour=1.0)


FACTS = {t.name: t for t in (it("g4dn.2xlarge", "t4", (7, 5)), it("g5.2xlarge", "a10g", (8, 6)),
                             it("g6.2xlarge", "l4", (8, 9)), it("g6e.2xlarge", "l40s", (8, 9)),
                             it("p3.2xlarge", "v100", (7, 0)))}


def res(rtype: str, name: str, props: dict) -> Res:
    return Res(rtype, f"urn:pulumi:dev::gpuburst::{rtype}::{name}", name, None, props)


def world(types=("g4dn.2xlarge", "g5.2xlarge", "g6.2xlarge", "g6e.2xlarge"), alias="al2023@latest",
          dockerfile="worker/Dockerfile") -> list[Res]:
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"}, "spec": {"template": {
        "metadata": {"labels": {"nvidia.com/gpu.present": "true"}},
        "spec": {"nodeClassRef": {"name": "gpu"}, "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
                 "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                   "values": list(types)}]}}, "limits": {"nvidia.com/gpu": 4}}}
    nodeclass = {"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "gpu"},
                 "spec": {"amiSelectorTerms": [{"alias": alias}]}}
    return [res("docker-build:index:Image", "worker-image", {"dockerfile": {"location": dockerfile},
                                                             "context": {"location": "."}}),
            res("kubernetes:karpenter.sh/v1:NodePool", "gpu-pool", pool),
            res("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass", "gpu-class", nodeclass)]


def test_t4_a10g_l4_l40s_pass():
    assert rule.hardware_findings(world(), FACTS, TORCH, "580") == []


def test_v100_is_refused_with_the_reason_and_sources():
    (urn, message), = rule.hardware_findings(world(("g5.2xlarge", "p3.2xlarge")), FACTS, TORCH, "580")
    assert urn.endswith("NodePool::gpu-pool")
    assert message.startswith("worker image worker-image (torch 2.13.0, CUDA 13.0) cannot run on p3.2xlarge (v100, "
                              "sm_70) admitted by NodePool 'gpu': that build needs compute capability >= 7.5 (sm_75)")
    assert "pytorch/pytorch #172352" in message


def test_an_old_driver_is_refused():
    (_u, message), = rule.hardware_findings(world(), FACTS, TORCH, "570")
    assert "needs NVIDIA driver >= 580 but EC2NodeClass 'gpu' (al2023@latest) of NodePool 'gpu' boots driver 570" \
        in message


def test_a_pinned_alias_without_a_recorded_driver_is_unchecked_naming_the_fact_that_would_check_it():
    (found,) = rule.hardware_findings(world(alias="al2023@v20250101"), FACTS, TORCH, "580", drivers={})
    assert isinstance(found, rule.Unchecked) and found.urn.endswith("NodePool::gpu-pool")
    assert "'al2023@v20250101'" in found.message and "does not record" in found.message
    assert "AL2023_NVIDIA_DRIVERS_BY_RELEASE (components/catalogue/instances.py)" in found.message
    assert "'v20250101': '<branch>'" in found.message and "driver >= 580" in found.message
    # The mandatory rule does not report it; the advisory does, once.
    resources = world(alias="al2023@v20250101")
    assert [f for f in rule.hardware_findings(resources, FACTS, TORCH, "580", drivers={})
            if not isinstance(f, rule.Unchecked)] == []


def test_a_pinned_release_with_a_recorded_driver_is_judged_and_a_known_bad_one_stays_a_violation():
    assert rule.hardware_findings(world(alias="al2023@v20250101"), FACTS, TORCH, "580",
                                  drivers={"v20250101": "580"}) == []
    (found,) = rule.hardware_findings(world(alias="al2023@v20250101"), FACTS, TORCH, "580",
                                      drivers={"v20250101": "570"})
    assert isinstance(found, tuple), found  # a violation, not an Unchecked
    assert "needs NVIDIA driver >= 580 but EC2NodeClass 'gpu' (al2023@v20250101) of NodePool 'gpu' boots driver 570" \
        in found[1]
    # The latest alias keeps its own driver, whatever the table says.
    (found,) = rule.hardware_findings(world(), FACTS, TORCH, "570", drivers={"v20250101": "580"})
    assert isinstance(found, tuple) and "boots driver 570" in found[1]


def test_the_catalogue_release_table_is_well_formed():
    table = catalogue.AL2023_NVIDIA_DRIVERS_BY_RELEASE
    assert isinstance(table, dict)
    assert all(re.fullmatch(r"v\d{8}", k) and re.fullmatch(r"\d{3}", v) for k, v in table.items()), table


@pytest.mark.parametrize("alias,mandatory,advisory", [("al2023@latest", 0, 0), ("al2023@v20200101", 0, 1)])
def test_a_pinned_release_is_advisory_over_grpc(analyze, alias, mandatory, advisory):
    doc = {"stack": "dev", "resources": [{"type": r.type, "name": r.name, "urn": r.urn, "properties": r.props}
                                         for r in world(("g5.2xlarge", "g6.2xlarge"), alias=alias)]}
    report = analyze(doc)
    assert len(report.by_policy(rule.NAME)) == mandatory
    found = report.by_policy(rule.DRIVER_UNCHECKED_NAME)
    assert len(found) == advisory and all(d.level == "ADVISORY" for d in found)
    if advisory:
        assert "AL2023_NVIDIA_DRIVERS_BY_RELEASE" in found[0].message


def test_a_type_without_facts_is_refused_naming_the_catalogue_reason():
    (_u, message), = rule.hardware_findings(world(("g5.2xlarge", "p3.8xlarge")), FACTS, TORCH, "580")
    assert "admits p3.8xlarge" in message
    if "p3" in getattr(catalogue, "EXCLUDED_INSTANCE_FAMILIES", {}):
        assert catalogue.EXCLUDED_INSTANCE_FAMILIES["p3"] in message


def test_no_worker_image_no_finding_and_other_images_are_not_the_worker():
    assert rule.hardware_findings(world(("p3.2xlarge", "g5.2xlarge"))[1:], FACTS, TORCH, "580") == []
    assert rule.hardware_findings(world(("p3.2xlarge", "g5.2xlarge"), dockerfile="tools/Dockerfile"), FACTS, TORCH,
                                  "580") == []


def test_the_worker_image_built_from_an_installed_recipe_is_judged_too():
    installed = "/opt/venv/lib/python3.11/site-packages/gpuburst/recipe/worker/Dockerfile"
    assert rule.hardware_findings(world(("p3.2xlarge", "g5.2xlarge"), dockerfile=installed), FACTS, TORCH, "580")
    assert rule.hardware_findings(world(("p3.2xlarge", "g5.2xlarge"), dockerfile="/x/notworker/Dockerfile"),
                                  FACTS, TORCH, "580") == []


def test_the_catalogue_facts_pass_for_every_family_but_v100():
    families = {t.gpu_name: t.name for t in catalogue.INSTANCE_TYPES.values()}
    for gpu, name in families.items():
        found = rule.hardware_findings(world((name, name)))
        expected_fail = tuple(catalogue.COMPUTE_CAPABILITY[gpu]) < tuple(
            catalogue.TORCH_CUDA["min_compute_capability"])
        assert bool(found) == expected_fail, (gpu, found)
    assert tuple(catalogue.COMPUTE_CAPABILITY["v100"]) < tuple(catalogue.TORCH_CUDA["min_compute_capability"])


def test_the_catalogue_torch_is_the_one_the_worker_pins():
    text = (ROOT / catalogue.WORKER_PYTHON_REQUIREMENTS).read_text(encoding="utf-8")
    pins = re.findall(r"^torch==(\S+)", text, re.MULTILINE)
    assert pins == [catalogue.TORCH_CUDA["torch"]]


def test_unknown_ami_terms_are_a_violation(run_stack, samples):
    resources = world()
    resources[2] = resources[2]._replace(props={**resources[2].props, "spec": {"amiSelectorTerms": samples.U}})
    found = run_stack(rule.POLICY, [(r.type, r.name, r.props) for r in resources])
    assert len(found) == 1 and "amiSelectorTerms is unknown during preview" in found[0][1]


@pytest.mark.parametrize("types,expected", [(("g5.2xlarge", "g6.2xlarge"), 0), (("g5.2xlarge", "p3dn.24xlarge"), 1)])
def test_over_grpc(analyze, types, expected):
    doc = {"stack": "dev", "resources": [{"type": r.type, "name": r.name, "urn": r.urn, "properties": r.props}
                                         for r in world(types)]}
    found = analyze(doc).by_policy(rule.NAME)
    assert len(found) == expected and all(d.level == "MANDATORY" for d in found)
    if expected:
        assert "p3dn.24xlarge (v100, sm_70)" in found[0].message


def test_in_a_partial_plan_another_stacks_node_class_is_judged_by_its_alias_or_said():
    from policies.facts import Fact, Scope
    from policies.outside import Outside

    def partial(alias=None):
        table = {"gpu": Fact(alias, "ExistingCluster 'c' nodeClasses['gpu'].amiAlias")} if alias else {}
        return Scope(False, "partial", {"nodeClassAmiAlias": Fact(table, "ExistingCluster 'c' nodeClasses")})

    resources = world()[:2]  # no EC2NodeClass in the plan
    assert rule.hardware_findings(resources, FACTS, TORCH, "580") == []  # whole: not judged, as before
    (end,) = rule.hardware_findings(resources, FACTS, TORCH, "580", scope=partial())
    assert isinstance(end, Outside) and end.keys == ("nodeClassAmiAlias",)
    assert end.message == "NodePool 'gpu' boots EC2NodeClass 'gpu' (spec.template.spec.nodeClassRef.name), which is " \
                          "not in this plan: could not check which NVIDIA driver its AMI gives worker image " \
                          "worker-image (torch 2.13.0, CUDA 13.0)"
    assert rule.hardware_findings(resources, FACTS, TORCH, "580", scope=partial("al2023@latest")) == []
    (_u, message), = rule.hardware_findings(resources, FACTS, TORCH, "570", scope=partial("al2023@latest"))
    assert "but EC2NodeClass 'gpu' (ExistingCluster 'c' nodeClasses['gpu'].amiAlias) (al2023@latest) of NodePool " \
           "'gpu' boots driver 570" in message
    (found,) = rule.hardware_findings(resources, FACTS, TORCH, "580", scope=partial("al2023@v20250101"), drivers={})
    assert isinstance(found, rule.Unchecked) and "'al2023@v20250101'" in found.message
    assert "does not record" in found.message


# -- a lab's own image: its declared CUDA, or an advisory that it could not be checked --------------------------------

LAB = "123456789012.dkr.ecr.us-east-1.amazonaws.com/tils-lab-worker@sha256:" + "ef" * 32


def worker_job(image: str = LAB, cuda: str | None = None, label: str = "gpuburst-worker") -> Res:
    template = {"metadata": {"labels": {"app.kubernetes.io/name": label},
                             "annotations": {"gpuburst.io/worker-image-cuda": cuda} if cuda else {}},
                "spec": {"containers": [{"name": "worker", "image": image}]}}
    return res("kubernetes:keda.sh/v1alpha1:ScaledJob", "slides-scaledjob",
               {"metadata": {"name": "slides", "namespace": "gpuburst"}, "spec": {"jobTargetRef": {
                   "template": template}}})


def lab_world(types, cuda, image=LAB):
    return [worker_job(image, cuda), *world(types)[1:]]  # no image build: the lab's prebuilt image


def test_a_declared_cuda_is_judged_by_its_majors_floors():
    types = ("p3.2xlarge", "g5.2xlarge")
    assert rule.hardware_findings(lab_world(types, "12.8"), FACTS, TORCH, "580") == []  # CUDA 12: sm_50 and newer
    ((urn, message),) = rule.hardware_findings(lab_world(types, "13.0"), FACTS, TORCH, "580")
    assert urn.endswith("NodePool::gpu-pool")
    assert message.startswith(f"worker image {LAB!r} (CUDA 13.0, declared by gpuburst.io/worker-image-cuda) cannot "
                              "run on p3.2xlarge (v100, sm_70)")
    assert catalogue.CUDA_RUNTIME_FLOORS_SOURCE in message


def test_a_declared_cuda_needs_its_majors_driver():
    assert rule.hardware_findings(lab_world(("g5.2xlarge", "g6.2xlarge"), "12.8"), FACTS, TORCH, "570") == []
    ((_, message),) = rule.hardware_findings(lab_world(("g5.2xlarge", "g6.2xlarge"), "13.0"), FACTS, TORCH, "570")
    assert "(CUDA 13.0, declared by gpuburst.io/worker-image-cuda) needs NVIDIA driver >= 580" in message


def test_a_declared_cuda_the_catalogue_does_not_know_is_a_violation_on_the_pod():
    ((urn, message),) = rule.hardware_findings(lab_world(("g5.2xlarge", "g6.2xlarge"), "11.8"), FACTS, TORCH, "580")
    assert urn.endswith("ScaledJob::slides-scaledjob")
    assert "annotations['gpuburst.io/worker-image-cuda'] = '11.8': not a CUDA version" in message


def test_a_prebuilt_image_that_declares_nothing_is_named_once_as_not_checked():
    resources = [worker_job(), res("kubernetes:apps/v1:Deployment", "studies-deployment", {
        "metadata": {"name": "studies", "namespace": "gpuburst"},
        "spec": {"template": worker_job().props["spec"]["jobTargetRef"]["template"]}}), *world()[1:]]
    ((urn, message),) = rule.unchecked_findings(resources)
    assert urn.endswith("ScaledJob::slides-scaledjob")
    assert message.startswith(f"worker image {LAB!r} (ScaledJob gpuburst/slides, Deployment gpuburst/studies) is not "
                              "built in this plan and declares no CUDA")
    # A hand-written manifest's fix is its own annotation (tests/policies/test_fixes.py: the platform's and a
    # component stack's fixes).
    assert "the pod template annotation gpuburst.io/worker-image-cuda" in message
    assert rule.hardware_findings(resources, FACTS, TORCH, "580") == []  # nothing it could judge


def test_a_built_declared_or_non_worker_image_is_not_named():
    built = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-worker-image-repo"
    build = res("docker-build:index:Image", "worker-image", {"dockerfile": {"location": "worker/Dockerfile"},
                                                             "tags": [f"{built}:src-0123456789abcdef"]})
    assert rule.unchecked_findings([build, worker_job(f"{built}@sha256:{'1' * 64}")]) == []
    assert rule.unchecked_findings([worker_job(cuda="12.8")]) == []
    assert rule.unchecked_findings([worker_job(label="someone-else")]) == []


def test_the_unchecked_rule_is_advisory_over_grpc(analyze):
    plan = {"resources": [{"type": r.type, "name": r.name, "properties": r.props} for r in
                          [worker_job(), *world()[1:]]]}
    found = analyze(plan).by_policy(rule.UNCHECKED_NAME)
    assert len(found) == 1 and found[0].level == "ADVISORY" and LAB in found[0].message
