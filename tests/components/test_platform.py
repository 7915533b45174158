"""GpuBurstPlatform's arguments for what exists: an existing VPC and subnets for the cluster, and the workloads'
namespace (named, or existing and not created); bad values refused in one line before anything is registered."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from components.config import parse_config
from components.existing import ExistingNetwork
from components.platform import GpuBurstPlatform
from components.spec.validation import ConfigError
from components.synth.mocks import run_under_mocks

ROOT = Path(__file__).resolve().parents[2]


def _config():
    raw = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text(encoding="utf-8"))["config"]
    return parse_config(raw, stack="dev")


def _run(**kw):
    return run_under_mocks(lambda: GpuBurstPlatform("p", _config(), **kw))


@pytest.fixture(scope="module")
def attached():
    return _run(network=ExistingNetwork("vpc-0example", ["subnet-0a", "subnet-0b"], vpc_cidr="10.0.0.0/16",
                                        gpu_subnet_ids=["subnet-0gpu"]), namespace="lab-a", create_namespace=False)


@pytest.fixture(scope="module")
def own():
    return _run()


def _policies(res):
    return {r.properties["metadata"]["name"]: r.properties
            for r in res.monitor.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")}


def test_the_cluster_goes_into_the_given_vpc_and_subnets(attached):
    (cluster,) = attached.monitor.by_type("eks:index:Cluster")
    assert cluster.properties["vpcId"] == "vpc-0example"
    assert cluster.properties["privateSubnetIds"] == ["subnet-0a", "subnet-0b"]
    (group,) = attached.monitor.by_type("aws:eks/nodeGroup:NodeGroup")
    assert group.properties["subnetIds"] == ["subnet-0a", "subnet-0b"]


def test_the_workloads_run_in_the_given_namespace_which_is_not_created(attached):
    assert not [r for r in attached.monitor.by_type("kubernetes:core/v1:Namespace")
                if r.properties["metadata"]["name"] in ("lab-a", "gpuburst")]
    (sj,) = attached.monitor.by_type("kubernetes:keda.sh/v1alpha1:ScaledJob")
    assert sj.properties["metadata"]["namespace"] == "lab-a"
    associations = attached.monitor.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert {a.properties["namespace"] for a in associations} >= {"lab-a"}


def test_a_named_namespace_is_created_restricted():
    res = _run(namespace="lab-b")
    (ns,) = [r for r in res.monitor.by_type("kubernetes:core/v1:Namespace")
             if r.properties["metadata"]["name"] == "lab-b"]
    assert ns.properties["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("kw, field", [
    ({"namespace": "Lab_A"}, "GpuBurstPlatform namespace"),
    ({"network": {"vpc_id": "vpc-1"}}, "GpuBurstPlatform network"),
    ({"network": ExistingNetwork("vpc-1", [])}, "ExistingNetwork.private_subnet_ids"),
    ({"network": ExistingNetwork("vpc-1", ["subnet-0a"])}, "ExistingNetwork.vpc_cidr"),
    ({"network": ExistingNetwork("vpc-1", ["subnet-0a"], vpc_cidr="0.0.0.0/0")}, "ExistingNetwork.vpc_cidr"),
    ({"network": ExistingNetwork("vpc-1", ["subnet-0a"], vpc_cidr="10.0.0.0/16", gpu_subnet_ids=[])},
     "ExistingNetwork.gpu_subnet_ids"),
])
def test_bad_arguments_are_refused_before_anything_is_registered(kw, field):
    with pytest.raises(ConfigError) as e:
        _run(**kw)
    assert field in str(e.value) and "\n" not in str(e.value)


# -- the network boundary ---------------------------------------------------------------------------------------------

def test_by_default_the_platform_creates_the_network_and_puts_the_cluster_in_its_system_subnets(own):
    (network,) = own.monitor.by_type("gpuburst:index:WorkloadNetwork")
    (cluster,) = own.monitor.by_type("eks:index:Cluster")
    assert cluster.properties["vpcId"] == "p-network-vpc-id"  # the mocked id of the network's Vpc
    assert cluster.properties["privateSubnetIds"] == [f"p-network-system-{i}-id" for i in range(3)]
    assert cluster.properties["vpcCniOptions"] == {"enableNetworkPolicy": True}
    # The system subnets carry their own tags: the cluster adds none to them (it tags its security group only).
    assert [t.properties["resourceId"] for t in own.monitor.by_type("aws:ec2/tag:Tag")] == ["sg-0a1b2c3d4e5f60001"]


def test_gpu_nodes_land_in_the_isolated_subnets_in_their_own_security_group(own):
    (nodeclass,) = own.monitor.by_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    spec = nodeclass.properties["spec"]
    assert spec["subnetSelectorTerms"] == [{"tags": {"gpuburst.io/gpu-subnets": "gpuburst-dev"}}]
    assert spec["securityGroupSelectorTerms"] == [{"tags": {"gpuburst.io/gpu-nodes": "gpuburst-dev"}}]
    groups = {r.properties.get("tags", {}).get("gpuburst.io/gpu-nodes"): r
              for r in own.monitor.by_type("aws:ec2/securityGroup:SecurityGroup")}
    gpu = groups["gpuburst-dev"].properties
    assert gpu["vpcId"] == "p-network-vpc-id"
    assert {c for rule in gpu["egress"] for c in rule["cidrBlocks"]} == {"10.64.0.0/16"}
    subnets = [r for r in own.monitor.by_type("aws:ec2/subnet:Subnet")
               if r.properties["tags"].get("gpuburst.io/gpu-subnets") == "gpuburst-dev"]
    assert len(subnets) == 3


def test_worker_egress_is_the_vpc_and_the_namespace_denies_by_default(own):
    policies = _policies(own)
    assert policies["default-deny"]["metadata"]["namespace"] == "gpuburst"
    assert policies["default-deny"]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                                                "ingress": [], "egress": []}
    for name in ("slides-worker", "studies-worker"):
        blocks = [t["ipBlock"]["cidr"] for r in policies[name]["spec"]["egress"] for t in r["to"] if "ipBlock" in t]
        assert "10.64.0.0/16" in blocks and not {"0.0.0.0/0", "::/0"} & set(blocks)


def test_an_existing_network_gives_its_cidr_and_gpu_subnets(attached):
    assert not attached.monitor.by_type("gpuburst:index:WorkloadNetwork")
    assert not attached.monitor.by_type("aws:ec2/vpcEndpoint:VpcEndpoint")
    blocks = [t["ipBlock"]["cidr"] for r in _policies(attached)["slides-worker"]["spec"]["egress"]
              for t in r["to"] if "ipBlock" in t]
    assert "10.0.0.0/16" in blocks
    tags = {(r.properties["resourceId"], r.properties["key"]) for r in attached.monitor.by_type("aws:ec2/tag:Tag")}
    assert ("subnet-0gpu", "gpuburst.io/gpu-subnets") in tags
    (group,) = [r for r in attached.monitor.by_type("aws:ec2/securityGroup:SecurityGroup")]
    assert group.properties["vpcId"] == "vpc-0example"
    assert _policies(attached)["default-deny"]["metadata"]["namespace"] == "lab-a"


def test_gpu_nodes_of_the_platforms_network_run_mirrored_images_only(own):
    (chart,) = [r for r in own.monitor.by_type("kubernetes:helm.sh/v4:Chart") if "nvidia" in r.name]
    repository = chart.properties["values"]["image"]["repository"]
    assert repository == "123456789012.dkr.ecr.us-east-1.amazonaws.com/gpuburst-dev/mirror/nvidia/k8s-device-plugin"
    mirrors = [r.properties["name"] for r in own.monitor.by_type("aws:ecr/repository:Repository")
               if "/mirror/" in r.properties.get("name", "")]
    assert repository.split("/", 1)[1] in mirrors


def test_an_existing_network_keeps_the_charts_images(attached):
    (chart,) = [r for r in attached.monitor.by_type("kubernetes:helm.sh/v4:Chart") if "nvidia" in r.name]
    assert "image" not in chart.properties["values"]
