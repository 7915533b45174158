"""The KEDA operator's identity as every stack states it: its ServiceAccount, the IAM path of the scaler roles it may
assume, and that path's rule; a `Keda` (this stack installs KEDA) and an `ExistingKeda` (another stack did) share
them."""
from __future__ import annotations

from .validation import ConfigError

OPERATOR_SERVICE_ACCOUNT = "keda-operator"
"""Service account of the KEDA operator; the chart creates it under this name and the Pod Identity association
names it, so the two must agree."""

SCALER_ROLE_PATH = "/gpuburst/keda-scaler/"
"""IAM path of every scaler role: the operator may assume roles under this path only."""


def check_scaler_role_path(field_name: str, path: str) -> None:
    """Refuse (one-line ConfigError naming `field_name`) a scaler role path that is not an IAM path without `*`."""
    if not (isinstance(path, str) and path.startswith("/") and path.endswith("/") and "*" not in path):
        raise ConfigError(field_name, path, "an IAM path starting and ending with '/', without '*'")
