"""Fixtures for the component tests: one offline synth of the dev stack, shared by every test that reads its plan."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_synth(out: Path, *extra: str, timeout: int = 180) -> subprocess.CompletedProcess:
    """`python -m components synth --out OUT ...` in a subprocess (fresh Pulumi runtime state), with a timeout."""
    return subprocess.run([sys.executable, "-m", "components", "synth", "--out", str(out), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def dev(tmp_path_factory):
    """The dev stack synthesised once: {"out": folder, "plan": plan.json as a dict, "stdout": the summary}."""
    out = tmp_path_factory.mktemp("synth-dev")
    proc = run_synth(out, "--stack", "dev")
    assert proc.returncode == 0, proc.stderr
    return {"out": out, "plan": json.loads((out / "plan.json").read_text()), "stdout": proc.stdout}
