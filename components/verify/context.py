"""What every check's `run` gets (Context: the settings, the cluster, AWS, the clock) and the one-line form of an
exception: the leaf under the checks, so a check module never imports the table that lists it."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .model import Clock, RealClock, VerifySettings


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


def one_line(exc: BaseException) -> str:
    """An exception as one line: `Type: first line`."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
