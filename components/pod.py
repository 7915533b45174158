"""The hardened GPU worker pod (spec and template) that both the ScaledJob and the consumer Deployment run.

Clinical research data passes through these pods, so the pod is locked down the same way for both patterns:
non-root numeric user, read-only root filesystem with scratch on size-limited `emptyDir` volumes, no privilege
escalation, all capabilities dropped, seccomp `RuntimeDefault`, an image pinned by digest, no Kubernetes API token.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pulumi

from .policy_documents import policy_document, queue_consumer_statements, s3_prefix_statements
from .spec.names import GPU_NODE_SELECTOR, GPU_RESOURCE, GPU_TOLERATION, WORKER_UID
from .validation import ConfigError, Rule, is_int_between, validate

SCRATCH_PATH = "/scratch"
"""Where downloaded slides and local results live (an emptyDir; the root filesystem is read-only)."""

TMP_PATH = "/tmp"
"""Writable /tmp (an emptyDir) for Python, torch and tifffile temporary files."""

DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}
"""Pod annotation: Karpenter must not consolidate or drift a node away while a slide is being processed."""

_DIGEST_REF = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")


def image_digest_problem(image: str) -> str | None:
    """Why `image` is not an image reference pinned by digest (`repo@sha256:<64 hex>`), or None."""
    if not isinstance(image, str) or not _DIGEST_REF.match(image):
        return ("an image reference pinned by digest, 'REGISTRY/REPO@sha256:<64 hex>' (a tag can be moved to "
                "different bytes; a digest cannot)")
    return None


def _checked_image(image: str) -> str:
    problem = image_digest_problem(image)
    if problem:
        raise ConfigError("WorkerPodSettings.image", image, problem)
    return image


def pinned_image(image: pulumi.Input[str]) -> pulumi.Input[str]:
    """`image` after the digest check: at once for a plain str, inside `.apply` for an Output (e.g. the image
    build's `ref`), so an unpinned reference fails the deployment either way. Unknown values (preview) pass."""
    if isinstance(image, str):
        return _checked_image(image)
    return pulumi.Output.from_input(image).apply(_checked_image)


def _quantity_cpu(cores: float) -> str:
    return str(int(cores)) if float(cores).is_integer() else f"{int(round(cores * 1000))}m"


@dataclass
class WorkerPodSettings:
    """The worker container and its pod, shared by GpuScaledJob and GpuConsumer."""

    image: pulumi.Input[str]
    """Worker image pinned by digest (`...@sha256:<64 hex>`), usually the image build's `ref` Output. Required."""
    cpu_cores: float = 4
    """CPU request and limit, cores (equal, for the Guaranteed QoS class: evicted last). Default 4."""
    memory_gib: int = 24
    """Memory request and limit, GiB (equal, Guaranteed QoS). Default 24."""
    gpus: int = 1
    """`nvidia.com/gpu` per pod (a whole GPU; extended resources have no overcommit). Default 1."""
    scratch_gib: int = 50
    """Size limit of the /scratch emptyDir, GiB: one whole-slide image plus its outputs. Default 50."""
    tmp_gib: int = 2
    """Size limit of the /tmp emptyDir, GiB. Default 2."""
    visibility_timeout_s: int = 600
    """The work queue's visibility timeout, seconds (env VISIBILITY_TIMEOUT). Default 600 (the worker's default)."""
    visibility_extension_interval_s: int | None = None
    """Seconds between the worker's visibility renewals (env VISIBILITY_EXTENSION_INTERVAL); must be below the
    visibility timeout. Default None = a third of it, so two renewals can fail before the message reappears."""
    grace_period_s: int = 120
    """Seconds the worker may finish the slide in progress after SIGTERM (env GRACE_PERIOD). Default 120."""
    termination_grace_period_s: int = 150
    """Pod terminationGracePeriodSeconds: at least grace_period_s + 10, so the worker can release the message
    and exit before SIGKILL. Default 150."""
    region: str = "us-east-1"
    """AWS region for the SDK (env AWS_REGION; Pod Identity does not set it). Default us-east-1."""
    env: dict[str, pulumi.Input[str]] = field(default_factory=dict)
    """More environment variables for the worker (e.g. MODEL_PATH). Default none; may not override the ones this
    module sets."""
    priority_class_name: str | None = None
    """Pod priorityClassName (the platform sets the workloads' class when a warm GPU floor is configured, so a real
    job preempts a placeholder). Default None (no class: priority 0)."""

    @property
    def extension_interval_s(self) -> int:
        """The effective visibility renewal interval, seconds."""
        if self.visibility_extension_interval_s is not None:
            return self.visibility_extension_interval_s
        return max(1, self.visibility_timeout_s // 3)


_RESERVED_ENV = ("QUEUE_URL", "VISIBILITY_TIMEOUT", "VISIBILITY_EXTENSION_INTERVAL", "GRACE_PERIOD", "SCRATCH_DIR",
                 "TMPDIR", "HOME", "XDG_CACHE_HOME", "AWS_REGION", "DEVICE")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_SETTINGS_RULES = [
    Rule("cpu_cores", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 192,
         "cores, > 0 and <= 192"),
    Rule("memory_gib", is_int_between(1, 2048), "an int of GiB, 1-2048"),
    Rule("gpus", is_int_between(1, 8), "an int of whole GPUs, 1-8"),
    Rule("scratch_gib", is_int_between(1, 2048), "an int of GiB, 1-2048"),
    Rule("tmp_gib", is_int_between(1, 64), "an int of GiB, 1-64"),
    Rule("visibility_timeout_s", is_int_between(1, 43200), "seconds, 1-43200 (the SQS maximum)"),
    Rule("grace_period_s", is_int_between(0, 3600), "seconds, 0-3600"),
    Rule("region", lambda v: isinstance(v, str) and re.match(r"^[a-z]{2}(-[a-z]+)+-\d$", v) is not None,
         "an AWS region name such as 'us-east-1'"),
]


def check_settings(s: WorkerPodSettings) -> None:
    """Raise ConfigError (one line: field, value, what is allowed) when the settings cannot work."""
    validate({r.field: getattr(s, r.field) for r in _SETTINGS_RULES}, _SETTINGS_RULES, prefix="WorkerPodSettings.")
    if isinstance(s.image, str):
        _checked_image(s.image)
    interval = s.extension_interval_s
    if not (isinstance(interval, int) and 0 < interval < s.visibility_timeout_s):
        raise ConfigError("WorkerPodSettings.visibility_extension_interval_s", interval,
                          f"seconds > 0 and < visibility_timeout_s={s.visibility_timeout_s} (a renewal must land "
                          "before the message reappears)")
    if not (isinstance(s.termination_grace_period_s, int) and
            s.termination_grace_period_s >= s.grace_period_s + 10):
        raise ConfigError("WorkerPodSettings.termination_grace_period_s", s.termination_grace_period_s,
                          f">= grace_period_s + 10 = {s.grace_period_s + 10} (the worker needs its grace period plus "
                          "time to release the message before the kubelet's SIGKILL)")
    for name in s.env:
        if not _ENV_NAME.match(name):
            raise ConfigError(f"WorkerPodSettings.env[{name!r}]", name,
                              "an environment variable name [A-Za-z_][A-Za-z0-9_]*")
        if name in _RESERVED_ENV:
            raise ConfigError(f"WorkerPodSettings.env[{name!r}]", name,
                              f"a name other than {', '.join(_RESERVED_ENV)} (set by the component)")


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
        # 'cuda', not 'auto': on a node without a usable GPU the worker exits 3 at once instead of running on CPU.
        {"name": "DEVICE", "value": "cuda"},
    ]
    env += [{"name": k, "value": v} for k, v in sorted(s.env.items())]
    return env


def hardened_pod_spec(s: WorkerPodSettings, *, command: list[pulumi.Input[str]], queue_url: pulumi.Input[str],
                      service_account_name: str, restart_policy: str) -> dict[str, Any]:
    """A PodSpec (plain dict, may hold Outputs) running `command` in the hardened worker container.

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
    resources = {
        "requests": {"cpu": _quantity_cpu(s.cpu_cores), "memory": f"{s.memory_gib}Gi",
                     "ephemeral-storage": f"{ephemeral_gib}Gi", GPU_RESOURCE: str(s.gpus)},
        "limits": {"cpu": _quantity_cpu(s.cpu_cores), "memory": f"{s.memory_gib}Gi",
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
        "nodeSelector": dict(GPU_NODE_SELECTOR),
        "tolerations": [dict(GPU_TOLERATION)],
        "containers": [container],
        "volumes": [
            {"name": "scratch", "emptyDir": {"sizeLimit": f"{s.scratch_gib}Gi"}},
            {"name": "tmp", "emptyDir": {"sizeLimit": f"{s.tmp_gib}Gi"}},
        ],
        # No host namespaces, and no service-link variables (they would list other services' addresses in the env).
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "enableServiceLinks": False,
    }


def hardened_pod_template(s: WorkerPodSettings, *, command: list[pulumi.Input[str]], queue_url: pulumi.Input[str],
                          service_account_name: str, restart_policy: str, labels: dict[str, str]) -> dict[str, Any]:
    """A PodTemplateSpec: `hardened_pod_spec` plus labels and the karpenter.sh/do-not-disrupt annotation."""
    return {
        "metadata": {"labels": dict(labels), "annotations": dict(DO_NOT_DISRUPT)},
        "spec": hardened_pod_spec(s, command=command, queue_url=queue_url,
                                  service_account_name=service_account_name, restart_policy=restart_policy),
    }


def worker_policy(queue_arn: pulumi.Input[str], bucket_arn: pulumi.Input[str], slides_prefix: str,
                  results_prefix: str, *, slides_bucket_arn: pulumi.Input[str] | None = None,
                  queue_kms_key_arn: pulumi.Input[str] | None = None,
                  bucket_kms_key_arn: pulumi.Input[str] | None = None,
                  slides_bucket_kms_key_arn: pulumi.Input[str] | None = None,
                  dead_letter_queue_arn: pulumi.Input[str] | None = None) -> dict:
    """The worker role's policy: consume its one queue; read slides; read and write results (nothing with `*`).

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
        statements.append({"Effect": "Allow", "Action": ["sqs:SendMessage"], "Resource": dead_letter_queue_arn})
    if same_bucket:
        statements += s3_prefix_statements(bucket_arn, [slides_prefix, results_prefix], [results_prefix],
                                           kms_key_arn=bucket_kms_key_arn)
    else:
        statements += s3_prefix_statements(slides_bucket_arn, [slides_prefix], [],
                                           kms_key_arn=slides_bucket_kms_key_arn)
        statements += s3_prefix_statements(bucket_arn, [results_prefix], [results_prefix],
                                           kms_key_arn=bucket_kms_key_arn)
    return policy_document(statements)


POD_IDENTITY_AGENT_CIDRS = ("169.254.170.23/32", "fd00:ec2::23/128")
"""Where the EKS Pod Identity agent listens (link-local, port 80, on every node): the worker's AWS credentials."""


def worker_network_policy(name: str, namespace: str, pod_labels: dict[str, str]) -> dict[str, Any]:
    """A NetworkPolicy for the worker pods: no ingress at all (the worker listens on nothing); egress only to DNS,
    the Pod Identity agent, and HTTPS (SQS, S3 and the other AWS APIs, directly or through VPC endpoints).

    It takes effect where the CNI enforces NetworkPolicy (VPC CNI with network policy enabled); elsewhere it is
    inert, never harmful.
    """
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{name}-worker", "namespace": namespace, "labels": dict(pod_labels)},
        "spec": {
            "podSelector": {"matchLabels": dict(pod_labels)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [
                {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                         "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                 "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"to": [{"ipBlock": {"cidr": c}} for c in POD_IDENTITY_AGENT_CIDRS],
                 "ports": [{"protocol": "TCP", "port": 80}]},
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}],
                 "ports": [{"protocol": "TCP", "port": 443}]},
            ],
        },
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
    network_policy: bool = True
    """Declare the worker NetworkPolicy (no ingress; egress DNS, Pod Identity agent, HTTPS). Default True."""


def declare_worker_identity(name: str, args: WorkerAccessArgs, service_account_name: str,
                            labels: dict[str, str], opts: pulumi.ResourceOptions) -> tuple[Any, Any]:
    """The worker's ServiceAccount (no token mounted) and its least-privilege Pod Identity role, for either workload
    pattern."""
    import pulumi_kubernetes as k8s

    from .identity import WorkloadIdentity, WorkloadIdentityArgs

    policy = worker_policy(args.queue_arn, args.bucket_arn, args.slides_prefix, args.results_prefix,
                           slides_bucket_arn=args.slides_bucket_arn, queue_kms_key_arn=args.queue_kms_key_arn,
                           dead_letter_queue_arn=args.dead_letter_queue_arn,
                           bucket_kms_key_arn=args.bucket_kms_key_arn,
                           slides_bucket_kms_key_arn=args.slides_bucket_kms_key_arn)
    service_account = k8s.core.v1.ServiceAccount(
        f"{name}-sa", metadata={"name": service_account_name, "namespace": args.namespace, "labels": labels},
        automount_service_account_token=False, opts=opts)
    identity = WorkloadIdentity(
        f"{name}-worker", WorkloadIdentityArgs(cluster_name=args.cluster_name, namespace=args.namespace,
                                               service_account=service_account_name, policy=policy), opts=opts)
    return service_account, identity
