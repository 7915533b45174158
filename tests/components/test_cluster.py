"""Cluster: pinned EKS, access entries, Pod Identity agent, system node group, Karpenter discovery tags, provider."""
from __future__ import annotations

import json

import pulumi
import pytest

from components.catalogue import KUBERNETES_VERSION
from components.cluster import VPC_CNI_CONFIGURATION, Cluster, ClusterArgs
from components.karpenter import NODE_MANAGED_POLICIES
from components.spec.validation import ConfigError
from components.synth.mocks import RealisticMocks, run_under_mocks

NAME = "burst-dev"
DEFAULT_SUBNETS = ["subnet-0default0a", "subnet-0default0b", "subnet-0default0c"]


class InvokeMocks(RealisticMocks):
    """RealisticMocks plus the default VPC's subnets (and a record of the invokes made)."""

    def __init__(self, default_subnets=tuple(DEFAULT_SUBNETS)) -> None:
        super().__init__()
        self.default_subnets = list(default_subnets)
        self.invokes: list[tuple[str, dict]] = []

    def call(self, args):
        self.invokes.append((args.token, dict(args.args)))
        if args.token == "aws:ec2/getSubnets:getSubnets":
            return {"ids": self.default_subnets, "id": "us-east-1"}, []
        answer = super().call(args)
        ret, failures = answer if isinstance(answer, tuple) else (answer, None)
        return ret, failures or []


def run(args: ClusterArgs, mocks: InvokeMocks | None = None, **kw):
    mocks = mocks or InvokeMocks()

    def program():
        c = Cluster("cluster", args)
        assert isinstance(c.name, str) and c.name == args.name
        pulumi.export("kubeconfig", c.kubeconfig_json)
        pulumi.export("oidcProviderArn", c.oidc_provider_arn)
        pulumi.export("oidcIssuer", c.oidc_issuer)
        pulumi.export("nodeSecurityGroupId", c.node_security_group_id)

    res = run_under_mocks(program, mocks=mocks, **kw)
    res.invokes = mocks.invokes
    return res


@pytest.fixture(scope="module")
def default_vpc():
    return run(ClusterArgs(name=NAME))


@pytest.fixture(scope="module")
def own_vpc():
    return run(ClusterArgs(name=NAME, vpc_id="vpc-0123", public_subnet_ids=["subnet-0pub"],
                           private_subnet_ids=["subnet-0priv0a", "subnet-0priv0b"],
                           endpoint_public_access=True, public_access_cidrs=["203.0.113.0/24"],
                           system_instance_types=["m6i.large", "m7i.large"],
                           system_desired_size=3, system_max_size=4, tags={"project": "pathology"}))


def one(res, type_):
    [r] = res.monitor.by_type(type_)
    return r


def test_eks_cluster_inputs(default_vpc, own_vpc):
    c = one(default_vpc, "eks:index:Cluster")
    p = c.properties
    assert p["name"] == NAME and p["version"] == KUBERNETES_VERSION
    assert p["authenticationMode"] == "API"
    assert p["createOidcProvider"] is True and p["skipDefaultNodeGroup"] is True
    # No public API endpoint unless asked for, and then only to the CIDRs given.
    assert p["endpointPrivateAccess"] is True and p["endpointPublicAccess"] is False
    assert "publicAccessCidrs" not in p and "vpcId" not in p
    assert "audit" in p["enabledClusterLogTypes"]
    own = one(own_vpc, "eks:index:Cluster").properties
    assert own["endpointPublicAccess"] is True and own["publicAccessCidrs"] == ["203.0.113.0/24"]
    assert own["vpcId"] == "vpc-0123" and own["privateSubnetIds"] == ["subnet-0priv0a", "subnet-0priv0b"]
    assert own["tags"] == {"project": "pathology"}


def test_every_child_is_parented_to_the_component(default_vpc):
    component = one(default_vpc, "gpuburst:index:Cluster")
    children = [r for r in default_vpc.registrations if r.urn != component.urn]
    assert children and all(r.parent == component.urn for r in children)


def test_pod_identity_agent_addon_without_an_invented_version(default_vpc):
    addons = {r.properties["addonName"]: r for r in default_vpc.monitor.by_type("aws:eks/addon:Addon")}
    agent = addons["eks-pod-identity-agent"]
    assert agent.properties["clusterName"] == NAME and "addonVersion" not in agent.properties
    nodes = one(default_vpc, "aws:eks/nodeGroup:NodeGroup")
    cluster = one(default_vpc, "eks:index:Cluster")
    assert cluster.urn in agent.dependencies and nodes.urn in agent.dependencies
    assert "addonVersion" not in addons["coredns"].properties
    assert nodes.urn in addons["coredns"].dependencies


def test_system_node_group(default_vpc, own_vpc):
    nodes = one(default_vpc, "aws:eks/nodeGroup:NodeGroup")
    p = nodes.properties
    assert p["clusterName"] == NAME and p["labels"] == {"gpuburst.io/pool": "system"}
    assert p["instanceTypes"] == ["m6i.large"] and p["capacityType"] == "ON_DEMAND"
    assert p["scalingConfig"] == {"desiredSize": 2, "minSize": 2, "maxSize": 3}
    assert p["amiType"] == "AL2023_x86_64_STANDARD"
    assert p["subnetIds"] == DEFAULT_SUBNETS
    assert one(default_vpc, "eks:index:Cluster").urn in nodes.dependencies  # the name is plain: explicit dependency
    lt = one(default_vpc, "aws:ec2/launchTemplate:LaunchTemplate")
    assert lt.urn in nodes.dependencies
    assert lt.properties["metadataOptions"] == {"httpEndpoint": "enabled", "httpTokens": "required",
                                                "httpPutResponseHopLimit": 1}
    [bdm] = lt.properties["blockDeviceMappings"]
    assert bdm["deviceName"] == "/dev/xvda" and bdm["ebs"]["encrypted"] == "true"
    role = one(default_vpc, "aws:iam/role:Role")
    assert json.loads(role.properties["assumeRolePolicy"])["Statement"][0]["Principal"] == {
        "Service": "ec2.amazonaws.com"}
    own = one(own_vpc, "aws:eks/nodeGroup:NodeGroup").properties
    assert own["subnetIds"] == ["subnet-0priv0a", "subnet-0priv0b"]  # private subnets, not public
    assert own["instanceTypes"] == ["m6i.large", "m7i.large"]
    assert own["scalingConfig"] == {"desiredSize": 3, "minSize": 3, "maxSize": 4}


def test_karpenter_discovery_tags(default_vpc, own_vpc):
    def tags(res):
        return {r.properties["resourceId"]: r.properties for r in res.monitor.by_type("aws:ec2/tag:Tag")}

    t = tags(default_vpc)
    # The cluster security group EKS made (the mocked clusterSecurityGroupId) and the default VPC's subnets.
    assert set(t) == {"sg-0a1b2c3d4e5f60001", *DEFAULT_SUBNETS}
    assert all(v["key"] == "karpenter.sh/discovery" and v["value"] == NAME for v in t.values())
    assert any(tok == "aws:ec2/getSubnets:getSubnets" for tok, _ in default_vpc.invokes)
    t = tags(own_vpc)
    assert set(t) == {"sg-0a1b2c3d4e5f60001", "subnet-0priv0a", "subnet-0priv0b"}
    assert not any(tok == "aws:ec2/getSubnets:getSubnets" for tok, _ in own_vpc.invokes)


def test_outputs_and_kubernetes_provider(default_vpc):
    out = default_vpc.outputs
    assert out["kubeconfig"]["secret"] is True
    assert json.loads(out["kubeconfig"]["value"])["kind"] == "Config"
    assert out["oidcProviderArn"].startswith("arn:aws:iam::") and ":oidc-provider/" in out["oidcProviderArn"]
    assert out["oidcIssuer"].startswith("oidc.eks.")
    assert out["nodeSecurityGroupId"].startswith("sg-")
    provider = one(default_vpc, "pulumi:providers:kubernetes")
    assert provider.parent == one(default_vpc, "gpuburst:index:Cluster").urn
    assert provider.properties["enableServerSideApply"] in (True, "true")
    assert "apiVersion" in json.dumps(provider.properties["kubeconfig"])
    assert one(default_vpc, "eks:index:Cluster").urn in provider.dependencies


@pytest.mark.parametrize("kw,field", [
    ({"name": "burst dev"}, "cluster.name"),
    ({"name": "-burst"}, "cluster.name"),
    ({"kubernetes_version": "1.20"}, "cluster.kubernetes_version"),
    ({"kubernetes_version": "1.40"}, "cluster.kubernetes_version"),
    ({"public_access_cidrs": ["0.0.0.0/33"]}, "cluster.public_access_cidrs"),
    ({"public_access_cidrs": ["10.0.0.1/24"]}, "cluster.public_access_cidrs"),  # host bits set
    ({"public_access_cidrs": []}, "cluster.public_access_cidrs"),
    ({"endpoint_public_access": True, "public_access_cidrs": ["0.0.0.0/0"]}, "cluster.public_access_cidrs"),
    ({"endpoint_public_access": True, "public_access_cidrs": ["203.0.113.0/24", "::/0"]},
     "cluster.public_access_cidrs"),
    ({"endpoint_public_access": True}, "cluster.public_access_cidrs"),  # unset, AWS would open it to the world
    ({"endpoint_public_access": False, "public_access_cidrs": ["203.0.113.0/24"]}, "cluster.public_access_cidrs"),
    ({"endpoint_private_access": False}, "cluster.endpoint_private_access"),
    ({"system_desired_size": 1}, "cluster.system_desired_size"),
    ({"system_desired_size": 4, "system_max_size": 3}, "cluster.system_max_size"),
    ({"system_instance_types": []}, "cluster.system_instance_types"),
    ({"vpc_id": "vpc-0123"}, "cluster.private_subnet_ids"),
    ({"private_subnet_ids": pulumi.Output.from_input(["subnet-0a"])}, "cluster.private_subnet_ids"),
    ({"partition": "aws-moon"}, "cluster.partition"),
])
def test_config_errors_are_one_line_and_name_the_field(kw, field):
    with pytest.raises(ConfigError) as e:
        run(ClusterArgs(**{"name": NAME, **kw}))
    assert e.value.field == field and "\n" not in str(e.value)
    assert e.value.detail.startswith(f"{field}: ")
    assert str(e.value).startswith(f"Cluster 'cluster': {field}: ")  # which component, which resource


def test_no_default_vpc_subnets_and_none_given_is_a_config_error():
    with pytest.raises(ConfigError) as e:
        run(ClusterArgs(name=NAME), mocks=InvokeMocks(default_subnets=()))
    assert e.value.field == "cluster.private_subnet_ids" and "no default VPC subnets" in str(e.value)


def test_the_upgrade_policy_is_always_explicit(default_vpc):
    assert one(default_vpc, "eks:index:Cluster").properties["upgradePolicy"] == {"supportType": "STANDARD"}
    extended = run(ClusterArgs(name=NAME, support_type="EXTENDED"))
    assert one(extended, "eks:index:Cluster").properties["upgradePolicy"] == {"supportType": "EXTENDED"}


def test_a_bad_support_type_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as e:
        run(ClusterArgs(name=NAME, support_type="extended"))
    assert e.value.field == "cluster.support_type" and "STANDARD, EXTENDED" in str(e.value)


def test_vpc_cni_enforces_network_policies_in_strict_mode(default_vpc):
    # pulumi-eks writes these into the vpc-cni Addon's configurationValues ({"enableNetworkPolicy": "true", "env":
    # {..., "NETWORK_POLICY_ENFORCING_MODE": "strict"}}).
    assert one(default_vpc, "eks:index:Cluster").properties["vpcCniOptions"] == {
        "enableNetworkPolicy": True, "configurationValues": {"env": {"NETWORK_POLICY_ENFORCING_MODE": "strict"}}}
    assert VPC_CNI_CONFIGURATION == {"env": {"NETWORK_POLICY_ENFORCING_MODE": "strict"}}


def test_kube_system_pods_are_not_cut_off_by_strict_mode_and_coredns_waits_for_it(default_vpc):
    (policy,) = default_vpc.monitor.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert policy.properties["metadata"] == {"name": "gpuburst-allow-all", "namespace": "kube-system"}
    assert policy.properties["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [{}],
                                         "egress": [{}]}
    assert one(default_vpc, "eks:index:Cluster").urn in policy.dependencies
    addons = {r.properties["addonName"]: r for r in default_vpc.monitor.by_type("aws:eks/addon:Addon")}
    assert policy.urn in addons["coredns"].dependencies


def test_the_system_node_role_keeps_ssm(default_vpc):
    # Decision (issue 27): only the GPU node role (karpenter.py, `gpuburst:gpuNodeSsm`) loses SSM by default; the
    # system nodes hold no slides and Session Manager stays the way to debug them.
    attached = {r.properties["policyArn"].rsplit("/", 1)[1]
                for r in default_vpc.monitor.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")}
    assert attached == set(NODE_MANAGED_POLICIES) and "AmazonSSMManagedInstanceCore" in attached


def test_subnets_whose_tags_the_network_owns_are_not_tagged_twice():
    res = run(ClusterArgs(name=NAME, vpc_id="vpc-0123", private_subnet_ids=["subnet-0sys0a", "subnet-0sys0b"],
                          tag_node_subnets=False))
    tagged = {r.properties["resourceId"] for r in res.monitor.by_type("aws:ec2/tag:Tag")}
    assert tagged == {"sg-0a1b2c3d4e5f60001"}  # the cluster security group only
    assert one(res, "aws:eks/nodeGroup:NodeGroup").properties["subnetIds"] == ["subnet-0sys0a", "subnet-0sys0b"]
