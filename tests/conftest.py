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
from synth_run import run_synth  # noqa: E402

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
def iam_oracle():
    """The iam-simulate test oracle's `simulate(batch)` (tests/iam_oracle.py); skip with the reason ONLY when node
    or its installed node_modules are absent (`make test` installs them)."""
    import iam_oracle

    reason = iam_oracle.unavailable()
    if reason:
        pytest.skip(reason)
    return iam_oracle.simulate


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


@pytest.fixture(scope="session")
def dev(tmp_path_factory):
    """The dev stack synthesised once for the whole run, shared by the component, policy and plan tests:
    {"out": folder, "plan": plan.json as a dict, "stdout": the summary}. Never skipped: the stack is what the pack
    exists to guard. Tests that change the plan deep-copy it first."""
    import json

    out = tmp_path_factory.mktemp("synth-dev")
    proc = run_synth(out, "--stack", "dev")
    assert proc.returncode == 0, f"the synth failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return {"out": out, "plan": json.loads((out / "plan.json").read_text(encoding="utf-8")), "stdout": proc.stdout}


@pytest.fixture(scope="session")
def prod(tmp_path_factory):
    """The prod stack synthesised once for the whole run (as `dev`): {"out", "plan", "stdout"}. Prod differs where
    it counts for the deploy path: a private API endpoint, the in-VPC deploy runner, two deployers."""
    import json

    out = tmp_path_factory.mktemp("synth-prod")
    proc = run_synth(out, "--stack", "prod")
    assert proc.returncode == 0, f"the synth failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return {"out": out, "plan": json.loads((out / "plan.json").read_text(encoding="utf-8")), "stdout": proc.stdout}


SLOW_FIXTURES = {"dev", "dev_plan", "prod"}
"""Fixtures that run the whole synth in a subprocess (once per session, but a test that needs one waits for it)."""
SERVER_FIXTURES = {"moto_endpoint", "aws", "pack", "analyze"}
"""Fixtures that start a server: a moto_server on loopback, or the policy pack's gRPC analyzer."""


def pytest_collection_modifyitems(config, items):
    """Mark tests by what they start, so `pytest -m "not slow and not server"` is a fast inner loop: `server` for a
    moto_server or the pack's gRPC server, `slow` for the dev synth (modules that run synths, the worker's real
    pipelines or subprocesses mark themselves with `pytestmark = pytest.mark.slow`)."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & SERVER_FIXTURES:
            item.add_marker(pytest.mark.server)
        if names & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)

