"""ami-canary: the image status.amis resolves for the GPU NodePool's instance types, judged with no GPU node."""
from __future__ import annotations

import copy

import boto3
from verify_fakes import FakeClock, FakeKube, karpenter_101_swap_cluster, load

from components import catalogue
from components.verify import ami_canary
from components.verify.aws import Aws
from components.verify.context import Context
from components.verify.model import VerifySettings

NEURON_ID, NVIDIA_ID = "ami-0neuron000000000a", "ami-0nvidia000000000b"
NEURON = "amazon-eks-node-al2023-x86_64-neuron-1.34-v20261101"
NVIDIA = "amazon-eks-node-al2023-x86_64-nvidia-1.34-v20261101"


def judge(nodeclass, images=None, nodepool="default"):
    np_ = load("nodepool_gpu.json") if nodepool == "default" else nodepool
    return ami_canary.judge_ami_canary("gpu", np_, "gpu", nodeclass, images or {})


def test_the_karpenter_101_swap_fails_from_status_amis_alone():
    r = judge(load("ec2nodeclass_gpu_swapped.json"))
    assert r.status == "fail"
    # the count and the cause first; the types and the likely cause in the evidence
    assert r.summary == (f"4 of NodePool gpu's 4 GPU type(s) get the al2023 neuron image, not al2023 nvidia: "
                         f"{NEURON_ID} '{NEURON}' (EC2NodeClass gpu status.amis)")
    assert NVIDIA_ID not in r.summary  # the NVIDIA image is mapped to accelerator (Neuron) instances only
    first = r.evidence[0]
    for part in ("g5.xlarge", NEURON_ID, "Karpenter 1.0.0-1.0.2"):
        assert part in first, part


def test_the_healthy_nodeclass_passes_naming_the_nvidia_image():
    r = judge(load("ec2nodeclass_gpu.json"))
    assert r.status == "pass", r.summary
    assert NVIDIA_ID in r.summary and "4 GPU instance type(s)" in r.summary  # the pool's four types
    assert any("g4dn.xlarge" in e and "NVIDIA variant, as needed" in e for e in r.evidence)


def test_ec2s_name_wins_over_the_status_name():
    # status.amis claims the NVIDIA name, but EC2 says the id is the Neuron image
    images = {NVIDIA_ID: {"ImageId": NVIDIA_ID, "Name": NEURON}}
    r = judge(load("ec2nodeclass_gpu.json"), images)
    assert r.status == "fail" and NEURON in r.summary


def test_wrong_family_fails():
    nc = copy.deepcopy(load("ec2nodeclass_gpu.json"))
    nc["spec"]["amiSelectorTerms"] = [{"alias": "bottlerocket@latest"}]
    r = judge(nc)
    assert r.status == "fail" and "get the al2023 nvidia image, not bottlerocket nvidia" in r.summary


def test_a_gpu_type_with_no_image_fails():
    nc = copy.deepcopy(load("ec2nodeclass_gpu.json"))
    nc["status"]["amis"] = [a for a in nc["status"]["amis"] if "nvidia" not in a["name"]]
    r = judge(nc)
    assert r.status == "fail" and r.summary.startswith("4 of NodePool gpu's 4 GPU type(s) have no image in "
                                                       "EC2NodeClass gpu status.amis: g4dn.xlarge")
    assert any(e.startswith("EC2NodeClass gpu status.amis has no image for g4dn.xlarge") for e in r.evidence)


def test_no_status_amis_and_missing_objects_fail():
    nc = copy.deepcopy(load("ec2nodeclass_gpu.json"))
    nc["status"].pop("amis")
    assert "no status.amis" in judge(nc).summary
    assert judge(None).status == "fail" and "EC2NodeClass gpu" in judge(None).summary
    assert judge(load("ec2nodeclass_gpu.json"), nodepool=None).summary.startswith("NodePool gpu does not exist")


def test_without_an_instance_type_list_every_admitted_catalogue_type_is_judged():
    np_ = copy.deepcopy(load("nodepool_gpu.json"))
    reqs = np_["spec"]["template"]["spec"]["requirements"]
    np_["spec"]["template"]["spec"]["requirements"] = [r for r in reqs
                                                        if r["key"] != "node.kubernetes.io/instance-type"]
    admitted = ami_canary.gpu_instance_types(np_)
    # generation > 3 keeps p3dn out; capacity-type (not an instance fact) does not narrow anything
    assert len(admitted) == len(catalogue.INSTANCE_TYPES) - 1
    assert "p3dn.24xlarge" not in {t.name for t in admitted}
    assert judge(load("ec2nodeclass_gpu.json"), nodepool=np_).status == "pass"


def test_instance_labels_follow_the_catalogue():
    labels = ami_canary.instance_labels(catalogue.INSTANCE_TYPES["g5.12xlarge"])
    assert labels["karpenter.k8s.aws/instance-gpu-count"] == "4"
    assert labels["karpenter.k8s.aws/instance-generation"] == "5"
    assert labels["karpenter.k8s.aws/instance-category"] == "g"


# --- run(): the fake cluster with no GPU node at all, EC2 on moto ------------------------------------------------

def _register(ec2, name):
    return ec2.register_image(Name=name, Description="EKS-optimized Kubernetes node based on Amazon Linux 2023",
                              Architecture="x86_64", RootDeviceName="/dev/xvda", VirtualizationType="hvm")["ImageId"]


def _nodeclass_with_ids(fixture, ids):
    nc = copy.deepcopy(load(fixture))
    for a in nc["status"]["amis"]:
        a["id"] = ids.get(a["name"], a["id"])
    return nc


def test_run_on_the_swap_with_the_pool_at_zero_fails_in_seconds(aws, clock):
    ec2 = boto3.client("ec2")
    ids = {NEURON: _register(ec2, NEURON), NVIDIA: _register(ec2, NVIDIA)}
    kube = FakeKube(nodes=[], nodepools=[load("nodepool_gpu.json")],
                    nodeclasses=[_nodeclass_with_ids("ec2nodeclass_gpu_swapped.json", ids)])
    ctx = Context(settings=VerifySettings(nodepool="gpu"), kube=kube, clock=clock,
                  aws_factory=lambda region: Aws(region))
    r = ami_canary.run(ctx)
    assert r.status == "fail" and ids[NEURON] in r.summary and NEURON in r.summary
    assert any("EC2 names it" in e for e in r.evidence)
    assert clock.t == 0 and kube.created == []  # no wait, no Job, no node


def test_run_passes_the_healthy_nodeclass(aws, clock):
    ec2 = boto3.client("ec2")
    ids = {NEURON: _register(ec2, NEURON), NVIDIA: _register(ec2, NVIDIA)}
    kube = FakeKube(nodepools=[load("nodepool_gpu.json")],
                    nodeclasses=[_nodeclass_with_ids("ec2nodeclass_gpu.json", ids)])
    r = ami_canary.run(Context(settings=VerifySettings(nodepool="gpu"), kube=kube, clock=clock,
                               aws_factory=lambda region: Aws(region)))
    assert r.status == "pass", r.summary


def test_run_judges_from_status_amis_when_ec2_cannot_be_asked(aws, clock):
    kube = FakeKube(nodepools=[load("nodepool_gpu.json")], nodeclasses=[load("ec2nodeclass_gpu_swapped.json")])
    r = ami_canary.run(Context(settings=VerifySettings(nodepool="gpu"), kube=kube, clock=clock,
                               aws_factory=lambda region: Aws(region)))
    assert r.status == "fail" and NEURON in r.summary
    assert any(e.startswith("ec2:DescribeImages on ") and "judged from the names in status.amis alone" in e
               for e in r.evidence)


def test_the_swap_fixture_fails_first_and_alone_among_the_node_free_checks(clock):
    """On the 1.0.1 swap cluster (every status Ready=True, no GPU node) the canary fails at once, while the node
    checks have nothing to judge yet."""
    from components.verify import checks

    kube = karpenter_101_swap_cluster()
    ctx = Context(settings=VerifySettings(nodepool="gpu", region="us-east-1"), kube=kube, clock=clock,
                  aws_factory=lambda region: _NoEc2())
    results = checks.run_checks(ctx, only=("ami-canary", "gpu-allocatable", "hardware-ami"))
    assert [(r.name, r.status) for r in results] == [("ami-canary", "fail"), ("gpu-allocatable", "skipped"),
                                                     ("hardware-ami", "skipped")]
    assert NEURON_ID in results[0].summary and clock.t == 0
    assert any("UnauthorizedOperation" in e for e in results[0].evidence)


class _NoEc2:
    """An Aws whose DescribeImages is denied (the canary then judges status.amis alone)."""

    def describe_images(self, ids):
        from components.verify.aws import AwsError

        raise AwsError("ec2:DescribeImages", ",".join(ids), "UnauthorizedOperation")


def _empty_terms(fixture="ec2nodeclass_gpu.json"):
    """Issue 28's EC2NodeClass: an empty tags map in its only subnet term, an empty name in its only AMI term."""
    nc = copy.deepcopy(load(fixture))
    nc["spec"]["subnetSelectorTerms"] = [{"tags": {}}]
    nc["spec"]["amiSelectorTerms"] = [{"name": "", "owner": "amazon"}]
    return nc


def test_an_empty_selector_term_fails_naming_the_term_even_when_the_images_are_right():
    from components.spec.selector_terms import empty_selector_terms

    nc = _empty_terms()
    r = judge(nc)
    assert r.status == "fail"
    expected = empty_selector_terms(nc["spec"], base="EC2NodeClass gpu spec")  # config's and the pack's wording
    assert len(expected) == 2
    assert r.summary.startswith('2 empty selector terms, first: EC2NodeClass gpu spec.amiSelectorTerms[0] = '
                                '{name: "", owner: amazon}: an empty name; ')
    assert len(r.summary) <= 200 and "\n" not in r.summary
    for line in expected:
        assert line in r.evidence
    assert any("EC2NodeClass gpu spec.subnetSelectorTerms[0] = {tags: {}}: an empty tags map" in e for e in r.evidence)
    assert any(e.startswith("otherwise: EC2NodeClass gpu resolves 4 GPU instance type(s)") for e in r.evidence)


def test_empty_terms_lead_and_wrong_images_follow():
    nc = _empty_terms("ec2nodeclass_gpu_swapped.json")
    nc["spec"]["amiSelectorTerms"] = [{"alias": "al2023@latest"}]  # only the subnet term is empty
    r = judge(nc)
    assert r.status == "fail"
    assert r.summary.startswith("2 problems, first: EC2NodeClass gpu spec.subnetSelectorTerms[0] = {tags: {}}: ")
    assert any(e.startswith("4 of NodePool gpu's 4 GPU type(s) get the al2023 neuron image") for e in r.evidence)


def test_an_empty_term_alone_does_not_stop_the_gpu_job_but_a_wrong_image_does():
    from components.verify import checks

    for nodeclass, blocked in ((_empty_terms(), False), (_empty_terms("ec2nodeclass_gpu_swapped.json"), True)):
        kube = FakeKube(nodes=[], nodepools=[load("nodepool_gpu.json")], nodeclasses=[nodeclass])
        ctx = Context(settings=VerifySettings(nodepool="gpu", region="us-east-1", worker_image="img", timeout_s=60),
                      kube=kube, clock=FakeClock(), aws_factory=lambda region: _NoEc2())
        results = {r.name: r for r in checks.run_checks(ctx, only=("ami-canary", "gpu-job"))}
        assert results["ami-canary"].status == "fail"
        if blocked:
            assert results["gpu-job"].status == "skipped" and kube.created == []
            assert "4 of NodePool gpu's 4 GPU type(s)" in results["gpu-job"].summary
        else:  # the Job ran (and, with nothing playing the cluster, waited out its deadline)
            assert [j["metadata"]["name"][:20] for j in kube.created] == ["gpuburst-verify-gpu-"]
            assert results["gpu-job"].status == "fail"
