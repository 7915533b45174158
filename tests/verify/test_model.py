"""model.py: CheckResult, timestamps and ages."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from components.verify.model import CheckResult, age_s, apply_strict, exit_status, fmt_age, parse_time


def test_check_result_refuses_an_unknown_status():
    with pytest.raises(ValueError, match="pending"):
        CheckResult("gpu-allocatable", "pending", "x")


def test_check_result_to_dict_is_the_json_shape():
    assert CheckResult("versions", "pass", "ok", ["a"]).to_dict() == {
        "name": "versions", "status": "pass", "summary": "ok", "evidence": ["a"]}


def test_parse_time_and_age():
    now = datetime(2026, 11, 2, 10, 0, tzinfo=timezone.utc)
    assert parse_time("2026-11-02T09:40:00Z") == datetime(2026, 11, 2, 9, 40, tzinfo=timezone.utc)
    assert parse_time("2026-11-02T09:40:00.123456Z").microsecond == 123456
    assert parse_time(None) is None and parse_time("yesterday") is None
    assert age_s({"metadata": {"creationTimestamp": "2026-11-02T09:40:00Z"}}, now) == 1200
    assert age_s({"metadata": {}}, now) is None


@pytest.mark.parametrize("s,text", [(42, "42s"), (432, "7m12s"), (11100, "3h05m"), (None, "unknown age")])
def test_fmt_age(s, text):
    assert fmt_age(s) == text


def test_error_is_a_status_of_its_own():
    assert CheckResult("keda", "error", "the check could not run: 403").status == "error"


@pytest.mark.parametrize("statuses,rc", [
    ([], 0), (["pass", "skipped"], 0), (["pass", "fail"], 1), (["pass", "error"], 2),
    (["fail", "error", "pass"], 2),  # an error outranks a failure: the verdict is incomplete
])
def test_exit_status(statuses, rc):
    assert exit_status([CheckResult(f"c{i}", s, "x") for i, s in enumerate(statuses)]) == rc


def test_strict_fails_a_skipped_check_and_leaves_the_others():
    skipped = CheckResult("gpu-allocatable", "skipped", "no GPU node in NodePool gpu to judge", ["pool empty"])
    r = apply_strict(skipped)
    assert r.status == "fail" and "--strict" in r.summary and "no GPU node" in r.summary
    assert r.evidence[0] == "pool empty"
    for s in ("pass", "fail", "error"):
        assert apply_strict(CheckResult("x", s, "y")).status == s


def test_a_summary_over_the_limit_is_cut_centrally_and_kept_whole_in_the_evidence():
    from components.verify.model import SUMMARY_FULL_PREFIX, SUMMARY_MAX_CHARS, headline

    long = "3 NodeClaim(s) stuck: " + ", ".join(f"gpu-{i:05d}" for i in range(60))
    r = CheckResult("karpenter-health", "fail", long, ["first fact"])
    assert len(r.summary) == SUMMARY_MAX_CHARS and r.summary.endswith("…") and long.startswith(r.summary[:-1])
    assert r.evidence == [SUMMARY_FULL_PREFIX + long, "first fact"]
    r.summary = r.summary + " (and the Job could not be deleted)"  # amended later: still cut
    assert len(r.summary) == SUMMARY_MAX_CHARS
    assert CheckResult("x", "pass", "two\nlines").summary == "two lines"  # one line, always
    short = CheckResult("x", "pass", "ok", [])
    assert (short.summary, short.evidence) == ("ok", [])
    assert apply_strict(CheckResult("x", "skipped", "y" * 190)).summary.startswith("skipped, which --strict fails: ")
    assert len(apply_strict(CheckResult("x", "skipped", "y" * 190)).summary) == SUMMARY_MAX_CHARS
    assert headline(["a"]) == "a" and headline(["a", "b", "c"]) == "3 problems, first: a"
