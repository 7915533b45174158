"""A KEDA ScaledJob that starts one hardened GPU job per SQS message, for independent, stateless work only.

Scaling arithmetic, and why `scalingStrategy` is left out: the aws-sqs-queue scaler counts visible plus in-flight
messages (`scaleOnInFlight: "true"`), and KEDA's default strategy starts `queue length - running jobs` new jobs. A
message a running job holds is in flight and that job is running, so the two cancel out: no double start while a
job works, and a job that is still Pending (waiting for a Karpenter GPU node) is counted as running, so a slow
node start does not start a second job for the same message. `accurate` subtracts only *pending* jobs and expects
a queue length *without* in-flight messages, so it is offered only together with `scaleOnInFlight: "false"`
(`scaling_strategy="accurate"` sets both). The field is omitted rather than set to `default` because KEDA
2.20.0-2.20.1 reject an explicit `default` (see catalogue.KEDA_REJECTED_SCALING_STRATEGIES).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_kubernetes as k8s

from .catalogue import KEDA_DEFAULT_POLLING_INTERVAL_S, KEDA_VERSION
from .identity import WorkloadIdentity
from .keda import Keda, KedaScalerAuth, KedaScalerAuthArgs
from .planning.chooser import PatternChoice, choose_pattern, require_pattern
from .pod import (
    WorkerAccessArgs,
    WorkerPodSettings,
    declare_worker_identity,
    hardened_pod_template,
    worker_network_policy,
    workload_nodepool,
)
from .spec.keda_schema import API_VERSION, SQS_TRIGGER, check_keda_manifest
from .spec.names import WORKER_LABEL
from .spec.validation import ConfigError, Rule, is_int_between, names_its_errors, validate
from .spec.workload import (
    JOB_DEADLINE_FLOOR_S,
    JOB_DEADLINE_MAX_S,
    MESSAGES_PER_JOB_MAX,
    WorkloadFacts,
    choice_annotations,
    fact_annotations,
    job_deadline_s,
)

if TYPE_CHECKING:
    from .existing import ExistingKeda


@dataclass
class ScaledJobSettings:
    """The KEDA and Job knobs of a GpuScaledJob (all plain values, so policies can judge them during preview)."""

    max_replica_count: int = 8
    """Most jobs (GPUs) at once: KEDA's maxReplicaCount. Default 8; bounds a burst's GPU spend."""
    queue_length: str = "1"
    """Messages per job for KEDA's arithmetic (aws-sqs-queue `queueLength`, a string). Default "1": one job per
    message, matching `max_messages_per_job`."""
    max_messages_per_job: int = 1
    """The worker's --max-messages: a job takes this many messages, then exits. Default 1."""
    polling_interval_s: int = KEDA_DEFAULT_POLLING_INTERVAL_S
    """Seconds between KEDA's queue-length polls (spec.pollingInterval). Default 30 (the stack sets it from
    `gpuburst:pollingIntervalS`)."""
    successful_jobs_history_limit: int = 3
    """Finished jobs kept for inspection. Default 3."""
    failed_jobs_history_limit: int = 5
    """Failed jobs kept for inspection. Default 5."""
    backoff_limit: int = 0
    """Job backoffLimit. Default 0: a failed pod is not retried inside the job; its message reappears after the
    visibility timeout and SQS's maxReceiveCount/dead-letter queue is the one retry budget. Pods killed by a node
    disruption (spot reclaim) do not count (podFailurePolicy Ignore on DisruptionTarget)."""
    active_deadline_s: int = JOB_DEADLINE_FLOOR_S
    """Job activeDeadlineSeconds: a stuck job is stopped (and its message reappears). Default 3600; must exceed
    model load + max_messages_per_job × seconds per item. `settings_for_batch` derives it from the batch size
    (`workload.job_deadline_s`)."""
    scaling_strategy: str | None = None
    """None (default): the field is omitted (KEDA's default strategy) with scaleOnInFlight "true". 'accurate':
    with scaleOnInFlight "false". See the module docstring."""


_SETTINGS_RULES = [
    Rule("max_replica_count", is_int_between(1, 1000), "an int, 1-1000"),
    Rule("queue_length", lambda v: isinstance(v, str) and v.isdigit() and int(v) >= 1,
         "a whole number >= 1 as a string, e.g. \"1\""),
    Rule("max_messages_per_job", is_int_between(1, MESSAGES_PER_JOB_MAX), f"an int, 1-{MESSAGES_PER_JOB_MAX}"),
    Rule("polling_interval_s", is_int_between(5, 3600), "seconds, 5-3600"),
    Rule("successful_jobs_history_limit", is_int_between(0, 100), "an int, 0-100"),
    Rule("failed_jobs_history_limit", is_int_between(0, 100), "an int, 0-100"),
    Rule("backoff_limit", is_int_between(0, 10), "an int, 0-10"),
    Rule("active_deadline_s", is_int_between(60, JOB_DEADLINE_MAX_S), f"seconds, 60-{JOB_DEADLINE_MAX_S}"),
    Rule("scaling_strategy", lambda v: v in (None, "accurate"),
         "None (omit: KEDA's default strategy with in-flight counting) or 'accurate' (with scaleOnInFlight false)"),
]


def settings_for_batch(messages_per_job: int, *, model_load_s: float, expected_processing_s: int,
                       max_replica_count: int, polling_interval_s: int = KEDA_DEFAULT_POLLING_INTERVAL_S
                       ) -> ScaledJobSettings:
    """ScaledJobSettings for Jobs of `messages_per_job` messages: KEDA's `queueLength` and the worker's
    `--max-messages` both that number (one Job per that many messages, each taking exactly that many), and the
    Job's deadline `workload.job_deadline_s` (the model load plus that many times one message's declared processing
    time; the visibility timeout stays per message, see there)."""
    return ScaledJobSettings(
        max_replica_count=max_replica_count, queue_length=str(messages_per_job), max_messages_per_job=messages_per_job,
        polling_interval_s=polling_interval_s,
        active_deadline_s=job_deadline_s(model_load_s, messages_per_job, expected_processing_s))


def check_scaled_job_settings(s: ScaledJobSettings, facts: WorkloadFacts) -> None:
    """Raise a one-line ConfigError when the settings cannot work for this work."""
    validate({r.field: getattr(s, r.field) for r in _SETTINGS_RULES}, _SETTINGS_RULES, prefix="ScaledJobSettings.")
    if int(s.queue_length) != s.max_messages_per_job:
        raise ConfigError("ScaledJobSettings.queue_length", s.queue_length,
                          f"\"{s.max_messages_per_job}\" = max_messages_per_job (KEDA starts one job per queue_length "
                          "messages; a mismatch leaves messages waiting or starts jobs that find nothing)")
    needed = facts.model_load_s + s.max_messages_per_job * facts.seconds_per_item
    if s.active_deadline_s <= needed:
        raise ConfigError("ScaledJobSettings.active_deadline_s", s.active_deadline_s,
                          f"more than model_load_s + max_messages_per_job x seconds_per_item = {needed:g} s")


def scaled_job_manifest(*, name: str, namespace: str, queue_url: pulumi.Input[str], region: str, auth_name: str,
                        service_account_name: str, pod: WorkerPodSettings, settings: ScaledJobSettings,
                        keda_version: str = KEDA_VERSION,
                        annotations: dict[str, str] | None = None, nodepool: str | None = None) -> dict[str, Any]:
    """The ScaledJob manifest (plain dict; queue URL and image may be Outputs), checked against `keda_version`.

    `annotations` (e.g. `chooser.fact_annotations(facts)`) go on the ScaledJob's metadata; `nodepool` ties the job
    pods to that NodePool (`pod.worker_node_selector`)."""
    labels = {"app.kubernetes.io/name": WORKER_LABEL, "app.kubernetes.io/instance": name,
              "app.kubernetes.io/component": "scaledjob"}
    command = ["python", "-m", "worker", "consume", "--mode", "job", "--queue-url", queue_url,
               "--max-messages", str(settings.max_messages_per_job)]
    template = hardened_pod_template(pod, command=command, queue_url=queue_url,
                                     service_account_name=service_account_name, restart_policy="Never",
                                     labels=labels, nodepool=nodepool, namespace=namespace)
    spec: dict[str, Any] = {
        "jobTargetRef": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": settings.backoff_limit,
            "activeDeadlineSeconds": settings.active_deadline_s,
            # A pod lost to a node disruption (spot reclaim, node drain) is replaced without using up backoffLimit.
            "podFailurePolicy": {"rules": [
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
            "template": template,
        },
        "pollingInterval": settings.polling_interval_s,
        "successfulJobsHistoryLimit": settings.successful_jobs_history_limit,
        "failedJobsHistoryLimit": settings.failed_jobs_history_limit,
        "maxReplicaCount": settings.max_replica_count,
        # gradual: a new revision applies to new jobs only; running GPU jobs are never killed by an update.
        "rollout": {"strategy": "gradual"},
        "triggers": [{
            "type": SQS_TRIGGER,
            "authenticationRef": {"name": auth_name, "kind": "TriggerAuthentication"},
            "metadata": {
                "queueURL": queue_url,
                "queueLength": settings.queue_length,
                "awsRegion": region,
                "scaleOnInFlight": "false" if settings.scaling_strategy == "accurate" else "true",
            },
        }],
    }
    if settings.scaling_strategy is not None:
        spec["scalingStrategy"] = {"strategy": settings.scaling_strategy}
    manifest = {"apiVersion": API_VERSION, "kind": "ScaledJob",
                "metadata": {"name": name, "namespace": namespace, "labels": labels}, "spec": spec}
    if annotations:
        manifest["metadata"]["annotations"] = dict(annotations)
    return check_keda_manifest(manifest, keda_version)


@dataclass(kw_only=True)
class GpuScaledJobArgs(WorkerAccessArgs):
    """Inputs of GpuScaledJob."""

    keda: Keda | ExistingKeda
    """The Keda component, or an ExistingKeda another stack installed: version to check against, operator role,
    chart the CRDs come from. Required."""
    facts: WorkloadFacts
    """What the work is; ordered or stateful work is refused (it needs GpuConsumer). Required."""
    settings: ScaledJobSettings | None = None
    """KEDA and Job settings. Default: ScaledJobSettings() with max_replica_count = facts.max_replicas."""
    scaler_identity_owner: str | None = None
    """None (default): a scaler role via roleArn; 'keda': the operator's own role (see KedaScalerAuth)."""
    polling_interval_s: int | None = None
    """KEDA pollingInterval, seconds, used when `settings` is None. Default None: ScaledJobSettings' default (30)."""


@names_its_errors
class GpuScaledJob(pulumi.ComponentResource):
    """ScaledJob + its service account and least-privilege Pod Identity role + the queue's scaler identity."""

    scaled_job: k8s.apiextensions.CustomResource
    role_arn: pulumi.Output[str]
    service_account_name: str
    scaler: KedaScalerAuth
    identity: WorkloadIdentity
    choice: PatternChoice

    def __init__(self, name: str, args: GpuScaledJobArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpuburst:index:GpuScaledJob", name, None, opts)
        # Refuse ordered or stateful work before anything is declared.
        self.choice = require_pattern(args.facts, "scaledjob")
        settings = args.settings or ScaledJobSettings(
            max_replica_count=args.facts.max_replicas,
            **({"polling_interval_s": args.polling_interval_s} if args.polling_interval_s is not None else {}))
        check_scaled_job_settings(settings, args.facts)
        self.service_account_name = f"{name}-worker"
        auth_name = f"{name}-sqs-auth"
        # Build and check the manifest (pod hardening, image digest, KEDA schema) before declaring resources.
        pick = choose_pattern(args.facts, messages_per_job=settings.max_messages_per_job)
        nodepool, pool_dependency = workload_nodepool(args.nodepool)
        manifest = scaled_job_manifest(
            name=name, namespace=args.namespace, queue_url=args.queue_url, region=args.pod.region,
            auth_name=auth_name, service_account_name=self.service_account_name, pod=args.pod, settings=settings,
            keda_version=args.keda.version, nodepool=nodepool,
            annotations={**fact_annotations(args.facts), **choice_annotations(pick.pattern, pick.reason)})
        child = pulumi.ResourceOptions(parent=self)
        service_account, self.identity = declare_worker_identity(
            name, args, self.service_account_name, manifest["metadata"]["labels"], child)
        self.role_arn = self.identity.role_arn
        self.scaler = KedaScalerAuth(
            f"{name}-scaler",
            KedaScalerAuthArgs(keda=args.keda, namespace=args.namespace, queue_arn=args.queue_arn,
                               auth_name=auth_name, identity_owner=args.scaler_identity_owner),
            opts=child)
        # After the CRD (chart), the service account, the Pod Identity association (credentials are injected at
        # pod admission) and the TriggerAuthentication (KEDA's first poll needs it).
        self.scaled_job = k8s.apiextensions.CustomResource(
            f"{name}-scaledjob", api_version=manifest["apiVersion"], kind=manifest["kind"],
            metadata=manifest["metadata"], spec=manifest["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[
                *([args.keda.chart] if args.keda.chart is not None else []), service_account, self.identity,
                self.scaler, *pool_dependency]))
        if args.network_policy:
            np_ = worker_network_policy(name, args.namespace, manifest["metadata"]["labels"],
                                        egress_cidrs=args.egress_cidrs)
            k8s.networking.v1.NetworkPolicy(f"{name}-netpol", metadata=np_["metadata"], spec=np_["spec"], opts=child)
        self.register_outputs({"roleArn": self.role_arn, "serviceAccountName": self.service_account_name,
                               "scalerRoleArn": self.scaler.role_arn})
