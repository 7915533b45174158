"""Shared fixtures: the repo root on sys.path, the upstream CRD folder, and one moto_server per test session."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

from moto_server import aws_env, moto_server, reset  # noqa: E402

UPSTREAM_CRDS = ROOT.parent / "shared" / "upstream-crds"

TEST_TODAY = "2026-12-01"
"""The day the EKS support rule judges during tests (and in every synth or pack they start), so a test about
something else does not change verdict as the calendar moves; tests/components/test_catalogue.py judges the pin on
the real date on its own."""
os.environ["GPUBURST_TODAY"] = TEST_TODAY


@pytest.fixture(scope="session")
def upstream_crds() -> Path:
    """The folder of upstream Karpenter/KEDA CRDs beside the checkout; skip with the reason when it is absent."""
    if not UPSTREAM_CRDS.is_dir():
        pytest.skip(f"upstream CRDs not found at {UPSTREAM_CRDS} (the oracle folder ../shared/upstream-crds is absent)")
    return UPSTREAM_CRDS


@pytest.fixture(scope="session")
def moto_endpoint() -> str:
    """One real moto_server for the whole session; each test that uses `aws` gets it reset."""
    with moto_server() as url:
        yield url


@pytest.fixture
def aws(moto_endpoint, monkeypatch) -> str:
    """Point boto3 at the session's moto_server (reset first) and return its endpoint URL."""
    reset(moto_endpoint)
    for k, v in aws_env(moto_endpoint).items():
        monkeypatch.setenv(k, v)
    return moto_endpoint
