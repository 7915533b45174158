"""What every check's `run` gets (Context: the settings, the cluster, AWS, the clock) and the one-line form of an
exception: the leaf under the checks, so a check module never imports the table that lists it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .model import SKIPPED, SUMMARY_MAX_CHARS, CheckResult, Clock, RealClock, VerifySettings

GPU_NODES_BLOCKED = "gpu-nodes-blocked"
"""Context.state key of Context.block_gpu_nodes's list."""


@dataclass
class Context:
    """What a check's `run` gets: the settings, the cluster, AWS, the clock, and notes the checks share."""

    settings: VerifySettings
    """The run's settings."""
    kube: Any = None
    """A kube.Kube (or a stand-in with the same methods); None when no check needs the cluster."""
    aws_factory: Callable[[str | None], Any] | None = None
    """region -> aws.Aws of the caller's identity; default builds one per region."""
    clock: Clock = field(default_factory=RealClock)
    """Wall time and sleep."""
    state: dict[str, Any] = field(default_factory=dict)
    """Notes from one check to a later one (e.g. which node ran the gpu-job)."""
    _aws: dict[str | None, Any] = field(default_factory=dict)

    def block_gpu_nodes(self, check: str, reason: str) -> None:
        """Record that no GPU node of the pool can work, and why (a failed ami-canary, a refused Karpenter release):
        the checks that would wait for one (gpu-job, burst) then skip with this reason instead of waiting out their
        timeout. Checks run in table order, so only a check listed before them can block them."""
        self.state.setdefault(GPU_NODES_BLOCKED, []).append((check, reason))

    def gpu_nodes_blocked(self) -> list[tuple[str, str]]:
        """(check, reason) for each earlier check that showed no GPU node of the pool can work; empty when none."""
        return list(self.state.get(GPU_NODES_BLOCKED) or [])

    def aws(self, region: str | None = None) -> Any:
        """The caller's Aws for `region` (the settings' region, else the SDK's, when None)."""
        region = region or self.settings.region
        if region not in self._aws:
            if self.aws_factory is not None:
                self._aws[region] = self.aws_factory(region)
            else:
                from .aws import Aws

                self._aws[region] = Aws(region)
        return self._aws[region]


def blocked_result(name: str, blocked: list[tuple[str, str]], why_not: str) -> CheckResult:
    """`skipped` with the cause an earlier check established (Context.block_gpu_nodes): that check and its reason
    first, then why waiting would be pointless; nothing was created."""
    check, reason = blocked[0]
    head = f"not run: {check} failed: "
    room = SUMMARY_MAX_CHARS - len(head)
    short = reason if len(reason) <= room else reason[:room - 1].rstrip() + "…"
    evidence = [f"{c} failed: {r}" for c, r in blocked] + [f"{why_not}: nothing created, nothing waited for"]
    return CheckResult(name, SKIPPED, head + short, evidence)


def one_line(exc: BaseException) -> str:
    """An exception as one line: `Type: first line`."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
