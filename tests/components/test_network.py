"""The network boundary: the VPC whose GPU subnets have no route out, its endpoints and their policies, the image
mirror, and the GPU nodes' own security group; the pure builders directly, the components under mocks."""
from __future__ import annotations

import ipaddress
import json

import pytest

from components.catalogue.network import MIRRORED_IMAGES, PULL_THROUGH_UPSTREAMS, VPC_ENDPOINTS
from components.network import (
    GPU_NODES_TAG,
    GPU_SUBNETS_TAG,
    GpuNodeSecurity,
    GpuNodeSecurityArgs,
    WorkloadNetwork,
    WorkloadNetworkArgs,
    endpoint_policy,
    gpu_node_security_rules,
    mirror_copy_commands,
    mirror_image,
    open_network_policy,
    private_cidr_problem,
    subnet_plan,
)
from components.spec.validation import ConfigError
from components.synth.mocks import FAKE_ACCOUNT, run_under_mocks

CIDR = "10.64.0.0/16"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
CLUSTER_SG = "sg-0a1b2c3d4e5f60001"
WORLD = ("0.0.0.0/0", "::/0")


@pytest.fixture(scope="module")
def net():
    holder = {}

    def program():
        holder["net"] = WorkloadNetwork("net", WorkloadNetworkArgs(name="gpuburst-dev", region="us-east-1",
                                                                   tags={"Project": "gpuburst"}))

    res = run_under_mocks(program)
    res.component = holder["net"]
    return res


def of(res, type_):
    return res.monitor.by_type(type_)


def by_name(res, type_, name):
    (r,) = [r for r in of(res, type_) if r.name == name]
    return r


# -- pure builders ----------------------------------------------------------------------------------------------------

def test_the_subnet_plan_gives_each_tier_its_own_quarter_and_each_zone_its_own_subnet():
    plan = subnet_plan(CIDR, ZONES)
    assert plan == {"gpu": ["10.64.0.0/20", "10.64.16.0/20", "10.64.32.0/20"],
                    "system": ["10.64.64.0/20", "10.64.80.0/20", "10.64.96.0/20"], "public": ["10.64.128.0/20"]}
    nets = [ipaddress.ip_network(c) for cs in plan.values() for c in cs]
    assert all(a == b or not a.overlaps(b) for a in nets for b in nets)


@pytest.mark.parametrize("value, ok", [("10.64.0.0/16", True), ("100.64.0.0/16", True), ("192.168.0.0/20", True),
                                       ("0.0.0.0/0", False), ("::/0", False), ("8.8.8.0/24", False),
                                       ("10.64.0.1/16", False), ("fd00::/8", False), ("10.0.0.0/7", False)])
def test_a_boundary_cidr_is_private_ipv4_and_never_the_world(value, ok):
    assert (private_cidr_problem(value) is None) is ok
    if value in WORLD:
        assert private_cidr_problem(value) == "never the whole internet"


def test_endpoint_policies_keep_other_accounts_out():
    s3 = endpoint_policy("account", account_id=FAKE_ACCOUNT, region="us-east-1", service="s3")
    own, layers = s3["Statement"]
    assert own["Condition"] == {"StringEquals": {"aws:PrincipalAccount": FAKE_ACCOUNT,
                                                 "aws:ResourceAccount": FAKE_ACCOUNT}}
    assert layers["Action"] == "s3:GetObject" and "Condition" not in layers  # ECR presigns: ECR is the caller
    assert layers["Resource"] == "arn:aws:s3:::prod-us-east-1-starport-layer-bucket/*"  # ECR's image layers
    sqs = endpoint_policy("account", account_id=FAKE_ACCOUNT, region="us-east-1", service="sqs")
    assert len(sqs["Statement"]) == 1
    ecr = endpoint_policy("principal", account_id=FAKE_ACCOUNT, region="us-east-1", service="ecr.dkr")
    assert ecr["Statement"][0]["Condition"] == {"StringEquals": {"aws:PrincipalAccount": FAKE_ACCOUNT}}
    assert endpoint_policy("open", account_id=FAKE_ACCOUNT, region="us-east-1", service="sts") is None
    with pytest.raises(ConfigError):
        endpoint_policy("everyone", account_id=FAKE_ACCOUNT, region="us-east-1", service="sqs")


def test_gpu_nodes_send_only_https_and_dns_into_the_vpc():
    rules = gpu_node_security_rules(CIDR, CLUSTER_SG)
    assert [(r["protocol"], r["from_port"], r["cidr_blocks"]) for r in rules["egress"]] == [
        ("tcp", 443, [CIDR]), ("udp", 53, [CIDR]), ("tcp", 53, [CIDR])]
    (kubelet,) = rules["ingress"]
    assert (kubelet["from_port"], kubelet["security_groups"]) == (10250, [CLUSTER_SG])
    assert "cidr_blocks" not in kubelet


def test_the_mirror_copy_commands_copy_each_image_by_its_digest_to_its_tag():
    urls = {m.source: f"{FAKE_ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/gpuburst-dev/mirror/{m.repository}"
            for m in MIRRORED_IMAGES}
    commands = mirror_copy_commands(urls)
    assert len(commands) == len(MIRRORED_IMAGES) == 5
    plugin = commands[0]
    assert plugin == ("crane copy nvcr.io/nvidia/k8s-device-plugin@sha256:"
                      "a61ba9fd8efb82f3a79f877f7580e02c1e8e7593f62473644bc9c79e315c3312 "
                      f"{urls['nvcr.io/nvidia/k8s-device-plugin']}:v0.20.0")
    for image, command in zip(MIRRORED_IMAGES, commands, strict=True):
        assert command == f"crane copy {image.source}@{image.digest} {urls[image.source]}:{image.tag}"
    assert any(c.startswith("crane copy ghcr.io/kedacore/keda@sha256:") for c in commands)


def test_an_image_without_a_digest_would_be_copied_by_tag(monkeypatch):
    import components.network as network
    from components.catalogue.network import MirroredImage

    monkeypatch.setattr(network, "MIRRORED_IMAGES", (MirroredImage("quay.io/x/y", "1.0", None, "x/y", "test"),))
    assert network.mirror_copy_commands({"quay.io/x/y": "R"}) == ["crane copy quay.io/x/y:1.0 R:1.0"]


def test_the_mirror_repository_of_each_image_is_a_plain_string():
    assert mirror_image("ghcr.io/kedacore/keda", account_id=FAKE_ACCOUNT, region="eu-west-1", name="gpuburst-prod") \
        == f"{FAKE_ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com/gpuburst-prod/mirror/kedacore/keda"
    with pytest.raises(ConfigError, match="mirror_image source"):
        mirror_image("docker.io/library/busybox", account_id=FAKE_ACCOUNT, region="eu-west-1", name="x")


def test_the_open_policy_selects_every_pod_of_its_namespace_and_allows_all():
    policy = open_network_policy("keda")
    assert policy["metadata"] == {"name": "gpuburst-allow-all", "namespace": "keda"}
    assert policy["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}],
                              "egress": [{}]}


def test_the_catalogue_lists_every_endpoint_an_isolated_node_needs_once():
    services = {(e.service, e.kind) for e in VPC_ENDPOINTS}
    assert len(services) == len(VPC_ENDPOINTS)
    for s in ("sqs", "sts", "ecr.api", "ecr.dkr", "eks-auth", "logs", "ec2", "ssm", "eks", "s3"):
        assert (s, "Interface") in services, s
    assert ("s3", "Gateway") in services
    assert not any("nvcr.io" in u for u in PULL_THROUGH_UPSTREAMS)  # hence the mirror


# -- WorkloadNetwork under mocks -------------------------------------------------------------------------------------

def test_every_child_is_parented_to_the_network(net):
    (component,) = of(net, "gpuburst:index:WorkloadNetwork")
    children = [r for r in net.registrations if r.urn != component.urn]
    assert children and all(r.parent == component.urn for r in children)


def test_the_vpc_resolves_private_dns_and_its_default_group_allows_nothing(net):
    (vpc,) = of(net, "aws:ec2/vpc:Vpc")
    assert vpc.properties["cidrBlock"] == CIDR
    assert vpc.properties["enableDnsSupport"] is True and vpc.properties["enableDnsHostnames"] is True
    (default,) = of(net, "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup")
    assert default.properties.get("ingress", []) == [] and default.properties.get("egress", []) == []


def test_gpu_subnets_have_no_route_out_and_only_system_subnets_reach_the_nat(net):
    tables = {r.name: r for r in of(net, "aws:ec2/routeTable:RouteTable")}
    assert tables["net-gpu-rt"].properties["routes"] == []
    assert tables["net-system-rt"].properties["routes"] == [{"cidrBlock": "0.0.0.0/0",
                                                             "natGatewayId": "net-nat-id"}]
    gpu_subnets = [r for r in of(net, "aws:ec2/subnet:Subnet") if r.properties["tags"]["gpuburst.io/network-tier"]
                   == "gpu"]
    assert len(gpu_subnets) == 3 and {s.properties["availabilityZone"] for s in gpu_subnets} == set(ZONES)
    assert all(s.properties["tags"][GPU_SUBNETS_TAG] == "gpuburst-dev" for s in gpu_subnets)
    assert all(s.properties["mapPublicIpOnLaunch"] is False for s in of(net, "aws:ec2/subnet:Subnet"))
    gpu_ids = {f"{s.name}-id" for s in gpu_subnets}
    associations = {a.properties["subnetId"]: a.properties["routeTableId"]
                    for a in of(net, "aws:ec2/routeTableAssociation:RouteTableAssociation")}
    assert {associations[s] for s in gpu_ids} == {"net-gpu-rt-id"}
    # Only the system subnets' tags say nothing to Karpenter: it finds the GPU subnets by their own tag.
    assert not [s for s in of(net, "aws:ec2/subnet:Subnet") if s not in gpu_subnets
                and GPU_SUBNETS_TAG in s.properties["tags"]]


def test_the_interface_endpoints_live_in_the_gpu_subnets_with_private_dns(net):
    endpoints = {(r.properties["serviceName"], r.properties["vpcEndpointType"]): r
                 for r in of(net, "aws:ec2/vpcEndpoint:VpcEndpoint")}
    for service in ("s3", "sqs", "sts", "ecr.api", "ecr.dkr", "eks-auth", "logs", "ec2", "ssm", "eks"):
        ep = endpoints[(f"com.amazonaws.us-east-1.{service}", "Interface")].properties
        assert ep["privateDnsEnabled"] is True, service
        assert ep["subnetIds"] == ["net-gpu-0-id", "net-gpu-1-id", "net-gpu-2-id"]
        assert ep["securityGroupIds"] == ["net-endpoints-sg-id"]
    s3 = endpoints[("com.amazonaws.us-east-1.s3", "Interface")]
    # In-VPC requests go to the interface endpoint (VPC CIDR), which the worker NetworkPolicy can name.
    assert s3.properties["dnsOptions"]["privateDnsOnlyForInboundResolverEndpoint"] is False
    gateway = endpoints[("com.amazonaws.us-east-1.s3", "Gateway")]
    assert gateway.properties["routeTableIds"] == ["net-system-rt-id"]
    assert gateway.urn in s3.dependencies
    (sg,) = [r for r in of(net, "aws:ec2/securityGroup:SecurityGroup") if r.name == "net-endpoints-sg"]
    assert [(i["fromPort"], i["cidrBlocks"]) for i in sg.properties["ingress"]] == [(443, [CIDR])]
    assert sg.properties.get("egress", []) == []


def test_endpoint_policies_are_the_catalogues_scopes(net):
    policies = {(r.properties["serviceName"].removeprefix("com.amazonaws.us-east-1."),
                 r.properties["vpcEndpointType"]): r.properties.get("policy")
                for r in of(net, "aws:ec2/vpcEndpoint:VpcEndpoint")}
    for svc in VPC_ENDPOINTS:
        policy = policies[(svc.service, svc.kind)]
        if svc.scope == "open":
            assert policy is None, svc
            continue
        conditions = [st["Condition"]["StringEquals"] for st in json.loads(policy)["Statement"] if "Condition" in st]
        assert all(c["aws:PrincipalAccount"] == FAKE_ACCOUNT for c in conditions), svc
        assert (conditions[0].get("aws:ResourceAccount") == FAKE_ACCOUNT) is (svc.scope == "account"), svc


def test_the_mirror_repositories_are_immutable_and_scanned(net):
    repos = {r.properties["name"]: r.properties for r in of(net, "aws:ecr/repository:Repository")}
    assert set(repos) == {"gpuburst-dev/mirror/nvidia/k8s-device-plugin", "gpuburst-dev/mirror/kubernetes/pause",
                          "gpuburst-dev/mirror/kedacore/keda", "gpuburst-dev/mirror/kedacore/keda-metrics-apiserver",
                          "gpuburst-dev/mirror/kedacore/keda-admission-webhooks"}
    assert all(p["imageTagMutability"] == "IMMUTABLE" and p["imageScanningConfiguration"] == {"scanOnPush": True}
               for p in repos.values())
    assert set(net.component.mirror_repository_urls) == {m.source for m in MIRRORED_IMAGES}


def test_the_cluster_goes_into_the_system_subnets_whose_tags_the_network_owns(net):
    args = net.component.cluster_args()
    assert set(args) == {"vpc_id", "private_subnet_ids", "tag_node_subnets"} and args["tag_node_subnets"] is False
    assert len(args["private_subnet_ids"]) == 3 and net.component.vpc_cidr == CIDR
    assert len(net.component.s3_endpoint_ids) == 2


@pytest.mark.parametrize("kw, field", [
    ({"vpc_cidr": "0.0.0.0/0"}, "WorkloadNetworkArgs.vpc_cidr"),
    ({"vpc_cidr": "10.64.0.0/24"}, "WorkloadNetworkArgs.vpc_cidr"),
    ({"vpc_cidr": "52.0.0.0/16"}, "WorkloadNetworkArgs.vpc_cidr"),
    ({"zone_count": 5}, "WorkloadNetworkArgs.zone_count"),
    ({"availability_zones": ["us-east-1a"]}, "WorkloadNetworkArgs.availability_zones"),
])
def test_bad_network_arguments_are_one_line_errors(kw, field):
    with pytest.raises(ConfigError) as e:
        run_under_mocks(lambda: WorkloadNetwork("net", WorkloadNetworkArgs(name="n", region="us-east-1", **kw)))
    assert e.value.field == field and "\n" not in str(e.value)


# -- GpuNodeSecurity under mocks -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def security():
    return run_under_mocks(lambda: GpuNodeSecurity("gpu", GpuNodeSecurityArgs(
        vpc_id="vpc-0example", vpc_cidr="10.0.0.0/16", cluster_security_group_id=CLUSTER_SG, cluster_name="burst-dev",
        tag_subnet_ids=["subnet-0a", "subnet-0b"])))


def test_the_gpu_nodes_group_is_tagged_for_karpenter_and_never_egresses_to_the_world(security):
    (sg,) = of(security, "aws:ec2/securityGroup:SecurityGroup")
    p = sg.properties
    assert p["vpcId"] == "vpc-0example" and p["tags"][GPU_NODES_TAG] == "burst-dev"
    assert {c for rule in p["egress"] for c in rule["cidrBlocks"]} == {"10.0.0.0/16"}
    assert not {c for rule in p["ingress"] for c in rule.get("cidrBlocks", [])}
    assert [rule["securityGroups"] for rule in p["ingress"]] == [[CLUSTER_SG]]


def test_the_cluster_group_admits_the_gpu_nodes_for_the_api_and_dns(security):
    rules = of(security, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
    assert {(r.properties["ipProtocol"], r.properties["fromPort"]) for r in rules} == {
        ("tcp", 443), ("udp", 53), ("tcp", 53)}
    assert all(r.properties["securityGroupId"] == CLUSTER_SG
               and r.properties["referencedSecurityGroupId"] == "gpu-sg-id" for r in rules)


def test_subnets_another_stack_owns_are_tagged_as_gpu_subnets(security):
    tags = {r.properties["resourceId"]: (r.properties["key"], r.properties["value"])
            for r in of(security, "aws:ec2/tag:Tag")}
    assert tags == {"subnet-0a": (GPU_SUBNETS_TAG, "burst-dev"), "subnet-0b": (GPU_SUBNETS_TAG, "burst-dev")}


@pytest.mark.parametrize("kw, field", [({"vpc_cidr": "0.0.0.0/0"}, "GpuNodeSecurityArgs.vpc_cidr"),
                                       ({"cluster_name": ""}, "GpuNodeSecurityArgs.cluster_name")])
def test_bad_security_arguments_are_one_line_errors(kw, field):
    args = {"vpc_id": "vpc-1", "vpc_cidr": "10.0.0.0/16", "cluster_security_group_id": CLUSTER_SG,
            "cluster_name": "c", **kw}
    with pytest.raises(ConfigError) as e:
        run_under_mocks(lambda: GpuNodeSecurity("gpu", GpuNodeSecurityArgs(**args)))
    assert e.value.field == field and "\n" not in str(e.value)
