"""What a check reports (CheckResult), the settings a run is given, and the clock the waiting checks use."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

PASS = "pass"
"""The check saw the live resource do what it must."""
FAIL = "fail"
"""The check saw the live resource not do what it must (a defect found): exit status 1."""
ERROR = "error"
"""The check could not run (its own call was refused with 403/AccessDenied, the API did not answer, the check broke):
no verdict either way, exit status 2."""
SKIPPED = "skipped"
"""Nothing to judge (scale-to-zero, `--skip`): not a failure (unless `--strict`), always says why."""
STATUSES = (PASS, FAIL, ERROR, SKIPPED)

EXIT_OK = 0
"""Every check passed or was skipped."""
EXIT_FAIL = 1
"""A check failed and none errored."""
EXIT_ERROR = 2
"""A check could not run (error), or verify could not run at all (bad flags, no cluster, the lock held)."""
EXIT_INTERRUPTED = 130
"""Interrupted (Ctrl-C, SIGTERM): what ran is reported, `run.interrupted` is true."""


SUMMARY_MAX_CHARS = 200
"""Longest summary line (characters): the person on call reads the count and the cause in one line; a check that
writes more is cut by CheckResult (the full text becomes the first evidence line)."""
SUMMARY_FULL_PREFIX = "summary in full: "
"""How the evidence line holding a cut summary's full text begins."""


class CouldNotRun(Exception):
    """A check's own call was refused or unanswered (kube.KubeError and aws.AwsError are ones): the check reports
    `error`, not `fail`, because it saw no defect."""


def exit_status(results: list[CheckResult]) -> int:
    """The run's exit status: 2 when any check errored (the verdict is incomplete, so an error outranks a failure),
    else 1 when any failed, else 0."""
    statuses = {r.status for r in results}
    return EXIT_ERROR if ERROR in statuses else EXIT_FAIL if FAIL in statuses else EXIT_OK


def headline(findings: list[str], plural: str = "problems") -> str:
    """A summary of one or more findings: the count first when there are several (`3 problems, first: …`), then the
    first finding (the others are in the evidence)."""
    if len(findings) <= 1:
        return findings[0] if findings else ""
    return f"{len(findings)} {plural}, first: {findings[0]}"


def apply_strict(result: CheckResult) -> CheckResult:
    """`--strict`: a check that skipped itself (an empty GPU pool, nothing to judge) fails instead."""
    if result.status != SKIPPED:
        return result
    return CheckResult(result.name, FAIL, f"skipped, which --strict fails: {result.summary}",
                       result.evidence + ["--strict: a skipped check fails"])


@dataclass
class CheckResult:
    """The verdict of one check, with the evidence it saw (one line per fact, naming the resource)."""

    name: str
    """Check name as listed by `--help` (e.g. `gpu-allocatable`)."""
    status: str
    """One of `pass`, `fail`, `error`, `skipped`."""
    summary: str
    """One line of at most SUMMARY_MAX_CHARS: the verdict in words, the count and the cause first (for a failure,
    which resource and why); lists belong in the evidence. A longer or multi-line text is cut here, centrally,
    and kept whole as the first evidence line."""
    evidence: list[str] = field(default_factory=list)
    """What the check saw, one fact per line (resource name, the field it read, the value it found)."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"CheckResult.status: {self.status!r} is not one of {', '.join(STATUSES)}")
        self.summary = self.summary  # evidence is set now: a long summary keeps its full text there

    def __setattr__(self, name: str, value: Any) -> None:
        # Every assignment of the summary goes through here (the constructor's, and a check amending it later), so
        # no path prints a summary over the limit. During __init__ the evidence does not exist yet: __post_init__
        # assigns the summary again once it does.
        if name == "summary" and "evidence" in self.__dict__:
            value = self._fit(str(value))
        object.__setattr__(self, name, value)

    def _fit(self, text: str) -> str:
        one = " ".join(text.split())
        if len(one) <= SUMMARY_MAX_CHARS and one == text:
            return text
        full = f"{SUMMARY_FULL_PREFIX}{one}"
        if len(one) > SUMMARY_MAX_CHARS and full not in self.evidence:
            self.evidence.insert(0, full)
        return one if len(one) <= SUMMARY_MAX_CHARS else one[:SUMMARY_MAX_CHARS - 1].rstrip() + "…"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (one entry of the `--json` document's `results`)."""
        return asdict(self)


@dataclass
class Workload:
    """One queue the stack runs and the IAM role of the worker that consumes it."""

    name: str
    """Workload name (the stack output's key, e.g. `slides`), or `queue-1`, ... for queues given by flags."""
    queue_url: str
    """The work queue's URL."""
    worker_role_arn: str | None = None
    """The worker's IAM role (assumed by `worker-iam`); None = the ambient credentials when verify runs in a pod."""


@dataclass
class VerifySettings:
    """Everything a run needs, from the stack's outputs and the command line (flags win)."""

    kubeconfig: str | None = None
    """Path of the kubeconfig; None = $KUBECONFIG, then ~/.kube/config, then the in-cluster service account."""
    context: str | None = None
    """kubeconfig context; None = its current-context."""
    nodepool: str = "gpu"
    """Name of the Karpenter GPU NodePool (nodes carry `karpenter.sh/nodepool=<name>`). Default `gpu`."""
    namespace: str = "gpuburst"
    """Namespace of the ScaledJobs, TriggerAuthentications and the verify Job. Default `gpuburst`."""
    workloads: list[Workload] = field(default_factory=list)
    """The queues to probe and the worker roles to test. Default none (keda and worker-iam then fail: nothing to
    check)."""
    results_bucket: str | None = None
    """Bucket the workers write results to (worker-iam writes, reads and removes one object there)."""
    results_prefix: str = "results/"
    """Key prefix the workers may write under, ending in '/'. Default `results/`."""
    worker_image: str | None = None
    """Image of the gpu-job probe (the worker image: the NVIDIA runtime injects nvidia-smi into it)."""
    region: str | None = None
    """AWS region; None = from the queue URL, else the SDK's configuration (AWS_REGION)."""
    cluster_name: str | None = None
    """EKS cluster name (the stack's `clusterName`, `--cluster-name`): the versions check reads its version, platform
    version and `upgradePolicy.supportType` with eks:DescribeCluster; None = not read (the support rule then assumes
    the stack's default upgrade policy). Default None."""
    keda_operator_role_arn: str | None = None
    """The KEDA operator's IAM role (`--keda-operator-role-arn`): scaler-iam checks each scaler role trusts it; None =
    the roleArn of the operator ServiceAccount's Pod Identity association (with a cluster name). Default None."""
    grace_s: float = 300.0
    """Seconds a GPU node may exist before `nvidia.com/gpu` must be allocatable (driver + device plugin start).
    Default 300."""
    since: datetime | None = None
    """karpenter-health counts the controller's ERROR lines from this time (`--since`, e.g. when an upgrade began);
    None counts from each controller container's start (the upgrade that restarted it). Default None."""
    timeout_s: float = 900.0
    """Seconds the gpu-job may take end to end (node launch, image pull, nvidia-smi): its activeDeadlineSeconds.
    Default 900."""
    probe_extra_s: float = 60.0
    """Seconds added to a ScaledJob's pollingInterval while waiting for the probe's Job. Default 60."""
    events_window_s: float = 900.0
    """How far back a Warning event or an operator log error counts as recent, seconds. Default 900."""
    poll_interval_s: float = 5.0
    """Seconds between two looks while a check waits. Default 5."""
    connect_timeout_s: float = 5.0
    """TCP connect timeout to the Kubernetes API, seconds (no retries). Default 5."""
    request_timeout_s: float = 30.0
    """Read timeout of one Kubernetes API call, seconds. Default 30."""
    skip: tuple[str, ...] = ()
    """Names of checks not to run (reported as skipped)."""
    strict: bool = False
    """`--strict`: a check that skipped itself fails (a `--skip` stays skipped: the operator asked). Default False."""
    lock_wait_s: float = 0.0
    """Longest wait for another verify's lease on the namespace before exiting 2, seconds. Default 0 (no wait)."""
    lease_duration_s: int = 60
    """leaseDurationSeconds of verify's own lease (renewed every third of it while running). Default 60."""
    only: tuple[str, ...] = ()
    """Names of the checks to run (`--check`); empty = every check that is not opt-in. Default empty."""
    slides_bucket: str | None = None
    """Bucket the burst check uploads its probe slides to (the stack's `slidesBucket`). Default None."""
    slides_prefix: str = "slides/"
    """Key prefix of slides in that bucket, ending in '/' (StorageArgs.slides_prefix). Default `slides/`."""
    stack: str | None = None
    """Stack name (`--stack`): the burst check reads its config from `Pulumi.<stack>.yaml`. Default None."""
    stack_file: str | None = None
    """Path of the stack's config file for the burst check's prediction; None = `Pulumi.<stack>.yaml` in
    `--pulumi-dir`. Default None."""
    pulumi_dir: str = "."
    """Folder of Pulumi.yaml and the Pulumi.<stack>.yaml files. Default `.`."""
    burst_probes: int = 2
    """Probe slides the burst check sends at once (one message each), 1-50. Default 2."""
    burst_workload: str | None = None
    """Workload whose queue the burst goes to; None = the first workload of the config that runs as a ScaledJob
    (else the first workload). Default None."""
    burst_first_result_s: float | None = None
    """Budget override, seconds from sending to the first result; None = `gpuburst:burstBudget`, else the planner's
    cold prediction x BURST_TOLERANCE. Default None."""
    burst_last_result_s: float | None = None
    """Budget override, seconds from sending to the last result (as above). Default None."""
    burst_timeout_s: float | None = None
    """Longest the burst check waits for the results, seconds; None = the budget's last result + probe_extra_s.
    Default None."""


class Clock(Protocol):
    """Wall time and sleeping, injectable so tests of the waiting checks take no time."""

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    """The system clock."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


def parse_time(text: str | None) -> datetime | None:
    """An API timestamp (`2026-11-02T10:00:00Z`, with or without fractions) as an aware datetime, or None."""
    if not text:
        return None
    t = text.strip()
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(t)
    except ValueError:
        return None


def age_s(obj: dict[str, Any], now: datetime) -> float | None:
    """Seconds since the object's metadata.creationTimestamp, or None when it has none."""
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    return None if created is None else (now - created).total_seconds()


def fmt_age(seconds: float | None) -> str:
    """`42s`, `7m12s`, `3h05m`: a node's age the way kubectl shows it."""
    if seconds is None:
        return "unknown age"
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def name_of(obj: dict[str, Any]) -> str:
    """metadata.name ('' when absent)."""
    return (obj.get("metadata") or {}).get("name", "")


def ns_name(obj: dict[str, Any]) -> str:
    """`namespace/name` of a namespaced object (just the name for a cluster-scoped one)."""
    md = obj.get("metadata") or {}
    return f"{md['namespace']}/{md.get('name', '')}" if md.get("namespace") else md.get("name", "")


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    """metadata.labels ({} when absent)."""
    return dict((obj.get("metadata") or {}).get("labels") or {})


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    """The status condition of the given type, or None."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


