"""Fixtures of the verify tests (the helpers themselves live in verify_fakes.py, importable by the test modules)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from verify_fakes import FakeClock  # noqa: E402


@pytest.fixture
def clock() -> FakeClock:
    """A clock that moves only when a check sleeps."""
    return FakeClock()
