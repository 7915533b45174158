"""Tests of the advisor's goals: `--deadline DURATION` and `--budget USD`, and their one-line refusals."""
from __future__ import annotations

import re

import pytest

from components.planning import parse_budget, parse_duration
from components.spec.validation import ConfigError


@pytest.mark.parametrize("text,seconds", [("3h", 10800), ("90m", 5400), ("2h30m", 9000), ("45s", 45), ("5400", 5400),
                                          ("1h5m30s", 3930), ("1.5h", 5400), ("20min", 1200)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["3x", "", "0", "-5m", "h", "8d", "999h"])
def test_bad_deadline_is_a_one_line_error(text):
    with pytest.raises(ConfigError) as e:
        parse_duration(text)
    assert str(e.value).startswith(f"--deadline: {text!r} is not valid") and "\n" not in str(e.value)


def test_parse_budget():
    assert parse_budget("0.50") == parse_budget("$0.5") == 0.5
    for bad in ("0", "-1", "free", "nan"):
        with pytest.raises(ConfigError, match=rf"^--budget: '{re.escape(bad)}' is not valid: US dollars > 0"):
            parse_budget(bad)
