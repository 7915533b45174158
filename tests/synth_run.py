"""Run the offline synth the way a user does, in a subprocess (a fresh Pulumi runtime each time), with a timeout."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYNTH_TIMEOUT_S = 300
"""Seconds one synth may take (the dev stack takes a few; checkov over the charts adds a few more)."""


def run_synth(out: Path, *extra: str, timeout: int = SYNTH_TIMEOUT_S) -> subprocess.CompletedProcess:
    """`python -m components synth --out OUT ...` in a subprocess, from the project root."""
    return subprocess.run([sys.executable, "-m", "components", "synth", "--out", str(out), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
