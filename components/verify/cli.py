"""Command line of `python -m components verify`: settings from the stack's outputs and flags, one table or JSON out.

Exit status (model.EXIT_*): 0 every check passed or skipped, 1 a check failed, 2 a check could not run (`error`) or
verify could not run at all (no cluster, no pulumi CLI, bad flags, the lock held: one line on stderr says why), 130
interrupted. An error outranks a failure: the verdict is incomplete.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Callable
from typing import Any, TextIO

from .burst_probes import MAX_PROBES
from .checks import CHECK_NAMES, CHECKS, OPT_IN_NAMES, run_checks, selected
from .context import Context
from .lease import LockHeld, RunLock, holder_identity
from .model import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    SKIPPED,
    CheckResult,
    Clock,
    RealClock,
    VerifySettings,
    Workload,
    apply_strict,
    exit_status,
    parse_time,
)
from .report import document, render_table, write_json

__all__ = ["main", "build_parser", "settings_from", "render_table", "stack_outputs", "UsageError"]

PROG = f"python -m {(__package__ or 'components.verify').split('.')[0]} verify"
STACK_OUTPUT_TIMEOUT_S = 60
"""How long `pulumi stack output` may take before verify gives up."""

STACK_OUTPUTS = {
    "kubeconfig": "kubeconfig",
    "queue_urls": "queueUrls",
    "worker_role_arns": "workerRoleArns",
    "worker_image": "imageRef",
    "results_bucket": "resultsBucket",
    "slides_bucket": "slidesBucket",
    "results_prefix": "resultsPrefix",
    "nodepool": "gpuNodePool",
    "namespace": "namespace",
    "cluster_name": "clusterName",
}
"""Which stack output feeds which setting (outputs a stack does not export are simply not used)."""


class UsageError(Exception):
    """verify cannot run with what it was given: one line."""


def _since(text: str):
    """`--since`: an ISO 8601 time with a zone (a naive time would be read in the runner's zone, silently)."""
    when = parse_time(text)
    if when is None or when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"--since {text!r}: an ISO 8601 time with a zone, e.g. 2026-12-01T10:00:00Z")
    return when


def _epilog() -> str:
    lines = ["checks (run in this order; --skip NAME leaves one out, --check NAME runs only the named ones;",
             "an opt-in check runs only when named with --check):"]
    for c in CHECKS:
        lines.append(f"  {c.name}" + ("  (opt-in: --check " + c.name + ")" if c.opt_in else ""))
        lines += textwrap.wrap(c.proves, 100, initial_indent="      ", subsequent_indent="      ")
    lines += [
        "",
        "exit status: 0 every check passed or skipped; 1 a check failed; 2 a check could not run (status error) or",
        "verify could not run (one line on stderr says why; an error outranks a failure); 130 interrupted.",
        f"stack outputs read with --stack: {', '.join(sorted(set(STACK_OUTPUTS.values())))}; flags win over them.",
        "the runbook: docs/verify.md",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (its --help lists every check and what it proves)."""
    p = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_epilog(),
        description=textwrap.fill(
            "Post-upgrade checks against the live cluster and AWS. Each check judges the resource itself "
            "(allocatable GPUs, the AMI EC2 booted, a Job that must run, a message that must make KEDA create a "
            "Job), not a status field, and prints the evidence it saw.", 100))
    src = p.add_argument_group("where to look")
    src.add_argument("--stack", help="read the settings from `pulumi stack output --json --show-secrets --stack "
                                     "STACK` (needs the pulumi CLI)")
    src.add_argument("--pulumi-dir", default=".", help="folder of Pulumi.yaml for --stack (default: .)")
    src.add_argument("--kubeconfig", help="kubeconfig path (default: the stack's kubeconfig output, else "
                                          "$KUBECONFIG / ~/.kube/config / the in-cluster service account)")
    src.add_argument("--context", help="kubeconfig context (default: its current-context)")
    src.add_argument("--queue-url", action="append", default=[], metavar="URL",
                     help="a work queue for worker-iam, and the queues ScaledJobs must watch (repeatable; default: "
                          "the stack's queueUrls); the keda probe goes to each ScaledJob's own trigger queue")
    src.add_argument("--worker-role-arn", action="append", default=[], metavar="ARN",
                     help="the worker's IAM role, one for all queues or one per --queue-url in order "
                          "(default: the stack's workerRoleArns; inside a pod: the ambient credentials)")
    src.add_argument("--results-bucket", help="results bucket (default: the stack's resultsBucket)")
    src.add_argument("--results-prefix", help="key prefix the worker writes under (default: the stack's "
                                              "resultsPrefix, else results/)")
    src.add_argument("--image", dest="worker_image", help="image for the gpu-job (default: the stack's imageRef)")
    src.add_argument("--nodepool", help="GPU NodePool name (default: the stack's gpuNodePool, else gpu)")
    src.add_argument("--namespace", help="namespace of the ScaledJobs and the verify Job (default: the stack's "
                                         "namespace, else gpuburst)")
    src.add_argument("--cluster-name", help="EKS cluster name: the versions check reads its version and upgrade "
                                            "policy with eks:DescribeCluster (default: the stack's clusterName)")
    src.add_argument("--keda-operator-role-arn", help="the KEDA operator's IAM role: scaler-iam checks every scaler "
                                                      "role trusts it (default: its Pod Identity association's "
                                                      "roleArn, read with --cluster-name)")
    src.add_argument("--region", help="AWS region (default: from the queue URL, else AWS_REGION)")
    src.add_argument("--slides-bucket", help="bucket the burst check uploads its probe slides to (default: the "
                                             "stack's slidesBucket)")
    src.add_argument("--slides-prefix", default="slides/", help="key prefix of slides there (default: slides/)")
    src.add_argument("--stack-file", help="the stack's Pulumi.<stack>.yaml for the burst check's prediction and "
                                          "budget (default: Pulumi.<--stack>.yaml in --pulumi-dir)")
    how = p.add_argument_group("how")
    how.add_argument("--check", action="append", default=[], metavar="CHECK",
                     help=f"run only CHECK (repeatable or comma-separated): {', '.join(CHECK_NAMES)}; the opt-in "
                          f"check(s) {', '.join(OPT_IN_NAMES)} run only when named here")
    how.add_argument("--skip", action="append", default=[], metavar="CHECK",
                     help=f"do not run CHECK (repeatable or comma-separated): {', '.join(CHECK_NAMES)}")
    how.add_argument("--json", nargs="?", const="-", metavar="PATH",
                     help="write the versioned JSON document (schema gpuburst.verify/v1: run + results) to PATH, "
                          "atomically and also when interrupted; without PATH (or -) print it instead of the table")
    how.add_argument("--strict", action="store_true",
                     help="a check that skipped itself (e.g. an empty GPU pool) fails; --skip CHECK stays skipped")
    how.add_argument("--lock-wait-s", type=float, default=0.0, metavar="S",
                     help="wait up to this long for another verify's lease on the namespace, then exit 2 naming "
                          "its holder (default: 0)")
    how.add_argument("--no-lock", action="store_true",
                     help="do not take the gpuburst-verify Lease (for an identity without RBAC on leases)")
    how.add_argument("--grace-s", type=float, default=300.0,
                     help="seconds a GPU node may take to advertise nvidia.com/gpu (default: 300)")
    how.add_argument("--since", type=_since, default=None,
                     help="count Karpenter's controller ERROR lines from this time (ISO 8601 with a zone, e.g. "
                          "2026-12-01T10:00:00Z; default: each controller container's start)")
    how.add_argument("--timeout-s", type=float, default=900.0,
                     help="deadline of the gpu-job, node launch and image pull included (default: 900)")
    how.add_argument("--probe-margin-s", type=float, default=60.0,
                     help="seconds added to a ScaledJob's pollingInterval while waiting for the probe's Job "
                          "(default: 60)")
    how.add_argument("--poll-interval-s", type=float, default=5.0, help="seconds between looks (default: 5)")
    how.add_argument("--connect-timeout-s", type=float, default=5.0,
                     help="connect timeout to the Kubernetes API, no retries (default: 5)")
    b = p.add_argument_group("burst (opt-in: --check burst sends real probe slides through the queue and may start "
                             "GPU nodes; it costs GPU time)")
    b.add_argument("--burst-probes", type=int, default=2, metavar="N",
                   help=f"probe slides sent at once, 1-{MAX_PROBES} (default: 2)")
    b.add_argument("--burst-workload", metavar="NAME",
                   help="workload whose queue gets the burst (default: the first ScaledJob workload of the config)")
    b.add_argument("--burst-first-result-s", type=float, metavar="S",
                   help="budget: seconds to the first result (default: gpuburst:burstBudget.firstResultS, else the "
                        "planner's cold prediction x 1.5)")
    b.add_argument("--burst-last-result-s", type=float, metavar="S",
                   help="budget: seconds to the last result (default: gpuburst:burstBudget.lastResultS, else the "
                        "planner's cold prediction x 1.5)")
    b.add_argument("--burst-timeout-s", type=float, metavar="S",
                   help="longest wait for the results (default: the last-result budget + --probe-margin-s)")
    return p


def stack_outputs(stack: str, cwd: str = ".", timeout_s: float = STACK_OUTPUT_TIMEOUT_S,
                  runner: Callable[..., Any] = subprocess.run) -> dict[str, Any]:
    """The stack's outputs as a dict (secrets shown); UsageError in one line when the CLI is missing or fails."""
    exe = shutil.which("pulumi")
    if exe is None:
        raise UsageError(f"the pulumi CLI is not installed (needed to read the outputs of --stack {stack}); "
                         "install it or pass --kubeconfig, --queue-url, --worker-role-arn, --results-bucket, "
                         "--image instead")
    cmd = [exe, "stack", "output", "--json", "--show-secrets", "--stack", stack]
    try:
        done = runner(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise UsageError(f"`pulumi stack output --stack {stack}` did not answer within {int(timeout_s)} s "
                         "(backend login? network?)") from None
    if done.returncode != 0:
        last = (done.stderr or done.stdout or "").strip().splitlines()
        raise UsageError(f"`pulumi stack output --stack {stack}` failed (exit {done.returncode}): "
                         f"{last[-1] if last else 'no message'}")
    try:
        data = json.loads(done.stdout or "{}")
    except ValueError as e:
        raise UsageError(f"`pulumi stack output --stack {stack}` printed no JSON: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(f"`pulumi stack output --stack {stack}` printed {type(data).__name__}, not an object")
    return data


def _as_mapping(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, str):
        return {"default": value}
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items() if v}
    raise UsageError(f"stack output {what} is {type(value).__name__}, expected a string or a map")


def _check_names(flag: str, values: list[str]) -> list[str]:
    """The check names of a repeatable, comma-separated flag; UsageError naming the flag for an unknown one."""
    names = [s.strip() for item in values for s in item.split(",") if s.strip()]
    unknown = [s for s in names if s not in CHECK_NAMES]
    if unknown:
        raise UsageError(f"{flag} {unknown[0]!r} is not a check (checks: {', '.join(CHECK_NAMES)})")
    return names


def settings_from(args: argparse.Namespace, outputs: dict[str, Any], tmpdir: str) -> VerifySettings:
    """Merge stack outputs and flags (flags win) into VerifySettings; write a stack kubeconfig into tmpdir."""
    skip = _check_names("--skip", args.skip)
    only = _check_names("--check", args.check)
    if not 1 <= args.burst_probes <= MAX_PROBES:
        raise UsageError(f"--burst-probes {args.burst_probes} is not valid: an integer from 1 to {MAX_PROBES}")
    for flag, value in (("--burst-first-result-s", args.burst_first_result_s),
                        ("--burst-last-result-s", args.burst_last_result_s),
                        ("--burst-timeout-s", args.burst_timeout_s)):
        if value is not None and not value > 0:
            raise UsageError(f"{flag} {value:g} is not valid: seconds > 0")

    kubeconfig = args.kubeconfig
    if kubeconfig is None and outputs.get(STACK_OUTPUTS["kubeconfig"]):
        raw = outputs[STACK_OUTPUTS["kubeconfig"]]
        path = os.path.join(tmpdir, "kubeconfig")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(raw if isinstance(raw, str) else json.dumps(raw))
        kubeconfig = path

    if args.queue_url:
        roles = args.worker_role_arn
        if roles and len(roles) not in (1, len(args.queue_url)):
            raise UsageError(f"--worker-role-arn given {len(roles)} times for {len(args.queue_url)} --queue-url: "
                             "give one for all queues or one per queue")
        workloads = [Workload(f"queue-{i + 1}", url, (roles[i] if len(roles) > 1 else roles[0]) if roles else None)
                     for i, url in enumerate(args.queue_url)]
    else:
        queues = _as_mapping(outputs.get(STACK_OUTPUTS["queue_urls"]), STACK_OUTPUTS["queue_urls"])
        roles_map = _as_mapping(outputs.get(STACK_OUTPUTS["worker_role_arns"]), STACK_OUTPUTS["worker_role_arns"])
        if args.worker_role_arn and len(args.worker_role_arn) != 1:
            raise UsageError("--worker-role-arn may be given once when the queues come from the stack")
        workloads = [Workload(name, url, args.worker_role_arn[0] if args.worker_role_arn else
                              roles_map.get(name) or roles_map.get("default")) for name, url in sorted(queues.items())]

    def pick(flag: Any, key: str, default: Any = None) -> Any:
        if flag is not None:
            return flag
        value = outputs.get(STACK_OUTPUTS[key])
        return value if value not in (None, "") else default

    return VerifySettings(
        kubeconfig=kubeconfig, context=args.context,
        nodepool=pick(args.nodepool, "nodepool", "gpu"), namespace=pick(args.namespace, "namespace", "gpuburst"),
        workloads=workloads, results_bucket=pick(args.results_bucket, "results_bucket"),
        results_prefix=pick(args.results_prefix, "results_prefix", "results/"),
        worker_image=pick(args.worker_image, "worker_image"), region=args.region,
        cluster_name=pick(args.cluster_name, "cluster_name"), keda_operator_role_arn=args.keda_operator_role_arn,
        grace_s=args.grace_s, timeout_s=args.timeout_s, since=args.since, probe_extra_s=args.probe_margin_s,
        poll_interval_s=args.poll_interval_s, connect_timeout_s=args.connect_timeout_s, skip=tuple(skip),
        strict=args.strict, lock_wait_s=args.lock_wait_s,
        only=tuple(dict.fromkeys(only)), slides_bucket=pick(args.slides_bucket, "slides_bucket"),
        slides_prefix=args.slides_prefix, stack=args.stack, stack_file=args.stack_file, pulumi_dir=args.pulumi_dir,
        burst_probes=args.burst_probes, burst_workload=args.burst_workload,
        burst_first_result_s=args.burst_first_result_s, burst_last_result_s=args.burst_last_result_s,
        burst_timeout_s=args.burst_timeout_s)


def _sigterm_as_interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def main(argv: list[str] | None = None, *, clock: Clock | None = None, aws_factory: Callable[..., Any] | None = None,
         kube: Any = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run verify; returns the exit status. `clock`, `aws_factory` and `kube` are for tests."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    clock = clock or RealClock()
    started = clock.now()
    results: list[CheckResult] = []
    run: dict[str, Any] = {"interrupted": False, "error": None, "cluster": None, "lock": []}
    settings: VerifySettings | None = None
    previous = None
    try:
        # A CI runner cancels with SIGTERM: turn it into KeyboardInterrupt so the checks' cleanups (the verify Job,
        # the probe message, the lease) still run and the JSON document is still written.
        previous = signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    except ValueError:  # not the main thread
        pass
    try:
        with tempfile.TemporaryDirectory(prefix="gpuburst-verify-") as tmpdir:
            rc = _run(args, results, run, clock, aws_factory, kube, tmpdir)
            settings = run.get("settings")
    except KeyboardInterrupt:
        run["interrupted"] = True
        settings = run.get("settings")
        print("verify: interrupted (the running check cleaned up what it created)", file=stderr)
        rc = EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if run["error"]:
        print(f"verify: {run['error']}", file=stderr)
    if rc is None:
        rc = exit_status(results)
    if args.json:
        doc = document(results, started=started, finished=clock.now(), argv=argv, stack=args.stack,
                       cluster=run["cluster"], interrupted=run["interrupted"], exit_status=rc,
                       strict=args.strict, lock=run["lock"], error=run["error"])
        write_json(args.json, doc, stdout)
    if args.json != "-" and (results or settings is not None) and not run["error"]:
        print(render_table(results, run["interrupted"]), file=stdout)
    return rc


def _run(args: argparse.Namespace, results: list[CheckResult], run: dict[str, Any], clock: Clock,
         aws_factory: Callable | None, kube: Any, tmpdir: str) -> int | None:
    """Settings, the cluster, the lock, the checks; appends each result to `results` as it comes (so an interrupt
    keeps what finished). Returns an exit status when verify could not run, else None (the results decide)."""
    try:
        outputs = stack_outputs(args.stack, args.pulumi_dir) if args.stack else {}
        settings = settings_from(args, outputs, tmpdir)
    except UsageError as e:
        run["error"] = str(e)
        return EXIT_ERROR
    run["settings"] = settings
    run["cluster"] = settings.cluster_name
    ctx = Context(settings=settings, aws_factory=aws_factory, clock=clock)
    lock: RunLock | None = None
    if any(c.needs_kube and c.name not in settings.skip for c in selected(settings.only, settings.skip)):
        if kube is None:
            from .kube import KubeUnreachable, connect

            try:
                kube = connect(settings.kubeconfig, settings.context, connect_timeout_s=settings.connect_timeout_s,
                               request_timeout_s=settings.request_timeout_s)
            except KubeUnreachable as e:
                run["error"] = str(e)
                return EXIT_ERROR
        ctx.kube = kube
        run["cluster"] = settings.cluster_name or getattr(kube, "host", None)
        if not args.no_lock:
            lock = RunLock(kube, settings.namespace, holder_identity(uuid.uuid4().hex[:12]), clock=clock,
                           duration_s=settings.lease_duration_s, wait_s=settings.lock_wait_s,
                           poll_s=settings.poll_interval_s)
    try:
        if lock is not None:
            try:
                lock.acquire()
            except LockHeld as e:
                run["error"] = str(e)
                return EXIT_ERROR
            except Exception as e:  # noqa: BLE001 - RBAC on leases missing, API gone: verify cannot run safely
                run["error"] = (f"cannot take the lease {settings.namespace}/gpuburst-verify: {e} (verify needs get, "
                                "create, update and delete on leases.coordination.k8s.io there; or pass --no-lock)")
                return EXIT_ERROR
            lock.start_renewing()

        def collect(result: CheckResult) -> None:
            if settings.strict and result.status == SKIPPED and result.name not in settings.skip:
                result = apply_strict(result)
            results.append(result)

        run_checks(ctx, settings.skip, on_result=collect, only=settings.only)
    finally:
        if lock is not None:
            lock.release()
            run["lock"] = lock.notes
    return None
