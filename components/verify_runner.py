"""VerifyRunner: what `python -m gpuburst verify` needs in the cluster and in IAM, declared as code, and a hook Job.

The RBAC verify needs is ONE table, `RBAC_RULES` (rules as data, each with the checks that use it); the ClusterRole,
the Roles and their bindings are built from it. The Jobs that identity may create are pinned by an admission rule
(a ValidatingAdmissionPolicy, its binding and its params: `spec/verify_admission.py`, which also argues why the log
reads stay): only verify's two probes as built, so no one in the group can run a Job that reads slides as a
workload's ServiceAccount. The AWS actions are `iam_policy` (no `*` action; every resource scoped where the action has
a resource type; on the work queues only GetQueueAttributes and SendMessage, never a receive, delete or visibility
change; S3 only on the probe objects, `*.txt` under the probe folder). The hook Job runs `verify --json - --strict`
after `pulumi up`, named with a short hash of the versions it guards (`guarded_versions_hash`), so a change of
Karpenter, KEDA, the device plugin or the AMI alias makes a new Job; its verdict is one JSON document on the
container's stdout (CloudWatch Container Insights / Fluent Bit ship it: a metric filter on
`{ $.run.exit_status != 0 }` can alarm).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from .catalogue import CHARTS
from .identity import WorkloadIdentity, WorkloadIdentityArgs
from .pod import POD_IDENTITY_AGENT_CIDRS, check_egress_cidrs, pinned_image
from .spec.names import POOL_LABEL, SYSTEM_POOL, WORKER_UID
from .spec.policy_documents import policy_document
from .spec.validation import ConfigError, names_its_errors
from .spec.verify_admission import (
    PROBE_FOLDER,
    PROBE_OBJECT_SUFFIX,
    VERIFY_GROUP,
    VERIFY_SERVICE_ACCOUNT,
    admission_binding_manifest,
    admission_params_data,
    admission_params_manifest,
    admission_policy_manifest,
)

RUNNER_NAME = VERIFY_SERVICE_ACCOUNT
"""Name of the ServiceAccount, ClusterRole, Roles and bindings, and the prefix of the Job and CronJob."""
RUNNER_LABELS = {"app.kubernetes.io/name": RUNNER_NAME, "app.kubernetes.io/part-of": "gpuburst"}
"""Labels of the runner's pods (the NetworkPolicy selects them)."""
KEDA_NAMESPACE = CHARTS["keda"].namespace
KARPENTER_NAMESPACE = CHARTS["karpenter"].namespace
READ = ("get", "list", "watch")
HOOK_SKIPPED_CHECKS = ("scaler-iam",)
"""Checks the in-cluster hook leaves out (`--skip`): scaler-iam reads IAM, a global API with no endpoint in the VPC,
which the runner's NetworkPolicy (HTTPS to the VPC only) cannot reach; run it from CI."""


@dataclass(frozen=True)
class RbacRule:
    """One row of what verify needs from the Kubernetes API."""

    scope: str
    """`cluster` (ClusterRole), or the namespace role it lands in: `workload`, `keda`, `karpenter`."""
    api_group: str
    """API group ("" = core)."""
    resources: tuple[str, ...]
    """Resources (a subresource as `pods/log`)."""
    verbs: tuple[str, ...]
    """Verbs, never `*`."""
    used_by: str
    """The checks (or the lease) that need it."""


RBAC_RULES: tuple[RbacRule, ...] = (
    RbacRule("cluster", "", ("nodes",), READ, "gpu-allocatable, hardware-ami, gpu-job (early stop)"),
    RbacRule("cluster", "", ("pods",), READ, "gpu-allocatable (device-plugin pods), karpenter-health, keda, gpu-job"),
    RbacRule("cluster", "", ("events",), READ, "keda, gpu-job (Nominated), karpenter-health (NodeClaim events)"),
    RbacRule("cluster", "apps", ("deployments", "daemonsets"), READ, "versions, keda, workload-identity"),
    RbacRule("cluster", "apiextensions.k8s.io", ("customresourcedefinitions",), READ, "versions, keda (schema)"),
    RbacRule("cluster", "karpenter.sh", ("nodepools", "nodeclaims"), READ,
             "ami-canary, hardware-ami, karpenter-health, burst"),
    RbacRule("cluster", "karpenter.k8s.aws", ("ec2nodeclasses",), READ, "ami-canary, hardware-ami"),
    RbacRule("cluster", "keda.sh", ("triggerauthentications", "clustertriggerauthentications", "scaledjobs"), READ,
             "keda"),
    RbacRule("workload", "batch", ("jobs",), ("create", "get", "list", "watch", "delete"),
             "gpu-job, keda (probe), workload-identity (a probe Job as the workload's ServiceAccount)"),
    RbacRule("workload", "coordination.k8s.io", ("leases",), ("get", "create", "update", "delete"),
             "the run lock (lease gpuburst-verify)"),
    RbacRule("workload", "", ("pods/log",), ("get",),
             "gpu-job (nvidia-smi), keda (probe acknowledged), workload-identity (its probe Job)"),
    RbacRule("keda", "", ("pods/log",), ("get",), "keda (operator log)"),
    RbacRule("karpenter", "", ("pods/log",), ("get",), "karpenter-health (controller log)"),
)
"""Everything verify asks the Kubernetes API for (docs/verify.md "Permissions verify needs" points here)."""

DESCRIBE_ONLY_ACTIONS = ("ec2:DescribeImages", "ec2:DescribeInstances", "ec2:DescribeInstanceTypes",
                         "eks:DescribeClusterVersions")
"""Actions that have no resource type in IAM (the Service Authorization Reference): they take `Resource: "*"`, held
to the stack's region by `aws:RequestedRegion`."""


def rbac_scopes(workload_namespace: str) -> dict[str, str]:
    """Scope name -> namespace of its Role."""
    return {"workload": workload_namespace, "keda": KEDA_NAMESPACE, "karpenter": KARPENTER_NAMESPACE}


def _policy_rules(rules: list[RbacRule]) -> list[dict[str, Any]]:
    return [{"apiGroups": [r.api_group], "resources": list(r.resources), "verbs": list(r.verbs)} for r in rules]


def _subjects(service_account: str, namespace: str) -> list[dict[str, Any]]:
    return [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace},
            {"kind": "Group", "name": VERIFY_GROUP, "apiGroup": "rbac.authorization.k8s.io"}]


CHECKOV_TOKEN_SKIP = {"checkov.io/skip1": "CKV_K8S_38=verify calls the Kubernetes API as its own ServiceAccount "
                                          "(RBAC_RULES), so its pod mounts the token; every other pod of the stack "
                                          "does not"}
"""checkov's per-resource skip of 'Service Account Tokens only where necessary' on the runner's Job and CronJob:
here the token is necessary (the check still holds for every other pod)."""


def cluster_role_manifest(name: str = RUNNER_NAME) -> dict[str, Any]:
    """The ClusterRole of the cluster-wide reads (RBAC_RULES scope `cluster`)."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": dict(RUNNER_LABELS)},
            "rules": _policy_rules([r for r in RBAC_RULES if r.scope == "cluster"])}


def cluster_role_binding_manifest(namespace: str, name: str = RUNNER_NAME) -> dict[str, Any]:
    """Binds the ClusterRole to the runner's ServiceAccount and VERIFY_GROUP."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": dict(RUNNER_LABELS)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": _subjects(name, namespace)}


def role_manifests(namespace: str, name: str = RUNNER_NAME) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(Role, RoleBinding) per namespace of the namespaced rules; scopes sharing a namespace share one Role."""
    by_namespace: dict[str, list[RbacRule]] = {}
    for scope, ns in rbac_scopes(namespace).items():
        by_namespace.setdefault(ns, []).extend(r for r in RBAC_RULES if r.scope == scope)
    out = []
    for ns, rules in by_namespace.items():
        meta = {"name": name, "namespace": ns, "labels": dict(RUNNER_LABELS)}
        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
                "rules": _policy_rules(rules)}
        binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": dict(meta),
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                   "subjects": _subjects(name, namespace)}
        out.append((role, binding))
    return out


def iam_policy(*, region: str, cluster_arn: pulumi.Input[str], queue_arns: list[pulumi.Input[str]],
               results_bucket_arn: pulumi.Input[str], results_prefix: str,
               worker_role_arns: list[pulumi.Input[str]] | None = None,
               inspected_role_arns: list[pulumi.Input[str]] | None = None,
               inspected_policy_arns: list[pulumi.Input[str]] | None = None,
               kms_key_arn: pulumi.Input[str] | None = None) -> dict[str, Any]:
    """The runner role's policy: the AWS calls verify makes (docs/verify.md's checks table), nothing with `*`
    actions. `worker_role_arns`: sts:AssumeRole on them (worker-iam tests the worker's own role; their trust must
    allow this role). Without them worker-iam runs with the runner's ambient credentials. `inspected_role_arns`: the
    worker, scaler and KEDA operator roles whose policies verify reads (iam:GetRole, the inline and attached
    policies' lists); `inspected_policy_arns`: managed policies attached to them (iam:GetPolicy, GetPolicyVersion)."""
    prefix = results_prefix if results_prefix.endswith("/") else results_prefix + "/"
    # `*.txt`: every probe object's key ends so and no worker output does, so a work message verify sends (it may
    # send to the queue) cannot have the worker write a slide's overlay or preview where verify may read it.
    objects = f"{prefix}{PROBE_FOLDER}*{PROBE_OBJECT_SUFFIX}"
    probe_objects = (f"{results_bucket_arn}/{objects}" if isinstance(results_bucket_arn, str)
                     else pulumi.Output.concat(results_bucket_arn, "/", objects))
    statements: list[dict] = [
        {"Sid": "DescribeCluster", "Effect": "Allow", "Action": ["eks:DescribeCluster"], "Resource": [cluster_arn]},
        {"Sid": "DescribeWithoutResourceType", "Effect": "Allow", "Action": list(DESCRIBE_ONLY_ACTIONS),
         "Resource": "*", "Condition": {"StringEquals": {"aws:RequestedRegion": region}}},
    ]
    if queue_arns:
        # Send and look only: SQS cannot limit a receive, delete or visibility change to one message (a receive hands
        # out whatever is visible, counting toward the dead-letter queue), so the KEDA probe never makes one and the
        # role may not (components/verify/keda_probe.py; the opt-in burst check runs with an operator's rights).
        statements.append({"Sid": "KedaProbe", "Effect": "Allow",
                           "Action": ["sqs:GetQueueAttributes", "sqs:SendMessage"], "Resource": list(queue_arns)})
    statements.append({"Sid": "WorkerIamProbeObjects", "Effect": "Allow",
                       "Action": ["s3:PutObject", "s3:GetObject", "s3:DeleteObject"], "Resource": [probe_objects]})
    if kms_key_arn is not None:
        statements.append({"Sid": "DataKeyThroughSqsAndS3", "Effect": "Allow",
                           "Action": ["kms:GenerateDataKey", "kms:Decrypt"], "Resource": [kms_key_arn],
                           "Condition": {"StringEquals": {"kms:ViaService": [f"sqs.{region}.amazonaws.com",
                                                                             f"s3.{region}.amazonaws.com"]}}})
    associations = (association_arns(cluster_arn) if isinstance(cluster_arn, str)
                    else pulumi.Output.from_input(cluster_arn).apply(association_arns))
    statements.append({"Sid": "PodIdentityAssociations", "Effect": "Allow",
                       "Action": ["eks:ListPodIdentityAssociations", "eks:DescribePodIdentityAssociation"],
                       "Resource": [cluster_arn, associations]})
    if inspected_role_arns:
        statements.append({"Sid": "ReadWorkloadRoles", "Effect": "Allow",
                           "Action": ["iam:GetRole", "iam:ListRolePolicies", "iam:GetRolePolicy",
                                      "iam:ListAttachedRolePolicies"],
                           "Resource": list(inspected_role_arns)})
    if inspected_policy_arns:
        statements.append({"Sid": "ReadAttachedPolicies", "Effect": "Allow",
                           "Action": ["iam:GetPolicy", "iam:GetPolicyVersion"],
                           "Resource": list(inspected_policy_arns)})
    if worker_role_arns:
        statements.append({"Sid": "AssumeWorkerRoles", "Effect": "Allow", "Action": ["sts:AssumeRole"],
                           "Resource": list(worker_role_arns)})
    return policy_document(statements)


def association_arns(cluster_arn: str) -> str:
    """`arn:…:eks:…:podidentityassociation/<cluster>/*` for a cluster's ARN (`arn:…:eks:…:cluster/<cluster>`)."""
    return cluster_arn.replace(":cluster/", ":podidentityassociation/", 1) + "/*"


def guarded_versions_hash(versions: dict[str, str]) -> str:
    """8 hex digits over the guarded versions (sorted keys): the Job's name suffix."""
    text = "\n".join(f"{k}={versions[k]}" for k in sorted(versions))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def verify_command(*, namespace: str, nodepool: pulumi.Input[str], cluster_name: pulumi.Input[str], region: str,
                   queue_urls: list[pulumi.Input[str]], results_bucket: pulumi.Input[str], results_prefix: str,
                   worker_image: pulumi.Input[str], worker_role_arns: list[pulumi.Input[str]] | None = None,
                   skip_checks: tuple[str, ...] = ()) -> list[pulumi.Input[str]]:
    """`python -m gpuburst verify --json - --strict` with every setting as a flag (no pulumi CLI in the pod)."""
    cmd: list[pulumi.Input[str]] = ["python", "-m", "gpuburst", "verify", "--json", "-", "--strict",
                                    "--namespace", namespace, "--nodepool", nodepool, "--cluster-name", cluster_name,
                                    "--region", region, "--results-bucket", results_bucket,
                                    "--results-prefix", results_prefix, "--image", worker_image]
    for url in queue_urls:
        cmd += ["--queue-url", url]
    for arn in worker_role_arns or []:
        cmd += ["--worker-role-arn", arn]
    if skip_checks:
        cmd += ["--skip", ",".join(skip_checks)]
    return cmd


TMP_PATH = "/tmp"


def runner_pod_spec(image: pulumi.Input[str], command: list[pulumi.Input[str]], *, region: str,
                    service_account: str = RUNNER_NAME) -> dict[str, Any]:
    """The runner's PodSpec, hardened like the worker's (non-root, read-only root, no privilege escalation, drop ALL,
    seccomp RuntimeDefault, resources), on the system nodes. It mounts its API token: verify calls the API."""
    security = {"runAsNonRoot": True, "runAsUser": WORKER_UID, "runAsGroup": WORKER_UID,
                "allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    resources = {"cpu": "250m", "memory": "512Mi", "ephemeral-storage": "1Gi"}
    return {
        "serviceAccountName": service_account,
        "automountServiceAccountToken": True,
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": WORKER_UID, "runAsGroup": WORKER_UID,
                            "fsGroup": WORKER_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "nodeSelector": {POOL_LABEL: SYSTEM_POOL},
        "containers": [{
            "name": "verify", "image": pinned_image(image), "imagePullPolicy": "IfNotPresent",
            "command": list(command),
            "env": [{"name": "AWS_REGION", "value": region}, {"name": "HOME", "value": TMP_PATH},
                    {"name": "TMPDIR", "value": TMP_PATH},
                    {"name": "AWS_STS_REGIONAL_ENDPOINTS", "value": "regional"},
                    {"name": "AWS_S3_US_EAST_1_REGIONAL_ENDPOINT", "value": "regional"}],
            "resources": {"requests": dict(resources), "limits": dict(resources)},
            "securityContext": security,
            "volumeMounts": [{"name": "tmp", "mountPath": TMP_PATH}],
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}],
        "hostNetwork": False, "hostPID": False, "hostIPC": False, "enableServiceLinks": False,
    }


def job_spec(pod_spec: dict[str, Any], *, deadline_s: int, ttl_s: int) -> dict[str, Any]:
    """A Job spec running the pod once (no retry: a second run would only repeat the verdict)."""
    return {"backoffLimit": 0, "activeDeadlineSeconds": deadline_s, "ttlSecondsAfterFinished": ttl_s,
            "template": {"metadata": {"labels": dict(RUNNER_LABELS)}, "spec": pod_spec}}


def runner_network_policy(namespace: str, egress_cidrs: Any, name: str = RUNNER_NAME) -> dict[str, Any]:
    """No ingress; egress to DNS, the Pod Identity agent, and HTTPS to the VPC CIDR(s) (the EKS API endpoint's
    ENIs and the AWS interface endpoints live there), never 0.0.0.0/0."""
    cidrs = check_egress_cidrs(egress_cidrs)
    if not cidrs:
        raise ConfigError("VerifyRunnerArgs.egress_cidrs", egress_cidrs,
                          "the VPC's private CIDR(s): verify must reach the API server and the AWS endpoints")
    egress = [
        {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                 "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
         "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {"to": [{"ipBlock": {"cidr": c}} for c in POD_IDENTITY_AGENT_CIDRS],
         "ports": [{"protocol": "TCP", "port": 80}]},
        {"to": [{"ipBlock": {"cidr": c}} for c in cidrs], "ports": [{"protocol": "TCP", "port": 443}]},
    ]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(RUNNER_LABELS)},
            "spec": {"podSelector": {"matchLabels": dict(RUNNER_LABELS)}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": [], "egress": egress}}


@dataclass(kw_only=True)
class VerifyRunnerArgs:
    """Inputs of a VerifyRunner (keyword-only)."""

    image: pulumi.Input[str]
    """An image with gpuburst installed (`python -m gpuburst verify`), pinned by digest. No default: the worker image
    ships worker/ only; the stack names one (`gpuburst:verifyImage`)."""
    cluster_name: pulumi.Input[str]
    """EKS cluster (Pod Identity association, `--cluster-name`). Required."""
    region: str
    """AWS region of the stack. Required."""
    namespace: str
    """Workload namespace: the ServiceAccount, the Job, the lease and verify's probe Jobs. Required."""
    nodepool: pulumi.Input[str]
    """The GPU NodePool's name (`--nodepool`). Required."""
    worker_image: pulumi.Input[str]
    """The worker image for the gpu-job check (`--image`). Required."""
    queue_urls: list[pulumi.Input[str]]
    """The work queues' URLs (`--queue-url`). Required (may be empty)."""
    queue_arns: list[pulumi.Input[str]]
    """The same queues' ARNs (the KEDA probe's SQS rights). Required (may be empty)."""
    results_bucket: pulumi.Input[str]
    """Results bucket name (`--results-bucket`). Required."""
    results_bucket_arn: pulumi.Input[str]
    """Its ARN (the worker-iam probe object's S3 rights). Required."""
    egress_cidrs: tuple[str, ...]
    """Where the runner may send HTTPS: the VPC's private CIDR(s). Required; 0.0.0.0/0 is refused."""
    guarded_versions: dict[str, str]
    """What the hook guards (name -> version): a change of any makes a new Job. Required."""
    results_prefix: str = "results/"
    """Results key prefix (`--results-prefix`). Default `results/`."""
    cluster_arn: pulumi.Input[str] | None = None
    """The cluster's ARN (eks:DescribeCluster, the role's trust condition). Default None: from the AWS provider's
    partition, region and account (`identity.cluster_arn`)."""
    kms_key_arn: pulumi.Input[str] | None = None
    """The queues' and bucket's customer-managed key (kms:GenerateDataKey/Decrypt via SQS and S3). Default None."""
    role_path: str = "/"
    """IAM path of the runner's role (a key policy naming a path admits it). Default `/`."""
    worker_role_arns: list[pulumi.Input[str]] = field(default_factory=list)
    """Worker roles worker-iam assumes (`--worker-role-arn`, sts:AssumeRole); their trust must allow the runner's
    role. Default none: worker-iam uses the runner's ambient credentials."""
    inspected_role_arns: list[pulumi.Input[str]] = field(default_factory=list)
    """Worker, scaler and KEDA operator roles whose policies the scaler-iam check reads (iam:GetRole and the role's
    policy lists). Default none."""
    inspected_policy_arns: list[pulumi.Input[str]] = field(default_factory=list)
    """Managed policies attached to those roles (iam:GetPolicy, iam:GetPolicyVersion). Default none: the
    platform's roles carry inline policies only."""
    ci_principal_arn: pulumi.Input[str] | None = None
    """An IAM principal (a CI role) given an EKS access entry in group VERIFY_GROUP, i.e. the same RBAC. Default
    None: none."""
    schedule: str | None = None
    """Cron schedule of a daily CronJob with the same pod (e.g. `0 6 * * *`, UTC). Default None: no CronJob."""
    deadline_s: int = 1800
    """activeDeadlineSeconds of the Job: above verify's --timeout-s (900) plus the KEDA probe waits. Default 1800."""
    ttl_s: int = 86400
    """ttlSecondsAfterFinished: the finished Job (and its log) is kept a day, then deleted. Default 86400."""
    probe_service_accounts: list[str] = field(default_factory=list)
    """The workloads' ServiceAccounts the identity probe may run as (the admission rule's params). Default none:
    then only the gpu-job (no ServiceAccount) is admitted and workload-identity reports its probes refused."""
    probe_env_names: list[str] = field(default_factory=list)
    """Env names the workloads' containers set, which the identity probe copies (the admission rule's params; HOME,
    TMPDIR and NVIDIA_DRIVER_CAPABILITIES are always allowed). Default none."""
    skip_checks: tuple[str, ...] = HOOK_SKIPPED_CHECKS
    """Checks the hook passes to `--skip` (each must be one of verify's check names). Default HOOK_SKIPPED_CHECKS."""
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    """What must exist before the hook runs (charts, NodePool, workloads). Default none."""


@names_its_errors
class VerifyRunner(pulumi.ComponentResource):
    """ServiceAccount + the admission rule on its Jobs + RBAC from RBAC_RULES + a Pod Identity role + NetworkPolicy +
    the hook Job (+ CronJob)."""

    service_account: k8s.core.v1.ServiceAccount
    admission_params: k8s.core.v1.ConfigMap
    admission_policy: k8s.admissionregistration.v1.ValidatingAdmissionPolicy
    admission_binding: k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding
    cluster_role: k8s.rbac.v1.ClusterRole
    identity: WorkloadIdentity
    network_policy: k8s.networking.v1.NetworkPolicy
    job_name: str
    job: k8s.batch.v1.Job
    role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: VerifyRunnerArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        if not args.guarded_versions:
            raise ConfigError("VerifyRunnerArgs.guarded_versions", args.guarded_versions,
                              "a non-empty map of name -> version")
        netpol = runner_network_policy(args.namespace, args.egress_cidrs)
        super().__init__("gpuburst:index:VerifyRunner", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns = args.namespace
        arn = args.cluster_arn if args.cluster_arn is not None else self._cluster_arn(args.cluster_name)
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata={"name": RUNNER_NAME, "namespace": ns, "labels": dict(RUNNER_LABELS)},
            automount_service_account_token=False, opts=child)
        # The admission rule pinning the Jobs the verify identity may create (spec/verify_admission.py): the RBAC
        # bindings wait for it, so the right to create Jobs never exists without it.
        params = admission_params_manifest(ns, admission_params_data(
            image=pinned_image(args.worker_image), results_bucket=args.results_bucket,
            results_prefix=args.results_prefix, service_accounts=args.probe_service_accounts,
            env_names=args.probe_env_names))
        self.admission_params = k8s.core.v1.ConfigMap(f"{name}-admission-params", metadata=params["metadata"],
                                                      data=params["data"], opts=child)
        vap = admission_policy_manifest(ns)
        self.admission_policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
            f"{name}-admission", metadata=vap["metadata"], spec=vap["spec"], opts=child)
        vapb = admission_binding_manifest(ns)
        self.admission_binding = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
            f"{name}-admission-binding", metadata=vapb["metadata"], spec=vapb["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.admission_policy, self.admission_params]))
        admitted = pulumi.ResourceOptions(parent=self, depends_on=[self.admission_binding])
        cr = cluster_role_manifest()
        self.cluster_role = k8s.rbac.v1.ClusterRole(f"{name}-clusterrole", metadata=cr["metadata"], rules=cr["rules"],
                                                    opts=child)
        crb = cluster_role_binding_manifest(ns)
        bindings: list[pulumi.Resource] = [k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-clusterrolebinding", metadata=crb["metadata"], role_ref=crb["roleRef"], subjects=crb["subjects"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.cluster_role, self.admission_binding]))]
        for role_m, binding_m in role_manifests(ns):
            where = role_m["metadata"]["namespace"]
            role = k8s.rbac.v1.Role(f"{name}-role-{where}", metadata=role_m["metadata"], rules=role_m["rules"],
                                    opts=child)
            bindings.append(k8s.rbac.v1.RoleBinding(
                f"{name}-rolebinding-{where}", metadata=binding_m["metadata"], role_ref=binding_m["roleRef"],
                subjects=binding_m["subjects"], opts=pulumi.ResourceOptions.merge(
                    admitted, pulumi.ResourceOptions(depends_on=[role]))))
        self.identity = WorkloadIdentity(f"{name}-identity", WorkloadIdentityArgs(
            cluster_name=args.cluster_name, namespace=ns, service_account=RUNNER_NAME, cluster_arn=arn,
            role_path=args.role_path,
            policy=iam_policy(region=args.region, cluster_arn=arn, queue_arns=list(args.queue_arns),
                              results_bucket_arn=args.results_bucket_arn, results_prefix=args.results_prefix,
                              worker_role_arns=list(args.worker_role_arns),
                              inspected_role_arns=list(args.inspected_role_arns),
                              inspected_policy_arns=list(args.inspected_policy_arns), kms_key_arn=args.kms_key_arn)),
            opts=child)
        self.network_policy = k8s.networking.v1.NetworkPolicy(
            f"{name}-netpol", metadata=netpol["metadata"], spec=netpol["spec"], opts=child)
        self.access_entry: aws.eks.AccessEntry | None = None
        if args.ci_principal_arn is not None:
            # The group carries the rights (the bindings above name it); no AWS-managed access policy is associated:
            # each of those grants more than RBAC_RULES.
            self.access_entry = aws.eks.AccessEntry(
                f"{name}-ci-access", cluster_name=args.cluster_name, principal_arn=args.ci_principal_arn,
                kubernetes_groups=[VERIFY_GROUP], type="STANDARD", opts=admitted)
        command = verify_command(namespace=ns, nodepool=args.nodepool, cluster_name=args.cluster_name,
                                 region=args.region, queue_urls=list(args.queue_urls),
                                 results_bucket=args.results_bucket, results_prefix=args.results_prefix,
                                 worker_image=args.worker_image, worker_role_arns=list(args.worker_role_arns),
                                 skip_checks=tuple(args.skip_checks))
        pod = runner_pod_spec(args.image, command, region=args.region)
        spec = job_spec(pod, deadline_s=args.deadline_s, ttl_s=args.ttl_s)
        self.job_name = f"{RUNNER_NAME}-{guarded_versions_hash(args.guarded_versions)}"
        ready = pulumi.ResourceOptions(parent=self, depends_on=[
            self.service_account, *bindings, self.identity, self.network_policy, *args.depends_on])
        # skipAwait: verify may take longer than the provider's Job wait; its verdict is the Job's log and status.
        self.job = k8s.batch.v1.Job(
            f"{name}-job", metadata={"name": self.job_name, "namespace": ns, "labels": dict(RUNNER_LABELS),
                                     "annotations": {"pulumi.com/skipAwait": "true", **CHECKOV_TOKEN_SKIP,
                                                     **{f"gpuburst.io/guards-{k}": v
                                                        for k, v in sorted(args.guarded_versions.items())}}},
            spec=spec, opts=ready)
        self.cron_job: k8s.batch.v1.CronJob | None = None
        if args.schedule is not None:
            self.cron_job = k8s.batch.v1.CronJob(
                f"{name}-cron", metadata={"name": f"{RUNNER_NAME}-daily", "namespace": ns,
                                          "labels": dict(RUNNER_LABELS), "annotations": dict(CHECKOV_TOKEN_SKIP)},
                spec={"schedule": args.schedule, "timeZone": "Etc/UTC", "concurrencyPolicy": "Forbid",
                      "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 3,
                      "jobTemplate": {"metadata": {"labels": dict(RUNNER_LABELS)}, "spec": spec}}, opts=ready)
        self.role_arn = self.identity.role_arn
        self.register_outputs({"jobName": self.job_name, "roleArn": self.identity.role_arn})

    def _cluster_arn(self, cluster_name: pulumi.Input[str]) -> pulumi.Output[str]:
        """The cluster's ARN from the AWS provider's partition, region and caller identity (known during preview)."""
        from .identity import cluster_arn

        invoke = pulumi.InvokeOutputOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        region = aws.get_region_output(opts=invoke).region
        account = aws.get_caller_identity_output(opts=invoke).account_id
        return pulumi.Output.all(partition, region, account, cluster_name).apply(lambda a: cluster_arn(*a))
