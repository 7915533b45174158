"""Test-only: where the real scanner slides are (../shared/real-slides beside the checkout), and the skip."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
REAL = ROOT.parent / "shared" / "real-slides"
HAVE_REAL = (REAL / "README.md").is_file()
needs_real_slides = pytest.mark.skipif(
    not HAVE_REAL, reason=f"{REAL} is absent: the real scanner slides are shared data, not part of the repository")


def real_entries() -> list[str]:
    """Every slide in the folder (files and DICOM folders; README and checksums aside), or one placeholder id
    when the folder is absent (the tests that use it are skipped then, with the reason above)."""
    if not HAVE_REAL:
        return ["(absent)"]
    return sorted(p.name for p in REAL.iterdir() if p.name not in ("README.md", "SHA256SUMS")
                  and not p.name.startswith("."))
