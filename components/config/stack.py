"""The stack's configuration as typed, frozen dataclasses (StackConfig and what it holds), with a docstring per field
giving units and defaults; parse.py builds them from `Pulumi.<stack>.yaml`."""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import catalogue
from ..catalogue.network import DEFAULT_VPC_CIDR
from ..planning.chooser import choose_pattern
from ..spec.deploy_model import DeployModel
from ..spec.workload import WorkloadFacts, parallel_blocker

NAMESPACE = "gpuburst"
"""The Pulumi config namespace of this project: keys are written `gpuburst:<key>`."""


@dataclass(frozen=True)
class ModelSource:
    """A lab's own model for one workload: a `.pt2` object in S3, pinned by its digest."""

    uri: str
    """`s3://bucket/key` of the model file (a torch.export `.pt2` made by `python -m worker package-model`)."""
    sha256: str
    """The file's SHA-256, 64 lower-case hex digits; the worker refuses any other bytes before reading a slide."""
    kms_key_arn: str | None = None
    """The KMS key the object is encrypted with, when it is a customer-managed key: the worker role gets
    `kms:Decrypt` on it. Default: None (SSE-S3 or the bucket's default)."""
    cache_gib: int = catalogue.MODEL_CACHE_DEFAULT_GIB
    """GiB the workload's node-local model cache may hold on one GPU node (`model.cacheGiB`; env MODEL_CACHE_MAX_BYTES:
    the worker deletes the least recently used models beyond it). Default: catalogue.MODEL_CACHE_DEFAULT_GIB (20)."""

    @property
    def bucket(self) -> str:
        """The bucket part of `uri`."""
        return self.uri[len("s3://"):].split("/", 1)[0]

    @property
    def key(self) -> str:
        """The object key part of `uri`."""
        return self.uri[len("s3://"):].split("/", 1)[1]


@dataclass(frozen=True)
class WorkloadConfig:
    """One queue-driven GPU workload, described by its facts; the pattern chooser picks ScaledJob or consumer."""

    name: str
    """Workload name (lower-case, used in resource and queue names)."""
    items_independent: bool = True
    """True when messages can be processed in any order by any worker. Default: True."""
    ordered: bool = False
    """True when messages of one study must be processed in order (FIFO queue, message group = study).
    Default: False."""
    stateful: bool = False
    """True when state is carried from one message to the next (per-study state). Default: False."""
    model_load_s: float = 45.0
    """Seconds from the worker's start to the model on the GPU, with the model file already on the node and its digest
    checked: every Job pays it once (per message when messagesPerJob is 1). With a lab's `model`, the first Job on a
    node also downloads it and later Jobs re-hash the cached copy (the planner's `model_fetch` and `model_cache_hit`
    stages). Default: 45."""
    seconds_per_item: float = 8.0
    """Seconds of GPU work per message once the model is loaded. Default: 8."""
    burst_items: int = 20
    """Typical number of messages in one burst. Default: 20."""
    expected_processing_s: int = 300
    """Declared upper bound of one message's processing time, in seconds; the visibility timeout is twice this.
    Default: 300."""
    max_replicas: int = 8
    """Most GPU Jobs at once for a ScaledJob (also bounds GPU spend). Default: 8."""
    pattern: str | None = None
    """Force `scaledjob` or `consumer`; None lets the chooser decide. A ScaledJob for ordered or stateful work is
    refused. Default: None."""
    messages_per_job: int = 1
    """Messages one ScaledJob Job processes before it exits (KEDA's `queueLength` and the worker's `--max-messages`,
    kept equal), so N messages share one model load. Ignored by the consumer pattern. Default: 1."""
    precision: str = "auto"
    """The worker's compute precision: `auto` (bf16/fp16 where the device computes it natively), `fp32`
    (bit-for-bit reproducible across machines), `bf16` or `fp16`. Default: auto."""
    model: ModelSource | None = None
    """The lab's own model (`model: {uri, sha256}`), fetched from S3 by digest into a node-local cache. Default:
    None (the model baked into the worker image)."""

    def facts(self) -> WorkloadFacts:
        """The chooser's facts for this workload."""
        return WorkloadFacts(items_independent=self.items_independent, state_across_messages=self.stateful,
                             ordered=self.ordered, model_load_s=self.model_load_s,
                             seconds_per_item=self.seconds_per_item, burst_items=self.burst_items,
                             max_replicas=self.max_replicas)

    @property
    def runs_as_consumer(self) -> bool:
        """True when the workload runs as the persistent consumer (forced, required by its facts, or chosen)."""
        if self.pattern == "consumer" or parallel_blocker(self.facts()) is not None:
            return True
        return self.pattern is None and choose_pattern(
            self.facts(), messages_per_job=self.messages_per_job).pattern == "consumer"


WARM_GPUS_MAX = 64
"""Most GPUs a warm floor may keep up (a floor is a few idle GPUs, not a fleet; it also stays within gpuLimit)."""


@dataclass(frozen=True)
class WarmGpus:
    """A schedule during which `count` GPU nodes are kept up (placeholder pods), so a burst skips the node start."""

    count: int
    """GPUs (GPU nodes, one placeholder pod each) kept warm inside the schedule, 1 to WARM_GPUS_MAX and at most
    gpuLimit. Required."""
    start: str
    """Cron expression (5 fields, KEDA `cron` scaler `start`, in `timezone`) at which the floor comes up. Required."""
    end: str
    """Cron expression (5 fields, KEDA `cron` scaler `end`, in `timezone`) at which the floor goes back to zero.
    Required."""
    timezone: str
    """IANA time zone of `start` and `end`, e.g. Europe/London (checked with zoneinfo). Required."""


@dataclass(frozen=True)
class WorkerBuild:
    """The lab's own worker image, built by the stack from the lab's Dockerfile (`workerBuild`)."""

    context: str
    """The build context folder, relative to the project folder (where `pulumi` runs the program). Required."""
    dockerfile: str = "Dockerfile"
    """The Dockerfile, relative to `context`. Its last stage starts `FROM ${GPUBURST_WORKER_IMAGE}` (the built-in
    worker image, which the stack builds first and hands over as that build argument) unless the stack declares
    `workerImageCuda`. Default: `Dockerfile`."""


BURST_BUDGET_MAX_S = 86_400
"""Longest budget a stack may set, seconds (a day: a burst slower than that is not a burst)."""


@dataclass(frozen=True)
class BurstBudget:
    """How long a burst of verify's probe slides may take, from sending to results (`verify --check burst`)."""

    first_result_s: float
    """Seconds from sending the burst to the first probe's result summary in S3, > 0 and <= BURST_BUDGET_MAX_S.
    Required (no default: without a burstBudget, verify uses the planner's cold prediction x 1.5)."""
    last_result_s: float
    """Seconds from sending the burst to the last probe's result summary, >= first_result_s and <=
    BURST_BUDGET_MAX_S. Required (no default, as above)."""


def _default_workloads() -> tuple[WorkloadConfig, ...]:
    return (
        WorkloadConfig(name="slides", items_independent=True, ordered=False, stateful=False, burst_items=200),
        WorkloadConfig(name="studies", items_independent=False, ordered=True, stateful=True, burst_items=20),
    )


@dataclass(frozen=True)
class StackConfig:
    """Everything a stack can set under `gpuburst:`; every field has a default except the environment name."""

    environment: str = "dev"
    """Environment name, used in resource names (`gpuburst-<environment>`). Default: the stack name."""
    region: str = "us-east-1"
    """AWS region (from `aws:region`). Default: us-east-1."""
    kubernetes_version: str = catalogue.KUBERNETES_VERSION
    """EKS Kubernetes version. Default: the catalogue's pin. Judged against the EKS support calendar
    (catalogue.EKS_SUPPORT): within 90 days of its end of standard support the stack is told (advisory); past it the
    config is refused unless upgrade_support_type is EXTENDED."""
    upgrade_support_type: str = catalogue.DEFAULT_SUPPORT_TYPE
    """The cluster's `upgradePolicy.supportType`: STANDARD (EKS auto-upgrades the control plane at the end of
    standard support; no extended-support charge) or EXTENDED (the version stays, billed at 6x the control-plane price
    until the end of extended support). Default: STANDARD (EKS's own default, when unset, is EXTENDED)."""
    karpenter_version: str = catalogue.KARPENTER_VERSION
    """Karpenter (and karpenter-crd) chart version. Default: the catalogue's pin."""
    keda_version: str = catalogue.KEDA_VERSION
    """KEDA chart version; schemas are checked against it. Default: the catalogue's pin."""
    keda_provider: str = "aws"
    """TriggerAuthentication `podIdentity.provider`. Default: aws."""
    keda_identity_owner: str | None = None
    """`podIdentity.identityOwner` (keda|workload) instead of a roleArn. Default: None (use a roleArn)."""
    keda_extra_watch_namespaces: tuple[str, ...] = ()
    """Namespaces of other teams' workload stacks (their ScaledJobs) that KEDA watches besides the platform's own
    workload namespace, distinct DNS labels: KEDA scales nothing outside the namespaces it watches. The
    platform adds them to its own `keda_extra_watch_namespaces` argument. Default: none."""
    gpu_instance_types: tuple[str, ...] = ("g4dn.xlarge", "g4dn.2xlarge", "g5.xlarge", "g5.2xlarge")
    """Instance types the GPU NodePool may launch, each in `catalogue.INSTANCE_TYPES`: a family of sizes, never one
    type. Default: g4dn/g5 xlarge+2xlarge."""
    gpu_capacity_types: tuple[str, ...] = ("spot", "on-demand")
    """Karpenter capacity types the GPU NodePool may buy. Their order means nothing: with spot allowed Karpenter
    always prefers spot and falls back to on-demand when spot is short. Persistent consumers (ordered/stateful work)
    always select on-demand nodes themselves (`nodepool.ON_DEMAND_NODE_SELECTOR`), so the list must include on-demand
    when a workload runs as a consumer. Default: spot and on-demand."""
    gpu_limit: int = 8
    """Most GPUs the NodePool may hold at once (a burst never buys unbounded GPUs). Default: 8."""
    device_plugin_cdi_feature_flags: tuple[str, ...] = catalogue.DEVICE_PLUGIN_CDI_FEATURE_FLAGS
    """CDI feature flags of the NVIDIA device plugin (chart value `cdi.featureFlags`, comma-joined), each lower-case
    words joined by '-'. Default: catalogue.DEVICE_PLUGIN_CDI_FEATURE_FLAGS (`disable-nvsandboxutils`, the AL2023
    NVIDIA AMI v20260423 workaround); `[]` sets none."""
    ami_alias: str = "al2023@latest"
    """EC2NodeClass AMI alias: al2023@latest or a pinned al2023@vYYYYMMDD. Default: al2023@latest."""
    system_node_instance_type: str = "m6i.large"
    """Instance type of the system node group that runs controllers. Default: m6i.large."""
    system_node_count: int = 2
    """Nodes in the system node group. Default: 2."""
    endpoint_public_access: bool = False
    """Whether the EKS API endpoint is reachable from outside the VPC, from public_access_cidrs only. Default: False
    (the private endpoint only)."""
    public_access_cidrs: tuple[str, ...] = ()
    """CIDRs allowed to reach the public endpoint (never 0.0.0.0/0); required with endpoint_public_access. Default:
    none."""
    vpc_cidr: str = DEFAULT_VPC_CIDR
    """IPv4 CIDR of the VPC the platform creates (private, /16 to /20): GPU subnets with no route out, system subnets
    behind one NAT gateway, the VPC endpoints (components/network.py). Default: 10.64.0.0/16."""
    max_receive_count: int = 5
    """Receives before a message moves to the dead-letter queue (see docs/worker.md, "Choosing maxReceiveCount").
    Default: 5."""
    oldest_message_alarm_s: int = 900
    """Alarm when the oldest waiting message is older than this many seconds. Default: 900."""
    alarm_emails: tuple[str, ...] = ()
    """E-mail addresses subscribed to the alarm topics. Required: at least one (each must confirm AWS's e-mail)."""
    workloads: tuple[WorkloadConfig, ...] = field(default_factory=_default_workloads)
    """The queue-driven GPU workloads. Default: `slides` (independent) and `studies` (ordered, stateful)."""
    polling_interval_s: int = catalogue.KEDA_DEFAULT_POLLING_INTERVAL_S
    """Seconds between KEDA's queue-length polls of every ScaledJob (spec.pollingInterval), 5-3600. Default: 30."""
    karpenter_batch_idle_s: int = 1
    """Karpenter `settings.batchIdleDuration`, seconds: a provisioning batch ends after this long without a new
    pending pod, 1-600. Default: 1 (Karpenter's)."""
    karpenter_batch_max_s: int = 10
    """Karpenter `settings.batchMaxDuration`, seconds: the longest a provisioning batch may grow, 1-600 and at least
    karpenter_batch_idle_s. Default: 10 (Karpenter's)."""
    gpu_instance_store_policy: str = "RAID0"
    """EC2NodeClass `instanceStorePolicy` of GPU nodes: `RAID0` puts kubelet, containerd and SOCI state on a RAID0 of
    the instance's local NVMe (every catalogued GPU type has some), so image layers are written at NVMe speed instead
    of the gp3 root volume's 125 MiB/s, and ephemeral storage is the NVMe's size; `none` keeps them on the root
    volume. Default: RAID0."""
    fast_image_pull: bool = True
    """Turn on AL2023 nodeadm's `FastImagePull` feature gate (SOCI parallel pull and unpack) in the GPU nodes'
    NodeConfig user data. Needs the image store on the RAID0 or a root volume of >= 600 MiB/s (nodeadm's advice:
    slower below), so it is refused with `gpuInstanceStorePolicy: none`. Default: true."""
    gpu_node_ssm: bool = False
    """Attach AmazonSSMManagedInstanceCore to the GPU node role, so SSM Session Manager can open a shell on GPU nodes
    (which hold slides while they run). Default: false (upstream Karpenter attaches it; here it is opt-in, and the
    system node group keeps it for debugging the cluster)."""
    warm_gpus: WarmGpus | None = None
    """A warm GPU floor (placeholder pods kept up on a cron schedule). Default: None (the GPU pool scales to zero)."""
    burst_budget: BurstBudget | None = None
    """The time budget of `verify --check burst`. Default: None (verify uses the planner's cold prediction x 1.5)."""
    verify_image: str | None = None
    """An image with gpuburst installed (`python -m gpuburst verify`), pinned by digest: the VerifyRunner's hook Job
    (verify after every `pulumi up` that changes a guarded version) runs in it. The worker image ships worker/ only,
    so it cannot. Default: None (no VerifyRunner)."""
    worker_image: str | None = None
    """A prebuilt worker image, pinned by digest (`REGISTRY/REPO@sha256:<64 hex>`; a tag is refused), that every
    worker pod (the workloads, the warm floor, verify's probes) runs; the stack then builds no image. With the
    platform's own network it must be in this account's ECR in the stack's region (the GPU subnets reach nothing
    else). Default: None (the built-in image, built by the stack)."""
    worker_build: WorkerBuild | None = None
    """The lab's own Dockerfile and context, built and pushed by the stack (on top of the built-in image, see
    WorkerBuild.dockerfile) and run by every worker pod. Excludes worker_image. Default: None (the built-in image)."""
    worker_image_cuda: str | None = None
    """The CUDA version (MAJOR.MINOR, a major in catalogue.CUDA_RUNTIME_FLOORS) of the lab's own image (worker_image,
    or a worker_build on another base), written on the worker pods so the policy pack can check the GPUs and the
    driver it needs. Default: None (a prebuilt image is then reported as not checked; a worker_build is the built-in
    image's, catalogue.TORCH_CUDA)."""

    deploy: DeployModel | None = None
    """Who deploys and from where, who uploads slides and reads results from outside the VPC, who may break glass
    (`gpuburst:deploy`, spec.deploy_model.DeployModel). Required in a stack file (the clinical buckets' and the data
    key's policies are built from it); None only for a StackConfig built in code. Default: None."""

    @property
    def name_prefix(self) -> str:
        """`gpuburst-<environment>`, the prefix of every physical name."""
        return f"gpuburst-{self.environment}"
