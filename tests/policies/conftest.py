"""Fixtures for the policy pack's tests: compliant sample resources, in-process rule runners, and one pack subprocess.

In-process runners build `ResourceValidationArgs` / `StackValidationArgs` exactly as pulumi-policy's servicer does
(props deserialized and wrapped in the unknown-checking proxy), so unknown sentinels behave as they do for real. The
`pack` fixture starts the real pack once per session (`python -m policies`) and `analyze` drives it over gRPC with
`policies.harness`, the way `python -m policies check` and the engine do.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from pulumi_policy import (
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.policy import PolicyCustomTimeouts
from pulumi_policy.proxy import unknown_checking_proxy

from components import catalogue
from policies import harness

U = harness.UNKNOWN_STRING
"""The engine's unknown sentinel, as it appears inside a Struct during preview."""

T_NODEPOOL = "kubernetes:karpenter.sh/v1:NodePool"
T_NODECLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
T_TA = "kubernetes:keda.sh/v1alpha1:TriggerAuthentication"
T_CTA = "kubernetes:keda.sh/v1alpha1:ClusterTriggerAuthentication"
T_SCALEDJOB = "kubernetes:keda.sh/v1alpha1:ScaledJob"
T_SCALEDOBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
T_DEPLOYMENT = "kubernetes:apps/v1:Deployment"
T_JOB = "kubernetes:batch/v1:Job"
T_POD = "kubernetes:core/v1:Pod"
T_CHART = "kubernetes:helm.sh/v4:Chart"
T_RELEASE = "kubernetes:helm.sh/v3:Release"
T_EKS = "eks:index:Cluster"
T_AWS_EKS = "aws:eks/cluster:Cluster"
T_QUEUE = "aws:sqs/queue:Queue"
T_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"

QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:slides-dlq"
ROLE_ARN = "arn:aws:iam::123456789012:role/keda-slides"


def gpu_nodepool() -> dict:
    """A compliant GPU NodePool (several types, label, taint, GPU limit)."""
    return {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "gpu"},
        "spec": {
            "template": {
                "metadata": {"labels": {"nvidia.com/gpu.present": "true"}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In",
                         "values": ["g4dn.xlarge", "g4dn.2xlarge", "g5.xlarge", "g5.2xlarge"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    ],
                    "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                },
            },
            "limits": {"nvidia.com/gpu": 4},
        },
    }


def cpu_nodepool() -> dict:
    """A compliant general-purpose NodePool (no GPU, so no GPU label/taint/limit needed)."""
    return {
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]}],
        }}, "limits": {"cpu": 64}},
    }


def nodeclass() -> dict:
    """A compliant EC2NodeClass on the AL2023 alias."""
    return {
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "gpu"},
        "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole-dev",
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "dev"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "dev"}}],
        },
    }


def trigger_auth() -> dict:
    """A compliant TriggerAuthentication (provider aws with roleArn)."""
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
        "metadata": {"name": "slides-sqs", "namespace": "gpu"},
        "spec": {"podIdentity": {"provider": "aws", "roleArn": ROLE_ARN}},
    }


def gpu_pod_spec() -> dict:
    """A pod spec requesting one GPU, tolerating the GPU taint, selecting any GPU node."""
    return {
        "containers": [{
            "name": "worker", "image": "registry.example/worker@sha256:" + "0" * 64,
            "resources": {"requests": {"cpu": "4", "memory": "24Gi", "nvidia.com/gpu": 1},
                          "limits": {"cpu": "4", "memory": "24Gi", "nvidia.com/gpu": 1}},
        }],
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "restartPolicy": "Never",
    }


def scaled_job() -> dict:
    """A compliant ScaledJob for independent slides."""
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob",
        "metadata": {"name": "slides", "namespace": "gpu",
                     "annotations": {"gpuburst.io/ordered": "false", "gpuburst.io/stateful": "false"}},
        "spec": {
            "jobTargetRef": {"template": {"spec": {**gpu_pod_spec(), "serviceAccountName": "slides-worker"}},
                             "backoffLimit": 0},
            "maxReplicaCount": 4,
            "rollout": {"strategy": "gradual"},
            "triggers": [{
                "type": "aws-sqs-queue",
                "metadata": {"queueURL": "https://sqs.us-east-1.amazonaws.com/123456789012/slides",
                             "queueLength": "1", "awsRegion": "us-east-1"},
                "authenticationRef": {"name": "slides-sqs"},
            }],
        },
    }


def consumer_deployment() -> dict:
    """A compliant GPU consumer Deployment (ordered, stateful work)."""
    spec = gpu_pod_spec()
    spec["restartPolicy"] = "Always"
    spec["serviceAccountName"] = "studies-worker"
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "studies", "namespace": "gpu",
                     "annotations": {"gpuburst.io/ordered": "true", "gpuburst.io/stateful": "true"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "studies"}},
                 "template": {"metadata": {"labels": {"app": "studies"}}, "spec": spec}},
    }


def work_queue() -> dict:
    """A compliant work queue (tagged work, redrive, SSE-SQS, visibility 2x the declared 300 s)."""
    return {
        "name": "slides", "visibilityTimeoutSeconds": 600, "sqsManagedSseEnabled": True,
        "redrivePolicy": '{"deadLetterTargetArn": "%s", "maxReceiveCount": 3}' % QUEUE_ARN,
        "tags": {"gpuburst.io/role": "work", "gpuburst.io/expected-processing-s": "300"},
    }


def dead_letter_queue() -> dict:
    """A compliant DLQ (tagged dead-letter, SSE-SQS)."""
    return {
        "name": "slides-dlq", "visibilityTimeoutSeconds": 600, "sqsManagedSseEnabled": True,
        "messageRetentionSeconds": 1209600,
        "tags": {"gpuburst.io/role": "dead-letter", "gpuburst.io/expected-processing-s": "300"},
    }


def chart(name: str, version: str | None = None) -> dict:
    """A helm v4 Chart resource for a catalogue chart, at the catalogue's pin unless `version` is given."""
    pin = catalogue.CHARTS[name]
    if pin.repository.startswith("oci://"):
        props = {"chart": f"{pin.repository}/{pin.chart}"}
    else:
        props = {"chart": pin.chart, "repositoryOpts": {"repo": pin.repository}}
    props.update({"version": version if version is not None else pin.version, "namespace": pin.namespace})
    return props


def cluster(version: str | None = None) -> dict:
    """An eks:index:Cluster at the catalogue's Kubernetes pin unless `version` is given (its VPC CNI enforcing
    NetworkPolicies, in strict mode)."""
    return {"name": "gpuburst-dev", "version": version if version is not None else catalogue.KUBERNETES_VERSION,
            "vpcCniOptions": {"enableNetworkPolicy": True,
                              "configurationValues": {"env": {"NETWORK_POLICY_ENFORCING_MODE": "strict"}}}}


KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/00000000-0000-0000-0000-000000000000"


def with_key(props: dict) -> dict:
    """Queue props encrypted with the compliant stack's customer key instead of SSE-SQS."""
    props = {k: v for k, v in props.items() if k != "sqsManagedSseEnabled"}
    return {**props, "kmsMasterKeyId": KEY_ARN}


def boundary_resources() -> list[tuple]:
    """What the clinical-data rules want of the compliant stack: its customer key, the control-plane log group, and
    the gpu namespace's default-deny and worker NetworkPolicies (egress to DNS, the Pod Identity agent, the VPC)."""
    key = urn("aws:kms/key:Key", "data-key")
    netpol = "kubernetes:networking.k8s.io/v1:NetworkPolicy"

    def policy(name: str, spec: dict) -> dict:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": "gpu"}, "spec": spec}

    egress = [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                       "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
               "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
              {"to": [{"ipBlock": {"cidr": "169.254.170.23/32"}}], "ports": [{"protocol": "TCP", "port": 80}]},
              {"to": [{"ipBlock": {"cidr": "10.0.0.0/16"}}], "ports": [{"protocol": "TCP", "port": 443}]}]
    return [
        ("aws:kms/key:Key", "data-key", {"enableKeyRotation": True, "deletionWindowInDays": 30}),
        ("aws:cloudwatch/logGroup:LogGroup", "control-plane-logs",
         {"name": "/aws/eks/gpuburst-dev/cluster", "retentionInDays": 90, "kmsKeyId": KEY_ARN}, None, [key]),
        (netpol, "default-deny", policy("default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})),
        (netpol, "workers", policy("workers", {"podSelector": {}, "policyTypes": ["Egress"], "egress": egress})),
    ]


def compliant_resources() -> list[tuple]:
    """(type, name, props[, parent URN[, dependencies]]) of a small stack that breaks no rule."""
    key = [urn("aws:kms/key:Key", "data-key")]
    return [
        (T_EKS, "cluster", cluster()),
        (T_CHART, "karpenter-crd", chart("karpenter-crd")),
        (T_CHART, "karpenter", chart("karpenter")),
        (T_CHART, "keda", chart("keda")),
        (T_CHART, "nvidia-device-plugin", chart("nvidia-device-plugin")),
        (T_NODECLASS, "gpu-nodeclass", nodeclass()),
        (T_NODEPOOL, "gpu-nodepool", gpu_nodepool()),
        (T_NODEPOOL, "general-nodepool", cpu_nodepool()),
        (T_QUEUE, "slides-dlq", with_key(dead_letter_queue()), None, key),
        (T_QUEUE, "slides-queue", with_key(work_queue()), None, key),
        (T_TA, "slides-sqs", trigger_auth()),
        (T_SCALEDJOB, "slides", scaled_job()),
        (T_DEPLOYMENT, "studies", consumer_deployment()),
    ] + wired_resources() + boundary_resources()


OPERATOR_ROLE_ARN = "arn:aws:iam::123456789012:role/keda-operator"


def urn(rtype: str, name: str, stack: str = "dev") -> str:
    """The URN the harness gives a plan resource that has none."""
    return f"urn:pulumi:{stack}::gpuburst::{rtype}::{name}"


def wired_resources() -> list[tuple]:
    """What the wiring rules resolve the compliant stack's references to: ServiceAccounts, Pod Identity associations,
    the KEDA scaler role (trusting the operator's role), the system node group, and the charts' rendered objects
    (4-tuples: the last item is the parent Chart's URN)."""
    def sa(ns, name):
        return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}

    def assoc(ns, name, role):
        return {"clusterName": "gpuburst-dev", "namespace": ns, "serviceAccount": name, "roleArn": role}

    def deployment(ns, name, spec):
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
                "spec": {"template": {"spec": spec}}}

    system = {"gpuburst.io/pool": "system"}
    karpenter_image = "public.ecr.aws/karpenter/controller:1@sha256:" + "a" * 64
    karpenter_pod = {"serviceAccountName": "karpenter", "nodeSelector": dict(system), "containers": [
        {"name": "controller", "image": karpenter_image}], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}]}}}}
    keda_pod = {"serviceAccountName": "keda-operator", "nodeSelector": dict(system),
                "containers": [{"name": "keda-operator", "image": "ghcr.io/kedacore/keda:2@sha256:" + "b" * 64}]}
    plugin_pod = {"nodeSelector": {"nvidia.com/gpu.present": "true"},
                  "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                  "containers": [{"name": "nvidia-device-plugin-ctr", "command": ["nvidia-device-plugin"],
                                  "image": "nvcr.io/nvidia/k8s-device-plugin:v0@sha256:" + "c" * 64}]}
    trust = ('{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "%s"}, '
             '"Action": ["sts:AssumeRole", "sts:TagSession"]}]}' % OPERATOR_ROLE_ARN)
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "nodepools.karpenter.sh"}}
    return [
        ("kubernetes:core/v1:ServiceAccount", "slides-worker", sa("gpu", "slides-worker")),
        ("kubernetes:core/v1:ServiceAccount", "studies-worker", sa("gpu", "studies-worker")),
        (T_ASSOCIATION, "slides-worker", assoc("gpu", "slides-worker", "arn:aws:iam::123456789012:role/slides")),
        (T_ASSOCIATION, "studies-worker", assoc("gpu", "studies-worker", "arn:aws:iam::123456789012:role/studies")),
        (T_ASSOCIATION, "karpenter", assoc("kube-system", "karpenter", "arn:aws:iam::123456789012:role/karpenter")),
        (T_ASSOCIATION, "keda-operator", assoc("keda", "keda-operator", OPERATOR_ROLE_ARN)),
        ("aws:iam/role:Role", "keda-slides", {"assumeRolePolicy": trust}),
        ("aws:eks/nodeGroup:NodeGroup", "system", {"labels": dict(system), "instanceTypes": ["m6i.large"]}),
        ("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition", "karpenter-crd:nodepools", crd,
         urn(T_CHART, "karpenter-crd")),
        (T_DEPLOYMENT, "karpenter:kube-system/karpenter", deployment("kube-system", "karpenter", karpenter_pod),
         urn(T_CHART, "karpenter")),
        ("kubernetes:core/v1:ServiceAccount", "karpenter:kube-system/karpenter", sa("kube-system", "karpenter"),
         urn(T_CHART, "karpenter")),
        (T_DEPLOYMENT, "keda:keda/keda-operator", deployment("keda", "keda-operator", keda_pod), urn(T_CHART, "keda")),
        ("kubernetes:core/v1:ServiceAccount", "keda:keda/keda-operator", sa("keda", "keda-operator"),
         urn(T_CHART, "keda")),
        ("kubernetes:apps/v1:DaemonSet", "nvidia-device-plugin:plugin",
         {"apiVersion": "apps/v1", "kind": "DaemonSet",
          "metadata": {"name": "nvidia-device-plugin", "namespace": "nvidia-device-plugin"},
          "spec": {"template": {"spec": plugin_pod}}}, urn(T_CHART, "nvidia-device-plugin")),
    ]


def plan(*resources: tuple, stack: str = "dev") -> dict:
    """A plan document from (type, props), (type, name, props), (type, name, props, parent URN) or (type, name,
    props, parent URN, dependency URNs) tuples."""
    out = []
    for res in resources:
        deps = res[4] if len(res) == 5 else None
        rtype, name, props, parent = tuple(res) + (None,) if len(res) == 3 else \
            tuple(res[:4]) if len(res) >= 4 else (res[0], None, res[1], None)
        entry = {"type": rtype, "properties": copy.deepcopy(props)}
        if name:
            entry["name"] = name
        if parent:
            entry["parent"] = parent
        if deps:
            entry["dependencies"] = list(deps)
        out.append(entry)
    return {"stack": stack, "resources": out}


class Samples:
    """The sample builders above, as one fixture (tests cannot import conftest under --import-mode=importlib)."""

    U = U
    QUEUE_ARN = QUEUE_ARN
    gpu_nodepool = staticmethod(gpu_nodepool)
    cpu_nodepool = staticmethod(cpu_nodepool)
    nodeclass = staticmethod(nodeclass)
    trigger_auth = staticmethod(trigger_auth)
    gpu_pod_spec = staticmethod(gpu_pod_spec)
    scaled_job = staticmethod(scaled_job)
    consumer_deployment = staticmethod(consumer_deployment)
    work_queue = staticmethod(work_queue)
    dead_letter_queue = staticmethod(dead_letter_queue)
    chart = staticmethod(chart)
    cluster = staticmethod(cluster)
    compliant_resources = staticmethod(compliant_resources)
    plan = staticmethod(plan)


for _name, _value in list(globals().items()):
    if _name.startswith("T_"):
        setattr(Samples, _name, _value)


@pytest.fixture
def samples() -> type[Samples]:
    return Samples


# --------------------------------------------------------------------------------------------------------------------
# In-process runners (what the servicer does for one policy).
# --------------------------------------------------------------------------------------------------------------------

def _proxied(props: dict) -> Any:
    return unknown_checking_proxy(deserialize_properties(copy.deepcopy(props)))


def _opts() -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], None)


def run_resource_policy(policy: ResourceValidationPolicy, resource_type: str, props: dict,
                        name: str = "res") -> list[str]:
    """The messages `policy` reports for one resource (as the servicer would pass it)."""
    messages: list[str] = []
    args = ResourceValidationArgs(resource_type, _proxied(props), f"urn:pulumi:dev::gpuburst::{resource_type}::{name}",
                                  name, _opts(), None)
    policy.validate(args, lambda message, urn=None: messages.append(message))
    return messages


def run_stack_policy(policy: StackValidationPolicy, resources: list[tuple]) -> list[tuple[str | None, str]]:
    """(urn, message) pairs `policy` reports for a stack of (type, props) or (type, name, props)."""
    built = []
    for i, res in enumerate(resources):
        rtype, name, props = res if len(res) == 3 else (res[0], f"r{i}", res[1])
        built.append(PolicyResource(rtype, _proxied(props), f"urn:pulumi:dev::gpuburst::{rtype}::{name}", name,
                                    _opts(), None, None, [], {}))
    found: list[tuple[str | None, str]] = []
    policy.validate(StackValidationArgs(built), lambda message, urn=None: found.append((urn, message)))
    return found


@pytest.fixture
def run_rule() -> Callable[..., list[str]]:
    return run_resource_policy


@pytest.fixture
def run_stack() -> Callable[..., list[tuple[str | None, str]]]:
    return run_stack_policy


# --------------------------------------------------------------------------------------------------------------------
# The real pack over gRPC.
# --------------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def pack():
    """One running pack subprocess for the session (always stopped at the end)."""
    with harness.Pack() as running:
        yield running


@pytest.fixture
def analyze(pack) -> Callable[..., harness.Report]:
    """`analyze(plan_doc, config=None)` -> Report, through the session's pack (Configure is sent every time)."""

    def run(doc: dict, config: dict | None = None) -> harness.Report:
        return pack.analyze(harness.normalise_plan(doc), harness.parse_config(config or {}))

    return run


@pytest.fixture(scope="session")
def dev_plan(dev) -> dict:
    """The dev stack's real plan (the session's one synth, tests/conftest.py `dev`)."""
    return dev["plan"]
