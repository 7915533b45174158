"""`verify`: post-upgrade checks that judge live cluster and AWS resources, never status fields alone.

Run it as `python -m components verify --stack dev` (see docs/verify.md). The checks are pure functions over API
objects (`judge_*` in each module) fed by a thin Kubernetes layer (`kube.py`) and a thin boto3 layer (`aws.py`).
"""
from __future__ import annotations

from .model import ERROR, FAIL, PASS, SKIPPED, CheckResult, VerifySettings, Workload

__all__ = ["CheckResult", "VerifySettings", "Workload", "PASS", "FAIL", "ERROR", "SKIPPED"]
