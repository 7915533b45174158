"""The hardened GPU worker pod (spec and template) that both the ScaledJob and the consumer Deployment run.

Clinical research data passes through these pods, so the pod is locked down the same way for both patterns:
non-root numeric user, read-only root filesystem with scratch on size-limited `emptyDir` volumes, no privilege
escalation, all capabilities dropped, seccomp `RuntimeDefault`, an image pinned by digest, no Kubernetes API token.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi

from .catalogue.network import DEFAULT_VPC_CIDR
from .spec.model_cache_admission import cache_sub_path
from .spec.names import GPU_NODE_SELECTOR, GPU_RESOURCE, GPU_TOLERATION, NODEPOOL_LABEL, WORKER_UID
from .spec.policy_documents import (
    dead_letter_sender_statements,
    policy_document,
    queue_consumer_statements,
    s3_object_read_statements,
    s3_prefix_statements,
)
from .spec.quantity import fmt_cpu
from .spec.validation import ConfigError
from .spec.worker_pod import (
    DO_NOT_DISRUPT,
    MODEL_CACHE_PATH,
    SCRATCH_PATH,
    TMP_PATH,
    ModelMount,
    WorkerPodSettings,
    check_settings,
    checked_image,
    model_object_arn,
)

if TYPE_CHECKING:
    import pulumi_kubernetes as k8s

    from .identity import WorkloadIdentity
    from .nodepool import GpuNodePool

_NODEPOOL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


def worker_node_selector(nodepool: str | None) -> dict[str, str]:
    """The worker pod's nodeSelector: any GPU node (`nvidia.com/gpu.present`), and with `nodepool` only the nodes of
    that Karpenter NodePool (`karpenter.sh/nodepool`, the well-known label Karpenter sets on every node it launches
    and matches in pod scheduling constraints: karpenter.sh docs, Scheduling, "Well-Known Labels"), so a team's pods
    never take another team's GPUs and the pool's `gpu_limit` caps what the team runs."""
    if nodepool is None:
        return dict(GPU_NODE_SELECTOR)
    if not (isinstance(nodepool, str) and _NODEPOOL_NAME.match(nodepool)):
        raise ConfigError("WorkerAccessArgs.nodepool", nodepool,
                          "a NodePool name (lower-case letters, digits, '-', '.'), a GpuNodePool, or None")
    return {**GPU_NODE_SELECTOR, NODEPOOL_LABEL: nodepool}


def workload_nodepool(nodepool: GpuNodePool | str | None) -> tuple[str | None, list[pulumi.Resource]]:
    """(the NodePool name the workload's pods select, what the workload waits for) from `WorkerAccessArgs.nodepool`:
    a GpuNodePool gives its name and its NodePool resource (the pods are created after the pool), a str only the
    name, None neither."""
    if nodepool is None or isinstance(nodepool, str):
        return nodepool, []
    name = getattr(nodepool, "nodepool_name", None)
    resource = getattr(nodepool, "resource", None)
    if not isinstance(name, str):
        raise ConfigError("WorkerAccessArgs.nodepool", nodepool, "a GpuNodePool, a NodePool name, or None")
    return name, [resource] if isinstance(resource, pulumi.Resource) else []


def pinned_image(image: pulumi.Input[str]) -> pulumi.Input[str]:
    """`image` after the digest check: at once for a plain str, inside `.apply` for an Output (e.g. the image
    build's `ref`), so an unpinned reference fails the deployment either way. Unknown values (preview) pass."""
    if isinstance(image, str):
        return checked_image(image)
    return pulumi.Output.from_input(image).apply(checked_image)


def worker_env(s: WorkerPodSettings, queue_url: pulumi.Input[str]) -> list[dict[str, Any]]:
    """The worker's environment: the queue, visibility and grace settings, scratch folders, then `s.env`."""
    env: list[dict[str, Any]] = [
        {"name": "QUEUE_URL", "value": queue_url},
        {"name": "VISIBILITY_TIMEOUT", "value": str(s.visibility_timeout_s)},
        {"name": "VISIBILITY_EXTENSION_INTERVAL", "value": str(s.extension_interval_s)},
        {"name": "GRACE_PERIOD", "value": str(s.grace_period_s)},
        {"name": "SCRATCH_DIR", "value": SCRATCH_PATH},
        {"name": "TMPDIR", "value": TMP_PATH},
        # The root filesystem is read-only and uid 10001 has no home directory: caches (torch, CUDA kernels) go
        # under the writable /tmp.
        {"name": "HOME", "value": TMP_PATH},
        {"name": "XDG_CACHE_HOME", "value": f"{TMP_PATH}/.cache"},
        {"name": "AWS_REGION", "value": s.region},
        # Regional S3 and STS hosts: the SDKs' us-east-1 default for S3 is the global s3.amazonaws.com, which the
        # VPC's S3 interface endpoint (private DNS) does not answer for, and the worker may send HTTPS only into the
        # VPC (worker_network_policy).
        {"name": "AWS_S3_US_EAST_1_REGIONAL_ENDPOINT", "value": "regional"},
        {"name": "AWS_STS_REGIONAL_ENDPOINTS", "value": "regional"},
        # 'cuda', not 'auto': on a node without a usable GPU the worker exits 3 at once instead of running on CPU.
        {"name": "DEVICE", "value": "cuda"},
    ]
    if s.precision is not None:
        env.append({"name": "PRECISION", "value": s.precision})
    if s.model is not None:
        env += [{"name": "MODEL_URI", "value": s.model.uri}, {"name": "MODEL_SHA256", "value": s.model.sha256}]
        if s.model.cache_claim is not None:
            env += [{"name": "MODEL_CACHE_DIR", "value": MODEL_CACHE_PATH},
                    {"name": "MODEL_CACHE_MAX_BYTES", "value": str(s.model.cache_max_bytes)}]
    env += [{"name": k, "value": v} for k, v in sorted(s.env.items())]
    return env


def model_cache_volume(m: ModelMount | None,
                       namespace: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, volumeMounts) of the node-local model cache: the cache's PersistentVolumeClaim (a hostPath volume
    on the GPU node, `model_cache.py`) mounted read-write at MODEL_CACHE_PATH with the workload's own folder,
    `<namespace>/<cache_sub_path>` (`model_cache_admission.cache_sub_path`), as subPath, so a pod sees its workload's
    models only; the cluster's admission rule refuses any other folder than one under the pod's namespace. Empty
    without a model or a cache; ConfigError when the cache is mounted and `namespace` is None. The worker re-verifies
    every model's digest when it reads it from there."""
    if m is None or m.cache_claim is None:
        return [], []
    if not isinstance(namespace, str) or not namespace:
        raise ConfigError("namespace", namespace, "the worker pod's namespace: the model cache's subPath is "
                                                  "'<namespace>/<ModelMount.cache_sub_path>'")
    return ([{"name": "model-cache", "persistentVolumeClaim": {"claimName": m.cache_claim}}],
            [{"name": "model-cache", "mountPath": MODEL_CACHE_PATH,
              "subPath": cache_sub_path(namespace, str(m.cache_sub_path))}])


def hardened_pod_spec(s: WorkerPodSettings, *, command: list[pulumi.Input[str]], queue_url: pulumi.Input[str],
                      service_account_name: str, restart_policy: str, nodepool: str | None = None,
                      namespace: str | None = None) -> dict[str, Any]:
    """A PodSpec (plain dict, may hold Outputs) running `command` in the hardened worker container, on the nodes of
    NodePool `nodepool` when given (`worker_node_selector`). `namespace`: the pod's, required with a model cache
    (its subPath is under it, `model_cache_volume`).

    No liveness/readiness probes: a job must not be restarted by a probe mid-slide (its success is its exit code),
    and the consumer serves no traffic (no Service) while its progress is watched through the queue.
    `automountServiceAccountToken: false`: the worker never calls the Kubernetes API, and EKS Pod Identity does not
    need the API token mount; its webhook adds its own projected token (audience pods.eks.amazonaws.com) and the
    AWS_CONTAINER_CREDENTIALS_FULL_URI / AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE variables at admission.
    """
    check_settings(s)
    if restart_policy not in ("Never", "OnFailure", "Always"):
        raise ConfigError("restartPolicy", restart_policy, "Never, OnFailure or Always")
    ephemeral_gib = s.scratch_gib + s.tmp_gib
    cache_volumes, cache_mounts = model_cache_volume(s.model, namespace)
    resources = {
        "requests": {"cpu": fmt_cpu(s.cpu_cores), "memory": f"{s.memory_gib}Gi",
                     "ephemeral-storage": f"{ephemeral_gib}Gi", GPU_RESOURCE: str(s.gpus)},
        "limits": {"cpu": fmt_cpu(s.cpu_cores), "memory": f"{s.memory_gib}Gi",
                   "ephemeral-storage": f"{ephemeral_gib}Gi", GPU_RESOURCE: str(s.gpus)},
    }
    container = {
        "name": "worker",
        "image": pinned_image(s.image),
        "imagePullPolicy": "IfNotPresent",
        "command": list(command),
        "env": worker_env(s, queue_url),
        "resources": resources,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": WORKER_UID,
            "runAsGroup": WORKER_UID,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "scratch", "mountPath": SCRATCH_PATH},
            {"name": "tmp", "mountPath": TMP_PATH},
            *cache_mounts,
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {
        "serviceAccountName": service_account_name,
        "automountServiceAccountToken": False,
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": s.termination_grace_period_s,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": WORKER_UID,
            "runAsGroup": WORKER_UID,
            "fsGroup": WORKER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        **({"priorityClassName": s.priority_class_name} if s.priority_class_name else {}),
        "nodeSelector": worker_node_selector(nodepool),
        "tolerations": [dict(GPU_TOLERATION)],
        "containers": [container],
        "volumes": [
            {"name": "scratch", "emptyDir": {"sizeLimit": f"{s.scratch_gib}Gi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": f"{s.tmp_gib}Gi"}},
            *cache_volumes,
        ],
        # No host namespaces, and no service-link variables (they would list other services' addresses in the env).
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "enableServiceLinks": False,
    }


def hardened_pod_template(s: WorkerPodSettings, *, command: list[pulumi.Input[str]], queue_url: pulumi.Input[str],
                          service_account_name: str, restart_policy: str, labels: dict[str, str],
                          nodepool: str | None = None, namespace: str | None = None) -> dict[str, Any]:
    """A PodTemplateSpec: `hardened_pod_spec` plus labels, the karpenter.sh/do-not-disrupt annotation and
    `s.annotations`."""
    return {
        "metadata": {"labels": dict(labels), "annotations": {**s.annotations, **DO_NOT_DISRUPT}},
        "spec": hardened_pod_spec(s, command=command, queue_url=queue_url,
                                  service_account_name=service_account_name, restart_policy=restart_policy,
                                  nodepool=nodepool, namespace=namespace),
    }


def worker_policy(queue_arn: pulumi.Input[str], bucket_arn: pulumi.Input[str], slides_prefix: str,
                  results_prefix: str, *, slides_bucket_arn: pulumi.Input[str] | None = None,
                  queue_kms_key_arn: pulumi.Input[str] | None = None,
                  bucket_kms_key_arn: pulumi.Input[str] | None = None,
                  slides_bucket_kms_key_arn: pulumi.Input[str] | None = None,
                  dead_letter_queue_arn: pulumi.Input[str] | None = None,
                  model: ModelMount | None = None) -> dict[str, Any]:
    """The worker role's policy: consume its one queue; read slides; read and write results (nothing with `*`).

    With `model`, the worker may also `s3:GetObject` that one model object (its exact ARN: no other key of the
    model's bucket, no listing) and, when it names a key, `kms:Decrypt` with it through S3.

    With `dead_letter_queue_arn`, the worker may also send to its dead-letter queue: a message that can never
    succeed (malformed, missing slide) goes there at once with its reason instead of failing maxReceiveCount times.

    `bucket_arn` holds the results; the slides are in `slides_bucket_arn` when given, else in the same bucket.
    Results are read as well as written so the worker can see a result that already exists (a redelivered
    message) and skip the work. Slides are only ever read.
    """
    same_bucket = slides_bucket_arn is None or (isinstance(slides_bucket_arn, str) and slides_bucket_arn == bucket_arn)
    if same_bucket and isinstance(slides_prefix, str) and isinstance(results_prefix, str) and (
            results_prefix.startswith(slides_prefix) or slides_prefix.startswith(results_prefix)):
        raise ConfigError("results_prefix", results_prefix,
                          f"a prefix that neither contains nor lies inside slides_prefix {slides_prefix!r} in the "
                          "same bucket (the worker may never write where the slides are)")
    statements = queue_consumer_statements(queue_arn, kms_key_arn=queue_kms_key_arn)
    if dead_letter_queue_arn is not None:
        # The DLQ shares the work queue's key: sending to it needs kms:GenerateDataKey as well.
        statements += dead_letter_sender_statements(dead_letter_queue_arn, kms_key_arn=queue_kms_key_arn)
    if same_bucket:
        statements += s3_prefix_statements(bucket_arn, [slides_prefix, results_prefix], [results_prefix],
                                           kms_key_arn=bucket_kms_key_arn)
    else:
        statements += s3_prefix_statements(slides_bucket_arn, [slides_prefix], [],
                                           kms_key_arn=slides_bucket_kms_key_arn)
        statements += s3_prefix_statements(bucket_arn, [results_prefix], [results_prefix],
                                           kms_key_arn=bucket_kms_key_arn)
    if model is not None:
        statements += s3_object_read_statements(model_object_arn(model.uri), kms_key_arn=model.kms_key_arn)
    return policy_document(statements)


POD_IDENTITY_AGENT_CIDRS = ("169.254.170.23/32", "fd00:ec2::23/128")
"""Where the EKS Pod Identity agent listens (link-local, port 80, on every node): the worker's AWS credentials."""


def check_egress_cidrs(cidrs: Any) -> tuple[str, ...]:
    """`cidrs` as a tuple after the check: private IPv4 CIDRs (the VPC's), never 0.0.0.0/0 or ::/0; ConfigError in
    one line naming `WorkerAccessArgs.egress_cidrs` otherwise. None or empty: no HTTPS egress at all."""
    from .network import private_cidr_problem

    if cidrs is None:
        return ()
    if isinstance(cidrs, str) or not isinstance(cidrs, (list, tuple)):
        raise ConfigError("WorkerAccessArgs.egress_cidrs", cidrs, "a list of CIDRs such as ['10.64.0.0/16']")
    for cidr in cidrs:
        problem = private_cidr_problem(cidr)
        if problem:
            raise ConfigError("WorkerAccessArgs.egress_cidrs", cidr,
                              f"{problem}: the VPC's private CIDR, where the interface endpoints live")
    return tuple(cidrs)


def worker_network_policy(name: str, namespace: str, pod_labels: dict[str, str], *,
                          egress_cidrs: Any) -> dict[str, Any]:
    """A NetworkPolicy for the worker pods: no ingress at all (the worker listens on nothing); egress only to DNS
    (kube-dns), the Pod Identity agent, and HTTPS to `egress_cidrs` (the VPC's CIDR: SQS, S3, STS, ECR and the other
    AWS APIs through the VPC's interface endpoints, never the internet).

    `egress_cidrs` empty or None leaves HTTPS out entirely (the worker then reaches no AWS API). The cluster enforces
    it: VPC CNI's network policy agent is on (`Cluster`, `vpcCniOptions.enableNetworkPolicy`).
    """
    cidrs = check_egress_cidrs(egress_cidrs)
    egress: list[dict[str, Any]] = [
        {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                 "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
         "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        {"to": [{"ipBlock": {"cidr": c}} for c in POD_IDENTITY_AGENT_CIDRS],
         "ports": [{"protocol": "TCP", "port": 80}]},
    ]
    if cidrs:
        egress.append({"to": [{"ipBlock": {"cidr": c}} for c in cidrs], "ports": [{"protocol": "TCP", "port": 443}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{name}-worker", "namespace": namespace, "labels": dict(pod_labels)},
        "spec": {
            "podSelector": {"matchLabels": dict(pod_labels)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    }


DEFAULT_DENY_NAME = "default-deny"
"""Name of the workload namespace's default-deny NetworkPolicy."""


def default_deny_network_policy(namespace: str, name: str = DEFAULT_DENY_NAME) -> dict[str, Any]:
    """A NetworkPolicy selecting every pod of `namespace` and allowing nothing in or out: a pod there talks only as
    far as another policy (the worker's) allows."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"], "ingress": [], "egress": []},
    }


@dataclass(kw_only=True)
class WorkerAccessArgs:
    """What a worker workload reads and writes, shared by GpuScaledJobArgs and GpuConsumerArgs (keyword-only)."""

    cluster_name: pulumi.Input[str]
    """EKS cluster (for the Pod Identity association). Required."""
    namespace: str
    """Namespace of the workload and its service account (must exist). Required."""
    queue_url: pulumi.Input[str]
    """The work queue's URL (a FIFO queue for ordered work). Required."""
    queue_arn: pulumi.Input[str]
    """The work queue's ARN (IAM grants). Required."""
    bucket_arn: pulumi.Input[str]
    """ARN of the bucket results are written to (and slides read from, unless slides_bucket_arn). Required."""
    pod: WorkerPodSettings
    """The worker container and pod (image by digest, resources; visibility_timeout_s = the queue's). Required."""
    slides_prefix: str = "slides/"
    """Key prefix the worker reads slides from (read only). Default 'slides/'."""
    results_prefix: str = "results/"
    """Key prefix the worker writes results under (read and write). Default 'results/'."""
    slides_bucket_arn: pulumi.Input[str] | None = None
    """ARN of the bucket slides are read from (read only). Default None = bucket_arn."""
    slides_bucket_kms_key_arn: pulumi.Input[str] | None = None
    """Customer-managed key of the slides bucket, if any. Default None."""
    queue_kms_key_arn: pulumi.Input[str] | None = None
    """Customer-managed key of the queue, if any (kms:Decrypt through SQS). Default None."""
    dead_letter_queue_arn: pulumi.Input[str] | None = None
    """The work queue's dead-letter queue: the worker may send permanently bad messages there (sqs:SendMessage
    only). Default None (bad messages reach it through the redrive policy after maxReceiveCount)."""
    bucket_kms_key_arn: pulumi.Input[str] | None = None
    """Customer-managed key of the results bucket (bucket_arn), if any. Default None."""
    role_path: str = "/"
    """IAM path of the worker's role (`WorkloadIdentityArgs.role_path`): the platform's data key lets roles under its
    workers' path use it through S3 and SQS. Default `/`."""
    cluster_arn: pulumi.Input[str] | None = None
    """The cluster's ARN for the role's trust policy. Default None: from the AWS provider (`WorkloadIdentityArgs`)."""
    network_policy: bool = True
    """Declare the worker NetworkPolicy (no ingress; egress DNS, Pod Identity agent, HTTPS to egress_cidrs). Default
    True."""
    egress_cidrs: list[str] | tuple[str, ...] | None = None
    """Where the worker may send HTTPS: the VPC's private IPv4 CIDR(s), where the interface endpoints answer for SQS,
    S3 and the other AWS APIs (GpuBurstPlatform passes its VPC's; a stack attached to an existing cluster passes that
    cluster's VPC CIDR). 0.0.0.0/0 and ::/0 are refused. Required while `network_policy` is True (the default): left
    out, the worker would reach no AWS API and never take a message, so it is refused in one line. Default None (only
    with `network_policy=False`, where a NetworkPolicy of your own must allow it; the pack's `worker-aws-egress`
    judges that one)."""
    queue_visibility_timeout_s: int | None = None
    """The work queue's visibility timeout, seconds, when known (`WorkQueue.visibility_timeout_s`): the pod's
    `visibility_timeout_s` must equal it, or the worker renews on the wrong clock (too short a value lets a slow
    slide reappear and be processed twice; too long, its renewals never keep up). Default None: not checked (a queue
    declared in another stack; the pack's `worker-queue-visibility` still compares the two when both are in the
    plan)."""
    nodepool: GpuNodePool | str | None = None
    """The GPU NodePool the worker pods run on: a GpuNodePool (its name; the workload is created after it) or a
    NodePool name. The pods then select `karpenter.sh/nodepool: <name>` beside `nvidia.com/gpu.present`, so they
    never land on another team's pool and the pool's `gpu_limit` caps this workload. GpuBurstPlatform passes its
    GPU NodePool. Default None: any GPU NodePool of the cluster (the pack's `worker-nodepool` advisory says so)."""


def check_queue_visibility(args: WorkerAccessArgs) -> None:
    """ConfigError when the pod's visibility timeout disagrees with the queue's (when the queue's is known)."""
    queue_s = args.queue_visibility_timeout_s
    if queue_s is not None and args.pod.visibility_timeout_s != queue_s:
        raise ConfigError("WorkerPodSettings.visibility_timeout_s", args.pod.visibility_timeout_s,
                          f"the work queue's visibility timeout, {queue_s} s (WorkQueue.visibility_timeout_s, twice "
                          "its expected processing time): the worker renews its messages on that clock")


def check_worker_egress(args: WorkerAccessArgs) -> None:
    """ConfigError when the worker NetworkPolicy would allow no HTTPS: a refusal, not a warning, because such a
    worker reaches neither SQS nor S3 nor STS (all through the VPC's interface endpoints) and never takes a message.

    Derived egress was the other choice and is not made: a workload component knows no network (it may attach to a
    cluster another stack runs), and a CIDR looked up at deploy time would be unknown to the pack during a preview.
    The platform passes its VPC's CIDR, so the refusal only ever reaches a component stack (one attached to a cluster
    another stack runs): its hint says where such a stack gets the value. The platform program exports no output
    for it (`__main__.py`), so the hint names the platform stack's config key it comes from."""
    if args.network_policy and not check_egress_cidrs(args.egress_cidrs):
        raise ConfigError("WorkerAccessArgs.egress_cidrs", args.egress_cidrs,
                          "a list of the cluster's VPC private CIDR(s), e.g. ['10.64.0.0/16']: in a workload "
                          "stack, the platform's VPC CIDR (the platform stack's gpuburst:vpcCidr, default "
                          f"{DEFAULT_VPC_CIDR}, or the ExistingNetwork.vpc_cidr it was given; the platform exports "
                          "no output for it, so ask the platform team): the worker NetworkPolicy allows HTTPS only "
                          "there, where the interface endpoints answer for SQS, S3 and STS; without it the worker "
                          "reaches no AWS API (network_policy=False leaves the egress to a NetworkPolicy of your own)")


def declare_worker_identity(name: str, args: WorkerAccessArgs, service_account_name: str,
                            labels: dict[str, str],
                            opts: pulumi.ResourceOptions) -> tuple[k8s.core.v1.ServiceAccount, WorkloadIdentity]:
    """The worker's ServiceAccount (no token mounted) and its least-privilege Pod Identity role, for either workload
    pattern."""
    import pulumi_kubernetes as k8s

    from .identity import WorkloadIdentity, WorkloadIdentityArgs

    check_queue_visibility(args)
    check_worker_egress(args)
    policy = worker_policy(args.queue_arn, args.bucket_arn, args.slides_prefix, args.results_prefix,
                           slides_bucket_arn=args.slides_bucket_arn, queue_kms_key_arn=args.queue_kms_key_arn,
                           dead_letter_queue_arn=args.dead_letter_queue_arn,
                           bucket_kms_key_arn=args.bucket_kms_key_arn,
                           slides_bucket_kms_key_arn=args.slides_bucket_kms_key_arn, model=args.pod.model)
    service_account = k8s.core.v1.ServiceAccount(
        f"{name}-sa", metadata={"name": service_account_name, "namespace": args.namespace, "labels": labels},
        automount_service_account_token=False, opts=opts)
    identity = WorkloadIdentity(
        f"{name}-worker", WorkloadIdentityArgs(cluster_name=args.cluster_name, namespace=args.namespace,
                                               service_account=service_account_name, policy=policy,
                                               role_path=args.role_path, cluster_arn=args.cluster_arn), opts=opts)
    return service_account, identity
