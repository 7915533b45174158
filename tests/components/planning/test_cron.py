"""Tests of the cron matcher: fields, lists, ranges, steps, the day-of-month/day-of-week rule, windows, bad input."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from components.planning.cron import CronError, active_seconds, matches, parse, window_active

UTC = timezone.utc


def at(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_fields_lists_ranges_and_steps():
    minute, hour, dom, month, dow = parse("*/15 9-17/4 1,15 * 1-5")
    assert minute == {0, 15, 30, 45}
    assert hour == {9, 13, 17}
    assert dom == {1, 15}
    assert month == set(range(1, 13))
    assert dow == {1, 2, 3, 4, 5}
    assert parse("5/20 * * * *")[0] == {5, 25, 45}


def test_sunday_is_0_and_7():
    assert parse("* * * * 7")[4] == {0}
    assert matches("0 0 * * 7", at(2026, 1, 4, 0, 0))  # a Sunday
    assert not matches("0 0 * * 7", at(2026, 1, 5, 0, 0))


@pytest.mark.parametrize("expr,when,expected", [
    ("30 9 * * 1-5", at(2026, 1, 5, 9, 30), True),    # Monday 09:30
    ("30 9 * * 1-5", at(2026, 1, 10, 9, 30), False),  # Saturday
    ("30 9 * * 1-5", at(2026, 1, 5, 9, 31), False),
    ("0 0 1 * 1", at(2026, 1, 5, 0, 0), True),        # both restricted: the Monday matches (either may)
    ("0 0 1 * 1", at(2026, 1, 1, 0, 0), True),        # ... and so does the 1st (a Thursday)
    ("0 0 1 * 1", at(2026, 1, 2, 0, 0), False),
    ("0 0 * 2 *", at(2026, 1, 2, 0, 0), False),
])
def test_matches(expr, when, expected):
    assert matches(expr, when) is expected


def test_window_active_between_start_and_end():
    start, end = "0 8 * * 1-5", "0 18 * * 1-5"
    assert window_active(start, end, at(2026, 1, 5, 8, 0))
    assert window_active(start, end, at(2026, 1, 5, 17, 59))
    assert not window_active(start, end, at(2026, 1, 5, 18, 0))
    assert not window_active(start, end, at(2026, 1, 5, 7, 59))
    assert not window_active(start, end, at(2026, 1, 10, 12, 0))  # Saturday


def test_active_seconds_per_day_and_week():
    start, end = "0 8 * * 1-5", "0 18 * * 1-5"
    assert active_seconds(start, end, at(2026, 1, 5)) == 10 * 3600
    assert active_seconds(start, end, at(2026, 1, 10)) == 0
    assert active_seconds(start, end, at(2026, 1, 5), timedelta(days=7)) == 5 * 10 * 3600
    # A window over midnight counts from the previous day's start.
    assert active_seconds("0 22 * * *", "0 6 * * *", at(2026, 1, 6)) == 8 * 3600


@pytest.mark.parametrize("expr", ["* * * *", "60 * * * *", "* 24 * * *", "*/0 * * * *", "a * * * *", "5-1 * * * *",
                                  "* * 0 * *"])
def test_bad_expressions_are_one_line_errors(expr):
    with pytest.raises(CronError) as e:
        parse(expr)
    assert "\n" not in str(e.value) and repr(expr) in str(e.value)
