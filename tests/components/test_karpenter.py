"""Karpenter: controller policy, interruption queue and rules, node role + access entry, both charts, version checks."""
from __future__ import annotations

import json

import pulumi
import pytest

from components.catalogue import CHARTS
from components.cluster import Cluster, ClusterArgs
from components.device_plugin import NvidiaDevicePlugin
from components.karpenter import (
    INTERRUPTION_TARGET_ID,
    NODE_MANAGED_POLICIES,
    Karpenter,
    KarpenterArgs,
    controller_policy,
    gpu_node_managed_policies,
    interruption_event_patterns,
    interruption_queue_policy,
    karpenter_values,
)
from components.nodeclass import Ec2NodeClass, Ec2NodeClassArgs
from components.nodepool import GpuNodePool, GpuNodePoolArgs
from components.spec.validation import ConfigError
from components.synth.mocks import FAKE_ACCOUNT, UNKNOWN, run_under_mocks

CLUSTER = "burst-dev"
NODE_ROLE_ARN = f"arn:aws:iam::{FAKE_ACCOUNT}:role/{CLUSTER}-karpenter-node"
QUEUE_ARN = f"arn:aws:sqs:us-east-1:{FAKE_ACCOUNT}:{CLUSTER}-karpenter"


def statements(policy):
    return {s["Sid"]: s for s in policy["Statement"]}


def actions(stmt):
    a = stmt["Action"]
    return {a} if isinstance(a, str) else set(a)


# ----------------------------------------------------------------------------------------------------------------------
# Pure functions
# ----------------------------------------------------------------------------------------------------------------------

def test_controller_policy_is_scoped_like_upstream():
    pol = controller_policy(CLUSTER, "us-east-1", FAKE_ACCOUNT, node_role_arn=NODE_ROLE_ARN, queue_arn=QUEUE_ARN)
    s = statements(pol)
    all_actions = set().union(*(actions(x) for x in pol["Statement"]))
    for needed in ("ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate", "ec2:CreateTags",
                   "ec2:TerminateInstances", "ec2:DeleteLaunchTemplate", "ec2:DescribeInstances",
                   "ec2:DescribeInstanceTypes", "ec2:DescribeSubnets", "ec2:DescribeSecurityGroups",
                   "ec2:DescribeImages", "ssm:GetParameter", "pricing:GetProducts", "sqs:ReceiveMessage",
                   "sqs:DeleteMessage", "iam:PassRole", "iam:CreateInstanceProfile", "iam:AddRoleToInstanceProfile",
                   "iam:GetInstanceProfile", "eks:DescribeCluster"):
        assert needed in all_actions, needed
    assert not any(a.endswith(":*") or a == "*" for a in all_actions), "no wildcard actions"
    assert all(x["Effect"] == "Allow" for x in pol["Statement"])
    owned = f"aws:ResourceTag/kubernetes.io/cluster/{CLUSTER}"
    # Terminating and deleting only what this cluster's Karpenter launched.
    assert s["AllowScopedDeletion"]["Condition"]["StringEquals"] == {owned: "owned"}
    assert actions(s["AllowScopedDeletion"]) == {"ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"}
    launch = s["AllowScopedEC2InstanceActionsWithTags"]["Condition"]["StringEquals"]
    assert launch[f"aws:RequestTag/kubernetes.io/cluster/{CLUSTER}"] == "owned"
    assert launch["aws:RequestTag/eks:eks-cluster-name"] == CLUSTER
    assert s["AllowPassingInstanceRole"]["Resource"] == NODE_ROLE_ARN
    assert "ec2.amazonaws.com" in s["AllowPassingInstanceRole"]["Condition"]["StringEquals"]["iam:PassedToService"]
    assert s["AllowInterruptionQueueActions"]["Resource"] == QUEUE_ARN
    assert s["AllowSSMReadActions"]["Resource"] == "arn:aws:ssm:us-east-1::parameter/aws/service/*"
    assert s["AllowAPIServerEndpointDiscovery"]["Resource"] == \
        f"arn:aws:eks:us-east-1:{FAKE_ACCOUNT}:cluster/{CLUSTER}"
    for sid in ("AllowScopedInstanceProfileCreationActions", "AllowScopedInstanceProfileTagActions",
                "AllowScopedInstanceProfileActions"):
        assert s[sid]["Resource"] == f"arn:aws:iam::{FAKE_ACCOUNT}:instance-profile/*"
        assert s[sid]["Condition"]["StringEquals"]
    # Resource "*" only for reads that IAM cannot scope, and the regional reads stay in the region.
    unscoped = set().union(*(actions(x) for x in pol["Statement"] if x["Resource"] == "*"))
    assert all(a.split(":")[1].startswith(("Describe", "Get", "List")) for a in unscoped), unscoped
    assert s["AllowRegionalReadActions"]["Condition"] == {"StringEquals": {"aws:RequestedRegion": "us-east-1"}}
    assert len(json.dumps(pol, separators=(",", ":"))) < 10_240  # inline role policy size limit


def test_controller_policy_without_account_and_in_another_partition():
    pol = controller_policy(CLUSTER, "us-gov-west-1", node_role_arn="r", queue_arn="q", partition="aws-us-gov")
    s = statements(pol)
    assert s["AllowAPIServerEndpointDiscovery"]["Resource"] == f"arn:aws-us-gov:eks:us-gov-west-1:*:cluster/{CLUSTER}"
    assert s["AllowScopedDeletion"]["Resource"][0].startswith("arn:aws-us-gov:ec2:us-gov-west-1:")


def test_interruption_event_patterns_are_the_five_upstream_kinds():
    patterns = interruption_event_patterns()
    assert patterns == {
        "spot-interruption": {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
        "rebalance": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
        "instance-state-change": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]},
        "scheduled-change": {"source": ["aws.health"], "detail-type": ["AWS Health Event"]},
        "capacity-reservation-interruption": {
            "source": ["aws.ec2"], "detail-type": ["EC2 Capacity Reservation Instance Interruption Warning"]},
    }


def test_queue_policy_allows_eventbridge_rules_and_sqs_and_denies_plain_http():
    rules = ["arn:aws:events:us-east-1:1:rule/a", "arn:aws:events:us-east-1:1:rule/b"]
    s = statements(interruption_queue_policy(QUEUE_ARN, rules))
    assert s["AllowEventBridgeRules"]["Principal"] == {"Service": "events.amazonaws.com"}
    assert s["AllowEventBridgeRules"]["Action"] == "sqs:SendMessage"
    assert s["AllowEventBridgeRules"]["Condition"] == {"ArnEquals": {"aws:SourceArn": rules}}
    assert s["AllowSQS"]["Principal"] == {"Service": "sqs.amazonaws.com"}
    assert s["AllowSQS"]["Action"] == "sqs:SendMessage"
    deny = s["DenyHTTP"]
    assert deny["Effect"] == "Deny" and deny["Principal"] == "*" and deny["Action"] == "sqs:*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert all(x["Resource"] == QUEUE_ARN for x in s.values())


def test_values_put_the_controller_on_the_system_group_only():
    v = karpenter_values(cluster_name=CLUSTER, queue_name="q", region="eu-west-1")
    assert v["settings"] == {"clusterName": CLUSTER, "interruptionQueue": "q", "batchIdleDuration": "1s",
                             "batchMaxDuration": "10s"}
    assert v["serviceAccount"] == {"create": True, "name": "karpenter"}
    assert v["replicas"] == 2 and v["dnsPolicy"] == "Default"
    assert v["nodeSelector"]["gpuburst.io/pool"] == "system"
    [term] = v["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"} in term["matchExpressions"]
    assert {"key": "gpuburst.io/pool", "operator": "In", "values": ["system"]} in term["matchExpressions"]
    assert v["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {"topologyKey": "kubernetes.io/hostname"}]
    assert v["controller"]["resources"]["requests"] and v["controller"]["resources"]["limits"]
    assert {"name": "AWS_REGION", "value": "eu-west-1"} in v["controller"]["env"]


# ----------------------------------------------------------------------------------------------------------------------
# Version checks
# ----------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw,field,value", [
    ({"version": "1.0.1"}, "karpenter.version", "1.0.1"),
    ({"version": "1.0.0", "crd_version": "1.0.0"}, "karpenter.version", "1.0.0"),
    ({"version": "1.8.4"}, "karpenter.version", "1.8.4"),
    ({"version": "0.37.0"}, "karpenter.version", "0.37.0"),
    ({"crd_version": "1.13.0"}, "karpenter.crd_version", "1.13.0"),
    ({"kubernetes_version": "1.40"}, "karpenter.kubernetes_version", "1.40"),
    ({"cluster_name": "x" * 60}, "karpenter.node_role_name", "x" * 60 + "-karpenter-node"),
    ({"account_id": "1234"}, "karpenter.account_id", "1234"),
    ({"region": "useast1"}, "karpenter.region", "useast1"),
])
def test_bad_versions_are_refused_at_construction_in_one_line(kw, field, value):
    args = {"cluster_name": CLUSTER, **kw}
    with pytest.raises(ConfigError) as e:
        run_under_mocks(lambda: Karpenter("karpenter", KarpenterArgs(**args)))
    msg = e.value.detail
    assert "\n" not in str(e.value) and msg.startswith(f"{field}: {value!r}")
    assert e.value.where and e.value.where.startswith("Karpenter ")
    if value == "1.0.1":
        assert "Neuron" in msg  # the reason from the catalogue, not a restatement


# ----------------------------------------------------------------------------------------------------------------------
# The component under mocks
# ----------------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def karpenter():
    holder = {}

    def program():
        marker = pulumi.CustomResource("test:index:Ready", "cluster-ready", {})
        holder["k"] = Karpenter("karpenter", KarpenterArgs(cluster_name=CLUSTER, wait_for=[marker]))

    return run_under_mocks(program)


def by_name(res, type_):
    return {r.name: r for r in res.monitor.by_type(type_)}


def test_every_child_is_parented_to_the_component(karpenter):
    [component] = karpenter.monitor.by_type("gpuburst:index:Karpenter")
    direct = [r for r in karpenter.registrations if r.parent == component.urn]
    assert {r.type for r in direct} >= {"aws:sqs/queue:Queue", "aws:sqs/queuePolicy:QueuePolicy",
                                        "aws:cloudwatch/eventRule:EventRule", "aws:cloudwatch/eventTarget:EventTarget",
                                        "aws:iam/role:Role", "aws:eks/accessEntry:AccessEntry",
                                        "gpuburst:index:WorkloadIdentity", "kubernetes:helm.sh/v4:Chart"}
    others = [r for r in karpenter.registrations if r.urn != component.urn and r.type != "test:index:Ready"]
    assert all(r.parent for r in others)


def test_interruption_queue_sse_retention_and_policy(karpenter):
    [queue] = karpenter.monitor.by_type("aws:sqs/queue:Queue")
    assert queue.properties["sqsManagedSseEnabled"] is True
    assert queue.properties["messageRetentionSeconds"] == 300
    assert queue.properties["name"] == f"{CLUSTER}-karpenter"
    [qp] = karpenter.monitor.by_type("aws:sqs/queuePolicy:QueuePolicy")
    policy = statements(json.loads(qp.properties["policy"]))
    assert policy["DenyHTTP"]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    rules = karpenter.monitor.by_type("aws:cloudwatch/eventRule:EventRule")
    assert sorted(policy["AllowEventBridgeRules"]["Condition"]["ArnEquals"]["aws:SourceArn"]) == \
        sorted(f"arn:aws:events:us-east-1:{FAKE_ACCOUNT}:rule/{r.name}" for r in rules)


def test_five_event_rules_each_target_the_queue(karpenter):
    rules = by_name(karpenter, "aws:cloudwatch/eventRule:EventRule")
    targets = by_name(karpenter, "aws:cloudwatch/eventTarget:EventTarget")
    [queue] = karpenter.monitor.by_type("aws:sqs/queue:Queue")
    expected = interruption_event_patterns()
    assert {name.removeprefix("karpenter-"): json.loads(r.properties["eventPattern"]) for name, r in rules.items()} \
        == expected
    for key in expected:
        t = targets[f"karpenter-{key}-target"]
        assert t.properties["arn"] == QUEUE_ARN and t.properties["targetId"] == INTERRUPTION_TARGET_ID
        assert rules[f"karpenter-{key}"].urn in t.dependencies and queue.urn in t.dependencies


def test_node_role_policies_and_access_entry(karpenter):
    roles = by_name(karpenter, "aws:iam/role:Role")
    node = roles["karpenter-node-role"]
    assert node.properties["name"] == f"{CLUSTER}-karpenter-node"
    trust = json.loads(node.properties["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    attached = {r.properties["policyArn"] for r in karpenter.monitor.by_type(
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment") if node.urn in r.dependencies}
    # No AmazonSSMManagedInstanceCore by default: no Session Manager shell on nodes that hold slides.
    assert attached == {f"arn:aws:iam::aws:policy/{p}" for p in (
        "AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryPullOnly")}
    [entry] = karpenter.monitor.by_type("aws:eks/accessEntry:AccessEntry")
    assert entry.properties == {"clusterName": CLUSTER, "principalArn": NODE_ROLE_ARN, "type": "EC2_LINUX"}


def test_ssm_on_the_gpu_node_role_is_opt_in():
    res = run_under_mocks(lambda: Karpenter("karpenter", KarpenterArgs(cluster_name=CLUSTER, node_ssm=True)))
    attached = {r.properties["policyArn"].rsplit("/", 1)[1]
                for r in res.monitor.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")}
    assert "AmazonSSMManagedInstanceCore" in attached and attached == set(gpu_node_managed_policies(True))
    assert gpu_node_managed_policies() == ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy",
                                           "AmazonEC2ContainerRegistryPullOnly")
    assert gpu_node_managed_policies(True) == NODE_MANAGED_POLICIES


def test_controller_identity_is_pod_identity_with_the_policy(karpenter):
    [assoc] = karpenter.monitor.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    assert (assoc.properties["namespace"], assoc.properties["serviceAccount"]) == ("kube-system", "karpenter")
    assert assoc.properties["clusterName"] == CLUSTER
    [inline] = karpenter.monitor.by_type("aws:iam/rolePolicy:RolePolicy")
    assert json.loads(inline.properties["policy"]) == controller_policy(
        CLUSTER, "us-east-1", FAKE_ACCOUNT, node_role_arn=NODE_ROLE_ARN, queue_arn=QUEUE_ARN)


def test_two_v4_charts_at_the_catalogue_version(karpenter):
    charts = by_name(karpenter, "kubernetes:helm.sh/v4:Chart")
    crd, ctl = charts["karpenter-crd"], charts["karpenter-controller"]
    pin_crd, pin = CHARTS["karpenter-crd"], CHARTS["karpenter"]
    assert crd.properties["chart"] == f"{pin_crd.repository}/{pin_crd.chart}"
    assert crd.properties["version"] == pin_crd.version
    assert ctl.properties["chart"] == f"{pin.repository}/{pin.chart}"
    assert ctl.properties["version"] == pin.version
    assert ctl.properties["skipCrds"] is True and not crd.properties.get("skipCrds")
    assert (crd.properties["name"], ctl.properties["name"]) == ("karpenter-crd", "karpenter")
    assert crd.properties["namespace"] == ctl.properties["namespace"] == pin.namespace
    assert crd.urn in ctl.dependencies
    [assoc] = karpenter.monitor.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    [entry] = karpenter.monitor.by_type("aws:eks/accessEntry:AccessEntry")
    assert assoc.urn in ctl.dependencies and entry.urn in ctl.dependencies
    [ready] = karpenter.monitor.by_type("test:index:Ready")
    assert ready.urn in crd.dependencies and ready.urn in ctl.dependencies
    values = ctl.properties["values"]
    assert values == karpenter_values(cluster_name=CLUSTER, queue_name=f"{CLUSTER}-karpenter", region="us-east-1")


def test_with_region_and_account_the_policy_and_values_are_plain_during_preview():
    # Mocks answer every output even in preview, so "plain" shows as: the inputs wait on no other resource.
    def policy_and_chart(**kw):
        res = run_under_mocks(lambda: Karpenter("karpenter", KarpenterArgs(cluster_name=CLUSTER, **kw)), preview=True)
        [inline] = res.monitor.by_type("aws:iam/rolePolicy:RolePolicy")
        ctl = by_name(res, "kubernetes:helm.sh/v4:Chart")["karpenter-controller"]
        [queue] = res.monitor.by_type("aws:sqs/queue:Queue")
        return inline, ctl, queue

    inline, ctl, queue = policy_and_chart(region="us-east-1", account_id=FAKE_ACCOUNT)
    assert json.loads(inline.properties["policy"]) == controller_policy(
        CLUSTER, "us-east-1", FAKE_ACCOUNT, node_role_arn=NODE_ROLE_ARN, queue_arn=QUEUE_ARN)
    assert [d.split("::")[-1] for d in inline.dependencies] == ["karpenter-controller-role"]
    assert UNKNOWN not in json.dumps(ctl.properties["values"])
    # Without them the policy is read from the queue's ARN, so it waits for the queue (unknown in a real preview).
    inline, ctl, queue = policy_and_chart()
    assert queue.urn in inline.dependencies
    assert json.loads(inline.properties["policy"]) == controller_policy(
        CLUSTER, "us-east-1", FAKE_ACCOUNT, node_role_arn=NODE_ROLE_ARN, queue_arn=QUEUE_ARN)


# ----------------------------------------------------------------------------------------------------------------------
# Wiring: cluster -> karpenter -> node class / pool -> device plugin, as the platform composes them.
# ----------------------------------------------------------------------------------------------------------------------

def test_components_compose_with_the_cluster_provider():
    def program():
        cluster = Cluster("cluster", ClusterArgs(name=CLUSTER, private_subnet_ids=["subnet-0a", "subnet-0b"],
                                                 vpc_id="vpc-0123"))
        k8s_opts = pulumi.ResourceOptions(providers={"kubernetes": cluster.k8s_provider})
        karpenter = Karpenter("karpenter", KarpenterArgs(cluster_name=cluster.name, wait_for=cluster.ready),
                              opts=k8s_opts)
        nodeclass = Ec2NodeClass("gpu-class", Ec2NodeClassArgs(
            node_role=karpenter.node_role_name, cluster_name=cluster.name, crd_chart=karpenter.crd_chart),
            opts=k8s_opts)
        GpuNodePool("gpu-pool", GpuNodePoolArgs(nodeclass_name=nodeclass.nodeclass_name,
                                                crd_chart=karpenter.crd_chart, gpu_limit=8), opts=k8s_opts)
        NvidiaDevicePlugin("nvdp", opts=k8s_opts)

    res = run_under_mocks(program, preview=True)
    charts = by_name(res, "kubernetes:helm.sh/v4:Chart")
    crd_chart = charts["karpenter-crd"]
    crs = [r for r in res.registrations if r.type.startswith("kubernetes:karpenter")]
    assert {r.type for r in crs} == {"kubernetes:karpenter.sh/v1:NodePool",
                                     "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"}
    assert all(crd_chart.urn in r.dependencies for r in crs)
    [nodeclass] = res.monitor.by_type("kubernetes:karpenter.k8s.aws/v1:EC2NodeClass")
    [role] = [r for r in res.monitor.by_type("aws:iam/role:Role") if r.name == "karpenter-node-role"]
    assert nodeclass.properties["spec"]["role"] == role.properties["name"]
    [pool] = res.monitor.by_type("kubernetes:karpenter.sh/v1:NodePool")
    assert pool.properties["spec"]["template"]["spec"]["nodeClassRef"]["name"] == \
        nodeclass.properties["metadata"]["name"]
    # The charts wait for the system nodes, the Pod Identity agent and the discovery tags.
    [nodes] = res.monitor.by_type("aws:eks/nodeGroup:NodeGroup")
    addons = res.monitor.by_type("aws:eks/addon:Addon")
    assert nodes.urn in crd_chart.dependencies and all(a.urn in crd_chart.dependencies for a in addons)
    tags = {r.properties["resourceId"] for r in res.monitor.by_type("aws:ec2/tag:Tag")}
    assert {"subnet-0a", "subnet-0b"} <= tags
    assert nodeclass.properties["spec"]["subnetSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": CLUSTER}}]


# ----------------------------------------------------------------------------------------------------------------------
# Batch settings (gpuburst:karpenterBatchIdleS / karpenterBatchMaxS)
# ----------------------------------------------------------------------------------------------------------------------

def test_batch_settings_default_to_karpenters_and_are_written_as_durations():
    v = karpenter_values(cluster_name=CLUSTER, queue_name="q", region="eu-west-1")
    assert (v["settings"]["batchIdleDuration"], v["settings"]["batchMaxDuration"]) == ("1s", "10s")
    v = karpenter_values(cluster_name=CLUSTER, queue_name="q", region="eu-west-1", batch_idle_s=3, batch_max_s=45)
    assert (v["settings"]["batchIdleDuration"], v["settings"]["batchMaxDuration"]) == ("3s", "45s")


def test_batch_settings_keys_are_the_charts():
    import tarfile

    from components.synth.charts import SHARED_CHARTS
    archive = SHARED_CHARTS / f"karpenter-{CHARTS['karpenter'].version}.tgz"
    if not archive.is_file():
        pytest.skip(f"{archive} is absent")
    with tarfile.open(archive) as t:
        import yaml
        chart_values = yaml.safe_load(t.extractfile("karpenter/values.yaml"))
    assert {"batchIdleDuration", "batchMaxDuration"} <= set(chart_values["settings"])
    assert (chart_values["settings"]["batchIdleDuration"], chart_values["settings"]["batchMaxDuration"]) == \
        ("1s", "10s")  # our defaults are the chart's


def test_batch_settings_reach_the_controller_chart():
    def program():
        Karpenter("karpenter", KarpenterArgs(cluster_name=CLUSTER, batch_idle_s=2, batch_max_s=20))
    res = run_under_mocks(program)
    ctl = by_name(res, "kubernetes:helm.sh/v4:Chart")["karpenter-controller"]
    assert ctl.properties["values"]["settings"]["batchIdleDuration"] == "2s"
    assert ctl.properties["values"]["settings"]["batchMaxDuration"] == "20s"


@pytest.mark.parametrize("kw,field", [({"batch_idle_s": 0}, "karpenter.batch_idle_s"),
                                      ({"batch_max_s": 601}, "karpenter.batch_max_s"),
                                      ({"batch_idle_s": 5, "batch_max_s": 2}, "karpenter.batch_max_s")])
def test_bad_batch_settings_are_refused_in_one_line(kw, field):
    with pytest.raises(ConfigError) as e:
        run_under_mocks(lambda: Karpenter("karpenter", KarpenterArgs(cluster_name=CLUSTER, **kw)))
    assert "\n" not in str(e.value) and e.value.detail.startswith(f"{field}: ")


@pytest.mark.parametrize("kw,region", [({}, "us-east-1"), ({"region": "eu-west-1", "account_id": FAKE_ACCOUNT},
                                                            "eu-west-1")])
def test_the_controller_role_trusts_pod_identity_only_for_its_service_account_on_this_cluster(kw, region):
    """Issue 19: the controller's trust names the account, the cluster's ARN (from region and account when given,
    else from the provider) and kube-system/karpenter."""
    res = run_under_mocks(lambda: Karpenter("karpenter", KarpenterArgs(cluster_name=CLUSTER, **kw)))
    role = by_name(res, "aws:iam/role:Role")["karpenter-controller-role"]
    (st,) = json.loads(role.properties["assumeRolePolicy"])["Statement"]
    arn = f"arn:aws:eks:{region}:{FAKE_ACCOUNT}:cluster/{CLUSTER}"
    assert st["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert st["Condition"]["StringEquals"] == {
        "aws:SourceAccount": FAKE_ACCOUNT, "aws:RequestTag/eks-cluster-arn": arn,
        "aws:RequestTag/kubernetes-namespace": ["kube-system"],
        "aws:RequestTag/kubernetes-service-account": ["karpenter"]}
    assert arn in st["Condition"]["ArnLike"]["aws:SourceArn"]
