"""Partial plans for the boundary tests: what a stack declares when another stack runs KEDA, Karpenter, the device
plugin and the system node group (plain dicts in the plan format, and the `Res` list the rules read)."""
from __future__ import annotations

import copy

from components import catalogue
from policies import harness
from policies.plan import Res
from policies.unknowns import plain

ACCOUNT = "123456789012"
OPERATOR_ARN = f"arn:aws:iam::{ACCOUNT}:role/platform-keda-operator"
SCALER_PATH = "/gpuburst/keda-scaler/"
SCALER_ARN = f"arn:aws:iam::{ACCOUNT}:role{SCALER_PATH}slides-scaler"
OUTSIDE_ROLE_ARN = f"arn:aws:iam::{ACCOUNT}:role{SCALER_PATH}x-scaler"
"""A scaler role another stack created."""
SYSTEM = {"gpuburst.io/pool": "system"}

T_NODEPOOL = "kubernetes:karpenter.sh/v1:NodePool"
T_TA = "kubernetes:keda.sh/v1alpha1:TriggerAuthentication"
T_SCALEDJOB = "kubernetes:keda.sh/v1alpha1:ScaledJob"
T_SA = "kubernetes:core/v1:ServiceAccount"
T_DEPLOYMENT = "kubernetes:apps/v1:Deployment"
T_CHART = "kubernetes:helm.sh/v4:Chart"
T_RELEASE = "kubernetes:helm.sh/v3:Release"
T_QUEUE = "aws:sqs/queue:Queue"
T_ROLE = "aws:iam/role:Role"
T_ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
T_PLATFORM = "gpuburst:index:GpuBurstPlatform"
T_KEY = "aws:kms/key:Key"
T_NETPOL = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
T_KEDA = "gpuburst:index:ExistingKeda"
T_KARPENTER = "gpuburst:index:ExistingKarpenter"
T_CLUSTER = "gpuburst:index:ExistingCluster"


def urn(rtype: str, name: str) -> str:
    """The URN the harness gives a plan resource that has none."""
    return f"urn:pulumi:dev::gpuburst::{rtype}::{name}"


def entry(rtype: str, name: str, props: dict, parent: str | None = None, deps: list[str] | None = None) -> dict:
    out = {"type": rtype, "name": name, "properties": copy.deepcopy(props)}
    if parent:
        out["parent"] = parent
    if deps:
        out["dependencies"] = list(deps)
    return out


def doc(*entries: dict) -> dict:
    """A plan document (normalised as the harness does)."""
    return harness.normalise_plan({"stack": "dev", "resources": list(entries)})


def as_res(plan: dict) -> list[Res]:
    """The plan's resources as the stack rules read them."""
    plan = harness.normalise_plan(plan)
    return [Res(r["type"], r["urn"], r["name"], r["parent"] or None, plain(r["properties"]),
                tuple(r["dependencies"])) for r in plan["resources"]]


# -- the workload stack's own resources ------------------------------------------------------------------------------

def gpu_nodepool(nodeclass: str = "gpu", name: str = "gpu") -> dict:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": {
        "template": {"metadata": {"labels": {"nvidia.com/gpu.present": "true"}}, "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
            "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                              "values": ["g4dn.xlarge", "g4dn.2xlarge", "g5.xlarge", "g5.2xlarge"]},
                             {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]}},
        "limits": {"nvidia.com/gpu": 4}}}


KEY_ARN = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/00000000-0000-0000-0000-000000000000"
"""The ARN the offline mocks give every KMS key (a key field naming it also depends on the key's URN)."""


def queue_key(name: str = "slides-key") -> dict:
    """A rotated customer KMS key for the queues (what `customer-managed-keys` wants)."""
    return entry(T_KEY, name, {"description": "Encrypts the slide queues", "enableKeyRotation": True,
                               "deletionWindowInDays": 30})


def queues(key: str = "slides-key") -> list[dict]:
    """A work queue and its dead-letter queue, as WorkQueue declares them, encrypted with the plan's key `key`."""
    dlq_arn = f"arn:aws:sqs:us-east-1:{ACCOUNT}:slides-dlq"
    work = {"name": "slides", "visibilityTimeoutSeconds": 600, "kmsMasterKeyId": KEY_ARN,
            "redrivePolicy": '{"deadLetterTargetArn": "%s", "maxReceiveCount": 3}' % dlq_arn,
            "tags": {"gpuburst.io/role": "work", "gpuburst.io/expected-processing-s": "300"}}
    dlq = {"name": "slides-dlq", "kmsMasterKeyId": KEY_ARN, "tags": {"gpuburst.io/role": "dead-letter"}}
    deps = [urn(T_KEY, key)]
    return [entry(T_QUEUE, "slides-queue", work, deps=deps), entry(T_QUEUE, "slides-dlq", dlq, deps=deps)]


WORKER_LABELS = {"app.kubernetes.io/name": "gpuburst-worker", "app.kubernetes.io/instance": "slides"}
"""The labels of the ScaledJob's worker pods (`components.spec.names.WORKER_LABEL`)."""
VPC_CIDR = "10.0.0.0/16"


def default_deny(ns: str = "gpu") -> dict:
    """Nothing in, nothing out, for every pod of the namespace."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "default-deny", "namespace": ns},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}


def worker_network_policy(ns: str = "gpu", egress: list | None = None, labels: dict | None = None) -> dict:
    """The worker pods may reach DNS, the Pod Identity agent and the VPC (the endpoints of S3 and SQS), nothing else."""
    rules = egress if egress is not None else [
        {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                 "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
         "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {"to": [{"ipBlock": {"cidr": "169.254.170.23/32"}}, {"ipBlock": {"cidr": "fd00:ec2::23/128"}}],
         "ports": [{"protocol": "TCP", "port": 80}]},
        {"to": [{"ipBlock": {"cidr": VPC_CIDR}}], "ports": [{"protocol": "TCP", "port": 443}]}]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "slides-worker", "namespace": ns},
            "spec": {"podSelector": {"matchLabels": dict(labels if labels is not None else WORKER_LABELS)},
                     "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": rules}}


def network_boundary(ns: str = "gpu") -> list[dict]:
    """The default-deny and worker NetworkPolicies of a namespace running worker pods."""
    return [entry(T_NETPOL, f"{ns}-default-deny", default_deny(ns)),
            entry(T_NETPOL, f"{ns}-slides-worker", worker_network_policy(ns))]


def pod(sa: str = "slides-worker", ephemeral: str = "52Gi") -> dict:
    amounts = {"cpu": "4", "memory": "24Gi", "ephemeral-storage": ephemeral, "nvidia.com/gpu": 1}
    return {"serviceAccountName": sa, "restartPolicy": "Never",
            "containers": [{"name": "worker", "image": "registry.example/worker@sha256:" + "0" * 64,
                            "resources": {"requests": dict(amounts), "limits": dict(amounts)}}],
            # Tied to the fragment's NodePool 'gpu' (worker-nodepool), still any GPU type of it.
            "nodeSelector": {"nvidia.com/gpu.present": "true", "karpenter.sh/nodepool": "gpu"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}


def scaled_job(sa: str = "slides-worker", auth: str = "slides-sqs", ns: str = "gpu") -> dict:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob", "metadata": {"name": "slides", "namespace": ns},
            "spec": {"jobTargetRef": {"template": {"metadata": {"labels": dict(WORKER_LABELS)}, "spec": pod(sa)},
                                      "backoffLimit": 0}, "maxReplicaCount": 4,
                     "rollout": {"strategy": "gradual"},
                     "triggers": [{"type": "aws-sqs-queue", "authenticationRef": {"name": auth},
                                   "metadata": {"queueURL": f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/slides",
                                                "queueLength": "1", "awsRegion": "us-east-1"}}]}}


def trigger_auth(role_arn: str = SCALER_ARN, name: str = "slides-sqs", ns: str = "gpu") -> dict:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"podIdentity": {"provider": "aws", "roleArn": role_arn}}}


def trust(principal: str) -> str:
    return ('{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "%s"}, '
            '"Action": ["sts:AssumeRole", "sts:TagSession"]}]}' % principal)


def service_account(name: str = "slides-worker", ns: str = "gpu") -> dict:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}}


def association(sa: str = "slides-worker", ns: str = "gpu", cluster: str = "platform") -> dict:
    return {"clusterName": cluster, "namespace": ns, "serviceAccount": sa,
            "roleArn": f"arn:aws:iam::{ACCOUNT}:role/slides-worker-role"}


# -- references to what the platform stack runs ------------------------------------------------------------------------

def existing_keda(**over) -> dict:
    return {"version": catalogue.KEDA_VERSION, "namespace": "keda", "operatorServiceAccount": "keda-operator",
            "operatorRoleArn": OPERATOR_ARN, "scalerRolePath": SCALER_PATH, "watchNamespaces": ["gpu"], **over}


def existing_karpenter(**over) -> dict:
    return {"version": "1.14.0", "namespace": "kube-system", "nodeRoleName": "platform-node-role", **over}


def existing_cluster(**over) -> dict:
    return {"clusterName": "platform", "systemNodeLabels": dict(SYSTEM), "devicePlugin": True,
            "networkPolicyEnforced": True,
            "nodeClasses": {"gpu": {"rootVolumeGiB": 100, "amiAlias": "al2023@latest"}}, **over}


def references(keda: dict | None = None, karpenter: dict | None = None, cluster: dict | None = None) -> list[dict]:
    return [entry(T_KEDA, "platform-keda", keda if keda is not None else existing_keda()),
            entry(T_KARPENTER, "platform-karpenter", karpenter if karpenter is not None else existing_karpenter()),
            entry(T_CLUSTER, "platform-cluster", cluster if cluster is not None else existing_cluster())]


def workload(job: dict | None = None, ta: dict | None = None, sa: dict | None = None, assoc: dict | None = None,
             scaler_role: bool = True, refs: bool = True) -> dict:
    """Fragment (iv): a NodePool, a work queue (with its customer key), a ScaledJob, its TriggerAuthentication,
    ServiceAccount and Pod Identity association, the namespace's default-deny and worker NetworkPolicies (and the scaler
    role, trusting the existing KEDA operator's role), attached through references."""
    entries = [entry(T_NODEPOOL, "gpu-nodepool", gpu_nodepool()), queue_key(), *queues(), *network_boundary(),
               entry(T_SCALEDJOB, "slides", job or scaled_job()), entry(T_TA, "slides-sqs", ta or trigger_auth()),
               entry(T_SA, "slides-sa", sa or service_account()), entry(T_ASSOCIATION, "slides-worker",
                                                                       assoc or association())]
    if scaler_role:
        entries.append(entry(T_ROLE, "slides-scaler", {"name": "slides-scaler", "path": SCALER_PATH,
                                                        "assumeRolePolicy": trust(OPERATOR_ARN)}))
    return doc(*entries, *(references() if refs else []))


def lone_trigger_auth() -> dict:
    """Fragment (i): one TriggerAuthentication whose role another stack created."""
    return doc(entry(T_TA, "x-auth", trigger_auth(OUTSIDE_ROLE_ARN, name="x-auth")))


def chart_props(name: str) -> dict:
    pin = catalogue.CHARTS[name]
    chart = f"{pin.repository}/{pin.chart}" if pin.repository.startswith("oci://") else pin.chart
    return {"chart": chart, "version": pin.version, "namespace": pin.namespace,
            **({} if pin.repository.startswith("oci://") else {"repositoryOpts": {"repo": pin.repository}})}


def controller(name: str, ns: str, sa: str, karpenter: bool) -> dict:
    spec = {"serviceAccountName": sa, "nodeSelector": dict(SYSTEM),
            "containers": [{"name": name, "image": f"registry.example/{name}@sha256:" + "1" * 64}]}
    if karpenter:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}]}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"spec": spec}}}


def chart_fragment(name: str, rendered: bool = True, release: bool = False) -> dict:
    """Fragments (ii) and (iii): the karpenter or keda chart alone, at the pin: a v4 Chart with its controller's
    Deployment and ServiceAccount rendered as children, a v4 Chart without them (shallow), or a v3 Release."""
    props = chart_props(name)
    if release:
        return doc(entry(T_RELEASE, name, props))
    ns = props["namespace"]
    sa = "karpenter" if name == "karpenter" else "keda-operator"
    chart = entry(T_CHART, name, props)
    if not rendered:
        return doc(chart)
    parent = urn(T_CHART, name)
    return doc(chart, entry(T_SA, f"{name}:{ns}/{sa}", service_account(sa, ns), parent),
               entry(T_DEPLOYMENT, f"{name}:{ns}/{sa}", controller(sa, ns, sa, name == "karpenter"), parent))


def without(plan: dict, rtype: str) -> dict:
    """A copy of the plan without the resources of one type."""
    return {**plan, "resources": [r for r in plan["resources"] if r["type"] != rtype]}


def replaced(plan: dict, name: str, props: dict) -> dict:
    """A copy of the plan with one resource's properties replaced."""
    return {**plan, "resources": [{**r, "properties": copy.deepcopy(props)} if r["name"] == name else r
                                  for r in plan["resources"]]}
