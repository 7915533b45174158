"""CloudWatch Logs facts the components validate against: the retention periods the service accepts."""
from __future__ import annotations

__all__ = ["LOG_RETENTION_DAYS"]

LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922,
                      3288, 3653)
"""The retention periods CloudWatch Logs accepts, in days (CloudWatch Logs API Reference, PutRetentionPolicy)."""
