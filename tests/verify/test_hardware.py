"""hardware-ami: the NodePool's requirements against the node's labels, and the AMI EC2 actually booted."""
from __future__ import annotations

import copy

import boto3
import pytest
from verify_fakes import FakeKube, items, load

from components.verify import hardware
from components.verify.aws import Aws
from components.verify.context import Context
from components.verify.model import VerifySettings

NVIDIA = "amazon-eks-node-al2023-x86_64-nvidia-1.34-v20261101"
NEURON = "amazon-eks-node-al2023-x86_64-neuron-1.34-v20261101"
STANDARD = "amazon-eks-node-al2023-x86_64-standard-1.34-v20261101"


@pytest.mark.parametrize("req,labels,ok", [
    ({"key": "a", "operator": "In", "values": ["x", "y"]}, {"a": "y"}, True),
    ({"key": "a", "operator": "In", "values": ["x"]}, {"a": "y"}, False),
    ({"key": "a", "operator": "In", "values": ["x"]}, {}, False),
    ({"key": "a", "operator": "NotIn", "values": ["x"]}, {"a": "x"}, False),
    ({"key": "a", "operator": "NotIn", "values": ["x"]}, {}, True),
    ({"key": "a", "operator": "Exists"}, {"a": ""}, True),
    ({"key": "a", "operator": "Exists"}, {}, False),
    ({"key": "a", "operator": "DoesNotExist"}, {}, True),
    ({"key": "a", "operator": "DoesNotExist"}, {"a": "1"}, False),
    ({"key": "gen", "operator": "Gt", "values": ["3"]}, {"gen": "5"}, True),
    ({"key": "gen", "operator": "Gt", "values": ["5"]}, {"gen": "5"}, False),
    ({"key": "gen", "operator": "Lt", "values": ["6"]}, {"gen": "5"}, True),
    ({"key": "gen", "operator": "Gte", "values": ["5"]}, {"gen": "5"}, True),
    ({"key": "gen", "operator": "Lte", "values": ["4"]}, {"gen": "5"}, False),
    ({"key": "gen", "operator": "Gt", "values": ["3"]}, {"gen": "five"}, False),
    ({"key": "gen", "operator": "Gt", "values": ["3"]}, {}, False),
])
def test_requirement_operators(req, labels, ok):
    assert (hardware.requirement_problem(req, labels) is None) is ok


@pytest.mark.parametrize("name,family,variant", [
    (NVIDIA, "al2023", "nvidia"),
    (NEURON, "al2023", "neuron"),
    (STANDARD, "al2023", "standard"),
    ("amazon-eks-node-al2023-arm64-nvidia-1.34-v20261101", "al2023", "nvidia"),
    ("amazon-eks-node-al2023-x86_64-nvidia-560-1.31-v20241016", "al2023", "nvidia"),
    ("amazon-eks-gpu-node-1.29-v20240315", "al2", "nvidia"),
    ("bottlerocket-aws-k8s-1.34-nvidia-x86_64-v1.50.0-abcdef01", "bottlerocket", "nvidia"),
    ("my-golden-image-42", "unknown", "unknown"),
])
def test_ami_kind_from_name(name, family, variant):
    kind = hardware.ami_kind({"Name": name})
    assert (kind.family, kind.variant) == (family, variant)


def _node(itype="g5.xlarge", instance="i-0a1b2c3d4e5f60718"):
    node = copy.deepcopy(items("nodes_gpu_healthy.json")[0])
    node["metadata"]["labels"]["node.kubernetes.io/instance-type"] = itype
    node["spec"]["providerID"] = f"aws:///us-east-1a/{instance}"
    return node


def test_g5_on_neuron_ami_fails_naming_node_type_ami_id_and_name():
    node = _node()
    r = hardware.judge_hardware("gpu", load("nodepool_gpu.json"), load("ec2nodeclass_gpu_swapped.json"), [node],
                                {"i-0a1b2c3d4e5f60718": {"ImageId": "ami-0neuron000000000a"}},
                                {"ami-0neuron000000000a": {"ImageId": "ami-0neuron000000000a", "Name": NEURON}})
    assert r.status == "fail"
    assert r.summary == (f"1 of 1 node(s) of NodePool gpu wrong: ip-10-0-12-34.ec2.internal (g5.xlarge): AMI "
                         f"ami-0neuron000000000a '{NEURON}': variant neuron, not nvidia")
    # the EC2NodeClass's own resolution is quoted: Karpenter mapped the Neuron AMI to GPU instances
    assert any("instance-gpu-count Exists" in e for e in r.evidence)


def test_instance_type_outside_the_nodepool_fails():
    node = _node(itype="g6.xlarge")
    r = hardware.judge_hardware("gpu", load("nodepool_gpu.json"), None, [node],
                                {"i-0a1b2c3d4e5f60718": {"ImageId": "ami-1"}}, {"ami-1": {"Name": NVIDIA}})
    assert r.status == "fail"
    assert "not admitted by NodePool gpu (node.kubernetes.io/instance-type='g6.xlarge')" in r.summary
    assert any("node.kubernetes.io/instance-type='g6.xlarge', NodePool requires In" in e for e in r.evidence)


def test_inferentia_node_in_the_gpu_pool_fails():
    node = items("nodes_inf2_in_gpu_pool.json")[0]
    nodepool = load("nodepool_gpu.json")
    r = hardware.judge_hardware("gpu", nodepool, None, [node], {"i-0aaaabbbbccccdddd": {"ImageId": "ami-1"}},
                                {"ami-1": {"Name": NEURON}})
    assert r.status == "fail"
    assert "no NVIDIA GPU" in r.summary


def test_wrong_family_fails():
    nodeclass = load("ec2nodeclass_gpu_swapped.json")
    r = hardware.judge_hardware("gpu", load("nodepool_gpu.json"), nodeclass, [_node()],
                                {"i-0a1b2c3d4e5f60718": {"ImageId": "ami-1"}},
                                {"ami-1": {"Name": "bottlerocket-aws-k8s-1.34-nvidia-x86_64-v1.50.0-abcdef01"}})
    assert r.status == "fail" and "family bottlerocket, not al2023" in r.summary
    assert any("AMI family bottlerocket, the EC2NodeClass selects al2023" in e for e in r.evidence)


def test_unknown_instance_fails_rather_than_passes():
    r = hardware.judge_hardware("gpu", load("nodepool_gpu.json"), None, [_node()], {}, {})
    assert r.status == "fail" and "not found by ec2:DescribeInstances" in r.summary


def test_empty_pool_is_skipped():
    assert hardware.judge_hardware("gpu", load("nodepool_gpu.json"), None, [], {}, {}).status == "skipped"


# --- against a real moto_server: AMIs registered in EC2, instances launched from them ------------------------------

def _launch(ec2, name: str, itype: str) -> tuple[str, str]:
    ami = ec2.register_image(Name=name, Description="EKS-optimized Kubernetes node based on Amazon Linux 2023",
                             Architecture="x86_64", RootDeviceName="/dev/xvda", VirtualizationType="hvm")["ImageId"]
    inst = ec2.run_instances(ImageId=ami, InstanceType=itype, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    return ami, inst


def test_run_against_ec2_on_moto_fails_the_neuron_node_and_passes_the_nvidia_one(aws):
    ec2 = boto3.client("ec2")
    nv_ami, nv_inst = _launch(ec2, NVIDIA, "g4dn.xlarge")
    ne_ami, ne_inst = _launch(ec2, NEURON, "g5.xlarge")
    good = copy.deepcopy(items("nodes_gpu_healthy.json")[1])
    good["spec"]["providerID"] = f"aws:///us-east-1b/{nv_inst}"
    bad = _node(instance=ne_inst)
    kube = FakeKube(nodes=[good, bad], nodepools=[load("nodepool_gpu.json")],
                    nodeclasses=[load("ec2nodeclass_gpu_swapped.json")])
    ctx = Context(settings=VerifySettings(nodepool="gpu"), kube=kube, aws_factory=lambda region: Aws(region))
    r = hardware.run(ctx)
    assert r.status == "fail"
    assert r.summary.startswith("1 of 2 node(s) of NodePool gpu wrong: ")
    assert ne_ami in r.summary and NEURON in r.summary and "ip-10-0-12-34.ec2.internal" in r.summary
    assert any(nv_ami in e and "expected AMI" in e for e in r.evidence)


def test_run_against_ec2_on_moto_passes_nvidia_nodes(aws):
    ec2 = boto3.client("ec2")
    _, inst = _launch(ec2, NVIDIA, "g5.xlarge")
    kube = FakeKube(nodes=[_node(instance=inst)], nodepools=[load("nodepool_gpu.json")])
    ctx = Context(settings=VerifySettings(nodepool="gpu"), kube=kube, aws_factory=lambda region: Aws(region))
    r = hardware.run(ctx)
    assert r.status == "pass", r


def test_run_reports_an_instance_ec2_does_not_know(aws):
    kube = FakeKube(nodes=[_node(instance="i-0deadbeefdeadbeef")], nodepools=[load("nodepool_gpu.json")])
    ctx = Context(settings=VerifySettings(nodepool="gpu"), kube=kube, aws_factory=lambda region: Aws(region))
    r = hardware.run(ctx)
    assert r.status == "fail"
    assert any("ec2:DescribeInstances on i-0deadbeefdeadbeef: InvalidInstanceID.NotFound" in e for e in r.evidence)


# --- the instance-store RAID0: kubelet's filesystem must really be the NVMe --------------------------------------

def _raid0_nodeclass():
    nc = copy.deepcopy(load("ec2nodeclass_gpu_swapped.json"))
    nc["spec"]["instanceStorePolicy"] = "RAID0"
    return nc


def _judge(node, nodeclass):
    return hardware.judge_hardware("gpu", load("nodepool_gpu.json"), nodeclass, [node],
                                   {"i-0a1b2c3d4e5f60718": {"ImageId": "ami-1"}}, {"ami-1": {"Name": NVIDIA}})


def test_raid0_asked_but_kubelet_on_the_root_volume_fails_naming_both_sizes():
    node = _node()  # a g5.xlarge (250 GB NVMe) whose ephemeral storage is the 100 GiB root volume
    r = _judge(node, _raid0_nodeclass())
    assert r.status == "fail"
    assert "instanceStorePolicy RAID0 asked, but ephemeral-storage is 100 GiB, not the 250 GB (233 GiB) NVMe" \
        in r.summary
    assert any("kubelet and containerd are on the root volume" in e for e in r.evidence)


def test_raid0_on_the_nvme_passes_and_says_so():
    node = _node()
    node["status"]["capacity"]["ephemeral-storage"] = "244130000Ki"  # ~233 GiB: the 250 GB array
    node["metadata"]["labels"]["karpenter.k8s.aws/instance-local-nvme"] = "250"
    r = _judge(node, _raid0_nodeclass())
    assert r.status == "pass", r.summary
    assert any("on the NVMe RAID0 (250 GB)" in e for e in r.evidence)


def test_without_raid0_in_the_nodeclass_the_root_volume_is_fine():
    assert _judge(_node(), load("ec2nodeclass_gpu_swapped.json")).status == "pass"
