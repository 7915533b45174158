"""Tests for the checker's command line (in-process; the subprocess runs are in test_harness.py)."""
from __future__ import annotations

import json

import pytest

from policies import cli


def test_help_and_usage_errors(capsys):
    assert cli.main(["check", "--help"]) == 0
    assert "Exit status: 0 no mandatory violation, 1 mandatory violation(s), 2" in capsys.readouterr().out
    with pytest.raises(SystemExit) as raised:
        cli.main(["check"])
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("policies check: ")
    with pytest.raises(SystemExit):
        cli.main(["check", "plan.json", "--bogus"])


def test_exit_codes_in_process(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"resources": [{"type": "aws:sqs/queue:Queue", "properties": {
        "sqsManagedSseEnabled": True, "tags": {"gpuburst.io/role": "events"}}}]}))
    assert cli.main(["check", str(good)]) == 0
    assert capsys.readouterr().out.startswith("policy check passed")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"resources": [{"type": "aws:sqs/queue:Queue", "properties": {}}]}))
    assert cli.main(["check", str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    # The policy, the resource's name and the message first; the URN last (a line cut at 240 characters still says
    # what is wrong where).
    assert out[0].startswith("MANDATORY sqs-work-queue queue-0: ")
    assert out[0].endswith(" [urn:pulumi:dev::gpuburst::aws:sqs/queue:Queue::queue-0]")
    assert cli.main(["check", str(tmp_path / "nope.json")]) == 2


def test_the_caller_names_the_command_in_usage_and_errors(capsys):
    # `gpuburst check` (components/__main__.py) hands the checker its own name.
    assert cli.main(["check", "--help"], prog="gpuburst check", label="check") == 0
    assert capsys.readouterr().out.startswith("usage: gpuburst check PLAN.json [--config CONFIG.json]")
    with pytest.raises(SystemExit):
        cli.main(["check"], prog="gpuburst check", label="check")
    err = capsys.readouterr().err.strip()
    assert err.startswith("check: ") and "(see gpuburst check --help)" in err


def test_the_default_name_is_the_package_it_was_imported_as():
    assert cli.PROG == "python -m policies check"
