"""The house style holds everywhere: ruff's rule set (pyproject.toml) is clean, and no source file is over 500 lines."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_SOURCE_LINES = 500
"""Longest a source module may be (tests and generated files aside): past it, a module mixes concerns."""


def test_ruff_is_clean():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "."], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_no_source_file_is_over_500_lines():
    sources = [p for pkg in ("components", "policies", "worker", "scripts") for p in (ROOT / pkg).rglob("*.py")
               if "__pycache__" not in p.parts]
    assert len(sources) > 50
    long = sorted(f"{p.relative_to(ROOT)} ({n} lines)" for p in sources
                  if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_SOURCE_LINES)
    assert long == [], "split these along the concerns they mix: " + ", ".join(long)
