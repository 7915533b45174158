"""The table of checks (name, what it proves, how it runs) and the runner that runs them in order.

Order matters: `ami-canary` runs first (it needs no node and fails in seconds on the AMI swap); `gpu-job` runs
before `gpu-allocatable` and `hardware-ami`, so a pool scaled to zero gets a node (the probe Job asks for a GPU) and
the node checks have something to judge.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import (
    ami_canary,
    burst,
    gpu,
    gpujob,
    hardware,
    iam,
    identity_probe,
    karpenter_health,
    keda,
    scaler_iam,
    versions,
)
from .context import Context, one_line
from .model import ERROR, SKIPPED, CheckResult


@dataclass(frozen=True)
class Check:
    """One row of the table."""

    name: str
    """The name `--skip` and the output use."""
    proves: str
    """What a pass proves, for `--help` and docs/verify.md."""
    run: Callable[[Context], CheckResult]
    """Runs the check against the live cluster / AWS."""
    needs_kube: bool = True
    """False when the check talks to AWS only (it then runs without a reachable cluster)."""
    opt_in: bool = False
    """True when the check runs only when named with `--check NAME` (it costs money or sends real work)."""


CHECKS: tuple[Check, ...] = (
    Check(ami_canary.NAME, "the image the live EC2NodeClass's status.amis resolves for every GPU instance type the "
                           "NodePool admits is the NVIDIA variant of the expected AMI family (EC2's image name), with "
                           "no node needed: the Karpenter 1.0.0-1.0.2 AMI swap fails here in seconds", ami_canary.run),
    Check(versions.NAME, "the Karpenter, karpenter-crd, KEDA, NVIDIA device plugin and Kubernetes versions the "
                         "cluster actually runs pass the catalogue's rules (broken releases, minimums, coupled "
                         "charts, supported Kubernetes ranges) and equal its pins; the Kubernetes minor passes the "
                         "EKS support rule with the cluster's own upgrade policy (eks:DescribeCluster, with "
                         "--cluster-name or the stack's clusterName), warning within 90 days of its end of standard "
                         "support, and the catalogue's calendar agrees with eks:DescribeClusterVersions",
          versions.run),
    Check(karpenter_health.NAME, "the Karpenter controller logged no ERROR line since it started (errors grouped by "
                                 "controller and error, naming the EC2NodeClass/NodePool they are about), and no "
                                 "NodeClaim is stuck before Initialized", karpenter_health.run),
    Check(iam.NAME, "the worker's own IAM role's policy (verify assumes the role) lets it write, read back (and "
                    "remove) an object under the results prefix and read its queue's attributes", iam.run,
          needs_kube=False),
    Check(identity_probe.NAME, "a probe Job running as each live ScaledJob's / worker Deployment's own "
                               "ServiceAccount, in its namespace, with its image, gets Pod Identity credentials that "
                               "may write and read back an object under the results prefix and read its queue's "
                               "attributes (the wiring, not only the policy); the Job is always deleted",
          identity_probe.run),
    Check(scaler_iam.NAME, "every TriggerAuthentication's podIdentity.roleArn (the KEDA scaler role) may "
                           "sqs:GetQueueAttributes on its ScaledJobs' queues (its IAM policies, evaluated) and "
                           "trusts the KEDA operator's role", scaler_iam.run),
    Check(keda.NAME, "the KEDA operator's version is accepted; every TriggerAuthentication validates against the "
                     "CRD schema served by the cluster and uses no refused provider; every ScaledJob is Ready with no "
                     "recent Warning events or operator errors, and no trigger identityOwner contradicts its "
                     "TriggerAuthentication; and a probe message on its queue makes it create a Job within "
                     "pollingInterval + 60 s", keda.run),
    Check(gpujob.NAME, "a Job requesting nvidia.com/gpu: 1 is scheduled on the GPU NodePool and runs nvidia-smi "
                       "within the deadline, naming the catalogue's GPU model for the node's instance type (gives "
                       "up early when its nominated node advertises 0 GPUs past the grace period); the Job is "
                       "always deleted", gpujob.run),
    Check(gpu.NAME, "every node of the GPU NodePool advertises in status.allocatable the catalogue's nvidia.com/gpu "
                    "count for its instance type and runs the device-plugin pod (a node older than the grace "
                    "period without it fails; an empty pool is skipped)", gpu.run),
    Check(hardware.NAME, "every GPU node is an instance type the NodePool's requirements admit and was booted from "
                         "the NVIDIA variant of the expected AMI family (EC2's image name, not the node's word); "
                         "with instanceStorePolicy RAID0, its ephemeral-storage capacity is the local NVMe, not the "
                         "root volume", hardware.run),
    Check(burst.NAME, "OPT-IN (--check burst; it sends real probe slides and may start GPU nodes): N small probe "
                      "slides sent to a workload's queue all come back as results within the budget "
                      "(gpuburst:burstBudget, else the planner's cold prediction x 1.5); prints the measured "
                      "timeline (Job created, NodeClaim created/Registered/Initialized, image pulled, model load, "
                      "per item, first and last result) beside the planner's prediction; probe objects and "
                      "messages are always removed", burst.run, opt_in=True),
)
"""Every check, in the order they run."""

CHECK_NAMES = tuple(c.name for c in CHECKS)
OPT_IN_NAMES = tuple(c.name for c in CHECKS if c.opt_in)
"""Checks that run only when named with --check."""


def selected(only: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> list[Check]:
    """The checks a run runs, in table order: those named by `only` (--check), else every check that is not opt-in;
    the ones in `skip` are included (run_checks reports them as skipped)."""
    return [c for c in CHECKS if (c.name in only if only else not c.opt_in)]


def run_checks(ctx: Context, skip: tuple[str, ...] = (), on_result: Callable[[CheckResult], None] | None = None,
               only: tuple[str, ...] = ()) -> list[CheckResult]:
    """Run the selected checks (see `selected`) not skipped, in order; an exception inside one check makes that
    check (only) `error`: it could not run."""
    results = []
    for check in selected(only, skip):
        if check.name in skip:
            result = CheckResult(check.name, SKIPPED, "skipped by --skip", [f"--skip {check.name}"])
        else:
            try:
                result = check.run(ctx)
            except KeyboardInterrupt:
                raise
            except Exception as e:  # noqa: BLE001 - one broken check must not hide the others' verdicts
                # A refused or unanswered call (CouldNotRun: KubeError, AwsError) or a bug: no verdict, so `error`.
                result = CheckResult(check.name, ERROR, f"the check could not run: {one_line(e)}", [one_line(e)])
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
