"""Tests for `worker-image-gpu-support`: the worker image's torch build against the GPUs a NodePool may launch and the
AMI's driver."""
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


def test_a_pinned_alias_has_no_recorded_driver():
    (_u, message), = rule.hardware_findings(world(alias="al2023@v20250101"), FACTS, TORCH, "580")
    assert "'al2023@v20250101'" in message and "does not record" in message


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
    (_u, message), = rule.hardware_findings(resources, FACTS, TORCH, "580", scope=partial("al2023@v20250101"))
    assert "'al2023@v20250101'" in message and "does not record" in message
