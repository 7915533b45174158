"""References to what another stack runs: ExistingKeda, ExistingKarpenter, ExistingCluster, ExistingNetwork — they
create nothing, carry their facts into the plan, refuse the versions the catalogue refuses, and the workload
components attach to them without installing a second KEDA or Karpenter."""
from __future__ import annotations

import json

import pulumi_aws as aws
import pytest

from components import catalogue
from components.existing import (
    ExistingCluster,
    ExistingClusterArgs,
    ExistingKarpenter,
    ExistingKarpenterArgs,
    ExistingKeda,
    ExistingKedaArgs,
    ExistingNetwork,
    ExistingNodeClass,
)
from components.nodeclass import Ec2NodeClass, Ec2NodeClassArgs
from components.nodepool import GpuNodePool, GpuNodePoolArgs
from components.pod import WorkerPodSettings
from components.scaledjob import GpuScaledJob, GpuScaledJobArgs
from components.spec.validation import ConfigError
from components.spec.workload import WorkloadFacts
from components.synth.mocks import run_under_mocks

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/lab-worker@sha256:" + "ab" * 32
VPC_CIDRS = ["10.64.0.0/16"]
"""The VPC's CIDR: the worker NetworkPolicy's only HTTPS destination (required with the policy)."""
OPERATOR_ROLE = "arn:aws:iam::123456789012:role/platform-keda-operator"
FACTS = WorkloadFacts(items_independent=True, state_across_messages=False, ordered=False, model_load_s=45,
                      seconds_per_item=8, burst_items=200)


def _attach(keda_args: ExistingKedaArgs, *, identity_owner: str | None = None):
    def program():
        queue = aws.sqs.Queue("q", name="lab-slides")
        bucket = aws.s3.Bucket("data", bucket="lab-data")
        keda = ExistingKeda("keda", keda_args)
        karpenter = ExistingKarpenter("karpenter", ExistingKarpenterArgs(version=catalogue.KARPENTER_VERSION,
                                                                         node_role_name="platform-node"))
        ExistingCluster("cluster", ExistingClusterArgs(cluster_name="platform", node_classes={
            "gpu": ExistingNodeClass(root_volume_gib=200)}))
        GpuNodePool("pool", GpuNodePoolArgs(nodeclass_name="gpu", gpu_limit=4, karpenter=karpenter))
        GpuScaledJob("lab", GpuScaledJobArgs(
            egress_cidrs=VPC_CIDRS,
            cluster_name="platform", keda=keda, facts=FACTS, namespace="lab", queue_url=queue.url,
            queue_arn=queue.arn, bucket_arn=bucket.arn, pod=WorkerPodSettings(image=IMAGE),
            scaler_identity_owner=identity_owner))
    return run_under_mocks(program)



@pytest.fixture(scope="module")
def attached():
    return _attach(ExistingKedaArgs(version=catalogue.KEDA_VERSION, operator_role_arn=OPERATOR_ROLE))


def test_attaching_installs_no_chart_and_no_operator_role(attached):
    types = {r.type for r in attached.monitor.registrations}
    assert not {t for t in types if t.startswith("kubernetes:helm.sh/")}
    assert "gpuburst:index:Keda" not in types and "gpuburst:index:Karpenter" not in types
    assert not [r for r in attached.monitor.by_type("kubernetes:core/v1:Namespace")]


def test_the_references_carry_their_facts_into_the_plan(attached):
    (keda,) = attached.monitor.by_type("gpuburst:index:ExistingKeda")
    assert keda.properties == {"version": catalogue.KEDA_VERSION, "namespace": "keda",
                               "operatorServiceAccount": "keda-operator", "operatorRoleArn": OPERATOR_ROLE,
                               "scalerRolePath": "/gpuburst/keda-scaler/"}
    (karpenter,) = attached.monitor.by_type("gpuburst:index:ExistingKarpenter")
    assert karpenter.properties["version"] == catalogue.KARPENTER_VERSION
    assert karpenter.properties["nodeRoleName"] == "platform-node"
    (cluster,) = attached.monitor.by_type("gpuburst:index:ExistingCluster")
    assert cluster.properties == {"clusterName": "platform", "systemNodeLabels": {"gpuburst.io/pool": "system"},
                                  "devicePlugin": True,
                                  "nodeClasses": {"gpu": {"rootVolumeGiB": 200, "amiAlias": "al2023@latest"}}}


def test_the_scaler_role_trusts_the_existing_operator_role(attached):
    (ta,) = attached.monitor.by_type("kubernetes:keda.sh/v1alpha1:TriggerAuthentication")
    assert ta.properties["metadata"]["namespace"] == "lab"
    scaler_roles = [r for r in attached.monitor.by_type("aws:iam/role:Role")
                    if r.properties.get("path") == "/gpuburst/keda-scaler/"]
    (role,) = scaler_roles
    trust = json.loads(role.properties["assumeRolePolicy"])
    assert [s["Principal"] for s in trust["Statement"]] == [{"AWS": OPERATOR_ROLE}]


def test_the_custom_resources_wait_for_no_chart(attached):
    (pool,) = attached.monitor.by_type("kubernetes:karpenter.sh/v1:NodePool")
    (sj,) = attached.monitor.by_type("kubernetes:keda.sh/v1alpha1:ScaledJob")
    chart_urns = {r.urn for r in attached.monitor.registrations if r.type.startswith("kubernetes:helm.sh/")}
    assert not chart_urns & set(pool.dependencies) and not chart_urns & set(sj.dependencies)


def test_a_scaler_role_needs_the_operator_role_arn():
    with pytest.raises(ConfigError) as e:
        _attach(ExistingKedaArgs(version=catalogue.KEDA_VERSION))
    assert "ExistingKedaArgs.operator_role_arn" in str(e.value) and "\n" not in str(e.value)


def test_identity_owner_keda_needs_the_operator_role_name():
    with pytest.raises(ConfigError, match="ExistingKedaArgs.operator_role_name"):
        _attach(ExistingKedaArgs(version=catalogue.KEDA_VERSION), identity_owner="keda")
    res = _attach(ExistingKedaArgs(version=catalogue.KEDA_VERSION, operator_role_name="platform-keda-operator"),
                  identity_owner="keda")
    policies = [r for r in res.monitor.by_type("aws:iam/rolePolicy:RolePolicy")
                if r.properties.get("role") == "platform-keda-operator"]
    assert len(policies) == 1


def test_a_keda_the_catalogue_refuses_is_refused_by_name():
    with pytest.raises(ConfigError) as e:
        run_under_mocks(lambda: ExistingKeda("keda", ExistingKedaArgs(version="2.9.0")))
    assert str(e.value).startswith("ExistingKeda 'keda': ExistingKedaArgs.version: '2.9.0' is not valid")


@pytest.mark.parametrize("version", ["1.0.0", "1.0.2"])
def test_the_karpenter_releases_that_swapped_the_gpu_amis_are_refused(version):
    with pytest.raises(ConfigError) as e:
        run_under_mocks(lambda: ExistingKarpenter("k", ExistingKarpenterArgs(version=version)))
    assert "ExistingKarpenterArgs.version" in str(e.value) and version in str(e.value)


def test_karpenter_and_kubernetes_combination_is_checked():
    with pytest.raises(ConfigError, match="ExistingKarpenterArgs.kubernetes_version"):
        run_under_mocks(lambda: ExistingKarpenter("k", ExistingKarpenterArgs(
            version=catalogue.KARPENTER_VERSION, kubernetes_version="1.99")))


def test_a_nodeclass_attached_to_an_installing_karpenter_waits_for_its_crd_chart():
    def program():
        crd = aws.s3.Bucket("stand-in-for-the-crd-chart")

        class Installed:  # the attributes GpuNodePool / Ec2NodeClass read of a Karpenter
            crd_chart = crd

        Ec2NodeClass("nc", Ec2NodeClassArgs(node_role="node", cluster_name="c", karpenter=Installed()))
    res = run_under_mocks(program)
    (nc,) = res.monitor.by_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    (crd,) = res.monitor.by_type("aws:s3/bucket:Bucket")
    assert crd.urn in nc.dependencies


def test_existing_cluster_refuses_a_node_class_without_a_root_volume():
    with pytest.raises(ConfigError, match=r"node_classes\['gpu'\]"):
        run_under_mocks(lambda: ExistingCluster("c", ExistingClusterArgs(
            cluster_name="c", node_classes={"gpu": ExistingNodeClass(root_volume_gib=0)})))


def test_existing_cluster_registers_whether_a_node_class_makes_the_model_cache_folder_and_not_an_unknown():
    res = run_under_mocks(lambda: ExistingCluster("c", ExistingClusterArgs(cluster_name="c", node_classes={
        "gpu": ExistingNodeClass(root_volume_gib=100, model_cache_folder=True),
        "old": ExistingNodeClass(root_volume_gib=100, model_cache_folder=False),
        "cpu": ExistingNodeClass(root_volume_gib=50)})))
    (cluster,) = res.monitor.by_type("gpuburst:index:ExistingCluster")
    classes = cluster.properties["nodeClasses"]
    assert {n: c.get("modelCacheFolder") for n, c in classes.items()} == {"gpu": True, "old": False, "cpu": None}
    assert "modelCacheFolder" not in classes["cpu"] and classes["cpu"]["rootVolumeGiB"] == 50  # None: no fact
    assert ExistingNodeClass(root_volume_gib=1).model_cache_folder is None


def test_existing_cluster_refuses_a_model_cache_folder_that_is_not_a_bool():
    field = r"ExistingClusterArgs\.node_classes\['gpu'\]\.model_cache_folder"
    with pytest.raises(ConfigError, match=field + r": 'yes' is not valid: True \(its user data runs .*\), False or "
                                           r"None \(not known\)$"):
        run_under_mocks(lambda: ExistingCluster("c", ExistingClusterArgs(cluster_name="c", node_classes={
            "gpu": ExistingNodeClass(root_volume_gib=100, model_cache_folder="yes")})))  # type: ignore[arg-type]


def test_existing_network_needs_private_subnets():
    with pytest.raises(ConfigError, match="ExistingNetwork.private_subnet_ids"):
        ExistingNetwork(vpc_id="vpc-0abc", private_subnet_ids=[]).cluster_args()
    assert ExistingNetwork("vpc-0abc", ["subnet-1", "subnet-2"]).cluster_args() == {
        "vpc_id": "vpc-0abc", "private_subnet_ids": ["subnet-1", "subnet-2"], "public_subnet_ids": None}


def test_existing_network_gives_its_cidr_and_gpu_subnets_or_refuses_in_one_line():
    net = ExistingNetwork("vpc-0abc", ["subnet-1", "subnet-2"], vpc_cidr="10.0.0.0/16")
    assert net.egress_cidr() == "10.0.0.0/16" and net.gpu_subnets() == ["subnet-1", "subnet-2"]
    assert ExistingNetwork("vpc-0abc", ["subnet-1"], vpc_cidr="10.0.0.0/16",
                           gpu_subnet_ids=["subnet-9"]).gpu_subnets() == ["subnet-9"]
    for cidr, needle in ((None, "required"), ("0.0.0.0/0", "never the whole internet"), ("8.8.0.0/16", "private")):
        with pytest.raises(ConfigError) as e:
            ExistingNetwork("vpc-0abc", ["subnet-1"], vpc_cidr=cidr).egress_cidr()
        assert e.value.field == "ExistingNetwork.vpc_cidr" and needle in str(e.value) and "\n" not in str(e.value)


def test_an_existing_cluster_can_say_it_enforces_network_policies():
    res = run_under_mocks(lambda: ExistingCluster("c", ExistingClusterArgs(cluster_name="c",
                                                                          network_policy_enforced=True)))
    (cluster,) = res.monitor.by_type("gpuburst:index:ExistingCluster")
    assert cluster.properties["networkPolicyEnforced"] is True
    unknown = run_under_mocks(lambda: ExistingCluster("c", ExistingClusterArgs(cluster_name="c")))
    assert "networkPolicyEnforced" not in unknown.monitor.by_type("gpuburst:index:ExistingCluster")[0].properties
    with pytest.raises(ConfigError, match="ExistingClusterArgs.network_policy_enforced"):
        run_under_mocks(lambda: ExistingCluster("c", ExistingClusterArgs(cluster_name="c",
                                                                        network_policy_enforced="yes")))


def test_existing_keda_carries_the_namespaces_it_watches_as_a_fact():
    res = run_under_mocks(lambda: ExistingKeda("keda", ExistingKedaArgs(
        version=catalogue.KEDA_VERSION, watch_namespaces=["gpuburst", "lab-tils"])))
    (ref,) = res.monitor.by_type("gpuburst:index:ExistingKeda")
    assert ref.properties["watchNamespaces"] == ["gpuburst", "lab-tils"]
    every = run_under_mocks(lambda: ExistingKeda("keda", ExistingKedaArgs(version=catalogue.KEDA_VERSION,
                                                                          watch_namespaces=["*"])))
    assert every.monitor.by_type("gpuburst:index:ExistingKeda")[0].properties["watchNamespaces"] == ["*"]
    unknown = run_under_mocks(lambda: ExistingKeda("keda", ExistingKedaArgs(version=catalogue.KEDA_VERSION)))
    assert unknown.monitor.by_type("gpuburst:index:ExistingKeda")[0].properties.get("watchNamespaces") is None


@pytest.mark.parametrize("bad", [[], ["Lab_Tils"], ["*", "lab"], "lab-tils"])
def test_existing_keda_refuses_a_watch_list_that_is_not_one_in_one_line(bad):
    with pytest.raises(ConfigError) as e:
        run_under_mocks(lambda: ExistingKeda("keda", ExistingKedaArgs(version=catalogue.KEDA_VERSION,
                                                                      watch_namespaces=bad)))
    assert e.value.field == "ExistingKedaArgs.watch_namespaces" and "\n" not in str(e.value)
    assert str(e.value).startswith("ExistingKeda 'keda': ")
